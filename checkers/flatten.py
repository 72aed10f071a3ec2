"""History -> flat tables (checkers/tables.py), written as Parquet.

Flattening runs once, vectorized, in Arrow and pandas: records are exploded out of
their ops, each op's invoke is joined to its completion, and what the checkers ask of
every record (its transaction's outcome, checkers/txn_status.py; who wrote a value that
was read) is joined in here. The checks then start from flat tables and never join by
value.

Memory is bounded by the ops, not by the polls' records: those are most of a history
(a poll returns many records, and each becomes a read and a step), so they go to disk
block by block as the JSONL streams in, grouped by partition, and each partition's are
joined only as its bucket of steps is written (checkers/spool.py). The steps' other
sources (writes, positions, offsets, watermarks) go to disk the same way as each table
is made.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from onceproof.history.access import nemesis_values
from onceproof.history.format import (
    ASSIGN,
    FETCH_OFFSETS,
    NEMESIS,
    POLL,
    SEEK,
    SEND_OFFSETS,
    STREAMS,
    HistoryError,
)
from onceproof.history.read import events_table
from onceproof.history.schema import VALUE_SCALARS
from onceproof.memory import give_back, keep_freed, map_large

from . import txn_status
from .arrow import (
    KeyIndex,
    WriteIndex,
    as_types,
    coded,
    compacted,
    concat_frames,
    empty_frame,
    equal_to,
    hashed,
    ints,
    invoke_order,
    null_ints,
    nullable,
    ordered,
    positions_in,
    positions_of_strings,
    take_rows,
    to_arrow,
)
from .extract import Extract
from .partlog import KINDS
from .spool import Partitions, PollSpool, Steps
from .tables import (
    ABORTED,
    COMMITTED,
    FAILED,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    SCHEMAS,
    UNKNOWN,
)


def _evidence(writes: pa.Table, n_reads: int, offsets: pa.Table) -> dict[str, int]:
    """What the claims can be judged on (docs/checkers.md, "Evidence"): records of
    acknowledged sends, records read, and offsets committed or fetched. An op that
    ended in info is no evidence by itself, any more than one that never completed
    (history.md counts that as info): either may or may not have happened, and nothing
    observed it."""
    # Counted in Arrow: as numpy, a status column is millions of Python strings.
    acknowledged = equal_to(writes.column("type"), "ok")
    outcome = offsets.column("outcome")
    # A fetch that found nothing committed (offset null) observed no offset.
    fetched = pc.and_(equal_to(outcome, "fetched"), pc.is_valid(offsets.column("offset")))
    observed = pc.or_(equal_to(outcome, COMMITTED), fetched)
    return {"writes": int(pc.sum(acknowledged).as_py() or 0), "records_read": int(n_reads),
            "offsets": int(pc.sum(observed).as_py() or 0)}


def _ops(events: pa.Table) -> pa.Table:
    """Each op: its invoke joined to its completion (events: extract.SCALARS, in
    index order, so the ops come out in invoke order)."""
    is_invoke = pc.equal(events.column("type"), "invoke")
    inv = events.drop_columns(["type"]).filter(is_invoke)
    # Of a completion, only what an op takes from it is copied.
    taken = ["type", "index", "time", "error", "final", "isolation"]
    done = events.select(["op", *taken]).filter(pc.invert(is_invoke))
    at = positions_in(KeyIndex(ints(done.column("op"))[0]), ints(inv.column("op"))[0])
    d = take_rows(done, at, taken)
    # A poll reports the isolation it used on completion if not on invoke. Kafka's
    # default isolation is read_uncommitted.
    iso = pc.coalesce(inv.column("isolation"), d["isolation"])
    polls = pc.equal(inv.column("f"), POLL)
    iso = pc.if_else(pc.and_(polls, pc.is_null(iso)), READ_UNCOMMITTED, iso)
    cols = {
        "op": inv.column("op"), "process": inv.column("process"), "f": inv.column("f"),
        "type": pc.fill_null(d["type"], "info"), "txn": inv.column("txn"),
        "final": pc.or_(pc.fill_null(inv.column("final"), False),
                        pc.fill_null(d["final"], False)),
        "invoke_index": inv.column("index"), "complete_index": d["index"],
        "invoke_time": inv.column("time"), "complete_time": d["time"],
        "error": pc.coalesce(d["error"], inv.column("error")),
        "n_records": pc.fill_null(inv.column("n_records"), 0),
        **{n: iso if n == "isolation" else inv.column(n) for n in VALUE_SCALARS},
    }
    return pa.table(cols).cast(SCHEMAS["ops"])


def _check_isolations(path, ops_t: pa.Table) -> None:
    """A poll's isolation is one of the two Kafka has: another would be judged as
    read_uncommitted, its reads held to nothing a read_committed one is."""
    iso = ops_t.column("isolation")
    odd = pc.and_(pc.is_valid(iso), pc.invert(pc.is_in(iso, value_set=pa.array(
        [READ_COMMITTED, READ_UNCOMMITTED]))))
    if pc.any(odd).as_py():
        row = ops_t.filter(odd).slice(0, 1).to_pylist()[0]
        raise HistoryError(f"{path}: {row['f']} op {row['op']} has isolation "
                           f"{row['isolation']!r}; it is {READ_COMMITTED} or "
                           f"{READ_UNCOMMITTED} (docs/history.md)")


def _op_frame(ops_t: pa.Table, ops_index: KeyIndex, op, cols: list[str]) -> pd.DataFrame:
    """Columns `cols` of the op of each of `op` (null where there is none), as pandas."""
    at = positions_in(ops_index, np.asarray(op, dtype=np.int64))
    return pa.table(take_rows(ops_t, at, cols)).to_pandas(types_mapper=nullable)


def _in_invoke_order(rec: pa.Table, ops_t: pa.Table,
                     ops_index: KeyIndex) -> tuple[pa.Table, np.ndarray]:
    """Records (op, rec, ...) in the order of the tables made of them (their op's
    invoke_index, then rec), with the row of each one's op in ops_t. Sorted while
    narrow: then `ordered` finds the joined rows in order, and copies no wide table."""
    at = positions_in(ops_index, ints(rec.column("op"))[0])
    inv = np.zeros(len(at), dtype=np.int64)
    if ops_t.num_rows and len(at):
        inv = np.where(at >= 0, ints(ops_t.column("invoke_index"))[0][np.maximum(at, 0)], 0)
    order = invoke_order(inv, ints(rec.column("rec"))[0])
    if order is not None:
        rec, at = rec.take(pa.array(order, type=pa.int64())), at[order]
    return rec, at


def _writes(path, lists: Extract, ops_t, ops_index, txns_t, txns_index) -> pa.Table:
    acked, asked = lists.table("acked"), lists.table("asked")
    _check_acks(path, acked, ops_t, ops_index)
    asked = asked.filter(pc.invert(pc.is_in(asked.column("op"), value_set=acked.column("op"))))
    asked = asked.set_column(asked.schema.get_field_index("offset"), "offset",
                             pa.nulls(asked.num_rows, pa.int64()))
    rec = pa.concat_tables([acked, asked])
    rec, at = _in_invoke_order(rec, ops_t, ops_index)
    cols = {c: rec.column(c) for c in rec.column_names}
    cols.update(take_rows(ops_t, at, [
        "process", "txn", "type", "invoke_index", "complete_index", "invoke_time",
        "complete_time", "final"]))
    txn_status.join_txns(cols, txns_t, txns_index)
    values, valid = ints(rec.column("value"))
    dup = pd.Series(values[valid]).duplicated(keep=False).to_numpy()
    if dup.any():
        v = int(values[valid][dup][0])
        ops = ints(rec.column("op"))[0][valid][values[valid] == v]
        raise HistoryError(f"{path}: value {v} is written by ops {min(ops)} and {max(ops)}; "
                           "values must be unique across the history so a read names its write")
    return ordered(cols, "writes")


def _check_acks(path, acked: pa.Table, ops_t: pa.Table, ops_index: KeyIndex) -> None:
    """A send's ok lists every record its invoke asked to write (with what the client
    learned of each): a record it left out would be judged as never sent. (An invoke
    that lists none leaves them to its ok.)"""
    op = ints(acked.column("op"))[0]
    if not len(op):
        return
    ops, counts = np.unique(op, return_counts=True)
    asked, _ = ints(ops_t.column("n_records").take(pa.array(positions_in(ops_index, ops))))
    short = np.flatnonzero((counts != asked) & (asked > 0))
    if len(short):
        i = short[0]
        raise HistoryError(f"{path}: the ok of send op {ops[i]} lists {counts[i]} records, "
                           f"its invoke {asked[i]}; an ok lists the records its invoke sent, "
                           "each with its offset (docs/history.md)")


# What a read takes of its op (invoke_index orders them too).
_READ_OPS = ["process", "txn", "isolation", "group", "final", "invoke_index", "complete_index"]
# What a read takes of its write.
_READ_WRITES = ["op", "process", "txn", "type", "status", "txn_outcome", "topic", "partition",
                "source", "invoke_index", "complete_index", "txn_commit_invoke_index",
                "txn_commit_complete_index"]
# Reads joined at a time: a joined read is some thirty columns, its record seven, so a
# partition's reads are joined (and written) a slice at a time.
READ_SLICE = 1 << 18


def _reads(r: pa.Table, ops_t, ops_index, txns_t, txns_index,
           written: WriteIndex) -> Iterator[pa.Table]:
    """The reads of a partition's exploded poll records (PollSpool), joined to their
    ops, transactions and writes: in (invoke_index, rec) order, READ_SLICE at a time."""
    r, at = _in_invoke_order(r, ops_t, ops_index)
    for start in range(0, r.num_rows, READ_SLICE):
        part, part_at = r.slice(start, READ_SLICE), at[start:start + READ_SLICE]
        cols = {c: part.column(c) for c in part.column_names if c != "source"}
        cols.update(_taken(ops_t, part_at, _READ_OPS))
        cols.update(_taken(txns_t, positions_of_strings(txns_index, cols["txn"]),
                           ["outcome"], prefix="txn_"))
        idx = written.rows_of(*ints(part.column("value")))
        cols.update(_taken(written.writes, idx, _READ_WRITES, prefix="w_"))
        cols["w_found"] = pa.array(idx >= 0)
        yield ordered(cols, "reads")


def _taken(table: pa.Table, idx: np.ndarray, cols: list[str], prefix: str = "") -> dict:
    """take_rows, with the strings of a coded table (write_tables, for `each`) coded
    by only those the rows use (compacted)."""
    return {name: compacted(col) for name, col in take_rows(table, idx, cols, prefix).items()}


def _positions(path, lists: Extract, polls: PollSpool, ops_t, ops_index) -> pd.DataFrame:
    """Seeks, and resets (assign, or any op of the process ending in info) expanded to
    every partition the process ever read or sought, since a reset makes all its
    positions unknown; except, for an assign, the partitions it says the client `kept`
    (an incremental assignment keeps the positions of partitions that stay) and those
    whose start its ok names (an `offset`: a seek there). An assign that keeps a
    partition it does not assign contradicts itself: refused."""
    # `kept` is the ok's (docs/history.md); a writer may have put it on the invoke.
    kept = concat_frames([lists.table(name).to_pandas(types_mapper=nullable)
                          for name in ("kept", "kept_ok")]).drop_duplicates(
        ["op", "topic", "partition"])
    assigned = lists.table("assigned").select(["op", "topic", "partition"])
    stray = kept.merge(assigned.to_pandas(types_mapper=nullable).assign(_in=True),
                       on=["op", "topic", "partition"], how="left")
    stray = stray[stray["_in"].isna().to_numpy(dtype=bool)]
    if len(stray):
        x = stray.iloc[0]
        raise HistoryError(f"{path}: assign op {x['op']} keeps {x['topic']}/{x['partition']}, "
                           "which it does not assign; `kept` lists partitions that stay "
                           "assigned (docs/history.md)")
    sought = _sought(lists)
    of_op = _op_frame(ops_t, ops_index, sought["op"],
                      ["process", "type", "invoke_index", "complete_index"])
    sought = pd.concat([sought, of_op], axis=1)
    # A seek whose position is not known, or that ended in info (it may or may not
    # have moved the consumer), leaves the position unknown: a reset, caused by a seek,
    # that keeps the offset it asked for (an info seek may have rewound).
    ok = (sought["type"] == "ok").to_numpy(dtype=bool)
    at = sought["offset"].notna().to_numpy(dtype=bool)
    seeks = sought[ok & at].assign(kind="seek", cause="seek")
    lost = sought[(sought["type"] == "info").to_numpy(dtype=bool) | (ok & ~at)].assign(
        kind="reset", cause="seek")
    # An assign that says where the consumer starts in a partition is a seek there.
    started = lists.table("started").select(["op", "topic", "partition", "offset"])
    started = started.filter(pc.is_valid(started.column("offset"))).to_pandas(types_mapper=nullable)
    started = pd.concat([started, _op_frame(ops_t, ops_index, started["op"],
                                            ["process", "invoke_index", "complete_index"])],
                        axis=1).assign(kind="seek", cause="assign")
    touched = concat_frames([_readers(polls, ops_t, ops_index),
                             sought[["process", "topic", "partition"]]]).drop_duplicates()
    f, type_ = ops_t.column("f"), ops_t.column("type")
    is_cause = pc.and_(
        pc.or_(pc.and_(pc.equal(f, ASSIGN), pc.not_equal(type_, "fail")),
               pc.and_(pc.equal(type_, "info"), pc.not_equal(f, SEEK))),
        pc.not_equal(ops_t.column("process"), NEMESIS))
    causes = ops_t.filter(is_cause).select(
        ["op", "process", "f", "invoke_index", "complete_index"]).to_pandas(types_mapper=nullable)
    resets = causes.merge(touched, on="process")
    # A partition kept, or started at a known offset, keeps or gets its position.
    known = pd.concat([kept[["op", "topic", "partition"]], started[["op", "topic", "partition"]]])
    if len(known) and len(resets):
        resets = resets.merge(known.drop_duplicates().assign(_known=True),
                              on=["op", "topic", "partition"], how="left")
        resets = resets[resets["_known"].isna().to_numpy(dtype=bool)]
    resets = resets.assign(kind="reset",
                           cause=np.where(resets["f"] == ASSIGN, "assign", "info"))
    resets["offset"] = null_ints(len(resets))
    cols = list(SCHEMAS["positions"].names)
    out = pd.concat([x[cols] for x in (seeks, started, lost, resets) if len(x)]
                    or [empty_frame("positions")],
                    ignore_index=True)
    return out.sort_values("invoke_index", kind="stable", ignore_index=True)


def _sought(lists: Extract) -> pd.DataFrame:
    """op, rec, topic, partition, offset of each position a seek asked for, as its ok
    resolved it: the ok's positions where it lists some (an offset it leaves null is
    the invoke's for that partition), else the invoke's."""
    asked = lists.table("sought").to_pandas(types_mapper=nullable)
    resolved = lists.table("resolved").to_pandas(types_mapper=nullable)
    if not len(resolved):
        return asked
    key = ["op", "topic", "partition"]
    resolved = resolved.merge(asked[key + ["offset"]].drop_duplicates(key).rename(
        columns={"offset": "_asked"}), on=key, how="left")
    resolved["offset"] = resolved["offset"].fillna(resolved["_asked"])
    rest = asked[~asked["op"].isin(resolved["op"]).to_numpy(dtype=bool)]
    return concat_frames([resolved.drop(columns="_asked"), rest])


def _offset_rows(lists: Extract, ops_t, ops_index) -> dict:
    """The columns of the offsets table that do not hang on the transactions' outcomes
    (made while those are proven)."""
    rows = pa.concat_tables([lists.table("committed"), lists.table("fetched")])
    rows, at = _in_invoke_order(rows, ops_t, ops_index)
    # One chunk per column, not one per parsed block: Steps.add takes from it.
    rows = rows.combine_chunks()
    cols = {c: rows.column(c) for c in rows.column_names}
    cols.update(take_rows(ops_t, at, [
        "process", "f", "type", "group", "txn", "invoke_index", "complete_index"]))
    return cols


def _offsets(cols: dict, txns_t, txns_index) -> pa.Table:
    tx = take_rows(txns_t, positions_of_strings(txns_index, cols["txn"]),
                   ["outcome", "commit_invoke_index", "commit_complete_index"])
    cols["txn_outcome"] = tx["outcome"]

    # In Arrow, not numpy: as numpy, each of these string columns would be millions of
    # Python strings (docs/performance.md, "Figures behind the code").
    ok, fail = equal_to(cols["type"], "ok"), equal_to(cols["type"], "fail")
    sends = equal_to(cols["f"], SEND_OFFSETS)
    cols["outcome"] = pc.case_when(
        pc.make_struct(pc.or_(equal_to(cols["f"], FETCH_OFFSETS), equal_to(cols["f"], STREAMS)),
                       pc.and_(sends, pc.or_(fail, equal_to(tx["outcome"], ABORTED))),
                       pc.and_(sends, pc.and_(ok, equal_to(tx["outcome"], COMMITTED))),
                       sends, ok, fail),
        "fetched", FAILED, COMMITTED, UNKNOWN, COMMITTED, FAILED, UNKNOWN)
    # A commit sent to a transaction takes effect with the transaction's commit.
    cols["effect_invoke_index"] = pc.if_else(sends, tx["commit_invoke_index"],
                                             cols["invoke_index"])
    cols["effect_complete_index"] = pc.if_else(sends, tx["commit_complete_index"],
                                               cols["complete_index"])
    schema = SCHEMAS["offsets"]
    return pa.table({f.name: cols[f.name] for f in schema}).cast(schema)


def _watermarks(path, lists: Extract, ops_t, ops_index) -> pd.DataFrame:
    table = lists.table("watermarks")
    # A watermarks row's `offset` is where the final reads stopped (docs/history.md).
    wm = table.rename_columns(["read_to" if c == "offset" else c for c in table.column_names]
                              ).to_pandas(types_mapper=nullable)
    twice = wm.duplicated(["op", "topic", "partition"]).to_numpy(dtype=bool)
    if twice.any():
        x = wm[twice].iloc[0]
        raise HistoryError(f"{path}: watermarks op {x['op']} names {x['topic']}/"
                           f"{x['partition']} twice; it gives each partition's watermarks once")
    cols = ["process", "invoke_index", "complete_index"]
    return pd.concat([wm, _op_frame(ops_t, ops_index, wm["op"], cols)], axis=1)


# Each kind of step, with the columns of its own table renamed into the steps shape.
_STEP_COLUMNS = {
    "w": {"t_begin": "txn_begin_index", "t_done": "txn_commit_complete_index"},
    "r": {"status": "w_status", "source": "w_source", "w_inv": "w_invoke_index",
          "w_cmp": "w_complete_index", "w_commit_inv": "w_txn_commit_invoke_index",
          "w_commit_cmp": "w_txn_commit_complete_index"},
    "p": {"type": "kind", "status": "cause"},
    "m": {"offset": "low", "value": "read_to"},
    "o": {"status": "outcome", "t_begin": "effect_invoke_index",
          "t_done": "effect_complete_index"},
}
STEP_KINDS = {"writes": "w", "reads": "r", "positions": "p", "watermarks": "m", "offsets": "o"}

# (steps column, reads column) of each column of the reads that their steps keep.
READ_COLUMNS = [(step, _STEP_COLUMNS["r"].get(step, step)) for step in SCHEMAS["steps"].names
                if _STEP_COLUMNS["r"].get(step, step) in SCHEMAS["reads"].names]


def _visibility(r: pa.Table) -> pa.Array:
    """vis of each read (tables.py): 2 visible to read_committed readers, 1 to
    read_uncommitted ones only, 0 not attributable to a send to this partition that
    did not fail."""
    same = pc.fill_null(pc.and_(pc.equal(r.column("w_topic"), r.column("topic")),
                                pc.equal(r.column("w_partition"), r.column("partition"))), False)
    visible = pc.and_(pc.and_(r.column("w_found"), same),
                      pc.fill_null(pc.not_equal(r.column("w_type"), "fail"), True))
    rc = pc.or_(pc.is_null(r.column("w_txn")),
                pc.fill_null(pc.equal(r.column("w_txn_outcome"), COMMITTED), False))
    return pc.if_else(visible, pc.if_else(rc, pa.scalar(2), pa.scalar(1)), pa.scalar(0))


def _steps_of(name: str, table: pa.Table) -> pa.Table:
    """Table `name` (writes, reads, ...) as rows of the steps table."""
    kind = STEP_KINDS[name]
    if kind == "r":
        table = table.append_column("vis", _visibility(table))
    source, n = _STEP_COLUMNS[kind], table.num_rows
    cols = {}
    for fld in SCHEMAS["steps"]:
        column = source.get(fld.name, fld.name)
        if fld.name == "kind":
            cols["kind"] = pa.repeat(pa.scalar(kind, pa.string()), n)
        elif column in table.column_names:
            cols[fld.name] = table.column(column)
        else:
            cols[fld.name] = pa.nulls(n, fld.type)
    schema = as_types(SCHEMAS["steps"], cols)
    return pa.table({f.name: cols[f.name].cast(f.type) for f in schema}, schema=schema)


def _faults(path: Path, ops_t: pa.Table, near: list[int] | None) -> pd.DataFrame:
    """The nemesis ops with their parameters (value, done_value: JSON text)."""
    faults = ops_t.filter(pc.equal(ops_t.column("process"), NEMESIS)).to_pandas(
        types_mapper=nullable)
    values = {i: json.dumps(v, separators=(",", ":"))
              for i, v in nemesis_values(path, near).items()}
    for column, at in (("value", "invoke_index"), ("done_value", "complete_index")):
        faults[column] = [values.get(int(i)) if not pd.isna(i) else None for i in faults[at]]
    return faults


def _readers(polls: PollSpool, ops_t: pa.Table, ops_index: KeyIndex) -> pd.DataFrame:
    """(process, topic, partition) of every process that read a partition, in that
    order."""
    process = pc.dictionary_encode(ops_t.column("process").combine_chunks())
    code, names = process.indices.to_numpy(zero_copy_only=False), process.dictionary
    rows = []
    for p, ops in polls.reader_ops().items():
        at = positions_in(ops_index, ops)
        read = np.zeros(len(names), dtype=bool)
        read[code[at[at >= 0]]] = True
        for c in np.flatnonzero(read):
            rows.append((names[int(c)].as_py(), *polls.partitions.keys[p]))
    rows.sort(key=lambda r: (r[0], r[1] is None, r[1] or "", r[2] is None, r[2] or 0))
    return pd.DataFrame({"process": pd.array([r[0] for r in rows], dtype=object),
                         "topic": pd.array([r[1] for r in rows], dtype=object),
                         "partition": pd.array([r[2] for r in rows], dtype="Int64")})


def _count(column) -> dict[str, int]:
    return {c["values"]: int(c["counts"]) for c in
            sorted(pc.value_counts(column).to_pylist(), key=lambda c: c["values"])}


# The tables a check reads besides the steps (engine._resolve, liveness.from_ops, which
# reads the faults for client pauses: a row per nemesis op, a few hundred at most): all
# that is written when the steps are checked as they are made (`each`), whose folder
# is thrown away after the check. The others' Parquet took seconds of the tables phase,
# some of it on its critical path (the writes; docs/performance.md, "Figures behind the
# code").
CHECK_READS = ("ops", "faults")


def write_tables(path: Path, out: Path, spool: Path,
                 each: Callable[[pa.Table], Any] | None = None) -> tuple[dict, list | None]:
    """Write the tables of the JSONL history at `path` under `out`; return its stats.
    With `each`, the steps are not written, nor any table but CHECK_READS: `each` of
    every bucket's steps is run (Steps.each) and its results are returned too, else
    None. Sets this process's malloc options for each phase (memory.keep_freed, then
    memory.map_large, then memory.keep_freed)."""
    # The parse makes and frees blocks of the same few sizes one after another: freed
    # memory is kept for the next (memory.keep_freed). Mapped afresh, each block's pages
    # fault again: several times the faults and the system time, and a slower parse
    # (docs/performance.md, "Figures behind the code").
    keep_freed()
    partitions = Partitions()
    polls = PollSpool(spool, partitions)
    lists = Extract(polls)
    events = events_table(path, sink=lists)
    give_back()  # what the parse let go of: the events' values, once taken apart
    # Until the steps are made, freed arrays go back at once (memory.map_large): the
    # tables are made by two threads, whose freed blocks would otherwise pile up.
    map_large()
    n_events = events.num_rows
    # One chunk per column: Arrow's take from a column of many chunks (one per parsed
    # block) joins them first, at every take, and the reads take from the ops at
    # every bucket.
    ops_t = _ops(events)
    del events
    ops_t = ops_t.combine_chunks()
    give_back()
    _check_isolations(path, ops_t)
    # Hashed now: the reads are joined to the ops from two threads (checkers/spool.py).
    ops_index = KeyIndex(ints(ops_t.column("op"))[0])

    def write(name: str, table: pa.Table) -> pa.Table:
        if each is None or name in CHECK_READS:
            pq.write_table(table, out / f"{name}.parquet")
        return table

    def written(name: str, make: Callable[..., pd.DataFrame | pa.Table], *args) -> pa.Table:
        frame = make(*args)
        return write(name, frame if isinstance(frame, pa.Table) else to_arrow(name, frame))

    # The steps' sources, spooled as each is made; each partition's steps in the order
    # of their kinds that PartitionLog expects (checkers/partlog.py).
    steps = Steps(partitions, spool,
                  tuple(sorted(STEP_KINDS, key=lambda name: KINDS.index(STEP_KINDS[name]))))

    def spooled(name: str, make: Callable[..., pd.DataFrame | pa.Table], *args) -> pa.Table:
        table = written(name, make, *args)
        steps.add(name, table, functools.partial(_steps_of, name))
        return table

    # Two chains, one per core (both mostly Arrow and numpy, which let go of the GIL):
    # what hangs on the transactions' outcomes (writes and their proof) here, and what
    # does not (positions, faults, watermarks, ops, the offsets' rows) in a thread
    # beside, then there the offsets' outcomes, which need the proven ones. Each table
    # is written, and spooled as steps, as soon as it is made. The heavy ones of each
    # chain are kept apart: the positions are made while the outcomes are (the writes'
    # join waits for them), the offsets' rows while the outcomes are proven. The
    # positions beside the writes' join and index made the conversion's peak; kept
    # apart, the parse's is the peak, in the same time. Checked as they are made
    # (`each`), the steps' buckets hold more than either: the writes do not wait (the
    # main thread waited seconds for the positions; docs/performance.md, "Figures
    # behind the code").
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="onceproof-tables") as beside:
        made = {"positions": beside.submit(spooled, "positions", _positions, path, lists, polls,
                                           ops_t, ops_index),
                "faults": beside.submit(written, "faults", _faults, path, ops_t,
                                        lists.fault_lines),
                "watermarks": beside.submit(spooled, "watermarks", _watermarks, path, lists, ops_t,
                                            ops_index),
                "ops": beside.submit(write, "ops", ops_t)}
        # Pandas only for the transactions' ops: the transactions are grouped there.
        in_txn = pc.and_(pc.is_valid(ops_t.column("txn")),
                         pc.not_equal(ops_t.column("process"), NEMESIS))
        in_txns = ops_t.filter(in_txn).to_pandas(types_mapper=nullable)
        shared = txn_status.shared_txn(in_txns)
        if shared is not None:
            raise HistoryError(f"{path}: {shared}; a txn names one transaction of one "
                               "process, unique in the history")
        txns = txn_status.outcomes(in_txns)
        del in_txns
        txns_t = to_arrow("txns", txns)
        txns_index = hashed(pd.Index(txns["txn"].to_numpy(dtype=object)))
        if each is None:
            made["positions"].result()
        writes = _writes(path, lists, ops_t, ops_index, txns_t, txns_index).combine_chunks()
        write_index = WriteIndex(writes)
        offset_rows = beside.submit(_offset_rows, lists, ops_t, ops_index)
        give_back()
        proven = txn_status.prove(txns, polls, ops_t, ops_index, write_index)
        if proven is not txns:
            txns = proven
            txns_t = to_arrow("txns", txns)
            del write_index  # it holds the old writes: both go before the new are made
            writes = txn_status.rejoin_txns(writes, txns_t, txns_index).combine_chunks()
            write_index = WriteIndex(writes)
        give_back()
        # Made beside while the outcomes were proven: done by now, as a rule.
        made["offsets"] = beside.submit(spooled, "offsets", _offsets, offset_rows.result(),
                                        txns_t, txns_index)
        write("txns", txns_t)
        write("writes", writes)
        steps.add("writes", writes, functools.partial(_steps_of, "writes"))
        # Spooled as steps: the reads' join needs fewer of the writes' columns.
        write_index = write_index.keeping(_READ_WRITES)

        def reads_of(key) -> Iterator[pa.Table]:
            # A partition's reads, joined when its bucket is made (checkers/spool.py).
            raw = polls.records(partitions.ids[key])
            if raw is not None:
                for joined in _reads(raw, ops_t, ops_index, txns_t, txns_index, write_index):
                    yield _steps_of("reads", joined)

        steps.add_later("reads", reads_of)
        n_reads = sum(n for _, where in polls.blocks for _, n in where.values())
        evidence = _evidence(writes, n_reads, made["offsets"].result())
        n_faults = made["faults"].result().num_rows
        for future in made.values():
            future.result()  # each one's error, if any, raised here
    stats = {
        "events": n_events,
        "ops": ops_t.num_rows,
        "ops_by_f": _count(ops_t.column("f")),
        "ops_by_type": _count(ops_t.column("type")),
        "incomplete_ops": ops_t.column("complete_index").null_count,
        "writes": writes.num_rows, "reads": n_reads,
        "txns_by_outcome": {k: int(v) for k, v in
                            txns["outcome"].value_counts().sort_index().items()},
        "faults": n_faults,
        "evidence": evidence,
        "steps": 0,
        "partitions": len(partitions.keys),
    }
    # Nothing of the events is needed to regroup the steps, and the steps' sources are
    # on disk: let them go first. The ops, transactions and what the reads take of the
    # writes stay: each partition's reads are joined to them as its bucket is made.
    del lists, txns, made, writes
    # Of the ops, the reads need only what they take (less memory while the buckets are
    # made: docs/performance.md, "Figures behind the code").
    ops_t = ops_t.select(_READ_OPS)
    if each is not None:
        # Checked in memory, the steps' strings are coded (spool.Steps.each): coded
        # here once, what the reads take of their ops, transactions and writes are
        # codes, not strings copied and then hashed again for every read.
        ops_t, txns_t = coded(ops_t), coded(txns_t.select(["outcome"]))
        write_index = write_index.keeping(_READ_WRITES, coded)
    give_back()
    # From here, a partition's arrays are made and freed one after another.
    keep_freed()
    if each is None:
        stats["steps"] = steps.finish(out / "steps.parquet")
        return stats, None
    stats["steps"], results = steps.each(each)
    return stats, results
