"""How the checkers run: one shuffle, one pandas pass per partition, then the driver.

Spark's fixed cost is per stage, and most anomalies are properties of one partition.
So the whole history becomes one table of steps (checkers/partlog.py), partitioned
once by (topic, partition) when it is converted (whole partitions per bucket file);
one Spark job runs every family's per-partition check on each partition's steps,
with no shuffle at check time. Each family's `partition(pl)` yields anomaly rows and,
for what crosses partitions (a transaction's writes in several partitions, dependency
edges, pipeline outputs), small *fact* rows. The driver collects that one output and
each family's `finish(facts)` turns facts into the remaining anomalies. Without
Spark, the same pass runs in forked worker processes (checkers/forked.py), one per
core, and so do the families' `finish`es, which do not depend on each other.

A row names its witnesses by op (anomaly.COLUMNS `witnesses`). What a partition's steps
know of some ops is only the index of one of their events (a transaction's commit_txn,
its first op), or only the transaction they decided (what aborted the writer of a
read); and a finisher knows of the polls that returned an input only its value and
the transaction. A row names those in `witness_at`, as {index, role}, {txn, role} or
{value, txn, role}, and the driver turns each into the op of that event, the ops that
decided that transaction's outcome (from the ops table), or the polls in that
transaction that returned the value (from the steps), among its witnesses.

A family is a module with `TYPES`, `partition(pl) -> list[pandas frames]` and
optionally `finish(facts) -> pandas frame`, given the fact rows named in its `FACTS`
(the names of the fact rows it reads; with `FACT_COLUMNS`, only those columns of
them, and `row`: the pass keeps no other column of them (by_row), and no fact row
that no finisher names; those of its string columns named in `FACT_CODED` come as
Categoricals);
its frames use OUT_SCHEMA, built with `anomalies(...)` and `facts(...)` below. A
family that judges whole ops, which belong to no partition (checkers/liveness.py), has
instead `from_ops(read) -> pandas frame`, run on the driver, where read(columns) gives
those columns of the ops table (Arrow, read_table). A finisher that judges its facts
against the ops too (checkers/loss.py: how long a transaction had been open) names the
columns it reads in `OPS_COLUMNS` and is called `finish(facts, read)`, read(columns)
giving them in pandas (read_frame), for it to call only when it has facts to judge.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from onceproof.history.access import values_at
from onceproof.history.format import POLL
from onceproof.memory import for_checking

from . import anomaly, arrow, forked, txn_status
from .partlog import READ, PartitionLog

ANOMALY = "anomaly"
# Fact rows that count what a rule could not judge (unjudged), and their columns:
# type (the rule: the anomaly types it finds), detail (why), value (how many).
UNJUDGED = "unjudged"
UNJUDGED_COLUMNS = ("type", "detail", "value")
_S, _I = pa.string(), pa.int64()
_FACT_COLUMNS = (("row", _S), ("txn2", _S), ("kind", _S), ("n1", _I), ("n2", _I),
                 ("a1", _I), ("a2", _I), ("a3", _I), ("a4", _I), ("a5", _I), ("a6", _I),
                 ("witness_at", pa.list_(pa.struct([("index", _I), ("txn", _S), ("value", _I),
                                                    ("role", _S)]))))
OUT_SCHEMA = pa.schema(list(anomaly.SCHEMA) + [pa.field(n, t) for n, t in _FACT_COLUMNS])
_LONGS = {f.name for f in OUT_SCHEMA if f.type == _I}


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """A frame using OUT_SCHEMA's column names (any left out) as OUT_SCHEMA rows in
    pandas: exactly its columns, nullable dtypes, witness lists of plain dicts. By the
    rules that make the pass's rows in Arrow (_arrow), so one set of rules types every
    row a family gives, wherever it is made."""
    return _plain(_pandas(_arrow(df)))


def _plain(rows: pd.DataFrame) -> pd.DataFrame:
    """OUT_SCHEMA rows from Arrow (_pandas) with their witness lists as lists of plain
    dicts, as reports and anomaly.witnesses take them (Arrow gives numpy arrays)."""
    rows["witnesses"] = pd.Series([anomaly.plain_witnesses(v) for v in rows["witnesses"]],
                                  index=rows.index, dtype=object)
    rows["witness_at"] = pd.Series([plain_at(v) for v in rows["witness_at"]],
                                   index=rows.index, dtype=object)
    return rows


def ints(col: pd.Series) -> pd.arrays.IntegerArray:
    """A column of integers or missing values as Int64, exactly (no trip through float
    for Python ints)."""
    if isinstance(col.dtype, pd.Int64Dtype):
        return col.array
    if col.dtype == object:
        # Python ints convert exactly; pandas' own coercion of an object column walks
        # it in Python.
        missing = col.isna().to_numpy(dtype=bool)
        values = np.zeros(len(col), np.int64)
        values[~missing] = col.to_numpy()[~missing].astype(np.int64)
        return pd.arrays.IntegerArray(values, missing)
    if col.dtype.kind == "f" or isinstance(col.dtype, pd.Float64Dtype):
        # Whole floats convert exactly, as pandas would convert them, without its walk
        # over an object array (a Float64 column's to_numpy); it refuses the others, below.
        a = col.to_numpy(dtype=float, na_value=np.nan)
        missing = np.isnan(a)
        filled = np.where(missing, 0.0, a)
        values = filled.astype(np.int64)
        if (values == filled).all():
            return pd.arrays.IntegerArray(values, missing)
    return pd.array(col.to_numpy(), dtype="Int64")


def at_events(*pairs) -> list[dict]:
    """A row's `witness_at`: {index, role} of each (event index, role) pair whose index
    is known; the driver makes each the op of that event."""
    return [{"index": int(i), "role": role} for i, role in pairs
            if i is not None and not pd.isna(i)]


def at_outcome(txn, role: str) -> list[dict]:
    """A row's `witness_at` naming, as `role`, the ops that decided transaction txn's
    outcome (txn_status.deciding_ops), which the driver finds; none when txn is
    missing."""
    return [] if txn is None or pd.isna(txn) else [{"txn": str(txn), "role": role}]


def at_polls(value, txn, role: str) -> list[dict]:
    """A row's `witness_at` naming, as `role`, the polls in transaction txn that
    returned `value`, which the driver finds in the steps; none when either is
    missing."""
    if value is None or pd.isna(value) or txn is None or pd.isna(txn):
        return []
    return [{"value": int(value), "txn": str(txn), "role": role}]


def plain_at(v) -> list[dict] | None:
    """A `witness_at` cell as plain dicts, {index: int, role}, {txn: str, role} or
    {value: int, txn: str, role}, from a list or an Arrow array's to_pandas (a numpy
    array of dicts); None when missing."""
    if v is None or isinstance(v, float) or v is pd.NA:
        return None
    out = []
    for w in v:
        index, txn, value = w.get("index"), w.get("txn"), w.get("value")
        out.append({"index": int(index), "role": str(w["role"])} if index is not None
                   else {"txn": str(txn), "role": str(w["role"])} if value is None
                   else {"value": int(value), "txn": str(txn), "role": str(w["role"])})
    return out


def _resolve(found: pd.DataFrame, directory, history=None) -> pd.DataFrame:
    """Each row's witness_at as witnesses: the op whose invoke or completion is that
    event, the ops that decided that transaction's outcome, or the polls in a
    transaction that returned a value, read from the ops table, and the steps (or,
    when they were not written, the `history` they came from), only when some row
    needs them."""
    at = found["witness_at"]
    if not at.map(bool).any():
        return found
    named = [a for extra in at if extra for a in extra]
    by_txn = any("txn" in a and "value" not in a for a in named)
    by_value = {(a["value"], a["txn"]) for a in named if "value" in a}
    ops = read_frame(Path(directory) / "ops.parquet",
                     ["op", "invoke_index", "complete_index"]
                     + (["f", "type", "txn"] if by_txn or by_value else []))
    done = ops[ops["complete_index"].notna()]
    op_of = dict(zip(ops["invoke_index"].astype("int64"), ops["op"].astype("int64")))
    op_of.update(zip(done["complete_index"].astype("int64"), done["op"].astype("int64")))
    decided = txn_status.deciding_ops(ops) if by_txn else {}
    polls = _polls_of(directory, by_value, ops, history)

    def ops_at(a: dict) -> list:
        if "value" in a:
            return polls.get((a["value"], a["txn"]), [])
        return decided.get(a["txn"], []) if "txn" in a else [op_of.get(a["index"])]

    found = found.copy()
    found["witnesses"] = [
        anomaly.witnesses(*((w["op"], w["role"]) for w in ws or ()),
                          *((op, a["role"]) for a in extra or () for op in ops_at(a)))
        if extra else ws
        for ws, extra in zip(found["witnesses"], at)]
    return found


def _polls_of(directory, wanted: set[tuple[int, str]], ops: pd.DataFrame,
              history=None) -> dict[tuple, list]:
    """(value, txn) -> the ops of the polls in transaction txn that returned value, in
    op order, for each pair wanted. From the steps; when they were not written (a
    check of the steps as they were made, store.convert_each), from the history: its
    polls in those transactions (`ops`: at least op, f, txn, complete_index) and the
    records they returned."""
    if not wanted:
        return {}
    out: dict[tuple, list] = {}
    files = [f for f in _bucket_files(directory) if f.exists()]
    if files:
        steps = ds.dataset([str(f) for f in files], format="parquet")
        reads = steps.to_table(columns=["value", "txn", "op"],
                               filter=(ds.field("kind") == READ)
                               & ds.field("value").isin(sorted({v for v, _ in wanted})))
        found = {(r["value"], r["txn"], r["op"]) for r in reads.to_pylist()}
    elif history is not None:
        txns = {t for _, t in wanted}
        ops = ops[((ops["f"] == POLL) & ops["txn"].isin(txns)).to_numpy(dtype=bool)
                  & ops["complete_index"].notna().to_numpy(dtype=bool)]
        done = values_at(history, ops["complete_index"].astype("int64"))
        found = {(r.get("value"), txn, int(op))
                 for op, txn, i in zip(ops["op"], ops["txn"], ops["complete_index"])
                 for r in done.get(int(i), {}).get("records") or ()}
    else:
        return {}
    for value, txn, op in sorted(found, key=lambda x: x[2]):
        if (value, txn) in wanted:
            out.setdefault((value, txn), []).append(op)
    return out


def anomalies(records: list[dict]) -> pd.DataFrame:
    """Anomaly rows from dicts of anomaly.COLUMNS (made OUT_SCHEMA rows later, _arrow)."""
    if not records:
        return _EMPTY
    df = pd.DataFrame.from_records(records)
    df["row"] = ANOMALY
    return df


def unjudged(rule: str, count: int, why: str) -> pd.DataFrame:
    """A fact row counting the cases of a partition a rule (the anomaly types it finds)
    could not judge for lack of information, and why; the driver sums them per rule
    and why into the verdict's `unjudged` (collect)."""
    if not count:
        return _EMPTY
    return facts(UNJUDGED, pd.DataFrame({"type": [rule], "detail": [why],
                                         "value": [int(count)]}))


