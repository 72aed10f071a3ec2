"""A reference model of Kafka that synthesizes valid histories, and injects single anomalies.

Why it exists: the checkers must accept everything Kafka may legitimately do (gaps left by
aborted records and control markers, a last stable offset held back by an open
transaction, unknown outcomes, rewinds, write cycles between concurrent transactions) and
must name each anomaly they claim to find. Histories from a real cluster cannot prove
either, because nobody knows what they should contain. A history drawn from this model is
valid by construction, and `inject` adds one known anomaly to it, so a property test can
check the checkers against the model (tests/test_synth_property.py).

The model
---------
Each partition is a real log: offset -> record (value, and the transaction that wrote it,
if any) or control marker. Clients are Python generators, one per process, that yield an
`Op` and get its completion back. A scheduler interleaves them: at each step it picks a
process and either invokes its next op or completes its pending one, so an op of one
process may be invoked while another's is still pending. An op's effect on the model
happens when it completes; that is the moment a real op "happens" between its invoke and
its completion, and it keeps reads behind the writes they see.

What the model promises, which is what Kafka promises:
- appends get the next offset; a record is never appended twice, even when its send is
  `info` (an idempotent producer); `fail` sends never land;
- a transaction's records and its commit or abort marker occupy offsets; the last stable
  offset (LSO) of a partition is the first offset of its earliest open transaction;
- read_committed polls return records below the LSO that are not transactional or whose
  transaction committed, in offset order per partition; read_uncommitted polls return
  every record below the high watermark; both skip markers;
- a transaction commits or aborts as a whole, at the completion of commit_txn (`ok`, or
  `info` when the model decides it landed) or abort_txn; a transaction its producer left
  open is aborted when the same transactional id begins again (fencing) or when the
  coordinator times it out before the final phase;
- committed group offsets change only by commit_offsets (applied at `ok`, maybe at
  `info`) or by a committed transaction's send_offsets; fetch_offsets returns them.

Roles of processes (names say the role): `p*` idempotent producers (topics `t`, `in`),
`tp*` transactional producers (`tx`, `in`), `c*` consumers (alternating read_committed,
on every topic, and read_uncommitted, on `t` unless Shape.ru_everywhere; each with its
own group), `pipe0` a consume-transform-produce pipeline from `in` to `out`, and
`nemesis` (faults, which the model ignores: it is a valid Kafka under any fault).

The pipeline polls once per transaction, like Kafka: it may take part of a committed
transaction's input (the rest held back by the LSO in another partition) and see the
rest in its next transaction. That is read skew, which Kafka's read_committed allows:
the checkers must report the resulting cycles as notes, not violations. With
Shape.whole_txn_reads it cuts its reads so each input transaction is taken whole.

Final phase: producers stop, the coordinator aborts abandoned transactions, the pipeline
drains its input and commits, then `final0` reads every partition from offset 0 up to the
high watermark under read_committed (polls marked `final`) and reads the watermarks.
"""
from __future__ import annotations

import copy
import json
import random
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RC = "read_committed"
RU = "read_uncommitted"

TOPIC_PLAIN = "t"    # written by idempotent producers only
TOPIC_TXN = "tx"     # written by transactional producers only
TOPIC_IN = "in"      # both; the pipeline's input
TOPIC_OUT = "out"
PIPE_GROUP = "g-pipe"

# Kinds of log entries besides a transaction's index (>= 0).
_PLAIN = -1
_MARKER = -2

_OPEN, _COMMITTED, _ABORTED = 0, 1, 2

Event = dict[str, Any]
TP = tuple[str, int]

_SEND_ERRORS = ["REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER", "NETWORK_EXCEPTION"]
_FAIL_ERRORS = ["NOT_ENOUGH_REPLICAS", "INVALID_PRODUCER_EPOCH", "COORDINATOR_NOT_AVAILABLE"]


def key_of(value: int) -> str:
    """Keys follow from values, so the model never has to store them."""
    return f"k{value % 7}"


class _Log:
    """One partition: parallel arrays keep ten million events within a few hundred MB."""

    __slots__ = ("kinds", "values")

    def __init__(self) -> None:
        self.values = array("q")
        self.kinds = array("q")

    def append(self, value: int, kind: int) -> int:
        self.values.append(value)
        self.kinds.append(kind)
        return len(self.values) - 1

    @property
    def hw(self) -> int:
        return len(self.values)


