"""A function over items in forked worker processes, one per core.

The per-partition work is pandas, which holds the GIL, so it runs in processes. They
are forked, as PySpark starts its Python workers: the function and everything it
reaches (the items, the ops, the writes, the families) travel by the fork, not
pickled, and spawning would import the caller's __main__ again. Arrow's thread pools
survive a fork. Only the items' results come back, through files (_spill), not the
pool's pipe. Without fork (or one core, or one item, or little work) the items run
here, in order."""
from __future__ import annotations

import mmap
import multiprocessing
import os
import pickle
import shutil
import signal
import struct
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple, TypeVar

from onceproof.history.parse import cores
from onceproof.memory import for_checking

T = TypeVar("T")
R = TypeVar("R")

_FORK = "fork" in multiprocessing.get_all_start_methods()
# Below this much work (rows), the items run here: starting the workers costs more.
MIN_WORK = 400_000
# The function of the map in flight, which the forked workers inherit.
_CALL: Callable | None = None
# Where its workers put their results.
_SPILL: Path | None = None
_PARENT = 0  # the process that forks them
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _start_worker() -> None:
    for_checking()  # its items allocate and free arrays of millions of rows
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


class _Spilled(NamedTuple):
    """A result that a worker wrote to a file (_spill)."""
    path: str


def _call(i: int):
    assert _CALL is not None
    result = _CALL(i)
    if _SPILL is not None:
        try:
            return _spill(result, _SPILL / f"{os.getpid()}-{i}")
        except OSError:  # no room there: through the pipe, as it is
            pass
    return result


# A result's pickle and each of its buffers start at a multiple of this, in its file:
# Arrow and numpy take them from there as they are, aligned.
_ALIGN = 64


def _spill(result, path: Path) -> _Spilled:
    """Write `result` to a file at `path` (its pickle, its arrays' buffers beside it,
    out of band); OSError, and no file, when it cannot.

    Through the pool's pipe, a bucket's rows (some 90 MB at 10M events) took 0.4-0.7 s
    to come back, copied and copied again, while the worker waited for the next
    bucket; a file is written once and mapped by _unspill."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    parts = [memoryview(data), *(b.raw() for b in buffers)]
    try:
        with open(path, "wb") as out:
            at = out.write(struct.pack(f"<{len(parts) + 1}Q", len(parts),
                                       *(part.nbytes for part in parts)))
            for part in parts:
                at += out.write(bytes(-at % _ALIGN))
                at += out.write(part)
    except OSError:
        path.unlink(missing_ok=True)
        raise
    return _Spilled(str(path))


def _unspill(path: str):
    """The result _spill wrote at `path`, its buffers mapped from the file (a private
    mapping: pages the caller writes are its own copies); the file is gone after."""
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    os.unlink(path)  # the mapping keeps its pages
    view = memoryview(mapped)
    (n,) = struct.unpack_from("<Q", mapped)
    at, parts = 8 * (n + 1), []
    for size in struct.unpack_from(f"<{n}Q", mapped, 8):
        at += -at % _ALIGN
        parts.append(view[at:at + size])
        at += size
    return pickle.loads(parts[0], buffers=parts[1:])


def each(func: Callable[[T], R], items: Iterable[T], work: int) -> list[R]:
    """[func(item) for item in items], in order, in up to one process per core when
    the items hold `work` rows of at least MIN_WORK. Call it while no other thread of
    this process takes locks: a fork copies whatever locks such a thread holds. (One
    that only removes files, as a conversion's spool is removed while a check's
    finishers run, takes none.)"""
    global _CALL, _PARENT, _SPILL
    items = list(items)
    workers = min(len(items), cores())
    if workers <= 1 or work < MIN_WORK or not _FORK or _CALL is not None:
        return [func(item) for item in items]
    # The workers get each item's place, not the item: items need not pickle.
    _CALL, _PARENT = (lambda i: func(items[i])), os.getpid()
    try:
        _SPILL = Path(tempfile.mkdtemp(prefix="onceproof-results-"))
    except OSError:  # the results come through the pipe instead
        _SPILL = None
    try:
        with ProcessPoolExecutor(max_workers=workers, initializer=_start_worker,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            return [_unspill(r.path) if isinstance(r, _Spilled) else r
                    for r in pool.map(_call, range(len(items)))]
    finally:
        _CALL = None
        if _SPILL is not None:
            shutil.rmtree(_SPILL, ignore_errors=True)
        _SPILL = None
