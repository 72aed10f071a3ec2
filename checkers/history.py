"""Histories: the JSON Lines record of what every client saw (format: docs/history.md).

This module is the contract between the run and the checks: the writer the harness
records with, the schema of an event, and the one reader, which is the authority on
what a well-formed history is.

The rules are stated once: the schema EVENT (the fields and their types, integers
of 64 bits, strings of Unicode text, lists of objects), the fields never negative
(NON_NEGATIVE) and those an item of a list needs (`_required`), the
truncated-last-line rule (`_complete_length`) and the rules between events
(`_structure_problem`). Two readers apply them. `events_table`, the fast one, parses
in C++ with pyarrow against EVENT and checks the rest vectorized; `read_events`, the
per-line one, checks each line against EVENT, NON_NEGATIVE and `_required` in Python
and then the same rules between events, so that it can name the file and line of the
first problem. The fast reader hands the file to the per-line one whenever it meets
anything it does not accept: that either names the bad line or accepts the file (a
fault's value is free-form, and may hold a field that EVENT types otherwise), so every
rejection names a line.
"""
from __future__ import annotations

import codecs
import io
import itertools
import json
import mmap
import os
import threading
import time
import warnings
from pathlib import Path
from queue import Empty, Full, Queue
from typing import Any, TextIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from .arrow import KeyIndex
from .memory import give_back

EVENT_TYPES = ("invoke", "ok", "fail", "info")
COMPLETIONS = ("ok", "fail", "info")
# The kinds of a client's op (docs/history.md, "Operation kinds"): an op of another
# kind would be read as nothing, its records unjudged. The nemesis's are free.
OP_KINDS = ("send", "poll", "seek", "assign", "commit_offsets", "fetch_offsets",
            "begin_txn", "send_offsets", "commit_txn", "abort_txn", "watermarks", "streams")
NEMESIS = "nemesis"
# The nemesis's first op: the cluster the run had (Kafka version, nodes, broker settings).
CLUSTER = "cluster"

# What an event holds and the types of its fields (docs/history.md). Fields not named
# here (a fault's parameters, anything a tool adds) are not checked and not parsed by
# the fast reader. `value` is described as a field of every event, but a missing one
# is read as {} so that tools writing `{}`-valued kinds (commit_txn, abort_txn) may
# leave it out; a fault's `value` is free-form.
I, S = pa.int64(), pa.string()
# A record's `key` is not among its fields: no check reads it, and parsing the keys of
# every poll's records cost a quarter of the fast reader's time (42 -> 55 MB/s for one
# thread on the 1M-event bench history). Left in the file, it is skipped unread.
RECORD = pa.struct([("topic", S), ("partition", I), ("value", I), ("source", I),
                    ("offset", I)])
POSITION = pa.struct([("topic", S), ("partition", I), ("offset", I)])
# A partition as assign and watermarks name it: `offset` is where an assigned consumer
# starts reading (an assign's ok), low/high/lso its watermarks.
PARTITION = pa.struct([("topic", S), ("partition", I), ("offset", I), ("low", I), ("high", I),
                       ("lso", I)])
VALUE = pa.struct([
    ("records", pa.list_(RECORD)), ("isolation", S), ("group", S), ("tid", S),
    ("positions", pa.list_(POSITION)), ("partitions", pa.list_(PARTITION)),
    ("offsets", pa.list_(POSITION)), ("timeout_ms", I), ("kept", pa.list_(PARTITION)),
    ("txn_timeout_ms", I),
    # A streams op's declaration: the application's input and output topics, and what
    # it computes (checkers/streams.py).
    ("input", S), ("output", S), ("topology", S),
])
EVENT = pa.schema([
    ("index", I), ("op", I), ("process", S), ("type", S), ("f", S), ("time", I),
    ("txn", S), ("error", S), ("final", pa.bool_()), ("value", VALUE),
])
REQUIRED = ("index", "op", "process", "type", "f", "time")
# Where a record, position or partition is: never negative in Kafka. A tool that
# writes -1 (or librdkafka's -1001) for "not known" writes null instead.
NON_NEGATIVE = ("partition", "offset", "low", "high", "lso")
# And below 2**53: the checks bound places by floats (NaN where unknown), exact below
# that; Kafka's offsets stay far below it.
PLACE_LIMIT = 2 ** 53
# What an item of a list must hold: the partition it is about (Kafka names one by its
# topic and number), and a record the value that identifies its write.
ITEM_REQUIRED = ("topic", "partition")
RECORD_REQUIRED = (*ITEM_REQUIRED, "value")


