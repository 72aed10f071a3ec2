"""Injected anomaly scenarios, keyed by anomaly type: one per type of the checkers' registry.

`inject` splices a short scripted scenario into a valid history: a few extra processes
(`x*`) on topics of their own (`x`, `xo`) do something Kafka must never do, exactly
once. Own topics, processes, groups and transactional ids keep the rest of the history
untouched, so the only anomaly is the scripted one; the scenario's log is extended by
a final reader (`xfinal`) and by the history's `watermarks` op, as the final phase of
a real run would.
"""
from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any, NamedTuple

from onceproof.checkers.streams import packed

from .model import (
    ABORTED,
    COMMITTED,
    OPEN,
    RC,
    TP,
    Event,
    offset_list,
    read_record,
    record,
    tp_list,
)

X_TOPIC = "x"
X_OUT = "xo"
X_PARTITIONS = 3


class _Script:
    """A scenario: events in order (times are set when spliced), and the log they imply.

    Log entries: ("rec", value, txn or None), ("marker",), or ("hole", value, txn): a
    record the broker acknowledged but no reader can see (lost, or never replicated)."""

    def __init__(self, first_value: int) -> None:
        self.events: list[Event] = []
        self.ops = 0
        self.value_ = first_value
        self.logs: dict[TP, list[tuple]] = {}
        self.status: dict[str, int] = {}
        self.open_first: dict[str, dict[TP, int]] = {}
        # Where the scenario's final reader starts in each partition (default 0).
        self.final_from: dict[TP, int] = {}
        # Partitions no leader answers for in the final phase: not read, no watermarks.
        self.offline: set[TP] = set()
        # How long the watermarks are read after the op before them (a harness settles).
        self.settle_ns = 0
        # Which of its variants a scenario that has several plays (None: its own pick).
        self.variant: int | None = None

    def val(self) -> int:
        self.value_ += 1
        return self.value_

    # -- the log
    def log(self, tp: TP) -> list[tuple]:
        return self.logs.setdefault(tp, [])

    def append(self, tp: TP, value: int, txn: str | None = None, hole: bool = False) -> int:
        log = self.log(tp)
        log.append(("hole" if hole else "rec", value, txn))
        if txn is not None:
            self.status.setdefault(txn, OPEN)
            self.open_first.setdefault(txn, {}).setdefault(tp, len(log) - 1)
        return len(log) - 1

    def reserve(self, tp: TP) -> int:
        """A slot a later append fills, for a broker that hands out offsets out of order."""
        log = self.log(tp)
        log.append(None)
        return len(log) - 1

    def fill(self, tp: TP, off: int, value: int, txn: str | None = None) -> int:
        self.logs[tp][off] = ("rec", value, txn)
        if txn is not None:
            self.status.setdefault(txn, OPEN)
            self.open_first.setdefault(txn, {})[tp] = min(off, self.open_first.get(txn, {}).get(tp, off))
        return off

    def truncate(self, tp: TP, size: int) -> None:
        """The log loses its tail, as a leader elected without it would."""
        del self.log(tp)[size:]

    def end(self, txn: str, commit: bool) -> None:
        for tp in self.open_first.get(txn, {}):
            self.log(tp).append(("marker",))
        self.status[txn] = COMMITTED if commit else ABORTED

    # -- events
    def invoke(self, process: str, f: str, value: dict, txn: str | None = None) -> tuple:
        self.ops += 1
        ev = {"op": self.ops, "process": process, "type": "invoke", "f": f, "value": value}
        if txn is not None:
            ev["txn"] = txn
        self.events.append(ev)
        return (self.ops, process, f, txn)

    def complete(self, h: tuple, value: dict, type_: str = "ok", error: str | None = None) -> None:
        op, process, f, txn = h
        ev = {"op": op, "process": process, "type": type_, "f": f, "value": value}
        if txn is not None:
            ev["txn"] = txn
        if error is not None:
            ev["error"] = error
        self.events.append(ev)

    def op(self, process: str, f: str, value: dict, done: dict | None = None,
           type_: str = "ok", txn: str | None = None, error: str | None = None) -> None:
        h = self.invoke(process, f, value, txn)
        self.complete(h, copy.deepcopy(value if done is None else done), type_, error)

    def send(self, process: str, tp: TP, value: int, off: Any, txn: str | None = None,
             source: int | None = None) -> None:
        self.op(process, "send", {"records": [record(tp, value, source=source)]},
                {"records": [record(tp, value, off, source=source)]}, txn=txn)

    def poll(self, process: str, reads: list[tuple[TP, int, int]], txn: str | None = None,
             isolation: str = RC, group: str | None = None) -> None:
        inv: dict[str, Any] = {"isolation": isolation}
        if group is not None:
            inv["group"] = group
        self.op(process, "poll", inv, {"isolation": isolation, "records": [
            read_record(tp, off, v) for tp, off, v in reads]}, txn=txn)

    def assign(self, process: str, parts: list[TP]) -> None:
        self.op(process, "assign", {"partitions": tp_list(parts)})

    # -- the final phase of the scenario's topics
    def final_events(self) -> tuple[list[Event], list[dict]]:
        parts = sorted(tp for tp in self.logs if tp not in self.offline)
        recs = []
        for tp in parts:
            for off, e in enumerate(self.logs[tp]):
                visible = (e is not None and e[0] == "rec"
                           and (e[2] is None or self.status[e[2]] == COMMITTED))
                if off >= self.final_from.get(tp, 0) and visible:
                    recs.append(read_record(tp, off, e[1]))
        save, self.events = self.events, []
        self.assign("xfinal", parts)
        self.op("xfinal", "seek", {"positions": offset_list(
            {tp: self.final_from.get(tp, 0) for tp in parts})})
        h = self.invoke("xfinal", "poll", {"isolation": RC})
        self.complete(h, {"isolation": RC, "records": recs})
        for ev in self.events[-2:]:
            ev["final"] = True
        final, self.events = self.events, save
        marks = []
        for tp in parts:
            hw = len(self.logs[tp])
            firsts = [f[tp] for t, f in self.open_first.items() if self.status[t] == OPEN and tp in f]
            marks.append({"topic": tp[0], "partition": tp[1], "low": 0, "high": hw,
                          "lso": min(firsts) if firsts else hw})
        marks += [{"topic": tp[0], "partition": tp[1], "low": None, "high": None, "lso": None}
                  for tp in sorted(self.offline)]
        return final, marks