def facts(row: str, df: pd.DataFrame) -> pd.DataFrame:
    """Fact rows named `row` from a frame using OUT_SCHEMA's column names (made
    OUT_SCHEMA rows later, _arrow)."""
    if df.empty:
        return _EMPTY
    return df.assign(row=row)


_EMPTY = pd.DataFrame()


def _run(families):
    def run(pdf: pd.DataFrame) -> pa.Table:
        pl = PartitionLog(pdf)
        tables = [_arrow(f) for fam in families if hasattr(fam, "partition")
                  for f in fam.partition(pl) if len(f)]
        if not tables:
            return OUT_SCHEMA.empty_table()
        out = pa.concat_tables(tables)
        # Rows about this partition name it; facts about another (none yet) keep theirs.
        out = out.set_column(_TOPIC, "topic", pc.fill_null(out["topic"], pl.topic))
        if pl.partition is not None:
            out = out.set_column(_PARTITION, "partition",
                                 pc.fill_null(out["partition"], pl.partition))
        return out
    return run


_TOPIC, _PARTITION = OUT_SCHEMA.get_field_index("topic"), OUT_SCHEMA.get_field_index("partition")


def _arrow(df: pd.DataFrame) -> pa.Table:
    """A family's frame (OUT_SCHEMA's column names, any of them left out) as OUT_SCHEMA
    rows in Arrow: integers exactly (`ints`), strings with None, NaN and pd.NA missing,
    witness lists of {op, role} / {index, role}, columns left out all missing.

    Each frame on its own, not all of a partition's joined in pandas first: strings
    still in a Categorical (taken from the steps) are made by Arrow from the
    categories and codes, without a Python object per row. The rows a partition gives
    are mostly facts with such strings: making them objects, joining them and
    encoding each again took a tenth of the pass (docs/performance.md, "Figures behind
    the code")."""
    n = len(df)
    arrays = []
    for f in OUT_SCHEMA:
        if f.name not in df:
            arrays.append(pa.nulls(n, f.type))
            continue
        col = df[f.name]
        if f.name in _LONGS:
            arrays.append(pa.array(ints(col), type=_I))
        elif f.name == "witnesses":
            arrays.append(pa.array([anomaly.plain_witnesses(v) for v in col], type=f.type))
        elif f.name == "witness_at":
            arrays.append(pa.array([plain_at(v) for v in col], type=f.type))
        elif isinstance(col.dtype, pd.CategoricalDtype):
            codes = col.array.codes
            words = pa.array(col.cat.categories.to_numpy(dtype=object), _S)
            arrays.append(words.take(pa.array(codes, mask=codes < 0)))
        else:
            arrays.append(pa.array(col.to_numpy(dtype=object), _S, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=OUT_SCHEMA)


_ARROW_TYPES = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}.get


