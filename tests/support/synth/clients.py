"""Simulated clients of the reference model, and the scheduler that interleaves them into
a valid history.

Clients are Python generators, one per process, that yield an `Op` and get its
completion back. A scheduler interleaves them: at each step it picks a process and either
invokes its next op or completes its pending one, so an op of one process may be invoked
while another's is still pending. An op's effect on the model (model.py) happens when it
completes.

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .model import (
    PIPE_GROUP,
    RC,
    RU,
    TOPIC_IN,
    TOPIC_OUT,
    TOPIC_PLAIN,
    TOPIC_TXN,
    TP,
    Event,
    Model,
    offset_list,
    read_record,
    record,
    tp_list,
)

_SEND_ERRORS = ["REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER", "NETWORK_EXCEPTION"]
_FAIL_ERRORS = ["NOT_ENOUGH_REPLICAS", "INVALID_PRODUCER_EPOCH", "COORDINATOR_NOT_AVAILABLE"]


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
        invoke = {"records": [record(tp, v) for tp, v in recs]}

        def complete(recs=recs, invoke=invoke):
            kind = ctx.outcome(0.05, 0.07)
            if kind == "fail":
                return "fail", copy.deepcopy(invoke), ctx.error(kind)
            landed = []
            for tp, v in recs:
                if kind == "ok" or rng.random() < 0.5:
                    off = m.append(tp, v)
                    # A client without delivery reports does not learn the offset.
                    landed.append(record(tp, v, off if rng.random() < 0.9 else None))
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
            invoke = {"records": [record(tp, v) for tp, v in recs]}

            def complete(recs=recs, invoke=invoke, idx=idx):
                kind = ctx.outcome(0.03, 0.03)
                if kind == "fail":
                    return "fail", copy.deepcopy(invoke), ctx.error(kind)
                landed = []
                for tp, v in recs:
                    if kind == "ok" or rng.random() < 0.5:
                        landed.append(record(tp, v, m.txn_append(idx, tp, v)))
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
            kept = [tp for tp in parts if tp in positions]
            positions.clear()
            positions.update(new)
            done = {"partitions": tp_list(parts)}
            if kept:
                # As a tool other than the harness may write it: on the ok alone.
                done["kept"] = tp_list(kept)
            if rng.random() < 0.5:
                # The client learned where it starts (the Java client's position()).
                for item in done["partitions"]:
                    item["offset"] = new[(item["topic"], item["partition"])]
            return "ok", done, None
        return Op("assign", {"partitions": tp_list(parts)}, complete)

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
                    recs.extend(read_record(tp, off, v) for off, v in got)
                return "ok", {"isolation": isolation, "records": recs}, None
            yield Op("poll", {"isolation": isolation, "group": group}, poll)
        elif r < 0.73:
            targets: dict[TP, int | None] = {}
            asked: dict[TP, int | None] = {}
            for tp in rng.sample(list(positions), rng.randint(1, min(2, len(positions)))):
                how = rng.random()
                if how < 0.4:
                    targets[tp] = rng.randint(0, m.hw(tp))
                elif how < 0.7:
                    targets[tp] = m.committed.get(group, {}).get(tp, 0)
                else:
                    targets[tp] = max(0, positions[tp] - rng.randint(1, 4))
                # To the committed offset: asked for as that (null), resolved by the ok.
                asked[tp] = None if 0.4 <= how < 0.7 else targets[tp]
            value = {"positions": offset_list(targets)}

            def seek(targets=targets, value=value):
                positions.update(targets)
                return "ok", copy.deepcopy(value), None
            yield Op("seek", {"positions": offset_list(asked)}, seek)
        elif r < 0.78:
            yield assign_op(rng.sample(universe, rng.randint(1, len(universe))))
        elif r < 0.90:
            offsets = dict(positions)
            value = {"group": group, "offsets": offset_list(offsets)}

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
            value = {"group": g, "partitions": tp_list(parts)}

            def fetch(g=g, parts=parts, value=value):
                kind = ctx.outcome(0.03, 0.03)
                if kind != "ok":
                    return kind, copy.deepcopy(value), ctx.error(kind)
                got = m.committed.get(g, {})
                return "ok", {"group": g, "offsets": offset_list({tp: got.get(tp) for tp in parts})}, None
            yield Op("fetch_offsets", value, fetch)


def _pipeline(ctx: _Ctx, name: str, seek_on_rewind: bool = True) -> Iterator[Op]:
    """Consume-transform-produce from `in` to `out`, exactly once: outputs and input
    offsets commit in one transaction, and after an abort it rewinds to what committed:
    recorded as a seek, or (not seek_on_rewind, as other tools' histories have it) not
    recorded at all."""
    m, rng = ctx.model, ctx.rng
    tid = f"tx-{name}"
    inputs = ctx.partitions(TOPIC_IN)
    n_out = ctx.topics[TOPIC_OUT]
    positions: dict[TP, int] = {}

    def assign():
        positions.update({tp: m.committed.get(PIPE_GROUP, {}).get(tp, 0) for tp in inputs})
        return "ok", {"partitions": tp_list(inputs)}, None
    yield Op("assign", {"partitions": tp_list(inputs)}, assign)

    def seek_op(targets: dict[TP, int]) -> Op:
        value = {"positions": offset_list(targets)}

        def seek():
            positions.update(targets)
            return "ok", copy.deepcopy(value), None
        return Op("seek", value, seek)

    def rewind() -> Iterator[Op]:
        committed = m.committed.get(PIPE_GROUP, {})
        targets = {tp: committed.get(tp, 0) for tp in inputs}
        if seek_on_rewind:
            yield seek_op(targets)
        else:
            positions.update(targets)

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
                recs.extend(read_record(tp, off, v) for off, v in rs)
            return "ok", {"isolation": RC, "records": recs}, None
        yield Op("poll", {"isolation": RC, "group": PIPE_GROUP}, poll, txn=txn)
        positions.update(after)
        ok = True
        if got:
            outs = [((TOPIC_OUT, tp[1] % n_out), ctx.value(), v) for tp, _, v in got]
            half = len(outs) // 2
            chunks = [outs] if len(outs) < 2 or rng.random() < 0.6 else [outs[:half], outs[half:]]
            for chunk in chunks:
                invoke = {"records": [record(tp, v, source=s) for tp, v, s in chunk]}

                def send(chunk=chunk, invoke=invoke, idx=idx):
                    kind = ctx.outcome(0.02, 0.02)
                    if kind == "fail":
                        return "fail", copy.deepcopy(invoke), ctx.error(kind)
                    landed = []
                    for tp, v, s in chunk:
                        if kind == "ok" or rng.random() < 0.5:
                            landed.append(record(tp, v, m.txn_append(idx, tp, v), source=s))
                    if kind == "info":
                        return "info", copy.deepcopy(invoke), ctx.error(kind)
                    return "ok", {"records": landed}, None
                kind, _ = yield Op("send", invoke, send, txn=txn)
                if kind != "ok":
                    ok = False
                    break
            if ok:
                offsets = {tp: positions[tp] for tp in inputs}
                value = {"group": PIPE_GROUP, "offsets": offset_list(offsets)}

                def send_offsets(offsets=offsets, value=value, idx=idx):
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
            value = {"group": PIPE_GROUP, "partitions": tp_list(inputs)}

            def fetch(fetched=fetched):
                got = m.committed.get(PIPE_GROUP, {})
                fetched.update({tp: got.get(tp) for tp in inputs})
                return "ok", {"group": PIPE_GROUP, "offsets": offset_list(fetched)}, None
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
    yield Op("assign", {"partitions": tp_list(parts)}, _ok({"partitions": tp_list(parts)}))
    value = {"positions": offset_list({tp: 0 for tp in parts})}

    def seek():
        positions.update({tp: 0 for tp in parts})
        return "ok", copy.deepcopy(value), None
    yield Op("seek", value, seek)
    while any(positions[tp] < m.hw(tp) for tp in parts):
        def poll():
            recs = []
            for tp in parts:
                got, positions[tp] = m.read(tp, positions[tp], RC, rng.choice((20, 50, 100)))
                recs.extend(read_record(tp, off, v) for off, v in got)
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
    # The pipeline's rewind after an abort is recorded as a seek; False: it is not (the
    # Java client's histories from other tools record none), and the checkers must
    # judge the reads after the abort from where it stood outside it.
    seek_on_rewind: bool = True
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
        pipes.append(_Proc("pipe0", _pipeline(ctx, "pipe0", shape.seek_on_rewind)))
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
