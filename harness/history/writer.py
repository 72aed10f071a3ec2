"""Recording a history: HistoryWriter, which writes one, and Recorder, the calls a
client records through (the writer itself in the harness's process, run/host.py's
Forwarder in a client's own). No pandas, numpy or Arrow: client processes import this."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from .format import COMPLETIONS, NEMESIS


class Recorder:
    """What records ops: `invoke` and `complete`, and the shorthands for each kind of
    completion, said once here for every recorder."""

    def invoke(self, process: str, f: str, value: dict | None, txn: str | None = None,
               final: bool = False) -> int:
        """Record that `process` is about to do `f`; returns the op id to complete."""
        raise NotImplementedError

    def complete(self, op: int, type: str, value: dict | None = None,
                 error: str | None = None) -> None:
        """Record the completion (`ok`, `fail` or `info`) of an invoked op."""
        raise NotImplementedError

    def ok(self, op: int, value: dict | None = None) -> None:
        self.complete(op, "ok", value)

    def fail(self, op: int, error: str, value: dict | None = None) -> None:
        self.complete(op, "fail", value, error)

    def info(self, op: int, error: str, value: dict | None = None) -> None:
        self.complete(op, "info", value, error)


class HistoryWriter(Recorder):
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
