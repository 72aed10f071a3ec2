"""The history writer and its two readers (onceproof.history): the fast one and the
per-line one, which must agree; and the tables a history converts to. No Spark."""
from __future__ import annotations

import json
import os
import threading
import warnings

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from onceproof.checkers import check
from onceproof.checkers.store import FORMAT, convert, tables_of
from onceproof.history import access, lines, parse
from onceproof.history import read as readers
from onceproof.history.format import NEMESIS, HistoryError
from onceproof.history.read import events_table, read_events
from onceproof.history.writer import HistoryWriter


def _write_sample(path):
    with HistoryWriter(path) as w:
        op = w.invoke("p0", "send", {"records": [{"topic": "t", "partition": 0, "value": 1}]},
                      txn="T1")
        w.ok(op, {"records": [{"topic": "t", "partition": 0, "value": 1, "offset": 0}]})
        op = w.invoke("c0", "poll", {"isolation": "read_committed"}, final=True)
        w.info(op, "timeout")
        w.fault("kill", {"node": 2})
        w.invoke("c0", "poll", {"isolation": "read_committed"})  # never completed
    return path


def test_writer_records_jepsen_pairs_with_indexes_ops_and_times(tmp_path):
    path = _write_sample(tmp_path / "h.jsonl")
    events = read_events(path)
    assert [e["index"] for e in events] == list(range(len(events)))
    assert [(e["op"], e["type"]) for e in events] == [
        (0, "invoke"), (0, "ok"), (1, "invoke"), (1, "info"), (2, "invoke"), (2, "ok"),
        (3, "invoke")]
    assert events[1]["txn"] == "T1" and events[1]["value"]["records"][0]["offset"] == 0
    assert events[3]["final"] is True and events[3]["error"] == "timeout"
    assert events[4]["process"] == "nemesis" and events[4]["f"] == "kill"
    times = [e["time"] for e in events]
    assert times == sorted(times)


def test_writer_flushes_each_event_before_close(tmp_path):
    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path)
    op = w.invoke("p0", "commit_txn", {}, txn="T")
    assert len(read_events(path)) == 1  # on disk while the writer is still open
    w.ok(op)
    assert [e["type"] for e in read_events(path)] == ["invoke", "ok"]
    w.close()


def test_writer_rejects_completing_an_op_twice(tmp_path):
    with HistoryWriter(tmp_path / "h.jsonl") as w:
        op = w.invoke("p0", "begin_txn", {"tid": "x"})
        w.ok(op)
        with pytest.raises(ValueError):
            w.ok(op)
        with pytest.raises(ValueError):
            w.complete(op + 5, "ok")