def _required(item: pa.StructType) -> tuple[str, ...]:
    return RECORD_REQUIRED if item == RECORD else ITEM_REQUIRED


class HistoryError(Exception):
    """A history that cannot be checked; the message is one line that says what to do."""


class HistoryWriter:
    """Appends events to a history file, one JSON line each, flushed as it happens.

    Many client threads record concurrently, so index and op ids are assigned under one
    lock together with the write: the file order is the index order. Each line is
    flushed (not fsynced) so a crash of the harness loses at most the line being
    written, which the reader then skips as truncated.
    """

    def __init__(self, path: str | os.PathLike, *, clock=time.monotonic_ns) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._index = 0
        self._next_op = 0
        self._open_ops: dict[int, dict[str, Any]] = {}
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @property
    def pending(self) -> list[int]:
        """Ops invoked and not yet completed (the reader will count them as info)."""
        with self._lock:
            return sorted(self._open_ops)

    def invoke(self, process: str, f: str, value: dict | None, txn: str | None = None,
               final: bool = False) -> int:
        """Record that `process` is about to do `f`; returns the op id to complete."""
        if not isinstance(process, str) or not isinstance(f, str):
            raise TypeError("process and f must be strings")
        with self._lock:
            op = self._next_op
            self._next_op += 1
            meta = {"process": process, "f": f, "txn": txn, "final": final}
            self._open_ops[op] = meta
            self._emit(op, "invoke", meta, value, None)
        return op

    def complete(self, op: int, type: str, value: dict | None = None,
                 error: str | None = None) -> None:
        """Record the completion (`ok`, `fail` or `info`) of an invoked op."""
        if type not in COMPLETIONS:
            raise ValueError(f"completion type must be one of {COMPLETIONS}, not {type!r}")
        with self._lock:
            meta = self._open_ops.pop(op, None)
            if meta is None:
                raise ValueError(f"op {op} was never invoked or is already complete")
            self._emit(op, type, meta, value, error)

    def ok(self, op: int, value: dict | None = None) -> None:
        self.complete(op, "ok", value)

    def fail(self, op: int, error: str, value: dict | None = None) -> None:
        self.complete(op, "fail", value, error)

    def info(self, op: int, error: str, value: dict | None = None) -> None:
        self.complete(op, "info", value, error)

    def fault(self, f: str, value: dict | None = None, type: str = "ok",
              error: str | None = None) -> int:
        """Record a fault the nemesis applied as one invoke and its completion."""
        op = self.invoke(NEMESIS, f, value)
        self.complete(op, type, value, error)
        return op

    def _emit(self, op: int, type: str, meta: dict, value: dict | None,
              error: str | None) -> None:
        if self._file is None:
            raise ValueError(f"history {self.path} is closed")
        event: dict[str, Any] = {
            "index": self._index, "op": op, "process": meta["process"], "type": type,
            "f": meta["f"], "time": self._clock(), "value": value if value is not None else {},
        }
        if meta["txn"] is not None:
            event["txn"] = meta["txn"]
        if error is not None:
            event["error"] = error
        if meta["final"]:
            event["final"] = True
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._file.flush()
        self._index += 1


# ---------------------------------------------------------------------------- reading

# pyarrow parses a block at a time and needs whole lines inside one. Blocks of 16 MB
# parse in a third less CPU than of 64 (they stay in the caches); a line longer than
# a block (a poll that returned some hundred thousand records) makes the parse start
# again with blocks eight times larger, up to _MAX_BLOCK.
_BLOCK = 16 << 20
_MAX_BLOCK = 1 << 30
# How many parts a big file is parsed in, at once (None: one per core).
PARTS: int | None = None
_PYTHON_TYPES = {pa.int64(): int, pa.string(): str, pa.bool_(): bool}


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file; pass the history.jsonl a run wrote")
    return path


def _complete_length(path: Path, data, warn: bool = True) -> int:
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


class _Mapped:
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


def _type_name(t) -> str:
    return {int: "an integer of 64 bits", str: "a string of Unicode text",
            bool: "true or false"}[t]


