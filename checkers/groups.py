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
from .anomaly import VIOLATION, num, of_family, witnesses
from .partlog import PartitionLog
from .tables import COMMITTED, UNKNOWN

TYPES = of_family("groups")


def _record(type, row, detail, offset, witnessed) -> dict:
    return {"type": type, "severity": VIOLATION, "process": row["process"],
            "op": num(row["op"]), "topic": row["topic"], "partition": num(row["partition"]),
            "offset": num(offset), "value": None, "txn": row["txn"], "detail": detail,
            "witnesses": witnesses(*witnessed)}


def _sought_below(seeks: pd.DataFrame, procs: np.ndarray, after: np.ndarray,
                  before: np.ndarray, below: np.ndarray) -> np.ndarray:
    """For each i: did process procs[i] seek to an offset < below[i] in an op invoked
    strictly between after[i] and before[i]?"""
    out = np.zeros(len(procs), dtype=bool)
    if not len(procs) or seeks.empty:
        return out
    for p, g in seeks.groupby("process"):
        mine = np.flatnonzero(procs == p)
        if not len(mine):
            continue
        g = g.sort_values("invoke_index")
        at = g["invoke_index"].to_numpy(dtype=np.int64)
        off = g["offset"].to_numpy(dtype=np.int64)
        lo = np.searchsorted(at, after[mine], side="right")
        hi = np.searchsorted(at, before[mine], side="left")
        some = lo < hi
        if some.any():
            # The lowest offset sought in each window [lo, hi).
            mins = np.minimum.reduceat(np.r_[off, 0], np.ravel(np.c_[lo[some], hi[some]]))[::2]
            out[mine[some]] = mins < below[mine][some]
    return out


def regressions(commits: pd.DataFrame, seeks: pd.DataFrame, group: str) -> list[dict]:
    """offset_regression: a successful commit of a group's offset for a partition is
    lower than one the same process made that completed before it was invoked (in
    effect windows), and that process did not seek the partition below the earlier
    offset in between. Committed offsets only move back when the application asks for a
    rewind. Commits by different processes are not compared: any member of a group may
    commit its offsets, in any order (manual assignment), so a lower commit by another
    process is the application's doing; fetches still must see the latest commit
    (stale_offset_fetch)."""
    c = commits[commits["outcome"] == COMMITTED]
    out: list[dict] = []
    for _, cp in c.groupby("process", sort=True):
        out += _regressions_of(cp.sort_values("eff_cmp").reset_index(drop=True), seeks,
                               group)
    return out


def _regressions_of(c: pd.DataFrame, seeks: pd.DataFrame, group: str) -> list[dict]:
    """offset_regression among the successful commits of one process, sorted by eff_cmp."""
    out: list[dict] = []
    if len(c) < 2:
        return out
    done = c["eff_cmp"].to_numpy(dtype=np.int64)
    offs = c["offset"].to_numpy(dtype=np.int64)
    best = np.maximum.accumulate(offs)
    # Where each running maximum was set.
    arg = np.maximum.accumulate(np.where(np.r_[True, offs[1:] > best[:-1]],
                                         np.arange(len(offs)), 0))
    k = np.searchsorted(done, c["eff_inv"].to_numpy(dtype=np.int64), side="left") - 1
    procs = c["process"].to_numpy(dtype=object)
    inv = c["invoke_index"].to_numpy(dtype=np.int64)
    eff_inv = c["eff_inv"].to_numpy(dtype=np.int64)
    cand = np.flatnonzero((k >= 0) & (best[np.maximum(k, 0)] > offs))
    prev = arg[k[cand]]
    rewound = _sought_below(seeks, procs[cand], eff_inv[prev], inv[cand], offs[prev])
    for j, p in zip(cand[~rewound], prev[~rewound]):
        row, prev_row = c.iloc[j], c.iloc[p]
        out.append(_record(
            "offset_regression", row,
            f"group {group} committed offset {num(row['offset'])} ({row['f']} op "
            f"{num(row['op'])}) after offset {num(prev_row['offset'])} was committed "
            f"({prev_row['f']} op {num(prev_row['op'])}) by the same process, with no "
            f"seek below it between", row["offset"],
            [(row["op"], "lower commit"), (prev_row["op"], "earlier commit")]))
    return out


