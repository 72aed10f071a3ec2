"""Writes that should be in the log and are not: lost_write, unseen, hanging_txn."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from . import coverage, engine
from .anomaly import VIOLATION, num, of_family, witnesses
from .partlog import PartitionLog, each_row, equals
from .tables import COMMITTED

TYPES = of_family("loss")


def _where(w) -> str:
    if not np.isnan(w["offset"]):
        return f"at offset {int(w['offset'])}"
    hi = "?" if np.isnan(w["hi"]) else int(w["hi"])
    return f"at an unknown offset in {int(w['lo'])}..{hi}"


def _record(type, w, detail, *others) -> dict:
    return {"type": type, "severity": VIOLATION, "process": w["process"], "op": num(w["op"]),
            "offset": None if np.isnan(w["offset"]) else int(w["offset"]),
            "value": num(w["value"]), "txn": w["txn"], "detail": detail,
            "witnesses": witnesses((w["op"], "writer"), *others)}


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


def hanging(pl: PartitionLog) -> list[dict]:
    """hanging_txn: the last watermarks read (after the final phase) show the
    partition's last stable offset below its high watermark, so some transaction in it
    never finished and read_committed consumers are stuck behind it. The last stable
    offset is where the earliest open transaction's first record lies: the write known
    at that offset names the open transaction and its producer; else the transactional
    writes that did not commit and may lie there are named as candidates."""
    last = pl.last_watermarks
    if last is None:
        return []
    if pd.isna(last["lso"]) or pd.isna(last["high"]) or last["lso"] >= last["high"]:
        return []
    lso = float(last["lso"])
    txn, who, writers = _open_at(pl, lso)
    return [{"type": "hanging_txn", "severity": VIOLATION, "process": last["process"],
             "op": num(last["op"]), "offset": num(last["lso"]), "txn": txn,
             "witnesses": witnesses((last["op"], "watermarks"), *writers),
             "detail": f"last stable offset {num(last['lso'])} < high watermark "
                       f"{num(last['high'])} at the end; {who}"}]


def _open_at(pl: PartitionLog, lso: float) -> tuple[str | None, str, list[tuple]]:
    """The transaction whose record is at offset `lso`, words naming it or the
    candidates for it, and (op, role) of the sends named."""
    w, b = pl.writes, pl.write_bounds
    known = b["known"].to_numpy(dtype=float, na_value=np.nan)
    at = np.flatnonzero(known == lso)
    if len(at):
        row = w.iloc[at[0]]
        mine = [(row["op"], "writer")]
        if pd.isna(row["txn"]):
            return (None, f"the record there was written by {row['process']} outside any "
                    "transaction", mine)
        return row["txn"], f"the open transaction is {row['txn']} of {row['process']}", mine
    lo, hi = b["lo"].to_numpy(dtype=float), b["hi"].to_numpy(dtype=float)
    maybe = (w["txn"].notna() & (w["txn_outcome"] != COMMITTED)).to_numpy(dtype=bool) & \
        np.isnan(known) & (lo <= lso) & (np.isnan(hi) | (hi >= lso))
    cand: dict = {}  # "txn of process" -> the first send of it that may lie there
    for t, p, op in zip(w["txn"][maybe], w["process"][maybe], w["op"][maybe]):
        cand.setdefault(f"{t} of {p}", op)
    txns = sorted(cand)
    if not txns:
        return None, "no write of this history is known to lie there", []
    shown = ", ".join(txns[:3]) + (f" and {len(txns) - 3} more" if len(txns) > 3 else "")
    return (None, f"no write is known at that offset; transactions that may have one there: "
            f"{shown}", [(cand[t], "candidate writer") for t in txns[:3]])


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    cov = coverage.of(pl)
    return [engine.anomalies(lost_writes(cov) + unseen(pl, cov) + hanging(pl))]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
