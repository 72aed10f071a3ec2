"""checkers/memory.py: freed memory the allocators keep goes back to the system."""
from __future__ import annotations

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