class Model:
    """The broker side: logs, transactions, committed group offsets."""

    def __init__(self, topics: dict[str, int], whole_txn_reads: bool = False) -> None:
        self.whole_txn_reads = whole_txn_reads
        self.logs: dict[TP, _Log] = {(t, p): _Log() for t, n in topics.items() for p in range(n)}
        self.status = bytearray()
        # txn -> {tp: first offset}: only open transactions, to find markers and the LSO.
        self.open: dict[int, dict[TP, int]] = {}
        self.open_first: dict[TP, dict[int, int]] = {tp: {} for tp in self.logs}
        # Records of transactions that wrote the pipeline's input, for its whole-txn cut.
        self.txn_records: dict[int, list[tuple[TP, int]]] = {}
        self.txn_offsets: dict[int, tuple[str, dict[TP, int]]] = {}
        self.committed: dict[str, dict[TP, int]] = {}
        self.abandoned: set[int] = set()

    def hw(self, tp: TP) -> int:
        return self.logs[tp].hw

    def lso(self, tp: TP) -> int:
        firsts = self.open_first[tp]
        return min(firsts.values()) if firsts else self.logs[tp].hw

    def append(self, tp: TP, value: int) -> int:
        return self.logs[tp].append(value, _PLAIN)

    def begin(self) -> int:
        self.status.append(_OPEN)
        idx = len(self.status) - 1
        self.open[idx] = {}
        return idx

    def txn_append(self, idx: int, tp: TP, value: int) -> int:
        off = self.logs[tp].append(value, idx)
        if tp not in self.open[idx]:
            self.open[idx][tp] = off
            self.open_first[tp][idx] = off
        if self.whole_txn_reads and tp[0] == TOPIC_IN:
            self.txn_records.setdefault(idx, []).append((tp, off))
        return off

    def end(self, idx: int, commit: bool) -> None:
        if self.status[idx] != _OPEN:
            return
        for tp in self.open.pop(idx):
            self.logs[tp].append(0, _MARKER)
            del self.open_first[tp][idx]
        self.status[idx] = _COMMITTED if commit else _ABORTED
        staged = self.txn_offsets.pop(idx, None)
        if commit and staged:
            group, offsets = staged
            self.committed.setdefault(group, {}).update(offsets)
        self.abandoned.discard(idx)

    def visible(self, tp: TP, off: int, isolation: str) -> bool:
        kind = self.logs[tp].kinds[off]
        if kind == _MARKER:
            return False
        if kind == _PLAIN or isolation == RU:
            return True
        return self.status[kind] == _COMMITTED

    def read(self, tp: TP, pos: int, isolation: str, limit: int,
             cutoff: int | None = None) -> tuple[list[tuple[int, int]], int]:
        """Visible (offset, value) pairs from pos, and the position after them."""
        log = self.logs[tp]
        end = self.lso(tp) if isolation == RC else log.hw
        if cutoff is not None:
            end = min(end, cutoff)
        out: list[tuple[int, int]] = []
        off = pos
        while off < end:
            if self.visible(tp, off, isolation):
                if len(out) >= limit:
                    break
                out.append((off, log.values[off]))
            off += 1
        return out, max(off, pos)

    def whole_txn_cut(self, positions: dict[TP, int], limit: int) -> dict[TP, int]:
        """Per-partition cutoffs below the LSO such that every committed transaction is
        either wholly below them or wholly at or above them (see the module docstring).
        About `limit` records per partition, more when a transaction needs them whole."""
        cut = self._cut(positions, limit)
        if all(cut[tp] == pos for tp, pos in positions.items()):
            # The limit split the first transaction; take it whole rather than stall.
            cut = self._cut(positions, 1 << 62)
        return cut

    def _cut(self, positions: dict[TP, int], limit: int) -> dict[TP, int]:
        cut: dict[TP, int] = {}
        for tp, pos in positions.items():
            recs, _ = self.read(tp, pos, RC, limit)
            cut[tp] = recs[-1][0] + 1 if len(recs) >= limit else self.lso(tp)
            cut[tp] = max(cut[tp], pos)
        changed = True
        while changed:
            changed = False
            seen: set[int] = set()
            for tp, pos in positions.items():
                kinds = self.logs[tp].kinds
                for off in range(pos, cut[tp]):
                    k = kinds[off]
                    if k >= 0 and self.status[k] == _COMMITTED:
                        seen.add(k)
            for idx in seen:
                recs = self.txn_records.get(idx, ())
                if any(tp in cut and off >= cut[tp] for tp, off in recs):
                    for tp, off in recs:
                        if tp in cut and positions[tp] <= off < cut[tp]:
                            cut[tp] = off
                            changed = True
        return cut

    def forget_below(self, offsets: dict[TP, int]) -> None:
        """Drop cut bookkeeping of decided transactions the pipeline has committed past."""
        for idx in [i for i, recs in self.txn_records.items()
                    if self.status[i] != _OPEN and all(off < offsets.get(tp, 0) for tp, off in recs)]:
            del self.txn_records[idx]


@dataclass(slots=True)
class Op:
    """What a process asks for; `complete` applies the effect and returns
    (type, value, error) at the moment the scheduler completes the op."""

    f: str
    value: dict
    complete: Callable[[], tuple[str, dict, str | None]]
    txn: str | None = None
    final: bool = False


class _Ctx:
    def __init__(self, model: Model, rng: random.Random, topics: dict[str, int]) -> None:
        self.model = model
        self.rng = rng
        self.topics = topics
        self.stopping = False
        self.draining = False
        self._value = 0
        self.groups: list[str] = []

    def value(self) -> int:
        self._value += 1
        return self._value

    def outcome(self, fail: float, info: float) -> str:
        """Faults are healed while the pipeline drains and the final phase reads."""
        if self.draining:
            return "ok"
        r = self.rng.random()
        return "fail" if r < fail else "info" if r < fail + info else "ok"

    def error(self, kind: str) -> str:
        return self.rng.choice(_FAIL_ERRORS if kind == "fail" else _SEND_ERRORS)

    def partitions(self, *topics: str) -> list[TP]:
        return [(t, p) for t in topics for p in range(self.topics[t])]


def _rec(tp: TP, value: int, offset: Any = ..., source: int | None = None) -> dict:
    r: dict[str, Any] = {"topic": tp[0], "partition": tp[1], "key": key_of(value), "value": value}
    if source is not None:
        r["source"] = source
    if offset is not ...:
        r["offset"] = offset
    return r


def _read_rec(tp: TP, off: int, value: int) -> dict:
    return {"topic": tp[0], "partition": tp[1], "offset": off, "key": key_of(value), "value": value}


def _tps(parts: Iterable[TP]) -> list[dict]:
    return [{"topic": t, "partition": p} for t, p in parts]


def _offsets(offsets: dict[TP, int | None]) -> list[dict]:
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]