def stale_fetches(commits: pd.DataFrame, fetches: pd.DataFrame, group: str) -> list[dict]:
    """stale_offset_fetch: a fetch_offsets that returned, for a partition, an offset no
    commit it could observe wrote. It may return the offset of a successful commit that
    completed before the fetch was invoked and was not followed by another such commit
    invoked after it completed; or of any commit that may have taken effect while the
    fetch was in flight (or of uncertain outcome, invoked before the fetch completed).
    Before any successful commit completed, it may return none, or only such a racing
    or uncertain commit."""
    out: list[dict] = []
    if fetches.empty:
        return out
    sure = commits[(commits["outcome"] == COMMITTED).to_numpy(dtype=bool)].sort_values("eff_cmp")
    maybe = commits[commits["outcome"].isin([COMMITTED, UNKNOWN]).to_numpy(dtype=bool)]
    s_inv = sure["eff_inv"].to_numpy(dtype=np.int64)
    s_cmp = sure["eff_cmp"].to_numpy(dtype=np.int64)
    s_off = sure["offset"].to_numpy(dtype=np.int64)
    s_op = sure["op"].to_numpy(dtype=np.int64)
    latest_inv = np.maximum.accumulate(s_inv)
    m_inv = maybe["eff_inv"].to_numpy(dtype=float, na_value=np.nan)
    m_cmp = maybe["eff_cmp"].to_numpy(dtype=float, na_value=np.nan)
    m_sure = (maybe["outcome"] == COMMITTED).to_numpy(dtype=bool)
    m_off = maybe["offset"].to_numpy(dtype=float, na_value=np.nan)
    f_inv = fetches["invoke_index"].to_numpy(dtype=np.int64)
    f_cmp = fetches["complete_index"].to_numpy(dtype=np.int64)
    f_off = fetches["offset"].to_numpy(dtype=float, na_value=np.nan)
    done = np.searchsorted(s_cmp, f_inv, side="left")    # sure[:done] completed before
    # Most fetches return the latest commit (or none before the first): only the
    # others need the full rule.
    latest_off = (np.where(done > 0, s_off[np.maximum(done - 1, 0)], np.nan) if len(s_off)
                  else np.full(len(f_inv), np.nan))
    same = (latest_off == f_off) | (np.isnan(latest_off) & np.isnan(f_off))

    def racing_offsets(i: int) -> set[int]:
        """Offsets of commits that may have taken effect while fetch i was in flight, or
        of uncertain outcome and invoked before it completed."""
        racing = (m_inv < f_cmp[i]) & (~m_sure | ~(m_cmp < f_inv[i]))
        return {int(x) for x in m_off[racing] if not np.isnan(x)}

    for i in np.flatnonzero(~same):
        k = done[i]
        got = None if np.isnan(f_off[i]) else int(f_off[i])
        # What it may see besides racing commits: before any commit completed, nothing;
        # after, the latest that completed before it began, not superseded (a suffix).
        if k == 0:
            latest, why = set(), "no commit had completed before the fetch began"
            latest_ops: list = []
            if got is None:
                continue
        else:
            j = np.searchsorted(s_cmp, latest_inv[k - 1], side="right")
            latest = {int(x) for x in s_off[j:k]}
            latest_ops = s_op[j:k][:3].tolist()
            why = f"offset {max(latest)} was committed before the fetch began"
        allowed = latest | racing_offsets(int(i))
        if got in allowed:
            continue
        f = fetches.iloc[i]
        shown = (["none"] if k == 0 else []) + [str(x) for x in sorted(allowed)]
        out.append(_record(
            "stale_offset_fetch", f,
            f"group {group} fetch returned offset {got if got is not None else 'none'}, "
            f"but {why} (allowed: [{', '.join(shown)}])", f["offset"],
            [(f["op"], "fetch"), *((o, "latest commit") for o in latest_ops)]))
    return out


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    out: list[dict] = []
    if pl.offsets.empty:
        return []
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
