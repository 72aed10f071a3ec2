"""What readers may see of transactions: aborted_read, precommitted_read, torn_txn."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from . import coverage, engine
from .anomaly import AT, VIOLATION, Anomaly, define, fills, num, witnesses
from .partlog import PartitionLog, each_row, equals
from .tables import ABORTED, COMMITTED, FAILED, READ_COMMITTED, UNKNOWN

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("aborted_read", "isolation", """
       G1a: a poll (any isolation) returned a value written by a transaction that
       aborted or by a send that failed. A read_uncommitted consumer that sees aborted
       data is reported too: it is the known-bad configuration to catch.""",
       fills(**AT, op="the poll", offset="", value="", txn="the writer's transaction",
             detail=""),
       roles={"reader": "the poll",
              "writer": "the send of the value (the failed send, or the aborted transaction's)",
              "abort": "what ended the writer's transaction aborted: its abort_txn, or its "
                       "commit_txn that failed (when the history has one)"}),
    define("precommitted_read", "isolation", """
       A read_committed poll returned a value of a transaction and completed before that
       transaction's first commit_txn was invoked.""",
       fills(**AT, op="the poll", offset="", value="", txn="the writer's transaction",
             detail="both event indexes"),
       roles={"reader": "the poll",
              "writer": "the send of the value",
              "commit": "the transaction's first commit_txn"}),
    define("torn_txn", "isolation", """
       A committed transaction (a visible write proves an unknown one committed) some of
       whose appended writes read_committed polls returned while others are missing: no
       read_committed poll returned them although a read_committed reader's scan went
       over them.""",
       fills(**AT, op="a missing write's send", offset="", value="", txn="",
             detail="a write that was seen"),
       on_driver=True,
       roles={"missing writer": "the send of a write that read_committed readers went over without "
                                "returning (`op`)",
              "missing reader": "the last poll of a read_committed scan that went over it",
              "scan start": "where that scan began: the seek (or assign) whose position began it, "
                            "else the poll of its first read",
              "seen writer": "the send of a write they returned",
              "reader": "a read_committed poll that returned it",
              "commit": "the commit_txn of the transaction (the one that completed ok, else "
                        "those that may have committed it)"},
       # The missing write, acknowledged in a transaction that committed and gone over by
       # a reader, is lost, and that reader skipped it.
       implies=("lost_write", "poll_skip")),
)
TYPES = tuple(a.name for a in ANOMALIES)
TORN_FACT = "torn"
FACTS = (TORN_FACT,)  # the fact rows finish reads (checkers/engine.py)
FACT_COLUMNS = ("kind", "topic", "partition", "process", "op", "offset", "value", "txn",
                "n1", "n2", "a1", "a2", "a3", "a4", "a5", "a6")  # and only these columns of them


def _read_record(type, r, detail) -> dict:
    return {"type": type, "severity": VIOLATION, "process": r["process"], "op": num(r["op"]),
            "offset": num(r["offset"]), "value": num(r["value"]), "txn": r["w_txn"],
            "detail": detail, "witnesses": witnesses((r["op"], "reader"), (r["w_op"], "writer"))}


def aborted_reads(pl: PartitionLog) -> list[dict]:
    """aborted_read (G1a): a poll returned a value written by a transaction that
    aborted, or by a send that definitely failed. Any isolation counts: a failed send
    is not in the log at all, and a read_uncommitted consumer that sees aborted data is
    exactly the known-bad configuration the harness must catch."""
    r = pl.reads[equals(pl.reads["status"], ABORTED, FAILED)]
    out = []
    for x in each_row(r):
        why = (f"whose send (op {num(x['w_op'])}) failed" if x["status"] == FAILED
               else f"of aborted transaction {x['w_txn']}")
        rec = _read_record("aborted_read", x, f"{x['isolation']} poll read value "
                           f"{num(x['value'])} {why}")
        if x["status"] == ABORTED:
            rec["witness_at"] = engine.at_outcome(x["w_txn"], "abort")
        out.append(rec)
    return out


def precommitted_reads(pl: PartitionLog) -> list[dict]:
    """precommitted_read: a read_committed poll returned a value of a transaction and
    completed before that transaction's commit_txn was even invoked. read_committed
    consumers only see a transaction's records after its commit marker, which no
    broker writes before the producer asks to commit."""
    r = pl.reads
    # The indices (exact integers) first, then the strings of only the few reads left:
    # string comparisons over every read would cost most of the check.
    done, commit = r["complete_index"], r["w_commit_inv"]
    rows = np.flatnonzero((done.to_numpy(dtype=np.int64, na_value=0)
                           < commit.to_numpy(dtype=np.int64, na_value=0))
                          & (done.notna() & commit.notna()).to_numpy(dtype=bool))
    rows = rows[equals(r["isolation"].iloc[rows], READ_COMMITTED)
                & r["w_txn"].iloc[rows].notna().to_numpy(dtype=bool)
                & equals(r["w_txn_outcome"].iloc[rows], COMMITTED, UNKNOWN)]
    out = []
    for x in each_row(r.iloc[rows]):
        rec = _read_record("precommitted_read", x,
                           f"read value {num(x['value'])} of {x['w_txn']} (poll done at index "
                           f"{num(x['complete_index'])}) before its commit_txn was invoked "
                           f"(index {num(x['w_commit_inv'])})")
        rec["witness_at"] = engine.at_events((x["w_commit_inv"], "commit"))
        out.append(rec)
    return out


