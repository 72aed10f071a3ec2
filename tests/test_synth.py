"""Unit tests of the reference model in tests/support/synth/, without Spark.

The audit below re-derives Kafka's rules from the events alone (not from the model's
internals), so a bug in the model shows up as a history that breaks a rule here.
"""
from __future__ import annotations

import collections
import itertools
import json
import random

import pytest

from onceproof.checkers.registry import TYPES
from tests.support.synth.clients import Shape, synthesize, synthesize_file
from tests.support.synth.model import RC, RU, TOPIC_IN
from tests.support.synth.scenarios import SCENARIOS, X_TOPIC, inject

SEEDS = range(8)


def _txn_outcomes(events):
    """txn -> 'committed' | 'aborted' | 'unknown', from the rules in docs/history.md."""
    out = {}
    for ev in events:
        txn = ev.get("txn")
        if txn is None or ev["type"] == "invoke":
            continue
        if ev["f"] == "commit_txn":
            out[txn] = {"ok": "committed", "fail": "aborted", "info": "unknown"}[ev["type"]]
        elif ev["f"] == "abort_txn":
            out[txn] = "aborted"
        else:
            out.setdefault(txn, "aborted")
    return out


def _resolved_outcomes(events):
    """Like _txn_outcomes, with each unknown outcome decided by the final reads (which
    see every committed record): the model knows, and the history must agree."""
    out = _txn_outcomes(events)
    writes = _writes(events)
    final = {writes[r["value"]][0] for ev in _polls(events) if ev.get("final")
             for r in ev["value"]["records"]}
    return {t: ("committed" if t in final else "aborted") if o == "unknown" else o
            for t, o in out.items()}


def _writes(events):
    """value -> (txn, send completion type, offset reported on ok)."""
    writes = {}
    for ev in events:
        if ev["f"] != "send" or ev["type"] == "invoke":
            continue
        for r in ev["value"]["records"]:
            writes[r["value"]] = (ev.get("txn"), ev["type"], r.get("offset"))
    return writes


def _polls(events):
    for ev in events:
        if ev["f"] == "poll" and ev["type"] == "ok":
            yield ev


def _tp(r):
    return (r["topic"], r["partition"])


def _log_from(events):
    """(topic, partition) -> {offset: value}, from every read and every reported offset."""
    log = collections.defaultdict(dict)
    for ev in events:
        if ev["type"] != "ok" or ev["f"] not in ("send", "poll"):
            continue
        for r in ev["value"]["records"]:
            if r.get("offset") is not None:
                assert log[_tp(r)].setdefault(r["offset"], r["value"]) == r["value"], r
    return log


def _audit_structure(events):
    assert [e["index"] for e in events] == list(range(len(events)))
    times = [e["time"] for e in events]
    assert all(a < b for a, b in itertools.pairwise(times))
    pending = {}
    completions = collections.Counter()
    for ev in events:
        if ev["type"] == "invoke":
            assert ev["process"] not in pending, f"{ev['process']} invoked twice at once"
            pending[ev["process"]] = ev["op"]
        else:
            assert pending.pop(ev["process"]) == ev["op"]
            completions[ev["op"]] += 1
    assert not pending
    assert set(completions.values()) == {1}
    sent = [r["value"] for ev in events if ev["f"] == "send" and ev["type"] == "invoke"
            for r in ev["value"]["records"]]
    assert len(sent) == len(set(sent)), "write values must be unique"


@pytest.fixture(scope="module", params=SEEDS)
def history(request):
    return synthesize(request.param, processes=7, ops=400, partitions=2)


def test_structure(history):
    _audit_structure(history)


def test_one_value_per_offset_and_one_offset_per_value(history):
    log = _log_from(history)
    seen = {}
    for tp, offs in log.items():
        for off, v in offs.items():
            assert seen.setdefault(v, (tp, off)) == (tp, off), f"{v} at two places"