def run_all(steps: pd.DataFrame, families) -> pa.Table:
    """Every family on every (topic, partition) of `steps` (OUT_SCHEMA rows)."""
    run = _run(families)
    # Contiguous slices, instead of pandas' groupby over mixed keys. The converter
    # writes each partition's steps together, so usually no sort (a copy of every
    # column) is needed.
    # Neighbours compared by the topics' codes (steps_frame).
    topic = steps["topic"].array.codes
    part = steps["partition"].to_numpy(dtype=float, na_value=-1.0)

    def cuts() -> np.ndarray:
        return np.flatnonzero(np.r_[True, (topic[1:] != topic[:-1]) | (part[1:] != part[:-1])])
    cut: np.ndarray | list[int] = cuts() if len(part) else []
    if len({(topic[c], part[c]) for c in cut}) != len(cut):  # some partition in two places
        order = np.lexsort((part, pd.factorize(topic, use_na_sentinel=False)[0]))
        steps, topic, part = steps.take(order), topic[order], part[order]
        cut = cuts()
    ends = np.r_[cut[1:], len(steps)] if len(part) else []
    tables = [t for t in (run(steps.iloc[a:b]) for a, b in zip(cut, ends)) if t.num_rows]
    return pa.concat_tables(tables) if tables else OUT_SCHEMA.empty_table()


