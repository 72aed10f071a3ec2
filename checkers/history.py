"""Histories: the JSON Lines record of what every client saw (format: docs/history.md).

The writer is the only thing the harness needs to record a run; the reader is the
authority on what a well-formed history is. The checkers' fast loader
(checkers/load.py) parses with pyarrow and falls back to `read_events` whenever it
meets anything it does not accept, so that every rejection names a file and a line.
"""
from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

EVENT_TYPES = ("invoke", "ok", "fail", "info")
COMPLETIONS = ("ok", "fail", "info")
NEMESIS = "nemesis"

# Required fields of every event and the JSON types they must have. `value` is
# described as a field of every event, but a missing one is read as {} so that tools
# writing `{}`-valued kinds (commit_txn, abort_txn) may leave it out.
REQUIRED = {"index": int, "op": int, "process": str, "type": str, "f": str, "time": int}
OPTIONAL = {"txn": str, "error": str, "final": bool}


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
        self._file = None
        self._index = 0
        self._next_op = 0
        self._open_ops: dict[int, dict[str, Any]] = {}
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")

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

def _where(path: Path, lineno: int) -> str:
    return f"{path}:{lineno}"


def _type_name(t) -> str:
    return {int: "an integer", str: "a string", bool: "true or false"}[t]


def _is(value, t) -> bool:
    # JSON true/false decode to bool, a subclass of int; an index of `true` is wrong.
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t)


def _check_fields(event: Any, where: str) -> None:
    if not isinstance(event, dict):
        raise HistoryError(f"{where}: an event must be a JSON object; fix the writer")
    for name, t in REQUIRED.items():
        if name not in event or event[name] is None:
            raise HistoryError(f"{where}: missing required field {name!r}; "
                               "every event needs index, op, process, type, f, time")
        if not _is(event[name], t):
            raise HistoryError(f"{where}: field {name!r} must be {_type_name(t)}, "
                               f"not {event[name]!r}")
    for name, t in OPTIONAL.items():
        if event.get(name) is not None and not _is(event[name], t):
            raise HistoryError(f"{where}: field {name!r} must be {_type_name(t)}, "
                               f"not {event[name]!r}")
    if event["type"] not in EVENT_TYPES:
        raise HistoryError(f"{where}: type must be one of {', '.join(EVENT_TYPES)}, "
                           f"not {event['type']!r}")
    value = event.get("value")
    if value is not None and not isinstance(value, dict):
        raise HistoryError(f"{where}: value must be a JSON object, not {value!r}")
    if value and event["process"] != NEMESIS:
        _check_value(event["f"], value, where)


# Per-kind item lists inside `value` and the typed fields of their items.
_ITEM_FIELDS = {
    "records": {"topic": str, "partition": int, "offset": int, "value": int, "source": int},
    "positions": {"topic": str, "partition": int, "offset": int},
    "partitions": {"topic": str, "partition": int, "low": int, "high": int, "lso": int},
    "offsets": {"topic": str, "partition": int, "offset": int},
}


def _check_value(f: str, value: dict, where: str) -> None:
    for key, fields in _ITEM_FIELDS.items():
        items = value.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise HistoryError(f"{where}: value.{key} of a {f} must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise HistoryError(f"{where}: value.{key}[{i}] of a {f} must be an object")
            for name, t in fields.items():
                x = item.get(name)
                if x is not None and not _is(x, t):
                    raise HistoryError(f"{where}: value.{key}[{i}].{name} of a {f} must be "
                                       f"{_type_name(t)}, not {x!r}")
    for name in ("isolation", "group", "tid"):
        x = value.get(name)
        if x is not None and not isinstance(x, str):
            raise HistoryError(f"{where}: value.{name} of a {f} must be a string, not {x!r}")


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, is_last_nonblank) for each non-blank line."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        previous = None
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            if previous is not None:
                yield previous[0], previous[1], False
            previous = (lineno, text)
        if previous is not None:
            yield previous[0], previous[1], True


def read_events(path: str | os.PathLike) -> list[dict]:
    """All events of a history, in file order, validated.

    A last line that is not valid JSON is taken to be the writer's last, interrupted
    write: it is skipped with a warning. Anything else that is wrong raises HistoryError
    naming the file and line. Ops invoked and never completed are left as they are;
    the loader counts them as `info`.
    """
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file; pass the history.jsonl a run wrote")
    events: list[dict] = []
    invoked: dict[int, tuple[int, dict]] = {}
    completed: set[int] = set()
    last_index = None
    for lineno, text, last in _lines(path):
        where = _where(path, lineno)
        try:
            event = json.loads(text)
        except json.JSONDecodeError as exc:
            if last:
                warnings.warn(f"{where}: skipped a truncated last line ({exc.msg}); "
                              "the writer probably died mid-write", stacklevel=2)
                break
            raise HistoryError(f"{where}: not valid JSON ({exc.msg}); only the last line "
                               "may be truncated, so the file is damaged") from None
        _check_fields(event, where)
        if last_index is not None and event["index"] <= last_index:
            raise HistoryError(f"{where}: index {event['index']} does not increase "
                               f"(previous {last_index}); events must be in index order")
        last_index = event["index"]
        op = event["op"]
        if event["type"] == "invoke":
            if op in invoked:
                raise HistoryError(f"{where}: op {op} invoked twice (first on line "
                                   f"{invoked[op][0]}); op ids must be unique")
            invoked[op] = (lineno, event)
        else:
            if op not in invoked:
                raise HistoryError(f"{where}: {event['type']} of op {op} before any invoke "
                                   "of it; every completion follows its invoke")
            if op in completed:
                raise HistoryError(f"{where}: op {op} completed twice; an op has exactly "
                                   "one completion")
            first = invoked[op][1]
            if first["f"] != event["f"] or first["process"] != event["process"]:
                raise HistoryError(f"{where}: completion of op {op} has f/process "
                                   f"{event['f']}/{event['process']} but its invoke has "
                                   f"{first['f']}/{first['process']}")
            completed.add(op)
        events.append(event)
    return events