def test_read_committed_never_sees_aborted_or_uncommitted(history):
    outcomes = _txn_outcomes(history)
    writes = _writes(history)
    committed_at = {ev["txn"]: ev["index"] for ev in history
                    if ev["f"] == "commit_txn" and ev["type"] in ("ok", "info")}
    for ev in _polls(history):
        for r in ev["value"]["records"]:
            txn = writes[r["value"]][0]
            if txn is None:
                continue
            if ev["value"]["isolation"] == RC:
                assert outcomes[txn] != "aborted", f"read_committed read aborted {r}"
                assert committed_at[txn] < ev["index"], f"read {r} before {txn} committed"


def _ru_aborted_reads(h):
    outcomes, writes = _txn_outcomes(h), _writes(h)
    return sum(1 for ev in _polls(h) if ev["value"]["isolation"] == RU
               for r in ev["value"]["records"]
               if writes[r["value"]][0] and outcomes[writes[r["value"]][0]] == "aborted")


def test_read_uncommitted_sees_aborted_records_only_when_asked_to():
    """The checkers count those reads as aborted_read (the known-bad configuration),
    so valid histories keep read_uncommitted consumers off transactional topics."""
    assert sum(_ru_aborted_reads(synthesize(s, processes=7, ops=400)) for s in SEEDS) == 0
    assert sum(_ru_aborted_reads(synthesize(s, processes=7, ops=400, ru_everywhere=True))
               for s in SEEDS) > 0


def test_polls_are_in_offset_order_and_skip_nothing_visible(history):
    """Per consumer and partition, reads continue where they left off unless a seek or
    an assign moved the position; what they pass over is invisible to them."""
    log = _log_from(history)
    writes = _writes(history)
    outcomes = _resolved_outcomes(history)
    # Visible at the end to each isolation; a read_committed read earlier may only be
    # held back (by the LSO), which shows as a shorter read, never as a skip.
    def visible(tp, off, isolation):
        v = log[tp].get(off)
        if v is None:
            return False
        txn = writes[v][0]
        return isolation == RU or txn is None or outcomes[txn] != "aborted"
    nxt = {}
    for ev in history:
        if ev["type"] != "ok":
            continue
        p = ev["process"]
        if ev["f"] == "seek":
            for pos in ev["value"]["positions"]:
                nxt[(p, _tp(pos))] = pos["offset"]
        elif ev["f"] == "assign":
            for tp in list(nxt):
                if tp[0] == p:
                    del nxt[tp]
        elif ev["f"] == "poll":
            for r in ev["value"]["records"]:
                key = (p, _tp(r))
                if key in nxt:
                    assert r["offset"] >= nxt[key], f"{p} went back: {r}"
                    skipped = [o for o in range(nxt[key], r["offset"])
                               if visible(_tp(r), o, ev["value"]["isolation"])]
                    assert not skipped, f"{p} skipped {skipped} before {r}"
                nxt[key] = r["offset"] + 1


def test_sends_of_a_process_get_increasing_offsets(history):
    last = {}
    for ev in history:
        if ev["f"] == "send" and ev["type"] == "ok":
            for r in ev["value"]["records"]:
                if r["offset"] is None:
                    continue
                key = (ev["process"], _tp(r))
                assert r["offset"] > last.get(key, -1)
                last[key] = r["offset"]


def test_final_reads_see_every_acknowledged_write_and_reach_the_high_watermark(history):
    writes = _writes(history)
    outcomes = _txn_outcomes(history)
    final = {}
    for ev in _polls(history):
        if ev.get("final"):
            for r in ev["value"]["records"]:
                final[r["value"]] = (_tp(r), r["offset"])
    acked = {v for v, (txn, kind, _) in writes.items()
             if (txn is None and kind == "ok") or (txn is not None and outcomes[txn] == "committed")}
    assert acked <= set(final)
    aborted = {v for v, (txn, _, _) in writes.items() if txn is not None and outcomes[txn] == "aborted"}
    assert not aborted & set(final)
    marks = next(ev for ev in history if ev["f"] == "watermarks" and ev["type"] == "ok")
    for m in marks["value"]["partitions"]:
        tp = (m["topic"], m["partition"])
        assert m["lso"] == m["high"], "a transaction was left hanging"
        offs = [o for (t, o) in final.values() if t == tp]
        assert not offs or max(offs) < m["high"]
    # Markers and aborted records leave gaps, which is what the checkers must tolerate.
    gaps = sum(m["high"] - len([1 for (t, _) in final.values() if t == (m["topic"], m["partition"])])
               for m in marks["value"]["partitions"])
    assert gaps > 0