def partition_pass(tables, families):
    """Every family's per-partition rows, on Spark: an RDD of `_packed` values, each of
    the rows of one name (by_row).

    Spark hands out the bucket files, not their rows: each task takes some of the
    files, reads each whole with pyarrow and checks it as the local pass does
    (_bucket_with). A bucket holds whole partitions (checkers/spool.py), so no
    shuffle, and the steps never pass through the JVM, whose Parquet reading and
    Arrow conversion took longer than the checks themselves. As many tasks as Spark's
    default parallelism, not one per file: each task costs tens of milliseconds before
    it does anything (docs/performance.md, "Figures behind the code"), and a task's
    memory is still one file's steps at a time. The task gets the paths as
    data: every Spark worker must be able to read the converted folder at the same
    path (as spark.read.parquet of a local path required already). Absolute, with
    symlinks kept: on a worker the same name may lead to its own mount.

    An RDD of bytes, not a DataFrame: the JVM passes bytes on as they are, where a
    DataFrame's rows (mapInArrow) were made Spark's rows and then Arrow again, which
    made every warm check slower (docs/performance.md, "Figures behind the code", for
    both)."""
    files = [str(f) for f in _bucket_files(Path(tables.dir).absolute())]
    context = tables.spark.sparkContext
    tasks = max(1, min(len(files), context.defaultParallelism))
    kept = kept_columns(families)

    def task(ids):
        for_checking()  # this Python worker checks one bucket after another
        for t in ids:
            # Every tasks-th file: the buckets' sizes run in order (spool._buckets),
            # so each task gets large and small ones alike.
            for path in files[t::tasks]:
                for name, part in by_row(_bucket_with(path, families), kept).items():
                    yield from _packed(part, name)
    # One id per task, in a partition of its own.
    return context.parallelize(range(tasks), tasks).mapPartitions(task)


# The pass's rows cross the JVM as Arrow IPC streams, one bytes value per slice of
# the rows of one name: about half a million fact rows per million events. Compressed,
# because a collect is held to spark.driver.maxResultSize (1 GB by default), which the
# rows of a big history came near when each kept every column (by_row; docs/performance.md,
# "Figures behind the code").
_SLICE = 1 << 20  # rows per value: a JVM byte array must stay under 2 GB
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


def _packed(table: pa.Table, name: str):
    """Arrow IPC streams (bytes), each holding a slice of `table`'s rows, which are
    the rows named `name` (by_row): the stream's schema says so, and how many rows it
    holds, so that they can be told apart and counted without reading them."""
    for start in range(0, table.num_rows, _SLICE):
        rows = table.slice(start, _SLICE)
        rows = rows.replace_schema_metadata({_NAME: name, _ROWS: str(rows.num_rows)})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema, options=_IPC) as writer:
            writer.write_table(rows)
        yield sink.getvalue().to_pybytes()


_NAME, _ROWS = b"onceproof.row", b"onceproof.rows"


