"""A history as pandas frames for the report, without parsing every op's value.

A run can record a million events, most of them sends and polls whose `value` holds
records the report never shows. So the scalar fields are parsed in C++ by pyarrow's JSON
reader against a schema without `value` (pandas' own JSON reader would build a Python
dict per record), and the values of the few events the report shows are parsed later
from their lines, found by byte offset. Nothing here needs Spark.
"""
from __future__ import annotations

import json
import mmap
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from onceproof.checkers.history import NEMESIS, HistoryError, read_events

SCALARS = pa.schema([
    ("index", pa.int64()), ("op", pa.int64()), ("process", pa.string()),
    ("type", pa.string()), ("f", pa.string()), ("time", pa.int64()),
    ("txn", pa.string()), ("error", pa.string()), ("final", pa.bool_()),
])
# pyarrow needs each line inside one block; a poll can return thousands of records.
_BLOCK = 64 << 20
_CHUNK = 64 << 20


@dataclass
class History:
    """events: one row per event (SCALARS plus `row`, its position among the file's
    non-blank lines). ops: one row per op, invoke joined to its completion, times in
    seconds since the first event; an op never completed has outcome `info`."""

    path: Path
    events: pd.DataFrame
    ops: pd.DataFrame
    t0: int
    duration: float
    _starts: np.ndarray
    _ends: np.ndarray

    @property
    def client_ops(self) -> pd.DataFrame:
        return self.ops[self.ops["process"] != NEMESIS]

    @property
    def fault_ops(self) -> pd.DataFrame:
        return self.ops[self.ops["process"] == NEMESIS]

    def values(self, rows: Iterable[int]) -> dict[int, dict]:
        """row -> the event's `value`, parsed from its line."""
        out = {}
        with open(self.path, "rb") as fh:
            for row in sorted({int(r) for r in rows}):
                fh.seek(self._starts[row])
                try:
                    event = json.loads(fh.read(self._ends[row] - self._starts[row]))
                except ValueError:
                    continue
                value = event.get("value") if isinstance(event, dict) else None
                out[row] = value if isinstance(value, dict) else {}
        return out

    def rows_with_values(self, values: Iterable[int]) -> dict[int, list[int]]:
        """value -> rows of events whose records carry that value (its sends and reads).

        One regex pass over the raw bytes finds the candidates; parsing only those lines
        then drops matches that are not a record's `value` (a `source`, an offset)."""
        wanted = sorted({int(v) for v in values})
        if not wanted:
            return {}
        # Only the wanted numbers in the pattern: a history holds millions of values, and
        # a Python-level match for each would cost more than the whole C scan.
        numbers = b"|".join(str(v).encode() for v in wanted)
        pattern = re.compile(rb'"value"\s*:\s*(' + numbers + rb')(?=\s*[,}])')
        hits: dict[int, set[int]] = {}
        with open(self.path, "rb") as fh, _map(fh) as mm:
            for m in pattern.finditer(mm):
                row = int(np.searchsorted(self._starts, m.start(), side="right")) - 1
                if 0 <= row < len(self._starts):
                    hits.setdefault(row, set()).add(int(m.group(1)))
        out: dict[int, list[int]] = {}
        for row, value in self.values(hits).items():
            carried = {r.get("value") for r in value.get("records") or () if isinstance(r, dict)}
            for v in hits[row] & carried:
                out.setdefault(v, []).append(row)
        return out