def _ok(value: dict) -> Callable[[], tuple[str, dict, None]]:
    return lambda: ("ok", value, None)


# ---------------------------------------------------------------------------- processes

def _producer(ctx: _Ctx, name: str) -> Iterator[Op]:
    """Idempotent, non-transactional: an `info` send lands at most once, per record."""
    m, rng = ctx.model, ctx.rng
    parts = ctx.partitions(TOPIC_PLAIN, TOPIC_IN)
    while not ctx.stopping:
        recs: list[tuple[TP, int]] = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            # Sometimes two records for one partition in one send, to test order within an op.
            tp = recs[-1][0] if recs and rng.random() < 0.3 else rng.choice(parts)
            recs.append((tp, ctx.value()))
        invoke = {"records": [_rec(tp, v) for tp, v in recs]}

        def complete(recs=recs, invoke=invoke):
            kind = ctx.outcome(0.05, 0.07)
            if kind == "fail":
                return "fail", copy.deepcopy(invoke), ctx.error(kind)
            landed = []
            for tp, v in recs:
                if kind == "ok" or rng.random() < 0.5:
                    off = m.append(tp, v)
                    # A client without delivery reports does not learn the offset.
                    landed.append(_rec(tp, v, off if rng.random() < 0.9 else None))
            if kind == "info":
                return "info", copy.deepcopy(invoke), ctx.error(kind)
            return "ok", {"records": landed}, None
        yield Op("send", invoke, complete)


def _txn_producer(ctx: _Ctx, name: str) -> Iterator[Op]:
    m, rng = ctx.model, ctx.rng
    tid = f"tx-{name}"
    parts = ctx.partitions(TOPIC_TXN, TOPIC_IN)
    n = 0
    abandoned: list[int] = []
    while not ctx.stopping:
        n += 1
        txn = f"{name}/{n}"
        cell: list[int] = []

        def begin(cell=cell):
            # A new producer with the same transactional id fences the old one, whose
            # coordinator aborts the transaction it left open.
            while abandoned:
                m.end(abandoned.pop(), commit=False)
            cell.append(m.begin())
            return "ok", {"tid": tid}, None
        yield Op("begin_txn", {"tid": tid}, begin, txn=txn)
        idx = cell[0]
        failed = False
        for _ in range(rng.randint(1, 3)):
            recs = [(rng.choice(parts), ctx.value()) for _ in range(rng.choice((1, 1, 2)))]
            invoke = {"records": [_rec(tp, v) for tp, v in recs]}

            def complete(recs=recs, invoke=invoke):
                kind = ctx.outcome(0.03, 0.03)
                if kind == "fail":
                    return "fail", copy.deepcopy(invoke), ctx.error(kind)
                landed = []
                for tp, v in recs:
                    if kind == "ok" or rng.random() < 0.5:
                        landed.append(_rec(tp, v, m.txn_append(idx, tp, v)))
                if kind == "info":
                    return "info", copy.deepcopy(invoke), ctx.error(kind)
                return "ok", {"records": landed}, None
            kind, _ = yield Op("send", invoke, complete, txn=txn)
            if kind != "ok":
                failed = True
                break
        if not failed and not ctx.draining and rng.random() < 0.03:
            # The producer crashes: no commit, no abort; the transaction hangs until fenced.
            m.abandoned.add(idx)
            abandoned.append(idx)
            continue
        if failed or rng.random() < 0.1:
            def abort(idx=idx):
                m.end(idx, commit=False)
                kind = "info" if rng.random() < 0.05 and not ctx.draining else "ok"
                return kind, {}, ctx.error(kind) if kind != "ok" else None
            yield Op("abort_txn", {}, abort, txn=txn)
            continue

        def commit(idx=idx):
            kind = ctx.outcome(0.05, 0.1)
            m.end(idx, commit=kind == "ok" or (kind == "info" and rng.random() < 0.5))
            return kind, {}, ctx.error(kind) if kind != "ok" else None
        yield Op("commit_txn", {}, commit, txn=txn)


def _consumer(ctx: _Ctx, name: str, isolation: str, group: str,
              universe: list[TP]) -> Iterator[Op]:
    m, rng = ctx.model, ctx.rng
    positions: dict[TP, int] = {}

    def assign_op(parts: list[TP]) -> Op:
        def complete():
            # Kept partitions keep their position; new ones start at the group's
            # committed offset, else at the beginning (auto.offset.reset=earliest).
            new = {tp: positions[tp] if tp in positions else m.committed.get(group, {}).get(tp, 0)
                   for tp in parts}
            positions.clear()
            positions.update(new)
            return "ok", {"partitions": _tps(parts)}, None
        return Op("assign", {"partitions": _tps(parts)}, complete)

    yield assign_op(rng.sample(universe, rng.randint(1, len(universe))))
    while not ctx.stopping:
        r = rng.random()
        if r < 0.66:
            def poll():
                if rng.random() < 0.02:
                    return "fail", {"isolation": isolation, "group": group}, "TIMEOUT"
                recs = []
                for tp in rng.sample(list(positions), len(positions)):
                    got, positions[tp] = m.read(tp, positions[tp], isolation,
                                                rng.choice((0, 1, 2, 3, 5, 8)))
                    recs.extend(_read_rec(tp, off, v) for off, v in got)
                return "ok", {"isolation": isolation, "records": recs}, None
            yield Op("poll", {"isolation": isolation, "group": group}, poll)
        elif r < 0.73:
            targets: dict[TP, int | None] = {}
            for tp in rng.sample(list(positions), rng.randint(1, min(2, len(positions)))):
                how = rng.random()
                if how < 0.4:
                    targets[tp] = rng.randint(0, m.hw(tp))
                elif how < 0.7:
                    targets[tp] = m.committed.get(group, {}).get(tp, 0)
                else:
                    targets[tp] = max(0, positions[tp] - rng.randint(1, 4))
            value = {"positions": _offsets(targets)}

            def seek(targets=targets, value=value):
                positions.update(targets)
                return "ok", copy.deepcopy(value), None
            yield Op("seek", value, seek)
        elif r < 0.78:
            yield assign_op(rng.sample(universe, rng.randint(1, len(universe))))
        elif r < 0.90:
            offsets = dict(positions)
            value = {"group": group, "offsets": _offsets(offsets)}

            def commit(offsets=offsets, value=value):
                kind = ctx.outcome(0.04, 0.04)
                if kind == "ok" or (kind == "info" and rng.random() < 0.5):
                    m.committed.setdefault(group, {}).update(offsets)
                return kind, copy.deepcopy(value), ctx.error(kind) if kind != "ok" else None
            yield Op("commit_offsets", value, commit)
        else:
            g = rng.choice(ctx.groups)
            everything = list(m.logs)
            parts = rng.sample(everything, rng.randint(1, len(everything)))
            value = {"group": g, "partitions": _tps(parts)}

            def fetch(g=g, parts=parts, value=value):
                kind = ctx.outcome(0.03, 0.03)
                if kind != "ok":
                    return kind, copy.deepcopy(value), ctx.error(kind)
                got = m.committed.get(g, {})
                return "ok", {"group": g, "offsets": _offsets({tp: got.get(tp) for tp in parts})}, None
            yield Op("fetch_offsets", value, fetch)


