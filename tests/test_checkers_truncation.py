"""A regression found on the real cluster (acks1_leader_loss): an isolated leader
acknowledged writes with acks=1, was truncated when it rejoined, and the final reads found
the partition empty. The watermarks alone show the loss, on either engine."""
from __future__ import annotations

import pytest

from onceproof.checkers import check
from onceproof.history.writer import HistoryWriter


def _history(path, high: int):
    t0 = {"topic": "t", "partition": 0}
    with HistoryWriter(path) as w:
        for v in (1, 2, 3):
            op = w.invoke("p0", "send", {"records": [{**t0, "key": "p0", "value": v}]})
            w.ok(op, {"records": [{**t0, "key": "p0", "value": v, "offset": v - 1}]})
        op = w.invoke("final", "assign", {"partitions": [{"topic": "t", "partition": 0}]}, final=True)
        w.ok(op, {"partitions": [{"topic": "t", "partition": 0}]})
        op = w.invoke("final", "seek", {"positions": [{**t0, "offset": 0}]}, final=True)
        w.ok(op, {"positions": [{"topic": "t", "partition": 0, "offset": 0}]})
        op = w.invoke("final", "poll", {"isolation": "read_committed"}, final=True)
        records = [{"topic": "t", "partition": 0, "offset": v - 1, "key": "p0", "value": v}
                   for v in (1, 2, 3) if v <= high]
        w.ok(op, {"isolation": "read_committed", "records": records})
        op = w.invoke("final", "watermarks", {}, final=True)
        w.ok(op, {"partitions": [{"topic": "t", "partition": 0, "low": 0, "high": high, "lso": high}]})
    return path


@pytest.fixture(params=["local", "spark"])
def on(request):
    """check()'s keywords for each engine: in this machine's processes, and on the
    session's SparkSession (started only for this one)."""
    if request.param == "local":
        return {}
    return {"spark": request.getfixturevalue("spark"), "local": False}


def test_acknowledged_writes_past_an_empty_final_log_are_unseen(tmp_path, on):
    verdict = check(_history(tmp_path / "h.jsonl", high=0), **on)
    assert verdict.stats["engine"] == ("spark" if on else "local")
    assert not verdict.valid
    assert verdict.counts.get("unseen") == 3
    assert sorted(e["value"] for e in verdict.examples["unseen"]) == [1, 2, 3]


def test_the_same_writes_read_back_are_fine(tmp_path, on):
    verdict = check(_history(tmp_path / "h.jsonl", high=3), **on)
    assert verdict.stats["engine"] == ("spark" if on else "local")
    assert verdict.valid, verdict.counts
