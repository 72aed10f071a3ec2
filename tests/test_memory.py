"""checkers/memory.py: freed memory the allocators keep goes back to the system; a
checking worker keeps what it frees for its next allocations."""
from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from onceproof.checkers import memory


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



_REFAULTS = """
import resource, sys
from onceproof.checkers import memory
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
    # A fresh process each: malloc's thresholds move with what a process has freed.
    def refaults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _REFAULTS, mode], check=True,
                             capture_output=True, text=True).stdout
        return int(out)
    default, keep = refaults("default"), refaults("keep")
    # Mapped afresh: a fault per page (per huge page where the system gives those).
    assert default > 0
    assert keep * 10 < default
