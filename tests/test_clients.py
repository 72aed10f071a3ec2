"""The clients behave as a correct application would when Kafka answers late, on the real
cluster: what they record must stay sound, and they must keep working afterwards."""
from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

from onceproof.history.read import read_events
from onceproof.history.writer import HistoryWriter
from onceproof.run import clients
from onceproof.run.execute import _create_topics

pytestmark = pytest.mark.cluster


@contextmanager
def txn_client(cluster, tmp_path, suffix: str, partitions: int, producer: dict | None = None):
    """A transactional client t0 on a fresh topic t, recording to tmp_path/history.jsonl."""
    plan = {"topics": {"t": {"partitions": partitions}}, "steps": [],
            "producer": producer or {}, "clients": {"t0": {"role": "txn_producer"}}}
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        ctx = clients.RunContext(writer, cluster.connection(), suffix, {"t": partitions})
        _create_topics(cluster, ctx, plan)
        yield clients.TxnProducer("t0", plan["clients"]["t0"], plan, ctx)


def test_a_commit_that_times_out_is_retried_then_the_producer_goes_on(cluster, tmp_path, monkeypatch):
    # Short client timeouts so that the cut outlasts the first commit attempt but not the
    # transaction's own timeout (20 s), after which the coordinator would abort it.
    monkeypatch.setattr(clients, "OP_TIMEOUT", 4.0)
    with txn_client(cluster, tmp_path, "retry", 1, {"reconnect.backoff.max.ms": 300}) as producer:
        producer.op_begin({})
        producer.op_send({"n": 1})
        cluster.disable(cluster.links(kinds=("client",)))
        healer = threading.Timer(5.0, cluster.heal)
        healer.start()
        try:
            committed = producer.op_commit({})
        finally:
            healer.join()
        producer.op_begin({})
        producer.op_send({"n": 1})
        assert producer.op_commit({})
    events = read_events(tmp_path / "history.jsonl")
    commits = [(e["txn"], e["type"]) for e in events if e["f"] == "commit_txn" and e["type"] != "invoke"]
    first = [t for txn, t in commits if txn == "t0/1"]
    assert first[0] == "info", commits  # the cut made the first attempt time out
    assert committed and first[-1] == "ok", commits  # a retry of the same transaction landed
    assert ("t0/2", "ok") in commits
    begins = [e["type"] for e in events if e["f"] == "begin_txn" and e["type"] != "invoke"]
    assert begins == ["ok", "ok"]
    # Each begin names the timeout after which Kafka would abort it (hanging_txn).
    assert [e["value"]["txn_timeout_ms"] for e in events
            if e["f"] == "begin_txn" and e["type"] == "invoke"] == [clients.TXN_TIMEOUT_MS] * 2


def test_a_commit_refused_after_a_send_timed_out_is_followed_by_a_recorded_abort(cluster, tmp_path):
    # Whether the abort landed, and when, is what a request the network still holds can
    # do after it (KAFKA-12671), so the abort the application owes is in the history.
    with txn_client(cluster, tmp_path, "abort", 1, {"message.timeout.ms": 2000}) as producer:
        producer.op_begin({})
        cluster.disable(cluster.links(kinds=("client",)))
        try:
            producer.op_send({"n": 1})  # never reaches the leader: times out in the client
        finally:
            cluster.heal()
        assert not producer.op_commit({})
        producer.op_begin({})
        producer.op_send({"n": 1})
        assert producer.op_commit({})
    events = read_events(tmp_path / "history.jsonl")
    ends = [(e["f"], e["txn"], e["type"]) for e in events
            if e["f"] in ("commit_txn", "abort_txn") and e["type"] != "invoke"]
    assert ends == [("commit_txn", "t0/1", "fail"), ("abort_txn", "t0/1", "ok"),
                    ("commit_txn", "t0/2", "ok")], ends


