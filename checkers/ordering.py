"""Order of appends: nonmonotonic_send, commit_order."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from . import engine, spans
from .anomaly import VIOLATION, num
from .partlog import PartitionLog

TYPES = ("nonmonotonic_send", "commit_order")


def nonmonotonic_sends(pl: PartitionLog) -> list[dict]:
    """nonmonotonic_send: one process's acknowledged sends to one partition (those
    outside transactions, or those within one transaction), in the order it sent them,
    got offsets that do not increase. A send is acknowledged once appended, and a
    process sends one op at a time, so each later append must land later; within one
    send, records to one partition are appended in order unless the producer reorders
    retried batches (a non-idempotent producer with several requests in flight)."""
    w = pl.writes
    w = w[(w["type"] == "ok").to_numpy(dtype=bool) & w["offset"].notna().to_numpy(dtype=bool)]
    out = []
    if len(w) < 2:
        return out
    w = w.assign(_t=w["txn"].fillna("")).sort_values(["process", "_t", "invoke_index", "rec"])
    same = (w["process"].eq(w["process"].shift()) & w["_t"].eq(w["_t"].shift())).to_numpy()
    offs = w["offset"].to_numpy(dtype=np.int64)
    prev = np.r_[0, offs[:-1]]
    prev_op = np.r_[0, w["op"].to_numpy(dtype=np.int64)[:-1]]
    for i in np.flatnonzero(same & (offs <= prev)):
        x = w.iloc[i]
        out.append({"type": "nonmonotonic_send", "severity": VIOLATION,
                    "process": x["process"], "op": num(x["op"]), "offset": int(offs[i]),
                    "value": num(x["value"]), "txn": x["txn"],
                    "detail": f"{x['process']}'s send (op {num(x['op'])}) was acknowledged at "
                              f"offset {offs[i]}, not after its previous send's offset "
                              f"{prev[i]} (op {prev_op[i]})"})
    return out


def commit_orders(pl: PartitionLog) -> list[dict]:
    """commit_order: two committed transactions T1 and T2 wrote to one partition, T1's
    commit_txn completed before T2's first op was invoked, yet some record of T2
    precedes some record of T1 in that partition. T2's records are appended after T2
    began, so after all of T1's: the log contradicts real time."""
    w = spans.writers(pl)
    w = w[w["t_begin"].notna() & w["t_done"].notna() & w["sure_lo"].notna()]
    out = []
    if len(w) < 2:
        return out
    w = w.sort_values("t_done").reset_index(drop=True)
    done = w["t_done"].to_numpy(dtype=np.int64)
    his = w["sure_hi"].to_numpy(dtype=float)
    best = np.maximum.accumulate(his)
    # Which transaction set each running maximum, for the example.
    arg = np.maximum.accumulate(np.where(np.r_[True, his[1:] > best[:-1]],
                                         np.arange(len(his)), 0))
    k = np.searchsorted(done, w["t_begin"].to_numpy(dtype=np.int64), side="left") - 1
    los = w["sure_lo"].to_numpy(dtype=float)
    for j in np.flatnonzero((k >= 0) & (best[np.maximum(k, 0)] > los)):
        t1, t2 = w.iloc[arg[k[j]]], w.iloc[j]
        out.append({
            "type": "commit_order", "severity": VIOLATION, "process": t2["process"],
            "op": num(t2["lo_op"]), "offset": int(t2["sure_lo"]), "txn": t2["txn"],
            "detail": f"{t1['txn']} committed (index {num(t1['t_done'])}) before "
                      f"{t2['txn']} began (index {num(t2['t_begin'])}), yet {t2['txn']}'s "
                      f"record at offset {int(t2['sure_lo'])} precedes {t1['txn']}'s at "
                      f"offset {int(t1['sure_hi'])}"})
    return out


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    found = nonmonotonic_sends(pl)
    if pl.has_txn_writes:
        found += commit_orders(pl)
    return [engine.anomalies(found)]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
