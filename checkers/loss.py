"""Writes that should be in the log and are not: lost_write, unseen, hanging_txn."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from onceproof.history.format import BEGIN_TXN

from . import coverage, engine
from .anomaly import AT, COLUMNS, VIOLATION, Anomaly, define, fills, num, plain_witnesses, witnesses
from .partlog import PartitionLog, each_row, equals
from .tables import COMMITTED

# The role of the op that committed a write's transaction, where a type's definition
# rests on the write being committed.
_COMMIT_OF_TXN = ("the commit_txn of the write's transaction, for a write in one (the one "
                  "that completed ok, else those that may have committed it)")

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("lost_write", "loss", """
       An acknowledged write (a send ok outside a transaction, or in a committed one)
       whose value no read ever returned, although some reader's scan surely went over
       its offset.""",
       fills(**AT, op="the send", offset="null when only bounded", value="", txn="",
             detail="the bound, and the scan that covered it"),
       roles={"writer": "the send",
              "reader": "the last poll of a scan that went over it, one per reader process",
              "scan start": "where that scan began: the seek (or assign) whose position "
                            "began it, else the poll of its first read",
              "commit": _COMMIT_OF_TXN},
       # The reader whose scan went over it skipped the value its ack placed there.
       implies=("poll_skip",)),
    define("unseen", "loss", """
       An acknowledged write that the final reads (polls marked final) did not return
       although they went over it: it was acknowledged before the final watermarks were read, so it lies below
       the final high watermark, and a final reader's scan covered every offset from at
       or below it up to where it must be. A write whose known offset is at or past the
       final high watermark is unseen too, with or without final reads: the log ends
       before it (a truncated acks=1 leader can leave the partition empty).""",
       fills(**AT, op="the send", offset="null when only bounded", value="", txn="",
             detail="why it must have been seen"),
       roles={"writer": "the send",
              "final reader": "the last poll of a final scan that went over it, one per final "
                              "reader process",
              "scan start": "where that scan began: the seek (or assign) whose position "
                            "began it, else the poll of its first read",
              "watermarks": "the final watermarks op, when the write's offset is at or past their "
                            "high watermark",
              "commit": _COMMIT_OF_TXN}),
    define("hanging_txn", "loss", """
       The last watermarks read show a partition's last stable offset below its high
       watermark, and no transaction that may hold it there can still be open as Kafka
       allows: they were read more than its transaction timeout plus 30 s after its
       last op (the timeout its begin_txn names, else Kafka's default, 60 s; the
       coordinator aborts a transaction that long after it began). A transaction never
       finished. Read sooner, the partition is not judged; held by a record written
       outside any transaction, or by none the history knows of, at once.""",
       fills(**AT, op="the watermarks op", offset="the last stable offset",
             txn="the open transaction, when a write known at that offset names it",
             detail="the high watermark, and the open transaction and its producer (or the "
                 "transactions that may have written there)"),
       on_driver=True,
       roles={"watermarks": "the last watermarks op",
              "writer": "the send of the record at the last stable offset, when known",
              "candidate writer": "else a send of each transaction (the first three) that did not "
                                  "commit and may have a record there"}),
)
TYPES = tuple(a.name for a in ANOMALIES)
HANG_FACT = "hang"
FACTS = (HANG_FACT,)  # the fact rows finish reads (checkers/engine.py)
# The columns finish reads of the ops table, when there are any such facts.
OPS_COLUMNS = ("op", "f", "txn", "invoke_time", "complete_time", "txn_timeout_ms")
# Kafka's producer default for transaction.timeout.ms, for a begin_txn naming none.
DEFAULT_TXN_TIMEOUT_MS = 60_000
# What the coordinator may take past a transaction's timeout to abort it: it looks for
# timed-out transactions every 10 s by default
# (transaction.abort.timed.out.transaction.cleanup.interval.ms), then writes markers.
ABORT_GRACE_S = 30
_ANOMALY = tuple(c for c in COLUMNS if c != "witnesses")  # of a fact, as its anomaly's
FACT_COLUMNS = (*_ANOMALY, "witnesses", "txn2")  # and only these columns of them


def _where(w) -> str:
    if not np.isnan(w["offset"]):
        return f"at offset {int(w['offset'])}"
    hi = "?" if np.isnan(w["hi"]) else int(w["hi"])
    return f"at an unknown offset in {int(w['lo'])}..{hi}"


def _record(type, w, detail, *others) -> dict:
    # A write in a transaction is acknowledged as committed by its transaction's commit:
    # the driver names the commit_txn that decided it (engine.at_outcome).
    return {"type": type, "severity": VIOLATION, "process": w["process"], "op": num(w["op"]),
            "offset": None if np.isnan(w["offset"]) else int(w["offset"]),
            "value": num(w["value"]), "txn": w["txn"], "detail": detail,
            "witnesses": witnesses((w["op"], "writer"), *others),
            "witness_at": engine.at_outcome(w["txn"], "commit")}


def lost_writes(cov: pd.DataFrame) -> list[dict]:
    """lost_write: a write that was acknowledged (a send ok outside a transaction, or
    in a transaction that committed) whose value no read ever returned, although some
    reader's scan of its partition surely went over its offset. Every reader can see
    such a write, so a scan over it without it means the log lost it.

    When the ack did not say the offset, the write's offset is bounded by the writes
    acknowledged before it was sent and those sent after its ack (checkers/partlog.py),
    and the scan must cover the whole bound: no false alarm on a write that merely
    landed after a reader stopped."""
    lost = cov[equals(cov["status"], COMMITTED) & ~cov["seen_any"].to_numpy()
               & cov["cov_any"].to_numpy()]
    return [_record("lost_write", w, f"acknowledged value {num(w['value'])} {_where(w)} "
                    f"was never read, though {w['cover']}", *(w["cover_w"] or ()))
            for w in each_row(lost)]


def unseen(pl: PartitionLog, cov: pd.DataFrame) -> list[dict]:
    """unseen: an acknowledged (or committed) write that the final reads (events with
    final=true, after faults healed) did not return, although the final reads went
    over its offset: it lies below the final high watermark of its partition (it was
    acknowledged before the watermarks were read) and a final reader's scan covered
    every offset from at or below it up to where it must be. A write whose known offset
    is at or past the final high watermark is unseen too: the log ends before it, and
    the watermark alone shows it, even when the final reads returned nothing (a leader
    that acknowledged with acks=1 and was then truncated can leave an empty partition).
    Otherwise only partitions with final reads are judged."""
    gone = cov[equals(cov["status"], COMMITTED) & ~cov["seen_final"].to_numpy()
               & ((cov["has_final"].to_numpy() & cov["cov_final"].to_numpy())
                  | cov["beyond_high"].to_numpy())]
    out = []
    marks = None if pl.last_watermarks is None else num(pl.last_watermarks["op"])
    for w in each_row(gone):
        why = (f"its offset is at or past the final high watermark {int(w['high'])}"
               if w["beyond_high"] else f"final reads went over it: {w['fcover']}")
        out.append(_record("unseen", w, f"acknowledged value {num(w['value'])} {_where(w)} "
                           f"is missing from the final reads; {why}",
                           *(w["fcover_w"] or ()),
                           (marks if w["beyond_high"] else None, "watermarks")))
    return out


def hanging(pl: PartitionLog) -> pd.DataFrame:
    """hanging_txn, as facts for `finish` to judge against time: the last watermarks
    read show the partition's last stable offset below its high watermark, so some
    transaction in it was still open and read_committed consumers were stuck behind
    it. The last stable offset is where the earliest open transaction's first record
    lies: the write known at that offset names the open transaction and its producer;
    else the transactional writes that did not commit and may lie there are named as
    candidates. One fact per transaction that may hold it open (txn2), or one with
    none when no transaction can: a record written outside any, or none known there."""
    last = pl.last_watermarks
    if (last is None or pd.isna(last["lso"]) or pd.isna(last["high"])
            or last["lso"] >= last["high"]):
        return engine.facts(HANG_FACT, pd.DataFrame())
    lso = float(last["lso"])
    txn, who, writers, holders = _open_at(pl, lso)
    row = {"type": "hanging_txn", "severity": VIOLATION, "process": last["process"],
           "op": num(last["op"]), "offset": num(last["lso"]), "txn": txn,
           "witnesses": witnesses((last["op"], "watermarks"), *writers),
           "detail": f"last stable offset {num(last['lso'])} < high watermark "
                     f"{num(last['high'])} at the end; {who}"}
    return engine.facts(HANG_FACT, pd.DataFrame([{**row, "txn2": t} for t in holders]
                                                or [row]))


def _open_at(pl: PartitionLog, lso: float) -> tuple[str | None, str, list[tuple], list[str]]:
    """The transaction whose record is at offset `lso`, words naming it or the
    candidates for it, (op, role) of the sends named, and every transaction that may
    hold the offset."""
    w, b = pl.writes, pl.write_bounds
    known = b["known"].to_numpy(dtype=float, na_value=np.nan)
    at = np.flatnonzero(known == lso)
    if len(at):
        row = w.iloc[at[0]]
        mine = [(row["op"], "writer")]
        if pd.isna(row["txn"]):
            return (None, f"the record there was written by {row['process']} outside any "
                    "transaction", mine, [])
        return (row["txn"], f"the open transaction is {row['txn']} of {row['process']}", mine,
                [row["txn"]])
    lo, hi = b["lo"].to_numpy(dtype=float), b["hi"].to_numpy(dtype=float)
    maybe = (w["txn"].notna() & (w["txn_outcome"] != COMMITTED)).to_numpy(dtype=bool) & \
        np.isnan(known) & (lo <= lso) & (np.isnan(hi) | (hi >= lso))
    cand: dict = {}  # "txn of process" -> the first send of it that may lie there
    for t, p, op in zip(w["txn"][maybe], w["process"][maybe], w["op"][maybe]):
        cand.setdefault(f"{t} of {p}", op)
    txns = sorted(cand)
    if not txns:
        return None, "no write of this history is known to lie there", [], []
    shown = ", ".join(txns[:3]) + (f" and {len(txns) - 3} more" if len(txns) > 3 else "")
    return (None, f"no write is known at that offset; transactions that may have one there: "
            f"{shown}", [(cand[t], "candidate writer") for t in txns[:3]],
            list(dict.fromkeys(w["txn"][maybe])))


def finish(facts: pd.DataFrame, ops) -> pd.DataFrame:
    """hanging_txn where the last watermarks were read too late for any transaction
    that may hold the partition's last stable offset to be still open as Kafka allows:
    more than its transaction timeout plus ABORT_GRACE_S after its last op. The
    transaction timeout is the one its begin_txn names (`txn_timeout_ms`), else
    Kafka's default; a transaction's coordinator aborts it that long after it began.
    Read sooner, an open transaction holds the offset by right: nothing is reported. A
    partition held by no transaction (a record written outside any, or none known) is
    reported as it is: no timeout ends that."""
    if not len(facts):
        return engine.anomalies([])
    table = ops(list(OPS_COLUMNS))
    due = _deadlines(table, set(facts["txn2"].dropna()))
    marks = table[table["op"].isin(facts["op"].dropna()).to_numpy(dtype=bool)]
    read_at = {int(op): t for op, t in zip(marks["op"], marks["invoke_time"]) if pd.notna(t)}
    out = []
    for _, group in facts.groupby(["topic", "partition"], sort=False, dropna=False):
        first = group.iloc[0]
        at = read_at.get(int(first["op"]))
        held = list(group["txn2"].dropna())
        if held and (at is None or any(t not in due or at <= due[t] for t in held)):
            continue
        out.append({**{c: first[c] for c in _ANOMALY}, "witnesses": witnesses(
            *((w["op"], w["role"]) for w in plain_witnesses(first["witnesses"]) or ()))})
    return engine.anomalies(out)


def _deadlines(ops: pd.DataFrame, txns: set[str]) -> dict[str, int]:
    """When each transaction must have ended, in the history's clock (ns): the last
    event of its ops, plus its transaction timeout and ABORT_GRACE_S."""
    last: dict[str, int] = {}
    timeout: dict[str, int] = {}
    mine = ops[ops["txn"].isin(txns).to_numpy(dtype=bool)]
    for txn, f, inv, done, ms in zip(mine["txn"], mine["f"], mine["invoke_time"],
                                     mine["complete_time"], mine["txn_timeout_ms"]):
        for t in (inv, done):
            if pd.notna(t):
                last[txn] = max(last.get(txn, int(t)), int(t))
        if f == BEGIN_TXN and pd.notna(ms):
            timeout[txn] = max(timeout.get(txn, 0), int(ms))
    return {txn: t + (timeout.get(txn, DEFAULT_TXN_TIMEOUT_MS) + ABORT_GRACE_S * 1000)
            * 1_000_000 for txn, t in last.items()}


UNJUDGED_START = ("acknowledged writes no read returned that a reader read past, but from a "
                  "start it did not record (no seek, no position in its assign): no scan "
                  "surely went over them")


def uncovered_by_unknown_starts(pl: PartitionLog, cov: pd.DataFrame) -> int:
    """How many acknowledged committed writes no read returned and no scan surely
    covered, though a scan whose start is unknown (its run began at no recorded
    position) read past them: had its start been recorded, lost_write could have
    been judged. (A scan that began at or below the write and read past it would
    cover it, so such a scan began above it.)"""
    scans = pl.scans
    blind = scans[~scans["known_start"].to_numpy(dtype=bool)]
    if not len(blind) or not len(cov):
        return 0
    top = float(blind["e"].max())
    hi = cov["hi"].to_numpy(dtype=float)
    cand = (equals(cov["status"], COMMITTED) & ~cov["seen_any"].to_numpy(dtype=bool)
            & ~cov["cov_any"].to_numpy(dtype=bool) & ~np.isnan(hi))
    return int((cand & (hi <= top)).sum())


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    cov = coverage.of(pl)
    return [engine.anomalies(lost_writes(cov) + unseen(pl, cov)), hanging(pl),
            engine.unjudged("lost_write", uncovered_by_unknown_starts(pl, cov), UNJUDGED_START)]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
