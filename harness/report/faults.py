"""Fault windows: when each fault the nemesis applied was in force.

A history records faults as ops, not intervals, so the window is rebuilt from what
undoes what on the cluster (harness/cluster.py): `heal` enables every proxy and drops
every toxic, so it ends the network faults but leaves nodes as they are; `resume`
ends a pause, `start` ends a kill, stop or wipe, `restart` ends any of those for its
node; the settle phase's `heal {"all": true}` ends everything. A window runs from the
fault's invoke to its undoer's completion, the longest time the fault may have been in
force. A fault that `fail`ed was not applied and opens nothing; one that ended `info`
may have been, so it opens a window marked uncertain.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

NETWORK = frozenset({"partition", "isolate", "latency", "reset_peer", "slicer", "bandwidth",
                     "cut_clients"})
NODE_DOWN = frozenset({"kill", "stop", "wipe"})
PAUSE = frozenset({"pause"})
# undoer -> the faults it ends (matched by node when both name one)
UNDOES = {"heal": NETWORK, "resume": PAUSE, "start": NODE_DOWN, "restart": NODE_DOWN | PAUSE}
OPENS = NETWORK | NODE_DOWN | PAUSE


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
        if self.f in NETWORK:
            return "network"
        if self.f in NODE_DOWN | PAUSE or self.f == "restart":
            return "node"
        return "other"


def label(f: str, value: dict) -> str:
    v = value or {}
    if f == "partition" and isinstance(v.get("sides"), list):
        # docs/plans.md: nodes on no side form one more side, which an empty side names.
        return "partition " + " | ".join(" ".join(map(str, s)) or "rest" for s in v["sides"])
    parts = [f]
    if f == "latency" and "ms" in v:
        parts.append(f"{v['ms']}ms")
    if f == "bandwidth" and "kb_per_s" in v:
        parts.append(f"{v['kb_per_s']}KB/s")
    if "node" in v:
        parts.append(f"n{v['node']}")
    if f == "heal" and v.get("all"):
        parts.append("all")
    return " ".join(parts)


def _node(value: dict):
    node = (value or {}).get("node")
    return None if node in (None, "leader") else node


def windows(faults: pd.DataFrame, end: float) -> list[Window]:
    """faults: the history's nemesis ops with their parameters (report.history.History.
    fault_ops: value, done_value); end: the history's last second."""
    out: list[Window] = []
    open_: list[Window] = []
    nodes: dict[int, object] = {}
    for op in faults.sort_values("start").itertuples(index=False):
        asked = op.value or {}
        # The completion names what the runner resolved ("leader" -> a node id).
        value = op.done_value or asked
        closes_at = op.end if not pd.isna(op.end) else end
        if op.outcome == "fail":
            continue
        if op.f in OPENS:
            w = Window(op.f, label(op.f, value), op.start, end, op.op, None,
                       uncertain=op.outcome == "info")
            nodes[id(w)] = _node(value)
            open_.append(w)
            out.append(w)
            continue
        if op.f == "heal" and value.get("all"):
            ended = list(open_)
        elif op.f in UNDOES:
            node = _node(value)
            ended = [w for w in open_ if w.f in UNDOES[op.f]
                     and (node is None or nodes[id(w)] is None or nodes[id(w)] == node)]
        else:
            ended = None
        if ended is None or (op.f == "restart" and not ended):
            # Not an undoer, or a restart of a running node: in force only while it ran.
            out.append(Window(op.f, label(op.f, value), op.start, closes_at, op.op, op.op,
                              uncertain=op.outcome == "info", point=True))
            continue
        for w in ended:
            w.end, w.closed_by = closes_at, op.op
            open_.remove(w)
    return out