class Packed:
    """The rows of one name as `_packed` values, read only when asked for (`table`):
    a finisher reads its facts in its own process, so a check on Spark never makes
    all of them Arrow in the driver (memory and time, most of it the system mapping
    new memory: docs/performance.md, "Figures behind the code")."""

    def __init__(self, values: list[bytes], num_rows: int) -> None:
        self.values = values
        self.num_rows = num_rows

    def table(self) -> pa.Table:
        tables = [pa.ipc.open_stream(value).read_all() for value in self.values]
        return pa.concat_tables(tables).replace_schema_metadata(None)


def whole(rows: pa.Table | Packed) -> pa.Table:
    """Rows of one name as a table, read if they are still packed."""
    return rows.table() if isinstance(rows, Packed) else rows


def unpacked(packed: list[bytes]) -> dict[str, Packed]:
    """The rows that `_packed` values hold, by name again, each name's in the order
    they came (only their schemas read)."""
    named: dict[str, Packed] = {}
    for value in packed:
        meta = pa.ipc.open_stream(value).schema.metadata
        rows = named.setdefault(meta[_NAME].decode(), Packed([], 0))
        rows.values.append(value)
        rows.num_rows += int(meta[_ROWS])
    return named


def kept_columns(families) -> dict[str, tuple[str, ...] | None]:
    """Each name of fact rows some family's finisher reads (its FACTS): the columns
    they read of them (FACT_COLUMNS), or None for all of them; and the unjudged
    counts, which the driver reads (collect)."""
    kept: dict[str, tuple[str, ...] | None] = {UNJUDGED: UNJUDGED_COLUMNS}
    for fam in families:
        columns = getattr(fam, "FACT_COLUMNS", None)
        for name in getattr(fam, "FACTS", ()):
            before = kept.get(name, ())
            kept[name] = (None if before is None or columns is None
                          else tuple(dict.fromkeys((*before, *columns))))
    return kept


def by_row(table: pa.Table, kept: dict[str, tuple[str, ...] | None]) -> dict[str, pa.Table]:
    """A pass's rows (OUT_SCHEMA) by name: the anomalies whole, the facts of each name
    in `kept` (kept_columns) with only `row` and the columns named there, their strings
    dictionary-encoded (arrow.coded); facts no finisher reads are dropped.

    Kept whole, a fact row held all 35 columns, most of them null: near a gigabyte of
    facts in Arrow for a big history, all of it memory the driver (or the check's
    process) touched for the first time, and each finisher's pick of its rows copied
    its columns again (docs/performance.md, "Figures behind the code", for this and
    the strings coded below)."""
    out: dict[str, pa.Table] = {}
    if not table.num_rows:
        return out
    rows = table["row"]
    for name in pc.unique(rows).to_pylist():
        if name != ANOMALY and name not in kept:
            continue
        columns = kept.get(name)
        # The columns picked before the rows: a filter copies every column it keeps.
        picked = table if name == ANOMALY or columns is None else table.select(["row", *columns])
        picked = picked.filter(pc.equal(rows, name))
        # A fact's strings coded where it is made, in the pass's processes: a finisher,
        # which has all of them, would hash millions (cycles' transaction names: an
        # eighth of its time), and made Python objects one per row.
        out[name] = picked if name == ANOMALY else arrow.coded(picked)
    return out


def _bucket_files(directory) -> list[Path]:
    """The steps table's bucket files, in order (each holds whole partitions)."""
    steps = Path(directory) / "steps.parquet"
    return sorted(steps.glob("*.parquet")) if steps.is_dir() else [steps]


def _bucket_with(path, families) -> pa.Table:
    return run_all(read_steps(path), families)


def read_steps(path) -> pd.DataFrame:
    """A bucket file's steps as steps_frame makes them, its strings read as the file's
    dictionaries (their codes are the Categoricals' codes).

    One column at a time, each made pandas before the next is read: read whole, the
    file's Arrow table and the frame made of it were both held at once, and a
    checking worker keeps what it once held (memory.for_checking). By column, a
    worker's peak is lower and its check faster, most of it fewer pages for the system
    to map the first time; reading by column costs a little more CPU to read
    (docs/performance.md, "Figures behind the code")."""
    schema = pq.read_schema(path)
    strings = [f.name for f in schema if f.type == pa.string()]
    file = pq.ParquetFile(path, memory_map=True, read_dictionary=strings, pre_buffer=False)
    return pd.DataFrame({name: _series(arrow.coded(file.read([name], use_threads=False))
                                       .column(0), coded=True)
                         for name in schema.names}, copy=False)


def read_table(path, columns: list[str] | None = None) -> pa.Table:
    """A table file (all columns, or `columns`) in Arrow, its strings read as the
    file's dictionaries (frame_of makes pandas of them without hashing)."""
    strings = [f.name for f in pq.read_schema(path)
               if f.type == pa.string() and (columns is None or f.name in columns)]
    return pq.read_table(path, columns=columns, read_dictionary=strings)