def _x(p: int) -> TP:
    return (X_TOPIC, p)


def _sc_duplicate(s: _Script) -> None:
    v = s.val()
    s.send("x0", _x(0), v, s.append(_x(0), v))
    s.append(_x(0), v)  # a retry without idempotence appends it again


def _sc_inconsistent_offset(s: _Script) -> None:
    v, w = s.val(), s.val()
    off = s.append(_x(0), v)
    s.send("x0", _x(0), v, off)
    # w's send is unknown and did not land; yet one reader sees w where v is.
    s.op("x0", "send", {"records": [record(_x(0), w)]}, type_="info", error="REQUEST_TIMED_OUT")
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), off, w)])


def _sc_lost_write(s: _Script) -> None:
    v, u = s.val(), s.val()
    off = s.append(_x(0), v, hole=True)  # acknowledged, then lost from the log
    s.send("x0", _x(0), v, off)
    s.send("x0", _x(0), u, s.append(_x(0), u))
    # A reader goes over v's offset and finds only u. Where it starts is recorded as a
    # seek, or (for odd values, so both ways are exercised) by the assign's ok.
    if v % 2:
        s.op("x1", "assign", {"partitions": tp_list([_x(0)])},
             {"partitions": [{**tp_list([_x(0)])[0], "offset": off}]})
    else:
        s.assign("x1", [_x(0)])
        s.op("x1", "seek", {"positions": offset_list({_x(0): off})})
    s.poll("x1", [(_x(0), off + 1, u)])
    # The final reader starts past it, so the loss is not also `unseen` (which is a
    # lost write that the final reads went over).
    s.final_from[_x(0)] = off + 1