def test_writer_is_safe_under_concurrent_clients(tmp_path):
    path = tmp_path / "h.jsonl"
    per_thread = 200
    with HistoryWriter(path) as w:
        def client(name):
            for i in range(per_thread):
                op = w.invoke(name, "send", {"records": [{"topic": "t", "partition": 0,
                                                          "value": hash((name, i)) % 10**9}]})
                w.ok(op, {})
        threads = [threading.Thread(target=client, args=(f"p{k}",)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = read_events(path)  # validates pairing, index order, one completion per op
    assert len(events) == 8 * per_thread * 2
    assert [e["index"] for e in events] == list(range(len(events)))
    assert len({e["op"] for e in events}) == 8 * per_thread


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path):
    path = _write_sample(tmp_path / "h.jsonl")
    with open(path, "a") as f:
        f.write('{"index": 7, "op": 4, "process": "p0", "ty')
    with pytest.warns(UserWarning, match=r"h\.jsonl:8: skipped a truncated last line"):
        events = read_events(path)
    assert len(events) == 7
    with pytest.warns(UserWarning, match="truncated last line"):
        table = events_table(path)
    assert table.num_rows == 7


@pytest.mark.parametrize("line, problem", [
    ("{not json", "not valid JSON"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send"}',
     "missing required field 'time'"),
    ('{"index": 1, "op": "9", "process": "p", "type": "invoke", "f": "send", "time": 5}',
     "field 'op' must be an integer"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": true}',
     "field 'time' must be an integer"),
    ('{"index": 1, "op": 9, "process": "p", "type": "maybe", "f": "send", "time": 5}',
     "type must be one of"),
    ('{"index": 1, "op": 9, "process": "p", "type": "ok", "f": "send", "time": 5}',
     "before any invoke"),
    ('{"index": 0, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": 5}',
     "index 0 does not increase"),
    ('{"index": 1, "op": 0, "process": "p", "type": "invoke", "f": "commit_txn", "time": 2}',
     r"op 0 invoked twice \(first on line 1\)"),
    ('{"index": 1, "op": 0, "process": "p", "type": "ok", "f": "send", "time": 2}',
     "completion of op 0 has f/process send/p but its invoke has commit_txn/p"),
    ('{"index": 1, "op": 0, "process": "q", "type": "ok", "f": "commit_txn", "time": 2}',
     "completion of op 0 has f/process commit_txn/q"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": 5, '
     '"value": {"records": [{"topic": "t", "partition": "zero", "value": 1}]}}',
     r"records\[0\]\.partition of a send must be an integer"),
    ('{"index": 1, "op": 9, "process": "q", "type": "invoke", "f": "send", "time": 0}',
     r"time 0 is before the previous event's \(1\)"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": 2}',
     r"p invoked op 9 before its op 0 \(line 1\) completed; a process does one op at a time"),
    # Past 64 bits: no reader can hold it, and the checkers must not meet it.
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", '
     '"time": 18446744073709551616}', "field 'time' must be an integer of 64 bits"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": 5, '
     '"value": {"records": [{"topic": "t", "partition": 0, "value": 1, '
     '"offset": 99999999999999999999}]}}',
     r"records\[0\]\.offset of a send must be an integer of 64 bits"),
    # Kafka has no negative partitions or offsets; a writer's -1 for "not known" would
    # be judged as a place in the log.
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": 5, '
     '"value": {"records": [{"topic": "t", "partition": 0, "value": 1}, '
     '{"topic": "t", "partition": 0, "value": 2, "offset": -1}]}}',
     r"records\[1\]\.offset of a send must be 0 or more and below 2\*\*53 \(null when not "
     r"known\), not -1"),
    # The checks bound places by floats: exact below 2**53, and Kafka's are far below.
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": 5, '
     '"value": {"records": [{"topic": "t", "partition": 0, "value": 1, '
     '"offset": 9007199254740992}]}}',
     r"records\[0\]\.offset of a send must be 0 or more and below 2\*\*53"),
    # An op of a kind no check reads would be judged as nothing, its records unread.
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "consume", "time": 5}',
     r"f 'consume' is no kind of client op; a client's ops are send, poll"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "seek", "time": 5, '
     '"value": {"positions": [{"topic": "t", "partition": -2, "offset": 0}]}}',
     r"positions\[0\]\.partition of a seek must be 0 or more"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "watermarks", "time": 5, '
     '"value": {"partitions": [{"topic": "t", "partition": 0, "low": 0, "high": 3, '
     '"lso": -1001}]}}',
     r"partitions\[0\]\.lso of a watermarks must be 0 or more"),
    # An item is an object: pyarrow's parse reads a null one as an item left out.
    # (Of another process than the lines around it, so that no rule between events
    # sends the file to the per-line reader anyway.)
    ('{"index": 1, "op": 9, "process": "q", "type": "invoke", "f": "send", "time": 2, '
     '"value": {"records": [null]}}', r"records\[0\] of a send must be an object"),
    ('{"index": 1, "op": 9, "process": "q", "type": "invoke", "f": "seek", "time": 2, '
     '"value": {"positions": [{"topic": "t", "partition": 0, "offset": 0}, null]}}',
     r"positions\[1\] of a seek must be an object"),
    # An item names its partition, and a record its value: the checks place each by them.
    ('{"index": 1, "op": 9, "process": "q", "type": "invoke", "f": "send", "time": 2, '
     '"value": {"records": [{"topic": "t", "partition": 0}]}}',
     r"records\[0\] of a send has no value"),
    ('{"index": 1, "op": 9, "process": "q", "type": "ok", "f": "poll", "time": 2, '
     '"value": {"records": [{"partition": 0, "value": 1, "offset": 0}]}}',
     r"records\[0\] of a poll has no topic"),
    ('{"index": 1, "op": 9, "process": "q", "type": "invoke", "f": "watermarks", "time": 2, '
     '"value": {"partitions": [{"topic": "t", "partition": null, "high": 3}]}}',
     r"partitions\[0\] of a watermarks has no partition"),
    # A lone surrogate escape is valid JSON, but no UTF-8 text holds it.
    ('{"index": 1, "op": 9, "process": "p\\ud800", "type": "invoke", "f": "send", "time": 5}',
     r"field 'process' must be a string of Unicode text, not 'p\\ud800'"),
    ('{"index": 1, "op": 9, "process": "p", "type": "invoke", "f": "send", "time": 5, '
     '"value": {"records": [{"topic": "t\\udfff", "partition": 0, "value": 1}]}}',
     r"records\[0\]\.topic of a send must be a string of Unicode text"),
])
def test_a_malformed_middle_line_names_its_line(tmp_path, line, problem):
    path = tmp_path / "h.jsonl"
    good = {"index": 0, "op": 0, "process": "p", "type": "invoke", "f": "commit_txn",
            "time": 1, "value": {}}
    last = {**good, "index": 2, "type": "ok", "time": 3}
    path.write_text("\n".join([json.dumps(good), line, json.dumps(last)]) + "\n")
    for read in (read_events, events_table):
        with pytest.raises(HistoryError, match=rf"h\.jsonl:2: .*{problem}") as exc:
            read(path)
        assert "\n" not in str(exc.value)


