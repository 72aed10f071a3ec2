"""A Kafka Streams application, judged from its input and output topics alone:
streams_duplicate_output, streams_lost_input, streams_uncommitted_input, wrong_fold.

An application's own reads, writes, transactions and offset commits happen inside
Kafka Streams, where the history cannot see them. What it can see: the application's
`streams` ops (run/jvm.py), which declare its group (its application.id), its input
and output topics and its topology; the final reads of both topics (read_committed,
every record the log holds visible); and the final fetch of the group's committed
offsets, which the harness records as a final streams op (not a fetch_offsets: no op
of the history committed them, so the groups checks have nothing to hold them to).
So each output names its input in its own value (docs/history.md, "Streams
outputs"): the input's value in the high 32 bits, and for the fold topology, in the
low 32, the count (high 16) and sum (low 16), both mod 2^16, of the values of the
input's partition the application had folded, including that input.

From those alone:
- each committed input below the group's final committed offset has one output, no
  more (no fewer: streams_lost_input; more: streams_duplicate_output);
- each output comes from a committed input (streams_uncommitted_input);
- a fold's output carries the count and sum of exactly the committed inputs up to its
  own in their partition (wrong_fold): the count of a partition's committed records
  up to an offset is that record's rank among the final reads of the partition, which
  read it from its beginning.

What this cannot see: when the application read an input, in which transaction it
wrote an output, or what it committed when (an output missing above the committed
offset is in flight, not lost).

Per partition, the facts are the final reads' records of values no send wrote (a
candidate output), and, of a partition where a final streams op found an application's
committed offset, its final reads' records with their ranks and running sums (the
inputs) and that offset. The finisher keeps the outputs of the topics the streams ops
declare.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pandas as pd

from onceproof.history.format import STREAMS

from . import engine
from .anomaly import AT, VIOLATION, Anomaly, define, fills, num, witnesses
from .partlog import PartitionLog, equals
from .tables import READ_COMMITTED

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("streams_duplicate_output", "streams", """
       One input value is the source of two or more outputs, visible to read_committed
       readers, in the output topic of an application the history declares (a streams
       op) and whose own reads and writes it does not hold: the application processed
       the input twice, and both results were committed.""",
       fills(**AT, op="the final poll that read the second output", offset="the second output's",
             value="the input's", txn="", detail="every output of that input"),
       on_driver=True,
       roles={"output reader": "the final poll that read each output (`op` reads the second)",
              "application": "the application's first streams op"}),
    define("streams_lost_input", "streams", """
       An input record, visible to read_committed readers, below the offset that an
       application's group had committed in its partition at the end (as the final
       streams op fetched them), that no visible output of that application names as its
       source. Assumes each input yields an output.""",
       fills(**AT, op="the final streams op, which fetched the group's offsets",
             offset="the input's",
             value="the input's", txn="", detail="the offset committed past it"),
       on_driver=True,
       roles={"fetch": "the final streams op, which fetched the offsets of the application's "
                       "group",
              "input reader": "the final poll that read the input",
              "application": "the application's first streams op"}),
    define("streams_uncommitted_input", "streams", """
       An output, visible to read_committed readers in an application's output topic,
       whose source is no record visible to read_committed readers of its input topic:
       the application processed a record of an aborted transaction, or one no log
       holds.""",
       fills(**AT, op="the final poll that read the output", offset="the output's",
             value="the input it names", txn="", detail=""),
       on_driver=True,
       roles={"output reader": "the final poll that read the output",
              "application": "the application's first streams op"}),
    define("wrong_fold", "streams", """
       An output of an application with the fold topology whose count and sum (both mod
       2^16) are not those of exactly the records visible to read_committed readers in
       its source's input partition up to and including its source, each once: the
       state it folded into lost an input, counted one twice, or was rolled back without
       its outputs.""",
       fills(**AT, op="the final poll that read the output", offset="the output's",
             value="the input it names", txn="", detail="the count and sum it has and should have"),
       on_driver=True,
       roles={"output reader": "the final poll that read the output",
              "input reader": "the final poll that read its input",
              "application": "the application's first streams op"}),
)
TYPES = tuple(a.name for a in ANOMALIES)
OUTPUT, INPUT, COMMITTED_AT = "app_output", "app_input", "app_offset"
FACTS = (OUTPUT, INPUT, COMMITTED_AT)
FACT_COLUMNS = ("kind", "topic", "partition", "process", "op", "offset", "value",
                "a1", "a2")
OPS_COLUMNS = ("op", "f", "group", "input", "output", "topology")
FOLD = "fold"
LOW16 = 0xFFFF


def packed(source: int, count: int = 0, total: int = 0) -> int:
    """An output's value: its source, and a fold's count and sum, as docs/history.md
    lays them out (the agent makes them: run/java/OnceproofAgent.java, Fold)."""
    return source << 32 | (count & LOW16) << 16 | (total & LOW16)


def _final_reads(pl: PartitionLog) -> pd.DataFrame:
    """The final read_committed reads, each offset once, in offset order."""
    r = pl.reads
    final = (r["final"].fillna(False).to_numpy(dtype=bool)
             & equals(r["isolation"], READ_COMMITTED)
             & r["offset"].notna().to_numpy(dtype=bool) & r["value"].notna().to_numpy(dtype=bool))
    got = r[final]
    return got.iloc[np.argsort(got["offset"].to_numpy(dtype=np.int64), kind="stable")].drop_duplicates(
        "offset")


def _app_offsets(pl: PartitionLog) -> pd.DataFrame:
    """The offsets the final streams ops found the applications' groups had committed."""
    o = pl.offsets
    if o.empty:
        return o
    # Only the final streams op has offsets: an application's own streams ops do not.
    return o[equals(o["f"], STREAMS) & o["offset"].notna().to_numpy(dtype=bool)]


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    fetched = _app_offsets(pl)
    if fetched.empty and pl.reads["w_found"].fillna(False).to_numpy(dtype=bool).all():
        return []  # most partitions: nothing here but what the history's ops wrote
    reads = _final_reads(pl)
    if reads.empty:
        return []
    out = []
    unwritten = ~reads["w_found"].fillna(False).to_numpy(dtype=bool)
    if unwritten.any():
        o = reads[unwritten]
        out.append(engine.facts(OUTPUT, pd.DataFrame({
            "process": o["process"], "op": o["op"], "offset": o["offset"], "value": o["value"]})))
    if len(fetched):
        values = reads["value"].to_numpy(dtype=np.int64)
        out.append(engine.facts(INPUT, pd.DataFrame({
            "process": reads["process"], "op": reads["op"], "offset": reads["offset"],
            "value": reads["value"], "a1": np.arange(1, len(reads) + 1),
            "a2": np.cumsum(values & LOW16) & LOW16})))
        out.append(engine.facts(COMMITTED_AT, pd.DataFrame({
            "kind": fetched["group"], "process": fetched["process"], "op": fetched["op"],
            "a1": fetched["offset"]})))
    return out


