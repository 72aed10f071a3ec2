"""What each offset holds: duplicate, inconsistent_offset, unattributed_read, corrupt_value.

An observation is a (partition, offset, value) that a read returned or a send's ack
reported; both say what the log holds at that offset.
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from onceproof.history.format import STREAMS

from . import engine
from .anomaly import AT, VIOLATION, Anomaly, define, fills, num, witnesses
from .partlog import PartitionLog, each_row, equals, first_of_each
from .tables import FAILED

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("duplicate", "log_values", """
       One written value observed (by a read or a send's ack) at two or more distinct
       offsets of a partition. Each write appends its value once. Not judged in an output
       topic of an application the history declares (streams), whose writes it does not
       hold.""",
       fills(**AT, op="the observation at the second offset", offset="the second offset",
             value="", txn="the observing op's transaction", detail="every offset"),
       roles={"writer": "the send of the value",
              "observer": "an op that observed the value (the send's ack or a poll), one per offset; "
                          "`op` is the one at the second offset"}),
    define("inconsistent_offset", "log_values", """
       One offset of a partition observed holding two different values: the log was
       rewritten under a reader (a truncated and refilled leader).""",
       fills(**AT, op="an observation of the second value", offset="", value="the second value",
             txn="the observing op's transaction", detail="every value observed there"),
       roles={"observer": "an op that observed a value at the offset (a send's ack or a poll), one "
                          "per value",
              "writer": "the send of each value observed there, when one wrote it"}),
    define("unattributed_read", "log_values", """
       A poll returned a value that no send in the history wrote to that partition: no
       send wrote it, or one wrote it to another partition. Not judged in an output topic
       of an application the history declares (streams), whose writes it does not hold.""",
       fills(**AT, op="the poll", offset="", value="", txn="the poll's transaction", detail=""),
       roles={"reader": "the poll",
              "writer": "the send that wrote the value to another partition, when one did"}),
    define("corrupt_value", "log_values", """
       A poll returned a record whose value is not byte for byte the value its identity
       makes: a sized value (a plan's mix.value_bytes) is its identity, its size and
       padding derived from the identity alone (run/values.py), so a reader can verify
       every byte; this one differs from it (a changed byte, a truncated or extended
       value, a header that names no identity or size). The record is judged by the
       identity it names, which may itself be wrong: then it may also be another value's
       duplicate or be unattributed.""",
       fills(**AT, op="the poll", offset="", value="the identity the value names (-1 when it "
             "names none)", txn="the poll's transaction",
             detail="where the value first differs from the one its identity makes"),
       roles={"reader": "the poll",
              "writer": "the send of the value its identity names, when one wrote it"},
       implies=("unattributed_read", "duplicate", "inconsistent_offset")),
)
TYPES = tuple(a.name for a in ANOMALIES)
HELD = "log_values_held"
FACTS = (HELD,)
OPS_COLUMNS = ("f", "output")


def observations(pl: PartitionLog) -> pd.DataFrame:
    """offset and value of every ack and read (numpy-built: this runs on every read)."""
    acks, reads = _sources(pl)
    parts = ((pl.writes, acks), (pl.reads, reads))
    return pd.DataFrame({
        "offset": np.concatenate([f["offset"].to_numpy(dtype=np.int64, na_value=0)[rows]
                                  for f, rows in parts]),
        "value": np.concatenate([f["value"].to_numpy(dtype=np.int64, na_value=0)[rows]
                                 for f, rows in parts]),
        "row": np.r_[np.arange(len(acks)), np.arange(len(reads))],
        "ack": np.r_[np.ones(len(acks), dtype=bool), np.zeros(len(reads), dtype=bool)]})


def _sources(pl: PartitionLog) -> tuple[np.ndarray, np.ndarray]:
    """The acked writes and the reads that observations are made of, in their order, as
    row numbers of pl.writes and pl.reads."""
    def build():
        # Row numbers, not copies: the steps are wide, reads are most of them, and the
        # other columns are read only for the rare anomaly.
        w, r = pl.writes, pl.reads
        return (np.flatnonzero(equals(w["type"], "ok") & w["offset"].notna().to_numpy(dtype=bool)
                               & w["value"].notna().to_numpy(dtype=bool)),
                np.flatnonzero((r["offset"].notna() & r["value"].notna()).to_numpy(dtype=bool)))
    return pl.memo("observed", build)


def _source(pl: PartitionLog, ob) -> pd.Series:
    """The write or read behind an observation row."""
    acks, reads = _sources(pl)
    return (pl.writes.iloc[acks[int(ob["row"])]] if ob["ack"]
            else pl.reads.iloc[reads[int(ob["row"])]])


def _writer(pl: PartitionLog, ob) -> int | None:
    """The send that wrote an observation's value, when one did."""
    row = _source(pl, ob)
    return num(row["op"] if ob["ack"] else row["w_op"])


def _record(type, pl, g, detail) -> dict:
    """The anomaly shown by observations g (one per offset or value), named by its
    second: every observer and every writer witnesses it."""
    ob = g.iloc[1]
    row = _source(pl, ob)
    obs = [g.iloc[i] for i in range(len(g))]
    return {"type": type, "severity": VIOLATION, "process": row["process"],
            "op": num(row["op"]), "offset": num(ob["offset"]), "value": num(ob["value"]),
            "txn": row["txn"], "detail": detail,
            "witnesses": witnesses(*[(_writer(pl, o), "writer") for o in obs],
                                   *[(_source(pl, o)["op"], "observer") for o in obs])}


def duplicates(pl: PartitionLog, obs: pd.DataFrame) -> list[dict]:
    """duplicate: one written value observed at two or more distinct offsets of a
    partition. Each write appends its value once, so a second offset is a second copy
    (a retried send the broker did not deduplicate, for example)."""
    # obs holds each (offset, value) once (partition).
    many = obs[obs["value"].duplicated(keep=False)]
    out = []
    for value, g in many.sort_values("offset").groupby("value", sort=False):
        offsets = g["offset"].astype(int).tolist()
        out.append(_record("duplicate", pl, g,
                           f"value {num(value)} at offsets {', '.join(map(str, offsets))}"))
    return out


def inconsistent(pl: PartitionLog, obs: pd.DataFrame) -> list[dict]:
    """inconsistent_offset: one (topic, partition, offset) observed holding two
    different values. An offset names one record for the life of the log; two values
    mean the log was rewritten under a reader (a truncated and refilled leader, for
    example)."""
    # obs holds each (offset, value) once (partition).
    many = obs[obs["offset"].duplicated(keep=False)]
    out = []
    for offset, g in many.sort_values("value").groupby("offset", sort=False):
        values = g["value"].astype(int).tolist()
        out.append(_record("inconsistent_offset", pl, g,
                           f"offset {num(offset)} observed holding values "
                           f"{', '.join(map(str, values))}"))
    return out


def unattributed(pl: PartitionLog) -> list[dict]:
    """unattributed_read: a poll returned a value that no send in the history wrote to
    this partition (or a record without a value). Values are unique per write, so such
    a record came from outside the test, was corrupted, or landed in a partition its
    producer did not send it to (vis 0 of a found write that did not fail)."""
    r = pl.reads
    found = r["w_found"].fillna(False).to_numpy(dtype=bool)
    elsewhere = found & (r["vis"].fillna(0).to_numpy() == 0) & ~equals(r["status"], FAILED)
    r = r[~found | elsewhere]
    return [_bad_read("unattributed_read", row,
                      f"send op {num(row['w_op'])} wrote to another partition"
                      if pd.notna(row["w_op"]) else "no send wrote")
            for row in each_row(r)]


def _bad_read(type_: str, row, which: str) -> dict:
    """An anomaly of one record read: its reader, and the send that wrote its value
    when one is known."""
    return {"type": type_, "severity": VIOLATION, "process": row["process"],
            "op": num(row["op"]), "offset": num(row["offset"]), "value": num(row["value"]),
            "txn": row["txn"], "witnesses": witnesses(
                (row["op"], "reader"),
                *(((row["w_op"], "writer"),) if pd.notna(row["w_op"]) else ())),
            "detail": f"{row['process']} read value {num(row['value'])} at offset "
                      f"{num(row['offset'])}, which {which}"}


def corrupt(pl: PartitionLog) -> list[dict]:
    """corrupt_value: a poll returned a value that is not byte for byte the one its
    identity makes (its reader found where it differs: run/values.py). A writer's
    value is derived from its identity alone, so the log, a broker or a client
    changed it."""
    r = pl.reads
    if "corrupt" not in r:
        return []
    r = r[r["corrupt"].notna().to_numpy(dtype=bool)]
    return [_bad_read("corrupt_value", row, "differs from the value its identity makes "
                      f"from byte {num(row['corrupt'])} on")
            for row in each_row(r)]


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    # Both checks look only at distinct (offset, value) pairs, each at its first
    # observation: found once for both.
    obs = observations(pl)
    obs = obs[first_of_each(obs["offset"].to_numpy(), obs["value"].to_numpy())]
    # A value's writer matters to these two: held back until the finisher knows which
    # topics an application writes (below).
    held = duplicates(pl, obs) + unattributed(pl)
    return [engine.anomalies(inconsistent(pl, obs) + corrupt(pl)),
            engine.facts(HELD, engine.anomalies(held).drop(columns="row")) if held else engine.anomalies([])]


def finish(facts: pd.DataFrame, read) -> pd.DataFrame:
    """The held rows, but those in an output topic of an application the history
    declares (a streams op): its writes are not in the history, so each of its values
    is unattributed, and two outputs alike are the same value twice
    (checkers/streams.py judges them)."""
    if facts.empty:
        return engine.anomalies([])
    ops = read(list(OPS_COLUMNS))
    outputs = set(ops.loc[(ops["f"] == STREAMS).to_numpy(dtype=bool), "output"].dropna())
    kept = facts[~facts["topic"].isin(outputs).to_numpy(dtype=bool)]
    return kept.drop(columns="row").assign(row=engine.ANOMALY)


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