def _sc_unseen(s: _Script) -> None:
    a, v = s.val(), s.val()
    s.send("x0", _x(0), a, s.append(_x(0), a))
    s.send("x0", _x(0), v, s.append(_x(0), v))
    # The log ends before v: the final reads cannot see it, and no reader went over it
    # (which would make it a lost_write).
    s.truncate(_x(0), 1)


def _sc_aborted_read(s: _Script) -> None:
    v = s.val()
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    off = s.append(_x(0), v, "x0/1")
    s.send("x0", _x(0), v, off, txn="x0/1")
    s.op("x0", "abort_txn", {}, txn="x0/1")
    s.end("x0/1", commit=False)
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), off, v)])


def _sc_precommitted_read(s: _Script) -> None:
    v = s.val()
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    off = s.append(_x(0), v, "x0/1")
    s.send("x0", _x(0), v, off, txn="x0/1")
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), off, v)])
    s.op("x0", "commit_txn", {}, txn="x0/1")
    s.end("x0/1", commit=True)


def _sc_torn_txn(s: _Script) -> None:
    v1, v2, u = s.val(), s.val(), s.val()
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.send("x0", _x(0), v1, s.append(_x(0), v1, "x0/1"), txn="x0/1")
    off2 = s.append(_x(1), v2, "x0/1", hole=True)
    s.send("x0", _x(1), v2, off2, txn="x0/1")
    # Unknown outcome, but v1 being visible (to the final reader) proves the commit, and
    # v2 missing tears it. So v2 is an acknowledged write of a committed transaction that
    # a reader went over: also a lost_write (IMPLIES). The final reader starts past it,
    # so it is not also unseen.
    s.op("x0", "commit_txn", {}, type_="info", error="REQUEST_TIMED_OUT", txn="x0/1")
    s.end("x0/1", commit=True)
    # A later write, and a read_committed reader that goes over v2's offset to it.
    off_u = s.append(_x(1), u)
    s.send("x2", _x(1), u, off_u)
    s.assign("x1", [_x(1)])
    s.op("x1", "seek", {"positions": offset_list({_x(1): off2})})
    s.poll("x1", [(_x(1), off_u, u)])
    s.final_from[_x(1)] = off2 + 1


def _sc_poll_skip(s: _Script) -> None:
    """One of three skips, by the first value (so each is exercised): over a value a
    poll returned; across an abort, by a consumer that goes on from its aborted reads
    instead of rewinding (seen at its first read after the abort, itself aborted: no
    committed read follows); over a value known only from its ack (the log lost it:
    also a lost_write, IMPLIES)."""
    kind = (s.value_ + 1) % 3 if s.variant is None else s.variant
    vs = [s.val() for _ in range(3)]
    offs = [s.append(_x(0), v, hole=kind == 2 and i == 1) for i, v in enumerate(vs)]
    for v, off in zip(vs, offs):
        s.send("x0", _x(0), v, off)
    s.assign("x1", [_x(0)])
    if kind == 1:
        for t, (off, v) in enumerate(zip(offs, vs)):
            txn = f"x1/{t}"
            s.op("x1", "begin_txn", {"tid": "tx-x1"}, txn=txn)
            s.poll("x1", [(_x(0), off, v)], txn=txn)
            s.op("x1", "commit_txn" if t == 0 else "abort_txn", {}, txn=txn)
        return
    s.poll("x1", [(_x(0), offs[0], vs[0])])
    s.poll("x1", [(_x(0), offs[2], vs[2])])
    if kind == 2:
        # The final reader starts past the lost value, so it is not also unseen.
        s.final_from[_x(0)] = offs[2]


def _sc_nonmonotonic_poll(s: _Script) -> None:
    vs = [s.val() for _ in range(2)]
    offs = [s.append(_x(0), v) for v in vs]
    for v, off in zip(vs, offs):
        s.send("x0", _x(0), v, off)
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), offs[1], vs[1]), (_x(0), offs[0], vs[0])])


def _sc_nonmonotonic_send(s: _Script) -> None:
    a, b = s.val(), s.val()
    slot = s.reserve(_x(0))
    s.send("x0", _x(0), a, s.append(_x(0), a))
    s.send("x0", _x(0), b, s.fill(_x(0), slot, b))


