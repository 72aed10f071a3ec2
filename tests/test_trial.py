"""What a trial counts as exercised: the evidence a property needs before its pass means
anything. Only what the plan's clients completed counts, never the harness's final reads."""
from __future__ import annotations

from onceproof.checkers.store import convert
from onceproof.checkers.verdict import Verdict
from onceproof.history.writer import HistoryWriter
from onceproof.trial import Counterexamples, Trial, exercised, reproduces

REC = {"topic": "t", "partition": 0, "key": "k"}


def test_acknowledged_writes_count_records_of_ok_sends_only(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        op = w.invoke("p0", "send", {"records": [{**REC, "value": 1}, {**REC, "value": 2}]})
        w.ok(op, {"records": [{**REC, "value": 1, "offset": 0}, {**REC, "value": 2, "offset": 1}]})
        op = w.invoke("p0", "send", {"records": [{**REC, "value": 3}]})
        w.info(op, "timed out")
        op = w.invoke("c0", "poll", {"isolation": "read_committed"})
        w.ok(op, {"isolation": "read_committed", "records": [{**REC, "offset": 0, "value": 1}]})
        op = w.invoke("t0", "commit_txn", {})
        w.fail(op, "fenced")
    seen = exercised(convert(path, tmp_path / "tables"))
    assert seen["acknowledged_writes"] == 2 and seen["send"] == 1
    assert seen["records_read"] == 1 and seen["poll"] == 1
    assert not seen["commit_txn"]


def test_the_final_reads_alone_exercise_nothing(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        op = w.invoke("final", "seek", {"positions": [{**REC, "offset": 0}]}, final=True)
        w.ok(op, {"positions": [{**REC, "offset": 0}]})
        op = w.invoke("final", "poll", {"isolation": "read_committed"}, final=True)
        w.ok(op, {"isolation": "read_committed", "records": [{**REC, "offset": 0, "value": 1}]})
        w.fault("heal", {"all": True})  # the settle phase's heal is no fault of the plan
    assert not exercised(convert(path, tmp_path / "tables"))


def test_faults_count_those_that_fired_not_their_undos(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        w.fault("kill", {"node": 1})
        w.fault("start", {"node": 1})
        w.fault("partition", {"sides": [["leader"], []]}, type="fail", error="no leader known")
        w.fault("client_crashed", {"process": "x0", "by": "x0.1"}, type="info", error="planned")
        w.fault("pause", {"node": 2})
    assert exercised(convert(path, tmp_path / "tables"))["faults"] == 2


def test_transactions_are_counted_before_during_and_after_a_release_change(tmp_path):
    # A commit before the upgrade, one between its two nodes, one after the finalize;
    # then a v1 and a v2 transaction begun after transaction.version=2 was finalized.
    # The upgrade's fail (nothing moved) counts as no change.
    clock = iter(range(10**9, 10**12, 10**6))
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, clock=lambda: next(clock)) as w:
        def txn(process: str, protocol: int) -> None:
            op = w.invoke(process, "begin_txn", {"tid": process})
            w.ok(op, {"tid": process, "txn_protocol": protocol})
            op = w.invoke(process, "commit_txn", {})
            w.ok(op, {})
        w.fault("upgrade", {"f": "upgrade", "node": 1, "to": "4.4.0"}, type="fail", error="no")
        txn("t0", 1)
        w.fault("upgrade", {"f": "upgrade", "node": 1, "to": "4.4.0", "releases": {"1": "4.4.0"}})
        txn("t0", 1)
        w.fault("upgrade", {"f": "upgrade", "node": 2, "to": "4.4.0", "releases": {"2": "4.4.0"}})
        w.fault("finalize", {"f": "finalize", "feature": "transaction.version", "level": 2,
                             "features": {"transaction.version": 2}})
        txn("t0", 1)
        txn("t1", 2)
    seen = exercised(convert(path, tmp_path / "tables"), path)
    assert (seen["txns_committed_before_change"], seen["txns_committed_during_change"],
            seen["txns_committed_after_change"]) == (1, 1, 2)
    assert seen["txns_begun_v1_after_finalize"] == 1
    assert seen["txns_begun_v2_after_finalize"] == 1
    # Without the history's lines, the protocols are not read; the commits still count.
    assert "txns_begun_v2_after_finalize" not in exercised(convert(path, tmp_path / "t2"))


def test_a_run_without_a_release_change_counts_nothing_about_one(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        op = w.invoke("t0", "commit_txn", {})
        w.ok(op, {})
    assert not any("change" in k for k in exercised(convert(path, tmp_path / "tables"), path))


def _failed_trial(folder, clients: int) -> Trial:
    """A failing trial's folder: a concurrent plan of `clients` clients (its size grows
    with them), and its history."""
    import json
    folder.mkdir(parents=True)
    plan = {"duration": 10, "schedule": [], "clients": {f"t{i}": {"role": "txn_producer"}
                                                        for i in range(clients)}}
    (folder / "plan.json").write_text(json.dumps(plan))
    (folder / "history.jsonl").write_text(f"{folder.name}\n")
    return Trial(plan, folder, None, 1.0)  # type: ignore[arg-type]


def test_a_search_keeps_its_own_smallest_counterexample_not_an_earlier_runs(tmp_path):
    not_started = object()  # a cluster the harness did not start: no logs to copy
    earlier = Counterexamples(tmp_path / "counterexamples")
    assert earlier.offer("s", _failed_trial(tmp_path / "earlier", 2), not_started)
    kept = tmp_path / "counterexamples" / "s" / "history.jsonl"

    search = Counterexamples(tmp_path / "counterexamples")
    # Bigger than the earlier run's, but this search's first: it replaces it.
    assert search.offer("s", _failed_trial(tmp_path / "first", 5), not_started)
    assert kept.read_text() == "first\n"
    assert not search.offer("s", _failed_trial(tmp_path / "bigger", 6), not_started)
    assert search.offer("s", _failed_trial(tmp_path / "shrunk", 3), not_started)
    assert kept.read_text() == "shrunk\n"


def test_a_replay_reproduces_what_failed_the_saved_verdict_not_its_notes():
    saved = Verdict(valid=False, counts={"aborted_read": 3, "g0": 47}, notes=["g0"])
    assert saved.failing == {"aborted_read"}
    # The replays of a delayed_end_txn counterexample: g0 cycles as notes in every run.
    only_notes = Verdict(valid=True, counts={"g0": 54, "g_single": 1}, notes=["g0", "g_single"])
    assert not reproduces(saved.failing, only_notes)
    assert reproduces(saved.failing, Verdict(valid=False, counts={"aborted_read": 1, "g0": 3},
                                             notes=["g0"]))
    # The same type as a violation in the replay counts.
    assert reproduces({"g0"}, Verdict(valid=False, counts={"g0": 2}))
    assert not reproduces({"lost_write"}, Verdict(valid=False, counts={"duplicate": 1}))
    # Saved for nothing in particular: anything that fails the run, a stall included.
    assert reproduces(set(), Verdict(valid=True, counts={"late_return": 1}, stalls=["late_return"]))
    assert not reproduces(set(), only_notes)