def test_every_committed_input_has_exactly_one_committed_output(history):
    outcomes = _txn_outcomes(history)
    writes = _writes(history)
    final_values = {r["value"] for ev in _polls(history) if ev.get("final")
                    for r in ev["value"]["records"]}
    outputs = collections.Counter()
    for ev in history:
        if ev["f"] == "send" and ev["type"] == "ok" and outcomes.get(ev.get("txn")) == "committed":
            for r in ev["value"]["records"]:
                if "source" in r:
                    outputs[r["source"]] += 1
    for ev in history:  # outputs of commits with unknown outcome count if they are visible
        if ev["f"] == "send" and ev["type"] == "ok" and outcomes.get(ev.get("txn")) == "unknown":
            for r in ev["value"]["records"]:
                if "source" in r and r["value"] in final_values:
                    outputs[r["source"]] += 1
    inputs = {v for v in final_values if v in writes and _in_topic(history, v)}
    assert inputs, "the pipeline had nothing to do"
    assert {v: outputs[v] for v in inputs} == {v: 1 for v in inputs}


def _in_topic(history, value, topic=TOPIC_IN):
    for ev in history:
        if ev["f"] == "send" and ev["type"] == "invoke":
            for r in ev["value"]["records"]:
                if r["value"] == value:
                    return r["topic"] == topic
    return False


def test_committed_group_offsets_only_go_back_after_a_seek(history):
    last = {}
    seeked = set()
    for ev in history:
        if ev["type"] != "ok":
            continue
        if ev["f"] == "seek":
            seeked.update((ev["process"], _tp(p)) for p in ev["value"]["positions"])
        elif ev["f"] == "commit_offsets":
            for o in ev["value"]["offsets"]:
                key = (ev["value"]["group"], _tp(o))
                if o["offset"] < last.get(key, -1):
                    assert (ev["process"], _tp(o)) in seeked
                last[key] = o["offset"]


def test_history_has_the_features_the_checkers_must_tolerate():
    """Over a few seeds the model exercises every op kind and outcome it claims to."""
    seen = collections.Counter()
    for seed in SEEDS:
        for ev in synthesize(seed, processes=7, ops=400):
            seen[(ev["f"], ev["type"])] += 1
    for f in ("send", "commit_txn"):
        for kind in ("ok", "fail", "info"):
            assert seen[(f, kind)], (f, kind)
    for f in ("begin_txn", "abort_txn", "send_offsets", "seek", "assign", "commit_offsets",
              "fetch_offsets", "poll", "watermarks"):
        assert seen[(f, "ok")], f


def test_deterministic_from_the_seed():
    assert synthesize(5, ops=100) == synthesize(5, ops=100)
    assert synthesize(5, ops=100) != synthesize(6, ops=100)


def test_size_follows_the_shape():
    small = synthesize(1, ops=50, processes=3, partitions=1)
    big = synthesize(1, ops=500, processes=9, partitions=4)
    assert len(big) > 5 * len(small)
    assert len({ev["process"] for ev in big}) > len({ev["process"] for ev in small})
    parts = {(r["topic"], r["partition"]) for ev in big if ev["f"] == "send"
             for r in ev["value"]["records"]}
    assert {p for _, p in parts} == {0, 1, 2, 3}


def test_streaming_file_matches_the_list(tmp_path):
    path = tmp_path / "h.jsonl"
    n = synthesize_file(path, 4, Shape(ops=120))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == n
    assert lines == synthesize(4, ops=120)


def test_every_anomaly_type_has_a_scenario():
    """A type added to the registry (checkers/registry.py) needs a scenario that injects
    it, or the property tests cannot hold the checkers to it."""
    assert tuple(SCENARIOS) == TYPES