_INT64 = range(-(2**63), 2**63)


def _is(value, t) -> bool:
    # JSON true/false decode to bool, a subclass of int; an index of `true` is wrong.
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool) and value in _INT64
    if t is str:
        # A lone surrogate escape ("\ud800") is valid JSON but not text: no UTF-8
        # string, Arrow's or a report's, can hold it.
        return isinstance(value, str) and _is_text(value)
    return isinstance(value, t)


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_event(event: Any, where: str) -> None:
    """One event against EVENT, as the per-line reader sees it."""
    if not isinstance(event, dict):
        raise HistoryError(f"{where}: an event must be a JSON object; fix the writer")
    for field in EVENT:
        if field.name == "value":
            continue
        x = event.get(field.name)
        if x is None:
            if field.name in REQUIRED:
                raise HistoryError(f"{where}: missing required field {field.name!r}; "
                                   f"every event needs {', '.join(REQUIRED)}")
            continue
        t = _PYTHON_TYPES[field.type]
        if not _is(x, t):
            raise HistoryError(f"{where}: field {field.name!r} must be {_type_name(t)}, "
                               f"not {x!r}")
    value = event.get("value")
    if value is not None and not isinstance(value, dict):
        raise HistoryError(f"{where}: value must be a JSON object, not {value!r}")
    if value and event["process"] != NEMESIS:
        _check_value(event["f"], value, where)


def _a(f: str) -> str:
    """An op kind with its article: "a send", "an assign"."""
    return f"{'an' if f[:1] in 'aeiou' else 'a'} {f}"


def _check_value(f: str, value: dict, where: str) -> None:
    for field in VALUE:
        x = value.get(field.name)
        if x is None:
            continue
        if pa.types.is_list(field.type):
            _check_items(f, field.name, x, field.type.value_type, where)
        elif not _is(x, _PYTHON_TYPES[field.type]):
            raise HistoryError(f"{where}: value.{field.name} of {_a(f)} must be "
                               f"{_type_name(_PYTHON_TYPES[field.type])}, not {x!r}")


def _check_items(f: str, key: str, items, item: pa.StructType, where: str) -> None:
    if not isinstance(items, list):
        raise HistoryError(f"{where}: value.{key} of {_a(f)} must be a list")
    for i, x in enumerate(items):
        if not isinstance(x, dict):
            raise HistoryError(f"{where}: value.{key}[{i}] of {_a(f)} must be an object")
        for name in _required(item):
            if x.get(name) is None:
                raise HistoryError(f"{where}: value.{key}[{i}] of {_a(f)} has no {name}; "
                                   "every item names its topic and partition, and a "
                                   "record its value")
        for field in item:
            y = x.get(field.name)
            t = _PYTHON_TYPES[field.type]
            if y is not None and not _is(y, t):
                raise HistoryError(f"{where}: value.{key}[{i}].{field.name} of {_a(f)} must "
                                   f"be {_type_name(t)}, not {y!r}")
            if field.name in NON_NEGATIVE and y is not None and not 0 <= y < PLACE_LIMIT:
                raise HistoryError(f"{where}: value.{key}[{i}].{field.name} of {_a(f)} must "
                                   f"be 0 or more and below 2**53 (null when not known), "
                                   f"not {y!r}")