def _pipeline(ctx: _Ctx, name: str) -> Iterator[Op]:
    """Consume-transform-produce from `in` to `out`, exactly once: outputs and input
    offsets commit in one transaction, and after an abort it rewinds to what committed."""
    m, rng = ctx.model, ctx.rng
    tid = f"tx-{name}"
    inputs = ctx.partitions(TOPIC_IN)
    n_out = ctx.topics[TOPIC_OUT]
    positions: dict[TP, int] = {}

    def assign():
        positions.update({tp: m.committed.get(PIPE_GROUP, {}).get(tp, 0) for tp in inputs})
        return "ok", {"partitions": _tps(inputs)}, None
    yield Op("assign", {"partitions": _tps(inputs)}, assign)

    def seek_op(targets: dict[TP, int]) -> Op:
        value = {"positions": _offsets(targets)}

        def seek():
            positions.update(targets)
            return "ok", copy.deepcopy(value), None
        return Op("seek", value, seek)

    def rewind() -> Iterator[Op]:
        committed = m.committed.get(PIPE_GROUP, {})
        yield seek_op({tp: committed.get(tp, 0) for tp in inputs})

    t = 0
    while True:
        if ctx.draining and all(positions[tp] >= m.hw(tp) for tp in inputs):
            return
        t += 1
        txn = f"{name}/{t}"
        cell: list[int] = []

        def begin(cell=cell):
            cell.append(m.begin())
            return "ok", {"tid": tid}, None
        yield Op("begin_txn", {"tid": tid}, begin, txn=txn)
        idx = cell[0]
        got: list[tuple[TP, int, int]] = []
        after: dict[TP, int] = {}

        def poll(got=got, after=after):
            limit = rng.choice((1, 2, 4, 8))
            cut = (m.whole_txn_cut(positions, limit) if m.whole_txn_reads else
                   {tp: m.read(tp, positions[tp], RC, limit)[1] for tp in inputs})
            recs = []
            for tp in inputs:
                rs, after[tp] = m.read(tp, positions[tp], RC, 1 << 30, cutoff=cut[tp])
                got.extend((tp, off, v) for off, v in rs)
                recs.extend(_read_rec(tp, off, v) for off, v in rs)
            return "ok", {"isolation": RC, "records": recs}, None
        yield Op("poll", {"isolation": RC, "group": PIPE_GROUP}, poll, txn=txn)
        positions.update(after)
        ok = True
        if got:
            outs = [((TOPIC_OUT, tp[1] % n_out), ctx.value(), v) for tp, _, v in got]
            chunks = [outs] if len(outs) < 2 or rng.random() < 0.6 else [outs[:len(outs) // 2], outs[len(outs) // 2:]]
            for chunk in chunks:
                invoke = {"records": [_rec(tp, v, source=s) for tp, v, s in chunk]}

                def send(chunk=chunk, invoke=invoke):
                    kind = ctx.outcome(0.02, 0.02)
                    if kind == "fail":
                        return "fail", copy.deepcopy(invoke), ctx.error(kind)
                    landed = []
                    for tp, v, s in chunk:
                        if kind == "ok" or rng.random() < 0.5:
                            landed.append(_rec(tp, v, m.txn_append(idx, tp, v), source=s))
                    if kind == "info":
                        return "info", copy.deepcopy(invoke), ctx.error(kind)
                    return "ok", {"records": landed}, None
                kind, _ = yield Op("send", invoke, send, txn=txn)
                if kind != "ok":
                    ok = False
                    break
            if ok:
                offsets = {tp: positions[tp] for tp in inputs}
                value = {"group": PIPE_GROUP, "offsets": _offsets(offsets)}

                def send_offsets(offsets=offsets, value=value):
                    kind = ctx.outcome(0.02, 0.0)
                    if kind == "ok":
                        m.txn_offsets[idx] = (PIPE_GROUP, offsets)
                    return kind, copy.deepcopy(value), ctx.error(kind) if kind != "ok" else None
                kind, _ = yield Op("send_offsets", value, send_offsets, txn=txn)
                ok = kind == "ok"
        if not ok or (rng.random() < 0.05 and not ctx.draining):
            def abort(idx=idx):
                m.end(idx, commit=False)
                return "ok", {}, None
            yield Op("abort_txn", {}, abort, txn=txn)
            yield from rewind()
            continue

        def commit(idx=idx):
            kind = ctx.outcome(0.04, 0.06)
            m.end(idx, commit=kind == "ok" or (kind == "info" and rng.random() < 0.5))
            return kind, {}, ctx.error(kind) if kind != "ok" else None
        kind, _ = yield Op("commit_txn", {}, commit, txn=txn)
        if kind == "ok":
            if m.whole_txn_reads and t % 64 == 0:
                m.forget_below(m.committed.get(PIPE_GROUP, {}))
        elif kind == "fail":
            yield from rewind()
        else:
            # Unknown outcome: ask the group coordinator what committed, resume from there.
            fetched: dict[TP, int] = {}
            value = {"group": PIPE_GROUP, "partitions": _tps(inputs)}

            def fetch(fetched=fetched):
                got = m.committed.get(PIPE_GROUP, {})
                fetched.update({tp: got.get(tp) for tp in inputs})
                return "ok", {"group": PIPE_GROUP, "offsets": _offsets(fetched)}, None
            yield Op("fetch_offsets", value, fetch)
            yield seek_op({tp: o or 0 for tp, o in fetched.items()})


def _nemesis(ctx: _Ctx, name: str, nodes: int = 3) -> Iterator[Op]:
    rng = ctx.rng
    while not ctx.stopping:
        node = rng.randint(1, nodes)
        fault, value = rng.choice([
            ("partition", {"sides": [[node], [n for n in range(1, nodes + 1) if n != node]]}),
            ("kill", {"node": node}),
            ("latency", {"node": node, "ms": rng.choice((50, 200))}),
        ])
        yield Op(fault, value, _ok(value))
        yield Op("heal", {}, _ok({}))


def _final_reader(ctx: _Ctx, name: str) -> Iterator[Op]:
    m, rng = ctx.model, ctx.rng
    parts = list(m.logs)
    positions: dict[TP, int] = {}
    yield Op("assign", {"partitions": _tps(parts)}, _ok({"partitions": _tps(parts)}))
    value = {"positions": _offsets({tp: 0 for tp in parts})}

    def seek():
        positions.update({tp: 0 for tp in parts})
        return "ok", copy.deepcopy(value), None
    yield Op("seek", value, seek)
    while any(positions[tp] < m.hw(tp) for tp in parts):
        def poll():
            recs = []
            for tp in parts:
                got, positions[tp] = m.read(tp, positions[tp], RC, rng.choice((20, 50, 100)))
                recs.extend(_read_rec(tp, off, v) for off, v in got)
            return "ok", {"isolation": RC, "records": recs}, None
        yield Op("poll", {"isolation": RC}, poll, final=True)

    def marks():
        return "ok", {"partitions": [
            {"topic": t, "partition": p, "low": 0, "high": m.hw((t, p)), "lso": m.lso((t, p))}
            for t, p in parts]}, None
    yield Op("watermarks", {}, marks)


# ---------------------------------------------------------------------------- scheduler

class _Emitter:
    def __init__(self, sink: Callable[[Event], None], rng: random.Random) -> None:
        self.sink = sink
        self.rng = rng
        self.index = 0
        self.op = 0
        self.time = 1_000_000

    def emit(self, op_id: int, process: str, type_: str, op: Op, value: dict,
             error: str | None = None) -> None:
        # Gaps of at least 1000 ns leave room for `inject` to slot events in between.
        self.time += self.rng.randint(1000, 20000)
        ev: Event = {"index": self.index, "op": op_id, "process": process, "type": type_,
                     "f": op.f, "time": self.time, "value": value}
        if op.txn is not None:
            ev["txn"] = op.txn
        if error is not None:
            ev["error"] = error
        if op.final:
            ev["final"] = True
        self.index += 1
        self.sink(ev)


@dataclass
class _Proc:
    name: str
    gen: Iterator[Op]
    weight: float = 1.0
    pending: tuple[Op, int] | None = None
    nxt: Op | None = None
    done: bool = False


def _run(procs: list[_Proc], em: _Emitter, rng: random.Random,
         until: Callable[[], bool], budget: list[int] | None = None) -> None:
    for p in procs:
        if p.nxt is None and not p.done and p.pending is None:
            try:
                p.nxt = next(p.gen)
            except StopIteration:
                p.done = True
    while not until():
        active = [p for p in procs if not p.done]
        if not active:
            return
        p = rng.choices(active, [q.weight for q in active])[0] if len(active) > 1 else active[0]
        if p.pending is None:
            op = p.nxt
            assert op is not None
            em.op += 1
            p.pending = (op, em.op)
            em.emit(em.op, p.name, "invoke", op, op.value)
            if budget is not None:
                budget[0] -= 1
        else:
            op, op_id = p.pending
            kind, value, error = op.complete()
            em.emit(op_id, p.name, kind, op, value, error)
            p.pending = None
            try:
                p.nxt = p.gen.send((kind, value))
            except StopIteration:
                p.done = True


@dataclass(frozen=True)
class Shape:
    """How big a synthesized history is. `ops` counts client operations of the main phase;
    the final phase adds what it needs to drain and read everything."""

    processes: int = 6
    ops: int = 200
    partitions: int = 2
    pipeline: bool = True
    nemesis: bool = True
    # Where read_uncommitted consumers read. The checkers count a read_uncommitted
    # read of an aborted record as aborted_read (it is the known-bad configuration of
    # docs/design: an exactly-once reader must not see aborts), so by default they read
    # only the topic no transaction writes; True puts them on every topic.
    ru_everywhere: bool = False
    # The pipeline takes each input transaction whole (no read skew; see above).
    whole_txn_reads: bool = False
    roles: tuple[str, ...] = field(default=("txn", "producer", "rc", "ru", "txn", "rc", "producer"))


def synthesize_into(sink: Callable[[Event], None], seed: int, shape: Shape = Shape()) -> int:
    """Stream a valid history into `sink`, one event dict at a time; returns the count."""
    rng = random.Random(seed)
    topics = {t: shape.partitions for t in (TOPIC_PLAIN, TOPIC_TXN, TOPIC_IN, TOPIC_OUT)}
    model = Model(topics, shape.whole_txn_reads)
    ctx = _Ctx(model, rng, topics)
    em = _Emitter(sink, rng)
    procs: list[_Proc] = []
    counts: dict[str, int] = {}
    n_clients = max(1, shape.processes - (1 if shape.pipeline else 0))
    for i in range(n_clients):
        role = shape.roles[i % len(shape.roles)]
        prefix = {"txn": "tp", "producer": "p", "rc": "c", "ru": "c"}[role]
        k = counts.get(prefix, 0)
        counts[prefix] = k + 1
        name = f"{prefix}{k}"
        if role == "txn":
            gen = _txn_producer(ctx, name)
        elif role == "producer":
            gen = _producer(ctx, name)
        else:
            ctx.groups.append(f"g-{name}")
            universe = (ctx.partitions(TOPIC_PLAIN) if role == "ru" and not shape.ru_everywhere
                        else list(model.logs))
            gen = _consumer(ctx, name, RC if role == "rc" else RU, f"g-{name}", universe)
        procs.append(_Proc(name, gen))
    pipes = []
    if shape.pipeline:
        ctx.groups.append(PIPE_GROUP)
        pipes.append(_Proc("pipe0", _pipeline(ctx, "pipe0")))
        procs.extend(pipes)
    if shape.nemesis:
        procs.append(_Proc("nemesis", _nemesis(ctx, "nemesis"), weight=0.1))

    budget = [shape.ops]
    _run(procs, em, rng, until=lambda: budget[0] <= 0, budget=budget)
    ctx.stopping = True
    others = [p for p in procs if p not in pipes]
    _run(procs, em, rng, until=lambda: all(p.done for p in others))
    for idx in sorted(model.abandoned):
        model.end(idx, commit=False)  # the coordinator times them out
    ctx.draining = True
    _run(procs, em, rng, until=lambda: all(p.done for p in procs))
    final = [_Proc("final0", _final_reader(ctx, "final0"))]
    _run(final, em, rng, until=lambda: all(p.done for p in final))
    return em.index


def synthesize(seed: int, shape: Shape = Shape(), **kw: Any) -> list[Event]:
    """A valid history as a list of event dicts; keyword arguments override `shape`."""
    if kw:
        shape = Shape(**{**shape.__dict__, **kw})
    events: list[Event] = []
    synthesize_into(events.append, seed, shape)
    return events


def write_history(events: Iterable[Event], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w") as f:
        for ev in events:
            f.write(json.dumps(ev, separators=(",", ":")))
            f.write("\n")
    return path


def synthesize_file(path: str | Path, seed: int, shape: Shape = Shape()) -> int:
    """Stream a valid history to a JSONL file without holding it in memory."""
    with Path(path).open("w", buffering=1 << 20) as f:
        dumps = json.JSONEncoder(separators=(",", ":")).encode

        def sink(ev: Event) -> None:
            f.write(dumps(ev))
            f.write("\n")
        return synthesize_into(sink, seed, shape)


# ---------------------------------------------------------------------------- injection
#
# `inject` splices a short scripted scenario into a valid history: a few extra processes
# (`x*`) on topics of their own (`x`, `xo`) do something Kafka must never do, exactly
# once. Own topics, processes, groups and transactional ids keep the rest of the history
# untouched, so the only anomaly is the scripted one; the scenario's log is extended by
# a final reader (`xfinal`) and by the history's `watermarks` op, as the final phase of
# a real run would.

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
            self.status.setdefault(txn, _OPEN)
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
            self.status.setdefault(txn, _OPEN)
            self.open_first.setdefault(txn, {})[tp] = min(off, self.open_first.get(txn, {}).get(tp, off))
        return off

    def truncate(self, tp: TP, size: int) -> None:
        """The log loses its tail, as a leader elected without it would."""
        del self.log(tp)[size:]

    def end(self, txn: str, commit: bool) -> None:
        for tp in self.open_first.get(txn, {}):
            self.log(tp).append(("marker",))
        self.status[txn] = _COMMITTED if commit else _ABORTED

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
        self.op(process, "send", {"records": [_rec(tp, value, source=source)]},
                {"records": [_rec(tp, value, off, source=source)]}, txn=txn)

    def poll(self, process: str, reads: list[tuple[TP, int, int]], txn: str | None = None,
             isolation: str = RC, group: str | None = None) -> None:
        inv: dict[str, Any] = {"isolation": isolation}
        if group is not None:
            inv["group"] = group
        self.op(process, "poll", inv, {"isolation": isolation, "records": [
            _read_rec(tp, off, v) for tp, off, v in reads]}, txn=txn)

    def assign(self, process: str, parts: list[TP]) -> None:
        self.op(process, "assign", {"partitions": _tps(parts)})

    # -- the final phase of the scenario's topics
    def final_events(self) -> tuple[list[Event], list[dict]]:
        parts = sorted(self.logs)
        recs = []
        for tp in parts:
            for off, e in enumerate(self.logs[tp]):
                if off >= self.final_from.get(tp, 0) and e is not None and e[0] == "rec" and (e[2] is None or self.status[e[2]] == _COMMITTED):
                    recs.append(_read_rec(tp, off, e[1]))
        save, self.events = self.events, []
        self.assign("xfinal", parts)
        self.op("xfinal", "seek", {"positions": _offsets(
            {tp: self.final_from.get(tp, 0) for tp in parts})})
        h = self.invoke("xfinal", "poll", {"isolation": RC})
        self.complete(h, {"isolation": RC, "records": recs})
        for ev in self.events[-2:]:
            ev["final"] = True
        final, self.events = self.events, save
        marks = []
        for tp in parts:
            hw = len(self.logs[tp])
            firsts = [f[tp] for t, f in self.open_first.items() if self.status[t] == _OPEN and tp in f]
            marks.append({"topic": tp[0], "partition": tp[1], "low": 0, "high": hw,
                          "lso": min(firsts) if firsts else hw})
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
    s.op("x0", "send", {"records": [_rec(_x(0), w)]}, type_="info", error="REQUEST_TIMED_OUT")
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), off, w)])


