"""Witnesses as data: an anomaly names every op that shows it, with its role, in the
`witnesses` field of its row and of the verdict's examples (checkers/anomaly.py), not
only in the words of its detail. One small history per type, checked locally; each
asserts exactly the (op, role) pairs expected. No Spark."""
from __future__ import annotations

import json

import pytest

from onceproof.checkers import Verdict
from tests.histories import RC, RU, History, assert_witnessed, example, verdict, witnessed


def test_aborted_read_names_the_reader_and_the_aborted_writer(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    send = h.send("p1", [(0, 1, 0)], txn="T1")
    abort = h.abort("p1", "T1")
    poll = h.poll("c0", [(0, 0, 1)], isolation=RU)
    ex = example(verdict(h), "aborted_read", op=poll)
    # The abort_txn is found on the driver, from the transaction the read's writer names.
    assert witnessed(ex) == {(poll, "reader"), (send, "writer"), (abort, "abort")}
    assert_witnessed(ex)


def test_aborted_read_names_the_failed_commit_that_aborted_the_writer(tmp_path):
    """A transaction whose commit_txn failed aborted: that commit is what ended it. An
    earlier commit that failed too is named, a transaction with no such op names none."""
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    send = h.send("p1", [(0, 1, 0)], txn="T1")
    failed = [h.commit("p1", "T1", type="fail"), h.commit("p1", "T1", type="fail")]
    h.begin("p2", "T2")
    unended = h.send("p2", [(0, 2, 1)], txn="T2")
    poll = h.poll("c0", [(0, 0, 1), (0, 1, 2)], isolation=RU)
    by_value = {ex["value"]: ex for ex in verdict(h).examples["aborted_read"]}
    assert witnessed(by_value[1]) == \
        {(poll, "reader"), (send, "writer"), (failed[0], "abort"), (failed[1], "abort")}
    assert witnessed(by_value[2]) == {(poll, "reader"), (unended, "writer")}


def test_aborted_read_of_a_failed_send_names_that_send(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 7, 0)])
    failed = h.send("p0", [(0, 1)], type="fail")
    poll = h.poll("c0", [(0, 1, 1)])
    assert witnessed(example(verdict(h), "aborted_read", op=poll)) == \
        {(poll, "reader"), (failed, "writer")}


def test_lost_write_names_the_send_and_the_poll_that_went_over_it(tmp_path):
    h = History(tmp_path / "h.jsonl")
    send = h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    first = h.poll("c0", [(0, 0, 1)])
    last = h.poll("c0", [(0, 2, 3)])
    ex = example(verdict(h), "lost_write", op=send, value=2)
    # The scan of c0 went from offset 0 to 2; its far end is the second poll, and it
    # began at the first (no seek).
    assert witnessed(ex) == {(send, "writer"), (last, "reader"), (first, "scan start")}