def _sc_commit_order(s: _Script) -> None:
    a, b = s.val(), s.val()
    slot = s.reserve(_x(0))
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.send("x0", _x(0), a, s.append(_x(0), a, "x0/1"), txn="x0/1")
    s.op("x0", "commit_txn", {}, txn="x0/1")
    s.end("x0/1", commit=True)
    # Begun after x0/1 committed, yet ordered before it in the log.
    s.op("x1", "begin_txn", {"tid": "tx-x1"}, txn="x1/1")
    s.send("x1", _x(0), b, s.fill(_x(0), slot, b, "x1/1"), txn="x1/1")
    s.op("x1", "commit_txn", {}, txn="x1/1")
    s.end("x1/1", commit=True)


def _sc_g0(s: _Script) -> None:
    a, b, c, d = (s.val() for _ in range(4))
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.op("x1", "begin_txn", {"tid": "tx-x1"}, txn="x1/1")
    s.send("x0", _x(0), a, s.append(_x(0), a, "x0/1"), txn="x0/1")
    s.send("x1", _x(0), b, s.append(_x(0), b, "x1/1"), txn="x1/1")
    s.send("x1", _x(1), c, s.append(_x(1), c, "x1/1"), txn="x1/1")
    s.send("x0", _x(1), d, s.append(_x(1), d, "x0/1"), txn="x0/1")
    h0 = s.invoke("x0", "commit_txn", {}, txn="x0/1")
    h1 = s.invoke("x1", "commit_txn", {}, txn="x1/1")
    s.end("x0/1", commit=True)
    s.complete(h0, {})
    s.end("x1/1", commit=True)
    s.complete(h1, {})


def _sc_g1c(s: _Script) -> None:
    a, b, c = s.val(), s.val(), s.val()
    s.assign("x0", [_x(1)])
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.op("x1", "begin_txn", {"tid": "tx-x1"}, txn="x1/1")
    slot = s.reserve(_x(0))
    s.send("x1", _x(0), b, s.append(_x(0), b, "x1/1"), txn="x1/1")
    coff = s.append(_x(1), c, "x1/1")
    s.send("x1", _x(1), c, coff, txn="x1/1")
    s.op("x1", "commit_txn", {}, txn="x1/1")
    s.end("x1/1", commit=True)
    s.poll("x0", [(_x(1), coff, c)], txn="x0/1")  # wr x1/1 -> x0/1
    # ww x0/1 -> x1/1: a lands before b although a was sent after b was acknowledged.
    # Concurrent transactions may form ww + wr cycles (notes); this one also
    # contradicts real time, which makes it a violation.
    s.send("x0", _x(0), a, s.fill(_x(0), slot, a, "x0/1"), txn="x0/1")
    s.op("x0", "commit_txn", {}, txn="x0/1")
    s.end("x0/1", commit=True)


def _sc_g_single(s: _Script) -> None:
    n, b, c, d = (s.val() for _ in range(4))
    noff = s.append(_x(0), n)
    s.send("x2", _x(0), n, noff)
    s.assign("x0", [_x(0)])
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.op("x1", "begin_txn", {"tid": "tx-x1"}, txn="x1/1")
    slot = s.reserve(_x(1))
    s.poll("x0", [(_x(0), noff, n)], txn="x0/1")
    s.send("x0", _x(1), d, s.append(_x(1), d, "x0/1"), txn="x0/1")
    # rw x0/1 -> x1/1: x0/1 read x[0] up to n, x1/1 writes after it.
    s.send("x1", _x(0), b, s.append(_x(0), b, "x1/1"), txn="x1/1")
    # ww x1/1 -> x0/1: c lands before d although c was sent after d was acknowledged,
    # which no real-time order allows (else the cycle would be a note: read skew).
    s.send("x1", _x(1), c, s.fill(_x(1), slot, c, "x1/1"), txn="x1/1")
    s.op("x1", "commit_txn", {}, txn="x1/1")
    s.end("x1/1", commit=True)
    s.op("x0", "commit_txn", {}, txn="x0/1")
    s.end("x0/1", commit=True)


