"""Run a plan on a cluster and record the history: plan -> run -> history.

A run has three phases:
1. the workload, by the driver of the plan's shape: run/rounds.py runs steps (rounds of
   ops, faults between them), run/load.py runs every client on its own op stream for a
   duration while a nemesis follows the schedule; either way each fault is recorded as
   an op of the nemesis;
2. settle: every fault healed, every node running and the cluster ready; then wait until
   each partition's last stable offset reaches its high watermark (a transaction left
   open by a crashed client is aborted by its timeout), for up to 60 s plus the plan's
   longest transaction timeout: a transaction open after that is hanging (hanging_txn);
3. final reads: a fresh read_committed consumer reads every partition from the beginning
   to the high watermark, then the watermarks are recorded, so the checkers can tell a
   lost write from one nobody looked for; then each consumer group's committed offsets
   are fetched as a read_committed consumer fetches them (stable offsets only), so a
   group whose offsets can no longer be read is seen.

Each run uses fresh topics, consumer groups and transactional ids under a per-run prefix
(`onceproof-<run id>-`), so runs on a reused cluster do not see each other; on a cluster
the harness did not start, what the run created is deleted at its end (cluster/external.py).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec

from onceproof.cluster.external import AnyCluster
from onceproof.errors import SetupError, Unsettled
from onceproof.history.format import CLUSTER, FETCH_OFFSETS, STREAMS, WATERMARKS
from onceproof.history.writer import HistoryWriter
from onceproof.run import backends, load, rounds
from onceproof.run.clients import FETCH_TIMEOUT, QUIET, TXN_TIMEOUT_MS, RunContext, TopicConsumer
from onceproof.run.fleet import Fleet
from onceproof.run.outcomes import describe, error_of
from onceproof.run.toxic_events import ToxicEvents
from onceproof.workloads import faults
from onceproof.workloads.ops import STREAMS as STREAMS_ROLE
from onceproof.workloads.plan import (
    Plan,
    PlanError,
    validate,
    value_size_problem,
)
from onceproof.workloads.settings import setting_text

SETTLE_TIMEOUT = 60.0
FINAL_READ_TIMEOUT = 60.0
# How long the final phase tries to read a group's committed offsets, on top of the plan's
# longest transaction timeout: a transaction left open with offsets in it keeps them
# unstable until its coordinator aborts it (checkers/liveness.py unreadable_offsets).
FINAL_OFFSETS_TIMEOUT = 60.0

Progress = Callable[[float, float, str], None]  # (done, total, what is happening)


def run(plan: dict | Plan, cluster: AnyCluster, out_dir: str | Path,
        on_progress: Progress | None = None, writer: HistoryWriter | None = None) -> dict:
    """Execute plan on cluster, writing out_dir/history.jsonl (or to `writer`, for a
    benchmark's null recorder). Returns a summary: ops started, processes replaced."""
    plan = validate(plan)
    raw = plan.to_dict()  # its JSON, for what takes the plan as data
    _fits(plan, cluster)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prepared = backends.prepare(raw, cluster)
    run_id = uuid.uuid4().hex[:8]
    with writer or HistoryWriter(out / "history.jsonl") as writer:
        ctx = RunContext(writer, cluster.connection(), run_id, plan.partitions, raw["clients"],
                         prepared=prepared, logs=str(out / "client-logs"))
        cluster.on_event = lambda f, value: writer.fault(f, value, type="info",
                                                         error="the harness restarted toxiproxy")
        cluster.ensure_instruments()
        cluster.configure({k: setting_text(v) for k, v in plan.broker.items()})
        writer.fault(CLUSTER, {**under_test(cluster), "clients": backends.recorded(prepared),
                               "client_settings": backends.settings_in_force(raw)})
        summary: dict = {}
        try:
            # What a request fault does to single requests, from the first fault to the
            # settle's heal, which delivers what is still held.
            with ToxicEvents(cluster, writer, ctx.client_of_tid):
                _workload(cluster, ctx, plan, on_progress, summary)
        finally:
            cluster.on_event = None
            # Whatever happened, the next run gets a healthy cluster, and a cluster that
            # is not ours gets back what the run created (Ctrl-C included).
            if cluster.faults or cluster.down_nodes:
                cluster.heal_all()
            cluster.clean_up(ctx.prefix)
    return {"history": str(out / "history.jsonl"), "run_id": run_id, "prefix": ctx.prefix,
            "faults": len(plan.fault_steps), "clients": backends.recorded(prepared),
            "txn_protocols": {(f"v{v}" if v else "unknown"): n
                              for v, n in sorted(ctx.txn_protocols.items())}, **summary}


def _workload(cluster: AnyCluster, ctx: RunContext, plan: Plan, on_progress: Progress | None,
              summary: dict) -> None:
    """Phases 1 to 3; `summary` gets the driver's (ops started, processes replaced)."""
    _create_topics(cluster, ctx, plan)
    try:
        fleet = Fleet(plan, ctx)
    except KafkaException as exc:
        raise PlanError(f"plan clients: the client library refused their config: {exc}") from None
    driver = load if plan.concurrent else rounds
    try:
        summary.update(driver.drive(plan, fleet, lambda step: apply_fault(cluster, ctx, step, fleet),
                                    on_progress))
        if on_progress:
            on_progress(1, 1, "settling, final reads")
        if fleet.paused:
            # A client still paused at the end comes back before it closes, as a step.
            apply_fault(cluster, ctx, {"f": "resume_client"}, fleet)
        fleet.close(plan.clients)
    finally:
        fleet.end()  # a client paused when the run stopped early is continued, then killed
    _settle(cluster, ctx, plan)
    _final_reads(cluster, ctx, plan)
    _final_offsets(ctx, plan)


def under_test(cluster: AnyCluster) -> dict:
    """The cluster a run tested, as its history, verdict and report name it: as it
    describes itself, and the faults it could not inject, when there are any."""
    missing = faults.not_injected(cluster)
    return {**cluster.described(), **({"not_injected": missing} if missing else {})}


def _fits(plan: Plan, cluster: AnyCluster) -> None:
    if (why := value_size_problem(plan, getattr(cluster, "base", None))):
        raise PlanError(f"plan {why}")
    for name, topic in plan.topics.items():
        if topic.replicas is not None and topic.replicas > cluster.n:
            raise PlanError(f"plan topics.{name}.replicas is {topic.replicas}, but the "
                            f"cluster has {cluster.n} nodes; use at most {cluster.n}")
    for i, step in enumerate(plan.fault_steps):
        if (why := faults.cannot(step["f"], cluster)):
            raise PlanError(f"plan fault {i + 1} ({step['f']}) cannot run on this cluster: {why}")
        missing = faults.node_ids(step) - set(cluster.nodes)
        if missing:
            raise PlanError(f"plan fault {i + 1} ({step['f']}) names node "
                            f"{', '.join(map(str, sorted(missing)))}, but the cluster has nodes "
                            f"{cluster.nodes}; use one of those or a target "
                            f"({', '.join(faults.TARGETS)})")
    if (why := faults.release_problem(plan.fault_steps, cluster.version, cluster.nodes)):
        raise PlanError(f"plan {why} (the cluster starts on {cluster.version})")
    for version in faults.releases_named(plan.fault_steps):
        cluster.install_release(version)  # before the run: a fetch takes minutes


def _create_topics(cluster: AnyCluster, ctx: RunContext, plan: dict | Plan) -> None:
    admin = cluster.admin()
    topics = Plan.of(plan).topics
    new = [NewTopic(ctx.topic(name), t.partitions,
                    t.replicas if t.replicas is not None else min(3, cluster.n),
                    config={k: setting_text(v) for k, v in t.config.items()})
           for name, t in topics.items()]
    for topic, fut in admin.create_topics(new).items():
        try:
            fut.result(30)
        except KafkaException as exc:
            raise SetupError(f"could not create topic {topic}: {exc}; if the plan sets "
                             f"topics.<name>.config, check it") from None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10)
        if all(t.topic in meta.topics and all(p.leader >= 0 for p in meta.topics[t.topic].partitions.values())
               for t in new):
            return
        time.sleep(0.25)
    raise SetupError("new topics got no leaders within 60s; see the node logs")