def _apps(read: Callable) -> pd.DataFrame:
    """Each application the streams ops declare, once, with its first op."""
    ops = read(list(OPS_COLUMNS))
    ops = ops[(ops["f"] == STREAMS).to_numpy(dtype=bool)]
    return ops.sort_values("op").drop_duplicates(["group", "input", "output", "topology"])


def finish(facts: pd.DataFrame, read: Callable) -> pd.DataFrame:
    if facts.empty:
        return engine.anomalies([])
    apps = _apps(read)
    found: list[dict] = []
    for app in apps.itertuples(index=False):
        outs = facts[equals(facts["row"], OUTPUT) & equals(facts["topic"], app.output)].copy()
        outs["source"] = outs["value"].to_numpy(dtype=np.int64) >> 32
        ins = facts[equals(facts["row"], INPUT) & equals(facts["topic"], app.input)]
        ins = ins.drop_duplicates(["partition", "offset"])
        done = facts[equals(facts["row"], COMMITTED_AT) & equals(facts["topic"], app.input)
                     & equals(facts["kind"], app.group)]
        found += (_duplicates(app, outs) + _lost(app, ins, outs, done)
                  + _uncommitted(app, ins, outs)
                  + (_wrong_folds(app, ins, outs) if app.topology == FOLD else []))
    return engine.anomalies(found)


def _at(x) -> dict:
    return {"process": x["process"], "op": num(x["op"]), "topic": x["topic"],
            "partition": num(x["partition"]), "offset": num(x["offset"]),
            "severity": VIOLATION}


