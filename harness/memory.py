"""Memory a conversion has freed, given back to the system between its phases (and
its tables phase's large blocks as soon as they are freed); memory a checking worker
frees, kept for its next bucket; and memory a run's many client threads free, held in
few arenas and given back as it goes (`for_running`, `give_back`).

Both allocators a conversion uses keep what is freed for their own reuse. glibc's
malloc (numpy, pandas, Python's larger objects) raises its mmap threshold after each
large free, up to 32 MB, so later arrays come from a heap that it seldom shrinks.
mimalloc, Arrow's pool, keeps freed pages too. At 10M events about 2.3 GB sat freed
but held between phases (measured with malloc_trim and release_unused), and every
later phase's peak came on top of it."""
from __future__ import annotations

import ctypes
import os
from collections.abc import Callable


def _glibc(name: str) -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # not glibc: nothing to tune this way
        return None


_malloc_trim = _glibc("malloc_trim")
_mallopt = _glibc("mallopt")
# mallopt(3)'s parameters, and glibc's highest mmap threshold on 64-bit systems.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_MMAP_THRESHOLD_MAX = 32 << 20
_MMAP_LARGE = 1 << 20
_TRIM_DEFAULT = 128 << 10  # glibc's M_TRIM_THRESHOLD


def give_back() -> None:
    """Return the freed memory both allocators hold to the system."""
    import pyarrow as pa  # here: a run's client processes use this module without Arrow

    pa.default_memory_pool().release_unused()
    trim()


def trim() -> None:
    """Return the freed memory glibc's malloc holds, in every arena, to the system."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def map_large() -> bool:
    """Have this process's malloc map each allocation of 1 MB or more on its own, and
    unmap it as soon as it is freed; False where that cannot be set (not glibc).

    For a conversion's tables phase: two threads make and free pandas and numpy arrays
    of millions of rows, and with glibc's rising threshold those come from heaps that
    give nothing back while anything above the freed block is live. At 10M events the
    phase peaked at 3.94 GiB RSS, with 2.6 GiB live; with large blocks mapped, 3.1-3.3
    GiB. Not for a phase that makes and frees arrays one after another (a fault per
    page of each): `keep_freed` is for those, and undoes this."""
    if _mallopt is None:
        return False
    # And the heap's free top trimmed again, as by default: keep_freed may have run.
    return bool(_mallopt(_M_MMAP_THRESHOLD, _MMAP_LARGE)
                and _mallopt(_M_TRIM_THRESHOLD, _TRIM_DEFAULT))


def keep_freed() -> bool:
    """Let this process's malloc keep what it frees for its next allocations; False
    where that cannot be set (not glibc).

    For a worker that checks one bucket after another, allocating and freeing arrays
    of millions of rows: by default glibc maps each array above its (rising) mmap
    threshold afresh and unmaps it when freed, and trims its heap's free top, so the
    system maps every page again, a fault each. Checking four 3M-step buckets made
    about 300,000 faults and 3-4 s of system time; with arrays up to 32 MB from a heap
    that is not trimmed, about half the faults and 30-45% less system time. A
    worker's own peak is the same (what it keeps, it used), but the workers now hold
    their peaks at once: 0.5-0.9 GB more PSS for a check of 10M events end to end."""
    if _mallopt is None:
        return False
    return bool(_mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
                and _mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def for_checking() -> bool:
    """keep_freed, and Arrow's allocations (a bucket read from Parquet, facts made
    pandas) from that same malloc; False where that cannot be set (not glibc).

    For a checking worker: mimalloc, Arrow's default pool, gives freed pages back to the
    system soon after (its purge), and a fresh page costs a fault again. The pass over
    the 24 buckets of 10M events in one process: 4.9 -> 1.4-2.2 s of system time. Not
    for a conversion: its peak at 10M events rose from 3.4-3.5 to 3.5-3.7 GiB."""
    if _mallopt is None:
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    return keep_freed()


def for_running(arenas: int | None = None) -> bool:
    """Let this process's malloc make at most `arenas` arenas (default: one per core);
    False where that cannot be set (not glibc).

    For a run's clients: librdkafka's threads (several per client) and the short-lived
    threads of bounded calls each take an arena, up to eight per core by default, and
    what one thread allocates another often frees (a record produced, then delivered).
    Each arena keeps what was freed in it. Over 10-minute runs of nine clients under
    faults (bench/soak_bench.py, seed 1), from minute 2 to the end: by default, malloc's
    free-but-kept memory grew from 12 to 173 MiB and the harness's RSS by 73%; with
    MALLOC_ARENA_MAX=2 in the environment, 7 to 68 MiB and 25%. glibc fixes its limit
    once a process has more than eight arenas, so this must come before the threads
    that make them (the CLI and the pytest plugin call it first): set once the cluster
    had started, it changed nothing the arenas kept. What they still keep, a run gives
    back with `trim` now and then."""
    if _mallopt is None:
        return False
    return bool(_mallopt(_M_ARENA_MAX, arenas or os.cpu_count() or 2))