def test_bytes_that_are_not_utf8_name_their_line(tmp_path):
    """pyarrow's parse passes such bytes into its strings; the fast reader must refuse
    them as the per-line reader does, not fail later converting them."""
    path = tmp_path / "h.jsonl"
    good = {"index": 0, "op": 0, "process": "p", "type": "invoke", "f": "commit_txn",
            "time": 1, "value": {}}
    last = {**good, "index": 2, "type": "ok", "time": 3}
    bad = (b'{"index": 1, "op": 9, "process": "p\xff", "type": "invoke", "f": "send", '
           b'"time": 2}')
    path.write_bytes(b"\n".join([json.dumps(good).encode(), bad, json.dumps(last).encode()])
                     + b"\n")
    for read in (read_events, events_table):
        with pytest.raises(HistoryError, match=r"h\.jsonl:2: not UTF-8 text \(invalid start"):
            read(path)


@pytest.mark.parametrize("where", ["a fault's parameters", "a record's key"])
def test_bytes_that_are_not_utf8_where_no_check_reads_name_their_line(tmp_path, where):
    """The fast reader checks the UTF-8 of the fields it keeps; a fault's parameters and
    a record's key it never keeps. The whole file is UTF-8 JSON or it is refused, by
    both readers, naming the line (a fault's value was parsed later, and crashed)."""
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        w.complete(w.invoke("p", "send", {"records": [{"topic": "t", "partition": 0,
                                                       "key": "KEY", "value": 1}]}), "ok")
        w.fault("kill", {"f": "kill", "node": "NODE"})
    text = path.read_bytes()
    path.write_bytes(text.replace(b"NODE" if where.startswith("a fault") else b"KEY", b"\xff"))
    line = 3 if where.startswith("a fault") else 1
    for read in (read_events, events_table):
        with pytest.raises(HistoryError, match=rf"h\.jsonl:{line}: not UTF-8 text"):
            read(path)
    with pytest.raises(HistoryError, match=rf"h\.jsonl:{line}: not UTF-8 text"):
        check(path)


def test_lone_surrogates_in_free_form_parts_come_out_as_text(tmp_path):
    """A fault's parameters and a record's key are not checked; what is read of them
    for people (reports, plots) must still be text that UTF-8 can hold."""
    path = tmp_path / "h.jsonl"
    lines = [
        '{"index": 0, "op": 0, "process": "p", "type": "invoke", "f": "send", "time": 1, '
        '"value": {"records": [{"topic": "t", "partition": 0, "value": 1, "key": "k\\udc00"}]}}',
        '{"index": 1, "op": 1, "process": "nemesis", "type": "invoke", "f": "kill", "time": 2, '
        '"value": {"node": "n\\ud800", "x\\ud800": [1, "\\udfff"]}}',
    ]
    path.write_text("\n".join(lines) + "\n")
    assert events_table(path).num_rows == 2  # the fast reader accepts it (no fallback)
    faults = access.nemesis_values(path)
    assert faults == {1: {"node": "n\\ud800", "x\\ud800": [1, "\\udfff"]}}
    sent = access.values_at(path, [0])[0]
    assert sent["records"][0]["key"] == "k\\udc00"
    json.dumps([faults, sent], ensure_ascii=False).encode("utf-8")  # text, every string


def test_two_events_on_one_line_name_it_and_blank_lines_are_skipped(tmp_path, monkeypatch):
    """pyarrow's parse reads events with no newline between them as two; the fast reader
    must refuse their line as the per-line reader does, and still read a file with
    blank lines itself."""
    events = [{"index": i, "op": i // 2, "process": "p", "type": t, "f": "commit_txn",
               "time": i, "value": {}} for i, t in enumerate(["invoke", "ok"] * 2)]
    lines = [json.dumps(e) for e in events]
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join([lines[0], lines[1] + " " + lines[2], lines[3]]) + "\n")
    for read in (read_events, events_table):
        with pytest.raises(HistoryError, match=r"h\.jsonl:2: not valid JSON \(Extra data\)"):
            read(path)
    handed = _per_line_reads(monkeypatch)
    path.write_text("\n".join([lines[0], "", lines[1], "  \t", lines[2], " " * 12, lines[3]])
                    + "\n\n")
    assert events_table(path).column("index").to_pylist() == [0, 1, 2, 3]
    assert handed == []