class _map:
    """An mmap that tolerates empty files (mmap refuses length 0)."""

    def __init__(self, fh):
        self.fh = fh
        self.mm = None

    def __enter__(self):
        size = Path(self.fh.name).stat().st_size
        self.mm = mmap.mmap(self.fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        return self.mm

    def __exit__(self, *exc):
        if isinstance(self.mm, mmap.mmap):
            self.mm.close()


def _line_bounds(mm) -> tuple[np.ndarray, np.ndarray]:
    """Start and end byte offsets of every non-blank line, scanned in chunks so a
    gigabyte history never needs a gigabyte-sized mask."""
    size = len(mm)
    newlines = []
    for lo in range(0, size, _CHUNK):
        chunk = np.frombuffer(mm[lo:lo + _CHUNK], dtype=np.uint8)
        newlines.append(np.flatnonzero(chunk == 10) + lo)
    nl = np.concatenate(newlines) if newlines else np.empty(0, np.int64)
    starts = np.concatenate([[0], nl + 1]).astype(np.int64)
    ends = np.concatenate([nl, [size]]).astype(np.int64)
    # Only short lines can be blank (an event is far longer than a few bytes), so only
    # those are looked at in Python.
    short = np.flatnonzero(ends - starts < 8)
    blank = [i for i in short if not mm[starts[i]:ends[i]].strip()]
    keep = np.ones(len(starts), dtype=bool)
    keep[blank] = False
    return starts[keep], ends[keep]


def _scalars(path: Path, mm, cut: int) -> pd.DataFrame:
    opts = pj.ParseOptions(explicit_schema=SCALARS, unexpected_field_behavior="ignore")
    # Reading the file by name is about twice as fast as from the mmap; the mmap is only
    # needed to leave out a truncated last line.
    source = path if cut == len(mm) else pa.BufferReader(pa.py_buffer(mm)[:cut])
    try:
        table = pj.read_json(source, read_options=pj.ReadOptions(block_size=_BLOCK),
                             parse_options=opts)
        table = table.set_column(table.schema.get_field_index("final"), "final",
                                 pc.fill_null(table.column("final"), False))
        frame = table.select(SCALARS.names).to_pandas()
        if not frame[["index", "op", "process", "type", "f", "time"]].isna().any().any():
            return frame
    except pa.ArrowInvalid:
        pass
    # The reference reader names the line that is wrong, or accepts what pyarrow did not.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        events = read_events(path)
    frame = pd.DataFrame.from_records(events, columns=SCALARS.names)
    return frame


def _complete_length(mm, starts: np.ndarray, ends: np.ndarray, path: Path) -> int:
    """Bytes up to the end of the last complete line: a writer that died mid-line leaves
    a truncated last line, which is skipped as docs/history.md says."""
    if len(starts) == 0:
        return 0
    try:
        json.loads(mm[starts[-1]:ends[-1]])
        return len(mm)
    except ValueError:
        warnings.warn(f"{path}: skipped a truncated last line; the writer probably died "
                      "mid-write", stacklevel=3)
        return int(starts[-1])


def load(path: str | Path) -> History:
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file; a run folder holds history.jsonl")
    with open(path, "rb") as fh, _map(fh) as mm:
        starts, ends = _line_bounds(mm)
        cut = _complete_length(mm, starts, ends, path)
        if cut < len(mm):
            starts, ends = starts[:-1], ends[:-1]
        events = _scalars(path, mm, cut) if len(starts) else \
            pd.DataFrame({c: pd.Series(dtype=object) for c in SCALARS.names})
    if len(events) != len(starts):
        raise HistoryError(f"{path}: read {len(events)} events from {len(starts)} lines; "
                           "is every event on a line of its own?")
    events["row"] = np.arange(len(events), dtype=np.int64)
    events["final"] = events["final"].map(lambda x: x is True) if events["final"].dtype != bool \
        else events["final"]
    t0 = int(events["time"].min()) if len(events) else 0
    ops = _ops(events, t0)
    duration = float((events["time"].max() - t0) / 1e9) if len(events) else 0.0
    return History(path, events, ops, t0, duration, starts, ends)


def _ops(events: pd.DataFrame, t0: int) -> pd.DataFrame:
    inv = events[events["type"] == "invoke"]
    done = events[events["type"] != "invoke"]
    ops = inv[["op", "process", "f", "txn", "time", "row", "final"]].merge(
        done[["op", "type", "time", "row", "error", "final"]].drop_duplicates("op"),
        on="op", how="left", suffixes=("", "_done"))
    ops = ops.rename(columns={"row": "invoke_row", "row_done": "done_row"})
    ops["pending"] = ops["type"].isna()
    # docs/history.md: an op invoked and never completed counts as info.
    ops["outcome"] = ops["type"].fillna("info")
    ops["final"] = ops["final"] | ops["final_done"].eq(True)
    ops["start"] = (ops["time"] - t0) / 1e9
    ops["end"] = (ops["time_done"] - t0) / 1e9
    ops["latency_ms"] = (ops["time_done"] - ops["time"]) / 1e6
    ops["done_row"] = ops["done_row"].astype("Int64")
    return ops.drop(columns=["type", "final_done"]).sort_values("invoke_row").reset_index(drop=True)