def test_torn_txn_names_the_missing_and_the_seen_write_and_the_reader(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p0", "T")
    seen = h.send("p0", [(0, 1, 0)], txn="T")
    missing = h.send("p0", [(1, 2, 0)], txn="T")
    commit = h.commit("p0", "T", type="info")
    h.send("p1", [(1, 3, 1)])
    seek = h.seek("c0", [(0, 0), (1, 0)])
    poll = h.poll("c0", [(0, 0, 1), (1, 1, 3)], isolation=RC)
    ex = example(verdict(h), "torn_txn", op=missing, txn="T")
    # The same poll returned the seen write and went over the missing one, from the seek;
    # the commit_txn that ended in info is the one that may have committed T (issue 52).
    assert witnessed(ex) == {(missing, "missing writer"), (poll, "missing reader"),
                             (seek, "scan start"), (seen, "seen writer"), (poll, "reader"),
                             (commit, "commit")}


def test_g0_names_both_ends_of_each_edge(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    h.begin("p2", "T2")
    a0 = h.send("p1", [(0, 1, 0)], txn="T1")
    b1 = h.send("p2", [(1, 4, 0)], txn="T2")
    a1 = h.send("p1", [(1, 3, 1)], txn="T1")
    b0 = h.send("p2", [(0, 2, 1)], txn="T2")
    h.commit("p1", "T1")
    h.commit("p2", "T2")
    ex = example(verdict(h), "g0", txn="T1", op=a0)
    # T1 -ww(partition 0: a0 below b0)-> T2 -ww(partition 1: b1 below a1)-> T1
    assert witnessed(ex) == {(a0, "edge 1 source"), (b0, "edge 1 target"),
                             (b1, "edge 2 source"), (a1, "edge 2 target")}


def test_g1c_names_the_poll_of_a_wr_edge(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p2", "T2")
    early = h.send("p2", [(1, 10, 0)], txn="T2")
    h.begin("p1", "T1")
    later = h.send("p1", [(1, 11, 1), (0, 12, 0)], txn="T1")
    h.commit("p1", "T1")
    poll = h.poll("p2", [(0, 0, 12)], txn="T2")
    h.commit("p2", "T2")
    ex = example(verdict(h), "g1c", txn="T1", op=poll)
    # T1 -wr-> T2 (a read_committed read: its source is T1's commit, no op), then
    # T2 -ww-> T1 in partition 1.
    assert witnessed(ex) == {(poll, "edge 1 target"), (early, "edge 2 source"),
                             (later, "edge 2 target")}


def test_poll_skip_names_both_reads_and_the_skipped_write(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    skipped = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 2)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    before = h.poll("c1", [(0, 0, 1)])
    after = h.poll("c1", [(0, 2, 3)])
    ex = example(verdict(h), "poll_skip", op=after)
    assert witnessed(ex) == {(after, "reader"), (before, "previous read"),
                             (skipped, "skipped writer")}


def test_poll_skip_after_a_seek_names_the_seek(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    skipped = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 2)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    h.begin("c1", "A")
    seek = h.seek("c1", [(0, 1)])
    h.poll("c1", [(0, 1, 2)], txn="A")
    h.abort("c1", "A")
    after = h.poll("c1", [(0, 2, 3)])
    ex = example(verdict(h), "poll_skip", op=after)
    assert witnessed(ex) == {(after, "reader"), (seek, "seek"), (skipped, "skipped writer")}


@pytest.mark.parametrize("offsets_sent", [True, False])
def test_duplicate_output_names_every_committed_output_its_commit_and_the_input(
        tmp_path, offsets_sent):
    """The polls that returned the input in each output's transaction; the input's
    writer when a committed send_offsets went past the input."""
    h = History(tmp_path / "h.jsonl")
    source = h.send("p0", [(0, 1, 0)], topic="in")
    h.send("p0", [(0, 2, 1)], topic="in")
    outputs, commits, polls = [], [], []
    for proc, txn in (("pp", "T1"), ("pq", "T2")):
        h.poll(proc, [(0, 0, 1)], topic="in")  # outside the transaction: not its poll
        h.begin(proc, txn)
        polls.append(h.poll(proc, [(0, 0, 1)], txn=txn, topic="in"))
        h.poll(proc, [(0, 1, 2)], txn=txn, topic="in")  # another input: not this one's
        outputs.append(h.send(proc, [(0, 100 + len(outputs))], txn=txn, topic="out",
                              sources=[1]))
        if offsets_sent:
            h.send_offsets(proc, txn, "g", [(0, 1)], topic="in")
        if txn == "T2":  # a commit that may have applied, then the one that did
            h.commit(proc, txn, type="info")
        commits.append(h.commit(proc, txn))
    ex = example(verdict(h), "duplicate_output", op=outputs[1])
    assert witnessed(ex) == {(outputs[0], "output"), (outputs[1], "output"),
                             (commits[0], "commit"), (commits[1], "commit"),
                             (polls[0], "input poll"), (polls[1], "input poll")} | (
                                 {(source, "input writer")} if offsets_sent else set())
    assert_witnessed(ex)


def test_lost_input_names_the_commit_of_its_send_offsets(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)], topic="in")
    lost = h.send("p0", [(0, 2, 1)], topic="in")
    h.begin("pp", "T1")
    h.poll("pp", [(0, 0, 1), (0, 1, 2)], txn="T1", topic="in")
    h.send("pp", [(0, 100)], txn="T1", topic="out", sources=[1])
    offsets = h.send_offsets("pp", "T1", "g", [(0, 2)], topic="in")
    maybe = h.commit("pp", "T1", type="info")
    h.poll("c0", [(0, 0, 100)], isolation=RC, topic="out")  # proves T1 committed
    ex = example(verdict(h), "lost_input", op=offsets, value=2)
    assert witnessed(ex) == {(offsets, "send_offsets"), (lost, "input writer"),
                             (maybe, "commit")}
    assert_witnessed(ex)


def test_duplicate_names_the_writer_and_each_offset_s_observer(tmp_path):
    h = History(tmp_path / "h.jsonl")
    send = h.send("p0", [(0, 1, 0)])
    poll = h.poll("c0", [(0, 0, 1), (0, 1, 1)])
    ex = example(verdict(h), "duplicate", op=poll, offset=1)
    assert witnessed(ex) == {(send, "writer"), (send, "observer"), (poll, "observer")}


def test_offset_regression_and_stale_fetch_name_the_commits(tmp_path):
    h = History(tmp_path / "h.jsonl")
    high = h.commit_offsets("c0", "g", [(0, 5)])
    low = h.commit_offsets("c0", "g", [(0, 3)])
    fetch = h.fetch_offsets("c2", "g", [(0, 5)])
    v = verdict(h)
    assert witnessed(example(v, "offset_regression", op=low)) == \
        {(low, "lower commit"), (high, "earlier commit")}
    assert witnessed(example(v, "stale_offset_fetch", op=fetch)) == \
        {(fetch, "fetch"), (low, "latest commit")}


def test_commit_order_names_both_writers_and_the_ops_that_order_them(tmp_path):
    """The detail gives W1's commit and W2's start as event indexes; the witnesses name
    those ops (resolved from the ops table on the driver)."""
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    w1 = h.send("p1", [(0, 1, 5)], txn="T1")
    commit = h.commit("p1", "T1")
    begin = h.begin("p2", "T2")
    w2 = h.send("p2", [(0, 2, 3)], txn="T2")
    h.commit("p2", "T2")
    assert witnessed(example(verdict(h), "commit_order", op=w2)) == \
        {(w2, "W2 send"), (w1, "W1 send"), (commit, "W1 end"), (begin, "W2 start")}


def test_precommitted_read_names_the_commit_it_came_before(tmp_path):
    h = History(tmp_path / "h.jsonl")
    send = h.send("p1", [(0, 1, 0)], txn="T1")
    poll = h.poll("c0", [(0, 0, 1)])
    first = h.commit("p1", "T1", type="info")
    h.commit("p1", "T1")
    assert witnessed(example(verdict(h), "precommitted_read", op=poll)) == \
        {(poll, "reader"), (send, "writer"), (first, "commit")}


def test_verdict_json_carries_the_witnesses(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("p1", "T1")
    send = h.send("p1", [(0, 1, 0)], txn="T1")
    abort = h.abort("p1", "T1")
    poll = h.poll("c0", [(0, 0, 1)], isolation=RU)
    d = json.loads(verdict(h).to_json())
    assert d["examples"]["aborted_read"][0]["witnesses"] == [
        {"op": poll, "role": "reader"}, {"op": send, "role": "writer"},
        {"op": abort, "role": "abort"}]
    assert Verdict.from_dict(d).examples["aborted_read"][0]["witnesses"] == \
        d["examples"]["aborted_read"][0]["witnesses"]


# Issue 52, point 3: where a type's definition rests on a commit, the commit op is named.

def test_lost_write_of_a_transaction_names_its_commit(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.begin("p1", "T")
    lost = h.send("p1", [(0, 2, 1)], txn="T")
    commit = h.commit("p1", "T")
    h.send("p0", [(0, 3, 2)])
    seek = h.seek("c0", [(0, 0)])
    past = h.poll("c0", [(0, 0, 1), (0, 2, 3)])
    ex = example(verdict(h), "lost_write", op=lost)
    assert witnessed(ex) == {(lost, "writer"), (past, "reader"), (seek, "scan start"),
                             (commit, "commit")}
    assert_witnessed(ex)


def test_unseen_of_a_transaction_names_its_commit(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.begin("p1", "T")
    gone = h.send("p1", [(0, 2, 1)], txn="T")
    commit = h.commit("p1", "T")
    marks = h.watermarks("final", [(0, 0, 1, 1)])
    ex = example(verdict(h), "unseen", op=gone)
    assert witnessed(ex) == {(gone, "writer"), (marks, "watermarks"), (commit, "commit")}
    assert_witnessed(ex)

