"""Consumer-group offsets: offset_regression, stale_offset_fetch.

A commit of a group's offset is *successful* when commit_offsets completed ok, or when
send_offsets was ok inside a transaction that committed; it takes effect within its
effect window (its own op, or the commit_txn op of its transaction). A commit that may
have happened (info, or a transaction of unknown outcome) can explain what a fetch
returns but never proves anything was overwritten.
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from . import engine
from .anomaly import VIOLATION, num
from .partlog import PartitionLog
from .tables import COMMITTED, UNKNOWN

TYPES = ("offset_regression", "stale_offset_fetch")


def _record(type, row, detail, offset) -> dict:
    return {"type": type, "severity": VIOLATION, "process": row["process"],
            "op": num(row["op"]), "topic": row["topic"], "partition": num(row["partition"]),
            "offset": num(offset), "value": None, "txn": row["txn"], "detail": detail}


def regressions(commits: pd.DataFrame, seeks: pd.DataFrame, group: str) -> list[dict]:
    """offset_regression: a successful commit of a group's offset for a partition is
    lower than one that completed before it was invoked (in effect windows), and the
    committing process did not seek that partition below the earlier offset in
    between. Committed offsets only move back when the application asks for a rewind."""
    c = commits[commits["outcome"] == COMMITTED].sort_values("eff_cmp").reset_index(drop=True)
    out: list[dict] = []
    if len(c) < 2:
        return out
    done = c["eff_cmp"].to_numpy(dtype=np.int64)
    offs = c["offset"].to_numpy(dtype=np.int64)
    best = np.maximum.accumulate(offs)
    arg = np.zeros(len(offs), dtype=np.int64)
    for i in range(1, len(offs)):
        arg[i] = i if offs[i] > offs[arg[i - 1]] else arg[i - 1]
    k = np.searchsorted(done, c["eff_inv"].to_numpy(dtype=np.int64), side="left") - 1
    for j in np.flatnonzero((k >= 0) & (best[np.maximum(k, 0)] > offs)):
        row, prev = c.iloc[j], c.iloc[arg[k[j]]]
        rewound = seeks[(seeks["process"] == row["process"])
                        & (seeks["invoke_index"] > prev["eff_inv"])
                        & (seeks["invoke_index"] < row["invoke_index"])
                        & (seeks["offset"] < prev["offset"])]
        if len(rewound):
            continue
        out.append(_record(
            "offset_regression", row,
            f"group {group} committed offset {num(row['offset'])} ({row['f']} op "
            f"{num(row['op'])}) after offset {num(prev['offset'])} was committed ({prev['f']} "
            f"op {num(prev['op'])}), with no seek below it between", row["offset"]))
    return out


def stale_fetches(commits: pd.DataFrame, fetches: pd.DataFrame, group: str) -> list[dict]:
    """stale_offset_fetch: a fetch_offsets that returned, for a partition, an offset no
    commit it could observe wrote. It may return the offset of a successful commit that
    completed before the fetch was invoked and was not followed by another such commit
    invoked after it completed; or of any commit that may have taken effect while the
    fetch was in flight (or of uncertain outcome, invoked before the fetch completed).
    Before any commit completed, it may also return none."""
    out: list[dict] = []
    sure = commits[commits["outcome"] == COMMITTED]
    maybe = commits[commits["outcome"].isin([COMMITTED, UNKNOWN])]
    s_inv = sure["eff_inv"].to_numpy(dtype=np.int64)
    s_cmp = sure["eff_cmp"].to_numpy(dtype=np.int64)
    s_off = sure["offset"].to_numpy(dtype=np.int64)
    m_inv = maybe["eff_inv"].to_numpy(dtype=float, na_value=np.nan)
    m_cmp = maybe["eff_cmp"].to_numpy(dtype=float, na_value=np.nan)
    m_sure = (maybe["outcome"] == COMMITTED).to_numpy()
    m_off = maybe["offset"].to_numpy(dtype=float, na_value=np.nan)
    for _, f in fetches.iterrows():
        f_inv, f_cmp = int(f["invoke_index"]), int(f["complete_index"])
        done = s_cmp < f_inv
        if not done.any():
            continue
        latest = s_inv[done].max()
        allowed = set(s_off[done & (s_cmp > latest)].tolist())
        racing = (m_inv < f_cmp) & (~m_sure | ~(m_cmp < f_inv))
        allowed |= {int(x) for x in m_off[racing] if not np.isnan(x)}
        got = None if pd.isna(f["offset"]) else int(f["offset"])
        if got in allowed:
            continue
        best = int(s_off[done & (s_cmp > latest)].max())
        out.append(_record(
            "stale_offset_fetch", f,
            f"group {group} fetch returned offset {got if got is not None else 'none'}, "
            f"but offset {best} was committed before the fetch began "
            f"(allowed: {sorted(allowed)})", f["offset"]))
    return out


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    out: list[dict] = []
    o = pl.offsets.rename(columns={"status": "outcome", "t_begin": "eff_inv",
                                   "t_done": "eff_cmp"})
    o = o[o["group"].notna().to_numpy(dtype=bool)]
    seeks = pl.positions[(pl.positions["type"] == "seek").to_numpy(dtype=bool)]
    for group, g in o.groupby("group"):
        commits = g[(g["f"].isin(["commit_offsets", "send_offsets"]) & g["offset"].notna()
                     & g["eff_inv"].notna()).to_numpy(dtype=bool)]
        commits = commits[((commits["outcome"] != COMMITTED) | commits["eff_cmp"].notna())
                          .to_numpy(dtype=bool)]
        fetches = g[((g["f"] == "fetch_offsets") & g["complete_index"].notna())
                    .to_numpy(dtype=bool)]
        out += regressions(commits, seeks, group)
        out += stale_fetches(commits, fetches, group)
    return [engine.anomalies(out)]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
