"""The concurrent driver on the real cluster: clients run nonstop, faults land while their
requests are in flight, crashed clients come back as new processes, and the correct
pipeline stays clean."""
from __future__ import annotations

from itertools import pairwise

import pytest

from onceproof.history.format import NEMESIS
from onceproof.history.read import read_events
from onceproof.trial import run_trial
from onceproof.workloads.strategies import WORKLOADS, deal

pytestmark = pytest.mark.cluster


def _pipeline_plan(duration: int, schedule: list[dict], rate: float | None = None) -> dict:
    topics = {"in": {"partitions": 6}, "out": {"partitions": 6}}
    clients = deal(WORKLOADS["pipeline"]["clients"], 9, topics)
    for i, spec in enumerate(clients.values()):
        spec["seed"] = i
    plan = {"topics": topics, "clients": clients, "duration": duration, "schedule": schedule}
    if rate is not None:
        plan["rate"] = rate
    return plan


def _spans(events: list[dict]) -> dict[int, list]:
    """op -> [process, f, invoke index, completion index (None: never completed)]."""
    spans: dict[int, list] = {}
    for e in events:
        if e["type"] == "invoke":
            spans[e["op"]] = [e["process"], e["f"], e["index"], None]
        else:
            spans[e["op"]][3] = e["index"]
    return spans


def test_faults_land_mid_request_crashed_clients_return_and_the_pipeline_stays_exact(
        cluster, tmp_path):
    plan = _pipeline_plan(25, [
        {"at": 6, "fault": {"f": "pause", "node": "leader"}},
        {"at": 10, "fault": {"f": "resume"}},
        {"at": 13, "crash": "x0"},
        {"at": 15, "fault": {"f": "latency", "ms": 300, "jitter": 50}},
        {"at": 19, "fault": {"f": "heal"}},
    ])
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    spans = _spans(events)
    clients = {p for p, f, *_ in spans.values() if p not in (NEMESIS, "final")}
    assert len(clients) >= 10  # nine clients and the crashed one's successor

    # Each fault began while client requests were in flight.
    for f in ("pause", "latency"):
        fault = next(s for s in spans.values() if s[0] == NEMESIS and s[1] == f)
        in_flight = [s for s in spans.values() if s[0] in clients and s[2] < fault[2]
                     and (s[3] is None or s[3] > fault[2])]
        assert len(in_flight) >= 3, f

    crashed = [e for e in events if e["f"] == "client_crashed" and e["type"] == "info"]
    assert [e["value"]["by"] for e in crashed] == ["x0.1"]
    after = crashed[0]["index"]
    assert any(e["process"] == "x0.1" and e["f"] == "commit_txn" and e["type"] == "ok"
               for e in events if e["index"] > after)
    assert not any(e["process"] == "x0" and e["type"] == "invoke" for e in events
                   if e["index"] > after)

    # The claim was exercised: writes acknowledged, transactions committed with their
    # input offsets, output read back.
    seen = trial.exercised
    assert seen["acknowledged_writes"] > 100 and seen["commit_txn"] > 20
    assert seen["send_offsets"] > 20 and seen["records_read"] > 100
    assert trial.verdict.valid, trial.verdict.counts


def test_a_rate_caps_the_ops_the_clients_start(cluster, tmp_path):
    plan = _pipeline_plan(5, [], rate=20)
    run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    # A pipeline step records several ops (begin, poll, send, offsets, commit): count
    # what the clients start, the first op of each client step being one of these.
    starts = [e for e in events if e["type"] == "invoke" and e["process"] not in (NEMESIS, "final")
              and e["f"] in ("send", "begin_txn", "poll", "seek", "commit_offsets", "fetch_offsets")]
    steps = [e for e in starts if not (e["process"].startswith("x") and e["f"] != "begin_txn")]
    # At most rate * duration steps, plus one per client for the first, unpaced op and
    # the commit that closes what is open at the end.
    assert 0 < len(steps) <= 20 * 5 + 2 * 9


def test_subscribed_pipelines_record_each_rebalance_and_stay_exact(cluster, tmp_path):
    if int(cluster.dist.version.split(".")[0]) < 4:
        pytest.skip("KIP-848's consumer protocol is on by default from Kafka 4.0")
    # A crash is a kill -9 (run/host.py): the dead member leaves no group, so its
    # partitions stay its own until the coordinator's session timeout ends it (45 s by
    # default under KIP-848's protocol, heartbeats every 5 s). Both crashes come early and
    # their successors only after that timeout, so from about 53 s to 60 s the one member
    # left holds every partition; the successors (60 s, 63 s) then get their shares
    # before 90 s. A successor back sooner than the timeout would meet the dead member's
    # partitions still held, and whether any live member ever holds more than its third
    # would be up to the assignor's stickiness.
    plan = _pipeline_plan(90, [{"at": 5, "crash": "x0"}, {"at": 8, "crash": "x0_1"}])
    plan["consumer"] = {"group.protocol": "consumer"}
    plan["mix"] = {"restart_after": 55}
    for spec in plan["clients"].values():
        if spec["role"] == "pipeline":
            del spec["partitions"]
            spec["pipeline"] = {"subscribe": True}
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    spans = _spans(events)

    # A process does one op at a time, a poll split by a rebalance included.
    by_process: dict[str, list] = {}
    for p, _, invoked, completed in sorted(spans.values(), key=lambda s: s[2]):
        by_process.setdefault(p, []).append((invoked, completed))
    for p, ops in by_process.items():
        if p != NEMESIS:
            assert all(c is not None and c < nxt for (_, c), (nxt, _) in pairwise(ops)), p

    # The group moved partitions: while a crashed member was away the others took its
    # share, and its successor got a share when it came back. Every input partition
    # was read.
    assigned = [e for e in events if e["f"] == "assign" and e["type"] == "ok"
                and e["process"].startswith("x")]
    assert max(len(e["value"]["partitions"]) for e in assigned) > 2
    assert {"x0.1", "x0_1.1"} <= {e["process"] for e in assigned if e["value"]["partitions"]}
    read = {(r["partition"]) for e in events if e["f"] == "poll" and e["type"] == "ok"
            and e["process"].startswith("x") for r in e["value"]["records"]}
    assert read == set(range(6))

    seen = trial.exercised
    assert seen["commit_txn"] > 20 and seen["send_offsets"] > 20
    assert trial.verdict.valid, trial.verdict.counts


def test_a_producer_with_threads_keeps_several_sends_in_flight_on_one_producer(cluster, tmp_path):
    plan = {"topics": {"t": {"partitions": 6}},
            "clients": {"p0": {"role": "producer", "threads": 4, "seed": 1},
                        "c0": {"role": "consumer", "seed": 2}},
            "duration": 8, "mix": {"max_records": 6}, "schedule": []}
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    sends = [s for s in _spans(events).values() if s[1] == "send"]
    assert {s[0] for s in sends} == {"p0", "p0~1", "p0~2", "p0~3"}
    # Some send began while another thread's send was still waiting for its acks.
    overlapping = [a for a in sends for b in sends
                   if a[0] != b[0] and b[2] < a[2] < (b[3] if b[3] is not None else a[2] + 1)]
    assert len(overlapping) > len(sends) // 4
    assert trial.exercised["acknowledged_writes"] > 100
    assert trial.verdict.valid, trial.verdict.counts