def _duplicates(app, outs: pd.DataFrame) -> list[dict]:
    """streams_duplicate_output: an input value named as source by two or more
    visible outputs of the application."""
    many = outs[outs["source"].duplicated(keep=False)].sort_values(["source", "topic", "partition",
                                                                     "offset"])
    found = []
    for source, g in many.groupby("source", sort=True):
        x = g.iloc[1]
        found.append({**_at(x), "type": "streams_duplicate_output",
                      "value": int(source), "txn": None,
                      "witnesses": witnesses((x["op"], "output reader"),
                                             *((o, "output reader") for o in g["op"]),
                                             (app.op, "application")),
                      "detail": f"input value {int(source)} has {len(g)} committed outputs of "
                                f"application {app.group} in {app.output}, at "
                                + ", ".join(f"{p}/{num(o)}" for p, o in zip(g["partition"], g["offset"]))})
    return found


def _lost(app, ins: pd.DataFrame, outs: pd.DataFrame, done: pd.DataFrame) -> list[dict]:
    """streams_lost_input: a committed input below the group's final committed offset
    in its partition that no visible output names as its source."""
    if done.empty or ins.empty:
        return []
    upto = dict(zip(done["partition"].to_numpy(dtype=np.int64), done["a1"].to_numpy(dtype=np.int64)))
    fetch = dict(zip(done["partition"].to_numpy(dtype=np.int64), zip(done["op"], done["process"])))
    part = ins["partition"].to_numpy(dtype=np.int64)
    offset = ins["offset"].to_numpy(dtype=np.int64)
    below = offset < np.array([upto.get(p, -1) for p in part], dtype=np.int64)
    missing = below & ~np.isin(ins["value"].to_numpy(dtype=np.int64), outs["source"].to_numpy())
    return [{**_at(x), "type": "streams_lost_input", "op": num(fetch[int(x["partition"])][0]),
             "process": fetch[int(x["partition"])][1], "value": num(x["value"]), "txn": None,
             "witnesses": witnesses((fetch[int(x["partition"])][0], "fetch"), (x["op"], "input reader"),
                                    (app.op, "application")),
             "detail": f"application {app.group} committed offset {upto[int(x['partition'])]} of "
                       f"{app.input}/{num(x['partition'])}, past input value {num(x['value'])} at "
                       f"offset {num(x['offset'])}, but no committed output in {app.output} names it"}
            for _, x in ins[missing].sort_values(["partition", "offset"]).iterrows()]


def _uncommitted(app, ins: pd.DataFrame, outs: pd.DataFrame) -> list[dict]:
    """streams_uncommitted_input: a visible output whose source is no visible input."""
    stray = outs[~np.isin(outs["source"].to_numpy(), ins["value"].to_numpy(dtype=np.int64))]
    return [{**_at(x), "type": "streams_uncommitted_input",
             "value": int(x["source"]), "txn": None,
             "witnesses": witnesses((x["op"], "output reader"), (app.op, "application")),
             "detail": f"output at {app.output}/{num(x['partition'])} offset {num(x['offset'])} "
                       f"names input value {int(x['source'])}, which no committed record of "
                       f"{app.input} holds"}
            for _, x in stray.sort_values(["partition", "offset"]).iterrows()]


def _wrong_folds(app, ins: pd.DataFrame, outs: pd.DataFrame) -> list[dict]:
    """wrong_fold: a fold output whose count and sum are not its source's rank and
    running sum in its input partition (mod 2^16)."""
    joined = outs.merge(pd.DataFrame({"source": ins["value"].to_numpy(dtype=np.int64),
                                      "rank": ins["a1"].to_numpy(dtype=np.int64),
                                      "total": ins["a2"].to_numpy(dtype=np.int64),
                                      "in_op": ins["op"].to_numpy(),
                                      "in_partition": ins["partition"].to_numpy(dtype=np.int64)}),
                        on="source")
    has = joined["value"].to_numpy(dtype=np.int64) & 0xFFFFFFFF
    rank, total = (joined[c].to_numpy(dtype=np.int64) for c in ("rank", "total"))
    should = (rank & LOW16) << 16 | total
    wrong = joined[has != should]
    return [{**_at(x), "type": "wrong_fold", "value": int(x["source"]),
             "txn": None,
             "witnesses": witnesses((x["op"], "output reader"), (x["in_op"], "input reader"),
                                    (app.op, "application")),
             "detail": f"output at {app.output}/{num(x['partition'])} offset {num(x['offset'])} "
                       f"folds input value {int(x['source'])} of {app.input}/{int(x['in_partition'])} "
                       f"with count {int(x['value']) >> 16 & LOW16} and sum {int(x['value']) & LOW16}; "
                       f"the committed inputs up to it give count {int(x['rank']) & LOW16} and sum "
                       f"{int(x['total'])} (mod 2^16)"}
            for _, x in wrong.sort_values(["partition", "offset"]).iterrows()]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
