"""How the checkers run: one shuffle, one pandas pass per partition, then the driver.

Spark's fixed cost is per stage, and most anomalies are properties of one partition.
So the whole history becomes one table of steps (checkers/partlog.py), shuffled once
by (topic, partition); one groupBy().applyInPandas runs every family's per-partition
check on each partition's steps. Each family's `partition(pl)` yields anomaly rows and,
for what crosses partitions (a transaction's writes in several partitions, dependency
edges, pipeline outputs), small *fact* rows. The driver collects that one output and
each family's `finish(facts)` turns facts into the remaining anomalies.

A family is a module with `TYPES`, `partition(pl) -> list[pandas frames]` and
optionally `finish(facts) -> pandas frame`; its frames use OUT_SCHEMA, built with
`anomalies(...)` and `facts(...)` below.
"""
from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType

from . import anomaly
from .partlog import PartitionLog, log

ANOMALY = "anomaly"
_FACT_COLUMNS = (("row", StringType()), ("txn2", StringType()), ("kind", StringType()),
                 ("n1", LongType()), ("n2", LongType()), ("a1", LongType()),
                 ("a2", LongType()), ("a3", LongType()), ("a4", LongType()),
                 ("a5", LongType()), ("a6", LongType()))
OUT_SCHEMA = StructType(list(anomaly.SCHEMA.fields)
                        + [StructField(n, t) for n, t in _FACT_COLUMNS])
_LONGS = {f.name for f in OUT_SCHEMA if isinstance(f.dataType, LongType)}


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """df with exactly OUT_SCHEMA's columns, in nullable dtypes."""
    out = {}
    n = len(df)
    for f in OUT_SCHEMA:
        col = df[f.name] if f.name in df else pd.Series([None] * n, index=df.index)
        if f.name in _LONGS:
            out[f.name] = ints(col)
        else:
            out[f.name] = col.astype(object).where(col.notna(), None)
    return pd.DataFrame(out, index=df.index).reset_index(drop=True)


def ints(col: pd.Series) -> pd.arrays.IntegerArray:
    """A column of integers or missing values as Int64, exactly (no trip through float
    for Python ints)."""
    if isinstance(col.dtype, pd.Int64Dtype):
        return col.array
    if col.dtype == object:
        return pd.array([None if x is None or x is pd.NA or (isinstance(x, float) and x != x)
                         else int(x) for x in col], dtype="Int64")
    return col.astype("Int64").array


def anomalies(records: list[dict]) -> pd.DataFrame:
    """Anomaly rows from dicts of anomaly.COLUMNS."""
    df = pd.DataFrame.from_records(records, columns=list(anomaly.COLUMNS))
    df["row"] = ANOMALY
    return conform(df)


def facts(row: str, df: pd.DataFrame) -> pd.DataFrame:
    """Fact rows named `row` from a frame using OUT_SCHEMA's column names."""
    df = df.copy()
    df["row"] = row
    return conform(df)


def _run(families):
    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        pl = PartitionLog(pdf)
        frames = []
        for fam in families:
            for f in fam.partition(pl):
                if len(f):
                    f = f.copy()
                    f["topic"] = f["topic"].where(f["topic"].notna(), pl.topic)
                    f["partition"] = f["partition"].fillna(pl.partition) \
                        if pl.partition is not None else f["partition"]
                    frames.append(f)
        if not frames:
            return conform(pd.DataFrame({"row": []}))
        return conform(pd.concat(frames, ignore_index=True))
    return run


def partition_pass(tables, families) -> DataFrame:
    """Every family's per-partition rows (OUT_SCHEMA), from one shuffle of the log."""
    return log(tables).groupBy("topic", "partition").applyInPandas(_run(families), OUT_SCHEMA)


def local_pass(directory, families) -> pd.DataFrame:
    """The same pass without Spark: the steps table grouped by pandas in this process.
    For small histories, where Spark's fixed cost is most of the time, and as the
    plain-pandas baseline the benchmarks compare Spark against."""
    import pyarrow.parquet as pq
    from pathlib import Path
    steps = pq.read_table(Path(directory) / "steps.parquet").to_pandas()
    run = _run(families)
    frames = [run(g) for _, g in steps.groupby(["topic", "partition"], dropna=False, sort=False)]
    return pd.concat([f for f in frames if len(f)] or [conform(pd.DataFrame({"row": []}))],
                     ignore_index=True)


def collect(tables, families, local: bool = False) -> pd.DataFrame:
    """All anomalies the families find (anomaly.COLUMNS), as pandas on the driver; with
    local=True the per-partition pass runs in pandas here instead of on Spark."""
    out = local_pass(tables.dir, families) if local else \
        partition_pass(tables, families).toPandas()
    out = conform(out) if len(out) else conform(pd.DataFrame({"row": []}))
    is_anomaly = (out["row"] == ANOMALY).to_numpy(dtype=bool)
    found = [out[is_anomaly]]
    fact_rows = out[~is_anomaly].reset_index(drop=True)
    for fam in families:
        finish = getattr(fam, "finish", None)
        if finish is not None:
            found.append(conform(finish(fact_rows)))
    result = pd.concat([f for f in found if len(f)] or [found[0]], ignore_index=True)
    return result[list(anomaly.COLUMNS)].reset_index(drop=True)


def find(tables, families) -> DataFrame:
    """The families' anomalies as a Spark DataFrame of anomaly.SCHEMA."""
    spark = tables.spark
    found = collect(tables, families)
    if found.empty:
        return anomaly.empty(spark)
    rows = [tuple(None if pd.isna(v) else v for v in r)
            for r in found.itertuples(index=False, name=None)]
    return spark.createDataFrame(rows, anomaly.SCHEMA)