def test_bounded_gives_up_on_a_call_that_outlives_its_timeout(monkeypatch):
    monkeypatch.setattr(clients, "HANG_GRACE", 0.2)
    # `abandoned` is the client process's own; here it is this test's, so the note it
    # takes does not reach the next test in this pytest process.
    monkeypatch.setattr(clients, "abandoned", [])
    release = threading.Event()
    with pytest.raises(clients.Hung, match="did not return"):
        clients.bounded(lambda timeout: release.wait(60), timeout=0.1)
    assert len(clients.abandoned) == 1 and "did not return" in clients.abandoned[0]
    release.set()
    assert clients.bounded(lambda x, timeout: (x, timeout), 7, timeout=1.0) == (7, 1.0)
    with pytest.raises(KeyError):  # the call's own errors reach the caller
        clients.bounded(lambda timeout: {}["missing"], timeout=1.0)


def test_a_client_stuck_past_the_round_timeout_is_replaced_and_the_run_ends(
        cluster, tmp_path, monkeypatch):
    from onceproof.run import execute as runner
    from onceproof.run import rounds
    monkeypatch.setattr(rounds, "ROUND_TIMEOUT", 3.0)
    plan = {"topics": {"t": {"partitions": 1}},
            "clients": {"p0": {"role": "producer"}, "c0": {"role": "consumer"}},
            "steps": [{"ops": {"p0": {"f": "send"}, "c0": {"f": "poll", "n": 50, "timeout": 30}}},
                      {"ops": {"p0": {"f": "send"}, "c0": {"f": "poll"}}}]}
    runner.run(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    hung = [e for e in events if e["f"] == "client_hung" and e["type"] != "invoke"]
    assert hung and hung[0]["type"] == "info" and hung[0]["value"]["process"] == "c0"
    assert hung[0]["value"]["by"] == "c0.1"
    polls = [e["process"] for e in events
             if e["f"] == "poll" and e["type"] == "invoke" and not e.get("final")]
    assert polls == ["c0", "c0.1"]  # the second round ran c0's application as a new process
    sends = [e for e in events if e["process"] == "p0" and e["f"] == "send" and e["type"] == "ok"]
    assert len(sends) == 2
    assert any(e["f"] == "watermarks" and e["type"] == "ok" for e in events)  # the run ended


def test_a_fenced_producer_records_its_send_as_unknown_and_the_client_goes_on(cluster, tmp_path):
    from confluent_kafka import Producer
    with txn_client(cluster, tmp_path, "fence", 2) as producer:
        producer.op_begin({})
        producer.op_send({"partition": 0})
        # Another instance of the application with the same transactional id.
        rival = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": producer.tid,
                          **clients.QUIET})
        rival.init_transactions(30)
        # A partition new to the transaction: librdkafka asks the coordinator to add it,
        # hears it is fenced, and its flush raises the fatal error.
        producer.op_send({"partition": 1})
        producer.op_commit({})
        producer.op_begin({})  # a new producer fences the rival in turn
        producer.op_send({"n": 1})
        assert producer.op_commit({})
    events = read_events(tmp_path / "history.jsonl")
    sends = [(e["txn"], e["type"], e.get("error", "")) for e in events
             if e["f"] == "send" and e["type"] != "invoke"]
    assert sends[0][:2] == ("t0/1", "ok")
    assert sends[1][:2] == ("t0/1", "info"), sends  # never ok, and not certainly absent
    assert sends[-1][:2] == ("t0/2", "ok")


