"""What the log holds: duplicate, inconsistent_offset, unattributed_read, lost_write,
unseen, hanging_txn. Each anomaly has a history with it and a valid one without."""
from __future__ import annotations

import pytest

from tests.histories import RU, History, example, found, verdict, witnessed


def test_duplicate(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    poll = h.poll("c0", [(0, 0, 1), (0, 1, 1)])
    v = verdict(h)
    assert found(v) == {"duplicate"} and not v.valid
    example(v, "duplicate", process="c0", op=poll, topic="t", partition=0, offset=1, value=1)


def test_no_duplicate_when_each_value_has_one_offset(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0), (0, 2, 1)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2)])
    h.poll("c1", [(0, 0, 1)], isolation=RU)
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_inconsistent_offset(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.send("p1", [(0, 2)])
    h.seek("c0", [(0, 0)])
    poll = h.poll("c0", [(0, 0, 2)])
    v = verdict(h)
    # The acknowledged value 1 is gone from offset 0: the log lost it, too.
    assert found(v) == {"inconsistent_offset", "lost_write"}
    ex = example(v, "inconsistent_offset", partition=0, offset=0, value=2, op=poll)
    assert "values 1, 2" in ex["detail"]


def test_unattributed_read(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    poll = h.poll("c0", [(0, 0, 1), (0, 1, 99)])
    v = verdict(h)
    assert found(v) == {"unattributed_read"}
    example(v, "unattributed_read", process="c0", op=poll, offset=1, value=99)


def test_lost_write_at_a_known_offset(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    lost = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 2)])
    h.seek("c0", [(0, 0)])
    past = h.poll("c0", [(0, 0, 1), (0, 2, 3)])
    v = verdict(h)
    # c0 went past offset 1, which the ack says holds 2: its skip (issue 52, point 2).
    assert found(v) == {"lost_write", "poll_skip"}
    ex = example(v, "lost_write", process="p0", op=lost, partition=0, offset=1, value=2)
    assert "c0" in ex["detail"]
    example(v, "poll_skip", process="c0", op=past, offset=2, value=3)


@pytest.mark.parametrize("start", [0, None])
def test_an_assign_that_says_where_reading_starts_covers_from_there(tmp_path, start):
    # The Java client's assign() then position(): the ok names where the consumer
    # starts. Without it, c0's scan begins at its first read and covers nothing lost.
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    lost = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 2)])
    h.assign("c0", [0, 1], starts={0: start, 1: 0})
    poll = h.poll("c0", [(0, 2, 3)])
    v = verdict(h)
    if start is None:
        assert v.valid and found(v) == set(), v.summary()
        return
    # c0's first read passed over both from where the assign put it (issue 52, point 2).
    assert found(v) == {"lost_write", "poll_skip"}, v.summary()
    example(v, "poll_skip", op=poll, offset=2)
    assert v.counts["lost_write"] == 2  # values 1 and 2, at offsets 0 and 1
    ex, = (x for x in v.examples["lost_write"] if x["value"] == 2)
    assert (ex["op"], ex["offset"]) == (lost, 1)
    assert {"op": poll, "role": "reader"} in ex["witnesses"]


def test_lost_write_names_every_reader_that_went_over_it(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    lost = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 2)])
    seek = h.seek("c1", [(0, 0)])
    h.poll("c1", [(0, 0, 1)])
    past = h.poll("c1", [(0, 2, 3)])
    first = h.poll("c2", [(0, 0, 1), (0, 2, 3)])  # no seek: its scan begins at its read
    h.seek("c3", [(0, 2)])
    h.poll("c3", [(0, 2, 3)])  # began past it: no witness
    v = verdict(h)
    # c1 and c2 went past offset 1, which the ack says holds 2 (issue 52, point 2).
    assert found(v) == {"lost_write", "poll_skip"}, v.summary()
    assert v.counts["poll_skip"] == 2
    ex = example(v, "lost_write", op=lost, offset=1, value=2)
    assert ex["witnesses"] == [{"op": lost, "role": "writer"},
                               {"op": past, "role": "reader"}, {"op": seek, "role": "scan start"},
                               {"op": first, "role": "reader"}, {"op": first, "role": "scan start"}]
    assert "and 1 more reader" in ex["detail"]