@pytest.mark.parametrize("blank", ["", "  \t", " " * 12])
@pytest.mark.parametrize("parts", [1, 2])
def test_a_blank_line_does_not_hide_a_line_of_two_events(tmp_path, monkeypatch, blank, parts):
    """Lines counted against events: a blank line (empty, or only whitespace of any
    length) beside a line of two events makes as many lines as events, and the fast
    reader must still refuse that line, in whichever part of the file each falls."""
    monkeypatch.setattr(parse, "PARTS", parts)
    monkeypatch.setattr(parse, "BLOCK", 256)
    events = [{"index": i, "op": i // 2, "process": "p", "type": t, "f": "commit_txn",
               "time": i, "value": {}} for i, t in enumerate(["invoke", "ok"] * 8)]
    lines = [json.dumps(e) for e in events]
    lines[3:5] = [lines[3] + " " + lines[4]]
    lines.insert(12, blank)
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert sum(1 for line in lines if line.strip()) == len(events) - 1
    for read in (read_events, events_table):
        with pytest.raises(HistoryError, match=r"h\.jsonl:4: not valid JSON \(Extra data\)"):
            read(path)


def test_line_starts_skip_blank_lines_of_any_length_in_any_chunk(monkeypatch):
    text = b'{"a":1}\n\n   \n{"b":2}\n' + b" " * 20 + b'\n\t{"c":3}\n{"d":4}'
    expected = [i for i, line in enumerate(text.split(b"\n")) if line.strip()]
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == ord("\n")]
    for chunk in (1, 2, 3, 7, 8, 64):
        monkeypatch.setattr(lines, "_CHUNK", chunk)
        got = lines.line_starts(text, len(text)).tolist()
        assert got == [starts[i] for i in expected], chunk


def test_a_second_completion_names_its_line(tmp_path):
    path = tmp_path / "h.jsonl"
    events = [{"index": i, "op": 0, "process": "p", "type": t, "f": "commit_txn", "time": i}
              for i, t in enumerate(["invoke", "ok", "info"])]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    for read in (read_events, events_table):
        with pytest.raises(HistoryError, match=r"h\.jsonl:3: op 0 completed twice"):
            read(path)


@pytest.mark.parametrize("ids", [(-3, -2), (5, 10**15)], ids=["dense", "spread"])
def test_the_rules_between_events_hold_for_op_ids_near_or_far_apart(tmp_path, ids):
    """Op ids near each other are numbered by their span, others hashed
    (rules._op_codes): either way, one op's events are found together."""
    a, b = ids
    path = tmp_path / "h.jsonl"
    events = [(a, "invoke"), (a, "ok"), (b, "invoke"), (b, "ok")]
    path.write_text("".join(json.dumps({"index": i, "op": op, "process": "p", "type": t,
                                        "f": "commit_txn", "time": i}) + "\n"
                            for i, (op, t) in enumerate(events)))
    assert events_table(path).num_rows == 4
    with path.open("a") as out:  # op a again, after b
        out.write(json.dumps({"index": 4, "op": a, "process": "q", "type": "invoke",
                              "f": "commit_txn", "time": 4}) + "\n")
    for read in (read_events, events_table):
        with pytest.raises(HistoryError, match=rf"h\.jsonl:5: op {a} invoked twice "
                                               r"\(first on line 1\)"):
            read(path)


def test_missing_file_is_a_history_error(tmp_path):
    with pytest.raises(HistoryError, match="no such history file"):
        events_table(tmp_path / "absent.jsonl")


def test_fast_parser_and_reader_agree(tmp_path):
    path = _write_sample(tmp_path / "h.jsonl")
    table = events_table(path)
    events = read_events(path)
    assert table.column("op").to_pylist() == [e["op"] for e in events]
    assert table.column("final").to_pylist() == [e.get("final") for e in events]


def _per_line_reads(monkeypatch) -> list[str]:
    """The files the fast reader hands to the per-line reader, from now on."""
    handed: list[str] = []
    per_line = readers.read_events

    def spied(path):
        handed.append(str(path))
        return per_line(path)
    monkeypatch.setattr(readers, "read_events", spied)
    return handed


