"""The two readers of a history, which apply the same rules (rules.py).
`events_table`, the fast one, parses in C++ with pyarrow against EVENT and checks the
rest vectorized (parse.py); `read_events`, the per-line one, checks each line in Python
and then the same rules between events, so that it can name the file and line of the
first problem. The fast reader hands the file to the per-line one whenever it meets
anything it does not accept: that either names the bad line or accepts the file (a
fault's value is free-form, and may hold a field that EVENT types otherwise), so every
rejection names a line."""
from __future__ import annotations

import json
import os
import warnings

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from onceproof.memory import give_back

from . import parse
from .format import NEMESIS, REQUIRED, HistoryError
from .lines import Mapped, complete_length, existing
from .rules import check_event, structure_problem
from .schema import EVENT, VALUE


def _scalars(table: pa.Table) -> pd.DataFrame:
    """The fields the rules between events read, strings as categoricals."""
    return pa.table({name: pc.dictionary_encode(table.column(name))
                     if table.schema.field(name).type == pa.string() else table.column(name)
                     for name in REQUIRED}).to_pandas()


def read_events(path: str | os.PathLike) -> list[dict]:
    """All events of a history, in file order, validated line by line.

    A truncated last line is skipped with a warning. Anything else that is wrong raises
    HistoryError naming the file and line. Ops invoked and never completed are left as
    they are; the converter counts them as `info`.
    """
    path = existing(path)
    events: list[dict] = []
    linenos: list[int] = []
    with Mapped(path) as data:
        cut = complete_length(path, data)
        pos, lineno = 0, 0
        while pos < cut:
            end = data.find(b"\n", pos, cut)
            end = cut if end < 0 else end
            text, pos, lineno = data[pos:end], end + 1, lineno + 1
            if not text.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                event = json.loads(text)
            except UnicodeDecodeError as exc:
                raise HistoryError(f"{where}: not UTF-8 text ({exc.reason} at byte "
                                   f"{exc.start} of the line); a history is UTF-8 JSON "
                                   "(docs/history.md)") from None
            except ValueError as exc:
                raise HistoryError(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)}); "
                                   "only a last line without its newline can be a write "
                                   "cut short, so the file is damaged") from None
            check_event(event, where)
            events.append(event)
            linenos.append(lineno)
    scalars = pd.DataFrame.from_records(
        [{k: e[k] for k in REQUIRED} for e in events], columns=list(REQUIRED))
    problem = structure_problem(scalars, lambda r: linenos[r])
    if problem is not None:
        row, message = problem
        raise HistoryError(f"{path}:{linenos[row]}: {message}")
    return events


def events_table(path: str | os.PathLike, sink=None) -> pa.Table:
    """The events of a history as an Arrow table with schema EVENT, validated (fast).

    The file is parsed in blocks; with a `sink`, each block passes through
    `sink.take(batch) -> batch` before it is kept, and the table has the sink's
    `schema`: so a converter can take bulky parts (records) out of the events while
    the file streams by. If the fast reader meets anything it does not accept,
    `sink.clear()` is called, `read_events` names the bad line (or accepts the file)
    and its events go through the sink from the start. A sink with a `fault_lines`
    attribute gets there, from the fast reader, the byte offsets where fault events
    may be (for `nemesis_values`), as the parse saw them; else it is left None."""
    path = existing(path)
    take = sink.take if sink is not None else (lambda batch: batch)
    schema = sink.schema if sink is not None else EVENT
    with Mapped(path) as data:
        cut = complete_length(path, data)
    if cut == 0:
        return schema.empty_table()
    block = parse.BLOCK
    while True:
        try:
            hits: list[int] = []
            table = parse.parse_file(path, cut, take, schema, hits, block)
            give_back()  # the blocks parsed and let go, before the rules' arrays
            # Any problem sends the file to the per-line reader, which names its line.
            if structure_problem(_scalars(table), lambda row: row) is None:
                if hasattr(sink, "fault_lines"):
                    sink.fault_lines = sorted(hits)
                return table
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc) and block < parse.MAX_BLOCK:
                block *= 8
                if sink is not None:
                    sink.clear()
                continue
        break
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the truncated last line was warned about above
        events = read_events(path)
    if sink is not None:
        sink.clear()
    whole = _from_events(events)
    return pa.Table.from_batches([take(b) for b in whole.to_batches(max_chunksize=100_000)],
                                 schema=schema)


def _normal_value(event: dict) -> dict | None:
    """An event's value as EVENT holds it: a fault's is left out, and so is every field
    EVENT does not name."""
    value = event.get("value")
    if not value or event["process"] == NEMESIS:
        return None
    out: dict = {}
    for field in VALUE:
        x = value.get(field.name)
        if x is None or not pa.types.is_list(field.type):
            out[field.name] = x
            continue
        out[field.name] = [{f.name: item.get(f.name) for f in field.type.value_type}
                           for item in x]
    return out


def _from_events(events: list[dict]) -> pa.Table:
    rows = [{
        "index": e["index"], "op": e["op"], "process": e["process"], "type": e["type"],
        "f": e["f"], "time": e["time"], "txn": e.get("txn"), "error": e.get("error"),
        "final": e.get("final"), "value": _normal_value(e),
    } for e in events]
    return pa.Table.from_pylist(rows, schema=EVENT)