def apply_fault(cluster: AnyCluster, ctx: RunContext, step: dict, fleet: Fleet | None = None) -> None:
    """Fire a fault step as an op of the nemesis; its ok value is the step as resolved.
    A client-side fault acts on the fleet's processes, and may fire a step of its own
    later (a pause's resume), which the fleet cancels when it ends."""
    h = ctx.writer.invoke("nemesis", step["f"], step)
    later = None if fleet is None else (
        lambda seconds, then: fleet.after(seconds, lambda: apply_fault(cluster, ctx, then, fleet)))
    try:
        resolved = faults.apply(faults.Scene(cluster, list(ctx.partitions), ctx, fleet, later), step)
    except faults.NoTarget as exc:
        ctx.writer.fail(h, str(exc), _ran(cluster))
    except Unsettled as exc:
        # The user's command failed, or a node did not come back on its new release:
        # whether the fault happened, or happened whole, is unknown.
        ctx.writer.info(h, str(exc), _ran(cluster))
    except SetupError as exc:
        ctx.writer.info(h, str(exc), _ran(cluster))
        raise
    else:
        ctx.writer.ok(h, {**resolved, **_ran(cluster)})


def _ran(cluster: AnyCluster) -> dict:
    """The fault commands a step ran (a cluster the harness did not start), for its op."""
    ran = cluster.take_commands()
    return {"commands": ran} if ran else {}