def torn_facts(pl: PartitionLog) -> pd.DataFrame:
    """Per transaction (committed or unknown) that appended here: how many of its
    writes read_committed polls returned (n1) and how many they went over without
    returning (n2), with one missing write (process, op, offset, value; a5 = the far
    poll of a read_committed scan that went over it, a6 = where that scan began) and one
    seen write (a1 = offset, a2 = value, a3 = its send, a4 = a read_committed poll of
    it) as examples."""
    cov = coverage.of(pl)
    keep = (cov["txn"].notna().to_numpy(dtype=bool)
            & equals(cov["txn_outcome"], COMMITTED, UNKNOWN))
    # A write was appended when its send was ok, or when a read returned it from a send
    # that did not fail (one that ended in info); only an ok one is missed for sure.
    ok = equals(cov["type"], "ok")
    seen = cov["seen_rc"].to_numpy(dtype=bool) & ~equals(cov["type"], "fail")
    missing = ok & ~seen & cov["cov_rc"].to_numpy(dtype=bool)
    keep &= seen | missing
    if not keep.any():
        return engine.facts(TORN_FACT, pd.DataFrame())
    # Row numbers per transaction (in order of first appearance), not a copy of the wide
    # frame per step.
    rows = np.flatnonzero(keep)
    seen, missing = seen[rows], missing[rows]
    code, txns = pd.factorize(cov["txn"].to_numpy(dtype=object)[rows])
    n = len(txns)

    def first_where(mask):
        """Per transaction, the row number of its first kept write in mask, or -1."""
        at = np.flatnonzero(mask)
        found, i = np.unique(code[at], return_index=True)
        pos = np.full(n, -1)
        pos[found] = rows[at[i]]
        return pos

    first = first_where(np.ones(len(rows), dtype=bool))
    first_missing, first_seen = first_where(missing), first_where(seen)
    out = pd.DataFrame({"txn": txns, "kind": cov["txn_outcome"].to_numpy(dtype=object)[first],
                        "n1": np.bincount(code[seen], minlength=n),
                        "n2": np.bincount(code[missing], minlength=n)})
    # The example is the transaction's first missing write; a field it lacks (every
    # field, when none is missing) comes from the transaction's first write.
    for c in ("process", "op", "offset", "value"):
        has = cov[c].notna().to_numpy(dtype=bool)
        out[c] = cov[c].array.take(
            np.where((first_missing >= 0) & has[first_missing], first_missing, first))
    for a, c in (("a1", "offset"), ("a2", "value"), ("a3", "op")):
        out[a] = cov[c].array.take(first_seen, allow_fill=True)
    # A read_committed poll of the seen write: the first that returned its value.
    poll = pl.first_reads(np.maximum(first_seen, 0), pl.read_committed)
    out["a4"] = pl.reads["op"].array.take(np.where(first_seen >= 0, poll, -1), allow_fill=True)
    # A read_committed scan that went over the missing write: its far poll and start.
    has_missing = first_missing >= 0
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    lo[has_missing] = cov["lo"].to_numpy(dtype=float)[first_missing[has_missing]]
    hi[has_missing] = cov["hi"].to_numpy(dtype=float)[first_missing[has_missing]]
    scans = pl.scans
    out["a5"], out["a6"] = pl.covering_scan_ops(
        lo, hi, scans[equals(scans["isolation"], READ_COMMITTED)])
    return engine.facts(TORN_FACT, out)


def torn(facts: pd.DataFrame) -> list[dict]:
    """torn_txn: a transaction that committed, or whose outcome is unknown, some of
    whose appended writes read_committed readers returned while others are missing:
    no read_committed poll returned them although a read_committed reader's scan went
    over their offsets. A transaction is visible all or nothing; for an unknown one, a
    visible write proves it committed, so a missing one is lost."""
    f = facts[(facts["row"] == TORN_FACT).to_numpy(dtype=bool)]
    if f.empty:
        return []
    sums = f.groupby("txn")[["n1", "n2"]].sum()
    torn_txns = sums[(sums["n1"] > 0) & (sums["n2"] > 0)]
    out = []
    for txn, (seen, missing) in torn_txns.iterrows():
        g = f[(f["txn"] == txn).to_numpy(dtype=bool)]
        m = g[(g["n2"] > 0).to_numpy(dtype=bool)].iloc[0]
        s = g[(g["n1"] > 0).to_numpy(dtype=bool)].iloc[0]
        out.append({
            "type": "torn_txn", "severity": VIOLATION, "process": m["process"],
            "op": num(m["op"]), "topic": m["topic"], "partition": num(m["partition"]),
            "offset": num(m["offset"]), "value": num(m["value"]), "txn": txn,
            "witnesses": witnesses((m["op"], "missing writer"), (m["a5"], "missing reader"),
                                   (m["a6"], "scan start"), (s["a3"], "seen writer"),
                                   (s["a4"], "reader")),
            "witness_at": engine.at_outcome(txn, "commit"),
            "detail": f"{m['kind']} transaction {txn}: {seen} writes visible to "
                      f"read_committed readers (e.g. value {num(s['a2'])} at {s['topic']}/"
                      f"{num(s['partition'])} offset {num(s['a1'])}), {missing} missing though "
                      f"readers went over them (e.g. value {num(m['value'])})"})
    return out


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    found = engine.anomalies(aborted_reads(pl) + precommitted_reads(pl))
    return [found, torn_facts(pl)] if pl.has_txn_writes else [found]


def finish(facts: pd.DataFrame) -> pd.DataFrame:
    return engine.anomalies(torn(facts))


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