def _structure_problem(events: pd.DataFrame, line_of) -> tuple[int, str] | None:
    """The first event (row) that breaks a rule between events, and what is wrong, or
    None. events: the top-level fields, one row per event in file order; line_of(row)
    names an event's line. Both readers use this, so the rules are stated once."""
    n = len(events)
    if n == 0:
        return None
    problems: list[tuple[int, str]] = []

    def first(mask, message) -> None:
        rows = np.flatnonzero(np.asarray(mask, dtype=bool))
        if len(rows):
            problems.append((int(rows[0]), message(int(rows[0]))))

    for name in REQUIRED:
        missing = events[name].isna().to_numpy()
        if missing.any():
            first(missing, lambda r, name=name: f"missing required field {name!r}; "
                  f"every event needs {', '.join(REQUIRED)}")
    if problems:  # the rules below need every field
        return min(problems, key=lambda p: p[0])
    type_, op, index = events["type"], events["op"].to_numpy(), events["index"].to_numpy()
    first(~type_.isin(EVENT_TYPES).to_numpy(),
          lambda r: f"type must be one of {', '.join(EVENT_TYPES)}, not {type_.iloc[r]!r}")
    first(np.r_[False, np.diff(index) <= 0],
          lambda r: f"index {index[r]} does not increase (previous {index[r - 1]}); "
                    "events must be in index order")
    kinds = events["f"]
    unknown = ~kinds.isin(OP_KINDS).to_numpy() & (events["process"] != NEMESIS).to_numpy()
    first(unknown, lambda r: f"f {kinds.iloc[r]!r} is no kind of client op; a client's ops "
                             f"are {', '.join(OP_KINDS)} (docs/history.md), faults and a "
                             "tool's own events are ops of process nemesis")
    rows = np.arange(n)
    invoke = (type_ == "invoke").to_numpy()
    codes, k = _op_codes(op)

    def firsts(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per op, the first row in mask (n if none); and which rows are in mask but
        not their op's first."""
        at = np.flatnonzero(mask)
        out = np.full(k, n, dtype=np.int64)
        # The least row of each op's, without sorting them (np.unique's way took 0.6 s
        # of this function's 1.4 s for 4M events).
        np.minimum.at(out, codes[at], at)
        later = np.zeros(n, dtype=bool)
        later[at[out[codes[at]] != at]] = True
        return out, later

    first_inv, again = firsts(invoke)
    first(again, lambda r: f"op {op[r]} invoked twice (first on line "
                           f"{line_of(int(first_inv[codes[r]]))}); op ids must be unique")
    done = ~invoke
    invoked_at = first_inv[codes]  # n: never invoked
    early = done & ~(invoked_at < rows)
    first(early, lambda r: f"{type_.iloc[r]} of op {op[r]} before any invoke of it; "
                           "every completion follows its invoke")
    first_done, twice = firsts(done)
    first(twice, lambda r: f"op {op[r]} completed twice; an op has exactly one completion")
    at = np.where(invoked_at < n, invoked_at, 0)
    f, process = _codes(events["f"]), _codes(events["process"])
    differs = done & ~early & ((f != f[at]) | (process != process[at]))
    first(differs, lambda r: f"completion of op {op[r]} has f/process "
                             f"{events['f'].iloc[r]}/{events['process'].iloc[r]} but its "
                             f"invoke has {events['f'].iloc[at[r]]}/"
                             f"{events['process'].iloc[at[r]]}")
    time = events["time"].to_numpy()
    first(np.r_[False, np.diff(time) < 0],
          lambda r: f"time {time[r]} is before the previous event's ({time[r - 1]}); time "
                    "is monotonic within a history")
    # A process does one op at a time: each of its invokes after the first comes after
    # the completion of its previous one. (The nemesis records faults and the harness's
    # own events from several threads.)
    names = events["process"]
    mine = invoke & (names != NEMESIS).to_numpy()
    inv = np.flatnonzero(mine)
    inv = inv[np.argsort(process[inv], kind="stable")]  # each process's in file order
    prev, this = inv[:-1], inv[1:]
    overlap = (process[prev] == process[this]) & ~(first_done[codes[prev]] < this)
    previous = dict(zip(this[overlap], prev[overlap]))
    overlapping = np.zeros(n, dtype=bool)
    overlapping[this[overlap]] = True
    first(overlapping,
          lambda r: f"{names.iloc[r]} invoked op {op[r]} before its op {op[previous[r]]} "
                    f"(line {line_of(int(previous[r]))}) completed; a process does one op "
                    "at a time (after an op that never completes, go on as a new process)")
    # The first bad row; of its problems, the first rule's.
    return min(problems, key=lambda p: p[0]) if problems else None


def _op_codes(op: np.ndarray) -> tuple[np.ndarray, int]:
    """Each event's op numbered within 0..k-1, and k, so that the rules index arrays by
    op, without a hash table of millions of ops per rule. Op ids within a span of a few
    times their number (a history's are counted up from 1; the same trade as
    arrow.KeyIndex's) are their own codes, less the least; others are hashed
    (pd.factorize: 0.28 s for 4M events, against 0.01)."""
    if len(op) and op.dtype.kind == "i":
        low, high = int(op.min()), int(op.max())
        if high - low < KeyIndex.SPREAD * len(op):
            return op - low, high - low + 1
    codes = pd.factorize(op)[0]
    return codes, int(codes.max(initial=-1)) + 1


def _codes(column: pd.Series) -> np.ndarray:
    # Equal strings, equal codes: the fast reader's columns come as categoricals, whose
    # codes compare without touching a string.
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy()
    return pd.factorize(column)[0]


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
    path = _existing(path)
    events: list[dict] = []
    linenos: list[int] = []
    with _Mapped(path) as data:
        cut = _complete_length(path, data)
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
            _check_event(event, where)
            events.append(event)
            linenos.append(lineno)
    scalars = pd.DataFrame.from_records(
        [{k: e[k] for k in REQUIRED} for e in events], columns=list(REQUIRED))
    problem = _structure_problem(scalars, lambda r: linenos[r])
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
    path = _existing(path)
    take = sink.take if sink is not None else (lambda batch: batch)
    schema = sink.schema if sink is not None else EVENT
    with _Mapped(path) as data:
        cut = _complete_length(path, data)
    if cut == 0:
        return schema.empty_table()
    block = _BLOCK
    while True:
        try:
            hits: list[int] = []
            table = _parse(path, cut, take, schema, hits, block)
            give_back()  # the blocks parsed and let go, before the rules' arrays
            # Any problem sends the file to the per-line reader, which names its line.
            if _structure_problem(_scalars(table), lambda row: row) is None:
                if hasattr(sink, "fault_lines"):
                    sink.fault_lines = sorted(hits)
                return table
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc) and block < _MAX_BLOCK:
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