def test_a_new_consumer_records_where_it_starts_reading(cluster, tmp_path):
    """After assign, a consumer's start is a seek to the group's committed offsets, or to
    the log's beginning where the group has none, so a checker knows what it went over
    before its first record."""
    plan = {"topics": {"t": {"partitions": 2}}, "steps": [],
            "clients": {"p0": {"role": "producer"}, "c0": {"role": "consumer", "group": "g"}}}
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        ctx = clients.RunContext(writer, cluster.connection(), "start", {"t": 2})
        _create_topics(cluster, ctx, plan)
        producer = clients.PlainProducer("p0", plan["clients"]["p0"], plan, ctx)
        for _ in range(3):
            producer.run({"f": "send", "n": 4})
        first = clients.TopicConsumer("c0", plan["clients"]["c0"], plan, ctx)
        read: set[int] = set()
        for _ in range(20):
            if read == {0, 1}:
                break
            read |= {r["partition"] for r in first.op_poll({"n": 2, "timeout": 1.0})}
        first.commit_positions()
        committed = dict(first.positions)
        first.close()
        clients.TopicConsumer("c0", plan["clients"]["c0"], plan, ctx, "c0.1").close()
    events = read_events(tmp_path / "history.jsonl")
    starts = {e["process"]: {p["partition"]: p["offset"] for p in e["value"]["positions"]}
              for e in events if e["f"] == "seek" and e["type"] == "ok"}
    assert starts["c0"] == {0: 0, 1: 0}  # a new group: the log's beginning
    assert starts["c0.1"] == committed and any(committed.values())
    for process in ("c0", "c0.1"):
        mine = [e["f"] for e in events if e["process"] == process and e["type"] == "ok"]
        assert mine[:2] == ["assign", "seek"], mine


def test_a_client_that_asks_for_librdkafkas_debug_log_gets_it_in_a_file(cluster, tmp_path):
    """A plan client whose settings set librdkafka's `debug` has that log, as librdkafka
    printed it, in the run's client-logs/, headed by the line that ties its wall clock to
    the history's; a client that asks for none writes none."""
    import re

    from onceproof.run.execute import run
    plan = {"topics": {"t": {"partitions": 1}},
            "clients": {"t0": {"role": "txn_producer", "config": {"debug": "eos"}},
                        "p0": {"role": "producer"}},
            "steps": [{"ops": {"t0": {"f": "begin"}, "p0": {"f": "send", "n": 1}}},
                      {"ops": {"t0": {"f": "send", "n": 1}}}, {"ops": {"t0": {"f": "commit"}}}]}
    run(plan, cluster, tmp_path)
    assert [e["type"] for e in read_events(tmp_path / "history.jsonl")
            if e["process"] == "t0" and e["f"] == "commit_txn"] == ["invoke", "ok"]
    logs = tmp_path / "client-logs"
    assert sorted(p.name for p in logs.iterdir()) == ["t0.librdkafka.log"]
    first, *lines = (logs / "t0.librdkafka.log").read_text().splitlines()
    assert re.fullmatch(r"# librdkafka's debug log of t0: wall clock \d+\.\d{6} s = the "
                        r"history's time \d+ ns", first)
    # librdkafka's own printer: %7|<seconds>.<ms>|<facility>|<instance>| <message>
    assert any(re.match(r"%7\|\d+\.\d{3}\|\w+\|rdkafka#producer-\d+\|", line)
               and "EndTxn" in line for line in lines), lines[-5:]


def test_a_synchronous_offset_commit_that_never_returns_is_given_up(cluster, tmp_path, monkeypatch):
    """librdkafka's synchronous commit takes no timeout: with its group coordinator out
    of reach it waits as long as that lasts. The consumer gives up on it as on any
    other call that outlives its timeout (clients.bounded): the commit ends in info and
    the process is noted for replacement, instead of holding its round."""
    monkeypatch.setattr(clients, "OP_TIMEOUT", 2.0)
    monkeypatch.setattr(clients, "HANG_GRACE", 1.0)
    monkeypatch.setattr(clients, "abandoned", [])
    plan = {"topics": {"t": {"partitions": 1}}, "steps": [],
            "clients": {"c0": {"role": "consumer", "group": "g"}}}
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        ctx = clients.RunContext(writer, cluster.connection(), "hung-commit", {"t": 1})
        _create_topics(cluster, ctx, plan)
        consumer = clients.TopicConsumer("c0", plan["clients"]["c0"], plan, ctx)
        assert consumer.seek_to(consumer.at({}))  # a position known: something to commit
        cluster.disable(cluster.links(kinds=("client",)))
        try:
            consumer.commit_positions()
        finally:
            cluster.heal()
    commits = [e for e in read_events(tmp_path / "history.jsonl") if e["f"] == "commit_offsets"]
    assert [e["type"] for e in commits] == ["invoke", "info"], commits
    assert "did not return" in commits[1]["error"]
    assert len(clients.abandoned) == 1
