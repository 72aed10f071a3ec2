"""The bytes of a history file: the file itself, its length without a truncated last
line, where its lines start, and its whole lines piece by piece. Both readers and the
keyed access read a file through these."""
from __future__ import annotations

import json
import mmap
import os
import warnings
from pathlib import Path

import numpy as np

from .format import NEMESIS, HistoryError

# What every fault event's line holds: found in the bytes as they stream by, so that
# the faults' free-form parameters are read from their few lines afterwards.
FAULT_NEEDLE = f'"{NEMESIS}"'.encode()
NEWLINE = ord("\n")
# What the per-line reader strips (bytes.strip): a line of only these holds no event.
WHITESPACE = np.frombuffer(b" \t\n\r\x0b\x0c", np.uint8)

# How much of a file `line_starts` scans at a time.
_CHUNK = 64 << 20


def existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file; pass the history.jsonl a run wrote")
    return path


def complete_length(path: Path, data, warn: bool = True) -> int:
    """Length of the history without a truncated last line, warning when there is one:
    a last line that is not valid JSON and has no newline after it is the writer's
    last, interrupted write. A writer ends each line with its newline, so a line that
    has one was written whole: if it is not JSON, the file is damaged (the readers
    name that line)."""
    end = len(data)
    while end > 0 and data[end - 1:end] in (b"\n", b"\r", b" ", b"\t"):
        end -= 1
    if end == 0:
        return 0
    if b"\n" in data[end:]:
        return len(data)
    start = data.rfind(b"\n", 0, end) + 1
    try:
        json.loads(data[start:end])
        return len(data)
    except ValueError as exc:
        if not warn:
            return start
        lineno = data[:start].count(b"\n") + 1
        warnings.warn(f"{path}:{lineno}: skipped a truncated last line "
                      f"({getattr(exc, 'msg', exc)}); the writer probably died mid-write",
                      stacklevel=3)
        return start


class Mapped:
    """The bytes of a file (an mmap; b"" for an empty file, which mmap refuses)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mm = None

    def __enter__(self):
        with open(self.path, "rb") as fh:
            self.mm = (mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                       if self.path.stat().st_size else b"")
        return self.mm

    def __exit__(self, *exc) -> None:
        if isinstance(self.mm, mmap.mmap):
            self.mm.close()


def whole_lines(path: Path, cut: int, size: int):
    """The first `cut` bytes of a file in pieces of whole lines (read, not mapped)."""
    with open(path, "rb") as fh:
        left, carry = cut, b""
        while left > 0:
            chunk = fh.read(min(size, left))
            if not chunk:
                break
            left -= len(chunk)
            data = carry + chunk if carry else chunk
            if left > 0:
                nl = data.rfind(b"\n")
                if nl < 0:
                    carry = data
                    continue
                data, carry = data[:nl + 1], data[nl + 1:]
            else:
                carry = b""
            yield data
        if carry:
            yield carry


def line_starts(data, cut: int) -> np.ndarray:
    """Byte offset of every non-blank line before `cut` (blank: nothing but whitespace,
    which the per-line reader skips), scanned in chunks so a gigabyte history never
    needs a gigabyte-sized mask."""
    chunk = _CHUNK
    newlines, begins = [], []
    for lo in range(0, cut, chunk):
        a = np.frombuffer(data[lo:min(lo + chunk, cut)], np.uint8)
        nl = np.flatnonzero(a == NEWLINE)
        newlines.append(nl + lo)
        # The first byte of each line (a newline, for an empty one) that begins here.
        if lo == 0:
            begins.append(a[:1])
        begins.append(a[nl[nl + 1 < len(a)] + 1])
        if len(nl) and nl[-1] == len(a) - 1 and lo + len(a) < cut:  # one begins the next
            begins.append(np.frombuffer(data[lo + len(a):lo + len(a) + 1], np.uint8))
    nl = np.concatenate(newlines) if newlines else np.empty(0, np.int64)
    starts = np.r_[0, nl + 1].astype(np.int64)
    ends = np.r_[nl, cut].astype(np.int64)
    first = np.concatenate(begins) if begins else np.empty(0, np.uint8)
    # A blank line is empty or begins with whitespace; only those are looked at.
    maybe = np.flatnonzero(ends == starts)
    lead = np.flatnonzero(np.isin(first, WHITESPACE))
    blank = [i for i in np.union1d(maybe, lead) if not data[starts[i]:ends[i]].strip()]
    return np.delete(starts, blank)
