"""Fault windows: when each fault the nemesis applied was in force.

A history records faults as ops, not intervals, so the window is rebuilt from the fault
registry (workloads/faults.py): a fault that lasts is in force from its invoke until the
completion of an op that undoes it (`heal` ends the network faults; `resume` a pause;
`start` a kill, stop or wipe; `restart` any of those; matched by node when both name
one; the settle phase's `heal {"all": true}` ends everything), the longest time it may
have been in force. An instant fault (restart) is a window of its own op, unless it ended
one. A fault that `fail`ed was not applied and opens nothing; one that ended `info` may
have been, so it opens a window marked uncertain.

What a request fault did to single requests comes as `request` ops (run/toxic_events.py):
a held request is a window from its `hold` to its `release` (matched by fault, link and
correlation id), labelled with what was held and why it was let go; a dropped response
or a copy is a point. Matches alone draw nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from onceproof.workloads import faults as registry


@dataclass
class Window:
    f: str
    label: str
    start: float
    end: float
    op: int
    closed_by: int | None  # op that ended it; None: still in force when the history ends
    uncertain: bool = False
    point: bool = False  # a fault that is over when its op completes (restart, unknown)

    @property
    def category(self) -> str:
        return registry.category(self.f)


def label(f: str, value: dict) -> str:
    return registry.label(f, value)


def _node(value: dict):
    """Where a fault acts, to match an undo to what it undoes: a node id, or a client of
    a client-side fault; None (a target not resolved, or no client named): anywhere."""
    node = (value or {}).get("node")
    client = (value or {}).get("client")
    if isinstance(client, str) and registry.category((value or {}).get("f", "")) == "client":
        return f"client {client}"
    return node if isinstance(node, int) else None


def _request_what(value: dict) -> str:
    client = value.get("client") or value.get("transactional_id") or value.get("client_id")
    return f"{value.get('api', 'request')}" + (f" of {client}" if client else "")


_REQUEST_POINTS = {"drop_response": "response dropped", "duplicate": "sent twice",
                   "unparsed": "not Kafka's framing: passed through"}


def _request_windows(ops: pd.DataFrame, end: float) -> list[Window]:
    """The windows of the request events (REQUEST_EVENT ops), in the order they began."""
    out: list[Window] = []
    held: dict[tuple, Window] = {}
    for op in ops.sort_values("start").itertuples(index=False):
        value = op.done_value or op.value or {}
        event = value.get("event")
        key = (value.get("fault"), value.get("link"), value.get("correlation_id"))
        if event == "hold":
            w = Window(registry.REQUEST_EVENT, f"{_request_what(value)} held {op.start:.1f} s",
                       op.start, end, op.op, None)
            held[key] = w
            out.append(w)
        elif event == "release" and key in held:
            w = held.pop(key)
            w.end, w.closed_by = op.start, op.op
            w.label += f" -> released {op.start:.1f} s ({value.get('reason', '?')})"
        elif event in _REQUEST_POINTS:
            out.append(Window(registry.REQUEST_EVENT,
                              f"{_request_what(value)}: {_REQUEST_POINTS[event]}", op.start,
                              op.start, op.op, op.op, point=True))
    return out


def windows(faults: pd.DataFrame, end: float) -> list[Window]:
    """faults: the history's nemesis ops with their parameters (report.history.History.
    fault_ops: value, done_value); end: the history's last second."""
    requests = faults["f"] == registry.REQUEST_EVENT
    out: list[Window] = _request_windows(faults[requests], end)
    open_: list[Window] = []
    nodes: dict[int, object] = {}
    for op in faults[~requests].sort_values("start").itertuples(index=False):
        asked = op.value or {}
        # The completion names what the runner resolved ("leader" -> a node id).
        value = op.done_value or asked
        closes_at = op.end if not pd.isna(op.end) else end
        if op.outcome == "fail":
            continue
        if registry.lasts(op.f):
            w = Window(op.f, label(op.f, value), op.start, end, op.op, None,
                       uncertain=op.outcome == "info")
            nodes[id(w)] = _node(value)
            open_.append(w)
            out.append(w)
            continue
        kinds, node = registry.ends(op.f, value), _node(value)
        ended = [w for w in open_ if w.f in kinds
                 and (node is None or nodes[id(w)] is None or nodes[id(w)] == node)]
        if not ended and not registry.is_undo(op.f):
            # An instant fault (a restart of a running node) or an event of the harness:
            # in force only while it ran.
            out.append(Window(op.f, label(op.f, value), op.start, closes_at, op.op, op.op,
                              uncertain=op.outcome == "info", point=True))
            continue
        for w in ended:
            w.end, w.closed_by = closes_at, op.op
            open_.remove(w)
    return out

