"""Transactions: aborted_read, precommitted_read, torn_txn, nonmonotonic_send,
commit_order, and the dependency-graph cycles g0, g1c, g_single."""
from __future__ import annotations

from tests.histories import RC, RU, History, example, found, verdict


def test_aborted_read_of_an_aborted_transaction(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.txn("p1", "T1", [(0, 1, 0)], outcome="abort")
    poll = h.poll("c0", [(0, 0, 1)], isolation=RU)
    v = verdict(h)
    assert found(v) == {"aborted_read"}
    ex = example(v, "aborted_read", process="c0", op=poll, offset=0, value=1, txn="T1")
    assert "read_uncommitted" in ex["detail"]


def test_aborted_read_of_a_failed_send(tmp_path):
    h = History(tmp_path / "h.jsonl")
    failed = h.send("p0", [(0, 1)], type="fail")
    h.poll("c0", [(0, 0, 1)])
    v = verdict(h)
    assert found(v) == {"aborted_read"}
    assert f"(op {failed}) failed" in example(v, "aborted_read", value=1)["detail"]


def test_committed_and_uncertain_reads_are_not_aborted_reads(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.txn("p1", "T1", [(0, 1, 0)])
    h.send("p0", [(0, 2, 1)], type="info")  # an unknown send may well be in the log
    h.txn("p1", "T2", [(0, 3, 2)], outcome="info")
    h.poll("c0", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_precommitted_read(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    h.send("p1", [(0, 1, 0)], txn="T1")
    poll = h.poll("c0", [(0, 0, 1)], isolation=RC)
    h.commit("p1", "T1")
    v = verdict(h)
    assert found(v) == {"precommitted_read"}
    example(v, "precommitted_read", process="c0", op=poll, offset=0, value=1, txn="T1")


def test_read_uncommitted_may_read_before_the_commit(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    h.send("p1", [(0, 1, 0)], txn="T1")
    h.poll("c0", [(0, 0, 1)], isolation=RU)
    h.commit("p1", "T1")
    h.poll("c1", [(0, 0, 1)], isolation=RC)
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_precommitted_read_is_timed_from_the_first_commit_attempt(tmp_path):
    """A retried commit_txn: the read came before the first attempt was invoked."""
    h = History(tmp_path / "h.jsonl")
    h.send("p1", [(0, 1, 0)], txn="T1")
    poll = h.poll("c0", [(0, 0, 1)])
    first = h.commit("p1", "T1", type="info")
    h.commit("p1", "T1")
    v = verdict(h)
    assert found(v) == {"precommitted_read"}
    ex = example(v, "precommitted_read", process="c0", op=poll, offset=0, value=1, txn="T1")
    # Each op is an invoke then a completion: the first attempt is invoked at 2 * op.
    assert ex["detail"].endswith(f"before its commit_txn was invoked (index {2 * first})")


def test_a_read_between_commit_attempts_is_not_precommitted(tmp_path):
    """commit_txn timed out (info) but had committed; a read_committed reader saw the
    value; the retried commit_txn then completed ok."""
    h = History(tmp_path / "h.jsonl")
    h.send("p1", [(0, 1, 0)], txn="T1")
    h.commit("p1", "T1", type="info")
    h.poll("c0", [(0, 0, 1)])
    h.commit("p1", "T1")
    v = verdict(h)
    assert v.valid and found(v) == set()


def _retried_commit_and_fetch(h, fetch_before_commit: bool):
    h.commit_offsets("c0", "g", [(0, 5)])
    h.begin("pp", "T1")
    h.send_offsets("pp", "T1", "g", [(0, 9)])
    fetch = h.fetch_offsets("c1", "g", [(0, 9)]) if fetch_before_commit else None
    h.commit("pp", "T1", type="info")
    if not fetch_before_commit:
        fetch = h.fetch_offsets("c1", "g", [(0, 9)])
    h.commit("pp", "T1")
    return fetch


def test_stale_offset_fetch_of_a_transaction_not_yet_committing(tmp_path):
    h = History(tmp_path / "h.jsonl")
    fetch = _retried_commit_and_fetch(h, fetch_before_commit=True)
    v = verdict(h)
    assert found(v) == {"stale_offset_fetch"}
    ex = example(v, "stale_offset_fetch", process="c1", op=fetch, partition=0, offset=9)
    assert "allowed: [5]" in ex["detail"]


def test_a_fetch_between_commit_attempts_may_see_the_transaction(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _retried_commit_and_fetch(h, fetch_before_commit=False)
    v = verdict(h)
    assert v.valid and found(v) == set()


def _proven_by(h, isolation):
    """T1 (commit info) wrote offset 1 between p0's offsets 0 and 3; c1 reads all
    three with `isolation`; c0 (read_committed) reads 0 then 3; c2 seeks to 1, reads 3."""
    h.send("p0", [(0, 1, 0)])
    h.txn("p1", "T1", [(0, 2, 1)], outcome="info")
    h.send("p0", [(0, 3, 3)])
    h.seek("c1", [(0, 0)])
    h.poll("c1", [(0, 0, 1), (0, 1, 2), (0, 3, 3)], isolation=isolation)
    h.seek("c0", [(0, 0)])
    skip = h.poll("c0", [(0, 0, 1), (0, 3, 3)])
    h.seek("c2", [(0, 1)])
    rewind = h.poll("c2", [(0, 3, 3)])
    return skip, rewind


def test_an_unknown_txn_a_read_committed_poll_saw_is_visible_to_read_committed(tmp_path):
    h = History(tmp_path / "h.jsonl")
    skip, rewind = _proven_by(h, RC)
    v = verdict(h)
    assert found(v) == {"poll_skip", "rewind_mismatch"}
    ex = example(v, "poll_skip", process="c0", op=skip, partition=0, offset=3, value=3)
    assert "skipping offset 1 (value 2)" in ex["detail"]
    ex = example(v, "rewind_mismatch", process="c2", op=rewind, partition=0, offset=3,
                 value=3)
    assert ex["detail"].endswith("expected offset 1 (value 2)")


def test_an_unknown_txn_only_read_uncommitted_saw_stays_unknown(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _proven_by(h, RU)
    v = verdict(h)
    assert v.valid and found(v) == set()


def _reemitted(h, isolation):
    """Input value 1; T1 outputs 10 from it and commits; T2 outputs 11 from it too,
    that send ends in info, T2 commits ok; c0 reads both outputs with `isolation`."""
    h.send("p0", [(0, 1, 0)], topic="in")
    h.begin("pp", "T1")
    h.poll("pp", [(0, 0, 1)], txn="T1", topic="in")
    h.send("pp", [(0, 10, 0)], txn="T1", topic="out", sources=[1])
    h.commit("pp", "T1")
    h.begin("pp", "T2")
    again = h.send("pp", [(0, 11)], txn="T2", topic="out", sources=[1], type="info")
    h.commit("pp", "T2")
    h.seek("c0", [(0, 0)], topic="out")
    h.poll("c0", [(0, 0, 10), (0, 1, 11)], topic="out", isolation=isolation)
    return again


def test_duplicate_output_of_an_info_send_in_a_committed_txn(tmp_path):
    h = History(tmp_path / "h.jsonl")
    again = _reemitted(h, RC)
    v = verdict(h)
    assert found(v) == {"duplicate_output"}
    ex = example(v, "duplicate_output", process="pp", op=again, topic="out", partition=0,
                 offset=1, value=11, txn="T2")
    assert ex["detail"] == "input value 1 has 2 committed outputs in out: values 10, 11"


def test_an_info_output_send_no_read_committed_poll_saw_is_no_duplicate(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _reemitted(h, RU)
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_torn_txn_of_unknown_outcome(tmp_path):
    """T1's commit ended in info, but a read_committed poll returned value 1: T1
    committed, so its acknowledged value 2, which the reader went over, is torn off
    and lost."""
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    missing = h.send("p1", [(0, 1, 0), (1, 2, 0)], txn="T1")
    h.commit("p1", "T1", type="info")
    h.send("p2", [(1, 3, 1)])
    h.seek("c0", [(0, 0), (1, 0)])
    h.poll("c0", [(0, 0, 1)])
    past = h.poll("c0", [(1, 1, 3)])
    v = verdict(h)
    # c0 went past offset 0 of partition 1, where the ack put 2 (issue 52, point 2).
    assert found(v) == {"torn_txn", "lost_write", "poll_skip"}
    example(v, "poll_skip", op=past, partition=1, offset=1)
    ex = example(v, "torn_txn", txn="T1", op=missing, partition=1, offset=0, value=2)
    assert ex["detail"].startswith("committed transaction T1: 1 writes visible")
    example(v, "lost_write", txn="T1", op=missing, offset=0, value=2)


def test_torn_committed_txn_is_also_a_lost_write(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.txn("p1", "T1", [(0, 1, 0), (1, 2, 0)])
    h.send("p2", [(1, 3, 1)])
    h.seek("c0", [(0, 0), (1, 0)])
    h.poll("c0", [(0, 0, 1), (1, 1, 3)])
    v = verdict(h)
    # c0 went past offset 0 of partition 1, where the ack put 2 (issue 52, point 2).
    assert found(v) == {"torn_txn", "lost_write", "poll_skip"}
    example(v, "torn_txn", txn="T1", partition=1, value=2)


def test_an_unknown_txn_seen_nowhere_or_everywhere_is_not_torn(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    h.send("p1", [(0, 1, 0), (1, 2, 0)], txn="T1")
    h.commit("p1", "T1", type="info")
    h.begin("p1", "T2")
    h.send("p1", [(0, 3, 2), (1, 4, 2)], txn="T2")
    h.commit("p1", "T2", type="info")
    h.seek("c0", [(0, 0), (1, 0)])
    h.poll("c0", [(0, 0, 1), (1, 0, 2)])  # T1 visible whole, T2 (offsets 2) not yet read
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_nonmonotonic_send(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 5)])
    later = h.send("p0", [(0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"nonmonotonic_send"}
    ex = example(v, "nonmonotonic_send", process="p0", op=later, offset=3, value=2)
    assert "offset 5" in ex["detail"]


def test_nonmonotonic_send_within_one_send(tmp_path):
    h = History(tmp_path / "h.jsonl")
    op = h.send("p0", [(0, 1, 5), (0, 2, 4)])
    v = verdict(h)
    example(v, "nonmonotonic_send", op=op, offset=4, value=2)


def test_sends_of_different_processes_or_txns_may_interleave(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 5)])
    h.send("p1", [(0, 2, 3)])        # another process (one after the other, so this
    h.txn("p0", "T1", [(0, 3, 7)])   # and T1 then T2 are commit_order: see below)
    h.txn("p0", "T2", [(0, 4, 6)])   # another transaction of p0
    v = verdict(h)
    # Sends of different processes or transactions are no nonmonotonic_send, whatever
    # real time says of them (that is commit_order's business).
    assert "nonmonotonic_send" not in found(v)


def test_commit_order(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.txn("p1", "T1", [(0, 1, 5)])
    h.begin("p2", "T2")
    early = h.send("p2", [(0, 2, 3)], txn="T2")
    h.commit("p2", "T2")
    v = verdict(h)
    assert found(v) == {"commit_order"}
    ex = example(v, "commit_order", process="p2", op=early, txn="T2", partition=0, offset=3)
    assert "T1 committed" in ex["detail"]


def test_concurrent_transactions_may_append_in_any_order(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    h.begin("p2", "T2")
    h.send("p2", [(0, 2, 3)], txn="T2")
    h.send("p1", [(0, 1, 5)], txn="T1")
    h.commit("p1", "T1")
    h.commit("p2", "T2")
    h.txn("p1", "T3", [(0, 3, 7)])
    v = verdict(h)
    assert v.valid and found(v) == set()


def _crossed(h, sequential: bool):
    """T1 and T2 each write partitions 0 and 1, in opposite orders. Concurrent unless
    `sequential` (T1 commits before T2 begins)."""
    h.begin("p1", "T1")
    if not sequential:
        h.begin("p2", "T2")
    h.send("p1", [(0, 1, 0)], txn="T1")
    if sequential:
        h.send("p1", [(1, 3, 1)], txn="T1")
        h.commit("p1", "T1")
        h.begin("p2", "T2")
        h.send("p2", [(1, 4, 0)], txn="T2")
        h.send("p2", [(0, 2, 1)], txn="T2")
        h.commit("p2", "T2")
        return
    h.send("p2", [(1, 4, 0)], txn="T2")
    h.send("p1", [(1, 3, 1)], txn="T1")
    h.send("p2", [(0, 2, 1)], txn="T2")
    h.commit("p1", "T1")
    h.commit("p2", "T2")


def test_g0_between_concurrent_transactions_is_a_note(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _crossed(h, sequential=False)
    v = verdict(h)
    assert found(v) == {"g0"} and v.notes == ["g0"] and v.valid
    ex = example(v, "g0", severity="note")
    assert ex["txn"] in ("T1", "T2") and "-[ww: t/" in ex["detail"]


def test_g0_contradicting_real_time_is_a_violation(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _crossed(h, sequential=True)
    v = verdict(h)
    assert found(v) == {"g0", "commit_order"} and not v.valid
    example(v, "g0", severity="violation")


def test_no_cycle_when_transactions_follow_each_other(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.txn("p1", "T1", [(0, 1, 0), (1, 2, 0)])
    h.txn("p2", "T2", [(0, 3, 1), (1, 4, 1)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1), (0, 1, 3)])
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_g1c_of_concurrent_transactions_is_a_note(tmp_path):
    """T2 appends to partition 1 before T1 does, then reads what T1 committed: Kafka
    takes no write locks, so this ww + wr cycle is allowed."""
    h = History(tmp_path / "h.jsonl")
    h.begin("p2", "T2")
    h.send("p2", [(1, 10, 0)], txn="T2")
    h.txn("p1", "T1", [(1, 11, 1), (0, 12, 0)])
    h.poll("p2", [(0, 0, 12)], txn="T2")
    h.commit("p2", "T2")
    v = verdict(h)
    assert found(v) == {"g1c"} and v.valid
    ex = example(v, "g1c", severity="note")
    assert "wr: read value 12" in ex["detail"]


def test_g1c_of_reads_in_a_circle_is_a_violation(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    h.send("p1", [(0, 1, 0)], txn="T1")
    h.begin("p2", "T2")
    h.send("p2", [(1, 2, 0)], txn="T2")
    h.poll("p1", [(1, 0, 2)], txn="T1")
    h.poll("p2", [(0, 0, 1)], txn="T2")
    h.commit("p1", "T1")
    h.commit("p2", "T2")
    v = verdict(h)
    assert found(v) == {"g1c", "precommitted_read"}
    ex = example(v, "g1c", severity="violation")
    assert ex["detail"].startswith("2-transaction cycle")


def test_g_single(tmp_path):
    """T1 read partition 0 up to offset 0 and T2 appended there at 1 (rw T1 -> T2),
    while T2's record precedes T1's in partition 1 (ww T2 -> T1)."""
    h = History(tmp_path / "h.jsonl")
    h.send("p9", [(0, 100, 0)])
    h.begin("p2", "T2")
    h.send("p2", [(1, 20, 0)], txn="T2")
    h.begin("p1", "T1")
    h.poll("p1", [(0, 0, 100)], txn="T1")
    h.send("p1", [(1, 10, 1)], txn="T1")
    h.send("p2", [(0, 21, 1)], txn="T2")
    h.commit("p2", "T2")
    h.commit("p1", "T1")
    v = verdict(h)
    assert found(v) == {"g_single"} and v.valid
    ex = example(v, "g_single", severity="note")
    assert "rw: read t/0 to offset 0" in ex["detail"] and "ww:" in ex["detail"]


def test_no_g_single_when_the_reader_saw_the_write(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p9", [(0, 100, 0)])
    h.begin("p2", "T2")
    h.send("p2", [(1, 20, 0)], txn="T2")
    h.send("p2", [(0, 21, 1)], txn="T2")
    h.commit("p2", "T2")
    h.begin("p1", "T1")
    h.poll("p1", [(0, 0, 100), (0, 1, 21)], txn="T1")
    h.send("p1", [(1, 10, 1)], txn="T1")
    h.commit("p1", "T1")
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_commit_order_of_plain_sends(tmp_path):
    """Two acknowledged sends outside transactions, of different processes: the first
    was acknowledged at offset 1 before the second was sent, which landed at 0."""
    h = History(tmp_path / "h.jsonl")
    h.send("p1", [(0, 1, 1)])
    later = h.send("p2", [(0, 2, 0)])
    v = verdict(h)
    assert found(v) == {"commit_order"} and not v.valid
    ex = example(v, "commit_order", process="p2", op=later, partition=0, offset=0, txn=None)
    assert "p1's send (op 0)" in ex["detail"] and "offset 1" in ex["detail"]


def test_commit_order_of_a_send_that_ended_in_info_and_was_read(tmp_path):
    """A send of unknown outcome appends, if at all, after its invoke: p2's, sent after
    p1's was acknowledged at offset 1 and read at offset 0, contradicts real time. Sent
    before that ack, or read above it, it does not; and it never orders a later send,
    since it may be appended at any time."""
    h = History(tmp_path / "h.jsonl")
    h.send("p1", [(0, 1, 1)])
    later = h.send("p2", [(0, 2)], type="info")
    h.send("p3", [(0, 3, 2)])
    h.seek("c", [(0, 0)])
    h.poll("c", [(0, 0, 2), (0, 1, 1), (0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"commit_order"} and v.counts["commit_order"] == 1, v.summary()
    ex = example(v, "commit_order", process="p2", op=later, offset=0, txn=None)
    assert "p1's send (op 0)" in ex["detail"]
    for name, at in (("concurrent", {2: 0, 1: 1, 3: 2}), ("appended late", {1: 0, 3: 1, 2: 2})):
        h = History(tmp_path / f"{name}.jsonl")
        a = h.invoke("p2", "send", {"records": [{"topic": "t", "partition": 0, "key": None,
                                                 "value": 2}]})
        h.send("p1", [(0, 1, at[1])])
        h.complete(a, "info", {}, error="timed out")
        h.send("p3", [(0, 3, at[3])])  # sent after p2's send ended
        h.seek("c", [(0, 0)])
        h.poll("c", sorted((0, o, v) for v, o in at.items()))
        v = verdict(h)
        assert v.valid and found(v) == set(), f"{name}: {v.summary()}"


def test_commit_order_between_a_plain_send_and_a_transaction(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p1", [(0, 1, 4)])
    h.begin("p2", "T2")
    early = h.send("p2", [(0, 2, 3)], txn="T2")
    h.commit("p2", "T2")
    h.txn("p3", "T3", [(0, 3, 6)])
    h.send("p4", [(0, 4, 5)])        # sent after T3 committed at 6
    v = verdict(h)
    assert found(v) == {"commit_order"} and v.counts["commit_order"] == 2
    example(v, "commit_order", process="p2", op=early, offset=3, txn="T2")
    assert any(e["process"] == "p4" and e["offset"] == 5 and "T3" in e["detail"]
               for e in v.examples["commit_order"])


def _overlapping_sends(h, first_done: str):
    a = h.invoke("p1", "send", {"records": [{"topic": "t", "partition": 0, "key": None,
                                             "value": 1}]})
    b = h.invoke("p2", "send", {"records": [{"topic": "t", "partition": 0, "key": None,
                                             "value": 2}]})
    done = {a: {"records": [{"topic": "t", "partition": 0, "key": None, "value": 1,
                             "offset": 1}]},
            b: {"records": [{"topic": "t", "partition": 0, "key": None, "value": 2,
                             "offset": 0}]}}
    order = (a, b) if first_done == "p1" else (b, a)
    for op in order:
        h.complete(op, "ok", done[op])


def test_concurrent_plain_sends_may_append_in_any_order(tmp_path):
    for first_done in ("p1", "p2"):
        h = History(tmp_path / f"h-{first_done}.jsonl")
        _overlapping_sends(h, first_done)
        v = verdict(h)
        assert v.valid and found(v) == set(), first_done


def test_truncated_plain_send_is_no_commit_order(tmp_path):
    """acks=1 and a failover: 10 and 11 were acknowledged at 0 and 1, the new leader
    had neither, and 12 and 13 (sent after both acks) landed at 0 and 1. That is
    lost_write and inconsistent_offset; 11's offset no longer holds it, so 12 at 0
    below it is not also a commit_order."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 10, 0)])
    h.send("p1", [(0, 11, 1)])
    h.fault("partition-leader")
    h.send("p2", [(0, 12, 0)])
    h.send("p3", [(0, 13, 1)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 12), (0, 1, 13)])
    v = verdict(h)
    assert "commit_order" not in found(v)
    assert {"lost_write", "inconsistent_offset"} <= found(v)


def test_a_truncated_transactional_record_is_no_commit_order(tmp_path):
    """As for plain sends: T1's record acknowledged at 1 was gone when c0 read over
    offset 1 (lost_write), so 20 at 0, sent after T1 committed, is not a
    commit_order; nor when another value was read at T1's offset."""
    for gone in ("passed over", "rewritten"):
        h = History(tmp_path / f"{gone}.jsonl")
        h.txn("p0", "T1", [(0, 10, 1)])
        h.send("p1", [(0, 20, 0)])
        h.send("p2", [(0, 30, 2)])
        h.seek("c0", [(0, 0)])
        h.poll("c0", [(0, 0, 20), (0, 2, 30)] if gone == "passed over"
               else [(0, 0, 20), (0, 1, 30)])
        v = verdict(h)
        assert "commit_order" not in found(v), (gone, v.summary())
        assert "lost_write" in found(v), (gone, v.summary())


def test_a_read_before_the_commit_proves_it_but_not_when(tmp_path):
    """T1's commit ended in info; c0 read T1's first record before the commit was
    invoked (precommitted). That proves T1 committed, not that it had by then: p1's
    record at 1, sent after that read but before the commit, is no commit_order."""
    h = History(tmp_path / "h.jsonl")
    h.begin("p0", "T1")
    h.send("p0", [(0, 10, 0)], txn="T1")
    h.poll("c0", [(0, 0, 10)])
    h.send("p1", [(0, 20, 1)])
    h.send("p0", [(0, 11, 2)], txn="T1")
    h.commit("p0", "T1", type="info")
    v = verdict(h)
    assert found(v) == {"precommitted_read"}, v.summary()


def test_a_torn_transaction_whose_seen_write_ended_in_info(tmp_path):
    """T1's send to partition 0 ended in info but a read_committed poll returned it:
    it was appended. Its other write, acknowledged at 0 in partition 1, a
    read_committed scan went over: T1 is torn."""
    h = History(tmp_path / "h.jsonl")
    h.begin("p0", "T1")
    h.send("p0", [(0, 10)], txn="T1", type="info")
    missing = h.send("p0", [(1, 11, 0)], txn="T1")
    h.commit("p0", "T1")
    h.send("p1", [(1, 20, 1)])
    h.poll("c0", [(0, 0, 10)])
    h.seek("c1", [(1, 0)])
    h.poll("c1", [(1, 1, 20)])
    v = verdict(h)
    assert "torn_txn" in found(v), v.summary()
    example(v, "torn_txn", op=missing, partition=1)
