"""History -> flat tables (checkers/tables.py) -> Parquet -> Spark DataFrames.

Flattening runs once, vectorized, in Arrow and pandas: records are exploded out of
their ops, each op's invoke is joined to its completion, and what the checkers ask of
every record (its transaction's outcome, who wrote a value that was read) is joined in
here. The Spark jobs then start from flat Parquet and never join by value.

Memory is bounded by everything but the polls' records: those are most of a history
(a poll returns many records, and each becomes a read and a step), so they go to disk
block by block as the JSONL streams in (PollSpool), are joined a block at a time, and
the steps are spooled and regrouped by partition on disk (StepSpool).
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .history import NEMESIS, HistoryError
from .parse import events_table, scalar_frame
from .tables import ABORTED, COMMITTED, FAILED, READ_COMMITTED, READ_UNCOMMITTED, SCHEMAS, TABLES, UNKNOWN

MANIFEST = "manifest.json"
FORMAT = 2


# ------------------------------------------------------------------------- flattening

def _explode(events: pa.Table, mask: np.ndarray, key: str) -> pd.DataFrame:
    """One row per item of value.<key> of the events selected by mask: op, rec, fields."""
    return _explode_arrow(events, mask, key).to_pandas(types_mapper=_nullable)


def _explode_arrow(events: pa.Table, mask: np.ndarray, key: str) -> pa.Table:
    item = events.schema.field("value").type.field(key).type.value_type
    sel = pa.array(np.flatnonzero(mask), type=pa.int64())
    values = events.column("value").take(sel).combine_chunks()
    lists = pc.struct_field(values, key)
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy()
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    op = events.column("op").take(sel).to_numpy()
    cols = {"op": pa.array(op[parents], type=pa.int64()),
            "rec": pa.array(np.arange(len(flat), dtype=np.int64) - starts, type=pa.int64())}
    for i in range(item.num_fields):
        cols[item.field(i).name] = flat.field(i) if len(flat) else pa.array([], item.field(i).type)
    return pa.table(cols)


def _ints(col) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of an Arrow int64 column, exactly (no trip through float)."""
    col = pa.chunked_array([col]) if isinstance(col, pa.Array) else col
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return pc.fill_null(col, 0).to_numpy(), valid


