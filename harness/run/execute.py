"""Run a plan on a cluster and record the history: plan -> run -> history.

A run has three phases:
1. rounds and faults, as the plan lists them: in a round every named client runs its op,
   all clients concurrently; a fault is applied between rounds and recorded as an op of
   the nemesis;
2. settle: every fault healed, every node running and the cluster ready; then wait until
   each partition's last stable offset reaches its high watermark (a transaction left
   open by a crashed client is aborted by its timeout);
3. final reads: a fresh read_committed consumer reads every partition from the beginning
   to the high watermark, then the watermarks are recorded, so the checkers can tell a
   lost write from one nobody looked for.

Each run uses fresh topics, consumer groups and transactional ids (a per-run suffix), so
runs on a reused cluster do not see each other.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec

from onceproof.checkers.history import HistoryWriter
from onceproof.cluster.cluster import Cluster
from onceproof.errors import SetupError
from onceproof.run.clients import CLIENTS, RunContext, TopicConsumer
from onceproof.workloads import faults
from onceproof.workloads.plan import PlanError, validate

SETTLE_TIMEOUT = 60.0
FINAL_READ_TIMEOUT = 60.0
# A safety net far above what a round takes when every client call keeps to its bounds
# (clients.bounded): a client whose op has not returned by then is left behind, so no
# unknown hang of a client library can stop a run.
ROUND_TIMEOUT = 600.0


def run(plan: dict, cluster: Cluster, out_dir: str | Path,
        on_step: Callable[[int, dict], None] | None = None) -> dict:
    """Execute plan on cluster, writing out_dir/history.jsonl. Returns a summary."""
    validate(plan)
    _fits(plan, cluster)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    suffix = uuid.uuid4().hex[:8]
    partitions = {name: spec["partitions"] for name, spec in plan["topics"].items()}
    with HistoryWriter(out / "history.jsonl") as writer:
        ctx = RunContext(writer, cluster.bootstrap, suffix, partitions)
        cluster.on_event = lambda f, value: writer.fault(f, value, type="info",
                                                         error="the harness restarted toxiproxy")
        cluster.ensure_instruments()
        _create_topics(cluster, ctx, plan)
        clients = {cid: CLIENTS[spec["role"]](cid, spec, plan, ctx)
                   for cid, spec in plan["clients"].items()}
        applied = 0
        stopped: set[str] = set()
        try:
            for i, step in enumerate(plan["steps"]):
                if on_step:
                    on_step(i, step)
                if "ops" in step:
                    _round(clients, step["ops"], stopped, writer)
                else:
                    apply_fault(cluster, ctx, step["fault"])
                    applied += 1
            if on_step:
                on_step(len(plan["steps"]), {"settle": True})
            for cid, client in clients.items():
                if cid not in stopped:
                    try:
                        client.close()
                    except KafkaException:
                        pass  # closing records nothing, so its failure changes no history
            _settle(cluster, ctx)
            _final_reads(cluster, ctx, plan)
        finally:
            cluster.on_event = None
            # Whatever happened, the next run gets a healthy cluster.
            if cluster.faults or cluster.down_nodes:
                cluster.heal_all()
    return {"history": str(out / "history.jsonl"), "suffix": suffix, "faults": applied}


def _fits(plan: dict, cluster: Cluster) -> None:
    for i, step in enumerate(plan["steps"]):
        missing = faults.node_ids(step["fault"]) - set(cluster.nodes) if "fault" in step else set()
        if missing:
            raise PlanError(f"plan steps[{i}].fault names node {', '.join(map(str, sorted(missing)))}, "
                            f"but the cluster has nodes {cluster.nodes}; use one of those or a "
                            f"target ({', '.join(faults.TARGETS)})")


def _round(clients: dict, ops: dict, stopped: set[str], writer: HistoryWriter) -> None:
    """Every named client runs its op, concurrently, each in a daemon thread (a thread
    blocked forever in a client library must not keep the process from exiting).

    A client still busy after ROUND_TIMEOUT is left behind and runs no further op: its
    op stays invoked without a completion, which the history reads as unknown (info),
    and a `client_hung` event of the nemesis says so. A client library error that
    escapes an op ends that client the same way, as a crash of the application would
    (`client_error`); any other exception is a bug of the harness and stops the run."""
    errors: dict[str, BaseException] = {}

    def work(cid, op):
        try:
            clients[cid].run(op)
        except KafkaException as exc:
            stopped.add(cid)
            writer.fault("client_error", {"process": cid, "op": op}, type="info",
                         error=f"client {cid} stopped: {exc}")
        except BaseException as exc:  # re-raised in the runner's thread below
            errors[cid] = exc

    threads = {cid: threading.Thread(target=work, args=(cid, op), daemon=True,
                                     name=f"onceproof-client-{cid}")
               for cid, op in ops.items() if cid not in stopped}
    for t in threads.values():
        t.start()
    deadline = time.monotonic() + ROUND_TIMEOUT
    for cid, t in threads.items():
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            stopped.add(cid)
            writer.fault("client_hung", {"process": cid, "op": ops[cid]}, type="info",
                         error=f"client {cid} did not finish its op in {ROUND_TIMEOUT:.0f} s; "
                               f"it runs no further op")
    for cid in threads:
        if cid in errors:
            raise errors[cid]


def _create_topics(cluster: Cluster, ctx: RunContext, plan: dict) -> None:
    admin = cluster.admin()
    rf = min(3, cluster.n)
    new = [NewTopic(ctx.topic(name), spec["partitions"], rf) for name, spec in plan["topics"].items()]
    for topic, fut in admin.create_topics(new).items():
        try:
            fut.result(30)
        except KafkaException as exc:
            raise SetupError(f"could not create topic {topic}: {exc}") from None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10)
        if all(t.topic in meta.topics and all(p.leader >= 0 for p in meta.topics[t.topic].partitions.values())
               for t in new):
            return
        time.sleep(0.25)
    raise SetupError("new topics got no leaders within 60s; see the node logs")


def apply_fault(cluster: Cluster, ctx: RunContext, step: dict) -> None:
    """Fire a fault step as an op of the nemesis; its ok value is the step as resolved."""
    h = ctx.writer.invoke("nemesis", step["f"], step)
    try:
        resolved = faults.apply(faults.Scene(cluster, [ctx.topic(t) for t in ctx.partitions]), step)
    except faults.NoTarget as exc:
        ctx.writer.fail(h, str(exc))
    except SetupError as exc:
        ctx.writer.info(h, str(exc))
        raise
    else:
        ctx.writer.ok(h, resolved)


def _offsets(cluster: Cluster, tps: list[TopicPartition], isolation) -> dict:
    admin = cluster.admin()
    req = {tp: OffsetSpec.latest() for tp in tps}
    futures = admin.list_offsets(req, isolation_level=isolation, request_timeout=10)
    return {(tp.topic, tp.partition): fut.result(15).offset for tp, fut in futures.items()}


def _all_tps(ctx: RunContext) -> list[TopicPartition]:
    return [TopicPartition(ctx.topic(t), p) for t, n in ctx.partitions.items() for p in range(n)]


def _settle(cluster: Cluster, ctx: RunContext) -> None:
    apply_fault(cluster, ctx, {"f": "heal", "all": True})
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        try:
            high = _offsets(cluster, _all_tps(ctx), IsolationLevel.READ_UNCOMMITTED)
            lso = _offsets(cluster, _all_tps(ctx), IsolationLevel.READ_COMMITTED)
            if high == lso:
                return
        except KafkaException:
            pass
        time.sleep(1)
    # A transaction still hanging is an anomaly to report, not a harness failure: the
    # watermarks recorded after the final reads show it.


def _final_reads(cluster: Cluster, ctx: RunContext, plan: dict) -> None:
    """Read every partition of every topic from the beginning up to its high watermark,
    then record the watermarks as the brokers report them: lso < high after settling
    means a transaction is still open."""
    lows = {}
    for topic in ctx.partitions:
        reader = TopicConsumer("final", {"config": {"isolation.level": "read_committed"}},
                               plan, ctx, topic=topic, final=True)
        try:
            reader.seek_to(reader.resolve("beginning") or [])
            goal = {tp.partition: reader.consumer.get_watermark_offsets(tp, timeout=10)
                    for tp in reader.tps}
            lows.update({(topic, p): low for p, (low, _) in goal.items()})
            deadline = time.monotonic() + FINAL_READ_TIMEOUT
            while time.monotonic() < deadline:
                reader.op_poll({"n": 500, "timeout": 0.5})
                positions = {tp.partition: tp.offset for tp in reader.consumer.position(reader.tps)}
                # An empty partition has no position and nothing to read.
                if all(high <= low or positions.get(p, -1) >= high for p, (low, high) in goal.items()):
                    break
        finally:
            reader.close()
    tps = _all_tps(ctx)
    h = ctx.writer.invoke("final", "watermarks", {}, final=True)
    try:
        high = _offsets(cluster, tps, IsolationLevel.READ_UNCOMMITTED)
        lso = _offsets(cluster, tps, IsolationLevel.READ_COMMITTED)
    except KafkaException as exc:
        ctx.writer.fail(h, str(exc))
        return
    ctx.writer.ok(h, {"partitions": [
        {"topic": ctx.plan_topic(tp.topic), "partition": tp.partition,
         "low": lows.get((ctx.plan_topic(tp.topic), tp.partition), 0),
         "high": high[(tp.topic, tp.partition)], "lso": lso[(tp.topic, tp.partition)]}
        for tp in tps]})