# What every fault event's line holds: found in the bytes as they stream by, so that
# the faults' free-form parameters are read from their few lines afterwards.
_FAULT_NEEDLE = f'"{NEMESIS}"'.encode()
_NEWLINE = ord("\n")
# What the per-line reader strips (bytes.strip): a line of only these holds no event.
_WHITESPACE = np.frombuffer(b" \t\n\r\x0b\x0c", np.uint8)


def _parse(path: Path, cut: int, take, schema: pa.Schema, hits: list[int],
           block: int) -> pa.Table:
    # Read as a stream (not a map of the whole file, whose pages would all stay
    # resident while it is parsed): memory is the blocks in flight and what is kept.
    # A big file is cut at line ends into one part per core, each parsed, and each of
    # its blocks passed through `take`, by a thread of its own (both mostly in C++,
    # without the GIL); the parts' batches are then put back in file order.
    ranges = _ranges(path, cut, max(1, min(PARTS or cores(), cut // (2 * block))))
    if len(ranges) == 1:
        with open(path, "rb") as fh:
            source = _Scanned(fh, 0, cut, hits)
            kept = [take(_conform(batch)) for batch in _ahead(_reader(source, block))]
        return _one_per_line(pa.Table.from_batches(kept, schema=schema), path, cut,
                             source.newlines, source.blank, source.high)
    parts: list[list[pa.RecordBatch]] = [[] for _ in ranges]
    newlines = [0] * len(ranges)
    blank = [False] * len(ranges)
    high = [False] * len(ranges)
    errors: list[BaseException] = []
    stop = threading.Event()

    def run(i: int, start: int, end: int) -> None:
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                source = _Scanned(fh, start, end - start, hits)
                for batch in _reader(source, block):
                    if stop.is_set():
                        return
                    parts[i].append(take(_conform(batch)))
                newlines[i], blank[i], high[i] = source.newlines, source.blank, source.high
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(i, a, b), name=f"onceproof-json-{i}",
                                daemon=True) for i, (a, b) in enumerate(ranges)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    finally:
        stop.set()
    if errors:
        raise errors[0]
    return _one_per_line(pa.Table.from_batches([b for part in parts for b in part],
                                                schema=schema), path, cut, sum(newlines),
                         any(blank), any(high))


def _one_per_line(table: pa.Table, path: Path, cut: int, newlines: int,
                  blank: bool, high: bool) -> pa.Table:
    """The table, if it has one row per line of the first `cut` bytes that is not blank,
    and those bytes are UTF-8; else ArrowInvalid. pyarrow's parse reads events with no
    newline between them as rows of their own, where the per-line reader refuses their
    line. `blank`: some line may be blank; `high`: some byte is not ASCII (_Scanned).
    The parse checks the UTF-8 of the fields it keeps only (_conform), not of a
    fault's parameters or of fields no check reads, which the per-line reader refuses
    too."""
    if high:
        _utf8(path, cut)
    with _Mapped(path) as data:
        lines = newlines + (data[cut - 1:cut] != b"\n")
        # With no blank line, the lines are counted already. Else the blank ones are
        # found: one of them could balance a line of two events in the count.
        if (blank or table.num_rows != lines) and table.num_rows != len(_line_starts(data, cut)):
            raise pa.ArrowInvalid("a line holds more than one event")
    return table


def _utf8(path: Path, cut: int) -> None:
    """ArrowInvalid unless the first `cut` bytes of the file are UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as fh:
        left = cut
        while left > 0:
            chunk = fh.read(min(_BLOCK, left))
            if not chunk:
                break
            left -= len(chunk)
            try:
                decoder.decode(chunk, final=left <= 0)
            except UnicodeDecodeError as exc:
                raise pa.ArrowInvalid(f"not UTF-8: {exc}") from None


def _reader(source, block: int):
    opts = pj.ParseOptions(explicit_schema=EVENT, unexpected_field_behavior="ignore")
    return pj.open_json(source, read_options=pj.ReadOptions(block_size=block),
                        parse_options=opts)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _ranges(path: Path, cut: int, n: int) -> list[tuple[int, int]]:
    """The first `cut` bytes of the file in n ranges of whole lines."""
    bounds = [0]
    with open(path, "rb") as fh:
        for i in range(1, n):
            fh.seek(max(bounds[-1], cut * i // n))
            tail = fh.readline()  # the rest of the line the cut falls in
            at = min(fh.tell(), cut) if tail else cut
            if at > bounds[-1]:
                bounds.append(at)
    bounds.append(cut)
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def _ahead(reader):
    """The batches of `reader`, the next one read in a thread while the caller works on
    this one; an error reading is raised here, in order."""
    done = object()
    queue: Queue = Queue(maxsize=1)
    stop = threading.Event()

    def run() -> None:
        try:
            for batch in reader:
                while not stop.is_set():
                    try:
                        queue.put(batch, timeout=0.1)
                        break
                    except Full:
                        continue
                if stop.is_set():
                    return
            queue.put(done)
        except BaseException as exc:
            queue.put(exc)

    thread = threading.Thread(target=run, name="onceproof-json", daemon=True)
    thread.start()
    try:
        while True:
            item = queue.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                queue.get_nowait()
            except Empty:
                pass
            thread.join(0.05)


class _Scanned(io.RawIOBase):
    """The `cut` bytes of an open binary file from its position `start`, as a file to
    read, noting in `hits` the offset of each _FAULT_NEEDLE in them, and counting
    their newlines."""

    def __init__(self, fh, start: int, cut: int, hits: list[int]) -> None:
        self.fh, self.at, self.left, self.hits = fh, start, cut, hits
        self.tail = b""  # the end of the last read, where a needle may begin
        self.newlines = 0
        # Whether some line may be blank (it begins with whitespace, or is empty): only
        # then can a blank line hide a line of two events from the count of lines.
        self.blank = False
        self._line_begins = True  # the next byte read begins a line
        self.high = False  # some byte is not ASCII: the UTF-8 is checked then

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        # pyarrow reads through read(); the bytes it gets are the ones searched.
        data = self.fh.read(self.left if size < 0 else min(size, self.left))
        self.left -= len(data)
        self._count_lines(data)
        keep = len(_FAULT_NEEDLE) - 1
        seam = self.tail + data[:keep]
        at = seam.find(_FAULT_NEEDLE)
        if at >= 0:
            self.hits.append(self.at - len(self.tail) + at)
        at = data.find(_FAULT_NEEDLE)
        while at >= 0:
            self.hits.append(self.at + at)
            at = data.find(_FAULT_NEEDLE, at + 1)
        self.tail = (self.tail + data)[-keep:] if len(data) < keep else data[-keep:]
        self.at += len(data)
        return data

    def _count_lines(self, data: bytes) -> None:
        # numpy, not bytes.count: as fast, it lets the other parts' threads run, and the
        # newlines found say where lines begin.
        if not data:
            return
        a = np.frombuffer(data, np.uint8)
        nl = np.flatnonzero(a == _NEWLINE)
        self.newlines += len(nl)
        if not self.blank:
            begins = a[nl[:-1] + 1] if len(nl) and nl[-1] == len(a) - 1 else a[nl + 1]
            self.blank = bool((self._line_begins and a[0] in _WHITESPACE)
                              or np.isin(begins, _WHITESPACE).any())
        self._line_begins = bool(a[-1] == _NEWLINE)
        if not self.high:
            self.high = bool(a.max() >= 0x80)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _whole_lines(path: Path, cut: int, size: int = _BLOCK):
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


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A parsed batch as EVENT; ArrowInvalid if it holds what the per-line reader
    refuses beyond types (bytes that are not UTF-8 in a string, a null item in a list,
    an item without a field it requires, a negative partition or offset), so that it
    names the line."""
    batch = pa.RecordBatch.from_arrays([batch.column(n).cast(EVENT.field(n).type)
                                        for n in EVENT.names], schema=EVENT)
    # pyarrow's JSON parser passes bytes that are not UTF-8 into its strings.
    batch.validate(full=True)
    value = batch.column("value")
    for i, field in enumerate(VALUE):
        if not pa.types.is_list(field.type):
            continue
        items = pc.list_flatten(value.field(i))
        # A null in a list (`"records": [null]`) parses as a missing item; the per-line
        # reader refuses it: an item is an object.
        if items.null_count:
            raise pa.ArrowInvalid(f"value.{field.name}[] holds null")
        required = _required(field.type.value_type)
        for j, item in enumerate(field.type.value_type):
            if item.name in required and items.field(j).null_count:
                raise pa.ArrowInvalid(f"value.{field.name}[] without {item.name}")
            if item.name in NON_NEGATIVE:
                span = pc.min_max(items.field(j))
                low, high = span["min"].as_py(), span["max"].as_py()
                if low is not None and not (low >= 0 and high < PLACE_LIMIT):
                    raise pa.ArrowInvalid(f"value.{field.name}[].{item.name} out of range")
    return batch


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


def values_at(path: str | os.PathLike, indexes) -> dict[int, dict]:
    """index -> `value` of the events at those indexes (of a history already read and
    found well-formed), each parsed from its own line: for the few events a person
    looks at, without parsing the whole file again. `value` holds all the event
    said, fault parameters included."""
    wanted = sorted({int(i) for i in indexes})
    if not wanted:
        return {}
    path = _existing(path)
    out: dict[int, dict] = {}
    with _Mapped(path) as data:
        starts = _line_starts(data, _complete_length(path, data, warn=False))
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
    path = _existing(path)
    out: dict[int, dict] = {}
    with _Mapped(path) as data:
        cut = _complete_length(path, data, warn=False)
    if near is not None:
        # Read, not mapped: a mapped page brings its neighbours, and thousands of
        # faults spread over a big file would bring most of it.
        with open(path, "rb") as fh:
            lines = {_line_around(fh.fileno(), at, cut) for at in near if at < cut}
        for line in sorted(lines):
            _fault_line(line[1], out)
        return out
    # Searched block by block, so the file is never resident all at once.
    for data in _whole_lines(path, cut, 8 << 20):
        at = data.find(_FAULT_NEEDLE)
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end
            _fault_line(data[start:end], out)
            at = data.find(_FAULT_NEEDLE, end)
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
        return x if _is_text(x) else x.encode("utf-8", "backslashreplace").decode()
    if isinstance(x, dict):
        return {_as_text(k): _as_text(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_as_text(v) for v in x]
    return x


_CHUNK = 64 << 20


def _line_starts(data, cut: int) -> np.ndarray:
    """Byte offset of every non-blank line before `cut` (blank: nothing but whitespace,
    which the per-line reader skips), scanned in chunks so a gigabyte history never
    needs a gigabyte-sized mask."""
    chunk = _CHUNK
    newlines, begins = [], []
    for lo in range(0, cut, chunk):
        a = np.frombuffer(data[lo:min(lo + chunk, cut)], np.uint8)
        nl = np.flatnonzero(a == _NEWLINE)
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
    lead = np.flatnonzero(np.isin(first, _WHITESPACE))
    blank = [i for i in np.union1d(maybe, lead) if not data[starts[i]:ends[i]].strip()]
    return np.delete(starts, blank)


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
