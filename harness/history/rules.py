"""What a well-formed history is, stated once for both readers: each event against the
schema EVENT, the fields never negative (NON_NEGATIVE) and what an item of a list needs
(`check_event`, which the per-line reader applies line by line; the fast one checks
the same in Arrow, parse.py), and the rules between events (`structure_problem`),
which both apply."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .format import (
    EVENT_TYPES,
    NEMESIS,
    NON_NEGATIVE,
    OP_KINDS,
    PLACE_LIMIT,
    REQUIRED,
    HistoryError,
    is_text,
)
from .schema import EVENT, VALUE, required_of

_PYTHON_TYPES = {pa.int64(): int, pa.string(): str, pa.bool_(): bool}
# How many codes per op the span of op ids may hold before hashing them is smaller
# (_op_codes).
_SPREAD = 4


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
        return isinstance(value, str) and is_text(value)
    return isinstance(value, t)


def check_event(event: Any, where: str) -> None:
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
        for name in required_of(item):
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


def structure_problem(events: pd.DataFrame, line_of) -> tuple[int, str] | None:
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
        # The least row of each op's, without sorting them (np.unique's way took nearly
        # half of this function's time: docs/performance.md, "Figures behind the code").
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
    checkers' KeyIndex) are their own codes, less the least; others are hashed
    (pd.factorize, many times slower: docs/performance.md, "Figures behind the code")."""
    if len(op) and op.dtype.kind == "i":
        low, high = int(op.min()), int(op.max())
        if high - low < _SPREAD * len(op):
            return op - low, high - low + 1
    codes = pd.factorize(op)[0]
    return codes, int(codes.max(initial=-1)) + 1


def _codes(column: pd.Series) -> np.ndarray:
    # Equal strings, equal codes: the fast reader's columns come as categoricals, whose
    # codes compare without touching a string.
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy()
    return pd.factorize(column)[0]