def _sc_lost_write(s: _Script) -> None:
    v, u = s.val(), s.val()
    off = s.append(_x(0), v, hole=True)  # acknowledged, then lost from the log
    s.send("x0", _x(0), v, off)
    s.send("x0", _x(0), u, s.append(_x(0), u))
    # A reader goes over v's offset and finds only u.
    s.assign("x1", [_x(0)])
    s.op("x1", "seek", {"positions": _offsets({_x(0): off})})
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
    s.op("x1", "seek", {"positions": _offsets({_x(1): off2})})
    s.poll("x1", [(_x(1), off_u, u)])
    s.final_from[_x(1)] = off2 + 1


def _sc_poll_skip(s: _Script) -> None:
    vs = [s.val() for _ in range(3)]
    offs = [s.append(_x(0), v) for v in vs]
    for v, off in zip(vs, offs):
        s.send("x0", _x(0), v, off)
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), offs[0], vs[0])])
    s.poll("x1", [(_x(0), offs[2], vs[2])])


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
        s.op("x1", "commit_offsets", {"group": "g-x1", "offsets": _offsets({_x(0): o})})


def _sc_stale_offset_fetch(s: _Script) -> None:
    vs = [s.val() for _ in range(2)]
    for v in vs:
        s.send("x0", _x(0), v, s.append(_x(0), v))
    for o in (1, 2):
        s.op("x1", "commit_offsets", {"group": "g-x1", "offsets": _offsets({_x(0): o})})
    s.op("x2", "fetch_offsets", {"group": "g-x1", "partitions": _tps([_x(0)])},
         {"group": "g-x1", "offsets": _offsets({_x(0): 1})})


