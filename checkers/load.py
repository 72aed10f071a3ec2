"""History -> flat tables (checkers/tables.py) -> Parquet -> Spark DataFrames.

Flattening runs once, vectorized, in Arrow and pandas: records are exploded out of
their ops, each op's invoke is joined to its completion, and what the checkers ask of
every record (its transaction's outcome, who wrote a value that was read) is joined in
here, while the whole history is in memory anyway. The Spark jobs then start from flat
Parquet and never join by value.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.history import NEMESIS, HistoryError

from .parse import events_table, scalar_frame
from .tables import (ABORTED, COMMITTED, FAILED, READ_UNCOMMITTED, SCHEMAS, TABLES,
                     UNKNOWN)

MANIFEST = "manifest.json"
FORMAT = 1


# ------------------------------------------------------------------------- flattening

def _explode(events: pa.Table, frame: pd.DataFrame, mask: np.ndarray, key: str) -> pd.DataFrame:
    """One row per item of value.<key> of the events selected by mask: op, rec, fields."""
    sel = np.flatnonzero(mask)
    if len(sel) == 0:
        names = [f.name for f in events.schema.field("value").type.field(key).type.value_type]
        return pd.DataFrame({"op": pd.Series(dtype="Int64"), "rec": pd.Series(dtype="Int64"),
                             **{n: pd.Series(dtype="object") for n in names}})
    values = events.column("value").take(pa.array(sel)).combine_chunks()
    lists = pc.struct_field(values, key)
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy()
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    out = {"op": frame["op"].to_numpy()[sel][parents],
           "rec": np.arange(len(flat), dtype=np.int64) - starts}
    item = flat.type
    for i in range(item.num_fields):
        out[item.field(i).name] = flat.field(i)
    table = pa.table({k: (v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v))
                      for k, v in out.items()})
    return table.to_pandas(types_mapper=_nullable)


def _cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate, leaving out empty frames (pandas warns about their dtypes) but
    keeping the columns when all are empty."""
    full = [f for f in frames if len(f)]
    return pd.concat(full, ignore_index=True) if full else frames[0].iloc[:0]


def _nullable(t):
    if pa.types.is_integer(t):
        return pd.Int64Dtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    if pa.types.is_string(t):
        return pd.StringDtype()
    return None


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
    already have been applied; otherwise it aborted.
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
    out["commit_op"] = chosen["op"]
    out["commit_invoke_index"] = chosen["invoke_index"]
    out["commit_complete_index"] = chosen["complete_index"]
    return out.rename_axis("txn").reset_index()


def _status(txn: pd.Series, send_type: pd.Series, outcome: pd.Series) -> np.ndarray:
    in_txn = txn.notna().to_numpy()
    st = send_type.to_numpy(dtype=object)
    oc = outcome.fillna("").to_numpy(dtype=object)
    plain = np.select([st == "ok", st == "fail"], [COMMITTED, FAILED], UNKNOWN)
    txnal = np.select(
        [st == "fail", oc == ABORTED, oc == UNKNOWN, (oc == COMMITTED) & (st == "ok")],
        [FAILED, ABORTED, UNKNOWN, COMMITTED], UNKNOWN)
    return np.where(in_txn, txnal, plain)


def _writes(path, events, ev, ops, txns) -> pd.DataFrame:
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    acked = _explode(events, ev, (f == "send") & (t == "ok"), "records")
    asked = _explode(events, ev, (f == "send") & (t == "invoke"), "records")
    asked = asked[~asked["op"].isin(acked["op"].tolist())].drop(columns=["offset"])
    asked["offset"] = pd.array([pd.NA] * len(asked), dtype="Int64")
    rec = _cat([acked, asked])
    cols = ["op", "process", "txn", "type", "invoke_index", "complete_index",
            "invoke_time", "complete_time", "final"]
    w = rec.merge(ops[cols], on="op", how="left")
    tx = txns.set_index("txn")
    w["txn_outcome"] = w["txn"].map(tx["outcome"])
    w["txn_begin_index"] = w["txn"].map(tx["begin_index"])
    w["txn_commit_invoke_index"] = w["txn"].map(tx["commit_invoke_index"])
    w["txn_commit_complete_index"] = w["txn"].map(tx["commit_complete_index"])
    w["status"] = _status(w["txn"], w["type"], w["txn_outcome"])
    dup = w["value"].notna() & w["value"].duplicated(keep=False)
    if dup.any():
        d = w[dup].sort_values("invoke_index")
        v = d["value"].iloc[0]
        both = d.loc[d["value"] == v, "op"].tolist()
        raise HistoryError(f"{path}: value {v} is written by ops {both[0]} and {both[1]}; values "
                           "must be unique across the history so a read names its write")
    return w.sort_values(["invoke_index", "rec"], kind="stable").reset_index(drop=True)