def frame_of(table: pa.Table) -> pd.DataFrame:
    """A table in pandas as read_frame makes it (its strings dictionary-encoded first
    where they are not)."""
    return _frame(arrow.coded(table))


def read_frame(path, columns: list[str] | None = None) -> pd.DataFrame:
    """A table file (all columns, or `columns`) in pandas, as _frame makes it of Arrow:
    strings as Python str objects, missing ones None; nullable integers and booleans.

    The strings are read as the file's dictionaries, and each column made by one numpy
    take of its few distinct strings, rather than decoded to Arrow strings and then
    made Python objects one by one (deduplicated by hashing), which takes less CPU
    (docs/performance.md, "Figures behind the code")."""
    return frame_of(read_table(path, columns))


def _frame(table: pa.Table, coded: bool = False) -> pd.DataFrame:
    """A table in pandas: dictionary columns of strings decoded by _decoded (coded:
    Categoricals, _categorical), integers and booleans copied once from Arrow's
    buffers (_masked)."""
    return pd.DataFrame({name: _series(col, coded)
                         for name, col in zip(table.column_names, table.columns)},
                        copy=False)


def _series(col: pa.ChunkedArray, coded: bool) -> pd.Series:
    if pa.types.is_dictionary(col.type) and coded:
        return pd.Series(_categorical(col), copy=False)
    if pa.types.is_dictionary(col.type):
        return pd.Series(_decoded(col), dtype=object, copy=False)
    if col.type in _MASKED:
        return pd.Series(_masked(col), copy=False)
    return col.to_pandas()


_MASKED = {pa.int64(): (np.int64, pd.arrays.IntegerArray),
           pa.bool_(): (np.bool_, pd.arrays.BooleanArray)}


def _masked(col: pa.ChunkedArray) -> pd.api.extensions.ExtensionArray:
    """An int64 or boolean column as pandas' nullable array, its values copied once.

    pandas' own conversion copies each row group's values out of Arrow's buffer, then
    copies them all again to join them: read this way, with less CPU, most of it the
    system's mapping of the second copy. The missing values come from the validity
    bits by numpy, not through an Arrow boolean array, and a chunk all missing (a
    column no step of its kind fills) is not read at all (docs/performance.md,
    "Figures behind the code", for both)."""
    dtype, array = _MASKED[col.type]
    values: np.ndarray = np.empty(len(col), dtype)
    missing = np.zeros(len(col), np.bool_)
    at = 0
    for chunk in col.chunks:
        n = len(chunk)
        part, gone = values[at:at + n], missing[at:at + n]
        at += n
        if chunk.null_count == n:  # a column of one kind of step only, mostly
            part[:] = 0
            gone[:] = True
            continue
        if dtype is np.bool_:  # bits, unpacked
            part[:] = _bits(chunk.buffers()[1], chunk.offset, n)
        else:  # a view of Arrow's buffer (Arrow itself would make floats of it)
            part[:] = np.frombuffer(chunk.buffers()[1], dtype, n, chunk.offset * part.itemsize)
        if chunk.null_count:
            valid = _bits(chunk.buffers()[0], chunk.offset, n)
            np.logical_not(valid, out=gone)
            part *= valid  # what is under a missing value is not data
    return array(values, missing)


def _bits(buffer: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """n bits of an Arrow bitmap from bit `offset`, as numpy booleans."""
    return np.unpackbits(np.frombuffer(buffer, np.uint8), count=offset + n,
                         bitorder="little")[offset:].view(np.bool_)


def _decoded(col: pa.ChunkedArray) -> np.ndarray:
    """A dictionary column of strings as a numpy object array (None where missing)."""
    parts = []
    for chunk in col.chunks:
        if chunk.null_count == len(chunk):  # a column of one kind of step only, mostly
            parts.append(np.full(len(chunk), None, dtype=object))
            continue
        words = _then_none(chunk.dictionary.to_numpy(zero_copy_only=False))
        parts.append(words[chunk.indices.fill_null(len(words) - 1).to_numpy()])
    if len(parts) == 1:  # no copy
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=object)


def _then_none(words: np.ndarray) -> np.ndarray:
    """The strings, then None: taken at code -1 (or the last place), a missing value."""
    out = np.empty(len(words) + 1, dtype=object)  # np.empty's object is None
    out[:-1] = words
    return out


