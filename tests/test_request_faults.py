"""Request faults (workloads/faults.py hold_request, drop_response, duplicate_request): the
kafka toxic's own Go tests, its api names against the registry's, steps refused in one
line, the history's request events drawn as windows; and on the real cluster, each action
doing what it says, and the KAFKA-17754 plan that holds one EndTxn."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceproof.cluster.provision import KAFKATOXIC_SOURCE
from onceproof.history.read import read_events
from onceproof.history.writer import HistoryWriter
from onceproof.report import faults as report_faults
from onceproof.report.history import load
from onceproof.run.toxic_events import ToxicEvents
from onceproof.workloads import faults
from onceproof.workloads.plan import PlanError, validate

FINDINGS = Path(__file__).resolve().parent.parent / "docs" / "findings"
HOLD_ENDTXN = FINDINGS / "kafka-17754-hold-endtxn"


def test_the_toxics_go_tests_pass():
    go = shutil.which("go")
    assert go, "Go is needed to build the toxiproxy server; .ci/run installs it"
    proc = subprocess.run([go, "test", "-count=1", "./..."], cwd=KAFKATOXIC_SOURCE,
                          capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^ok\s", proc.stdout, re.M), proc.stdout


def test_the_registry_names_the_apis_the_toxic_knows():
    source = "\n".join(p.read_text() for p in KAFKATOXIC_SOURCE.glob("*.go")
                       if not p.name.endswith("_test.go"))
    known = set(re.findall(r'"([A-Z][A-Za-z]+)"', source))
    assert set(faults.KAFKA_APIS) <= known, set(faults.KAFKA_APIS) - known


def _plan(step: dict) -> dict:
    return {"topics": {"t": {"partitions": 1}},
            "clients": {"p0": {"role": "producer"}, "t0": {"role": "txn_producer"}},
            "steps": [{"fault": step}]}


@pytest.mark.parametrize("step, message", [
    ({"f": "hold_request", "api": "EndTxnn"}, "hold_request's api must be a Kafka api key name"),
    ({"f": "hold_request", "api": "EndTxn", "client": "p0"},
     "hold_request's client needs a client of the plan with role pipeline or rw_txn or "
     "txn_producer, and 'p0' is a producer"),
    ({"f": "drop_response", "api": "EndTxn", "client": "x9"}, "'x9' is no client of the plan"),
    ({"f": "duplicate_request", "api": "WriteTxnMarkers"},
     "WriteTxnMarkers travels between nodes, never from a client"),
    ({"f": "hold_request", "api": "Fetch", "client": "t0"},
     "client matches by transactional id, which none of Fetch carry"),
    ({"f": "hold_request", "api": "EndTxn", "release_after": "Fetch"},
     "release_after Fetch never carries the held request's transactional id"),
    ({"f": "hold_request", "api": "EndTxn", "release_delay_ms": 5},
     "release_after_count and release_delay_ms need release_after"),
    ({"f": "hold_request", "api": "EndTxn", "nth": 0}, "hold_request's nth must be a positive"),
    ({"f": "release", "api": "EndTxn"}, "release takes no parameters"),
])
def test_a_step_that_cannot_act_is_refused_in_one_line(step, message):
    with pytest.raises(PlanError) as caught:
        validate(_plan(step))
    text = str(caught.value)
    assert "\n" not in text and message in text, text


def test_held_requests_are_windows_from_hold_to_release(tmp_path):
    seconds = iter(range(1000))
    held = {"fault": "hold_request-1", "link": "client-2", "api": "EndTxn", "correlation_id": 9,
            "client": "t0"}
    with HistoryWriter(tmp_path / "history.jsonl", clock=lambda: int(next(seconds) * 1e9)) as w:
        w.fault("hold_request", {"f": "hold_request", "api": "EndTxn", "client": "t0"})
        w.fault(faults.REQUEST_EVENT, {**held, "event": "match"})
        w.fault(faults.REQUEST_EVENT, {**held, "event": "hold"})
        w.fault(faults.REQUEST_EVENT, {**held, "event": "drop_response", "correlation_id": 3,
                                       "api": "Produce"})
        w.fault(faults.REQUEST_EVENT, {**held, "event": "release", "reason": "after_api",
                                       "held_ms": 4000})
        w.fault("heal", {"f": "heal"})
    h = load(tmp_path)
    wins = {w.label: w for w in report_faults.windows(h.fault_ops, h.duration)}
    hold = next(w for label, w in wins.items() if label.startswith("EndTxn of t0 held"))
    assert hold.label == "EndTxn of t0 held 4.0 s -> released 8.0 s (after_api)"
    assert hold.category == "request" and not hold.point and hold.end - hold.start == 4
    assert wins["Produce of t0: response dropped"].point
    assert wins["hold_request EndTxn of t0"].category == "request"


class _Events:
    def __init__(self, events):
        self.events = events

    def request_events(self):
        out, self.events = self.events, []
        return out


def test_the_toxics_events_are_recorded_with_the_plans_client_names(tmp_path):
    event = {"t_ns": 17, "fault": "hold_request-1", "proxy": "client-1", "event": "hold",
             "api": "EndTxn", "api_key": 26, "api_version": 4, "correlation_id": 5,
             "client_id": "rdkafka", "transactional_id": "onceproof-ab-tx-t0", "reason": ""}
    with HistoryWriter(tmp_path / "history.jsonl") as w, \
            ToxicEvents(_Events([event]), w, {"onceproof-ab-tx-t0": "t0"}.get) as recorder:
        pass
    assert recorder.recorded == 1
    (op,) = [e for e in read_events(tmp_path / "history.jsonl") if e["type"] == "ok"]
    assert op["process"] == "nemesis" and op["f"] == "request"
    assert op["value"] == {"fault": "hold_request-1", "link": "client-1", "event": "hold",
                           "api": "EndTxn", "api_key": 26, "api_version": 4,
                           "correlation_id": 5, "client_id": "rdkafka",
                           "transactional_id": "onceproof-ab-tx-t0", "client": "t0",
                           "at_ns": 17}


# ---- on the real cluster ---------------------------------------------------------------

def _trial(cluster, tmp_path, plan: dict):
    """Run and check plan; returns the trial and the values of its request events."""
    from onceproof.trial import run_trial
    trial = run_trial(plan, cluster, tmp_path)
    requests = [e["value"] for e in read_events(trial.history)
                if e["f"] == faults.REQUEST_EVENT and e["type"] == "ok"]
    return trial, requests


def _plan_file(name: str, client: str | None = None, java_client: str | None = None) -> dict:
    plan = json.loads((HOLD_ENDTXN / name).read_text())
    if client:
        for spec in plan["clients"].values():
            spec["client"] = client
    if java_client:
        plan["java_client"] = java_client
    return plan


def _of(requests: list[dict], event: str, **fields) -> list[dict]:
    return [r for r in requests if r["event"] == event
            and all(r.get(k) == v for k, v in fields.items())]


def _late_endtxn_landed_in_the_next_transaction(trial, requests) -> None:
    """The plan's own order, read back from the history: the EndTxn held, its retry
    answered (the first end op ok), the next transaction's send acknowledged, and only
    then the held EndTxn delivered."""
    (hold,) = _of(requests, "hold", api="EndTxn", client="t0")
    (release,) = _of(requests, "release", api="EndTxn", client="t0")
    assert release["reason"] == "update" and release["correlation_id"] == hold["correlation_id"]
    events = read_events(trial.history)
    t0 = [e for e in events if e["process"] == "t0" and e["type"] == "ok"]
    ends = [e for e in t0 if e["f"] in ("commit_txn", "abort_txn")]
    sends = [e for e in t0 if e["f"] == "send"]
    at = {e["value"].get("event"): e["index"] for e in events
          if e["f"] == faults.REQUEST_EVENT and e["type"] == "ok" and e["value"].get("client") == "t0"}
    assert ends and ends[0]["index"] < at["release"], "the first end's retry was not answered first"
    assert len(sends) >= 2 and at["hold"] < sends[1]["index"] < at["release"]


@pytest.mark.cluster
def test_hold_request_delivers_a_late_endtxn_into_the_next_transaction(cluster, tmp_path):
    """KAFKA-17754 on every run: librdkafka speaks transaction protocol v1, so the held
    EndTxn(commit), delivered after the next transaction wrote, commits that transaction's
    first write; the client then aborts it, and a read_committed reader sees the write."""
    trial, requests = _trial(cluster, tmp_path, _plan_file("plan-commit.json"))
    _late_endtxn_landed_in_the_next_transaction(trial, requests)
    assert "aborted_read" in trial.verdict.failing, trial.verdict.counts
    assert trial.exercised["commit_txn"] >= 1 and trial.exercised["abort_txn"] >= 1


@pytest.mark.cluster
def test_the_java_client_3_8_0_has_the_same_late_endtxn(cluster, tmp_path):
    """Transaction protocol v1 in the Java client (3.8.0, where Jepsen found KAFKA-17754):
    the same plan, the same aborted read."""
    trial, requests = _trial(cluster, tmp_path, _plan_file("plan-commit.json", client="java",
                                                           java_client="3.8.0"))
    _late_endtxn_landed_in_the_next_transaction(trial, requests)
    begins = [e for e in read_events(trial.history) if e["f"] == "begin_txn" and e["type"] == "ok"]
    assert begins and all(e["value"].get("txn_protocol") == 1 for e in begins), begins
    assert "aborted_read" in trial.verdict.failing, trial.verdict.counts


@pytest.mark.cluster
def test_a_late_abort_loses_the_next_transactions_write(cluster, tmp_path):
    """The abort variant: the held EndTxn(abort) aborts the next transaction's first
    write; the client then writes to another partition and commits. The lost write is in
    a partition where read_committed readers return nothing at all, judged because the
    final reads say where they stopped."""
    trial, requests = _trial(cluster, tmp_path, _plan_file("plan-abort.json"))
    _late_endtxn_landed_in_the_next_transaction(trial, requests)
    assert {"lost_write", "torn_txn"} <= trial.verdict.failing, trial.verdict.counts
    assert trial.exercised["commit_txn"] >= 1 and trial.exercised["abort_txn"] >= 1


@pytest.mark.cluster
def test_a_late_endtxn_is_fenced_on_transaction_protocol_v2(cluster, tmp_path):
    """The control: the Java client of the release bumps its epoch at every end (KIP-890
    part 2), so the same held EndTxn comes with an ended epoch and changes nothing."""
    trial, requests = _trial(cluster, tmp_path, _plan_file("plan-commit.json", client="java"))
    _late_endtxn_landed_in_the_next_transaction(trial, requests)
    begins = [e for e in read_events(trial.history) if e["f"] == "begin_txn" and e["type"] == "ok"]
    assert begins and all(e["value"].get("txn_protocol") == 2 for e in begins), begins
    assert trial.verdict.valid is True and not trial.verdict.failing, trial.verdict.counts
    assert trial.exercised["commit_txn"] >= 1 and trial.exercised["abort_txn"] >= 1


def _producers(config: dict, fault: dict) -> dict:
    return {"topics": {"t": {"partitions": 1}}, "producer": config,
            "clients": {"p0": {"role": "producer"}},
            "steps": [{"ops": {"p0": {"f": "send", "n": 2}}}, {"fault": fault},
                      {"ops": {"p0": {"f": "send", "n": 2}}}, {"ops": {"p0": {"f": "send", "n": 2}}},
                      {"fault": {"f": "heal"}}]}


@pytest.mark.cluster
def test_duplicate_request_is_absorbed_by_idempotence_and_not_without_it(cluster, tmp_path):
    dup = {"f": "duplicate_request", "api": "Produce"}
    trial, requests = _trial(cluster, tmp_path / "idempotent", _producers({}, dup))
    assert len(_of(requests, "duplicate", api="Produce")) == 1
    assert trial.verdict.valid is True and trial.exercised["acknowledged_writes"] >= 6
    plain = {"enable.idempotence": False, "acks": "all"}
    trial, requests = _trial(cluster, tmp_path / "plain", _producers(plain, dup))
    assert len(_of(requests, "duplicate", api="Produce")) == 1
    assert "duplicate" in trial.verdict.failing, trial.verdict.counts


@pytest.mark.cluster
def test_drop_response_lets_the_request_act_and_the_client_retry(cluster, tmp_path):
    drop = {"f": "drop_response", "api": "Produce"}
    trial, requests = _trial(cluster, tmp_path / "idempotent", _producers({}, drop))
    assert len(_of(requests, "drop_response", api="Produce")) == 1
    assert trial.verdict.valid is True and trial.exercised["acknowledged_writes"] >= 6
    # Without idempotence the retry of a produce that took effect is a second append.
    plain = {"enable.idempotence": False, "acks": "all", "retries": 5}
    trial, requests = _trial(cluster, tmp_path / "plain", _producers(plain, drop))
    assert len(_of(requests, "drop_response", api="Produce")) == 1
    assert "duplicate" in trial.verdict.failing, trial.verdict.counts


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_hold_that_lets_itself_go_is_drawn_without_a_heal(data):
    """A heal delivers whatever any fault holds: drawn after a hold_endtxn, it would let
    the EndTxn go before the client's retry and next transaction."""
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"t0": {"role": "txn_producer"}}}
    for name in ("hold_endtxn", "hold_txn_request", "hold_marker"):
        for hold in (None, st.integers(1, 9)):
            (_, step), = data.draw(faults.drawn(name, hold=hold, plan=plan))
            assert step["f"] == "hold_request"
            assert "release_after" in step or "release_ms" in step, step
    (_, _), (_, undo) = data.draw(faults.drawn("hold_request"))
    assert undo["f"] == "heal"  # the kind itself, whose draw may never let go


def test_strategies_draw_every_transactional_request_the_toxic_can_match():
    assert sorted(faults.DRAWN_TXN_APIS) == sorted(faults.TXN_ID_APIS)
    assert faults.DRAWN_TXN_APIS[0] == "EndTxn"  # the simplest draw acts in every transaction