def _sc_rewind_mismatch(s: _Script) -> None:
    vs = [s.val() for _ in range(3)]
    offs = [s.append(_x(0), v) for v in vs]
    for v, off in zip(vs, offs):
        s.send("x0", _x(0), v, off)
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), o, v) for o, v in zip(offs, vs)])
    s.op("x1", "seek", {"positions": _offsets({_x(0): offs[1]})})
    # After seeking to offs[1] the next read must be vs[1]; it is vs[2].
    s.poll("x1", [(_x(0), offs[2], vs[2])])


def _pipe_scenario(s: _Script, outputs: Callable[[list[int]], list[int]]) -> None:
    ins = [s.val() for _ in range(2)]
    offs = [s.append(_x(0), v) for v in ins]
    for v, off in zip(ins, offs):
        s.send("x0", _x(0), v, off)
    s.assign("xp", [_x(0)])
    s.op("xp", "begin_txn", {"tid": "tx-xp"}, txn="xp/1")
    s.poll("xp", [(_x(0), o, v) for o, v in zip(offs, ins)], txn="xp/1", group="g-xp")
    recs, done = [], []
    for src in outputs(ins):
        v = s.val()
        tp = (X_OUT, 0)
        recs.append(_rec(tp, v, source=src))
        done.append(_rec(tp, v, s.append(tp, v, "xp/1"), source=src))
    s.op("xp", "send", {"records": recs}, {"records": done}, txn="xp/1")
    s.op("xp", "send_offsets", {"group": "g-xp", "offsets": _offsets({_x(0): offs[-1] + 1})},
         txn="xp/1")
    s.op("xp", "commit_txn", {}, txn="xp/1")
    s.end("xp/1", commit=True)