def _categorical(col: pa.ChunkedArray) -> pd.Categorical:
    """A dictionary column of strings as a pandas Categorical: its codes, and its
    chunks' dictionaries made one.

    The codes are copied once out of Arrow's buffers, into the width pandas keeps for
    that many categories (else it narrows them with a copy of its own), and the
    dictionaries unified only when the row groups' differ: reading the bucket files,
    each holding few distinct strings per column, these cost less CPU
    (docs/performance.md, "Figures behind the code")."""
    if not col.num_chunks:
        return pd.Categorical([], categories=pd.Index([], dtype=object))
    first = col.chunks[0].dictionary
    if not all(chunk.dictionary.equals(first) for chunk in col.chunks[1:]):
        col = col.unify_dictionaries()
        first = col.chunks[0].dictionary
    words = first.to_numpy(zero_copy_only=False)
    n_words = len(words)
    codes = np.empty(len(col), np.int8 if n_words < 127 else np.int16 if n_words < 32767
                     else np.int32)
    at = 0
    for chunk in col.chunks:
        n = len(chunk)
        part = codes[at:at + n]
        at += n
        if chunk.null_count == n:
            part[:] = -1
            continue
        indices = chunk.indices
        part[:] = np.frombuffer(indices.buffers()[1], indices.type.to_pandas_dtype(), n,
                                indices.offset * indices.type.byte_width)
        if chunk.null_count:
            part[~_bits(indices.buffers()[0], indices.offset, n)] = -1
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(pd.Index(words, dtype=object)),
                                     validate=False)


def steps_frame(steps: pa.Table) -> pd.DataFrame:
    """A bucket's steps in pandas, as the per-partition checks take them: strings as
    pandas Categoricals (their codes, and the distinct strings once), not as a Python
    object per step."""
    return _frame(arrow.coded(steps), coded=True)


def _rows_of(steps: pa.Table, families) -> pa.Table:
    return run_all(steps_frame(steps), families)


# A pass's rows, apart: the anomalies (OUT_SCHEMA) as a conformed frame, and the facts
# by name, as by_row keeps them, in Arrow or still packed (see Facts).
Rows = tuple[pd.DataFrame, dict[str, pa.Table | Packed]]


def _apart(named: dict[str, pa.Table] | dict[str, Packed]) -> Rows:
    """A pass's rows by name (by_row, or unpacked) apart: the anomalies as conformed
    pandas, the facts as they are."""
    facts: dict[str, pa.Table | Packed] = dict(named)
    anomalies = facts.pop(ANOMALY, OUT_SCHEMA.empty_table())
    return _plain(_pandas(whole(anomalies))), facts


def _pandas(rows: pa.Table) -> pd.DataFrame:
    """Pandas of OUT_SCHEMA rows in Arrow. It is conformed already but for the witness
    lists (numpy arrays of dicts), which only anomalies hold: conforming facts too cost
    seconds at millions of rows, for nothing."""
    return rows.to_pandas(types_mapper=_ARROW_TYPES, split_blocks=True)


class Facts:
    """The pass's fact rows, each finisher's converted only when it asks for them, in
    its own process (forked.each): at 10M events there are 5M fact rows, and pandas of
    all of them cost more than the finishers' own work."""

    def __init__(self, parts: list[dict[str, pa.Table | Packed]]) -> None:
        """parts: the facts of each bucket (or of all), by name (by_row), in Arrow or
        still packed (unpacked)."""
        self._parts = parts

    def __len__(self) -> int:
        return sum(t.num_rows for p in self._parts for t in p.values())

    def of(self, names: tuple[str, ...], columns: tuple[str, ...] | None = None,
           coded: tuple[str, ...] = ()) -> pd.DataFrame:
        """The fact rows named one of `names` (OUT_SCHEMA's columns that by_row kept of
        them, conformed), each name's in the order they came; with `columns`, only
        those and `row`. The string columns named in `coded` come as Categoricals
        (each distinct string made a Python object once, not once per row)."""
        picked = [whole(p[name]) for name in names for p in self._parts if name in p]
        if columns is not None:
            picked = [t.select(["row", *columns]) for t in picked]
        if not picked:
            empty = OUT_SCHEMA.empty_table()
            return _pandas(empty if columns is None else empty.select(["row", *columns]))
        rows = pa.concat_tables(picked)
        # Their strings come coded (by_row): each column made by a take of its words,
        # or kept as codes.
        return pd.DataFrame({name: _series(col, coded=name in coded)
                             for name, col in zip(rows.column_names, rows.columns)},
                            copy=False)


def bucket_rows(families) -> Callable[[pa.Table], Rows]:
    """The families' per-partition rows of one bucket's steps, apart (where they are
    made: a worker's rows are split before they travel, not all together after)."""
    kept = kept_columns(families)

    def rows(steps: pa.Table) -> Rows:
        return _apart(by_row(_rows_of(steps, families), kept))
    return rows


