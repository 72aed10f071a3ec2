"""A function over items in forked worker processes, one per core.

The per-partition work is pandas, which holds the GIL, so it runs in processes. They
are forked, as PySpark starts its Python workers: the function and everything it
reaches (the items, the ops, the writes, the families) travel by the fork, not
pickled, and spawning would import the caller's __main__ again. Arrow's thread pools
survive a fork. Only the items' results are pickled back. Without fork (or one core,
or one item, or little work) the items run here, in order."""
from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from . import memory
from .history import cores

T = TypeVar("T")
R = TypeVar("R")

_FORK = "fork" in multiprocessing.get_all_start_methods()
# Below this much work (rows), the items run here: starting the workers costs more.
MIN_WORK = 400_000
# The function of the map in flight, which the forked workers inherit.
_CALL: Callable | None = None
_PARENT = 0  # the process that forks them
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _start_worker() -> None:
    memory.for_checking()  # its items allocate and free arrays of millions of rows
    _orphan_proof()


def _orphan_proof() -> None:
    # A worker dies with the process that forked it: killed (kill -9, a crash), that
    # process would leave its workers waiting for items forever.
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != _PARENT:  # it died before the line above
        os._exit(1)


def _call(i: int):
    assert _CALL is not None
    return _CALL(i)


def each(func: Callable[[T], R], items: Iterable[T], work: int) -> list[R]:
    """[func(item) for item in items], in order, in up to one process per core when
    the items hold `work` rows of at least MIN_WORK. Call it while no other thread of
    this process is working: a fork copies whatever locks such a thread holds."""
    global _CALL, _PARENT
    items = list(items)
    workers = min(len(items), cores())
    if workers <= 1 or work < MIN_WORK or not _FORK or _CALL is not None:
        return [func(item) for item in items]
    # The workers get each item's place, not the item: items need not pickle.
    _CALL, _PARENT = (lambda i: func(items[i])), os.getpid()
    try:
        with ProcessPoolExecutor(max_workers=workers, initializer=_start_worker,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_call, range(len(items))))
    finally:
        _CALL = None