def test_a_records_key_is_not_read_whatever_its_json(tmp_path, monkeypatch):
    """No check reads keys, so the fast reader skips them: a key of any JSON value is
    accepted by it (no fallback to the per-line reader) and kept in no table."""
    handed = _per_line_reads(monkeypatch)
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        for v, key in enumerate(["k", 7, {"a": [1]}, None], start=1):
            op = w.invoke("p0", "send", {"records": [{"topic": "t", "partition": 0,
                                                      "key": key, "value": v}]})
            w.ok(op, {"records": [{"topic": "t", "partition": 0, "key": key, "value": v,
                                   "offset": v - 1}]})
    assert events_table(path).num_rows == 8
    assert handed == []
    tables, _ = tables_of(path)
    assert "key" not in tables["writes"].column_names
    assert tables["writes"].column("value").to_pylist() == [1, 2, 3, 4]


def test_a_faults_free_form_value_falls_back_to_the_reader(tmp_path, monkeypatch):
    """A fault's value is free-form: a field that EVENT types otherwise (a list of
    records as a string) fails the fast parse, and the per-line reader accepts it."""
    handed = _per_line_reads(monkeypatch)
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        w.fault("partition", {"records": "n1|n2,n3", "timeout_ms": "soon"})
        op = w.invoke("p0", "send", {"records": [{"topic": "t", "partition": 0, "value": 1}]})
        w.ok(op, {"records": [{"topic": "t", "partition": 0, "value": 1, "offset": 0}]})
    table = events_table(path)
    assert handed == [str(path)]
    assert table.column("process").to_pylist()[0] == "nemesis"
    assert table.num_rows == 4


def test_invoke_without_completion_counts_as_info(tmp_path):
    path = _write_sample(tmp_path / "h.jsonl")
    ops = tables_of(path)[0]["ops"].to_pandas()
    last = ops[ops["op"] == 3].iloc[0]
    assert last["type"] == "info"
    assert pd.isna(last["complete_index"]) and pd.isna(last["complete_time"])


def test_transaction_outcomes_follow_the_documented_rules(tmp_path):
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        def op(proc, f, txn, type="ok"):
            o = w.invoke(proc, f, {}, txn=txn)
            w.complete(o, type, {}, None if type == "ok" else "err")
        op("p", "begin_txn", "ok")
        op("p", "commit_txn", "ok")
        op("p", "begin_txn", "refused")
        op("p", "commit_txn", "refused", "fail")
        op("p", "begin_txn", "maybe")
        op("p", "commit_txn", "maybe", "info")
        op("p", "begin_txn", "maybe-then-abort")
        op("p", "commit_txn", "maybe-then-abort", "info")
        op("p", "abort_txn", "maybe-then-abort")
        op("p", "begin_txn", "aborted")
        op("p", "abort_txn", "aborted", "info")
        op("p", "begin_txn", "abandoned")
    txns = tables_of(path)[0]["txns"].to_pandas().set_index("txn")["outcome"].to_dict()
    assert txns == {"ok": "committed", "refused": "aborted", "maybe": "unknown",
                    "maybe-then-abort": "unknown", "aborted": "aborted",
                    "abandoned": "aborted"}


def test_write_statuses(tmp_path):
    from tests.histories import History
    with History(tmp_path / "h.jsonl") as h:
        h.send("p0", [(0, 1, 0)])
        h.send("p0", [(0, 2)], type="fail")
        h.send("p0", [(0, 3)], type="info")
        h.txn("p1", "A", [(0, 4, 1)])
        h.txn("p1", "B", [(0, 5, 2)], outcome="abort")
        h.txn("p1", "C", [(0, 6, 3)], outcome="info")
    writes = tables_of(h.path)[0]["writes"].to_pandas().set_index("value")
    assert writes["status"].to_dict() == {1: "committed", 2: "failed", 3: "unknown",
                                          4: "committed", 5: "aborted", 6: "unknown"}
    assert writes.loc[1, "offset"] == 0 and writes.loc[4, "txn_outcome"] == "committed"


def test_a_value_written_twice_is_refused(tmp_path):
    from tests.histories import History
    with History(tmp_path / "h.jsonl") as h:
        h.send("p0", [(0, 1, 0)])
        h.send("p1", [(0, 1, 1)])
    with pytest.raises(HistoryError, match="value 1 is written by ops 0 and 1"):
        tables_of(h.path)


def test_a_txn_name_of_two_transactions_is_refused(tmp_path):
    # Judged as one, the committed transaction's outcome would be the other's too.
    from tests.histories import History
    with History(tmp_path / "two.jsonl") as h:
        h.txn("p0", "T", [(0, 1, 0)])
        h.txn("p1", "T", [(0, 2, 1)], outcome="abort")
    with pytest.raises(HistoryError, match=r"txn 'T' has ops of p0 \(op 0\) and of p1 \(op 3\); "
                                           "a txn names one transaction of one process"):
        tables_of(h.path)
    with History(tmp_path / "again.jsonl") as h:
        h.txn("p0", "T", [(0, 1, 0)])
        h.txn("p0", "T", [(0, 2, 1)], outcome="abort")
    with pytest.raises(HistoryError, match=r"txn 'T' is begun by ops 0 and 3"):
        tables_of(h.path)