def local_pass(directory, families) -> list[Rows]:
    """The same pass without Spark, in this machine's processes (one per core,
    checkers/forked.py): on one machine, Spark would run the same pandas on the same
    cores after starting a JVM."""
    # One bucket file at a time per process (each holds whole partitions,
    # checkers/spool.py), as Spark's tasks get them: memory is a bucket's steps, not
    # the whole table's.
    files = _bucket_files(directory)
    kept = kept_columns(families)
    return forked.each(lambda f: _apart(by_row(_bucket_with(f, families), kept)), files,
                       sum(pq.ParquetFile(f).metadata.num_rows for f in files))


def _gathered(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return _pandas(OUT_SCHEMA.empty_table())
    if len(frames) > 1:
        return pd.concat(frames, ignore_index=True)
    # One frame, usually numbered 0.. already (Arrow's): reset_index would copy every
    # column, and join the blocks that to_pandas kept apart.
    one = frames[0]
    return one if one.index.equals(pd.RangeIndex(len(one))) else one.reset_index(drop=True)


def collect(tables, families, local: bool = False, rows: list[Rows] | None = None,
            history=None) -> pd.DataFrame:
    """All anomalies the families find (anomaly.COLUMNS), as pandas on the driver; with
    local=True the per-partition pass runs in pandas here instead of on Spark, unless
    it ran already: `rows`, bucket_rows of every bucket (store.convert_each), of the
    steps of `history` (its JSONL), which names some witnesses then."""
    if rows is None and local:
        rows = local_pass(tables.dir, families)
    if rows is None:
        rows = [_apart(unpacked(partition_pass(tables, families).collect()))]
    fact_rows = Facts([facts for _, facts in rows])

    ops = Path(tables.dir) / "ops.parquet"
    faults = Path(tables.dir) / "faults.parquet"

    def read_faults(columns: list[str]) -> pa.Table | None:
        return read_table(faults, columns) if faults.exists() else None

    def finished(fam) -> pd.DataFrame | None:
        if hasattr(fam, "from_ops"):
            done = fam.from_ops(lambda columns: read_table(ops, columns), read_faults)
        else:
            facts = fact_rows.of(fam.FACTS, getattr(fam, "FACT_COLUMNS", None),
                                 getattr(fam, "FACT_CODED", ()))
            # A finisher that judges its facts against ops reads them when it has some.
            done = (fam.finish(facts, lambda columns: read_frame(ops, columns))
                    if hasattr(fam, "OPS_COLUMNS") else fam.finish(facts))
        return conform(done) if len(done) else None

    # The families' cross-partition work is independent: one process per core too.
    last = [fam for fam in families if hasattr(fam, "from_ops") or hasattr(fam, "finish")]
    found = [a for a, _ in rows] + forked.each(finished, last, len(fact_rows))
    result = _gathered([f for f in found if f is not None])
    result = _resolve(result, tables.dir, history)
    result = result[list(anomaly.COLUMNS)].reset_index(drop=True)
    result.attrs["unjudged"] = unjudged_counts(fact_rows.of((UNJUDGED,), UNJUDGED_COLUMNS))
    return result


def unjudged_counts(rows: pd.DataFrame) -> list[dict]:
    """The unjudged fact rows summed: [{rule, count, why}], in the order of the
    registry's types (a rule's first type)."""
    if not len(rows):
        return []
    sums = rows.groupby(["type", "detail"], sort=False)["value"].sum()
    out = [{"rule": str(rule), "count": int(n), "why": str(why)}
           for (rule, why), n in sums.items() if n]

    from .registry import TYPES  # it imports the families, which import this module

    def order(u: dict) -> tuple:
        first = u["rule"].split(",")[0].strip()
        return (TYPES.index(first) if first in TYPES else len(TYPES),
                u["rule"], u["why"])
    return sorted(out, key=order)


def find(tables, families):
    """The families' anomalies as a Spark DataFrame of anomaly.SCHEMA."""
    spark = tables.spark
    found = collect(tables, families)
    if found.empty:
        return anomaly.empty(spark)
    longs = [c in _LONGS for c in anomaly.COLUMNS]
    lists = [c == "witnesses" for c in anomaly.COLUMNS]
    rows = [tuple([(w["op"], w["role"]) for w in v] if is_list and v is not None
                  else None if is_list or pd.isna(v) else int(v) if is_long else v
                  for v, is_long, is_list in zip(r, longs, lists))
            for r in found.itertuples(index=False, name=None)]
    from .spark import struct_type
    return spark.createDataFrame(rows, struct_type(anomaly.SCHEMA))
