"""Consume-transform-produce pipelines: duplicate_output, lost_input.

An output record names the input value it was derived from in its `source` field.
Output is *definitely committed* when its write's status is committed (its send was ok
in a committed transaction, checkers/txn_status.py counting as committed an unknown one that
a read_committed poll saw), or its transaction committed and a read_committed poll
returned the record itself, whatever its send's outcome (a send that ended in info,
say after a flush timeout, may still have appended it). Output *may be committed* when
its status is committed or unknown.

Each consumer group is a pipeline of its own: an output belongs to the groups whose
offsets its transaction sent (send_offsets), and an input to the group that committed
past it. Two groups that each turn an input into one output are no duplicate, and one
group's output does not stand for another's lost one. An output whose transaction sent
no offsets (or that has none) belongs to no known group: it counts with every group.
A group whose send_offsets say `pipeline: false` (an rw_txn's, which reads and writes
in one transaction but does not turn each input into one output) is no pipeline:
neither anomaly judges its offsets.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pandas as pd

from onceproof.history.format import SEND_OFFSETS

from . import engine
from .anomaly import AT, VIOLATION, Anomaly, define, fills, num, witnesses
from .partlog import VIS_RC, PartitionLog, equals, row_at
from .tables import COMMITTED, READ_COMMITTED, UNKNOWN

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("duplicate_output", "pipeline", """
       One input value is the source of two or more definitely committed outputs in one
       output topic, of one consumer group: an output is of the groups its transaction
       sent offsets for, and one whose transaction sent none counts with every group.""",
       fills(**AT, op="the second output's send", offset="", value="", txn="",
             detail="every output of that input"),
       on_driver=True,
       roles={"output": "the send of each definitely committed output of the input (`op` is the "
                        "second)",
              "commit": "the commit_txn of each output's transaction (the one that completed ok, "
                        "else those that may have committed it)",
              "input poll": "each poll in an output's transaction that returned the input",
              "input writer": "the send of the input, when a committed send_offsets went past it"}),
    define("lost_input", "pipeline", """
       An input record, visible to read_committed readers, at an offset a group committed
       past with send_offsets in a committed transaction (and at or after the lowest
       offset that group's pipelines read in that partition in a transaction, or any
       pipeline's when no poll names the group), that no output of that group (or of a
       transaction that sent no offsets) which may be committed names as its source.
       Assumes each input yields an output.""",
       fills(**AT, op="the send_offsets", offset="the input's", value="the input's",
             txn="the send_offsets' transaction", detail=""),
       on_driver=True,
       roles={"send_offsets": "the send_offsets that committed past the input",
              "commit": "the commit_txn of the send_offsets' transaction (the one that completed "
                        "ok, else those that may have committed it)",
              "input writer": "the send of the input"}),
)
TYPES = tuple(a.name for a in ANOMALIES)
OUTPUT, INPUT, TXN_GROUP = "output", "input", "txn_group"
FACTS = (OUTPUT, INPUT, TXN_GROUP)  # the fact rows finish reads (checkers/engine.py)
FACT_COLUMNS = ("kind", "topic", "partition", "process", "op", "offset", "value", "txn",
                "a1", "a2", "a3")  # and only these columns of them


def _outputs(pl: PartitionLog) -> pd.DataFrame:
    """One fact per output record; kind = its status, or committed when its transaction
    committed and a read_committed poll returned it (its send's outcome aside)."""
    is_out = (pl.writes["source"].notna() & pl.writes["value"].notna()).to_numpy(dtype=bool)
    w = pl.writes[is_out]
    # The offset from the ack, else from a read of the record.
    offset = pl.write_bounds["known"][is_out].round().astype("Int64").to_numpy()
    r = pl.reads
    rc_values = r.loc[(r["isolation"] == READ_COMMITTED).fillna(False).to_numpy(dtype=bool),
                      "value"].dropna().to_numpy(dtype=np.int64)
    read_rc = np.isin(w["value"].to_numpy(dtype=np.int64), rc_values)
    seen = (read_rc & (w["txn_outcome"] == COMMITTED).fillna(False).to_numpy(dtype=bool)
            & (w["type"] != "fail").fillna(False).to_numpy(dtype=bool))
    kind = np.where(seen, COMMITTED, w["status"].to_numpy(dtype=object))
    return engine.facts(OUTPUT, pd.DataFrame({
        "process": w["process"], "op": w["op"], "offset": offset, "value": w["value"],
        "txn": w["txn"], "kind": kind, "a1": w["source"], "a2": w["invoke_index"]}))


def _inputs(pl: PartitionLog) -> list[pd.DataFrame]:
    """Per group: one fact per input record its latest committed send_offsets went
    past, from the lowest offset the group's pipelines read in a transaction (any
    pipeline's, when no read names the group): offset, value, a3 = its send; the
    send_offsets as process, op, txn, kind = group, a1 = offset."""
    o = pl.offsets
    sent = o[equals(o["f"], SEND_OFFSETS) & equals(o["status"], COMMITTED)
             & o["offset"].notna().to_numpy(dtype=bool)]
    r = pl.reads
    in_txn = r["txn"].notna().to_numpy(dtype=bool)
    if sent.empty or not in_txn.any():
        return []
    rl = pl.read_log
    # Each value's writer, as the read the read log kept for its offset names it: every
    # read of a value names the same one (the converter joins them by value).
    writers = engine.ints(pl.reads["w_op"]).take(pl.read_log_reads)
    visible = (rl["vis"] == VIS_RC).to_numpy(dtype=bool)
    offsets = rl["offset"]
    out = []
    for group in sent["group"].dropna().unique():
        mine = sent[equals(sent["group"], group)]
        c = row_at(mine, int(np.argmax(mine["offset"].to_numpy(dtype=float))))
        by_group = in_txn & equals(r["group"], group)
        start = r["offset"][by_group if by_group.any() else in_txn].min()
        is_input = (visible & (offsets >= start).to_numpy(dtype=bool)
                    & (offsets < c["offset"]).to_numpy(dtype=bool))
        inputs = rl[is_input]
        out.append(engine.facts(INPUT, pd.DataFrame({
            "offset": inputs["offset"], "value": inputs["value"], "process": c["process"],
            "op": c["op"], "txn": c["txn"], "kind": c["group"], "a1": c["offset"],
            "a3": pd.Series(writers[is_input], index=inputs.index)})))
    return out


def _txn_groups(pl: PartitionLog) -> pd.DataFrame:
    """One fact per (transaction, group) a send_offsets here names, whatever its
    outcome: txn, kind = group."""
    o = pl.offsets
    sent = o[equals(o["f"], SEND_OFFSETS) & o["txn"].notna().to_numpy(dtype=bool)
             & o["group"].notna().to_numpy(dtype=bool)]
    pairs = pd.DataFrame({"txn": sent["txn"].astype(object), "kind": sent["group"].astype(object)})
    return engine.facts(TXN_GROUP, pairs.drop_duplicates())


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    out = [*_inputs(pl), _txn_groups(pl)] if len(pl.offsets) else []
    if pl.writes["source"].notna().any():
        out.append(_outputs(pl))
    return out


def _group_pairs(facts: pd.DataFrame) -> pd.DataFrame:
    """txn, group: each transaction's groups, those its send_offsets named (TXN_GROUP
    facts), once each (a transaction's send_offsets are in each partition they name)."""
    pairs = facts.iloc[np.flatnonzero(equals(facts["row"], TXN_GROUP))]
    return pd.DataFrame({"txn": pairs["txn"].to_numpy(dtype=object),
                         "group": pairs["kind"].to_numpy(dtype=object)}).drop_duplicates()


def _of_one_group(outputs: pd.DataFrame, groups: dict[str, set[str]]) -> pd.DataFrame:
    """The outputs (of one input, in one topic) that one group made twice or more:
    those of the groups their transactions name that have two or more, with those of
    no known group; all of them when no output names a group."""
    named = [groups.get(t, set()) if isinstance(t, str) else set() for t in outputs["txn"]]
    unknown = np.array([not g for g in named])
    counts: dict[str, int] = {}
    for g in named:
        for group in g:
            counts[group] = counts.get(group, 0) + 1
    if not counts:
        return outputs
    twice = {group for group, n in counts.items() if n + unknown.sum() >= 2}
    if not twice:
        return outputs.iloc[:0]
    return outputs[unknown | np.array([bool(g & twice) for g in named])]


def duplicate_outputs(facts: pd.DataFrame) -> list[dict]:
    """duplicate_output: one input value appears as the source of two or more
    definitely committed output records of one output topic, of one consumer group:
    that pipeline processed the input twice and both results were committed. An
    output's groups are those its transaction sent offsets for; one of a transaction
    that sent none counts with every group."""
    # Rows picked by their keys alone, then whole: at 10M events, 2.6M fact rows.
    sure = np.flatnonzero(equals(facts["row"], OUTPUT) & equals(facts["kind"], COMMITTED))
    twice = facts[["topic", "a1"]].iloc[sure].duplicated(keep=False).to_numpy()
    # In the order they were sent, those of one send in log order: the same rows, and the
    # same second output, whatever order the facts come in (from Spark, or by bucket).
    many = facts.iloc[sure[twice]].sort_values(["a2", "partition", "offset", "value"])
    if many.empty:
        return []
    pairs = _group_pairs(facts)
    pairs = pairs[pairs["txn"].isin(many["txn"]).to_numpy(dtype=bool)]
    groups: dict[str, set[str]] = {}
    for txn, group in zip(pairs["txn"], pairs["group"]):
        groups.setdefault(txn, set()).add(group)
    if groups:
        many = pd.concat([_of_one_group(g, groups)
                          for _, g in many.groupby(["topic", "a1"], sort=False)])
        if many.empty:
            return []
    inputs = facts.iloc[np.flatnonzero(equals(facts["row"], INPUT)
                                       & facts["value"].notna().to_numpy(dtype=bool))]
    input_writer = dict(zip(inputs["value"].to_numpy(dtype=np.int64),
                            inputs["a3"].to_numpy(dtype=object, na_value=None)))
    found = []
    for (topic, source), g in many.groupby(["topic", "a1"], sort=True):
        x = g.iloc[1]
        txns = dict.fromkeys(g["txn"].dropna())
        found.append({
            "type": "duplicate_output", "severity": VIOLATION, "process": x["process"],
            "op": num(x["op"]), "topic": topic, "partition": num(x["partition"]),
            "offset": num(x["offset"]), "value": num(x["value"]), "txn": x["txn"],
            "witnesses": witnesses(*((o, "output") for o in g["op"]),
                                   (input_writer.get(int(source)), "input writer")),
            "witness_at": [*(a for t in txns for a in engine.at_outcome(t, "commit")),
                           *(a for t in txns for a in engine.at_polls(source, t, "input poll"))],
            "detail": f"input value {num(source)} has {len(g)} committed outputs in {topic}: "
                      f"values {', '.join(str(num(v)) for v in g['value'])}"})
    return found


def lost_inputs(facts: pd.DataFrame) -> list[dict]:
    """lost_input: an input record, visible to read_committed readers, at an offset a
    pipeline's consumer group committed past (send_offsets in a committed transaction),
    at or after the lowest offset that group's pipelines read in that partition, that
    no output of that group (or of no known group) which may be committed names as its
    source. Assumes every input yields an output."""
    source = facts["a1"]
    named = np.flatnonzero(equals(facts["row"], OUTPUT) & equals(facts["kind"], COMMITTED, UNKNOWN)
                           & source.notna().to_numpy(dtype=bool))
    produced = source.to_numpy(dtype=np.int64, na_value=0)[named]
    inputs = np.flatnonzero(equals(facts["row"], INPUT))
    values = facts["value"].iloc[inputs].to_numpy(dtype=np.int64)
    # Each output's groups (its transaction's); an output of no known group counts
    # for every group.
    made = pd.DataFrame({"value": produced,
                         "txn": facts["txn"].to_numpy(dtype=object)[named]}).merge(
        _group_pairs(facts), on="txn", how="left")
    of_none = made["group"].isna().to_numpy(dtype=bool)
    missing = ~np.isin(values, made["value"].to_numpy(dtype=np.int64)[of_none])
    group_of = facts["kind"].iloc[inputs].to_numpy(dtype=object)
    for group in pd.unique(group_of):
        here = group_of == group
        theirs = made["value"].to_numpy(dtype=np.int64)[
            (made["group"] == group).to_numpy(dtype=bool)]
        missing[here] &= ~np.isin(values[here], theirs)
    lost = facts.iloc[inputs[missing]]
    return [{"type": "lost_input", "severity": VIOLATION, "process": x["process"],
             "op": num(x["op"]), "topic": x["topic"], "partition": num(x["partition"]),
             "offset": num(x["offset"]), "value": num(x["value"]), "txn": x["txn"],
             "witnesses": witnesses((x["op"], "send_offsets"), (x["a3"], "input writer")),
             "witness_at": engine.at_outcome(x["txn"], "commit"),
             "detail": f"group {x['kind']} committed offset {num(x['a1'])} past input value "
                       f"{num(x['value'])} at offset {num(x['offset'])} (send_offsets op "
                       f"{num(x['op'])} in {x['txn']}), but no committed output has it as "
                       f"source"}
            for _, x in lost.sort_values(["topic", "partition", "offset"]).iterrows()]


# The ops' columns the finisher reads: which send_offsets say their group is no pipeline's.
OPS_COLUMNS = ("f", "group", "pipeline")


def _of_pipelines(facts: pd.DataFrame, read: Callable) -> pd.DataFrame:
    """The facts of pipelines' groups: without the groups a send_offsets says are none
    (`pipeline: false`, an rw_txn's), whose input is not each to become an output."""
    grouped = equals(facts["row"], INPUT, TXN_GROUP)
    if not grouped.any():
        return facts
    ops = read(list(OPS_COLUMNS))
    said = (equals(ops["f"], SEND_OFFSETS)
            & ops["pipeline"].eq(False).fillna(False).to_numpy(dtype=bool))
    others = ops["group"][said].dropna().unique()
    if not len(others):
        return facts
    return facts[~(grouped & facts["kind"].isin(others).to_numpy(dtype=bool))]


def finish(facts: pd.DataFrame, read: Callable) -> pd.DataFrame:
    facts = _of_pipelines(facts, read)
    return engine.anomalies(duplicate_outputs(facts) + lost_inputs(facts))


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
