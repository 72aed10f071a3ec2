"""The Spark path: every anomaly type in one history, checked on Spark and locally,
with the same anomalies found both ways; Parquet input; the CLI's exit codes.

The history (the kitchen sink) is hand-written scenes, one or a few types each, and,
for every type they do not show (one added since), its synthesized scenario
(tests/support/synth/scenarios.py): a new type needs no edit here to be held to the
same rows on both engines."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from onceproof.checkers import Verdict, arrow, check, cycles, engine, flatten, forked, registry, spool
from onceproof.checkers.registry import TYPES
from onceproof.checkers.store import Tables, convert, convert_each, read_parquet
from onceproof.checkers.streams import packed
from onceproof.checkers.tables import SCHEMAS
from onceproof.checkers.verdict import FAMILIES
from onceproof.cli import main
from tests.histories import RU, History, assert_witnessed
from tests.support.synth import scenarios

# The types the hand-written scenes of kitchen_sink show. The sink plays the synthesized
# scenario of every other type.
SCENES_SHOW = frozenset({
    "duplicate", "inconsistent_offset", "unattributed_read", "corrupt_value", "lost_write",
    "unseen", "hanging_txn", "aborted_read", "precommitted_read", "torn_txn", "poll_skip",
    "nonmonotonic_poll", "rewind_mismatch", "nonmonotonic_send", "commit_order", "g0", "g1c",
    "g_single", "offset_regression", "stale_offset_fetch", "duplicate_output", "lost_input",
    "streams_duplicate_output", "streams_lost_input", "streams_uncommitted_input",
    "wrong_fold", "late_return", "unrecovered_partition", "unreadable_offsets"})


class _Scenes:
    """Scenes of one history, each in its own topic, processes and values."""

    def __init__(self, h: History) -> None:
        self.h, self.names = h, []

    def __call__(self, name: str) -> None:
        h = self.h
        h.topic, h.scope, h.base = name, name + ":", 1000 * (len(self.names) + 1)
        self.names.append(name)

    def play(self, kind: str) -> None:
        """A scene of `kind`'s synthesized scenario, as tests/support/synth/scenarios.py
        `inject` would splice it in: its ops, then its final reads, then a watermarks op
        of its partitions. Its topics are named after it (`x-` and the type: no
        hand-written scene's name begins so); its processes, transactions, groups and
        transactional ids are in its scope."""
        h = self.h
        name = f"x-{kind}"
        self(name)
        played = scenarios.scene(kind, h.base)
        topics = {scenarios.X_TOPIC: name, scenarios.X_OUT: f"{name}-out"}

        def scoped(v, key=None):
            if isinstance(v, dict):
                return {k: scoped(x, k) for k, x in v.items()}
            if isinstance(v, list):
                return [scoped(x, key) for x in v]
            if key in ("topic", "input", "output"):
                return topics.get(v, v)
            return h.scope + v if key in ("group", "tid") else v
        ops = {}
        for ev in played.events + played.final:
            h.skipped += ev.get("late_by", 0)
            if ev["type"] == "invoke":
                ops[ev["op"]] = h.invoke(ev["process"], ev["f"], scoped(ev["value"]),
                                         txn=ev.get("txn"), final=ev.get("final", False))
            else:
                h.complete(ops.pop(ev["op"]), ev["type"], scoped(ev["value"]), ev.get("error"))
        assert not ops, f"{kind}: ops never completed"
        h.skipped += played.settle_ns
        marks = h.invoke("xfinal", "watermarks", {}, final=True)
        h.complete(marks, "ok", {"partitions": scoped(played.marks)})


def played(path, kinds) -> History:
    """A history of the synthesized scenarios of `kinds`, each a scene of its own."""
    h = History(path)
    scenes = _Scenes(h)
    for kind in kinds:
        scenes.play(kind)
    h.close()
    return h


def kitchen_sink(path) -> History:
    """Each anomaly type once, each in its own topic, processes and values: the
    hand-written scenes, then the synthesized scenario of each type they do not show."""
    h = History(path)
    scene = _Scenes(h)

    scene("duplicate")
    h.send("p0", [(0, 1, 0)])
    h.poll("c0", [(0, 0, 1), (0, 1, 1)])
    scene("inconsistent")
    h.send("p0", [(0, 1, 0)])
    h.send("p1", [(0, 2)])
    h.seek("c0", [(0, 0)])
    h.poll("c0", [(0, 0, 2)])
    scene("unattributed")
    h.poll("c0", [(0, 0, 99)])
    scene("lost")
    h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.poll("c0", [(0, 0, 1), (0, 2, 3)])
    scene("unseen")
    h.send("p0", [(0, 1, 0), (0, 2, 1)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2)])
    h.seek("f", [(0, 0)], final=True)
    h.poll("f", [(0, 0, 1)], final=True)
    h.watermarks("f", [(0, 0, 1, 1)])
    scene("hanging")
    h.watermarks("f", [(0, 0, 2, 1)])
    scene("aborted")
    h.txn("p0", "T", [(0, 1, 0)], outcome="abort")
    h.poll("c0", [(0, 0, 1)], isolation=RU)
    scene("precommitted")
    h.begin("p0", "T")
    h.send("p0", [(0, 1, 0)], txn="T")
    h.poll("c0", [(0, 0, 1)])
    h.commit("p0", "T")
    scene("torn")
    h.begin("p0", "T")
    h.send("p0", [(0, 1, 0), (1, 2, 0)], txn="T")
    h.commit("p0", "T", type="info")
    h.send("p1", [(1, 3, 1)])
    h.seek("c0", [(0, 0), (1, 0)])
    h.poll("c0", [(0, 0, 1), (1, 1, 3)])
    scene("skip")
    h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2)])
    h.poll("c0", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    h.poll("c1", [(0, 0, 1), (0, 2, 3)])
    h.poll("c0", [(0, 1, 2)])                      # nonmonotonic
    h.seek("c0", [(0, 1)])
    h.poll("c0", [(0, 2, 3)])                      # rewind_mismatch
    scene("sends")
    h.send("p0", [(0, 1, 5), (0, 2, 3)])
    scene("order")
    h.txn("p1", "T1", [(0, 1, 5)])
    h.txn("p2", "T2", [(0, 2, 3)])
    scene("g0")
    h.begin("p1", "T1")
    h.begin("p2", "T2")
    h.send("p1", [(0, 1, 0)], txn="T1")
    h.send("p2", [(1, 4, 0)], txn="T2")
    h.send("p1", [(1, 3, 1)], txn="T1")
    h.send("p2", [(0, 2, 1)], txn="T2")
    h.commit("p1", "T1")
    h.commit("p2", "T2")
    scene("g1c")
    h.begin("p2", "T2")
    h.send("p2", [(1, 10, 0)], txn="T2")
    h.txn("p1", "T1", [(1, 11, 1), (0, 12, 0)])
    h.poll("p2", [(0, 0, 12)], txn="T2")
    h.commit("p2", "T2")
    scene("gsingle")
    h.send("p9", [(0, 100, 0)])
    h.begin("p2", "T2")
    h.send("p2", [(1, 20, 0)], txn="T2")
    h.begin("p1", "T1")
    h.poll("p1", [(0, 0, 100)], txn="T1")
    h.send("p1", [(1, 10, 1)], txn="T1")
    h.send("p2", [(0, 21, 1)], txn="T2")
    h.commit("p2", "T2")
    h.commit("p1", "T1")
    scene("groups")
    h.commit_offsets("c0", "g", [(0, 5)])
    h.commit_offsets("c0", "g", [(0, 3)])
    h.fetch_offsets("c2", "g", [(0, 5)])
    scene("pipeline")
    h.send("p0", [(0, 1, 0), (0, 2, 1)], topic="pipeline-in")
    for proc, txn, read, out in (("pp", "T1", [(0, 0, 1), (0, 1, 2)], 101),
                                 ("pq", "T2", [(0, 0, 1)], 102)):
        h.begin(proc, txn)
        h.poll(proc, read, txn=txn, topic="pipeline-in")
        h.send(proc, [(0, out)], txn=txn, topic="pipeline-out", sources=[1])
        h.send_offsets(proc, txn, "g", [(0, 2)], topic="pipeline-in")
        h.commit(proc, txn)
    scene("streams")
    # A fold application: of its four committed inputs, the second has two outputs
    # (streams_duplicate_output), the third none though the group committed past it
    # (streams_lost_input), the fourth a wrong count (wrong_fold); one output names a
    # value no input holds (streams_uncommitted_input).
    ins = [1, 2, 3, 4]
    h.streams("sa", "app", "streams-in", "streams-out", topology="fold")
    h.send("p0", [(0, v, i) for i, v in enumerate(ins)], topic="streams-in")
    base = [v + h.base for v in ins]
    outs = [packed(base[0], 1, base[0]), packed(base[1], 2, base[0] + base[1]),
            packed(base[1], 2, base[0] + base[1]), packed(base[3], 9, sum(base)),
            packed(h.base + 99)]
    h.poll("f", [(0, i, v) for i, v in enumerate(ins)], final=True, topic="streams-in")
    h.base = 0  # the outputs' values are packed whole
    h.poll("f", [(0, i, v) for i, v in enumerate(outs)], final=True, topic="streams-out")
    h.streams("sfinal", "app", "streams-in", "streams-out", topology="fold",
              offsets=[(0, len(ins))])
    scene("liveness")
    h.late("pl", "commit_txn", timeout_s=20, took_s=40, type="info")
    scene("unrecovered")
    h.send("p0", [(0, 1, 0)])
    h.watermarks("f", [(0, None, None, None)])
    scene("unreadable")
    fetch = h.invoke("f", "fetch_offsets", {"group": "g", "partitions": [
        {"topic": "t", "partition": 0}]}, final=True)
    h.complete(fetch, "fail", error="Failed to get committed offsets: Local: Timed out")
    scene("corrupt")
    h.send("p0", [(0, 1, 0)])
    h.poll("c0", [(0, 0, 1, 7)])
    for kind in TYPES:
        if kind not in SCENES_SHOW:
            scene.play(kind)
    h.close()
    return h


@pytest.fixture(scope="module")
def sink(tmp_path_factory):
    return kitchen_sink(tmp_path_factory.mktemp("sink") / "h.jsonl").path


def _rows(found: pd.DataFrame) -> list[tuple]:
    return sorted(tuple(tuple((w["op"], w["role"]) for w in x) if isinstance(x, list)
                        else None if pd.isna(x) else x for x in r)
                  for r in found.itertuples(index=False, name=None))


def test_spark_and_local_find_the_same_anomalies_of_every_type(sink, spark, tmp_path):
    tables = read_parquet(convert(sink, tmp_path / "tables"), spark)
    # Fewer tasks than bucket files: a task checks several files, one after another.
    files = len(engine._bucket_files(tables.dir))
    assert engine.partition_pass(tables, FAMILIES).getNumPartitions() < files
    on_spark = engine.collect(tables, FAMILIES, local=False)
    here = engine.collect(tables, FAMILIES, local=True)
    assert set(on_spark["type"]) == set(TYPES)
    # Witnesses too: Spark hands them back through Arrow as the same {op, role} lists.
    assert all(isinstance(w, list) and w for w in on_spark["witnesses"])
    assert _rows(on_spark) == _rows(here)


def test_every_scenario_played_into_one_history_is_found_alike(spark, tmp_path):
    """The synthesized scenario of every type, each a scene of one history (as the
    kitchen sink plays those of types its hand-written scenes do not show): Spark and
    local find every type, with the same rows."""
    path = played(tmp_path / "h.jsonl", TYPES).path
    tables = read_parquet(convert(path, tmp_path / "tables"), spark)
    on_spark = engine.collect(tables, FAMILIES, local=False)
    here = engine.collect(tables, FAMILIES, local=True)
    assert set(on_spark["type"]) == set(TYPES)
    assert all(isinstance(w, list) and w for w in on_spark["witnesses"])
    assert _rows(on_spark) == _rows(here)
    for row in here.to_dict("records"):
        assert_witnessed(row)


def test_rows_cross_the_jvm_packed_in_slices_and_come_back_whole(sink, spark, tmp_path,
                                                                  monkeypatch):
    """The pass's rows travel as Arrow IPC values, a slice of the rows of one name
    each: slices of 2 rows give every name's rows back, in order; and through Spark's
    workers (their own import of the engine, with slices of the default size), the
    anomalies of a local check."""
    tables = read_parquet(convert(sink, tmp_path / "tables"), spark)
    table = pa.concat_tables([engine._bucket_with(f, FAMILIES)
                              for f in engine._bucket_files(tables.dir)])
    named = engine.by_row(table, engine.kept_columns(FAMILIES))
    assert engine.ANOMALY in named and len(named) > 2
    monkeypatch.setattr(engine, "_SLICE", 2)
    slices = {name: list(engine._packed(rows, name)) for name, rows in named.items()}
    assert all(len(slices[name]) == -(-rows.num_rows // 2) for name, rows in named.items())
    # The names' values interleaved, each name's in its order, as tasks' values come.
    packed = [v for values in itertools.zip_longest(*slices.values()) for v in values if v]
    assert all(isinstance(value, bytes) for value in packed)
    back = engine.unpacked(packed)  # told apart and counted, read only when asked
    assert back.keys() == named.keys()
    assert all(back[name].num_rows == rows.num_rows for name, rows in named.items())
    assert all(back[name].table().equals(rows) for name, rows in named.items())
    assert engine.Facts([engine._apart(back)[1]]).of(
        cycles.FACTS).equals(engine.Facts([engine._apart(named)[1]]).of(cycles.FACTS))
    assert engine.unpacked([]) == {}
    on_spark = engine.collect(tables, FAMILIES, local=False)
    assert set(on_spark["type"]) == set(TYPES)
    assert _rows(on_spark) == _rows(engine.collect(tables, FAMILIES, local=True))


def test_a_finisher_gets_its_fact_rows_with_the_columns_it_names(sink, tmp_path):
    """The pass's rows are kept by name (engine.by_row): the anomalies whole, each fact
    row that a finisher reads with only `row` and the columns its FACT_COLUMNS name.
    engine.Facts.of gives a finisher those rows from the facts as they come (one table
    from Spark, one per bucket from local workers): the same rows either way, and of
    each bucket's in its order."""
    tables = read_parquet(convert(sink, tmp_path / "tables"))
    kept = engine.kept_columns(FAMILIES)
    assert kept[cycles.EDGE_FACT] == cycles.FACT_COLUMNS
    raw = [engine._bucket_with(f, FAMILIES) for f in engine._bucket_files(tables.dir)]
    assert len(raw) > 1
    buckets = [engine.by_row(table, kept) for table in raw]
    # As the collect gets them: apart from the anomalies (engine._apart).
    one = engine.Facts([engine._apart(engine.by_row(pa.concat_tables(raw), kept))[1]])
    many = engine.Facts([engine._apart(named)[1] for named in buckets])
    assert any(engine.ANOMALY in named for named in buckets)
    for named in buckets:
        for name, rows in named.items():
            assert set(rows["row"].to_pylist()) == {name}
            # Whole, as anomalies are, where a finisher names no columns (log_values
            # holds anomaly rows back for its finisher).
            whole = name == engine.ANOMALY or kept[name] is None
            assert rows.column_names == (engine.OUT_SCHEMA.names if whole
                                         else ["row", *(kept[name] or ())])
            # A fact's strings coded where it is made (the anomalies' stay strings).
            strings = [f for f in rows.schema if f.type in (pa.string(), arrow.CODED)]
            assert strings and all((f.type == pa.string()) == (name == engine.ANOMALY)
                                   for f in strings)
    cols = cycles.FACT_COLUMNS
    edges = many.of(cycles.FACTS, cols)
    assert len(edges) and set(edges["row"]) == {cycles.EDGE_FACT}
    assert list(edges.columns) == ["row", *cols]
    assert edges.equals(one.of(cycles.FACTS, cols))
    assert edges.equals(many.of(cycles.FACTS))  # all that was kept of them
    assert edges["txn"].dtype == object and edges["txn"].notna().all()
    named = many.of(cycles.FACTS, cols, cycles.FACT_CODED)
    assert isinstance(named["txn"].dtype, pd.CategoricalDtype)
    assert named["txn"].astype(object).equals(edges["txn"])
    assert len(one) == len(many) == sum(len(t) for named in buckets for name, t in named.items()
                                        if name != engine.ANOMALY)


def test_facts_no_finisher_reads_are_dropped_and_anomalies_kept_whole():
    """by_row of rows of three names: the anomaly row with every column, the fact a
    finisher reads with its columns only, and none of a fact no finisher names."""
    table = engine._arrow(pd.DataFrame({"row": [engine.ANOMALY, "read_me", "nobody_reads"],
                                        "txn": ["t0", "t1", "t2"], "op": [1, 2, 3],
                                        "type": ["duplicate", None, None]}))
    named = engine.by_row(table, {"read_me": ("txn",)})
    assert set(named) == {engine.ANOMALY, "read_me"}
    assert named[engine.ANOMALY].equals(table.slice(0, 1))
    assert named["read_me"].to_pylist() == [{"row": "read_me", "txn": "t1"}]
    anomalies, kept = engine._apart(named)
    assert len(anomalies) == 1 and anomalies["type"].tolist() == ["duplicate"]
    facts = engine.Facts([kept])
    assert len(facts) == 1
    assert facts.of(("read_me",), ("txn",))["txn"].tolist() == ["t1"]
    assert list(facts.of(("absent",), ("txn",)).columns) == ["row", "txn"]


def test_a_family_frame_becomes_out_schema_rows_by_one_set_of_rules():
    """engine._arrow makes each family's frame OUT_SCHEMA rows: strings still in a
    Categorical (categories in any order, some missing) from its codes, other strings
    with None, NaN or pd.NA missing, integers given as floats or as Python objects past
    2^53 exactly, columns left out missing, witness lists as they were; conform gives the
    same rows in pandas (nullable integers, witness lists of plain dicts)."""
    words = pd.Index(["t2", "t1", "t0"], dtype=object)
    df = pd.DataFrame({
        "row": ["edge"] * 4,
        "txn": pd.Categorical.from_codes([0, -1, 2, 1], dtype=pd.CategoricalDtype(words)),
        "txn2": pd.Series(["a", None, np.nan, pd.NA], dtype=object),
        "op": [1.0, np.nan, 3.0, 2.0 ** 40],
        "offset": pd.Series([5, None, 7, 2 ** 62 + 1], dtype=object),
        "witnesses": [[{"op": 1, "role": "writer"}], None, [], [{"op": 2, "role": "reader"}]],
        "witness_at": [[{"index": 4, "role": "commit"}], None, [{"txn": "t0", "role": "abort"}],
                       [{"value": 7, "txn": "t1", "role": "input poll"}]],
    })
    ours = engine._arrow(df)
    assert ours.schema == engine.OUT_SCHEMA
    expected = {
        "row": ["edge"] * 4,
        "txn": ["t2", None, "t0", "t1"],
        "txn2": ["a", None, None, None],
        "op": [1, None, 3, 2 ** 40],
        "offset": [5, None, 7, 2 ** 62 + 1],
        "witnesses": [[{"op": 1, "role": "writer"}], None, [], [{"op": 2, "role": "reader"}]],
        "witness_at": [[{"index": 4, "txn": None, "value": None, "role": "commit"}], None,
                       [{"index": None, "txn": "t0", "value": None, "role": "abort"}],
                       [{"index": None, "txn": "t1", "value": 7, "role": "input poll"}]],
    }
    for name, values in expected.items():
        assert ours[name].to_pylist() == values, name
    left_out = [f.name for f in engine.OUT_SCHEMA if f.name not in df]
    assert left_out and all(ours[name].null_count == 4 for name in left_out)

    rows = engine.conform(df)
    assert list(rows.columns) == engine.OUT_SCHEMA.names
    assert all(str(rows[f.name].dtype) == "Int64" for f in engine.OUT_SCHEMA
               if f.type == pa.int64())
    assert rows["offset"].tolist() == [5, pd.NA, 7, 2 ** 62 + 1]
    assert rows["txn2"].tolist() == ["a", None, None, None]
    assert rows["witnesses"].tolist() == expected["witnesses"]
    assert all(type(w) is list for w in rows["witnesses"].dropna())
    assert rows["witness_at"].tolist() == df["witness_at"].tolist()
    assert pa.Table.from_pandas(rows, schema=engine.OUT_SCHEMA,
                                preserve_index=False).equals(ours)
    empty = engine.conform(pd.DataFrame({"row": []}))
    assert list(empty.columns) == engine.OUT_SCHEMA.names and len(empty) == 0
    assert str(empty["op"].dtype) == "Int64"


def test_a_jsonl_checked_as_it_converts_finds_what_its_tables_give(sink, tmp_path, monkeypatch):
    """A local check of a JSONL checks each bucket of steps in a forked worker as the
    converter makes it, and writes no steps: the same anomalies, witnesses included,
    as the check of the history's Parquet tables."""
    tables = read_parquet(convert(sink, tmp_path / "tables"))
    in_one = engine.collect(tables, FAMILIES, local=True)  # too small to fork: all here
    monkeypatch.setattr(forked, "MIN_WORK", 0)  # workers even for a history this small
    stats, rows, removal = convert_each(sink, tmp_path / "each", engine.bucket_rows(FAMILIES))
    removal.join()
    assert len(rows) > 1 and stats["steps"] == tables.stats["steps"]
    assert not (tmp_path / "each" / "steps.parquet").exists()
    # The spool is removed beside the caller's work; joined, it is gone, as a convert's.
    assert not list((tmp_path / "each").glob(".spool-*"))
    assert not list((tmp_path / "tables").glob(".spool-*"))
    fused = engine.collect(Tables(tmp_path / "each", None, stats), FAMILIES, local=True,
                           rows=rows, history=sink)
    assert set(fused["type"]) == set(TYPES)
    assert _rows(fused) == _rows(in_one)
    roles = {w["role"] for ws in fused["witnesses"] for w in ws}
    assert "input poll" in roles  # named from the history, as from the steps
    assert check(sink).counts == check(tmp_path / "tables").counts  # local by default


def test_steps_made_a_slice_at_a_time_are_the_same_steps(sink, tmp_path, monkeypatch):
    """The converter spools the steps' other sources (writes, positions, offsets) by
    partition a slice at a time, and joins a partition's reads, and writes them, a slice
    at a time (its memory is a few slices, not a bucket): slices of 3 rows and of 5 reads
    give the steps, and the anomalies, of slices bigger than any table."""
    whole = read_parquet(convert(sink, tmp_path / "whole"))
    monkeypatch.setattr(flatten, "READ_SLICE", 5)
    monkeypatch.setattr(spool, "SOURCE_SLICE", 3)
    sliced = read_parquet(convert(sink, tmp_path / "sliced"))
    files = sorted((tmp_path / "sliced" / "steps.parquet").glob("*.parquet"))
    groups = sum(pq.ParquetFile(f).num_row_groups for f in files)
    # So the slices were made and written: each slice of a partition is a row group.
    assert groups > sliced.stats["reads"] / 5 + sliced.stats["writes"] / 3
    for name in ("whole", "sliced"):
        assert pq.read_table(tmp_path / name / "steps.parquet").num_rows == whole.stats["steps"]
    for f in files:
        assert pq.read_table(f).equals(pq.read_table(tmp_path / "whole" / "steps.parquet" / f.name))
    assert _rows(engine.collect(sliced, FAMILIES, local=True)) == \
        _rows(engine.collect(whole, FAMILIES, local=True))


def test_a_bucket_read_with_its_dictionaries_is_the_steps_arrow_gives(sink, tmp_path,
                                                                      monkeypatch):
    """The pass reads a bucket's strings as the file's dictionaries (engine.read_steps)
    and makes them Categoricals; the end-to-end check codes the same steps from Arrow's
    strings (engine.steps_frame). Both hold what Arrow's own conversion holds, across
    row groups that each have a dictionary of their own, with one set of categories
    per column."""
    monkeypatch.setattr(spool, "SOURCE_SLICE", 3)
    tables = read_parquet(convert(sink, tmp_path / "tables"))
    files = engine._bucket_files(tables.dir)
    assert any(pq.ParquetFile(f).num_row_groups > 1 for f in files)
    strings = [f.name for f in SCHEMAS["steps"] if f.type == pa.string()]
    for f in files:
        arrows = pq.read_table(f).to_pandas(types_mapper=engine._ARROW_TYPES)
        for ours in (engine.read_steps(f), engine.steps_frame(pq.read_table(f))):
            assert list(ours.columns) == list(arrows.columns)
            for name in strings:
                col = ours[name]
                assert isinstance(col.dtype, pd.CategoricalDtype), name
                assert col.cat.categories.is_unique, name
                plain = col.astype(object).where(col.notna(), None)
                assert plain.tolist() == arrows[name].tolist(), name
            rest = [c for c in arrows.columns if c not in strings]
            assert ours[rest].equals(arrows[rest])
            assert list(ours[rest].dtypes) == list(arrows[rest].dtypes)


@pytest.mark.parametrize("words", [3, 200, 40_000])
def test_a_dictionary_column_is_the_categorical_arrow_makes(words):
    """engine._categorical: chunks with the same dictionary, with dictionaries of their
    own, a chunk all missing, a slice of a chunk, and more categories than 8 or 16-bit
    codes hold, make the values Arrow's own conversion makes."""
    names = [f"s{i}" for i in range(words)]
    same = pa.array(names * 2 + [None]).dictionary_encode()
    other = pa.array(list(reversed(names)) + [None, "new"]).dictionary_encode()
    gone = pa.array([None, None], pa.string()).dictionary_encode()
    for chunks in ([same, same], [same, other, gone], [same.slice(3), other.slice(1, 5)]):
        col = pa.chunked_array(chunks)
        ours = engine._categorical(col)
        assert ours.categories.is_unique
        assert [None if pd.isna(v) else v for v in ours] == col.cast(pa.string()).to_pylist()


def test_a_table_read_with_its_dictionaries_is_what_arrow_gives(sink, tmp_path):
    """Other tables (the ops, for witnesses and liveness) come as Python strings
    (engine.read_frame; liveness its own rows of them, engine.frame_of):
    the same frame as Arrow's own conversion, every string a str or None."""
    tables = read_parquet(convert(sink, tmp_path / "tables"))
    ops, cols = Path(tables.dir) / "ops.parquet", ["process", "op", "txn", "final", "group"]
    some = engine.read_frame(ops, cols)
    assert list(some.columns) == cols and len(some)
    assert some.equals(pq.read_table(ops, columns=cols).to_pandas(
        types_mapper=engine._ARROW_TYPES))
    for name in ("process", "txn", "group"):
        assert {type(v) for v in some[name]} <= {str, type(None)}, name
    # Some rows of the table, as liveness takes them: read as dictionaries or not.
    for table in (engine.read_table(ops, cols), pq.read_table(ops, columns=cols)):
        assert engine.frame_of(table.slice(1, 50)).equals(some.iloc[1:51].reset_index(drop=True))
    empty = tmp_path / "empty.parquet"
    pq.write_table(SCHEMAS["steps"].empty_table(), empty)
    assert engine.read_frame(empty).columns.tolist() == SCHEMAS["steps"].names
    assert engine.read_frame(empty).empty
    assert engine.read_steps(empty).columns.tolist() == SCHEMAS["steps"].names
    assert engine.read_steps(empty).empty


def test_integers_and_booleans_come_out_of_arrow_as_pandas_converts_them():
    """engine._masked copies Arrow's buffers itself: chunks that are slices of a larger
    array (an offset into the buffer), empty chunks, chunks all missing and values
    beyond a float's 53 bits come out as pandas' own conversion gives them."""
    big = 2 ** 62 + 1
    # Twice over, so that a slice begins past the first byte of the validity bits.
    ints = pa.array([1, None, big, -5, None, 7, 0, None] * 2, pa.int64())
    bools = pa.array([True, None, False, True, None, False, True, None] * 2, pa.bool_())
    for whole in (ints, bools):
        col = pa.chunked_array([whole.slice(0, 3), whole.slice(3, 0), whole.slice(3, 4),
                                whole.slice(7, 1), whole.slice(8, 3), whole.slice(11, 5),
                                pa.array([5, 6], pa.int64()).cast(whole.type),
                                _under_a_missing_value(whole.type)], whole.type)
        ours = pd.Series(engine._masked(col))
        theirs = col.to_pandas(types_mapper=engine._ARROW_TYPES)
        assert ours.dtype == theirs.dtype and ours.equals(theirs)
        assert ours.isna().tolist() == [v is None for v in col.to_pylist()]
        # Nothing but zero (False) lies under a missing value.
        assert not ours.array._data[ours.isna().to_numpy()].any()
    assert int(pd.Series(engine._masked(pa.chunked_array([ints])))[2]) == big


def _under_a_missing_value(t: pa.DataType) -> pa.Array:
    """[x, None] whose missing value's slot holds data (Arrow's builders write zeros)."""
    valid = pa.py_buffer(bytes([0b01]))
    data = pa.py_buffer(bytes([0b11]) if t == pa.bool_() else np.array([9, 9]).tobytes())
    return pa.Array.from_buffers(t, 2, [valid, data], null_count=1)


def test_rows_fill_their_witnesses_with_a_severity_their_type_allows(sink, tmp_path):
    """What the registry says of each type's rows (checkers/registry.py) is what the
    families emit, for every type."""
    here = engine.collect(read_parquet(convert(sink, tmp_path / "tables"), None), FAMILIES,
                          local=True)
    for row in here.to_dict("records"):
        a = registry.BY_NAME[row["type"]]
        assert a.allows(row["severity"]), row
        filled = {c for c, v in row.items()
                  if v is not None and (isinstance(v, list) or not pd.isna(v))}
        assert filled <= {"type", "severity", *a.witnesses}, row
        assert_witnessed(row)


def test_tasks_never_split_a_partition(spark, tmp_path):
    """Spark cuts the files it reads into several splits; the pass's tasks must get
    whole bucket files instead, or the per-partition checks would see half
    a log (here: a lost write, a skip and a torn transaction that only a whole
    partition shows)."""
    h = History(tmp_path / "h.jsonl")
    h.send("p0", [(0, 1, 0), (0, 2, 1), (0, 3, 2), (1, 4, 0), (1, 5, 1)])
    h.begin("p1", "T")
    h.send("p1", [(0, 6, 3), (1, 7, 2)], txn="T")
    h.commit("p1", "T")
    h.send("p0", [(1, 8, 3)])
    h.seek("c0", [(0, 0), (1, 0)])
    h.poll("c0", [(0, 0, 1), (0, 2, 3), (0, 3, 6), (1, 0, 4), (1, 1, 5), (1, 3, 8)])
    h.poll("c1", [(0, 0, 1), (0, 1, 2), (0, 3, 6)])
    folder = convert(h.close(), tmp_path / "tables")
    here = engine.collect(read_parquet(folder, spark), FAMILIES, local=True)
    assert {"lost_write", "poll_skip", "torn_txn"} <= set(here["type"])
    files = list((folder / "steps.parquet").glob("*.parquet"))
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes",
                   str(max(f.stat().st_size for f in files) // 3))
    try:
        tables = read_parquet(folder, spark)
        assert tables.steps.rdd.getNumPartitions() > len(files)
        assert engine.partition_pass(tables, FAMILIES).getNumPartitions() == \
            min(len(files), spark.sparkContext.defaultParallelism)
        split = engine.collect(tables, FAMILIES, local=False)
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)
    assert _rows(split) == _rows(here)


def test_a_family_alone_is_a_spark_dataframe(sink, spark, tmp_path):
    from onceproof.checkers import log_values
    tables = read_parquet(convert(sink, tmp_path / "tables"), spark)
    df = log_values.find(tables)
    assert set(df.columns) >= {"type", "severity", "process", "op", "topic", "partition",
                               "offset", "value", "txn", "detail", "witnesses"}
    dup = df.filter(df["type"] == "duplicate").collect()[0]
    assert dup["op"] in {w["op"] for w in dup["witnesses"]}
    assert {r["type"] for r in df.select("type").distinct().collect()} == set(log_values.TYPES)


def test_check_on_spark_and_from_parquet(sink, spark, tmp_path):
    v = check(sink, spark=spark, local=False)
    assert v.stats["engine"] == "spark" and not v.valid
    assert set(v.counts) == set(TYPES)
    assert v.notes == ["g0", "g1c", "g_single"]  # its cycles are all allowed ones
    folder = convert(sink, tmp_path / "tables")
    again = check(folder, local=True)  # a converted folder is input too
    assert again.counts == v.counts and again.stats["engine"] == "local"


def test_verdict_round_trips_through_plain_json(sink):
    v = check(sink, local=True)
    back = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert back == v
    text = v.summary()
    assert text.startswith("INVALID") and "lost_write: 3 (violation)" in text
    assert len(v.examples["duplicate"]) == 1 and v.counts["duplicate"] == 1
    lost = {(x["topic"], x["partition"], x["offset"], x["value"])
            for x in v.examples["lost_write"]}
    # The torn transaction's missing write is lost too: a visible write proved it committed.
    assert lost == {("lost", 0, 1, 4002), ("inconsistent", 0, 0, 2001), ("torn", 1, 0, 9002)}


def test_cli_exit_codes(sink, tmp_path):
    runner = CliRunner()
    bad = runner.invoke(main, ["check", str(sink), "--json", str(tmp_path / "v.json")])
    assert bad.exit_code == 1, bad.output
    assert "INVALID" in bad.output and "lost_write" in bad.output
    assert json.loads((tmp_path / "v.json").read_text())["valid"] is False

    good = History(tmp_path / "good.jsonl")
    good.send("p0", [(0, 1, 0)])
    good.poll("c0", [(0, 0, 1)])
    ok = runner.invoke(main, ["check", str(good.close())])
    assert ok.exit_code == 0, ok.output
    assert "VALID" in ok.output

    missing = runner.invoke(main, ["check", str(tmp_path / "absent.jsonl")])
    assert missing.exit_code == 2
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"index": 0}\n{"index": 1}\n')
    garbled = runner.invoke(main, ["check", str(broken)])
    assert garbled.exit_code == 2
    assert "broken.jsonl:1: missing required field 'op'" in garbled.output
    assert "Traceback" not in garbled.output


def test_spark_workers_are_forked_with_the_checkers_imported(sink, spark):
    """The daemon Spark forks its Python workers from is checkers/spark_daemon.py, and
    it has pyarrow and pandas loaded before any worker is forked: a worker Spark starts
    after another idled out does not import them again."""
    import psutil

    def ours(p) -> bool:  # a process that has exited (a zombie, or gone) is not
        try:
            return "onceproof.checkers.spark_daemon" in p.cmdline()
        except psutil.Error:
            return False
    check(sink, spark=spark, local=False)
    daemons = [p for p in psutil.Process().children(recursive=True)
               if ours(p) and not ours(p.parent())]
    assert len(daemons) == 1, [p.cmdline() for p in daemons]
    maps = Path(f"/proc/{daemons[0].pid}/maps").read_text()
    assert "libarrow" in maps and "pandas" in maps