def _reads(events, ev, ops, txns, writes) -> pd.DataFrame:
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    r = _explode(events, ev, (f == "poll") & (t == "ok"), "records")
    r = r.drop(columns=["source"])
    cols = ["op", "process", "txn", "isolation", "group", "final", "invoke_index",
            "complete_index", "invoke_time", "complete_time"]
    r = r.merge(ops[cols], on="op", how="left")
    r["txn_outcome"] = r["txn"].map(txns.set_index("txn")["outcome"])
    wcols = ["op", "process", "txn", "type", "status", "txn_outcome", "topic",
             "partition", "offset", "source", "invoke_index", "complete_index",
             "txn_commit_invoke_index", "txn_commit_complete_index"]
    w = writes.loc[writes["value"].notna(), ["value", *wcols]]
    w = w.rename(columns={c: "w_" + c for c in wcols})
    r = r.merge(w, on="value", how="left")
    r["w_found"] = r["w_op"].notna()
    return r.sort_values(["invoke_index", "rec"], kind="stable").reset_index(drop=True)


def _positions(events, ev, ops, reads) -> pd.DataFrame:
    """Seeks, and resets (assign, or any op of the process ending in info) expanded to
    every partition the process ever read or sought, since a reset makes all its
    positions unknown."""
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    sought = _explode(events, ev, (f == "seek") & (t == "invoke"), "positions")
    sought = sought.merge(ops[["op", "process", "type", "invoke_index", "complete_index"]],
                          on="op")
    seeks = sought[sought["type"] == "ok"].assign(kind="seek", cause="seek")
    lost = sought[sought["type"] == "info"].assign(kind="reset", cause="info", offset=pd.NA)
    touched = _cat([reads[["process", "topic", "partition"]],
                    sought[["process", "topic", "partition"]]]).drop_duplicates()
    causes = ops[((ops["f"] == "assign") & (ops["type"] != "fail"))
                 | ((ops["type"] == "info") & (ops["f"] != "seek"))]
    causes = causes[causes["process"] != NEMESIS]
    resets = causes[["op", "process", "f", "invoke_index", "complete_index"]].merge(
        touched, on="process")
    resets = resets.assign(kind="reset", offset=pd.NA,
                           cause=np.where(resets["f"] == "assign", "assign", "info"))
    cols = list(SCHEMAS["positions"].names)
    out = pd.concat([x[cols] for x in (seeks, lost, resets) if len(x)] or [_empty("positions")],
                    ignore_index=True)
    return out.sort_values("invoke_index", kind="stable").reset_index(drop=True)


def _offsets(events, ev, ops, txns) -> pd.DataFrame:
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    asked = _explode(events, ev, np.isin(f, ["commit_offsets", "send_offsets"])
                     & (t == "invoke"), "offsets")
    fetched = _explode(events, ev, (f == "fetch_offsets") & (t == "ok"), "offsets")
    rows = _cat([asked, fetched])
    cols = ["op", "process", "f", "type", "group", "txn", "invoke_index", "complete_index"]
    rows = rows.merge(ops[cols], on="op", how="left")
    tx = txns.set_index("txn")
    rows["txn_outcome"] = rows["txn"].map(tx["outcome"])
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
    wm = _explode(events, ev, (f == "watermarks") & (t == "ok"), "partitions")
    return wm.merge(ops[["op", "process", "invoke_index", "complete_index"]], on="op")


