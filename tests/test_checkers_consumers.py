"""Consumers and pipelines: poll_skip, nonmonotonic_poll, rewind_mismatch,
offset_regression, stale_offset_fetch, duplicate_output, lost_input."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onceproof.checkers import check, groups
from onceproof.history.format import HistoryError
from tests.histories import RU, History, assert_witnessed, example, found, verdict, witnessed


def _three(h):
    """Values 1, 2, 3 at offsets 0, 1, 2, all read by c0."""
    h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])


def test_poll_skip_across_polls(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    h.seek("c1", [(0, 0)])
    h.poll("c1", [(0, 0, 1)])
    skip = h.poll("c1", [(0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"poll_skip"}
    ex = example(v, "poll_skip", process="c1", op=skip, partition=0, offset=2, value=3)
    assert "skipping offset 1 (value 2)" in ex["detail"]


def test_poll_skip_within_one_poll(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    skip = h.poll("c1", [(0, 0, 1), (0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"poll_skip"}
    example(v, "poll_skip", process="c1", op=skip, offset=2)


def test_poll_skip_by_a_pipeline_that_does_not_rewind_after_an_abort(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    for txn, rec, outcome in (("T1", (0, 0, 1), "ok"), ("T2", (0, 1, 2), "abort"),
                              ("T3", (0, 2, 3), "ok")):
        h.begin("pp", txn)
        op = h.poll("pp", [rec], txn=txn)
        (h.abort if outcome == "abort" else h.commit)("pp", txn)
    v = verdict(h)
    assert found(v) == {"poll_skip"}
    example(v, "poll_skip", process="pp", op=op, offset=2, value=3, txn="T3")


def test_read_committed_gaps_and_rewinds_are_not_skips(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.txn("p1", "A", [(0, 2, 1)], outcome="abort")   # aborted record at 1, marker at 2
    h.send("p0", [(0, 3, 3)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1), (0, 3, 3)])              # skips only the aborted data
    # A pipeline that rewinds after its abort reads the input again.
    h.begin("pp", "T1")
    h.poll("pp", [(0, 0, 1)], txn="T1")
    h.abort("pp", "T1")
    h.seek("pp", [(0, 0)])
    h.begin("pp", "T2")
    h.poll("pp", [(0, 0, 1)], txn="T2")
    h.commit("pp", "T2")
    v = verdict(h)
    assert v.valid and found(v) == set()


def _inputs(h, n=4):
    """Values 1..n at offsets 0..n-1 of partition 0."""
    h.send("p0", [(0, v, v - 1) for v in range(1, n + 1)])


def _in_txn(h, process, txn, recs, outcome):
    h.begin(process, txn)
    op = h.poll(process, recs, txn=txn)
    (h.abort if outcome == "abort" else h.commit)(process, txn)
    return op


# Issue 52, point 1: where a consumer stands after an aborted transaction.

def test_a_rewind_after_an_abort_without_a_recorded_seek_is_no_nonmonotonic_poll(tmp_path):
    """Other tools record no seek for the rewind an abort requires: the first read
    after the abort goes back to where the consumer stood outside it (offset 1, past
    T1's read of 0), not judged against the aborted transaction's last read (2)."""
    h = History(tmp_path / "h.jsonl")
    _inputs(h)
    _in_txn(h, "pp", "T1", [(0, 0, 1)], "ok")
    _in_txn(h, "pp", "T2", [(0, 1, 2), (0, 2, 3)], "abort")
    _in_txn(h, "pp", "T3", [(0, 1, 2), (0, 2, 3), (0, 3, 4)], "ok")
    v = verdict(h)
    assert v.valid and found(v) == set(), v.summary()


@pytest.mark.parametrize("where", ["seek", "commit_offsets", "send_offsets"])
def test_the_position_after_an_abort_is_the_seek_or_the_last_committed_offset(tmp_path, where):
    """No read outside an aborted transaction: the run's seek position says where the
    consumer stood; a commit of its offset since its last read outside says so too
    (the later of the two), so going back to it is no nonmonotonic_poll."""
    h = History(tmp_path / "h.jsonl")
    _inputs(h)
    if where == "seek":
        h.seek("pp", [(0, 0)])
        _in_txn(h, "pp", "T1", [(0, 0, 1), (0, 1, 2)], "abort")
        _in_txn(h, "pp", "T2", [(0, 0, 1)], "ok")
    elif where == "commit_offsets":
        h.poll("pp", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
        h.commit_offsets("pp", "g", [(0, 2)])      # it stands at 2: 2 is not done
        _in_txn(h, "pp", "T1", [(0, 2, 3)], "abort")
        _in_txn(h, "pp", "T2", [(0, 2, 3)], "ok")
    else:
        h.begin("pp", "T1")
        h.poll("pp", [(0, 0, 1), (0, 1, 2)], txn="T1")
        h.send("pp", [(0, 11)], txn="T1", topic="out", sources=[1])
        h.send_offsets("pp", "T1", "g", [(0, 1)])  # it stands at 1
        h.commit("pp", "T1")
        _in_txn(h, "pp", "T2", [(0, 1, 2), (0, 2, 3)], "abort")
        _in_txn(h, "pp", "T3", [(0, 1, 2)], "ok")
    v = verdict(h)
    assert v.valid and found(v) == set(), v.summary()


def test_going_below_the_position_after_an_abort_is_nonmonotonic(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _inputs(h)
    h.poll("pp", [(0, 0, 1), (0, 1, 2)])
    commit = h.commit_offsets("pp", "g", [(0, 2)])
    _in_txn(h, "pp", "T1", [(0, 2, 3)], "abort")
    back = _in_txn(h, "pp", "T2", [(0, 1, 2)], "ok")
    v = verdict(h)
    assert found(v) == {"nonmonotonic_poll"}, v.summary()
    ex = example(v, "nonmonotonic_poll", op=back, offset=1)
    assert witnessed(ex) == {(back, "reader"), (commit, "committed offset")}
    assert_witnessed(ex)


def test_no_rewind_after_an_abort_is_a_skip_at_the_first_read_after_it(tmp_path):
    """T2 aborted; T3 (aborted too) goes on from T2's read instead of rewinding: its
    read of 2 skips offset 1 as far as where pp stood (past T1's read of 0) goes, and
    is reported there, not only at the next read that commits (T4's)."""
    h = History(tmp_path / "h.jsonl")
    _inputs(h)
    t1 = _in_txn(h, "pp", "T1", [(0, 0, 1)], "ok")
    _in_txn(h, "pp", "T2", [(0, 1, 2)], "abort")
    t3 = _in_txn(h, "pp", "T3", [(0, 2, 3)], "abort")
    t4 = _in_txn(h, "pp", "T4", [(0, 3, 4)], "ok")
    v = verdict(h)
    assert found(v) == {"poll_skip"}, v.summary()
    skips = {ex["op"]: ex for ex in v.examples["poll_skip"]}
    assert set(skips) == {t3, t4}
    assert witnessed(skips[t3]) >= {(t3, "reader"), (t1, "previous read")}
    assert "skipping offset 1 (value 2)" in skips[t3]["detail"]
    for ex in skips.values():
        assert_witnessed(ex)


def test_reads_inside_one_aborted_transaction_are_judged_against_each_other(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _inputs(h)
    _in_txn(h, "pp", "T1", [(0, 0, 1)], "ok")
    h.begin("pp", "T2")
    first = h.poll("pp", [(0, 1, 2)], txn="T2")
    back = h.poll("pp", [(0, 1, 2)], txn="T2")
    h.abort("pp", "T2")
    v = verdict(h)
    assert found(v) == {"nonmonotonic_poll"}, v.summary()
    ex = example(v, "nonmonotonic_poll", op=back)
    assert witnessed(ex) == {(back, "reader"), (first, "previous read")}


def test_after_an_abort_with_no_known_position_the_read_is_not_judged(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _inputs(h)
    h.assign("pp", [0])                     # no position: it stands nowhere known
    _in_txn(h, "pp", "T1", [(0, 2, 3), (0, 3, 4)], "abort")
    _in_txn(h, "pp", "T2", [(0, 1, 2)], "ok")
    v = verdict(h)
    assert v.valid and found(v) == set(), v.summary()


# Issue 52, point 2: a skip over a value known only from its acknowledgement.

@pytest.mark.parametrize("in_txn", [False, True])
def test_a_skip_over_a_value_known_only_from_its_ack(tmp_path, in_txn):
    """Value 2's ack puts it at offset 1; no poll returned it. c0 went from 0 to 2:
    the log lost it (lost_write) and c0 skipped it (poll_skip), each with witnesses."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    if in_txn:
        h.begin("p1", "T")
        lost = h.send("p1", [(0, 2, 1)], txn="T")
        h.commit("p1", "T")
    else:
        lost = h.send("p0", [(0, 2, 1)])
    h.send("p0", [(0, 3, 3)])
    before = h.poll("c0", [(0, 0, 1)])
    after = h.poll("c0", [(0, 3, 3)])
    v = verdict(h)
    assert found(v) == {"lost_write", "poll_skip"}, v.summary()
    ex = example(v, "poll_skip", process="c0", op=after, offset=3, value=3)
    assert "skipping offset 1 (value 2)" in ex["detail"]
    assert witnessed(ex) == {(after, "reader"), (before, "previous read"), (lost, "skipped writer")}
    assert_witnessed(ex)
    example(v, "lost_write", op=lost, offset=1, value=2)


def test_a_first_read_after_a_seek_past_a_value_known_from_its_ack_skips(tmp_path):
    h = History(tmp_path / "h.jsonl")
    lost = h.send("p0", [(0, 1, 0)])
    h.send("p0", [(0, 2, 1)])
    seek = h.seek("c0", [(0, 0)])
    after = h.poll("c0", [(0, 1, 2)])
    v = verdict(h)
    assert found(v) == {"lost_write", "poll_skip"}, v.summary()
    ex = example(v, "poll_skip", op=after, offset=1)
    assert witnessed(ex) == {(after, "reader"), (seek, "seek"), (lost, "skipped writer")}


def test_acks_that_need_not_be_read_make_no_skip(tmp_path):
    """An aborted transaction's ack, one of a send that did not commit, and an offset a
    poll saw holding another value: nothing a reader must return."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.txn("p1", "A", [(0, 2, 1)], outcome="abort")   # aborted at 1, marker at 2
    h.begin("p1", "U")
    h.send("p1", [(0, 3, 3)], txn="U")
    h.commit("p1", "U", type="info")                  # unknown at 3, marker at 4
    h.send("p0", [(0, 5, 5)])
    h.poll("c0", [(0, 0, 1), (0, 5, 5)])
    v = verdict(h)
    assert v.valid and found(v) == set(), v.summary()


def test_nonmonotonic_poll(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    back = h.poll("c0", [(0, 1, 2)])
    v = verdict(h)
    assert found(v) == {"nonmonotonic_poll"}
    ex = example(v, "nonmonotonic_poll", process="c0", op=back, offset=1, value=2)
    assert "read offset 2 then offset 1" in ex["detail"]


def test_going_back_after_a_seek_or_assign_is_fine(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    h.seek("c0", [(0, 1)])
    h.poll("c0", [(0, 1, 2)])
    h.assign("c0", [0])
    h.poll("c0", [(0, 0, 1)])
    h.poll("c0", [(0, 1, 2)], type="info")  # the consumer may have moved: position unknown
    h.poll("c0", [(0, 0, 1)])
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_rewind_mismatch(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    h.seek("c0", [(0, 1)])
    wrong = h.poll("c0", [(0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"rewind_mismatch"}
    ex = example(v, "rewind_mismatch", process="c0", op=wrong, offset=2, value=3)
    assert "expected offset 1 (value 2)" in ex["detail"]


def test_rewind_below_the_seek_position(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    h.seek("c1", [(0, 2)])
    wrong = h.poll("c1", [(0, 1, 2)])
    v = verdict(h)
    example(v, "rewind_mismatch", process="c1", op=wrong, offset=1)


def test_rewind_to_the_first_visible_record(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    h.seek("c0", [(0, 1)])
    h.poll("c0", [(0, 1, 2)])
    h.txn("p1", "A", [(0, 9, 3)], outcome="abort")
    h.send("p0", [(0, 4, 5)])
    h.poll("c2", [(0, 3, 9)], isolation=RU, type="fail")  # a failed poll returns nothing
    h.seek("c0", [(0, 3)])
    h.poll("c0", [(0, 5, 4)])   # offsets 3 (aborted) and 4 (marker) are not visible
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_offset_regression(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.commit_offsets("c0", "g", [(0, 5)])
    back = h.commit_offsets("c0", "g", [(0, 3)])
    v = verdict(h)
    assert found(v) == {"offset_regression"}
    ex = example(v, "offset_regression", process="c0", op=back, partition=0, offset=3)
    assert "group g" in ex["detail"] and "offset 5" in ex["detail"]


def test_offset_regression_is_judged_per_process(tmp_path):
    h = History(tmp_path / "h.jsonl")
    first = h.commit_offsets("c0", "g", [(0, 5)])
    h.commit_offsets("c1", "g", [(0, 1)])          # another member: not a regression
    h.seek("c1", [(0, 0)])                         # another process's seek excuses nothing
    back = h.commit_offsets("c0", "g", [(0, 3)])
    v = verdict(h)
    assert found(v) == {"offset_regression"}
    assert v.counts["offset_regression"] == 1
    ex = example(v, "offset_regression", process="c0", op=back, partition=0, offset=3,
                 txn=None)
    assert f"after offset 5 was committed (commit_offsets op {first})" in ex["detail"]


def test_lower_commits_by_other_members_of_a_group_are_not_regressions(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.commit_offsets("c0", "g", [(0, 3)])
    h.commit_offsets("c1", "g", [(0, 1)])          # manual assign: any member may commit
    h.begin("pp", "T1")
    h.send_offsets("pp", "T1", "g", [(0, 0)])
    h.commit("pp", "T1")
    h.commit_offsets("c1", "g", [(0, 2)])
    h.fetch_offsets("c2", "g", [(0, 2)])           # the latest commit, whoever made it
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_offset_regression_in_transactions(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.begin("pp", "T1")
    h.send_offsets("pp", "T1", "g", [(0, 5)])
    h.commit("pp", "T1")
    h.begin("pp", "T2")
    back = h.send_offsets("pp", "T2", "g", [(0, 4)])
    h.commit("pp", "T2")
    v = verdict(h)
    assert found(v) == {"offset_regression"}
    example(v, "offset_regression", op=back, offset=4, txn="T2")


def test_asked_for_or_uncertain_rewinds_are_not_regressions(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.commit_offsets("c0", "g", [(0, 5)])
    h.seek("c0", [(0, 2)])
    h.commit_offsets("c0", "g", [(0, 3)])          # the application rewound
    h.commit_offsets("c0", "g", [(0, 1)], type="fail")
    h.commit_offsets("c0", "g", [(0, 0)], type="info")
    h.begin("pp", "T1")
    h.send_offsets("pp", "T1", "g", [(0, 1)])
    h.abort("pp", "T1")
    h.commit_offsets("c0", "h", [(0, 1)])          # another group
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_stale_offset_fetch(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.commit_offsets("c0", "g", [(0, 3)])
    h.commit_offsets("c0", "g", [(0, 5)])
    stale = h.fetch_offsets("c1", "g", [(0, 3)])
    v = verdict(h)
    assert found(v) == {"stale_offset_fetch"}
    ex = example(v, "stale_offset_fetch", process="c1", op=stale, partition=0, offset=3)
    assert "offset 5 was committed" in ex["detail"]


def test_fetch_of_nothing_after_a_commit_is_stale(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.commit_offsets("c0", "g", [(0, 3)])
    stale = h.fetch_offsets("c1", "g", [(0, None)])
    v = verdict(h)
    example(v, "stale_offset_fetch", op=stale, offset=None)


def test_fetches_may_see_racing_commits(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.fetch_offsets("c1", "g", [(0, None)])        # nothing committed yet
    h.commit_offsets("c0", "g", [(0, 3)])
    racing = h.invoke("c0", "commit_offsets", {"group": "g", "offsets": [
        {"topic": "t", "partition": 0, "offset": 5}]})
    h.fetch_offsets("c1", "g", [(0, 3)])           # the commit of 5 is still in flight
    h.fetch_offsets("c2", "g", [(0, 5)])
    h.complete(racing, "ok", {"group": "g", "offsets": [
        {"topic": "t", "partition": 0, "offset": 5}]})
    h.commit_offsets("c0", "g", [(0, 7)], type="info")
    h.fetch_offsets("c1", "g", [(0, 7)])           # the uncertain commit happened
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_fetch_before_any_commit_completed_may_only_return_nothing(tmp_path):
    h = History(tmp_path / "h.jsonl")
    stale = h.fetch_offsets("c0", "g", [(0, 42)])
    h.commit_offsets("c0", "g", [(0, 1)])
    h.fetch_offsets("c1", "h", [(0, 7)])           # a group nobody ever committed to
    v = verdict(h)
    assert found(v) == {"stale_offset_fetch"}
    assert v.counts["stale_offset_fetch"] == 2
    ex = example(v, "stale_offset_fetch", process="c0", op=stale, topic="t", partition=0,
                 offset=42, txn=None)
    assert "no commit had completed before the fetch began" in ex["detail"]


def test_fetch_before_the_first_commit_may_see_racing_or_uncertain_commits(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.fetch_offsets("c1", "g", [(0, None)])
    racing = h.invoke("c0", "commit_offsets", {"group": "g", "offsets": [
        {"topic": "t", "partition": 0, "offset": 5}]})
    h.fetch_offsets("c1", "g", [(0, 5)])           # the first commit is in flight
    h.fetch_offsets("c2", "g", [(0, None)])        # or not applied yet
    h.complete(racing, "ok", {"group": "g", "offsets": [
        {"topic": "t", "partition": 0, "offset": 5}]})
    h.commit_offsets("c0", "h", [(0, 7)], type="info")
    h.fetch_offsets("c1", "h", [(0, 7)])           # the uncertain commit happened
    h.fetch_offsets("c2", "h", [(0, None)])        # or did not
    h.begin("pp", "T1")
    h.send_offsets("pp", "T1", "k", [(0, 4)])
    commit = h.invoke("pp", "commit_txn", {}, txn="T1")
    h.fetch_offsets("c1", "k", [(0, 4)])           # the transaction is committing
    h.complete(commit, "ok", {})
    v = verdict(h)
    assert v.valid and found(v) == set()


def _pipeline(h, outputs):
    """Inputs 1 and 2 in topic `in`; transaction T1 of pp reads both and commits the
    consumer offset 2, writing `outputs` as (value, source) to topic `out`."""
    h.send("p0", [(0, 1, 0), (0, 2, 1)], topic="in")
    op, _ = _transform(h, "pp", "T1", "g", [(0, 1), (1, 2)],
                       [(i, v, src) for i, (v, src) in enumerate(outputs)])
    return op


def _transform(h, process, txn, group, polled, outputs, poll_group=None):
    """Transaction txn of `process` polls `polled` ((offset, value) in `in`), writes
    `outputs` ((offset, value, source) in `out`), sends `group`'s offset 2 of `in` and
    commits; returns the send and the send_offsets."""
    h.begin(process, txn)
    h.poll(process, [(0, o, v) for o, v in polled], txn=txn, topic="in", group=poll_group)
    op = h.send(process, [(0, v, o) for o, v, _ in outputs], txn=txn, topic="out",
                sources=[src for _, _, src in outputs])
    offsets = h.send_offsets(process, txn, group, [(0, 2)], topic="in")
    h.commit(process, txn)
    return op, offsets


def test_duplicate_output(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _pipeline(h, [(101, 1), (102, 2)])
    # A second instance redoes input 1 and commits its output again.
    again, _ = _transform(h, "pp2", "T2", "g", [(0, 1)], [(2, 103, 1)])
    v = verdict(h)
    assert found(v) == {"duplicate_output"}
    ex = example(v, "duplicate_output", process="pp2", op=again, topic="out", offset=2,
                 value=103, txn="T2")
    assert "input value 1 has 2 committed outputs" in ex["detail"]


def test_lost_input(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _pipeline(h, [(101, 1)])
    v = verdict(h)
    assert found(v) == {"lost_input"}
    example(v, "lost_input", process="pp", topic="in", partition=0, offset=1, value=2,
            txn="T1")


@pytest.mark.parametrize("pipeline", [None, False])
def test_a_read_write_transactions_offsets_are_no_pipelines(tmp_path, pipeline):
    """An rw_txn reads 1 and 2, writes one record of its own (no source) and sends its
    group's offsets past both in the transaction: said to be no pipeline's, its input
    owes no output; said nothing of, its group is a pipeline's that lost both inputs."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0), (0, 2, 1)])
    h.begin("w0", "T1")
    h.poll("w0", [(0, 0, 1), (0, 1, 2)], txn="T1", group="w0")
    h.send("w0", [(0, 3, 2)], txn="T1")
    h.send_offsets("w0", "T1", "w0", [(0, 2)], pipeline=pipeline)
    h.commit("w0", "T1")
    v = verdict(h)
    if pipeline is False:
        assert v.valid and found(v) == set(), v.counts
    else:
        assert found(v) == {"lost_input"} and v.counts["lost_input"] == 2


def test_two_groups_each_turning_an_input_into_one_output_are_no_duplicate(tmp_path):
    """Each consumer group is a pipeline of its own: group g's T1 and group h's T2 each
    make one output of inputs 1 and 2, into the same topic."""
    h = History(tmp_path / "h.jsonl")
    _pipeline(h, [(101, 1), (102, 2)])
    _transform(h, "qq", "T2", "h", [(0, 1), (1, 2)], [(2, 103, 1), (3, 104, 2)],
               poll_group="h")
    v = verdict(h)
    assert v.valid and found(v) == set()
    assert v.stats["txns_by_outcome"] == {"committed": 2}


def test_one_groups_output_does_not_stand_for_anothers_lost_input(tmp_path):
    """Group h committed past inputs 1 and 2 but made an output of 1 only; group g's
    output of 2 is not h's."""
    h = History(tmp_path / "h.jsonl")
    _pipeline(h, [(101, 1), (102, 2)])
    _, offsets = _transform(h, "qq", "T2", "h", [(0, 1), (1, 2)], [(2, 103, 1)],
                            poll_group="h")
    v = verdict(h)
    assert found(v) == {"lost_input"}
    assert v.counts["lost_input"] == 1
    ex = example(v, "lost_input", process="qq", op=offsets, topic="in", partition=0,
                 offset=1, value=2, txn="T2")
    assert "group h committed offset 2" in ex["detail"]


def test_a_group_that_made_an_output_twice_is_a_duplicate_beside_another_group(tmp_path):
    """Group g made input 1 twice (T1, then T3 of another instance); group h's one
    output of it (T2) is not counted among g's."""
    h = History(tmp_path / "h.jsonl")
    first = _pipeline(h, [(101, 1), (102, 2)])
    _transform(h, "qq", "T2", "h", [(0, 1), (1, 2)], [(2, 103, 1), (3, 104, 2)],
               poll_group="h")
    again, _ = _transform(h, "pp2", "T3", "g", [(0, 1)], [(4, 105, 1)])
    v = verdict(h)
    assert found(v) == {"duplicate_output"}
    ex = example(v, "duplicate_output", process="pp2", op=again, topic="out", value=105,
                 txn="T3")
    assert "input value 1 has 2 committed outputs" in ex["detail"]
    assert {w["op"] for w in ex["witnesses"] if w["role"] == "output"} == {first, again}


def test_a_pipeline_with_one_committed_output_per_input_is_valid(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _pipeline(h, [(101, 1), (102, 2)])
    # An aborted attempt at more output does not count.
    h.begin("pp", "T2")
    h.send("pp", [(0, 104, 2)], txn="T2", topic="out", sources=[1])
    h.abort("pp", "T2")
    h.poll("c0", [(0, 0, 101), (0, 1, 102)], topic="out")
    v = verdict(h)
    assert v.valid and found(v) == set()


def test_an_assign_forgets_positions_except_the_partitions_it_kept(tmp_path):
    # Values 1, 2, 3 at offsets 0, 1, 2 of partition 0 and 11, 12, 13 of partition 1,
    # all read by c9.
    h = History(tmp_path / "h.jsonl")
    h.send("p", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.send("p", [(1, 11, 0), (1, 12, 1), (1, 13, 2)])
    h.poll("c9", [(0, 0, 1), (0, 1, 2), (0, 2, 3), (1, 0, 11), (1, 1, 12), (1, 2, 13)])
    h.seek("c0", [(0, 0), (1, 0)])
    h.poll("c0", [(0, 0, 1), (1, 0, 11)])
    # An incremental reassignment: partition 0 stays with its position, partition 1 is
    # handed back and starts anew from wherever the group says.
    h.assign("c0", [0, 1], kept=[0])
    skip = h.poll("c0", [(0, 2, 3), (1, 2, 13)])
    v = verdict(h)
    assert found(v) == {"poll_skip"}, v.summary()
    assert v.counts["poll_skip"] == 1
    example(v, "poll_skip", process="c0", op=skip, partition=0, offset=2, value=3)


def test_an_assign_that_says_where_reading_starts_is_a_seek_there(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.poll("c9", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1)])
    # Reassigned, starting at offset 1: reading 3 at 2 first misses 2 at 1.
    start = h.assign("c0", [0], starts={0: 1})
    bad = h.poll("c0", [(0, 2, 3)])
    v = verdict(h)
    assert found(v) == {"rewind_mismatch"}, v.summary()
    ex = example(v, "rewind_mismatch", process="c0", op=bad, partition=0, value=3)
    assert {"op": start, "role": "seek"} in ex["witnesses"]
    # Starting where it read next is fine, and so is going back to the start.
    h = History(tmp_path / "ok.jsonl")
    h.send("p", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2)])
    h.assign("c0", [0], starts={0: 0})
    h.poll("c0", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    v = verdict(h)
    assert v.valid and found(v) == set(), v.summary()


def test_an_assign_that_keeps_a_partition_it_does_not_assign_is_refused(tmp_path):
    # Kept means "stays assigned": a partition handed back keeps no position, so the
    # history contradicts itself and no rule of assign can judge it.
    h = History(tmp_path / "h.jsonl")
    h.send("p", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1)])
    op = h.assign("c0", [1], kept=[0])
    h.poll("c0", [(0, 2, 3)])
    h.close()
    with pytest.raises(HistoryError, match=rf"assign op {op} keeps t/0, which it does not assign"):
        check(h.path, local=True)


def test_an_assign_that_kept_nothing_forgets_every_position(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.poll("c9", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 1)])
    h.assign("c0", [0])  # librdkafka's assign(): positions fetched anew
    h.poll("c0", [(0, 2, 3)])
    v = verdict(h)
    assert v.valid and found(v) == set(), v.summary()


@pytest.mark.parametrize("outcome", ["abort", "info"])
def test_a_skip_inside_a_transaction_that_did_not_commit_is_still_a_skip(tmp_path, outcome):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2), (0, 4, 3)])
    h.poll("c9", [(0, 0, 1), (0, 1, 2), (0, 2, 3), (0, 3, 4)])
    h.seek("pp", [(0, 0)])
    h.begin("pp", "T1")
    h.poll("pp", [(0, 0, 1)], txn="T1")
    skip = h.poll("pp", [(0, 2, 3)], txn="T1")  # passes over offset 1 inside T1
    back = h.poll("pp", [(0, 1, 2)], txn="T1")  # and goes back
    (h.abort("pp", "T1") if outcome == "abort" else h.commit("pp", "T1", type="info"))
    v = verdict(h)
    example(v, "poll_skip", process="pp", op=skip, offset=2, value=3)
    example(v, "nonmonotonic_poll", process="pp", op=back, offset=1, value=2)


_COMMIT_OR_FETCH = st.tuples(st.sampled_from(["commit_offsets", "fetch_offsets"]),
                             st.sampled_from([None, 1, 2, 3]),
                             st.sampled_from(["ok", "ok", "info", "fail"]), st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_COMMIT_OR_FETCH, min_size=2, max_size=12))
def test_fetches_judged_all_at_once_as_one_by_one(tmp_path, monkeypatch, steps):
    """groups.stale_fetches first finds, for all fetches at once, those its rule allows
    (groups._unexplained); the rest it judges one by one. Commits and fetches that race
    (each may complete after the next is invoked) give the same anomalies as judging
    every fetch one by one."""
    h = History(tmp_path / f"h{len(list(tmp_path.iterdir()))}.jsonl")
    pending = None
    for k, (f, offset, type, overlaps) in enumerate(steps):
        if f == "fetch_offsets":
            value = {"group": "g", "partitions": [{"topic": "t", "partition": 0}]}
            done = {"group": "g", "offsets": [{"topic": "t", "partition": 0, "offset": offset}]}
        else:
            offset = 1 if offset is None else offset
            value = done = {"group": "g", "offsets": [{"topic": "t", "partition": 0,
                                                       "offset": offset}]}
        op = h.invoke(f"c{k}", f, value)
        if pending is not None:
            h.complete(*pending)
            pending = None
        ending = (op, type, done if type == "ok" else None)
        if overlaps:
            pending = ending
        else:
            h.complete(*ending)
    if pending is not None:
        h.complete(*pending)
    h.send("p", [(0, 1, 0)])  # evidence
    together = verdict(h)
    monkeypatch.setattr(groups, "_unexplained", lambda fetches, *rest: fetches)
    assert verdict(h).examples.get("stale_offset_fetch") == \
        together.examples.get("stale_offset_fetch")
    monkeypatch.undo()


# What a tool other than the harness may write: the docs put an assign's `kept` and a
# seek's resolved positions on the ok, which the harness also copies to the invoke.

def test_kept_given_only_on_the_assigns_ok_keeps_the_position(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    parts = [{"topic": "t", "partition": 0}]
    op = h.invoke("c0", "assign", {"partitions": parts})
    h.complete(op, "ok", {"partitions": parts, "kept": parts})
    again = h.poll("c0", [(0, 0, 1)])
    v = verdict(h)
    assert found(v) == {"nonmonotonic_poll"}
    example(v, "nonmonotonic_poll", op=again, offset=0)


def test_an_assign_that_keeps_on_its_ok_what_it_does_not_assign_is_refused(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _three(h)
    op = h.invoke("c0", "assign", {"partitions": [{"topic": "t", "partition": 1}]})
    h.complete(op, "ok", {"partitions": [{"topic": "t", "partition": 1}],
                          "kept": [{"topic": "t", "partition": 0}]})
    with pytest.raises(HistoryError, match=f"assign op {op} keeps t/0"):
        verdict(h)


@pytest.mark.parametrize("asked", [None, 2])
def test_a_seek_is_where_its_ok_resolved_it(tmp_path, asked):
    """The ok's offset is the position (the runner resolves "beginning" and
    "committed"): after a seek asked for `asked` and resolved to 0, reading offset 1
    first passes over offset 0; reading offset 0 first is right."""
    h = History(tmp_path / "h.jsonl")
    _three(h)
    for process, first in (("c1", 1), ("c2", 0)):
        op = h.invoke(process, "seek", {"positions": [{"topic": "t", "partition": 0,
                                                       "offset": asked}]})
        h.complete(op, "ok", {"positions": [{"topic": "t", "partition": 0, "offset": 0}]})
        h.poll(process, [(0, first, first + 1)])
    v = verdict(h)
    assert v.counts == {"rewind_mismatch": 1}, v.summary()
    example(v, "rewind_mismatch", process="c1", offset=1)


def test_a_read_of_unknown_offset_is_where_its_value_is_known_to_be(tmp_path):
    """c1's polls returned values at offsets they did not learn. Value 2 is known (from
    its ack) to be at 1: then 3 at 2 was skipped. Value 5's offset nobody learned: the
    read after it starts a run of its own (it may have returned what lies between)."""
    h = History(tmp_path / "h.jsonl")
    _three(h)
    h.send("p0", [(0, 4, 3), (0, 5)])
    h.send("p0", [(0, 6, 5), (0, 7, 6)])
    h.poll("c0", [(0, 3, 4), (0, 5, 6), (0, 6, 7)])
    h.seek("c1", [(0, 0)])
    h.poll("c1", [(0, 0, 1), (0, None, 2)])
    skip = h.poll("c1", [(0, 3, 4), (0, None, 5), (0, 6, 7)])
    v = verdict(h)
    assert v.counts == {"poll_skip": 1}, v.summary()
    example(v, "poll_skip", op=skip, offset=3)


def test_seeks_of_unknown_or_uncertain_position_are_rewinds_asked_for(tmp_path):
    """A seek whose position nobody learned, or that ended in info, may have moved the
    consumer anywhere it asked: a lower commit after it is no regression."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.commit_offsets("c0", "g", [(0, 3)])
    h.seek("c0", [(0, None)])
    h.commit_offsets("c0", "g", [(0, 1)])
    h.commit_offsets("c1", "g", [(0, 3)])
    h.seek("c1", [(0, 0)], type="info")
    h.commit_offsets("c1", "g", [(0, 1)])
    h.commit_offsets("c2", "g", [(0, 3)])
    h.seek("c2", [(0, 0)], type="fail")
    lower = h.commit_offsets("c2", "g", [(0, 1)])
    v = verdict(h)
    assert found(v) == {"offset_regression"}
    assert [e["op"] for e in v.examples["offset_regression"]] == [lower]


def test_a_transactions_later_send_offsets_replaces_its_earlier_one(tmp_path):
    """One transaction sent offsets 1 then 3 for the same partition and committed: the
    group's offset is 3 (the coordinator keeps the last), so a later fetch of 1 is
    stale; had the later send_offsets failed, or been for another group, 1 would be
    right."""
    for last, group, stale in (("ok", "g", True), ("fail", "g", False), ("ok", "h", False)):
        h = History(tmp_path / f"{last}-{group}.jsonl")
        h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
        h.begin("x0", "T")
        h.send_offsets("x0", "T", "g", [(0, 1)])
        h.send_offsets("x0", "T", group, [(0, 3)], type=last)
        h.commit("x0", "T")
        fetch = h.fetch_offsets("final", "g", [(0, 1)])
        v = verdict(h)
        assert found(v) == ({"stale_offset_fetch"} if stale else set()), (last, group,
                                                                          v.summary())
        if stale:
            example(v, "stale_offset_fetch", op=fetch)


# Issue 52, point 4: what was not judged is counted per rule.

def _blind_spots(h):
    """c0 starts at an assign with no position and reads from offset 2: values 1 and 2
    may or may not have been gone over (value 2 pp reads later); pp's run, begun by an
    assign with no position, aborts its only read before reading again."""
    _inputs(h)
    h.assign("c0", [0])
    h.poll("c0", [(0, 2, 3), (0, 3, 4)])
    h.assign("pp", [0])
    _in_txn(h, "pp", "T1", [(0, 2, 3)], "abort")
    _in_txn(h, "pp", "T2", [(0, 1, 2)], "ok")


@pytest.mark.parametrize("on_spark", [False, True])
def test_what_was_not_judged_is_counted_per_rule(tmp_path, request, on_spark):
    h = History(tmp_path / "h.jsonl")
    _blind_spots(h)
    v = verdict(h, spark=request.getfixturevalue("spark") if on_spark else None)
    assert v.valid and found(v) == set(), v.summary()
    counts = {u["rule"]: u["count"] for u in v.unjudged}
    assert counts == {"lost_write": 1, "poll_skip, nonmonotonic_poll": 1, "rewind_mismatch": 2}
    assert all(u["why"] for u in v.unjudged)
    assert "Not judged, for lack of information:" in v.summary()
    assert v.to_dict()["unjudged"] == v.unjudged


def test_a_history_whose_every_start_is_known_has_nothing_unjudged(tmp_path):
    h = History(tmp_path / "h.jsonl")
    _inputs(h)
    h.assign("c0", [0], starts={0: 0})
    h.poll("c0", [(0, 0, 1), (0, 1, 2)])
    h.seek("pp", [(0, 0)])
    _in_txn(h, "pp", "T1", [(0, 0, 1)], "abort")
    _in_txn(h, "pp", "T2", [(0, 0, 1), (0, 1, 2), (0, 2, 3), (0, 3, 4)], "ok")
    v = verdict(h)
    assert v.valid and v.unjudged == [], v.summary()