def _sc_offset_regression(s: _Script) -> None:
    vs = [s.val() for _ in range(2)]
    for v in vs:
        s.send("x0", _x(0), v, s.append(_x(0), v))
    for o in (2, 1):
        s.op("x1", "commit_offsets", {"group": "g-x1", "offsets": offset_list({_x(0): o})})


def _sc_stale_offset_fetch(s: _Script) -> None:
    vs = [s.val() for _ in range(2)]
    for v in vs:
        s.send("x0", _x(0), v, s.append(_x(0), v))
    for o in (1, 2):
        s.op("x1", "commit_offsets", {"group": "g-x1", "offsets": offset_list({_x(0): o})})
    s.op("x2", "fetch_offsets", {"group": "g-x1", "partitions": tp_list([_x(0)])},
         {"group": "g-x1", "offsets": offset_list({_x(0): 1})})


def _sc_rewind_mismatch(s: _Script) -> None:
    vs = [s.val() for _ in range(3)]
    offs = [s.append(_x(0), v) for v in vs]
    for v, off in zip(vs, offs):
        s.send("x0", _x(0), v, off)
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), o, v) for o, v in zip(offs, vs)])
    s.op("x1", "seek", {"positions": offset_list({_x(0): offs[1]})})
    # After seeking to offs[1] the next read must be vs[1]; it is vs[2].
    s.poll("x1", [(_x(0), offs[2], vs[2])])


def _pipe_scenario(s: _Script, outputs: Callable[[list[int]], list[int]],
                   beside: bool = False) -> None:
    """Pipeline xp (group g-xp) turns inputs into `outputs(inputs)`, in one committed
    transaction; `beside`: then pipeline xq, of group g-xq, turns each input into one
    output in the same topic, which is no duplicate of xp's and stands for none of
    its lost ones (each group is a pipeline of its own, checkers/pipeline.py)."""
    ins = [s.val() for _ in range(2)]
    offs = [s.append(_x(0), v) for v in ins]
    for v, off in zip(ins, offs):
        s.send("x0", _x(0), v, off)
    _pipe_txn(s, "xp", ins, offs, outputs(ins))
    if beside:
        _pipe_txn(s, "xq", ins, offs, ins)


def _pipe_txn(s: _Script, process: str, ins: list[int], offs: list[int],
              sources: list[int]) -> None:
    txn, group = f"{process}/1", f"g-{process}"
    s.assign(process, [_x(0)])
    s.op(process, "begin_txn", {"tid": f"tx-{process}"}, txn=txn)
    s.poll(process, [(_x(0), o, v) for o, v in zip(offs, ins)], txn=txn, group=group)
    recs, done = [], []
    for src in sources:
        v = s.val()
        tp = (X_OUT, 0)
        recs.append(record(tp, v, source=src))
        done.append(record(tp, v, s.append(tp, v, txn), source=src))
    s.op(process, "send", {"records": recs}, {"records": done}, txn=txn)
    s.op(process, "send_offsets", {"group": group, "offsets": offset_list({_x(0): offs[-1] + 1})},
         txn=txn)
    s.op(process, "commit_txn", {}, txn=txn)
    s.end(txn, commit=True)


def _sc_duplicate_output(s: _Script) -> None:
    _pipe_scenario(s, lambda ins: [ins[0], ins[0], ins[1]])


def _sc_lost_input(s: _Script) -> None:
    _pipe_scenario(s, lambda ins: [ins[0]], beside=True)


