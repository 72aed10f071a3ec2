"""A run's history as pandas frames for the report, from the tables the run wrote.

A run folder holds history.jsonl and history.parquet/, the tables the checkers'
converter wrote from it (checkers/store.py). The report reads those tables: ops with
their invoke and completion times and outcomes, faults with their parameters, and the
sends and reads of a value. A folder with only a history.jsonl (one from elsewhere) is
converted first, by the same one reader. The values of the few ops the page shows are
read from their own lines by the history reader (onceproof.history.access.values_at). Nothing
here needs Spark.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from onceproof.checkers.store import MANIFEST, convert, read_manifest, read_table
from onceproof.history.access import values_at
from onceproof.history.format import NEMESIS, HistoryError

JSONL = "history.jsonl"
TABLES = "history.parquet"


@dataclass
class History:
    """ops: one row per op (the ops table), in history order, with `outcome` (an op
    never completed is `info`), `pending`, and `start`, `end` (seconds since the first
    event) and `latency_ms`. Faults also carry `value` and `done_value` (their
    parameters, as dicts). stats: the converter's."""

    jsonl: Path
    tables: Path
    ops: pd.DataFrame
    stats: dict
    t0: int
    duration: float

    @property
    def client_ops(self) -> pd.DataFrame:
        return self.ops[self.ops["process"] != NEMESIS]

    @property
    def fault_ops(self) -> pd.DataFrame:
        return self.ops[self.ops["process"] == NEMESIS]

    @property
    def n_events(self) -> int:
        return int(self.stats.get("events", 0))

    def values(self, indexes: Iterable[int]) -> dict[int, dict]:
        """event index -> the event's `value`."""
        return values_at(self.jsonl, indexes)

    def ops_with_values(self, values: Iterable[int]) -> dict[int, list[int]]:
        """value -> the ops whose records carry it: its sends, then the polls that
        returned it, each in history order."""
        wanted = sorted({int(v) for v in values})
        if not wanted:
            return {}
        out: dict[int, list[int]] = {}
        for name in ("writes", "reads"):
            rows = read_table(self.tables, name, ["value", "op", "invoke_index"],
                              filters=[("value", "in", wanted)]).to_pandas()
            for value, op in rows.sort_values("invoke_index", kind="stable")[
                    ["value", "op"]].itertuples(index=False):
                ops = out.setdefault(int(value), [])
                if int(op) not in ops:
                    ops.append(int(op))
        return out


def load(folder: str | Path) -> History:
    """The history of a run folder, converting its history.jsonl first when the folder
    has no current tables for it."""
    folder = Path(folder)
    jsonl, tables = folder / JSONL, folder / TABLES
    try:
        manifest = read_manifest(tables)
        stale = jsonl.is_file() and jsonl.stat().st_mtime > (tables / MANIFEST).stat().st_mtime
    except HistoryError:
        stale = True
    if stale:
        convert(jsonl, tables)
        manifest = read_manifest(tables)
    ops = read_table(tables, "ops").to_pandas()
    faults = read_table(tables, "faults", ["op", "value", "done_value"]).to_pandas()
    times = pd.concat([ops["invoke_time"], ops["complete_time"]]).dropna()
    t0 = int(times.min()) if len(times) else 0
    duration = float((times.max() - t0) / 1e9) if len(times) else 0.0
    return History(jsonl, tables, _report_ops(ops, faults, t0), manifest.get("stats", {}),
                   t0, duration)


def _report_ops(ops: pd.DataFrame, faults: pd.DataFrame, t0: int) -> pd.DataFrame:
    ops = ops.sort_values("invoke_index", kind="stable").reset_index(drop=True)
    ops["pending"] = ops["complete_index"].isna()
    # docs/history.md: an op invoked and never completed counts as info (the converter's
    # type says so already).
    ops["outcome"] = ops["type"]
    ops["final"] = ops["final"].fillna(False).astype(bool)
    ops["start"] = (ops["invoke_time"] - t0) / 1e9
    ops["end"] = (ops["complete_time"] - t0) / 1e9
    ops["latency_ms"] = (ops["complete_time"] - ops["invoke_time"]) / 1e6
    params = faults.set_index("op")
    for column in ("value", "done_value"):
        text = ops["op"].map(params[column]) if len(params) else pd.Series(None, index=ops.index)
        ops[column] = [json.loads(t) if isinstance(t, str) else None for t in text]
    return ops