def _offsets(cluster: AnyCluster, tps: list[TopicPartition], isolation) -> dict:
    """The latest offset of each partition under `isolation`; a partition no leader
    answers for maps to None."""
    admin = cluster.admin()
    req = {tp: OffsetSpec.latest() for tp in tps}
    futures = admin.list_offsets(req, isolation_level=isolation, request_timeout=10)
    out: dict[tuple[str, int], int | None] = {}
    for tp, fut in futures.items():
        try:
            out[(tp.topic, tp.partition)] = fut.result(15).offset
        except KafkaException:
            out[(tp.topic, tp.partition)] = None
    return out


def _all_tps(ctx: RunContext) -> list[TopicPartition]:
    return [TopicPartition(ctx.topic(t), p) for t, n in ctx.partitions.items() for p in range(n)]


def _settle(cluster: AnyCluster, ctx: RunContext, plan: Plan) -> None:
    apply_fault(cluster, ctx, {"f": "heal", "all": True})
    # Past the longest transaction timeout: a transaction still open then is hanging
    # (checkers/loss.py judges it so only when its timeout and 30 s have passed).
    deadline = time.monotonic() + SETTLE_TIMEOUT + _longest_txn_timeout(plan)
    while time.monotonic() < deadline:
        try:
            high = _offsets(cluster, _all_tps(ctx), IsolationLevel.READ_UNCOMMITTED)
            lso = _offsets(cluster, _all_tps(ctx), IsolationLevel.READ_COMMITTED)
            if high == lso and None not in high.values():
                return
        except KafkaException:
            pass
        time.sleep(1)
    # A transaction still hanging is an anomaly to report, not a harness failure: the
    # watermarks recorded after the final reads show it.


def _watermarks(consumer, tp: TopicPartition, deadline: float) -> tuple[int, int] | None:
    """A partition's (low, high) watermarks, or None when no leader answered for it by
    `deadline` (monotonic): a partition left offline is read no further, and the
    watermarks op that ends the final reads gives it no high watermark. One deadline
    for a topic's partitions, so several offline ones cost one wait, not one each."""
    while True:
        try:
            return consumer.get_watermark_offsets(
                tp, timeout=max(1.0, min(10.0, deadline - time.monotonic())))
        except KafkaException:
            if time.monotonic() > deadline:
                return None
            time.sleep(1)


