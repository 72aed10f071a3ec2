"""Kafka Streams applications as plan clients (role `streams`, run/jvm.py), on the real
cluster: several instances of one application, crashed and replaced, judged from their
input and output topics (checkers/streams.py)."""
from __future__ import annotations

import pytest

from onceproof.checkers.streams import LOW16
from onceproof.history.read import read_events
from onceproof.run.backends import on_client
from onceproof.run.fleet import CRASHED
from onceproof.trial import run_trial
from onceproof.workloads.plan import PlanError, validate


def streams_plan(guarantee: str, topology: str = "fold", duration: int = 45) -> dict:
    """Two instances of one application (group s0) read `in` as an idempotent producer
    writes it; the first is killed at 15 s, mid-stream, and comes back."""
    # A short session, so the group moves the dead instance's tasks within the run. An
    # at_least_once application commits its offsets apart from its outputs every
    # interval: 5 s, so the kill lands with seconds of written outputs whose inputs are
    # not committed (at 1 s, CI once saw a kill leave none to redo).
    interval = 5000 if guarantee == "at_least_once" else 1000
    app = {"guarantee": guarantee, "topology": topology,
           "config": {"commit.interval.ms": interval, "session.timeout.ms": 6000}}
    return {"topics": {"in": {"partitions": 3}, "out": {"partitions": 3}},
            "clients": {"p0": {"role": "producer", "topic": "in", "seed": 1},
                        "s0": {"role": "streams", "input": "in", "output": "out", "streams": app},
                        "s1": {"role": "streams", "input": "in", "output": "out", "group": "s0",
                               "streams": app}},
            "duration": duration, "schedule": [{"at": 15, "crash": "s0"}]}


@pytest.mark.cluster
def test_an_exactly_once_fold_crashed_and_replaced_outputs_each_input_once(cluster, tmp_path):
    if cluster.dist.major < 4:
        pytest.skip("the Java client of the release under test; Streams from 3.3 on")
    trial = run_trial(streams_plan("exactly_once_v2"), cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    states = {e["value"]["state"] for e in events if e["f"] == "streams" and e["type"] == "ok"
              and not e.get("final")}
    assert "RUNNING" in states, states
    assert any(e["f"] == CRASHED for e in events), "s0 was never killed"
    final = [e for e in events if e["f"] == "streams" and e.get("final") and e["type"] == "ok"]
    committed = sum(o["offset"] or 0 for o in final[0]["value"]["offsets"])
    outputs = [r for e in events if e["f"] == "poll" and e.get("final") and e["type"] == "ok"
               for r in e["value"]["records"] if r["topic"] == "out"]
    # Evidence: the application committed past inputs and folded them into outputs.
    assert committed > 100 and len(outputs) > 100, (committed, len(outputs))
    assert max(r["value"] >> 16 & LOW16 for r in outputs) > 10  # counts that grew
    assert trial.verdict.valid, trial.verdict.counts


def test_a_streams_client_is_checked_before_it_runs():
    plan = streams_plan("exactly_once_v2")
    with pytest.raises(PlanError, match="guarantee: must be one of exactly_once_v2, at_least_once"):
        validate({**plan, "clients": {**plan["clients"], "s1": {
            **plan["clients"]["s1"], "streams": {"guarantee": "exactly_once"}}}})
    with pytest.raises(PlanError, match="a streams client runs Kafka Streams, on the Java client"):
        validate({**plan, "clients": {**plan["clients"], "s1": {
            **plan["clients"]["s1"], "client": "librdkafka"}}})
    with pytest.raises(PlanError, match="needs \"input\" and \"output\""):
        validate({**plan, "clients": {"s0": {"role": "streams", "input": "in"}}})
    # A run on librdkafka leaves its streams clients on Java.
    mixed = on_client(plan, "librdkafka")
    assert {c["client"] for c in mixed["clients"].values()} == {"librdkafka", "java"}


@pytest.mark.cluster
def test_an_at_least_once_fold_killed_mid_run_is_caught(cluster, tmp_path):
    """The known-bad twin: at_least_once commits its offsets apart from its outputs and
    its state's changelog, so a kill between them makes the survivor redo inputs whose
    outputs (and folded state) were already written."""
    if cluster.dist.major < 4:
        pytest.skip("the Java client of the release under test; Streams from 3.3 on")
    trial = run_trial(streams_plan("at_least_once"), cluster, tmp_path)
    found = set(trial.verdict.counts)
    assert found & {"streams_duplicate_output", "wrong_fold"}, trial.verdict.counts
    assert found <= {"streams_duplicate_output", "wrong_fold"}, trial.verdict.counts