def _steps(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The steps table (tables.py): the per-partition tables in one shape."""
    r = frames["reads"]
    same = (r["w_topic"] == r["topic"]) & (r["w_partition"] == r["partition"])
    visible = r["w_found"] & same.fillna(False) & (r["w_type"] != "fail").fillna(True)
    rc = r["w_txn"].isna() | (r["w_txn_outcome"] == COMMITTED).fillna(False)
    vis = np.where(visible.to_numpy(dtype=bool), np.where(rc.to_numpy(dtype=bool), 2, 1), 0)
    renamed = [
        ("w", frames["writes"], {"txn_begin_index": "t_begin",
                                 "txn_commit_complete_index": "t_done"}),
        ("r", r.assign(vis=vis), {"w_status": "status", "w_source": "source",
                                  "w_invoke_index": "w_inv", "w_complete_index": "w_cmp",
                                  "w_txn_commit_invoke_index": "w_commit_inv",
                                  "w_txn_commit_complete_index": "w_commit_cmp"}),
        ("p", frames["positions"], {"kind": "type", "cause": "status"}),
        ("m", frames["watermarks"], {"low": "offset"}),
        ("o", frames["offsets"], {"outcome": "status", "effect_invoke_index": "t_begin",
                                  "effect_complete_index": "t_done"}),
    ]
    names = SCHEMAS["steps"].names
    parts = []
    for kind, df, rename in renamed:
        if len(df):
            d = df.rename(columns=rename)
            parts.append(d[[c for c in names if c in d.columns]].assign(kind=kind))
    if not parts:
        return _empty("steps")
    return pd.concat(parts, ignore_index=True)


def _empty(name: str) -> pd.DataFrame:
    return SCHEMAS[name].empty_table().to_pandas(types_mapper=_nullable)


def flatten(path: str | Path) -> tuple[dict[str, pa.Table], dict]:
    """The tables of a JSONL history (as Arrow tables) and its stats."""
    events = events_table(path)
    ev = scalar_frame(events)
    f, t = ev["f"].to_numpy(dtype=object), ev["type"].to_numpy(dtype=object)
    ops = _ops(events, ev)
    sends = (f == "send") & (t == "invoke")
    counts = pc.list_value_length(pc.struct_field(
        events.column("value").filter(pa.array(sends)).combine_chunks(), "records"))
    ops["n_records"] = ops["op"].map(pd.Series(
        counts.fill_null(0).to_numpy(), index=ev["op"].to_numpy()[sends])).fillna(0)
    txns = _txns(ops)
    writes = _writes(path, events, ev, ops, txns)
    reads = _reads(events, ev, ops, txns, writes)
    frames = {
        "ops": ops, "writes": writes, "reads": reads,
        "positions": _positions(events, ev, ops, reads),
        "offsets": _offsets(events, ev, ops, txns),
        "txns": txns,
        "faults": ops[ops["process"] == NEMESIS],
        "watermarks": _watermarks(events, ev, ops),
    }
    frames["steps"] = _steps(frames)
    tables = {name: _to_arrow(name, frames[name]) for name in TABLES}
    stats = {
        "events": int(len(ev)),
        "ops": int(len(ops)),
        "ops_by_f": {k: int(v) for k, v in ops["f"].value_counts().sort_index().items()},
        "ops_by_type": {k: int(v) for k, v in ops["type"].value_counts().sort_index().items()},
        "incomplete_ops": int(ops["complete_index"].isna().sum()),
        "writes": int(len(writes)), "reads": int(len(reads)),
        "txns_by_outcome": {k: int(v) for k, v in
                            txns["outcome"].value_counts().sort_index().items()},
        "faults": int(len(frames["faults"])),
        "steps": int(len(frames["steps"])),
        "partitions": int(len(_cat([writes[["topic", "partition"]],
                                    reads[["topic", "partition"]]]).drop_duplicates())),
    }
    return tables, stats


def _to_arrow(name: str, df: pd.DataFrame) -> pa.Table:
    schema = SCHEMAS[name]
    cols = {}
    for fld in schema:
        col = df[fld.name] if fld.name in df else pd.Series([None] * len(df), dtype=object)
        if pa.types.is_integer(fld.type):
            col = pd.array(col, dtype="Int64") if len(col) else []
        elif pa.types.is_boolean(fld.type):
            col = pd.array(col, dtype="boolean") if len(col) else []
        elif pa.types.is_string(fld.type):
            col = pd.Series(col, dtype=object).where(pd.notna(col), None).to_numpy() \
                if len(col) else []
        cols[fld.name] = pa.array(col, type=fld.type, from_pandas=True)
    return pa.table(cols, schema=schema)


# --------------------------------------------------------------------------- Parquet

def convert(path: str | Path, out: str | Path) -> Path:
    """Write the tables of the JSONL history at `path` as Parquet under directory `out`."""
    path, out = Path(path), Path(out)
    if path.is_dir():
        raise HistoryError(f"{path}: a directory without {MANIFEST}; pass a history.jsonl "
                           "or a directory written by `convert`")
    tables, stats = flatten(path)
    out.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        pq.write_table(table, out / f"{name}.parquet")
    (out / MANIFEST).write_text(json.dumps({"format": FORMAT, "source": str(path),
                                            "stats": stats}, indent=1))
    return out


def is_converted(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / MANIFEST).is_file()


def spark_schema(name: str):
    """The Spark schema of table `name` (all columns nullable)."""
    from pyspark.sql.types import (BooleanType, LongType, StringType, StructField,
                                   StructType)
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
        if not (directory / f"{name}.parquet").is_file():
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
