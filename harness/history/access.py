"""Keyed random access to a history already read and found well-formed: the few
events a person looks at (`values_at`), and the faults' free-form parameters, which the
fast reader does not parse (`nemesis_values`), each parsed from its own line, without
parsing the whole file again."""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .format import NEMESIS, is_text
from .lines import FAULT_NEEDLE, Mapped, complete_length, existing, line_starts, whole_lines


def values_at(path: str | os.PathLike, indexes) -> dict[int, dict]:
    """index -> `value` of the events at those indexes (of a history already read and
    found well-formed), each parsed from its own line: for the few events a person
    looks at, without parsing the whole file again. `value` holds all the event
    said, fault parameters included."""
    wanted = sorted({int(i) for i in indexes})
    if not wanted:
        return {}
    path = existing(path)
    out: dict[int, dict] = {}
    with Mapped(path) as data:
        starts = line_starts(data, complete_length(path, data, warn=False))
        for index in wanted:
            event = _event_at(data, starts, index)
            if event is not None:
                value = event.get("value")
                out[index] = value if isinstance(value, dict) else {}
    return out


def nemesis_values(path: str | os.PathLike, near: list[int] | None = None) -> dict[int, dict]:
    """index -> `value` of every fault event (the parameters the fast reader does not
    parse). A history holds few faults: their lines are found by a byte search, of
    the whole file, or only of the lines at the byte offsets `near` (the fast
    reader's finds, events_table)."""
    path = existing(path)
    out: dict[int, dict] = {}
    with Mapped(path) as data:
        cut = complete_length(path, data, warn=False)
    if near is not None:
        # Read, not mapped: a mapped page brings its neighbours, and thousands of
        # faults spread over a big file would bring most of it.
        with open(path, "rb") as fh:
            lines = {_line_around(fh.fileno(), at, cut) for at in near if at < cut}
        for line in sorted(lines):
            _fault_line(line[1], out)
        return out
    # Searched block by block, so the file is never resident all at once.
    for data in whole_lines(path, cut, 8 << 20):
        at = data.find(FAULT_NEEDLE)
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end
            _fault_line(data[start:end], out)
            at = data.find(FAULT_NEEDLE, end)
    return out


def _line_around(fd: int, at: int, cut: int, step: int = 4096) -> tuple[int, bytes]:
    """(start, text) of the line of the file that holds byte `at` (not past `cut`)."""
    start = at
    while start > 0:
        lo = max(0, start - step)
        nl = os.pread(fd, start - lo, lo).rfind(b"\n")
        if nl >= 0:
            start = lo + nl + 1
            break
        start = lo
    pieces, end = [], at
    while end < cut:
        piece = os.pread(fd, min(step, cut - end), end)
        nl = piece.find(b"\n")
        pieces.append(piece if nl < 0 else piece[:nl])
        end = cut if nl >= 0 or not piece else end + len(piece)
    return start, os.pread(fd, at - start, start) + b"".join(pieces)


def _fault_line(line: bytes, out: dict[int, dict]) -> None:
    event = json.loads(line)
    if event.get("process") == NEMESIS:
        value = _as_text(event.get("value"))
        out[event["index"]] = value if isinstance(value, dict) else {}


def _as_text(x: Any) -> Any:
    """Parsed JSON with each lone surrogate in its strings (keys too) written out as
    its escape: the free-form parts of an event (a fault's parameters, a record's key)
    are not checked, and may hold what no UTF-8 text (a report, a plot) can."""
    if isinstance(x, str):
        return x if is_text(x) else x.encode("utf-8", "backslashreplace").decode()
    if isinstance(x, dict):
        return {_as_text(k): _as_text(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_as_text(v) for v in x]
    return x


def _event_at(data, starts: np.ndarray, index: int) -> dict | None:
    """The event with this index: on line `index` of the non-blank lines when indexes
    count from 0 as the format says, else found by bisection (indexes increase)."""
    def at(row: int) -> dict:
        start = int(starts[row])
        end = data.find(b"\n", start)
        return _as_text(json.loads(data[start:end if end >= 0 else len(data)]))

    if 0 <= index < len(starts):
        event = at(index)
        if event["index"] == index:
            return event
    lo, hi = 0, len(starts)
    while lo < hi:
        mid = (lo + hi) // 2
        event = at(mid)
        if event["index"] == index:
            return event
        lo, hi = (mid + 1, hi) if event["index"] < index else (lo, mid)
    return None