def _streams_app(s: _Script, topology: str, outputs: Callable[[list[int]], list[tuple]],
                 aborted: bool = False) -> None:
    """Application xs (group g-xs, its reads and writes unseen: checkers/streams.py)
    turns three committed inputs of x/0 into `outputs(inputs)`, each (source, count,
    sum) written to xo/0 as its value packs them, by no send; `aborted`: a fourth input
    is written by a transaction that aborts. Then the final streams op finds the
    group's offset past every input."""
    s.op("xs", "streams", {"group": "g-xs", "input": X_TOPIC, "output": X_OUT,
                           "topology": topology, "guarantee": "exactly_once_v2"},
         {"state": "RUNNING", "partitions": tp_list([_x(0)])})
    ins = [s.val() for _ in range(3)]
    for v in ins:
        s.send("x0", _x(0), v, s.append(_x(0), v))
    if aborted:
        z = s.val()
        s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
        s.send("x0", _x(0), z, s.append(_x(0), z, "x0/1"), txn="x0/1")
        s.op("x0", "abort_txn", {}, txn="x0/1")
        s.end("x0/1", commit=False)
        ins.append(z)
    for source, count, total in outputs(ins):
        s.append((X_OUT, 0), packed(source, count, total))
    h = s.invoke("xfinal", "streams", {"group": "g-xs", "input": X_TOPIC, "output": X_OUT,
                                       "topology": topology})
    s.complete(h, {"group": "g-xs", "offsets": offset_list({_x(0): len(s.log(_x(0)))})})
    for ev in s.events[-2:]:
        ev["final"] = True


def _folds(ins: list[int]) -> list[tuple]:
    """Each input with the count and sum of those up to it: a correct fold."""
    return [(v, i + 1, sum(ins[:i + 1])) for i, v in enumerate(ins)]


def _sc_streams_duplicate_output(s: _Script) -> None:
    _streams_app(s, "map", lambda ins: [(ins[0], 0, 0), (ins[1], 0, 0), (ins[1], 0, 0),
                                        (ins[2], 0, 0)])


def _sc_streams_lost_input(s: _Script) -> None:
    _streams_app(s, "map", lambda ins: [(ins[0], 0, 0), (ins[2], 0, 0)])


def _sc_streams_uncommitted_input(s: _Script) -> None:
    _streams_app(s, "map", lambda ins: [(v, 0, 0) for v in ins], aborted=True)


def _sc_wrong_fold(s: _Script) -> None:
    # The third output counts the second input twice, as a fold whose state was saved
    # but whose output was lost, then redone, would.
    def outputs(ins: list[int]) -> list[tuple]:
        right = _folds(ins)
        return right[:2] + [(ins[2], 4, sum(ins) + ins[1])]
    _streams_app(s, "fold", outputs)


def _sc_unattributed_read(s: _Script) -> None:
    a, z = s.val(), s.val()  # z: no send anywhere carries it
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.send("x0", _x(0), a, s.append(_x(0), a, "x0/1"), txn="x0/1")
    s.op("x0", "commit_txn", {}, txn="x0/1")
    s.end("x0/1", commit=True)
    # The control marker's offset holds no record, so no write can explain z there.
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), 1, z)])


def _sc_corrupt_value(s: _Script) -> None:
    v = s.val()
    off = s.append(_x(0), v)
    rec = {**record(_x(0), v), "size": 1024}
    s.op("x0", "send", {"records": [rec]}, {"records": [{**rec, "offset": off}]})
    # One reader gets the value with a byte changed (a fetch response, a client's
    # buffer); the log holds it as written, so the final reads find it whole.
    s.assign("x1", [_x(0)])
    s.op("x1", "poll", {"isolation": RC}, {"isolation": RC, "records": [
        {**read_record(_x(0), off, v), "corrupt": 517}]})


def _sc_hanging_txn(s: _Script) -> None:
    v = s.val()
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.send("x0", _x(0), v, s.append(_x(0), v, "x0/1"), txn="x0/1")
    # The producer is gone and the coordinator never aborts: the LSO stays behind,
    # past the transaction's timeout (Kafka's default, 60 s) and 30 s more.
    s.settle_ns = 120 * 10**9


def _sc_late_return(s: _Script) -> None:
    # A poll given 1 s that returns 30 s later from an empty partition; it reads
    # nothing, so it is a stall and nothing else. The clock jumps at its completion:
    # later events keep their order.
    s.log(_x(0))
    s.assign("x0", [_x(0)])
    h = s.invoke("x0", "poll", {"isolation": RC, "timeout_ms": 1000})
    s.complete(h, {"isolation": RC, "records": []})
    s.events[-1]["late_by"] = 30 * 10**9


