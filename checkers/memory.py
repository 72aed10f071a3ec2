"""Memory a conversion has freed, given back to the system between its phases.

Both allocators a conversion uses keep what is freed for their own reuse. glibc's
malloc (numpy, pandas, Python's larger objects) raises its mmap threshold after each
large free, up to 32 MB, so later arrays come from a heap that it seldom shrinks.
mimalloc, Arrow's pool, keeps freed pages too. At 10M events about 2.3 GB sat freed
but held between phases (measured with malloc_trim and release_unused), and every
later phase's peak came on top of it."""
from __future__ import annotations

import ctypes
from collections.abc import Callable

import pyarrow as pa


def _glibc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to trim this way
        return None


_malloc_trim = _glibc_trim()


def give_back() -> None:
    """Return the freed memory both allocators hold to the system."""
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)