def test_reads_carry_their_writer(tmp_path):
    from tests.histories import History
    with History(tmp_path / "h.jsonl") as h:
        h.txn("p1", "A", [(0, 4, 0)])
        h.poll("c0", [(0, 0, 4), (0, 1, 77)])
    reads = tables_of(h.path)[0]["reads"].to_pandas().set_index("value")
    assert reads.loc[4, "w_found"] and reads.loc[4, "w_txn"] == "A"
    assert reads.loc[4, "w_status"] == "committed"
    assert not reads.loc[77, "w_found"]


def test_warnings_do_not_leak_from_a_clean_history(tmp_path):
    path = _write_sample(tmp_path / "h.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tables_of(path)


def test_a_big_file_parsed_in_parts_converts_as_in_one(tmp_path, monkeypatch):
    # Parts are cut at line ends, parsed by threads of their own, and put back in file
    # order: every table comes out as from one pass over the file.
    from tests.support.synth.clients import Shape, synthesize_file
    path = tmp_path / "h.jsonl"
    synthesize_file(path, 3, Shape(ops=3000))
    monkeypatch.setattr(parse, "BLOCK", 64 << 10)

    def slow_path(path):
        raise AssertionError("the fast reader handed the file to the per-line one")
    monkeypatch.setattr(readers, "read_events", slow_path)
    tables = {}
    for parts in (1, 3):
        monkeypatch.setattr(parse, "PARTS", parts)
        tables[parts], stats = tables_of(path)
        assert stats["reads"] > 0 and stats["writes"] > 0
    assert path.stat().st_size > 6 * parse.BLOCK  # so three parts were made
    for name, table in tables[1].items():
        assert table.equals(tables[3][name]), name


def test_a_bad_line_in_a_later_part_is_named(tmp_path, monkeypatch):
    from tests.support.synth.clients import Shape, synthesize_file
    path = tmp_path / "h.jsonl"
    synthesize_file(path, 3, Shape(ops=3000))
    lines = path.read_text().splitlines(keepends=True)
    bad = len(lines) - 10
    lines[bad] = '{"index": 12, "op": \n'
    path.write_text("".join(lines))
    monkeypatch.setattr(parse, "BLOCK", 64 << 10)
    monkeypatch.setattr(parse, "PARTS", 3)
    with pytest.raises(HistoryError, match=rf"h\.jsonl:{bad + 1}: "):
        tables_of(path)


def test_the_needle_is_found_across_reads(tmp_path):
    # pyarrow reads a part in blocks; a fault's "nemesis" may straddle two of them.
    import io

    text = b'{"a":1}\n{"process":"nemesis"}\n{"process":"nemesis","x":"nemesis"}\n'
    for size in (1, 3, 4, 7, 64):
        hits: list[int] = []
        scanned = parse._Scanned(io.BytesIO(b"xx" + text), 2, len(text), hits)
        scanned.fh.seek(2)
        while scanned.read(size):
            pass
        expected = [i + 2 for i in range(len(text)) if text.startswith(b'"nemesis"', i)]
        assert sorted(hits) == expected, size


def test_fault_lines_found_while_parsing_give_every_fault(tmp_path, monkeypatch):
    # The fast reader notes where fault lines are; reading only those lines gives the
    # same parameters as searching the whole file.
    from onceproof.checkers.extract import Extract
    from onceproof.checkers.spool import Partitions, PollSpool
    from tests.support.synth.clients import Shape, synthesize_file
    path = tmp_path / "h.jsonl"
    synthesize_file(path, 3, Shape(ops=3000))
    monkeypatch.setattr(parse, "BLOCK", 64 << 10)
    monkeypatch.setattr(parse, "PARTS", 3)
    sink = Extract(PollSpool(tmp_path, Partitions()))
    events_table(path, sink=sink)
    assert sink.fault_lines is not None
    everything = access.nemesis_values(path)
    assert len(everything) > 10
    assert access.nemesis_values(path, sink.fault_lines) == everything


def test_a_line_longer_than_a_block_is_parsed_with_larger_blocks(tmp_path, monkeypatch):
    # A poll of many records is one long line; pyarrow needs whole lines in a block, so
    # the fast reader starts again with larger blocks rather than give up on the file.
    path = tmp_path / "h.jsonl"
    records = [{"topic": "t", "partition": 0, "value": v, "offset": v} for v in range(300)]
    with HistoryWriter(path) as w:
        op = w.invoke("p0", "send", {"records": [{k: r[k] for k in ("topic", "partition",
                                                                    "value")}
                                                 for r in records]})
        w.ok(op, {"records": records})
        op = w.invoke("c0", "poll", {"isolation": "read_committed"})
        w.ok(op, {"records": records})
    expected, _ = tables_of(path)
    longest = max(len(line) for line in path.read_bytes().splitlines())
    monkeypatch.setattr(parse, "BLOCK", 2048)
    assert longest > 4 * parse.BLOCK

    def slow_path(path):
        raise AssertionError("the fast reader handed the file to the per-line one")
    monkeypatch.setattr(readers, "read_events", slow_path)
    tables, stats = tables_of(path)
    assert stats["reads"] == 300 and stats["writes"] == 300
    for name, table in expected.items():
        assert table.equals(tables[name]), name


# The readers' agreement, from events of every kind with one JSON value somewhere in
# them replaced by another: each reader refuses with the same one line, or both read
# the same table (the fast one's handoff included), and neither fails otherwise.
# A cheap property (milliseconds an example), so more examples than the profiles'.
_NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"
_AGREE_EXAMPLES = 1000 if _NIGHTLY else 150
_R = {"topic": "t", "partition": 0, "value": 1}
_AGREE_BASE = [
    {"process": "p", "type": "invoke", "f": "send", "txn": "p/1",
     "value": {"records": [{**_R, "key": "k"}], "tid": "tx"}},
    {"process": "p", "type": "ok", "f": "send", "txn": "p/1",
     "value": {"records": [{**_R, "offset": 0, "source": 7}]}},
    {"process": "c", "type": "invoke", "f": "assign",
     "value": {"partitions": [{"topic": "t", "partition": 0}], "kept": []}},
    {"process": "c", "type": "ok", "f": "assign", "value": {
        "partitions": [{"topic": "t", "partition": 0, "offset": 0}],
        "kept": [{"topic": "t", "partition": 0}]}},
    {"process": "c", "type": "invoke", "f": "poll",
     "value": {"isolation": "read_committed", "timeout_ms": 100}, "final": True},
    {"process": "c", "type": "ok", "f": "poll", "final": True,
     "value": {"records": [{**_R, "offset": 0}], "positions": [{"topic": "t", "partition": 0, "offset": 1}]}},
    {"process": "g", "type": "invoke", "f": "commit_offsets", "value": {"group": "g",
     "offsets": [{"topic": "t", "partition": 0, "offset": 1}]}},
    {"process": "g", "type": "fail", "f": "commit_offsets", "error": "timed out", "value": {}},
    {"process": "w", "type": "invoke", "f": "watermarks", "value": {}},
    {"process": "w", "type": "ok", "f": "watermarks", "value": {"partitions": [
        {"topic": "t", "partition": 0, "low": 0, "high": 1, "lso": 1}]}},
    {"process": "nemesis", "type": "invoke", "f": "kill", "value": {"node": 2}},
    {"process": "nemesis", "type": "info", "f": "kill", "value": {"node": 2}},
]
_OPS = [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
_SCALARS = (st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats()
            | st.sampled_from(["", "t", "p", "ok", "read_committed", "\ud800", "a\udfffb"])
            | st.text(max_size=3))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(
    st.sampled_from(["topic", "partition", "value", "offset", "records", "x", "\ud800"]),
    inner, max_size=2), max_leaves=4)


def _paths(x, at=()):
    """Every place in parsed JSON a value may be put: each existing one, and a new key
    in each object."""
    if isinstance(x, dict):
        yield (*at, "new")
        for k, v in x.items():
            yield (*at, k)
            yield from _paths(v, (*at, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield (*at, i)
            yield from _paths(v, (*at, i))


def _put(x, path, value):
    for step in path[:-1]:
        x = x[step]
    # A new key is "key": a record's, which no check reads, or a field EVENT does not name.
    x["key" if path[-1] == "new" else path[-1]] = value


def _outcome(read, path):
    try:
        got = read(path)
    except HistoryError as exc:
        return "refused", str(exc)
    rows = (got if isinstance(got, pa.Table) else readers._from_events(got)).to_pylist()
    # What the checks read of an event's value (extract.py): a fault's is not read, and
    # a value that is null or holds no field EVENT names is the same nothing.
    for row in rows:
        value = row["value"]
        if row["process"] == NEMESIS or not value or all(
                v is None for v in value.values()):
            row["value"] = None
    return "read", rows


def _changed_history(data, folder):
    """The base history with one JSON value somewhere in one event replaced."""
    events = [{"index": i, "op": op, "time": 10 * i, **json.loads(json.dumps(e))}
              for i, (op, e) in enumerate(zip(_OPS, _AGREE_BASE))]
    row = data.draw(st.integers(0, len(events) - 1), label="event")
    where = data.draw(st.sampled_from(list(_paths(events[row]))), label="path")
    _put(events[row], where, data.draw(_JSON, label="value"))
    path = folder / "h.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@settings(max_examples=_AGREE_EXAMPLES, deadline=None)
@given(data=st.data())
def test_both_readers_agree_on_any_one_value_changed(tmp_path_factory, data):
    path = _changed_history(data, tmp_path_factory.mktemp("agree"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast, per_line = _outcome(events_table, path), _outcome(read_events, path)
    event(per_line[0])
    assert fast == per_line


@settings(max_examples=300 if _NIGHTLY else 25, deadline=None)
@given(data=st.data())
def test_a_history_the_readers_accept_is_checked_or_refused_in_one_line(tmp_path_factory, data):
    """Whatever a history holds, the check gives a verdict or refuses it with one line
    naming the problem (a record without its topic once failed inside a checker)."""
    path = _changed_history(data, tmp_path_factory.mktemp("whole"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            verdict = check(path, local=True)
        except HistoryError as exc:
            event("refused")
            assert "\n" not in str(exc)
            return
    event("checked")
    assert verdict.summary()
    json.dumps(verdict.to_dict())


@pytest.mark.parametrize("manifest", [
    "not json", "[]", json.dumps({"format": FORMAT - 1, "stats": {"evidence": {"writes": 1}}}),
    json.dumps({"format": FORMAT, "stats": {"writes": 1}}),
], ids=["not JSON", "not an object", "an older format", "no evidence"])
def test_a_converted_folder_whose_manifest_cannot_be_trusted_is_refused(tmp_path, manifest):
    """A converted folder's stats decide whether it holds evidence: one from another
    version of the converter (format 5 counted a send that ended in info; format 6's ops
    hold no transaction timeouts), or a
    manifest that is damaged, is one line that says to convert again."""
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        w.complete(w.invoke("p", "send", {"records": [{"topic": "t", "partition": 0,
                                                       "value": 1}]}), "info")
    folder = convert(path, tmp_path / "tables")
    assert check(folder).unknown
    (folder / "manifest.json").write_text(manifest)
    with pytest.raises(HistoryError, match="convert the JSONL"):
        check(folder)


def test_what_a_check_would_misread_is_refused_naming_the_op(tmp_path):
    """An ok that lists fewer records than its send asked to write, a watermarks op
    that names a partition twice, a poll of an isolation Kafka does not have: each
    would be judged as something it is not (records never sent, one of two high
    watermarks, a read_uncommitted read)."""
    from tests.histories import History
    rec = {"topic": "t", "partition": 0, "key": None}
    cases = {
        "short": (lambda h: h.complete(h.invoke("p", "send", {"records": [
            {**rec, "value": 1}, {**rec, "value": 2}]}), "ok",
            {"records": [{**rec, "value": 1, "offset": 0}]}),
            r"the ok of send op 0 lists 1 records, its invoke 2"),
        "twice": (lambda h: h.watermarks("final", [(0, 0, 3, 3), (0, 0, 2, 2)]),
                  r"watermarks op 0 names t/0 twice"),
        "isolation": (lambda h: h.poll("c", [], isolation="serializable"),
                      r"poll op 0 has isolation 'serializable'; it is read_committed or "
                      "read_uncommitted"),
    }
    for name, (write, problem) in cases.items():
        with History(tmp_path / f"{name}.jsonl") as h:
            write(h)
        with pytest.raises(HistoryError, match=problem):
            tables_of(h.path)


def test_the_format_doc_lists_every_op_kind_and_value_column():
    """docs/history.md's op kinds table has a row for each kind the reader takes
    (OP_KINDS) and none other, and its ops table names each field of a value that the
    ops table keeps (VALUE_SCALARS): the doc a history from elsewhere is written to."""
    from pathlib import Path

    from onceproof.history.format import OP_KINDS
    from onceproof.history.schema import VALUE_SCALARS
    doc = (Path(__file__).resolve().parent.parent / "docs" / "history.md").read_text()
    table = doc.split("## Operation kinds", 1)[1].lstrip().split("\n\n", 1)[0].splitlines()
    rows = [line.split("|")[1].strip().strip("`") for line in table if line.startswith("| `")]
    assert rows[0] == "f" and rows[1:] == list(OP_KINDS)
    ops_row = next(line for line in doc.splitlines() if line.startswith("| `ops` |"))
    assert all(f" {name}" in ops_row for name in VALUE_SCALARS), ops_row
