"""Client-side faults (issue 59 point 4): pause_client stops a client's process (a
librdkafka host, a Java client's JVM) and continues it; a crash brings a client back
under the same transactional id or a fresh one. On the real cluster: a client paused
past its transaction timeout comes back to a transaction the coordinator aborted, and is
fenced rather than committing it."""
from __future__ import annotations

import os
import signal
import time

import pytest

from onceproof.history.read import read_events
from onceproof.trial import run_trial


def _pause_plan(library: str) -> dict:
    # A 5 s transaction timeout (its message timeout may not be longer, librdkafka
    # says), a 15 s pause: the coordinator aborts the open transaction (it looks every
    # 2 s, cluster/topology.py) long before the client is continued, its commit waiting.
    config = {"transaction.timeout.ms": 5000, "message.timeout.ms": 5000}
    begin, send, commit = {"f": "begin"}, {"f": "send", "n": 2}, {"f": "commit"}
    return {"topics": {"t": {"partitions": 2}},
            "clients": {"t0": {"role": "txn_producer", "client": library, "config": config},
                        "c0": {"role": "consumer"}},
            "steps": [{"ops": {"t0": begin}}, {"ops": {"t0": send}},
                      {"fault": {"f": "pause_client", "client": "t0", "ms": 15000}},
                      {"ops": {"t0": commit}},
                      {"ops": {"t0": begin}}, {"ops": {"t0": send}}, {"ops": {"t0": commit}},
                      {"ops": {"c0": {"f": "poll", "timeout": 2}}}]}


@pytest.mark.cluster
@pytest.mark.parametrize("library", ["librdkafka", "java"])
def test_a_client_paused_past_its_transaction_timeout_is_fenced(cluster, tmp_path, library):
    trial = run_trial(_pause_plan(library), cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    done = [e for e in events if e["type"] != "invoke"]
    nemesis = {e["f"]: e for e in done if e["process"] == "nemesis"}
    assert nemesis["pause_client"]["type"] == "ok"
    assert nemesis["pause_client"]["value"]["processes"] == ["t0"]
    # Continued by the step the pause fired 15 s on, not by the end of the run.
    assert nemesis["resume_client"]["value"] == {"f": "resume_client", "client": "t0",
                                                 "processes": ["t0"]}
    paused_at = next(e["time"] for e in events if e["f"] == "pause_client")
    resumed_at = next(e["time"] for e in events if e["f"] == "resume_client")
    first = [e for e in done if e.get("txn") == "t0/1"]
    # The commit of the transaction the coordinator aborted came after the pause, and
    # did not commit: the client was fenced (its epoch bumped by the abort).
    commits = [e for e in first if e["f"] == "commit_txn"]
    assert commits and all(e["type"] != "ok" for e in commits), commits
    assert all(e["time"] > resumed_at > paused_at for e in commits)
    # librdkafka: "_FENCED ... This instance has been fenced by a newer instance" (the
    # abort bumped its epoch); the Java client: the coordinator refuses the EndTxn of a
    # transaction it no longer holds open (InvalidTxnStateException).
    said = " ".join(e.get("error") or "" for e in commits).lower()
    assert ("fenced" if library == "librdkafka" else "invalidtxnstate") in said, said
    # Nothing it wrote then is read, and the client goes on: its next transaction commits.
    assert trial.verdict.valid, trial.verdict.failing
    later = [e for e in done if e["f"] == "commit_txn" and e.get("txn") not in (None, "t0/1")]
    assert any(e["type"] == "ok" for e in later), later
    first_values = {r["value"] for e in first if e["f"] == "send" for r in e["value"]["records"]}
    read = {r["value"] for e in done if e["f"] == "poll" and e["type"] == "ok"
            for r in e["value"]["records"]}
    assert first_values and not first_values & read


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.cluster
def test_a_paused_client_is_continued_when_the_run_stops_early(cluster, tmp_path, monkeypatch):
    """A run that stops while a client is paused (an error, Ctrl-C) continues it before
    it is killed: no stopped process is left behind."""
    from onceproof.run import fleet as fleet_module
    from onceproof.run.execute import run
    seen: dict = {}
    original = fleet_module.Fleet.pause

    def pause_and_stop(self, cid):
        original(self, cid)
        seen["pid"] = self.current[cid].pid
        deadline = time.monotonic() + 5  # a signal is delivered soon, not at once
        while (state := _state(seen["pid"])) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["state"] = state
        raise KeyboardInterrupt  # as a Ctrl-C would, right after the pause
    monkeypatch.setattr(fleet_module.Fleet, "pause", pause_and_stop)
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
            "steps": [{"ops": {"p0": {"f": "send"}}},
                      {"fault": {"f": "pause_client", "client": "p0", "ms": 600000}},
                      {"ops": {"p0": {"f": "send"}}}]}
    with pytest.raises(KeyboardInterrupt):
        run(plan, cluster, tmp_path)
    assert seen["state"] == "T"  # it was stopped
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if _state(seen["pid"]) in ("Z", "X"):
                break
        except FileNotFoundError:
            break
        time.sleep(0.2)
    else:
        state = _state(seen["pid"])
        os.kill(seen["pid"], signal.SIGKILL)
        pytest.fail(f"the paused client's process is left in state {state}")