def _sc_unrecovered_partition(s: _Script) -> None:
    # An acknowledged write, then the partition stays without a leader to the end; the
    # other partition is read as usual.
    v, w = s.val(), s.val()
    s.send("x0", _x(0), v, s.append(_x(0), v))
    s.send("x0", _x(1), w, s.append(_x(1), w))
    s.offline.add(_x(0))


def _sc_unreadable_offsets(s: _Script) -> None:
    # The harness's final fetch of a group's committed offsets never completed: the
    # coordinator kept answering that an offset commit is still pending.
    s.log(_x(0))
    h = s.invoke("xfinal", "fetch_offsets", {"group": "gx", "partitions": tp_list([_x(0)]),
                                             "timeout_ms": 80_000})
    s.complete(h, {}, "fail", "Failed to get committed offsets: Local: Timed out")
    for ev in s.events[-2:]:
        ev["final"] = True


# One scenario per type of the checkers' registry (checkers/registry.py), which
# tests/test_synth.py holds this table to.
SCENARIOS: dict[str, Callable[[_Script], None]] = {
    "duplicate": _sc_duplicate,
    "inconsistent_offset": _sc_inconsistent_offset,
    "unattributed_read": _sc_unattributed_read,
    "corrupt_value": _sc_corrupt_value,
    "lost_write": _sc_lost_write,
    "unseen": _sc_unseen,
    "hanging_txn": _sc_hanging_txn,
    "aborted_read": _sc_aborted_read,
    "precommitted_read": _sc_precommitted_read,
    "torn_txn": _sc_torn_txn,
    "poll_skip": _sc_poll_skip,
    "nonmonotonic_poll": _sc_nonmonotonic_poll,
    "rewind_mismatch": _sc_rewind_mismatch,
    "nonmonotonic_send": _sc_nonmonotonic_send,
    "commit_order": _sc_commit_order,
    "g0": _sc_g0,
    "g1c": _sc_g1c,
    "g_single": _sc_g_single,
    "offset_regression": _sc_offset_regression,
    "stale_offset_fetch": _sc_stale_offset_fetch,
    "duplicate_output": _sc_duplicate_output,
    "lost_input": _sc_lost_input,
    "streams_duplicate_output": _sc_streams_duplicate_output,
    "streams_lost_input": _sc_streams_lost_input,
    "streams_uncommitted_input": _sc_streams_uncommitted_input,
    "wrong_fold": _sc_wrong_fold,
    "late_return": _sc_late_return,
    "unrecovered_partition": _sc_unrecovered_partition,
    "unreadable_offsets": _sc_unreadable_offsets,
}

# The injected types that do not make a history invalid: the g0 scenario is a write cycle
# of two overlapping transactions, which Kafka allows; late_return, unrecovered_partition
# and unreadable_offsets are stalls. (g1c and g_single are injected as violations: cycles no real-time order
# allows; the checkers report realizable ones, which valid histories contain, as notes.)
NOTES = frozenset({"g0", "late_return", "unrecovered_partition", "unreadable_offsets"})

# Each scenario is built so that its anomaly is no other type under the checkers'
# definitions (docs/checkers.md), which is where most of their shape comes from, but
# for the other types the registry says one anomaly of its type may also be
# (checkers/registry.py, IMPLIES), which tests/test_synth_property.py allows beside it:
# - lost_write: a lost write that final reads went over is also `unseen`, so the final
#   reader starts past it and a non-final reader's seek and read go over it; that
#   reader skipped the value its ack placed there, a poll_skip (implied);
# - poll_skip: one of its skips is over a value known only from its ack, which the log
#   lost: a lost_write too (implied);
# - unseen: the log ends before the acked write (high watermark below it), so no reader
#   went over it, which would make it a lost_write;
# - torn_txn: a write visible to read_committed readers proves the transaction committed
#   (even when its commit_txn ended in info), so the missing write, acknowledged and
#   gone over by a reader, is necessarily a lost_write too, and that reader's skip of
#   it a poll_skip (both implied; were it in the read log, a poll_skip or
#   rewind_mismatch); the final reader starts past it, so not unseen;
# - rewind_mismatch: the skip comes right after a seek, which poll_skip leaves to it;
# - unattributed_read: the value sits at a control marker's offset, which no write
#   holds, so it is not also inconsistent_offset, and (unattributable, so invisible)
#   the final reader passing over it is no poll_skip.