def _sc_duplicate_output(s: _Script) -> None:
    _pipe_scenario(s, lambda ins: [ins[0], ins[0], ins[1]])


def _sc_lost_input(s: _Script) -> None:
    _pipe_scenario(s, lambda ins: [ins[0]])


def _sc_unattributed_read(s: _Script) -> None:
    a, z = s.val(), s.val()  # z: no send anywhere carries it
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.send("x0", _x(0), a, s.append(_x(0), a, "x0/1"), txn="x0/1")
    s.op("x0", "commit_txn", {}, txn="x0/1")
    s.end("x0/1", commit=True)
    # The control marker's offset holds no record, so no write can explain z there.
    s.assign("x1", [_x(0)])
    s.poll("x1", [(_x(0), 1, z)])


def _sc_hanging_txn(s: _Script) -> None:
    v = s.val()
    s.op("x0", "begin_txn", {"tid": "tx-x0"}, txn="x0/1")
    s.send("x0", _x(0), v, s.append(_x(0), v, "x0/1"), txn="x0/1")
    # The producer is gone and the coordinator never aborts: the LSO stays behind.


SCENARIOS: dict[str, Callable[[_Script], None]] = {
    "duplicate": _sc_duplicate,
    "inconsistent_offset": _sc_inconsistent_offset,
    "lost_write": _sc_lost_write,
    "unseen": _sc_unseen,
    "aborted_read": _sc_aborted_read,
    "precommitted_read": _sc_precommitted_read,
    "torn_txn": _sc_torn_txn,
    "poll_skip": _sc_poll_skip,
    "nonmonotonic_poll": _sc_nonmonotonic_poll,
    "nonmonotonic_send": _sc_nonmonotonic_send,
    "commit_order": _sc_commit_order,
    "g0": _sc_g0,
    "g1c": _sc_g1c,
    "g_single": _sc_g_single,
    "offset_regression": _sc_offset_regression,
    "stale_offset_fetch": _sc_stale_offset_fetch,
    "rewind_mismatch": _sc_rewind_mismatch,
    "duplicate_output": _sc_duplicate_output,
    "lost_input": _sc_lost_input,
    "unattributed_read": _sc_unattributed_read,
    "hanging_txn": _sc_hanging_txn,
}
ANOMALIES: tuple[str, ...] = tuple(SCENARIOS)

