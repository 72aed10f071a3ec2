"""Which writes were seen, and which were gone over by readers that did not see them.

One row per write, annotated per partition (checkers/partlog.py defines runs, scans
and offset bounds). lost_write, unseen, torn_txn and the transaction-order checks all
start from this frame, so it is computed once per partition.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .partlog import PartitionLog, equals
from .tables import COMMITTED, READ_COMMITTED


def _scan_text(scan) -> str:
    return (f"{scan['process']} ({scan['isolation']}) read offsets {int(scan['s'])}.."
            f"{int(scan['e'])}")


def _covering(pl: PartitionLog, lo: float, hi: float, scans: pd.DataFrame,
              role: str) -> tuple[str, tuple]:
    """Words naming a scan that covers [lo, hi], and (op, role) of every reader's: the
    poll at its far end and where it began; or, when no scan does, the final reads'
    extent that the watermarks op names (final_extent)."""
    found = scans if scans.empty else pl.covering_scans(lo, hi, scans)
    extent = final_extent(pl)
    if found.empty and extent is not None:
        low, read_to, op = extent
        return (f"the final reads (read_committed) went over offsets {low}..{read_to - 1}, "
                "from the beginning to where they stopped", ((op, "final reads' end"),))
    first = found.iloc[0]
    more = len(found) - 1
    text = _scan_text(first) + (f" (and {more} more reader{'s' * (more > 1)})" if more else "")
    ops = tuple(pair for _, scan in found.iterrows()
                for pair in ((pl.scan_op(scan), role), (scan["start_op"], "scan start")))
    return text, ops


def final_extent(pl: PartitionLog) -> tuple[int, int, int] | None:
    """(low, read_to, op): the offsets low..read_to-1 the read_committed final reads went
    over, returned or not, as the last watermarks op names them (docs/history.md: a
    watermarks row's `offset`); None when it names no such end."""
    last = pl.last_watermarks
    if last is None or pd.isna(last["value"]) or pd.isna(last["offset"]):
        return None
    return int(last["offset"]), int(last["value"]), int(last["op"])


def annotate(pl: PartitionLog) -> pd.DataFrame:
    """One row per write of the partition: its columns (op, rec, process, txn,
    txn_outcome, type, status, value, invoke_index, complete_index, t_begin, t_done)
    and, as floats (NaN = unknown), offset (known), lo, hi, high (final high watermark,
    when read after the write was acknowledged); as booleans, seen_any / seen_rc /
    seen_final (some read / read_committed read / final read returned it), cov_any /
    cov_rc / cov_final (some scan of that kind surely went over it; for the final one,
    up to the final high watermark), has_final, beyond_high (its known offset is at or
    past the final high watermark); cover / fcover: words naming a covering scan, for
    reports, and cover_w / fcover_w: the (op, role) of every reader's covering scan."""
    w = pl.writes
    n = len(w)
    # Built as one dict and one frame at the end: selecting and then adding columns to a
    # frame copies it and its blocks over and over. Object columns as numpy arrays: the
    # frame would ask pandas' wrapper of one for its values, and it looks for missing
    # values first.
    out = {c: w[c].to_numpy() if w[c].dtype == object else w[c].array for c in (
        "op", "rec", "process", "txn", "txn_outcome", "type", "status", "value",
        "invoke_index", "complete_index", "t_begin", "t_done")}
    b = pl.write_bounds
    lo, hi = b["lo"].to_numpy(dtype=float), b["hi"].to_numpy(dtype=float)
    known = b["known"].to_numpy(dtype=float, na_value=np.nan)
    out["offset"], out["lo"], out["hi"] = known, lo, hi

    r = pl.reads
    has_value = w["value"].notna().to_numpy(dtype=bool)
    distinct, which, at = pl.value_matches
    matched = at >= 0

    def seen(mask):
        hit = np.zeros(len(distinct), dtype=bool)
        hit[at[matched & mask]] = True
        return hit[which] & has_value
    seen_any = out["seen_any"] = seen(np.ones(len(r), dtype=bool))
    out["seen_rc"] = seen(pl.read_committed)
    seen_final = out["seen_final"] = seen(r["final"].to_numpy(dtype=bool, na_value=False))

    scans = pl.scans
    final_scans = scans[scans["final"]]
    cov_any = out["cov_any"] = pl.covered(lo, hi, scans)
    out["cov_rc"] = pl.covered(lo, hi, scans[equals(scans["isolation"], READ_COMMITTED)])

    # The final watermarks bound every write acknowledged before they were read.
    high = np.full(n, np.nan)
    last = pl.last_watermarks
    if last is not None and n:
        done = w["complete_index"].to_numpy(dtype=float, na_value=np.nan)
        if pd.notna(last["high"]):
            high[done < float(last["invoke_index"])] = float(last["high"])
    hi_final = np.where(np.isnan(high), hi, np.fmin(hi, high - 1))
    # The final reads went over their extent whether or not they returned anything in
    # it: a partition whose every record is invisible to read_committed readers (all
    # aborted, one that should not have been among them) has no scan, yet it was read.
    extent = final_extent(pl)
    read = np.zeros(n, dtype=bool)
    if extent is not None and n:
        read = (lo >= extent[0]) & (hi_final < extent[1])
    cov_any |= read
    out["cov_rc"] = out["cov_rc"] | read
    cov_final = out["cov_final"] = pl.covered(lo, hi_final, final_scans) | read
    out["has_final"] = np.full(n, len(final_scans) > 0) | read
    out["high"] = high
    out["beyond_high"] = ~np.isnan(known) & ~np.isnan(high) & (known >= high)

    # Name the covering scans of the (rare) writes that will be reported.
    committed = equals(w["status"], COMMITTED)
    cover, cover_w = np.full(n, None, dtype=object), np.full(n, None, dtype=object)
    for i in np.flatnonzero(committed & ~seen_any & cov_any)[:1000]:
        cover[i], cover_w[i] = _covering(pl, lo[i], hi[i], scans, "reader")
    fcover, fcover_w = np.full(n, None, dtype=object), np.full(n, None, dtype=object)
    for i in np.flatnonzero(committed & ~seen_final & cov_final)[:1000]:
        fcover[i], fcover_w[i] = _covering(pl, lo[i], hi_final[i], final_scans, "final reader")
    out["cover"], out["fcover"] = cover, fcover
    out["cover_w"], out["fcover_w"] = cover_w, fcover_w
    # Not copied: the frame is only read (writes' columns among it are shared with pl).
    return pd.DataFrame(out, copy=False)


def of(pl: PartitionLog) -> pd.DataFrame:
    """The partition's annotated writes (see annotate), computed once."""
    return pl.memo("coverage", lambda: annotate(pl))


def held(pl: PartitionLog) -> np.ndarray:
    """Which writes the log still holds where the history places them: no reader's scan
    surely went over one without returning it (lost_write), and no read returned
    another value at its known offset (inconsistent_offset). A record a failover
    truncated (acks=1), its offset reused, orders nothing: those types report it."""
    cov = of(pl)
    passed = cov["cov_any"].to_numpy(dtype=bool) & ~cov["seen_any"].to_numpy(dtype=bool)
    return ~passed & pl.holds(cov["offset"].to_numpy(dtype=float),
                              cov["value"].to_numpy(dtype=np.int64, na_value=0))
