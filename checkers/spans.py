"""Where each committed transaction sits in one partition.

A writer span is where a committed transaction's records in the partition may lie:
from `lo` (no record of it is below) to `hi` (none is above; NaN when some record's
offset is unbounded), with `sure_lo` / `sure_hi` (some record of it is surely at or
below / at or above), and the send ops of its first and last record. Offsets not known
are bounded as in checkers/partlog.py, so an order read off spans is never a guess.
A reader extent is the highest offset a committed transaction's polls read here, and
the poll that read it. Transaction order (commit_order) and the dependency graph
(checkers/cycles.py) are built from these.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import coverage
from .partlog import PartitionLog, equals
from .tables import COMMITTED


def writers(pl: PartitionLog) -> pd.DataFrame:
    """txn, process, lo, hi, sure_lo, sure_hi, lo_op/lo_inv/lo_cmp, hi_op/hi_inv/hi_cmp,
    t_begin, t_done; sorted by lo."""
    def build():
        cov = coverage.of(pl)
        mine = equals(cov["status"], COMMITTED) & cov["txn"].notna().to_numpy(dtype=bool)
        if mine.any():
            # A record lost or overwritten says nothing of where the transaction sits.
            mine &= coverage.held(pl)
        w = cov[mine]
        w = w[["txn", "process", "lo", "hi", "op", "invoke_index", "complete_index",
               "t_begin", "t_done"]].copy()
        cols = ["txn", "process", "lo", "hi", "sure_lo", "sure_hi", "lo_op", "lo_inv",
                "lo_cmp", "hi_op", "hi_inv", "hi_cmp", "t_begin", "t_done"]
        if w.empty:
            return pd.DataFrame(columns=cols)
        w["hi_key"] = w["hi"].fillna(np.inf)
        # Grouped by the transactions' codes (the steps' strings are Categoricals):
        # pandas' grouping by a Categorical recodes it, and its index hashes every name.
        w["code"] = w["txn"].array.codes
        g = w.groupby("code", sort=False)
        first = w.loc[g["lo"].idxmin()].set_index("code")
        last = w.loc[g["hi_key"].idxmax()].set_index("code")
        lo = g["lo"].min()
        out = pd.DataFrame({
            "txn": w["txn"].cat.categories.to_numpy(dtype=object)[lo.index],
            "process": g["process"].first(), "lo": lo,
            "hi": g["hi_key"].max().replace(np.inf, np.nan),
            "sure_lo": g["hi"].min(), "sure_hi": g["lo"].max(),
            "t_begin": g["t_begin"].first(), "t_done": g["t_done"].first()})
        for side, src in (("lo", first), ("hi", last)):
            out[f"{side}_op"] = src["op"]
            out[f"{side}_inv"] = src["invoke_index"]
            out[f"{side}_cmp"] = src["complete_index"]
        out = out.sort_values("lo").reset_index(drop=True)
        # Plain strings: the steps' categories stay in the steps.
        return out.astype({"process": object})[cols]
    return pl.memo("writer_spans", build)


def readers(pl: PartitionLog) -> pd.DataFrame:
    """txn, process, hi (highest offset read), hi_op/hi_inv/hi_cmp (the poll)."""
    r = pl.reads
    # Rows picked before columns are copied: the reads are most steps, and wide.
    rows = np.flatnonzero(r["txn"].notna().to_numpy(dtype=bool)
                          & equals(r["txn_outcome"], COMMITTED)
                          & r["offset"].notna().to_numpy(dtype=bool))
    r = r[["txn", "process", "offset", "op", "invoke_index", "complete_index"]].take(rows)
    if r.empty:
        return pd.DataFrame(columns=["txn", "process", "hi", "hi_op", "hi_inv", "hi_cmp"])
    top = r.loc[r.groupby(r["txn"].array.codes, sort=False)["offset"].idxmax()]
    return pd.DataFrame({"txn": top["txn"].to_numpy(), "process": top["process"].to_numpy(),
                         "hi": top["offset"].to_numpy(dtype=float),
                         "hi_op": top["op"].to_numpy(), "hi_inv": top["invoke_index"].to_numpy(),
                         "hi_cmp": top["complete_index"].to_numpy()})
