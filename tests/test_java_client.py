"""Plan clients on the Java client (run/jvm.py), on the real cluster: every role runs and
does its work, client by client, records what a librdkafka client records, crashes as a
killed JVM and comes back, is replaced when a call of it hangs, and the history names
the client and the transaction protocol it spoke."""
from __future__ import annotations

from collections import Counter

import psutil
import pytest

from onceproof.history.format import CLUSTER, NEMESIS
from onceproof.history.read import read_events
from onceproof.run.backends import client_spec, on_client, refuse
from onceproof.run.jvm import java_config, unknown_settings
from onceproof.run.jvm_build import ensure_java_client
from onceproof.search import search_name
from onceproof.trial import run_trial
from onceproof.workloads.plan import PlanError, validate
from onceproof.workloads.suites import SUITES


def _agents() -> list[int]:
    """The Java agents this test process started that are still alive. Not the machine's:
    pytest-xdist's other worker runs its own JVMs meanwhile (test_job's Ctrl-C and crash
    tests on the Java client), which a machine-wide look counted as this run's (CI,
    2026-12-05: three of them failed two tests here)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "OnceproofAgent" in " ".join(p.cmdline()):
                found.append(p.pid)
        except psutil.Error:
            pass
    return found


def _mixed_plan(duration: int) -> dict:
    """Every role on the Java client, and a librdkafka consumer reading what they wrote."""
    plan = {"topics": {"t": {"partitions": 3}, "in": {"partitions": 3}, "out": {"partitions": 3}},
            "clients": {
                "p0": {"role": "producer", "topic": "in", "threads": 2, "seed": 1},
                "t0": {"role": "txn_producer", "topic": "t", "seed": 2},
                "w0": {"role": "rw_txn", "topic": "t", "seed": 3},
                "x0": {"role": "pipeline", "input": "in", "output": "out", "seed": 4},
                "c0": {"role": "consumer", "topic": "out", "seed": 5},
                "c1": {"role": "consumer", "topic": "t", "seed": 6, "client": "librdkafka"}},
            "duration": duration,
            "schedule": [{"at": 8, "crash": "x0"},
                         {"at": 12, "fault": {"f": "latency", "ms": 200, "jitter": 50}},
                         {"at": 16, "fault": {"f": "heal"}}]}
    return on_client(plan, "java")


@pytest.mark.cluster
def test_every_role_runs_on_the_java_client_beside_librdkafka_and_stays_exact(cluster, tmp_path):
    plan = _mixed_plan(25)
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")

    tested = next(e for e in events if e["f"] == CLUSTER)["value"]["clients"]
    assert set(tested) == {"java", "librdkafka"} and tested["java"] == cluster.dist.version

    # The Java client's transactions say which protocol it spoke, as it says itself:
    # KIP-890's v2 on a 4.x client against a 4.x cluster.
    protocols = {e["value"]["txn_protocol"] for e in events
                 if e["f"] == "begin_txn" and e["type"] == "ok"}
    assert protocols == ({2} if cluster.dist.major >= 4 else {1}), protocols

    # The crash killed the pipeline's JVM, and its successor committed after it.
    crashed = [e for e in events if e["f"] == "client_crashed" and e["type"] == "info"]
    assert [e["value"]["by"] for e in crashed] == ["x0.1"]
    assert any(e["process"] == "x0.1" and e["f"] == "commit_txn" and e["type"] == "ok"
               for e in events if e["index"] > crashed[0]["index"])
    # Two threads of one producer, each with its own sends in flight.
    assert {"p0", "p0~1"} <= {e["process"] for e in events if e["f"] == "send" and e["type"] == "ok"}
    # The librdkafka consumer read what Java transactions committed.
    assert any(e["process"] == "c1" and e["value"]["records"] for e in events
               if e["f"] == "poll" and e["type"] == "ok")

    # Each client did its role's work, not only the run as a whole: totals across clients
    # would hide a role (the read-write transactions, the Java consumer) whose every op
    # failed. An application's processes count together (x0 and its successor x0.1).
    done: dict[str, Counter] = {}
    for e in events:
        if e["type"] == "ok" and e["process"] not in (NEMESIS, "final") and not e.get("final"):
            app = e["process"].split(".")[0].split("~")[0]
            done.setdefault(app, Counter())[e["f"]] += 1
    wanted = {"p0": {"send"},
              "t0": {"begin_txn", "send", "commit_txn", "abort_txn"},
              "w0": {"begin_txn", "poll", "send", "commit_txn", "abort_txn"},
              "x0": {"begin_txn", "poll", "send", "send_offsets", "commit_txn", "abort_txn"},
              "c0": {"poll", "seek", "commit_offsets", "fetch_offsets"},
              "c1": {"poll"}}
    missing = {cid: sorted(ops - set(done.get(cid, ()))) for cid, ops in wanted.items()}
    assert not any(missing.values()), (missing, done)
    # The readers read: the Java consumer what the Java pipeline wrote, the read-write
    # transactions what the transactional producer committed.
    for reader in ("c0", "w0", "x0"):
        assert any(e["value"]["records"] for e in events if e["type"] == "ok" and e["f"] == "poll"
                   and e["process"].split(".")[0] == reader), f"{reader} read nothing"
    # No client stopped on an error the client library raised (each would be a
    # client_error replacement); the one crash is the plan's.
    assert [e["f"] for e in events if e["process"] == NEMESIS and e["type"] == "info"
            and e["f"] in ("client_error", "client_hung")] == []

    seen = trial.exercised
    assert seen["acknowledged_writes"] > 50 and seen["commit_txn"] > 10
    assert seen["send_offsets"] > 5 and seen["records_read"] > 50
    assert trial.verdict.valid and trial.verdict.live, trial.verdict.counts
    assert not _agents()  # every JVM of the run ended with it


@pytest.mark.cluster
def test_a_java_client_stuck_in_a_call_is_killed_and_replaced(cluster, tmp_path, monkeypatch):
    from onceproof.run import rounds
    monkeypatch.setattr(rounds, "ROUND_TIMEOUT", 3.0)
    # The Java consumer polls a topic nobody writes for 30 s: past the round's timeout
    # it is left behind, its JVM killed, and the application goes on as c0.1, a JVM of
    # its own, whose poll returns in its time.
    plan = on_client({"topics": {"t": {"partitions": 1}, "quiet": {"partitions": 1}},
                      "clients": {"p0": {"role": "producer", "topic": "t"},
                                  "c0": {"role": "consumer", "topic": "quiet"}},
                      "steps": [{"ops": {"p0": {"f": "send"}, "c0": {"f": "poll", "timeout": 30}}},
                                {"ops": {"p0": {"f": "send"}, "c0": {"f": "poll", "timeout": 2}}}]},
                     "java")
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    hung = [e for e in events if e["f"] == "client_hung" and e["type"] == "info"]
    assert [(e["value"]["process"], e["value"]["by"]) for e in hung] == [("c0", "c0.1")]
    polls = [(e["process"], e["type"]) for e in events if e["f"] == "poll" and not e.get("final")]
    # c0's poll is left open for good (unknown); its successor's completed.
    assert polls == [("c0", "invoke"), ("c0.1", "invoke"), ("c0.1", "ok")], polls
    assert [e["type"] for e in events if e["process"] == "p0" and e["f"] == "send"] == [
        "invoke", "ok", "invoke", "ok"]
    assert trial.verdict.valid, trial.verdict.counts
    assert not _agents()  # the left-behind JVM was killed, and every other ended


@pytest.mark.cluster
def test_the_java_client_from_before_kip_890_speaks_transaction_protocol_v1(cluster, tmp_path):
    plan = on_client({"topics": {"t": {"partitions": 2}},
                      "clients": {"t0": {"role": "txn_producer"}, "c0": {"role": "consumer"}},
                      "steps": [{"ops": {"t0": {"f": "begin"}}}, {"ops": {"t0": {"f": "send", "n": 3}}},
                                {"ops": {"t0": {"f": "commit"}}},
                                {"ops": {"c0": {"f": "poll", "n": 10, "timeout": 3.0}}}]},
                     "java", "3.8.0")
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    assert next(e for e in events if e["f"] == CLUSTER)["value"]["clients"] == {"java": "3.8.0"}
    begun = [e["value"] for e in events if e["f"] == "begin_txn" and e["type"] == "ok"]
    assert [b["txn_protocol"] for b in begun] == [1]
    sent = {r["value"] for e in events if e["f"] == "send" and e["type"] == "ok"
            for r in e["value"]["records"]}
    polled = {r["value"] for e in events if e["f"] == "poll" and e["type"] == "ok"
              and e["process"] == "c0" for r in e["value"]["records"]}
    # One poll returns what its first fetches bring: some or all of the committed records.
    assert len(sent) == 3 and polled and polled <= sent
    assert trial.verdict.valid, trial.verdict.counts


@pytest.mark.cluster
def test_a_subscribed_java_pipeline_records_the_positions_it_keeps(cluster, tmp_path):
    if cluster.dist.major < 4:
        pytest.skip("KIP-848's consumer protocol is on by default from Kafka 4.0")
    # Two members of one group start together: the first gets every partition, and gives
    # some up when the second joins. KIP-848 moves partitions one by one, so the ones the
    # first keeps keep their positions, which its assign op must say (`kept`).
    plan = on_client({"topics": {"in": {"partitions": 4}, "out": {"partitions": 4}},
                      "consumer": {"group.protocol": "consumer"},
                      "clients": {"p0": {"role": "producer", "topic": "in", "seed": 1},
                                  "x0": {"role": "pipeline", "input": "in", "output": "out",
                                         "seed": 2, "pipeline": {"subscribe": True}},
                                  "x1": {"role": "pipeline", "input": "in", "output": "out",
                                         "seed": 3, "group": "x0",
                                         "pipeline": {"subscribe": True}}},
                      "duration": 20, "schedule": []}, "java")
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    assigned = [e["value"] for e in events if e["f"] == "assign" and e["type"] == "ok"
                and e["process"] in ("x0", "x1")]
    assert any(a["kept"] for a in assigned), assigned
    # Between them the two members held every partition. (Not that each partition was
    # read: a lagging Java consumer drains one partition's fetch before the next, so in
    # 20 s a partition may go unread, as it would for any application.)
    held = {p["partition"] for a in assigned for p in a["partitions"]}
    assert held == set(range(4)), assigned
    readers = {e["process"] for e in events if e["f"] == "poll" and e["type"] == "ok"
               and e["process"] in ("x0", "x1") and e["value"]["records"]}
    assert readers == {"x0", "x1"}
    assert trial.exercised["commit_txn"] > 5
    assert trial.verdict.valid, trial.verdict.counts


def test_a_plan_names_a_known_client_and_release():
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}}, "steps": []}
    with pytest.raises(PlanError, match="unknown client 'jvm'"):
        on_client(plan, "jvm")
    with pytest.raises(PlanError, match=r"unknown Java client version .3\.8."):
        on_client(plan, "java", "3.8")
    # A plan may name any library; the backends' registry refuses one it does not hold
    # (before a run: on_client and the run's prepare call refuse).
    kotlin = {**plan, "clients": {"p0": {"role": "producer", "client": "kotlin"}}}
    validate(kotlin)
    with pytest.raises(PlanError, match=r"clients\.p0\.client: must be one of librdkafka, java"):
        refuse(kotlin)
    # A client that names its library keeps it; the others take the run's.
    mixed = on_client({**plan, "clients": {"p0": {"role": "producer", "client": "librdkafka"},
                                           "p1": {"role": "producer"}}}, "java")
    assert {c["client"] for c in mixed["clients"].values()} == {"librdkafka", "java"}


def test_a_side_by_side_client_is_a_library_or_the_java_client_at_a_release():
    assert client_spec("librdkafka") == ("librdkafka", None)
    assert client_spec("java") == ("java", None)
    assert client_spec("java:3.8.0") == ("java", "3.8.0")
    for wrong in ("jvm", "java:3.8", "librdkafka:2.12.0", "java:"):
        with pytest.raises(PlanError, match=f"unknown client {wrong!r}: .*java:3.8.0"):
            client_spec(wrong)
    # Its searches keep their counterexamples apart from the other clients'.
    suite = SUITES["java_correct_pipeline"]
    assert search_name(suite, "concurrent", "java:3.8.0") == "java_correct_pipeline-concurrent-java-3.8.0"


def test_settings_in_librdkafkas_names_reach_the_java_client_in_its_own():
    # The same request timeout on both: librdkafka's socket.timeout.ms is the Java
    # client's request.timeout.ms; librdkafka's request.timeout.ms (the broker's ack
    # timeout) has no Java setting beside it.
    assert java_config({"socket.timeout.ms": 3000, "request.timeout.ms": 2000,
                        "message.timeout.ms": 4000, "transaction.timeout.ms": 3000}) == {
        "request.timeout.ms": "3000", "delivery.timeout.ms": "4000",
        "transaction.timeout.ms": "3000"}
    # A message timeout librdkafka takes but the Java client would refuse (below linger.ms
    # plus request.timeout.ms: delayed_end_txn's, with the harness's 5 ms linger) is
    # raised to that floor; a producer that cannot be made ran no transaction there.
    assert java_config({"socket.timeout.ms": 3000, "message.timeout.ms": 3000,
                        "queue.buffering.max.ms": 5})["delivery.timeout.ms"] == "3005"
    assert java_config({"message.timeout.ms": 4000})["delivery.timeout.ms"] == "30005"
    # Java's own name, alone, stays as it is.
    assert java_config({"request.timeout.ms": 1500}) == {"request.timeout.ms": "1500"}


def test_a_setting_the_java_client_does_not_know_is_named():
    dist = ensure_java_client("4.4.0")
    plan = {"topics": {"t": {"partitions": 1}}, "steps": [],
            "producer": {"socket.timeout.ms": 2000, "message.timeout.ms": 4000, "acks": "all",
                         "queue.buffering.max.kbytes": 1024},
            "clients": {"p0": {"role": "producer", "client": "java"}}}
    # message.timeout.ms is librdkafka's name for the Java client's delivery.timeout.ms,
    # socket.timeout.ms for its request.timeout.ms; librdkafka's queue bound has none.
    assert unknown_settings(plan, "p0", dist) == ["queue.buffering.max.kbytes"]


@pytest.mark.cluster
def test_a_java_call_that_outlives_its_bound_is_given_up_and_its_process_replaced(
        cluster, tmp_path, monkeypatch):
    from onceproof.run import jvm
    # The agent bounds each blocking transactional call by the op timeout plus a grace
    # (its own bounded(), as clients.py's for librdkafka), and a process holding a call
    # it gave up on is stuck: the harness replaces it. Short bounds, so a commit whose
    # EndTxn the proxy holds outlives them in seconds; max.block.ms above them, so the
    # Java client itself does not time the commit out first.
    monkeypatch.setattr(jvm, "OP_TIMEOUT", 3.0)
    monkeypatch.setattr(jvm, "HANG_GRACE", 1.0)
    txn = [{"ops": {"t0": {"f": "begin"}}}, {"ops": {"t0": {"f": "send", "n": 1}}}]
    plan = on_client({"topics": {"t": {"partitions": 1}}, "producer": {"max.block.ms": 60000},
                      "clients": {"t0": {"role": "txn_producer"}},
                      "steps": [*txn, {"fault": {"f": "hold_request", "api": "EndTxn",
                                                 "client": "t0"}},
                                {"ops": {"t0": {"f": "commit"}}}, {"fault": {"f": "release"}},
                                *txn, {"ops": {"t0": {"f": "commit"}}}]}, "java")
    trial = run_trial(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    hung = [e for e in events if e["f"] == "client_hung" and e["type"] == "info"]
    assert [(e["value"]["process"], e["value"]["by"]) for e in hung] == [("t0", "t0.1")]
    assert "commitTransaction did not return" in hung[0]["error"]
    commits = [(e["process"], e["type"]) for e in events
               if e["f"] == "commit_txn" and e["type"] != "invoke"]
    # The held commit is unknown (info), and the successor's transaction commits.
    assert commits == [("t0", "info"), ("t0.1", "ok")], commits
    assert trial.verdict.valid, trial.verdict.counts
    assert not _agents()