def _max_value(events: list[Event]) -> int:
    best = 0
    for ev in events:
        for r in (ev.get("value") or {}).get("records", ()):
            # (An application's output packs its source's value: checkers/streams.py.)
            if isinstance(r.get("value"), int) and r["value"] < 2**32:
                best = max(best, r["value"])
    return best


class Scene(NamedTuple):
    """One scenario, played alone: its ops in order (op ids from 1, no index or time; an
    event with `late_by` comes that many ns after the one before it), its final reader's
    ops, the partitions the `watermarks` op after them answers with (topics `x`, `xo`),
    and how long after the op before it that op reads them (0: at once)."""
    events: list[Event]
    final: list[Event]
    marks: list[dict]
    settle_ns: int


def scene(kind: str, first_value: int, variant: int | None = None) -> Scene:
    """The scenario of type `kind`, its values from `first_value` + 1 (`variant`: which
    of its variants, for one that has several)."""
    if kind not in SCENARIOS:
        raise ValueError(f"unknown anomaly {kind!r}; known: {', '.join(SCENARIOS)}")
    script = _Script(first_value)
    script.variant = variant
    SCENARIOS[kind](script)
    final, marks = script.final_events()
    return Scene(script.events, final, marks, script.settle_ns)


def inject(events: list[Event], kind: str, rng: random.Random,
           variant: int | None = None) -> list[Event]:
    """A copy of a valid history with exactly one anomaly of type `kind` added (`variant`:
    which of its scenario's variants, for one that has several).

    The scenario's ops are slotted in at random points of the main phase (before the
    first op of a final reader), its final read just before the `watermarks` op, and its
    partitions are added to that op's answer."""
    scripted, final, marks, settle_ns = scene(kind, _max_value(events) + 1000, variant)
    base = copy.deepcopy(events)

    finals = {ev["process"] for ev in base if ev.get("final")}
    start = next((i for i, ev in enumerate(base) if ev["process"] in finals), len(base))
    wm = next((i for i, ev in enumerate(base) if ev["f"] == "watermarks" and ev["type"] == "invoke"),
              len(base))
    for ev in base:
        if ev["f"] == "watermarks" and ev["type"] == "ok":
            ev["value"]["partitions"].extend(marks)
    if settle_ns and wm < len(base):
        base[wm]["late_by"] = settle_ns

    ops = max((ev["op"] for ev in base), default=-1) + 1
    names = {ev["process"] for ev in base}
    for ev in scripted + final:
        ev["op"] += ops
        if ev["process"] in names:
            raise ValueError(f"process {ev['process']} of the scenario is already in the history")

    slots = sorted(rng.randint(0, start) for _ in scripted)
    out: list[Event] = []
    k = 0
    for i, ev in enumerate(base):
        while k < len(slots) and slots[k] == i:
            out.append(scripted[k])
            k += 1
        if i == wm:
            out.extend(final)
        out.append(ev)
    out.extend(scripted[k:])
    if wm == len(base):
        out.extend(final)

    prev = None
    for i, ev in enumerate(out):
        ev["index"] = i
        # Spliced events take the time of their predecessor plus one; the base's gaps of
        # at least 1000 ns keep everything strictly increasing.
        t = ev.get("time")
        t = (prev + 1 if prev is not None else 0) if t is None else t
        if "late_by" in ev:
            t = (prev or 0) + ev.pop("late_by")
        if prev is not None and t <= prev:
            t = prev + 1
        ev["time"] = t
        prev = t
    order = ("index", "op", "process", "type", "f", "time", "value")
    return [{**{k: ev[k] for k in order}, **{k: v for k, v in ev.items() if k not in order}}
            for ev in out]