def test_lost_write_at_an_offset_bounded_by_its_neighbours(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1)])
    lost = h.send("p0", [(0, 2)])
    h.send("p0", [(0, 3)])
    h.poll("c0", [(0, 0, 1), (0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"lost_write"}
    example(v, "lost_write", op=lost, value=2, offset=None)


def test_no_lost_write_for_a_write_landing_after_the_reader_stopped(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1)])
    h.poll("c0", [(0, 0, 1)])
    h.send("p0", [(0, 2)])  # its offset is unknown and may be past what c0 read
    h.send("p0", [(0, 3)], type="info")
    h.txn("p1", "T", [(0, 4)], outcome="info")
    h.txn("p1", "U", [(0, 5)], outcome="abort")
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_reads_of_unknown_offsets_still_let_the_partition_be_judged(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.begin("p1", "T")
    h.send("p1", [(0, 2, 1)], txn="T")
    h.poll("c0", [(0, None, 1)])                   # the only read: offset unknown
    wm = h.watermarks("final", [(0, 0, 2, 1)])
    v = verdict(h)
    assert found(v) == {"hanging_txn"}
    example(v, "hanging_txn", op=wm, topic="t", partition=0, offset=1)


def test_a_read_of_an_unknown_offset_is_no_anomaly(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.poll("c0", [(0, None, 1)])
    h.send("p0", [(1, 2, 0), (1, 3, 1)])
    h.seek("c1", [(1, 0)])
    h.poll("c1", [(1, 0, 2), (1, None, 3)])
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_unseen_past_the_final_high_watermark(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    gone = h.send("p0", [(0, 2, 1)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2)])
    h.seek("final", [(0, 0)], final=True)
    h.poll("final", [(0, 0, 1)], final=True)
    h.watermarks("final", [(0, 0, 1, 1)])
    v = verdict(h)
    assert found(v) == {"unseen"}
    ex = example(v, "unseen", process="p0", op=gone, offset=1, value=2)
    assert "high watermark 1" in ex["detail"]


def test_unseen_inside_the_final_scan(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    gone = h.send("p0", [(0, 2)])
    h.send("p0", [(0, 3, 2)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2)])
    h.seek("final", [(0, 0)], final=True)
    h.poll("final", [(0, 0, 1)], final=True)
    h.poll("final", [(0, 2, 3)], final=True)
    h.watermarks("final", [(0, 0, 3, 3)])
    v = verdict(h)
    # The final reader also skipped offset 1, which c0 saw holding value 2.
    assert found(v) == {"unseen", "poll_skip"}
    example(v, "unseen", op=gone, value=2, offset=1)


def _aborted_after_commit(tmp_path, read_to: bool):
    """T2 committed, its write to partition 0 at offset 2 and to partition 1 at offset
    0; the final reads return the one on partition 1 and nothing of partition 0, where
    every record is invisible (T1's aborted write at 0, this one at 2, markers at 1 and
    3): a late abort marker ended T2 there (KAFKA-17754)."""
    h = History(tmp_path / "h.jsonl")
    h.txn("t0", "T1", [(0, 1, 0)], outcome="abort")
    h.begin("t0", "T2")
    gone = h.send("t0", [(0, 2, 2)], txn="T2")
    h.send("t0", [(1, 3, 0)], txn="T2")
    h.commit("t0", "T2")
    h.seek("final", [(0, 0), (1, 0)], final=True)
    h.poll("final", [(1, 0, 3)], final=True)
    h.watermarks("final", [(0, 0, 4, 4, 4), (1, 0, 2, 2, 2)] if read_to
                 else [(0, 0, 4, 4), (1, 0, 2, 2)])
    return h, gone


def test_a_write_the_final_reads_went_over_without_returning_it_is_lost(tmp_path):
    h, gone = _aborted_after_commit(tmp_path, read_to=True)
    v = verdict(h)
    assert found(v) == {"lost_write", "unseen", "torn_txn"}
    ex = example(v, "lost_write", process="t0", op=gone, offset=2, value=2)
    assert "final reads (read_committed) went over offsets 0..3" in ex["detail"]
    example(v, "unseen", op=gone, value=2)


def test_without_where_the_final_reads_stopped_an_empty_partition_is_not_judged(tmp_path):
    # Nothing says a reader went over offset 2 of partition 0: no evidence, no anomaly.
    h, _ = _aborted_after_commit(tmp_path, read_to=False)
    assert found(verdict(h)) == set()


def test_final_reads_that_saw_everything_are_valid(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.txn("p1", "T", [(0, 2, 1)])   # the commit marker takes offset 2
    h.send("p0", [(0, 3)], type="info")  # may be lost: not judged
    h.seek("final", [(0, 0)], final=True)
    h.poll("final", [(0, 0, 1), (0, 1, 2)], final=True)
    h.watermarks("final", [(0, 0, 3, 3)])
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_hanging_txn(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T")
    h.send("p1", [(0, 1, 0)], txn="T")
    wm = h.watermarks("final", [(0, 0, 1, 0)])
    v = verdict(h)
    assert found(v) == {"hanging_txn"}
    example(v, "hanging_txn", op=wm, partition=0, offset=0)


def test_no_hanging_txn_while_the_transaction_may_still_be_open(tmp_path):
    """Watermarks read 5 s after a producer left its transaction open: Kafka aborts it
    only after its transaction timeout (60 s by default), so an open transaction then
    holds the last stable offset by right."""
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T")
    h.send("p1", [(0, 1, 0)], txn="T")
    h.watermarks("final", [(0, 0, 1, 0)], settled_s=5)
    v = verdict(h)
    assert found(v) == set(), v.summary()


def test_a_hanging_transaction_is_judged_by_the_timeout_its_begin_names(tmp_path):
    """A transaction timeout of 300 s: 120 s after its last op the transaction may still
    be open; 400 s after, it is hanging. A timeout of 10 s: 60 s after, it is hanging."""
    def run(name, timeout_s, settled_s):
        h = History(tmp_path / f"{name}.jsonl")
        h.begin("p1", "T", timeout_s=timeout_s)
        h.send("p1", [(0, 1, 0)], txn="T")
        h.watermarks("final", [(0, 0, 1, 0)], settled_s=settled_s)
        return found(verdict(h))
    assert run("soon", 300, 120) == set()
    assert run("late", 300, 400) == {"hanging_txn"}
    assert run("short", 10, 60) == {"hanging_txn"}


def test_a_candidate_still_within_its_timeout_keeps_the_partition_unjudged(tmp_path):
    """No write known at the stuck offset: two transactions may hold it. The one that
    ended long ago would be hanging, but the one whose last op came just before the
    watermarks may still be open."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.begin("p1", "T", timeout_s=10)
    h.send("p1", [(0, 2, None)], type="info", txn="T")
    h.skipped += 200 * 10**9
    h.begin("p2", "U", timeout_s=10)
    h.send("p2", [(0, 3, None)], type="info", txn="U")
    h.watermarks("final", [(0, 0, 3, 1)], settled_s=5)
    assert found(verdict(h)) == set()


def test_a_stuck_offset_outside_any_transaction_is_hanging_at_once(tmp_path):
    """The record at the last stable offset was written outside any transaction: no
    timeout will move it, however soon the watermarks were read."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.watermarks("final", [(0, 0, 1, 0)], settled_s=0)
    ex = example(verdict(h), "hanging_txn", offset=0)
    assert "outside any transaction" in ex["detail"], ex


def test_no_hanging_txn_when_the_lso_caught_up(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.txn("p1", "T", [(0, 1, 0)])
    h.watermarks("final", [(0, 0, 2, 2)])
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_values_beyond_float_precision_stay_distinct(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.base = 2**60  # neighbouring values here are one float apart: 256
    h.send("p0", [(0, 1, 0)])
    lost = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 2)])
    h.poll("c0", [(0, 0, 1), (0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"lost_write", "poll_skip"}  # c0's skip: issue 52, point 2
    example(v, "lost_write", op=lost, value=2**60 + 2)
    assert "(value 1152921504606846978)" in example(v, "poll_skip")["detail"]


def test_a_send_whose_ack_had_no_offset_is_ordered_by_where_a_read_found_it(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p", [(0, 1, 5)])
    h.send("p", [(0, 2)])  # acknowledged without an offset; a read finds it at 3
    h.poll("c", [(0, 3, 2), (0, 5, 1)])
    v = verdict(h)
    assert v.counts.get("nonmonotonic_send") == 1, v.summary()
    example(v, "nonmonotonic_send", process="p", offset=3, value=2)


def test_sends_that_ended_in_info_are_ordered_by_where_reads_found_them(tmp_path):
    # Neither ack came back, but both records are in the log, the later send's first:
    # a producer appends one process's sends in the order it sent them.
    h = History(tmp_path / "h.jsonl")
    first = h.send("p", [(0, 1)], type="info")
    second = h.send("p", [(0, 2)], type="info")
    h.seek("c", [(0, 0)])
    poll = h.poll("c", [(0, 0, 2), (0, 1, 1)])
    v = verdict(h)
    assert found(v) == {"nonmonotonic_send"}, v.summary()
    ex = example(v, "nonmonotonic_send", process="p", op=second, offset=0, value=2)
    # The poll is where both offsets are known from.
    assert witnessed(ex) == {(second, "later send"), (first, "earlier send"),
                             (poll, "offset reader")}
    assert "was read at offset 0" in ex["detail"]


def test_an_offset_holding_two_values_orders_no_send(tmp_path):
    # The log was rewritten at offset 0 (inconsistent_offset): where the later send's
    # record was read there says nothing of the order it was appended in.
    h = History(tmp_path / "h.jsonl")
    h.send("p", [(0, 1, 0)])
    h.send("p", [(0, 2)], type="info")
    h.seek("c", [(0, 0)])
    h.poll("c", [(0, 0, 2)])
    v = verdict(h)
    # (The reader went over value 1 without it, so it is lost too.)
    assert found(v) == {"inconsistent_offset", "lost_write"}, v.summary()


def test_a_failed_send_orders_nothing(tmp_path):
    # A read of a failed send's value is an aborted_read; the send is not in the log.
    h = History(tmp_path / "h.jsonl")
    h.send("p", [(0, 1)], type="fail")
    h.send("p", [(0, 2, 0)])
    h.seek("c", [(0, 0)])
    h.poll("c", [(0, 0, 2), (0, 1, 1)])
    v = verdict(h)
    assert found(v) == {"aborted_read"}, v.summary()


def test_a_hanging_transaction_names_the_open_transaction_and_its_producer(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.begin("p1", "T")
    h.send("p1", [(0, 2, 1)], txn="T")              # acknowledged at the stuck offset
    h.watermarks("final", [(0, 0, 2, 1)])
    v = verdict(h)
    ex = example(v, "hanging_txn", offset=1)
    assert ex["txn"] and ex["txn"] in ex["detail"] and "of p1" in ex["detail"], ex


def test_a_hanging_transaction_no_ack_placed_names_its_candidates(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.begin("p1", "T")
    h.send("p1", [(0, 2, None)], type="info", txn="T")  # a produce the client gave up on
    h.watermarks("final", [(0, 0, 2, 1)])
    v = verdict(h)
    ex = example(v, "hanging_txn", offset=1)
    assert ex["txn"] is None and "may have one there" in ex["detail"] and "of p1" in ex["detail"], ex


def test_the_least_int64_is_a_value_like_any_other(tmp_path):
    """Values are any 64-bit integers (docs/history.md): -2**63 read where it was
    written is neither lost nor unseen."""
    h = History(tmp_path / "h.jsonl")
    least = -(2 ** 63)
    h.send("p0", [(0, 1, 0), (0, least, 1), (0, 3, 2)])
    h.send("p0", [(0, 4)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1), (0, 1, least), (0, 2, 3), (0, 3, 4)], final=True)
    h.watermarks("final", [(0, 0, 4, 4)])
    v = verdict(h)
    assert v.valid and not found(v), v.summary()


def test_a_value_read_in_a_partition_it_was_not_sent_to_is_unattributed(tmp_path):
    """Sent to partition 0 and read in partition 1 (there alone, or in both): no send
    wrote it to partition 1, so the record there came from elsewhere."""
    h = History(tmp_path / "h.jsonl")
    send = h.send("p0", [(0, 1, 0)])
    h.send("p0", [(0, 2, 1)])
    h.poll("c0", [(0, 0, 1)])
    stray = h.poll("c1", [(1, 0, 1), (1, 1, 2)])
    v = verdict(h)
    assert v.counts == {"unattributed_read": 2}, v.summary()
    ex = example(v, "unattributed_read", op=stray, partition=1, offset=0, value=1)
    assert witnessed(ex) == {(stray, "reader"), (send, "writer")}
    assert "wrote to another partition" in ex["detail"]
