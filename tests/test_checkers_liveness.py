"""late_return and unrecovered_partition (checkers/liveness.py): a call that overstays its
own timeout, or a partition left without a leader, is a stall, reported apart from
safety: the history stays valid and becomes not live."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from onceproof.checkers import Verdict, check
from onceproof.checkers.liveness import LATE_MS, OPS_COLUMNS, from_ops
from onceproof.checkers.render import run_check
from tests.histories import History, example, found, verdict

S = 1_000_000_000  # nanoseconds in a second, the unit of an event's time


def _history(path, *ops):
    """ops: (process, f, invoke value, invoke time s, completion type or None, completion
    time s, error). Written by hand: the times are the point."""
    events = []
    for op, (process, f, value, start, type, end, error) in enumerate(ops):
        events.append({"process": process, "f": f, "type": "invoke", "op": op,
                       "time": int(start * S), "value": value, "txn": f"{process}/1"})
        if type is not None:
            events.append({"process": process, "f": f, "type": type, "op": op,
                           "time": int(end * S), "value": {}, "txn": f"{process}/1",
                           **({"error": error} if error else {})})
    events.sort(key=lambda e: e["time"])
    with open(path, "w") as out:
        for i, e in enumerate(events):
            out.write(json.dumps({"index": i, **e}) + "\n")
    return path


def _commit(timeout_ms, start, type, end, error=None):
    return ("p", "commit_txn", {"timeout_ms": timeout_ms}, start, type, end, error)


def test_a_call_within_its_timeout_and_grace_is_live(tmp_path):
    late = LATE_MS / 1000
    v = check(_history(tmp_path / "h.jsonl", _commit(20_000, 0, "ok", 20 + late - 0.1),
                       _commit(20_000, 30, "info", 49, "timed out")), local=True)
    # Live; and with no record written or read, safety has nothing to judge.
    assert v.live and v.unknown and "late_return" not in found(v), v.summary()


def test_a_call_that_returns_late_is_a_stall_not_a_violation(tmp_path):
    v = check(_history(tmp_path / "h.jsonl", _commit(20_000, 0, "ok", 31)), local=True)
    assert v.valid and not v.live and v.stalls == ["late_return"], v.summary()
    assert v.severity("late_return") == "liveness" and v.violations == {}
    ex = example(v, "late_return", process="p", op=0, txn="p/1")
    assert "commit_txn given a 20 s timeout returned ok after 31.0 s" in ex["detail"]
    assert v.headline == "VALID, NOT LIVE"


def _paused(path, call, *nemesis):
    """A history of one call of process p, and nemesis ops: (f, start s, end s, ok value)."""
    _history(path, call)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for op, (f, start, end, value) in enumerate(nemesis, start=100):
        events += [{"process": "nemesis", "f": f, "type": "invoke", "op": op,
                    "time": int(start * S), "value": {"f": f}},
                   {"process": "nemesis", "f": f, "type": "ok", "op": op,
                    "time": int(end * S), "value": {"f": f, **value}}]
    events.sort(key=lambda e: e["time"])
    path.write_text("".join(json.dumps({**e, "index": i}) + "\n" for i, e in enumerate(events)))
    return path


def test_the_time_a_pause_stopped_the_calls_process_does_not_count(tmp_path):
    # A 20 s commit that took 40 s: 18 s of it with its process stopped leaves 22 s,
    # within the timeout and its grace; stopped 5 s, 35 s is still late; a pause of
    # another process, or of none, excuses nothing.
    call = _commit(20_000, 0, "ok", 40)
    stopped = {"client": "x", "processes": ["p"]}
    cases = {
        "excused": ([("pause_client", 10, 10.1, stopped), ("resume_client", 28, 28, stopped)], True),
        "by a heal": ([("pause_client", 10, 10.1, stopped), ("heal", 27.5, 28, {})], True),
        "too short": ([("pause_client", 10, 10.1, stopped), ("resume_client", 15, 15, stopped)], False),
        "another process": ([("pause_client", 10, 10.1, {"processes": ["q"]}),
                             ("resume_client", 28, 28, {"processes": ["q"]})], False),
    }
    for name, (nemesis, live) in cases.items():
        v = check(_paused(tmp_path / f"{name}.jsonl", call, *nemesis), local=True)
        assert v.live == live, (name, v.summary())


def test_a_call_the_harness_gave_up_on_or_never_returned(tmp_path):
    gave_up = ("p", "send_offsets", {"timeout_ms": 20_000}, 0, "info", 30,
               "send_offsets_to_transaction did not return 30 s after it was called with a 20 s timeout")
    never = ("q", "abort_txn", {"timeout_ms": 20_000}, 40, None, None, None)
    last = ("r", "poll", {"timeout_ms": 1000}, 70, "ok", 70.5, None)
    v = check(_history(tmp_path / "h.jsonl", gave_up, never, last), local=True)
    details = sorted(ex["detail"] for ex in v.examples["late_return"])
    assert v.counts["late_return"] == 2, v.summary()
    assert details == [
        "abort_txn given a 20 s timeout had not returned after 30.5 s when the history ended",
        "send_offsets given a 20 s timeout had not returned after 30.0 s; the harness gave up on it"]


def test_calls_without_a_timeout_are_not_judged(tmp_path):
    slow = ("p", "commit_offsets", {"group": "g", "offsets": []}, 0, "ok", 300, None)
    v = check(_history(tmp_path / "h.jsonl", slow), local=True)
    assert "late_return" not in found(v)


def test_of_ops_none_of_which_is_judged_only_three_columns_are_read():
    strings = pa.string()
    ops = pa.table({
        "op": [0, 1], "process": ["p", "q"], "f": ["send", "fetch_offsets"],
        "type": ["ok", "fail"], "txn": pa.array([None, None], strings),
        "invoke_time": [0, S], "complete_time": [300 * S, 2 * S],
        "timeout_ms": pa.array([None, None], pa.int64()), "error": pa.array([None, "x"], strings),
        "final": pa.array([False, None], pa.bool_()), "group": pa.array([None, "g"], strings)})
    asked = []

    def read(table):
        def columns(names):
            asked.append(list(names))
            return table.select(names)
        return columns
    assert from_ops(read(ops)).empty and asked == [["timeout_ms", "final", "f"]]
    # Given a timeout, the first call is judged, from every column.
    timed = ops.set_column(ops.schema.get_field_index("timeout_ms"), "timeout_ms",
                           pa.array([1000, None], pa.int64()))
    late = from_ops(read(timed))
    assert late[["type", "op", "process"]].values.tolist() == [["late_return", 0, "p"]]
    assert asked[-1] == OPS_COLUMNS


def test_a_stall_fails_the_check_command_and_says_so(tmp_path, capsys):
    h = _history(tmp_path / "h.jsonl", _commit(1000, 0, "ok", 10))
    assert run_check(str(h), json_out=str(tmp_path / "v.json")) == 1
    out = capsys.readouterr().out
    assert "VALID, NOT LIVE" in out and "liveness" in out
    saved = json.loads((tmp_path / "v.json").read_text())
    assert saved["valid"] is True and saved["live"] is False and saved["stalls"] == ["late_return"]


@pytest.mark.cluster
def test_on_a_real_run_a_stall_is_exactly_a_call_past_its_timeout(cluster, tmp_path):
    """A real pipeline whose group coordinator is paused mid-run: the harness records each
    call's timeout, and the verdict calls a call late exactly when it took longer than
    that timeout plus the grace (whether librdkafka overstays here is its business;
    that the verdict tells which calls did is ours)."""
    from onceproof.checkers.store import convert, read_table
    from onceproof.run.execute import run
    plan = {"topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
            "clients": {"p0": {"role": "producer", "topic": "in", "seed": 1},
                        "x0": {"role": "pipeline", "input": "in", "output": "out", "seed": 2}},
            "duration": 20, "mix": {"poll_timeout": 0.1},
            "schedule": [{"at": 5, "fault": {"f": "pause", "node": "group_coordinator:x0"}},
                         {"at": 14, "fault": {"f": "resume"}}]}
    run(plan, cluster, tmp_path)
    tables = convert(tmp_path / "history.jsonl", tmp_path / "tables")
    v = check(tables, local=True)
    ops = read_table(tables, "ops", ["op", "f", "invoke_time", "complete_time", "timeout_ms",
                                     "error"]).to_pandas()
    timed = ops[ops["timeout_ms"].notna()]
    assert {"send", "poll", "send_offsets", "commit_txn"} <= set(timed["f"]), set(timed["f"])
    end = max(ops["invoke_time"].max(), ops["complete_time"].max())
    took = timed["complete_time"].fillna(end) - timed["invoke_time"]
    over = set(timed.loc[took > (timed["timeout_ms"] + LATE_MS) * 1_000_000, "op"])
    late = {ex["op"] for ex in v.examples.get("late_return", [])}
    assert v.counts.get("late_return", 0) == len(over), v.summary()
    assert late <= over
    assert v.live == (not over)


@pytest.mark.parametrize("ops", [
    [],  # an empty history
    [("p", "send", {"records": [{"topic": "t", "partition": 0, "key": None, "value": 1}]},
      1, None, 0, None)],  # a send that never completed
    [("p", "send", {"records": [{"topic": "t", "partition": 0, "key": None, "value": 1}]},
      1, "fail", 2, "refused")],  # a send that certainly did not happen
    # Ops that ended in info, which history.md counts the same as never completed:
    # neither may have happened, and nothing observed them.
    [("p", "send", {"records": [{"topic": "t", "partition": 0, "key": None, "value": 1}]},
      1, "info", 2, "timed out")],
    [("c", "commit_offsets", {"group": "g", "offsets": [{"topic": "t", "partition": 0,
                                                          "offset": 3}]},
      1, "info", 2, "timed out")],
    [("c", "poll", {"isolation": "read_committed"}, 1, "ok", 2, None)],  # read nothing
])
def test_a_history_with_nothing_to_judge_has_no_verdict(tmp_path, capsys, ops):
    h = _history(tmp_path / "h.jsonl", *ops) if ops else tmp_path / "h.jsonl"
    if not ops:
        h.write_text("")
    assert run_check(str(h), json_out=str(tmp_path / "v.json")) == 2
    v = check(h)
    assert v.unknown and not v.fine and v.headline.startswith("UNKNOWN: ")
    # The headline is one line, whatever the terminal's width: what a script greps for.
    assert v.headline in capsys.readouterr().out.splitlines()
    saved = json.loads((tmp_path / "v.json").read_text())
    # Nothing is not valid, in the JSON too (Elle's :valid? :unknown).
    assert saved["unknown"] == v.unknown and saved["valid"] == "unknown"
    assert Verdict.from_dict(v.to_dict()) == v


def test_one_acknowledged_write_is_evidence(tmp_path):
    record = {"topic": "t", "partition": 0, "key": None, "value": 1}
    h = _history(tmp_path / "h.jsonl",
                 ("p", "send", {"records": [record]}, 1, "ok", 2, None))
    v = check(h)
    assert v.unknown is None and v.fine and v.headline == "VALID"


def test_a_partition_left_without_a_leader_is_a_stall_that_names_its_unread_writes(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0), (0, 2, 1), (1, 3, 0)])
    h.seek("final", [(1, 0)], final=True)
    h.poll("final", [(1, 0, 3)], final=True)
    # Partition 0 had no leader to the end: the harness records its watermarks as null.
    wm = h.watermarks("final", [(0, None, None, None), (1, 0, 1, 1)])
    v = verdict(h)
    assert v.valid and not v.live and v.stalls == ["unrecovered_partition"], v.summary()
    ex = example(v, "unrecovered_partition", process="final", op=wm, topic="t", partition=0)
    assert "2 surely written values in it were not read there" in ex["detail"]
    # Unread for want of a leader, so neither lost nor unseen: nobody went over them.
    assert found(v) == {"unrecovered_partition"}


def test_a_partition_read_to_its_high_watermark_has_recovered(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.seek("final", [(0, 0)], final=True)
    h.poll("final", [(0, 0, 1)], final=True)
    h.watermarks("final", [(0, 0, 1, 1)])
    v = verdict(h)
    assert v.valid and v.live and "unrecovered_partition" not in found(v), v.summary()


def _final_fetch(h: History, type: str, error: str | None = None) -> int:
    asked = {"group": "g", "partitions": [{"topic": "t", "partition": 0}], "timeout_ms": 80_000}
    op = h.invoke("final", "fetch_offsets", asked, final=True)
    return h.complete(op, type, {"group": "g", "offsets": [
        {"topic": "t", "partition": 0, "offset": 1}]} if type == "ok" else None, error)


def test_committed_offsets_unreadable_at_the_end_are_a_stall(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.commit_offsets("c0", "g", [(0, 1)], type="info")
    op = _final_fetch(h, "fail", "Failed to get committed offsets: Local: Timed out")
    h.seek("final", [(0, 0)], final=True)
    h.poll("final", [(0, 0, 1)], final=True)
    h.watermarks("final", [(0, 0, 1, 1)])
    v = verdict(h)
    assert v.valid and not v.live and v.stalls == ["unreadable_offsets"], v.summary()
    ex = example(v, "unreadable_offsets", process="final", op=op)
    assert "group g's committed offsets" in ex["detail"] and "Timed out" in ex["detail"]


def test_committed_offsets_read_at_the_end_are_no_stall(tmp_path):
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    h.commit_offsets("c0", "g", [(0, 1)])
    _final_fetch(h, "ok")
    # A fetch that failed during the workload (under a fault, say) is no stall either.
    h.fetch_offsets("c0", "g", [(0, None)], type="fail")
    h.seek("final", [(0, 0)], final=True)
    h.poll("final", [(0, 0, 1)], final=True)
    h.watermarks("final", [(0, 0, 1, 1)])
    v = verdict(h)
    assert v.valid and v.live and "unreadable_offsets" not in found(v), v.summary()


def test_a_fetch_that_found_nothing_committed_is_no_evidence(tmp_path):
    """A null offset is "none committed": nothing was observed, so a run that only
    fetched nothing has no verdict (as a dead cluster's final fetch leaves it)."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1)], type="info")
    h.poll("c0", [])
    h.fetch_offsets("final", "g", [(0, None)])
    v = verdict(h)
    assert v.unknown and v.stats["evidence"]["offsets"] == 0, v.summary()


@pytest.mark.parametrize("odd", [{}, {"group": 5}], ids=["fast reader", "per-line reader"])
def test_a_faults_parameters_are_no_client_calls_timeout(tmp_path, odd):
    """reset_peer's timeout_ms is how much data passes before the reset: a fault that
    took 7 s to apply is no stall, whichever reader reads it (a fault value holding a
    field that EVENT types otherwise sends the file to the per-line reader)."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0)])
    op = h.invoke("nemesis", "reset_peer", {"f": "reset_peer", "timeout_ms": 0, **odd})
    h.skipped += 7 * S
    h.complete(op, "ok", {"f": "reset_peer"})
    v = verdict(h)
    assert v.valid and v.live and not found(v), v.summary()