def _positions_in(index: pd.Index, keys: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Row of each key in `index` (unique), -1 when absent or not valid."""
    idx = index.get_indexer(keys) if len(keys) else np.empty(0, dtype=np.int64)
    if valid is not None:
        idx = np.where(valid, idx, -1)
    return idx


def _take(table: pa.Table, idx: np.ndarray, cols: list[str], prefix: str = "") -> dict:
    """Columns of `table` at rows idx (null where idx is -1), named prefix + column."""
    missing = idx < 0
    rows = pa.array(np.where(missing, 0, idx), type=pa.int64(), mask=missing)
    picked = table.select(cols).take(rows) if table.num_rows else \
        pa.table({c: pa.nulls(len(idx), table.schema.field(c).type) for c in cols})
    return {prefix + c: picked.column(c) for c in cols}


def _strings(col) -> np.ndarray:
    return col.to_numpy(zero_copy_only=False) if not isinstance(col, np.ndarray) else col


def _cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate, leaving out empty frames (pandas warns about their dtypes) but
    keeping the columns when all are empty."""
    full = [f for f in frames if len(f)]
    return pd.concat(full, ignore_index=True) if full else frames[0].iloc[:0]


def _nullable(t):
    # Strings stay Python objects: pandas' StringDtype is several times slower to
    # compare, join and hand back to Arrow at millions of rows.
    if pa.types.is_integer(t):
        return pd.Int64Dtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    return None


def _lookup(df: pd.DataFrame, keys: pd.Series, table: pd.DataFrame, key: str,
            cols: list[str], prefix: str = "") -> pd.DataFrame:
    """df with table's `cols` (renamed prefix + col) of the row whose `key` equals
    each of `keys` (a left join on a unique key, without merge's copies)."""
    found = table.drop_duplicates(key).set_index(key)[cols].reindex(keys.to_numpy())
    found.columns = [prefix + c for c in cols]
    found.index = df.index
    return pd.concat([df.drop(columns=[c for c in found.columns if c in df]), found], axis=1)


def _scalar(events: pa.Table, mask: np.ndarray, key: str) -> np.ndarray:
    values = events.column("value").filter(pa.array(mask))
    return pc.struct_field(values.combine_chunks(), key).to_numpy(zero_copy_only=False)


def _ops(events: pa.Table, ev: pd.DataFrame) -> pd.DataFrame:
    inv_mask = (ev["type"] == "invoke").to_numpy(dtype=bool)
    inv = ev[inv_mask].copy()
    for key in ("isolation", "group", "tid"):
        inv[key] = _scalar(events, inv_mask, key)
    done_mask = ~inv_mask
    done = ev[done_mask][["op", "type", "index", "time", "error", "final"]].copy()
    done["done_isolation"] = _scalar(events, done_mask, "isolation")
    ops = inv.merge(done, on="op", how="left", suffixes=("_inv", ""))
    ops = ops.rename(columns={"index_inv": "invoke_index", "time_inv": "invoke_time",
                              "index": "complete_index", "time": "complete_time"})
    ops["type"] = ops["type"].fillna("info")
    ops["final"] = ops["final_inv"].fillna(False) | ops["final"].fillna(False)
    ops["error"] = ops["error"].combine_first(ops["error_inv"])
    # A poll reports the isolation it used on completion if not on invoke.
    # Kafka's default isolation is read_uncommitted.
    iso = pd.Series(ops["isolation"], dtype="string").combine_first(
        pd.Series(ops["done_isolation"], dtype="string"))
    ops["isolation"] = iso.mask((ops["f"] == "poll") & iso.isna(), READ_UNCOMMITTED)
    return ops.sort_values("invoke_index", kind="stable").reset_index(drop=True)


def _txns(ops: pd.DataFrame) -> pd.DataFrame:
    """Outcome of each transaction, by the rules of docs/history.md.

    Any commit_txn ok commits it; otherwise a commit_txn that ended in info (or never
    ended) leaves it unknown, even if an abort followed, since the commit request may
    already have been applied; otherwise it aborted. (_prove then commits the unknown
    ones a read_committed poll saw.)

    A commit may be retried (commit_txn again, same txn, after a retriable error or
    timeout), and the first attempt may already have committed: commit_invoke_index is
    the earliest commit_txn's invoke (from when it may have committed),
    commit_complete_index the ok commit's completion (by when it surely had), else the
    last commit_txn's.
    """
    t = ops[ops["txn"].notna() & (ops["process"] != NEMESIS)]
    if t.empty:
        return _empty("txns")
    commits = t[t["f"] == "commit_txn"]
    ok = commits[commits["type"] == "ok"].drop_duplicates("txn").set_index("txn")
    maybe = commits[commits["type"] == "info"].drop_duplicates("txn").set_index("txn")
    last_commit = commits.drop_duplicates("txn", keep="last").set_index("txn")
    g = t.groupby("txn", sort=False)
    out = pd.DataFrame({
        "process": g["process"].first(),
        "begin_index": g["invoke_index"].min(),
        "end_index": g["complete_index"].max(),
        "n_ops": g.size(),
        "n_writes": g["n_records"].sum(),
    })
    begins = t[t["f"] == "begin_txn"].groupby("txn")["tid"].first()
    out["tid"] = begins.reindex(out.index)
    out["outcome"] = ABORTED
    out.loc[out.index.isin(maybe.index), "outcome"] = UNKNOWN
    out.loc[out.index.isin(ok.index), "outcome"] = COMMITTED
    aborts = set(t.loc[t["f"] == "abort_txn", "txn"])
    ended = np.where(out.index.isin(aborts), "abort_txn",
                     np.where(out.index.isin(last_commit.index), "commit_txn", "none"))
    out["ended_by"] = ended
    chosen = ok.reindex(out.index).combine_first(last_commit.reindex(out.index))
    first_commit = commits.groupby("txn")["invoke_index"].min()
    out["commit_op"] = chosen["op"]
    out["commit_invoke_index"] = first_commit.reindex(out.index)
    out["commit_complete_index"] = chosen["complete_index"]
    return out.rename_axis("txn").reset_index()


def _prove(txns: pd.DataFrame, polls: PollSpool, ops_t: pa.Table, ops_index: pd.Index,
           written: _WriteIndex) -> pd.DataFrame:
    """txns with each unknown transaction that a read_committed poll saw made committed.

    A read_committed reader sees a transaction's records only after its commit marker,
    so a read_committed poll returning a record of a transaction of unknown outcome (its
    value, in the partition a send that did not fail wrote it to) proves it committed.
    Its commit_complete_index becomes the completion of the first such poll, by when it
    surely had committed. Aborted transactions stay aborted (a read of one is an
    aborted_read)."""
    unknown = (txns["outcome"] == UNKNOWN).to_numpy(dtype=bool)
    w = written.writes
    if not unknown.any() or not polls.files or not w.num_rows:
        return txns
    candidates = pd.Index(txns.loc[unknown, "txn"].to_numpy(dtype=object))
    w_txn = _strings(w.column("txn"))
    w_cand = ((_positions_in(candidates, w_txn) >= 0)
              & pc.fill_null(pc.not_equal(w.column("type"), "fail"), True).to_numpy(
                  zero_copy_only=False))
    values, valid = _ints(w.column("value"))
    cand_values = pa.array(values[w_cand & valid], type=pa.int64())
    if not len(cand_values):
        return txns
    w_topic = _strings(w.column("topic"))
    w_part, w_part_ok = _ints(w.column("partition"))
    never = np.iinfo(np.int64).max
    first: dict = {}
    for raw in polls.blocks():
        # Few reads are of candidate transactions: pick them out before any join.
        mask = pc.fill_null(pc.is_in(raw.column("value"), value_set=cand_values), False)
        if not pc.any(mask).as_py():
            continue
        r = raw.filter(mask)
        wr = written.rows_of(*_ints(r.column("value")))
        at = _positions_in(ops_index, _ints(r.column("op"))[0])
        op_rows = pa.array(np.maximum(at, 0), type=pa.int64())
        iso = _strings(ops_t.column("isolation").take(op_rows))
        done, done_ok = _ints(ops_t.column("complete_index").take(op_rows))
        r_part, r_part_ok = _ints(r.column("partition"))
        wr_ = np.maximum(wr, 0)
        keep = ((wr >= 0) & (at >= 0) & (iso == READ_COMMITTED)
                & (_strings(r.column("topic")) == w_topic[wr_])
                & r_part_ok & w_part_ok[wr_] & (r_part == w_part[wr_]))
        for t, i in zip(w_txn[wr_[keep]], np.where(done_ok, done, never)[keep]):
            first[t] = min(first.get(t, never), int(i))
    if not first:
        return txns
    txns = txns.copy()
    proven = txns["txn"].isin(list(first)).to_numpy(dtype=bool)
    txns.loc[proven, "outcome"] = COMMITTED
    seen = txns.loc[proven, "txn"].map(first)
    txns.loc[proven, "commit_complete_index"] = seen.where(seen < never)
    return txns


def _status(txn: np.ndarray, send_type: np.ndarray, outcome: np.ndarray) -> np.ndarray:
    in_txn = np.array([x is not None for x in txn], dtype=bool)
    st, oc = send_type, np.where(outcome == None, "", outcome)  # noqa: E711
    plain = np.select([st == "ok", st == "fail"], [COMMITTED, FAILED], UNKNOWN)
    txnal = np.select(
        [st == "fail", oc == ABORTED, oc == UNKNOWN, (oc == COMMITTED) & (st == "ok")],
        [FAILED, ABORTED, UNKNOWN, COMMITTED], UNKNOWN)
    return np.where(in_txn, txnal, plain)


def _ordered(cols: dict, name: str) -> pa.Table:
    """cols as table `name`, in (invoke_index, rec) order, with its schema."""
    schema = SCHEMAS[name]
    n = len(next(iter(cols.values())))
    table = pa.table({f.name: cols[f.name] if f.name in cols else pa.nulls(n, f.type)
                      for f in schema}).cast(schema)
    if n:
        inv, _ = _ints(table.column("invoke_index"))
        rec, _ = _ints(table.column("rec"))
        table = table.take(pa.array(np.lexsort((rec, inv)), type=pa.int64()))
    return table


def _writes(path, events, ev, ops_t, ops_index, txns_t, txns_index) -> pa.Table:
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    acked = _explode_arrow(events, (f == "send") & (t == "ok"), "records")
    asked = _explode_arrow(events, (f == "send") & (t == "invoke"), "records")
    asked = asked.filter(pc.invert(pc.is_in(asked.column("op"), value_set=acked.column("op"))))
    asked = asked.set_column(asked.schema.get_field_index("offset"), "offset",
                             pa.nulls(asked.num_rows, pa.int64()))
    rec = pa.concat_tables([acked, asked])
    cols = {c: rec.column(c) for c in rec.column_names}
    cols.update(_take(ops_t, _positions_in(ops_index, _ints(rec.column("op"))[0]), [
        "process", "txn", "type", "invoke_index", "complete_index", "invoke_time",
        "complete_time", "final"]))
    _join_txns(cols, txns_t, txns_index)
    values, valid = _ints(rec.column("value"))
    dup = pd.Series(values[valid]).duplicated(keep=False).to_numpy()
    if dup.any():
        v = int(values[valid][dup][0])
        ops = _ints(rec.column("op"))[0][valid][values[valid] == v]
        raise HistoryError(f"{path}: value {v} is written by ops {min(ops)} and {max(ops)}; "
                           "values must be unique across the history so a read names its write")
    return _ordered(cols, "writes")


def _join_txns(cols: dict, txns_t: pa.Table, txns_index: pd.Index) -> dict:
    """Set the txn_* columns and the status of write columns `cols` from the txns."""
    txn = _strings(cols["txn"])
    cols.update(_take(txns_t, _positions_in(txns_index, txn), [
        "outcome", "begin_index", "commit_invoke_index", "commit_complete_index"],
        prefix="txn_"))
    cols["status"] = pa.array(_status(txn, _strings(cols["type"]),
                                      _strings(cols["txn_outcome"])), type=pa.string())
    return cols


def _rejoin_txns(writes: pa.Table, txns_t: pa.Table, txns_index: pd.Index) -> pa.Table:
    """The writes table (same rows, same order) joined to new txns."""
    cols = _join_txns({c: writes.column(c) for c in writes.column_names}, txns_t, txns_index)
    return pa.table({f.name: cols[f.name] for f in writes.schema}).cast(writes.schema)


class _WriteIndex:
    """Which row of the writes table wrote each value (values are unique)."""

    def __init__(self, writes: pa.Table) -> None:
        self.writes = writes
        values, valid = _ints(writes.column("value"))
        self.values = pd.Index(values[valid])
        self.rows = np.flatnonzero(valid)

    def rows_of(self, values: np.ndarray, valid: np.ndarray) -> np.ndarray:
        at = _positions_in(self.values, values, valid)
        return np.where(at >= 0, self.rows[np.maximum(at, 0)] if len(self.rows) else 0, -1)


def _reads(r: pa.Table, ops_t, ops_index, txns_t, txns_index, written: _WriteIndex) -> pa.Table:
    """The reads of a block of exploded poll records (PollSpool), joined to their ops,
    transactions and writes."""
    cols = {c: r.column(c) for c in r.column_names if c != "source"}
    cols.update(_take(ops_t, _positions_in(ops_index, _ints(r.column("op"))[0]), [
        "process", "txn", "isolation", "group", "final", "invoke_index", "complete_index",
        "invoke_time", "complete_time"]))
    cols.update(_take(txns_t, _positions_in(txns_index, _strings(cols["txn"])), ["outcome"],
                      prefix="txn_"))
    idx = written.rows_of(*_ints(r.column("value")))
    cols.update(_take(written.writes, idx, [
        "op", "process", "txn", "type", "status", "txn_outcome", "topic", "partition",
        "offset", "source", "invoke_index", "complete_index", "txn_commit_invoke_index",
        "txn_commit_complete_index"], prefix="w_"))
    cols["w_found"] = pa.array(idx >= 0)
    return _ordered(cols, "reads")


def _positions(events, ev, ops, read_partitions: pd.DataFrame) -> pd.DataFrame:
    """Seeks, and resets (assign, or any op of the process ending in info) expanded to
    every partition the process ever read or sought, since a reset makes all its
    positions unknown."""
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    sought = _explode(events, (f == "seek") & (t == "invoke"), "positions")
    sought = sought.merge(ops[["op", "process", "type", "invoke_index", "complete_index"]],
                          on="op")
    seeks = sought[sought["type"] == "ok"].assign(kind="seek", cause="seek")
    lost = sought[sought["type"] == "info"].assign(kind="reset", cause="info")
    lost["offset"] = pd.array([pd.NA] * len(lost), dtype="Int64")
    touched = _cat([read_partitions, sought[["process", "topic", "partition"]]]).drop_duplicates()
    causes = ops[((ops["f"] == "assign") & (ops["type"] != "fail"))
                 | ((ops["type"] == "info") & (ops["f"] != "seek"))]
    causes = causes[causes["process"] != NEMESIS]
    resets = causes[["op", "process", "f", "invoke_index", "complete_index"]].merge(
        touched, on="process")
    resets = resets.assign(kind="reset",
                           cause=np.where(resets["f"] == "assign", "assign", "info"))
    resets["offset"] = pd.array([pd.NA] * len(resets), dtype="Int64")
    cols = list(SCHEMAS["positions"].names)
    out = pd.concat([x[cols] for x in (seeks, lost, resets) if len(x)] or [_empty("positions")],
                    ignore_index=True)
    return out.sort_values("invoke_index", kind="stable").reset_index(drop=True)


def _offsets(events, ev, ops, txns) -> pd.DataFrame:
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    asked = _explode(events, np.isin(f, ["commit_offsets", "send_offsets"])
                     & (t == "invoke"), "offsets")
    fetched = _explode(events, (f == "fetch_offsets") & (t == "ok"), "offsets")
    rows = _cat([asked, fetched])
    cols = ["op", "process", "f", "type", "group", "txn", "invoke_index", "complete_index"]
    rows = rows.merge(ops[cols], on="op", how="left")
    tx = txns.set_index("txn")
    # A map that finds nothing (no transactions) comes back as floats; the column holds strings.
    rows["txn_outcome"] = rows["txn"].map(tx["outcome"]).astype(pd.StringDtype())
    is_send = (rows["f"] == "send_offsets").to_numpy()
    ty = rows["type"].to_numpy(dtype=object)
    oc = rows["txn_outcome"].fillna("").to_numpy(dtype=object)
    plain = np.select([ty == "ok", ty == "fail"], [COMMITTED, FAILED], UNKNOWN)
    sent = np.select([ty == "fail", oc == ABORTED, (oc == COMMITTED) & (ty == "ok")],
                     [FAILED, FAILED, COMMITTED], UNKNOWN)
    rows["outcome"] = np.where(rows["f"] == "fetch_offsets", "fetched",
                               np.where(is_send, sent, plain))
    rows["effect_invoke_index"] = np.where(
        is_send, rows["txn"].map(tx["commit_invoke_index"]), rows["invoke_index"])
    rows["effect_complete_index"] = np.where(
        is_send, rows["txn"].map(tx["commit_complete_index"]), rows["complete_index"])
    return rows.sort_values(["invoke_index", "rec"], kind="stable").reset_index(drop=True)


def _watermarks(events, ev, ops) -> pd.DataFrame:
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    wm = _explode(events, (f == "watermarks") & (t == "ok"), "partitions")
    return wm.merge(ops[["op", "process", "invoke_index", "complete_index"]], on="op")


# Each kind of step, with the columns of its own table renamed into the steps shape.
_STEP_COLUMNS = {
    "w": {"t_begin": "txn_begin_index", "t_done": "txn_commit_complete_index"},
    "r": {"status": "w_status", "source": "w_source", "w_inv": "w_invoke_index",
          "w_cmp": "w_complete_index", "w_commit_inv": "w_txn_commit_invoke_index",
          "w_commit_cmp": "w_txn_commit_complete_index"},
    "p": {"type": "kind", "status": "cause"},
    "m": {"offset": "low"},
    "o": {"status": "outcome", "t_begin": "effect_invoke_index",
          "t_done": "effect_complete_index"},
}
STEP_KINDS = {"writes": "w", "reads": "r", "positions": "p", "watermarks": "m", "offsets": "o"}


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
            cols["kind"] = pa.array([kind] * n, type=pa.string())
        elif column in table.column_names:
            cols[fld.name] = table.column(column).cast(fld.type)
        else:
            cols[fld.name] = pa.nulls(n, fld.type)
    return pa.table(cols, schema=SCHEMAS["steps"])


def _empty(name: str) -> pd.DataFrame:
    return SCHEMAS[name].empty_table().to_pandas(types_mapper=_nullable)


def _convert(path: Path, out: Path, spool: Path) -> dict:
    """Write the tables of the JSONL history at `path` under `out`; return its stats."""
    polls = PollSpool(spool)
    events = events_table(path, sink=polls)
    ev = scalar_frame(events)
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    ops = _ops(events, ev)
    sends = (f == "send") & (t == "invoke")
    counts = pc.list_value_length(pc.struct_field(
        events.column("value").filter(pa.array(sends)).combine_chunks(), "records"))
    ops["n_records"] = ops["op"].map(pd.Series(
        counts.fill_null(0).to_numpy(), index=ev["op"].to_numpy()[sends])).fillna(0)
    txns = _txns(ops)
    ops_t, txns_t = _to_arrow("ops", ops), _to_arrow("txns", txns)
    ops_index = pd.Index(ops["op"].to_numpy(dtype=np.int64))
    txns_index = pd.Index(txns["txn"].to_numpy(dtype=object))
    writes = _writes(path, events, ev, ops_t, ops_index, txns_t, txns_index)
    written = _WriteIndex(writes)
    proven = _prove(txns, polls, ops_t, ops_index, written)
    if proven is not txns:
        txns = proven
        txns_t = _to_arrow("txns", txns)
        writes = _rejoin_txns(writes, txns_t, txns_index)
        written = _WriteIndex(writes)

    steps = StepSpool(spool)
    steps.add(_steps_of("writes", writes))
    n_reads, seen = 0, [writes.select(["topic", "partition"]), _READERS.empty_table()]
    with pq.ParquetWriter(out / "reads.parquet", SCHEMAS["reads"]) as sink:
        for raw in polls.blocks():
            reads = _reads(raw, ops_t, ops_index, txns_t, txns_index, written)
            sink.write_table(reads)
            steps.add(_steps_of("reads", reads))
            seen.append(_distinct(reads.select(_READERS.names)))
            n_reads += reads.num_rows
    readers = _distinct(pa.concat_tables(seen[1:]))
    read_partitions = readers.to_pandas(types_mapper=_nullable)
    frames = {
        "positions": _positions(events, ev, ops, read_partitions),
        "offsets": _offsets(events, ev, ops, txns),
        "faults": ops[ops["process"] == NEMESIS],
        "watermarks": _watermarks(events, ev, ops),
    }
    tables = {"ops": ops_t, "txns": txns_t, "writes": writes}
    tables.update({name: _to_arrow(name, df) for name, df in frames.items()})
    for name, table in tables.items():
        pq.write_table(table, out / f"{name}.parquet")
        if name in STEP_KINDS and name != "writes":
            steps.add(_steps_of(name, table))
    n_steps = steps.finish(out / "steps.parquet")
    partitions = _distinct(pa.concat_tables([seen[0], readers.select(["topic", "partition"])]))
    return {
        "events": len(ev),
        "ops": len(ops),
        "ops_by_f": {k: int(v) for k, v in ops["f"].value_counts().sort_index().items()},
        "ops_by_type": {k: int(v) for k, v in ops["type"].value_counts().sort_index().items()},
        "incomplete_ops": int(ops["complete_index"].isna().sum()),
        "writes": writes.num_rows, "reads": n_reads,
        "txns_by_outcome": {k: int(v) for k, v in
                            txns["outcome"].value_counts().sort_index().items()},
        "faults": len(frames["faults"]),
        "steps": n_steps,
        "partitions": partitions.num_rows,
    }


_READERS = pa.schema([SCHEMAS["reads"].field(n) for n in ("process", "topic", "partition")])


def _distinct(table: pa.Table) -> pa.Table:
    return table.group_by(table.column_names).aggregate([])


class PollSpool:
    """The records of ok polls, moved to disk as the JSONL streams in (a sink for
    parse.events_table): exploded per block (op, rec, topic, partition, offset, key,
    value, source) into Arrow files, and taken out of the events kept in memory."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: list[Path] = []

    def take(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        events = pa.Table.from_batches([batch])
        polls = pc.fill_null(pc.and_(pc.equal(events.column("f"), "poll"),
                                     pc.equal(events.column("type"), "ok")), False)
        mask = polls.to_numpy()
        if not mask.any():
            return batch
        exploded = _explode_arrow(events, mask, "records")
        path = self.folder / f"polls-{len(self.files):06d}.arrow"
        with pa.ipc.new_file(path, exploded.schema) as out:
            out.write_table(exploded)
        self.files.append(path)
        value = batch.column("value")
        fields = [value.field(i) for i in range(value.type.num_fields)]
        at = value.type.get_field_index("records")
        fields[at] = pc.if_else(polls.combine_chunks(), pa.nulls(len(batch), fields[at].type),
                                fields[at])
        kept = pa.StructArray.from_arrays(fields, fields=list(value.type), mask=value.is_null())
        return pa.RecordBatch.from_arrays(
            [kept if n == "value" else batch.column(n) for n in batch.schema.names],
            schema=batch.schema)

    def clear(self) -> None:
        for path in self.files:
            path.unlink(missing_ok=True)
        self.files = []

    def blocks(self):
        for path in self.files:
            with pa.memory_map(str(path)) as source:
                yield pa.ipc.open_file(source).read_all()


class StepSpool:
    """The steps table, spooled to disk in blocks sorted by (topic, partition), then
    written as bucket files that each hold whole partitions in one Parquet row group:
    Spark reads a row group in one task, so every task sees all the steps of the
    partitions it is given (checkers/engine.py), with no shuffle at check time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.groups: dict[tuple, int] = {}
        self.sizes: list[int] = []
        self.blocks: list[tuple[Path, dict[int, tuple[int, int]]]] = []

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        keys = pd.DataFrame({
            "t": table.column("topic").fill_null("").to_numpy(zero_copy_only=False),
            "n": table.column("topic").is_null().to_numpy(zero_copy_only=False),
            "p": pc.fill_null(table.column("partition"), -1).to_numpy(),
            "q": table.column("partition").is_null().to_numpy(zero_copy_only=False)})
        local, uniques = pd.factorize(pd.MultiIndex.from_frame(keys))
        gid = np.array([self._group(k) for k in uniques], dtype=np.int64)[local]
        order = np.argsort(gid, kind="stable")
        gid = gid[order]
        cuts = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
        ends = np.r_[cuts[1:], len(gid)]
        where = {int(gid[a]): (int(a), int(b)) for a, b in zip(cuts, ends)}
        for g, (a, b) in where.items():
            self.sizes[g] += b - a
        path = self.folder / f"steps-{len(self.blocks):06d}.arrow"
        with pa.ipc.new_file(path, table.schema) as out:
            out.write_table(table.take(pa.array(order, type=pa.int64())))
        self.blocks.append((path, where))

    def _group(self, key: tuple) -> int:
        if key not in self.groups:
            self.groups[key] = len(self.sizes)
            self.sizes.append(0)
        return self.groups[key]

    def finish(self, folder: Path) -> int:
        """Write the bucket files into `folder`; return the number of steps."""
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        n = max(1, min(BUCKETS, len(self.sizes)))
        # Largest partitions first, each to the emptiest bucket: balanced tasks.
        load, members = [0] * n, [[] for _ in range(n)]
        for g in sorted(range(len(self.sizes)), key=lambda g: -self.sizes[g]):
            b = load.index(min(load))
            load[b] += self.sizes[g]
            members[b].append(g)
        schema = SCHEMAS["steps"]
        sources = [pa.memory_map(str(path)) for path, _ in self.blocks]
        try:
            blocks = [pa.ipc.open_file(src).read_all() for src in sources]
            for b in range(n):
                pieces = [block.slice(a, e - a) for g in members[b]
                          for block, (_, where) in zip(blocks, self.blocks)
                          if g in where for a, e in [where[g]]]
                part = pa.concat_tables(pieces) if pieces else schema.empty_table()
                pq.write_table(part, folder / f"part-{b:05d}.parquet",
                               row_group_size=max(1, part.num_rows))
        finally:
            for src in sources:
                src.close()
        return sum(self.sizes)


def flatten(path: str | Path) -> tuple[dict[str, pa.Table], dict]:
    """The tables of a JSONL history (as Arrow tables, read back from a conversion in a
    temporary directory) and its stats: for looking at a small history's tables."""
    with tempfile.TemporaryDirectory(prefix="onceproof-") as d:
        convert(path, d)
        stats = json.loads((Path(d) / MANIFEST).read_text())["stats"]
        tables = {name: pq.read_table(Path(d) / f"{name}.parquet") for name in TABLES}
    return tables, stats


def _to_arrow(name: str, df: pd.DataFrame) -> pa.Table:
    schema = SCHEMAS[name]
    cols = {}
    for fld in schema:
        if fld.name not in df:
            cols[fld.name] = pa.nulls(len(df), type=fld.type)
            continue
        col = df[fld.name]
        if pa.types.is_integer(fld.type) and col.dtype == object:
            col = pd.array(col.to_numpy(dtype=object), dtype="Int64")
        elif pa.types.is_boolean(fld.type) and col.dtype == object:
            col = pd.array(col.to_numpy(dtype=object), dtype="boolean")
        cols[fld.name] = pa.array(col, type=fld.type, from_pandas=True)
    return pa.table(cols, schema=schema)


# --------------------------------------------------------------------------- Parquet

def convert(path: str | Path, out: str | Path) -> Path:
    """Write the tables of the JSONL history at `path` as Parquet under directory `out`."""
    path, out = Path(path), Path(out)
    if path.is_dir():
        raise HistoryError(f"{path}: a directory without {MANIFEST}; pass a history.jsonl "
                           "or a directory written by `convert`")
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-written conversion is no conversion
    with tempfile.TemporaryDirectory(prefix=".spool-", dir=out) as spool:
        stats = _convert(path, out, Path(spool))
    (out / MANIFEST).write_text(json.dumps({"format": FORMAT, "source": str(path),
                                            "stats": stats}, indent=1))
    return out


BUCKETS = 32  # at most this many steps files (Spark tasks)


def is_converted(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / MANIFEST).is_file()


def spark_schema(name: str):
    """The Spark schema of table `name` (all columns nullable)."""
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType
    types = {pa.int64(): LongType(), pa.string(): StringType(), pa.bool_(): BooleanType()}
    return StructType([StructField(f.name, types[f.type]) for f in SCHEMAS[name]])


class Tables:
    """A history's tables as Spark DataFrames (read when first used), with the
    converter's stats."""

    def __init__(self, directory: Path, spark, stats: dict) -> None:
        self.dir = directory
        self.spark = spark
        self.stats = stats
        self._frames: dict = {}

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in SCHEMAS:
            raise AttributeError(name)
        if name not in self._frames:
            self._frames[name] = self.spark.read.schema(spark_schema(name)).parquet(
                str(self.dir / f"{name}.parquet"))
        return self._frames[name]

    def __getitem__(self, name: str):
        return getattr(self, name)


def read_parquet(directory: str | Path, spark) -> Tables:
    directory = Path(directory)
    manifest = json.loads((directory / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise HistoryError(f"{directory}: Parquet tables of format {manifest.get('format')}, "
                           f"this onceproof reads format {FORMAT}; convert the JSONL again")
    for name in TABLES:
        if not (directory / f"{name}.parquet").exists():
            raise HistoryError(f"{directory}: missing {name}.parquet; convert the JSONL again")
    return Tables(directory, spark, manifest.get("stats", {}))


def load(path: str | Path, spark=None, workdir: str | Path | None = None) -> Tables:
    """A history (JSONL file, or a directory `convert` wrote) as Spark tables.

    A JSONL history is converted into `workdir` (a new temporary directory when not
    given, left for the caller's session to read lazily).
    """
    from .spark import session
    spark = spark or session()
    path = Path(path)
    if is_converted(path):
        return read_parquet(path, spark)
    if path.is_dir():
        raise HistoryError(f"{path}: a directory without {MANIFEST}; pass a history.jsonl "
                           "or a directory written by `convert`")
    out = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="onceproof-"))
    convert(path, out)
    return read_parquet(out, spark)