def _final_reads(cluster: AnyCluster, ctx: RunContext, plan: Plan) -> None:
    """Read every partition of every topic from the beginning up to its high watermark,
    then record the watermarks as the brokers report them: lso < high after settling
    means a transaction is still open. Each partition's row names where the reads
    stopped (`offset`), so a checker knows they went over what they did not return."""
    lows, reached = {}, {}
    raw = plan.to_dict()  # a client takes the plan as data, as in its own process
    for topic in ctx.partitions:
        reader = TopicConsumer("final", {"config": {"isolation.level": "read_committed"}},
                               raw, ctx, topic=topic, final=True)
        try:
            reader.seek_to(reader.resolve("beginning") or [])
            asked = time.monotonic() + FINAL_READ_TIMEOUT
            goal = {tp.partition: marks for tp in reader.tps
                    if (marks := _watermarks(reader.consumer, tp, asked)) is not None}
            lows.update({(topic, p): low for p, (low, _) in goal.items()})
            deadline = time.monotonic() + FINAL_READ_TIMEOUT
            while time.monotonic() < deadline:
                reader.op_poll({"n": 500, "timeout": 0.5})
                positions = {tp.partition: tp.offset for tp in reader.consumer.position(reader.tps)}
                reached.update({(topic, p): at for p, at in positions.items() if at >= 0})
                # An empty partition has no position and nothing to read.
                if all(high <= low or positions.get(p, -1) >= high for p, (low, high) in goal.items()):
                    break
        finally:
            reader.close()
    tps = _all_tps(ctx)
    h = ctx.writer.invoke("final", WATERMARKS, {}, final=True)
    try:
        high = _offsets(cluster, tps, IsolationLevel.READ_UNCOMMITTED)
        lso = _offsets(cluster, tps, IsolationLevel.READ_COMMITTED)
    except KafkaException as exc:
        ctx.writer.fail(h, str(exc))
        return
    # A partition no leader answered for has no watermarks: null, not a made-up 0.
    rows = []
    for tp in tps:
        key, topic = (tp.topic, tp.partition), ctx.plan_topic(tp.topic)
        rows.append({"topic": topic, "partition": tp.partition,
                      "low": lows.get((topic, tp.partition), 0 if high[key] is not None else None),
                      "high": high[key], "lso": lso[key],
                      "offset": reached.get((topic, tp.partition))})
    ctx.writer.ok(h, {"partitions": rows})


def _groups(plan: Plan) -> dict[str, set[str]]:
    """Each consumer group of the plan and the topics its clients read."""
    groups: dict[str, set[str]] = {}
    for spec in plan.clients.values():
        if spec.grouped:
            groups.setdefault(spec.group_name, set()).add(plan.read_topic(spec))
    return groups


def _application(plan: Plan, group: str) -> dict | None:
    """What a streams client of consumer group `group` declares, or None: its input and
    output topics and topology."""
    for spec in plan.clients.values():
        if spec.role == STREAMS_ROLE and spec.group_name == group:
            return {"input": spec.input, "output": spec.output,
                    "topology": spec.streams_settings["topology"]}
    return None


def _longest_txn_timeout(plan: Plan) -> float:
    """Seconds: the longest transaction timeout any client of the plan runs with."""
    configs = [plan.producer] + [c.config for c in plan.clients.values()]
    return max([TXN_TIMEOUT_MS] + [int(c["transaction.timeout.ms"]) for c in configs
                                   if "transaction.timeout.ms" in c]) / 1000


def _final_offsets(ctx: RunContext, plan: Plan) -> None:
    """Fetch each group's committed offsets as a read_committed consumer does (asking for
    stable offsets), retrying until the bound, and record it as a final fetch_offsets op."""
    bound = FINAL_OFFSETS_TIMEOUT + _longest_txn_timeout(plan)
    for name, topics in sorted(_groups(plan).items()):
        group = ctx.group(name)
        tps = [TopicPartition(ctx.topic(t), p) for t in sorted(topics)
               for p in range(ctx.partitions[t])]
        asked = [{"topic": ctx.plan_topic(tp.topic), "partition": tp.partition} for tp in tps]
        consumer = Consumer({**ctx.connection, "group.id": group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             **QUIET})
        # A streams application's commits are not in the history: its offsets are
        # recorded as a streams op (checkers/streams.py), which declares it again.
        app = _application(plan, name)
        h = ctx.writer.invoke("final", FETCH_OFFSETS if app is None else STREAMS,
                              {"group": group, "partitions": asked,
                               "timeout_ms": int(bound * 1000), **(app or {})}, final=True)
        deadline = time.monotonic() + bound
        try:
            while True:
                try:
                    got = consumer.committed(tps, timeout=FETCH_TIMEOUT)
                except KafkaException as exc:
                    if time.monotonic() + FETCH_TIMEOUT > deadline:
                        ctx.writer.fail(h, describe(error_of(exc) or exc))
                        break
                    time.sleep(1)
                    continue
                ctx.writer.ok(h, {"group": group, "offsets": [
                    {"topic": ctx.plan_topic(tp.topic), "partition": tp.partition,
                     "offset": tp.offset if tp.offset >= 0 else None} for tp in got]})
                break
        finally:
            consumer.close()