@pytest.mark.parametrize("kind", TYPES)
def test_injection_keeps_the_history_well_formed(kind):
    base = synthesize(2, ops=150)
    out = inject(base, kind, random.Random(0))
    _audit_structure(out)
    # The base history is untouched apart from the watermarks that now list the scenario's topic.
    kept = [ev for ev in out if not ev["process"].startswith("x")]
    assert [(e["op"], e["process"], e["type"], e["f"]) for e in kept] == \
        [(e["op"], e["process"], e["type"], e["f"]) for e in base]
    marks = next(ev for ev in out if ev["f"] == "watermarks" and ev["type"] == "ok")
    assert any(m["topic"] == X_TOPIC for m in marks["value"]["partitions"])
    assert len(out) > len(base)


def test_injection_is_deterministic_and_rejects_unknown_types():
    base = synthesize(2, ops=60)
    assert inject(base, "duplicate", random.Random(3)) == inject(base, "duplicate", random.Random(3))
    with pytest.raises(ValueError, match="unknown anomaly"):
        inject(base, "nonsense", random.Random(0))


def test_injected_duplicate_is_one_value_at_two_offsets():
    out = inject(synthesize(2, ops=60), "duplicate", random.Random(0))
    final = collections.Counter(r["value"] for ev in _polls(out) if ev.get("final")
                                for r in ev["value"]["records"])
    assert sorted(final.values())[-1] == 2 and sorted(final.values())[-2] == 1


def test_injected_aborted_read_is_read_committed():
    out = inject(synthesize(2, ops=60), "aborted_read", random.Random(0))
    outcomes = _txn_outcomes(out)
    writes = _writes(out)
    bad = [r for ev in _polls(out) if ev["value"]["isolation"] == RC for r in ev["value"]["records"]
           if writes[r["value"]][0] and outcomes[writes[r["value"]][0]] == "aborted"]
    assert len(bad) == 1


def test_whole_txn_reads_take_each_input_transaction_in_one_poll():
    for seed in SEEDS:
        h = synthesize(seed, processes=7, ops=400, whole_txn_reads=True)
        writes = _writes(h)
        by_txn = collections.defaultdict(set)
        for v, (txn, kind, _) in writes.items():
            if txn and not txn.startswith("pipe") and kind == "ok" and _in_topic(h, v):
                by_txn[txn].add(v)
        for ev in _polls(h):
            if ev["process"] != "pipe0":
                continue
            got = {r["value"] for r in ev["value"]["records"]}
            for r in ev["value"]["records"]:
                txn = writes[r["value"]][0]
                if txn:
                    assert by_txn[txn] <= got, f"{ev['op']} took part of {txn}"


def test_without_whole_txn_reads_the_pipeline_can_split_a_transaction():
    """Kafka's read skew: the property needs it to show the checkers tolerate it."""
    split = 0
    for seed in SEEDS:
        h = synthesize(seed, processes=7, ops=400, partitions=3)
        writes = _writes(h)
        by_txn = collections.defaultdict(set)
        for v, (txn, kind, _) in writes.items():
            if txn and not txn.startswith("pipe") and kind == "ok" and _in_topic(h, v):
                by_txn[txn].add(v)
        for ev in _polls(h):
            if ev["process"] == "pipe0":
                got = {r["value"] for r in ev["value"]["records"]}
                split += sum(1 for t, vs in by_txn.items() if vs & got and not vs <= got)
    assert split > 0


@pytest.mark.parametrize("kind", TYPES)
def test_every_anomaly_found_names_its_witnesses(kind, tmp_path):
    """Each type injected into a synthesized history: every anomaly row the checkers emit
    (the injected one and any other) lists its ops as data, its own `op` among them, in
    the roles the registry names for its type. Locally, in pandas; the Spark engine is
    held to the same rows by tests/test_checkers_spark.py."""
    from onceproof.checkers import engine
    from onceproof.checkers.store import convert, read_parquet
    from onceproof.checkers.verdict import FAMILIES
    from tests.histories import assert_witnessed
    from tests.support.synth.clients import write_history

    events = inject(synthesize(2, ops=150), kind, random.Random(0))
    path = write_history(events, tmp_path / "h.jsonl")
    found = engine.collect(read_parquet(convert(path, tmp_path / "tables"), None), FAMILIES,
                           local=True)
    assert kind in set(found["type"])
    for row in found.to_dict("records"):
        assert_witnessed(row)
