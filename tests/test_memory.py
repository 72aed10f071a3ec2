"""harness/memory.py (onceproof.memory): freed memory the allocators keep goes back to the system (large
blocks at once, when asked); a checking worker keeps what it frees for its next
allocations."""
from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from onceproof import memory


def _rss() -> int:
    return psutil.Process().memory_info().rss


@pytest.mark.skipif(memory._malloc_trim is None, reason="glibc only")
def test_malloc_keeps_freed_blocks_until_they_are_given_back():
    # Blocks under glibc's mmap threshold come from its heap. Freed between blocks
    # still in use, they stay with the process (only a free top is trimmed at once),
    # as the freed arrays of one conversion phase did between the next phase's.
    blocks = [bytearray(64 << 10) for _ in range(4096)]  # 256 MB, every page touched
    still_used = blocks[::16]
    held = _rss()
    del blocks
    kept = _rss()
    memory.give_back()
    assert held - kept < 64 << 20 < kept - _rss()
    assert len(still_used) == 256



def _printed(script: str, mode: str) -> int:
    """The number `script` prints, run with `mode` in a fresh process: malloc's
    thresholds move with what a process has freed."""
    out = subprocess.run([sys.executable, "-c", script, mode], check=True,
                         capture_output=True, text=True).stdout
    return int(out)


_REFAULTS = """
import resource, sys
from onceproof import memory
if sys.argv[1] == "keep":
    assert memory.keep_freed()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(20 << 20)  # 20 MB, every page touched
del block
before = faults()
block = bytearray(20 << 20)
print(faults() - before)
"""


@pytest.mark.skipif(memory._mallopt is None, reason="glibc only")
def test_a_worker_that_keeps_freed_memory_reuses_its_pages():
    default, keep = _printed(_REFAULTS, "default"), _printed(_REFAULTS, "keep")
    # Mapped afresh: a fault per page (per huge page where the system gives those).
    assert default > 0
    assert keep * 10 < default


_HELD = """
import sys, psutil
from onceproof import memory
if sys.argv[1] == "map":
    assert memory.map_large()
def rss():
    return psutil.Process().memory_info().rss
block = bytearray(20 << 20)
del block  # by default, glibc's threshold now rises above such blocks
before = rss()
block = bytearray(20 << 20)  # 20 MB, every page touched
above = bytearray(64 << 10)  # live above it, where the heap grows
del block
print(rss() - before)
"""


@pytest.mark.skipif(memory._mallopt is None, reason="glibc only")
def test_a_converter_that_maps_large_blocks_gives_them_back_when_freed():
    # What a freed block leaves resident: all of it from the heap, by default; nothing
    # when it was mapped on its own.
    assert _printed(_HELD, "default") > 16 << 20 > 4 << 20 > _printed(_HELD, "map")


_ARROW_POOL = """
import pyarrow as pa
from onceproof import memory
assert memory.for_checking()
numbers = pa.array(range(100_000))
print(pa.default_memory_pool().backend_name, pa.system_memory_pool().bytes_allocated() > 0)
"""


@pytest.mark.skipif(memory._mallopt is None, reason="glibc only")
def test_a_checking_worker_takes_arrows_memory_from_malloc_as_it_keeps_it():
    # mimalloc, Arrow's own pool, gives freed pages back to the system soon after.
    out = subprocess.run([sys.executable, "-c", _ARROW_POOL], check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["system", "True"]


_THREADS_MALLOC = """
import ctypes, sys, threading
from onceproof import memory
if sys.argv[1] == "capped":
    assert memory.for_running(2)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
started, done = threading.Barrier(21), threading.Event()
def work():
    block = libc.malloc(4096)  # a thread's first malloc takes it an arena
    started.wait()
    done.wait()
    libc.free(block)
threads = [threading.Thread(target=work) for _ in range(20)]
for t in threads:
    t.start()
started.wait()
libc.malloc_stats()  # one "Arena N:" paragraph per arena, on stderr
done.set()
"""


@pytest.mark.skipif(memory._mallopt is None, reason="glibc only")
def test_a_run_started_after_for_running_keeps_its_threads_in_few_arenas():
    def arenas(how: str) -> int:
        done = subprocess.run([sys.executable, "-c", _THREADS_MALLOC, how], capture_output=True,
                              text=True, timeout=60, check=True)
        return sum(line.startswith("Arena ") for line in done.stderr.splitlines())
    # Twenty threads at once take an arena each, up to glibc's eight per core, unless
    # capped first.
    assert arenas("capped") <= 2 < arenas("default")
