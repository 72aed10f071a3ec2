"""JSONL history -> one Arrow table of events, fast.

pyarrow's JSON reader parses the file in C++ against a fixed schema of the fields the
checkers use (unknown fields, such as fault parameters, are ignored). Whatever it
rejects, and every structural check that fails, is handed to the reference reader
`harness.history.read_events`, which either raises a HistoryError naming the line or
accepts the file (it tolerates some shapes, such as a non-string key, that the fixed
schema does not), in which case its events are used instead.
"""
from __future__ import annotations

import json
import mmap
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pj

from .history import EVENT_TYPES, NEMESIS, HistoryError, read_events

I, S = pa.int64(), pa.string()
RECORD = pa.struct([("topic", S), ("partition", I), ("key", S), ("value", I),
                    ("source", I), ("offset", I)])
POSITION = pa.struct([("topic", S), ("partition", I), ("offset", I)])
PARTITION = pa.struct([("topic", S), ("partition", I), ("low", I), ("high", I), ("lso", I)])
VALUE = pa.struct([
    ("records", pa.list_(RECORD)), ("isolation", S), ("group", S), ("tid", S),
    ("positions", pa.list_(POSITION)), ("partitions", pa.list_(PARTITION)),
    ("offsets", pa.list_(POSITION)),
])
EVENT = pa.schema([
    ("index", I), ("op", I), ("process", S), ("type", S), ("f", S), ("time", I),
    ("txn", S), ("error", S), ("final", pa.bool_()), ("value", VALUE),
])
_REQUIRED = ("index", "op", "process", "type", "f", "time")
# A poll may return thousands of records on one line; the reader needs whole lines
# inside one block.
_BLOCK = 64 << 20


def events_table(path: str | Path, sink=None) -> pa.Table:
    """The events of a history as an Arrow table with schema EVENT, validated.

    The file is parsed in blocks; with a `sink`, each block passes through
    `sink.take(batch) -> batch` before it is kept, so a converter can move bulky
    parts (poll records) to disk while the file streams by. If the fast reader gives
    up part way, `sink.clear()` is called and the reference reader's events go
    through the sink again from the start."""
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file; pass the history.jsonl a run wrote")
    if path.stat().st_size == 0:
        return EVENT.empty_table()
    truncated: list[int] = []
    take = sink.take if sink is not None else (lambda batch: batch)
    try:
        table = _fast(path, truncated, take)
    except pa.ArrowInvalid:
        table = None
    if table is not None:
        problem = _structure_problem(table)
        if problem is None:
            return table
    else:
        problem = "the fast reader could not parse it"
    with warnings.catch_warnings():
        if truncated:  # _fast already warned about it
            warnings.simplefilter("ignore")
        events = read_events(path)
    if table is not None:
        raise HistoryError(f"{path}: {problem}")
    if sink is not None:
        sink.clear()
    whole = _from_events(events)
    return pa.Table.from_batches([take(b) for b in whole.to_batches(max_chunksize=100_000)],
                                 schema=EVENT)


def _fast(path: Path, truncated: list[int], take) -> pa.Table:
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        cut = _complete_length(path, mm)
        if cut < len(mm):
            truncated.append(cut)
    # Arrow's own map: it stays open while the reader (or a traceback) holds it.
    with pa.memory_map(str(path)) as source:
        opts = pj.ParseOptions(explicit_schema=EVENT, unexpected_field_behavior="ignore")
        reader = pj.open_json(pa.BufferReader(source.read_buffer(cut)),
                              read_options=pj.ReadOptions(block_size=_BLOCK),
                              parse_options=opts)
        kept = [take(_conform(batch)) for batch in reader]
    return pa.Table.from_batches(kept, schema=EVENT)


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column(n).cast(EVENT.field(n).type)
                                       for n in EVENT.names], schema=EVENT)


def _complete_length(path: Path, mm: mmap.mmap) -> int:
    """Length of the file without a truncated last line (warning when there is one)."""
    end = len(mm)
    while end > 0 and mm[end - 1:end] in (b"\n", b"\r", b" ", b"\t"):
        end -= 1
    if end == 0:
        return 0
    start = mm.rfind(b"\n", 0, end) + 1
    try:
        json.loads(mm[start:end])
        return len(mm)
    except ValueError as exc:
        lineno = mm[:start].count(b"\n") + 1
        msg = getattr(exc, "msg", str(exc))
        warnings.warn(f"{path}:{lineno}: skipped a truncated last line ({msg}); "
                      "the writer probably died mid-write", stacklevel=4)
        return start


def _structure_problem(table: pa.Table) -> str | None:
    """What is wrong with the events' structure, or None; mirrors read_events."""
    if table.num_rows == 0:
        return None
    df = table.select(list(_REQUIRED)).to_pandas()
    for name in _REQUIRED:
        if df[name].isna().any():
            return f"an event lacks required field {name!r}"
    if not df["type"].isin(EVENT_TYPES).all():
        return "an event has an unknown type"
    if not (np.diff(df["index"].to_numpy()) > 0).all():
        return "event indexes do not increase"
    inv = df[df["type"] == "invoke"]
    done = df[df["type"] != "invoke"]
    if inv["op"].duplicated().any():
        return "an op is invoked twice"
    if done["op"].duplicated().any():
        return "an op is completed twice"
    pairs = done.merge(inv, on="op", how="left", suffixes=("", "_inv"))
    if pairs["index_inv"].isna().any() or (pairs["index_inv"] > pairs["index"]).any():
        return "a completion comes before its invoke"
    if ((pairs["f"] != pairs["f_inv"]) | (pairs["process"] != pairs["process_inv"])).any():
        return "a completion's f or process differs from its invoke's"
    return None


_FIELDS = {name: [f.name for f in t.value_type] for name, t in
           (("records", VALUE.field("records").type), ("positions", VALUE.field("positions").type),
            ("partitions", VALUE.field("partitions").type), ("offsets", VALUE.field("offsets").type))}


def _normal_value(event: dict) -> dict | None:
    value = event.get("value")
    if not value or event["process"] == NEMESIS:
        return None
    out: dict = {k: value.get(k) for k in ("isolation", "group", "tid")}
    for key, names in _FIELDS.items():
        items = value.get(key)
        if items is None:
            continue
        rows = []
        for item in items:
            row = {n: item.get(n) for n in names}
            if row.get("key") is not None and not isinstance(row["key"], str):
                row["key"] = json.dumps(row["key"])
            rows.append(row)
        out[key] = rows
    return out


def _from_events(events: list[dict]) -> pa.Table:
    rows = [{
        "index": e["index"], "op": e["op"], "process": e["process"], "type": e["type"],
        "f": e["f"], "time": e["time"], "txn": e.get("txn"), "error": e.get("error"),
        "final": e.get("final"), "value": _normal_value(e),
    } for e in events]
    return pa.Table.from_pylist(rows, schema=EVENT)


def scalar_frame(table: pa.Table) -> pd.DataFrame:
    """The events' top-level fields as pandas, nullable dtypes kept."""
    cols = [n for n in EVENT.names if n != "value"]
    return table.select(cols).to_pandas(types_mapper=_nullable)


def _nullable(t: pa.DataType):
    if pa.types.is_integer(t):
        return pd.Int64Dtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    if pa.types.is_string(t):
        return pd.StringDtype()
    return None