# The injected type that is a note, not a violation: the g0 scenario is a write cycle of
# two overlapping transactions, which Kafka allows. (g1c and g_single are injected as
# violations: cycles no real-time order allows; the checkers report realizable ones,
# which valid histories contain, as notes.)
NOTES = frozenset({"g0"})

# Other types an injection of a type necessarily creates too, and why. Empty for every
# type but torn_txn: each scenario is built so its anomaly implies no other under the
# checkers' definitions (docs/checkers.md), which is where most of their shape comes from:
# - lost_write: a lost write that final reads went over is also `unseen`, so the final
#   reader starts past it and a non-final reader's seek and read go over it;
# - unseen: the log ends before the acked write (high watermark below it), so no reader
#   went over it, which would make it a lost_write;
# - torn_txn: a write visible to read_committed readers proves the transaction committed
#   (even when its commit_txn ended in info), so the missing write, acknowledged and
#   gone over by a reader, is necessarily a lost_write too (or, were it in the read log,
#   a poll_skip or rewind_mismatch); the final reader starts past it, so not unseen;
# - rewind_mismatch: the skip comes right after a seek, which poll_skip leaves to it;
# - unattributed_read: the value sits at a control marker's offset, which no write
#   holds, so it is not also inconsistent_offset, and (unattributable, so invisible)
#   the final reader passing over it is no poll_skip.
# tests/test_synth_property.py holds every scenario to this table.
IMPLIES: dict[str, frozenset[str]] = {t: frozenset() for t in ANOMALIES}
IMPLIES["torn_txn"] = frozenset({"lost_write"})


def _max_value(events: list[Event]) -> int:
    best = 0
    for ev in events:
        for r in (ev.get("value") or {}).get("records", ()):
            if isinstance(r.get("value"), int):
                best = max(best, r["value"])
    return best


def inject(events: list[Event], anomaly: str, rng: random.Random) -> list[Event]:
    """A copy of a valid history with exactly one anomaly of type `anomaly` added.

    The scenario's ops are slotted in at random points of the main phase (before the
    first op of a final reader), its final read just before the `watermarks` op, and its
    partitions are added to that op's answer."""
    if anomaly not in SCENARIOS:
        raise ValueError(f"unknown anomaly {anomaly!r}; known: {', '.join(ANOMALIES)}")
    script = _Script(_max_value(events) + 1000)
    SCENARIOS[anomaly](script)
    final, marks = script.final_events()
    base = copy.deepcopy(events)

    finals = {ev["process"] for ev in base if ev.get("final")}
    start = next((i for i, ev in enumerate(base) if ev["process"] in finals), len(base))
    wm = next((i for i, ev in enumerate(base) if ev["f"] == "watermarks" and ev["type"] == "invoke"),
              len(base))
    for ev in base:
        if ev["f"] == "watermarks" and ev["type"] == "ok":
            ev["value"]["partitions"].extend(marks)

    ops = max((ev["op"] for ev in base), default=-1) + 1
    names = {ev["process"] for ev in base}
    for ev in script.events + final:
        ev["op"] += ops
        if ev["process"] in names:
            raise ValueError(f"process {ev['process']} of the scenario is already in the history")

    slots = sorted(rng.randint(0, start) for _ in script.events)
    out: list[Event] = []
    k = 0
    for i, ev in enumerate(base):
        while k < len(slots) and slots[k] == i:
            out.append(script.events[k])
            k += 1
        if i == wm:
            out.extend(final)
        out.append(ev)
    out.extend(script.events[k:])
    if wm == len(base):
        out.extend(final)

    prev = None
    for i, ev in enumerate(out):
        ev["index"] = i
        # Spliced events take the time of their predecessor plus one; the base's gaps of
        # at least 1000 ns keep everything strictly increasing.
        t = ev.get("time")
        t = (prev + 1 if prev is not None else 0) if t is None else t
        if prev is not None and t <= prev:
            t = prev + 1
        ev["time"] = t
        prev = t
    order = ("index", "op", "process", "type", "f", "time", "value")
    return [{**{k: ev[k] for k in order}, **{k: v for k, v in ev.items() if k not in order}}
            for ev in out]


def synthesize_anomalous(seed: int, anomaly: str, shape: Shape = Shape(), **kw: Any) -> list[Event]:
    """A synthesized history with one injected anomaly, deterministic from the seed."""
    return inject(synthesize(seed, shape, **kw), anomaly, random.Random(seed ^ 0x5EED))