@pytest.mark.cluster
@pytest.mark.parametrize("library", ["librdkafka", "java"])
def test_shaped_transactions_run_as_their_ops_say_on_both_backends(cluster, tmp_path, library):
    """A pipeline's transaction of three poll-transform-send rounds with a pause before
    its second, and a producer's commit 1.5 s after its last send: both backends honour
    them, and the run stays exact."""
    plan = {"topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
            "clients": {"p0": {"role": "txn_producer", "topic": "in", "client": library},
                        "x0": {"role": "pipeline", "input": "in", "output": "out",
                               "client": library}},
            "steps": [{"ops": {"p0": {"f": "begin"}}}, {"ops": {"p0": {"f": "send", "n": 3}}},
                      {"ops": {"p0": {"f": "send", "n": 3}}},
                      {"ops": {"p0": {"f": "commit", "pause_ms": 1500}}},
                      {"ops": {"x0": {"f": "process", "n": 2, "rounds": 3, "pause_ms": 1500,
                                      "pause_before": 2}}}]}
    trial = run_trial(plan, cluster, tmp_path)
    assert trial.verdict.valid and trial.verdict.live, trial.verdict.failing
    done = [e for e in read_events(tmp_path / "history.jsonl") if e["type"] != "invoke"]
    invoked = {e["op"]: e for e in read_events(tmp_path / "history.jsonl") if e["type"] == "invoke"}
    p0 = [e for e in done if e["process"] == "p0"]
    last_send, commit = [e for e in p0 if e["f"] == "send"][-1], next(e for e in p0 if e["f"] == "commit_txn")
    assert commit["type"] == "ok"
    assert invoked[commit["op"]]["time"] - last_send["time"] >= 1.5e9  # its pause
    x0 = [e for e in done if e["process"] == "x0" and e.get("txn")]
    txns = {e["txn"] for e in x0}
    assert len(txns) == 1  # one transaction ...
    polls = [e for e in x0 if e["f"] == "poll"]
    assert len(polls) == 3  # ... of three rounds
    assert invoked[polls[1]["op"]]["time"] - polls[0]["time"] >= 1.5e9  # paused before the second
    commits = [e for e in x0 if e["f"] == "commit_txn"]
    assert commits and commits[-1]["type"] == "ok"


@pytest.mark.cluster
@pytest.mark.parametrize("library", ["librdkafka", "java"])
def test_a_client_crashed_with_a_fresh_identity_comes_back_under_a_new_transactional_id(
        cluster, tmp_path, library):
    """A fresh successor does not fence what its predecessor left open, as a
    deployment that names its transactional ids afresh would not: the coordinator
    aborts that after the transaction timeout (5 s here), and the run stays valid."""
    config = {"transaction.timeout.ms": 5000, "message.timeout.ms": 5000}
    plan = {"topics": {"t": {"partitions": 2}},
            "clients": {"t0": {"role": "txn_producer", "client": library, "config": config,
                               "seed": 1},
                        "c0": {"role": "consumer", "seed": 2}},
            "duration": 14, "mix": {"restart_after": 1},
            "schedule": [{"at": 4, "crash": "t0", "identity": "fresh"}]}
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    crashed = [e for e in events if e["f"] == "client_crashed" and e["type"] == "info"]
    assert [(e["value"]["process"], e["value"]["by"], e["value"]["identity"])
            for e in crashed] == [("t0", "t0.1", "fresh")]
    tids = {e["process"]: e["value"]["tid"] for e in events
            if e["f"] == "begin_txn" and e["type"] == "invoke"}
    assert tids["t0.1"] == crashed[0]["value"]["tid"] and tids["t0.1"] != tids["t0"]
    assert tids["t0.1"].endswith("tx-t0~1"), tids
    later = [e for e in events if e["process"] == "t0.1" and e["f"] == "commit_txn"]
    assert any(e["type"] == "ok" for e in later), later
    assert trial.verdict.valid, trial.verdict.failing
