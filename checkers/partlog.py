"""Everything the history says about one partition's log, in one place.

Most anomalies are properties of one partition: what each offset holds, where each
consumer's reads went, which writes a reader passed over. So the converter writes the
history as one table of steps (checkers/tables.py, "steps"), grouped by (topic,
partition) when it is written (checkers/spool.py), and every per-partition check is a
pandas function over one partition's steps (PartitionLog). checkers/engine.py hands
each partition's steps to every family's check at once, in this process or in one
Spark mapInArrow, with no shuffle.

Terms used by the checks:

- The *read log* of a partition is what reads saw: every (offset, value) some poll
  returned, keeping only offsets that were always seen holding one value (an offset
  seen with two values is reported as inconsistent_offset and trusted for nothing else).
- A value is *visible* to a reader if it is in the read log, was written by a send to
  this partition that did not fail, and, for a read_committed reader, was written
  outside any transaction or by a committed one.
- A *run* is a stretch of one consumer's reads of the partition with nothing between
  that moves or forgets its position: a seek starts a run at a known position; an
  assign (but not in the partitions it says the client `kept`), or any op of the
  process ending in info, starts one at an unknown position.
  (A change of isolation or of the final flag also starts a run.) The checks assume a
  consumer's reassignments are recorded as assign ops.
- A run's *scan* is the offsets it went over: from its seek position (or first read)
  to its last read. A reader whose scan covers an offset holding a value visible to it
  must have returned that value.
- Consumer-group offsets (commits, fetches) are steps of the partition they name.
- A write's offset is *known* when its send's ack or a read says where it is;
  otherwise it is bounded: it lies after the offset of every write to the partition
  acknowledged before it was sent, and (if it was acknowledged) before the offset of
  every write sent after its acknowledgement.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd
import pyarrow as pa

from .tables import ABORTED, READ_COMMITTED, SCHEMAS

LOG_SCHEMA = SCHEMAS["steps"]

# Kinds of steps in the log table.
WRITE, READ, POSITION, WATERMARK, OFFSET = "w", "r", "p", "m", "o"
# The order of the kinds within each partition's steps, as the converter writes them
# (checkers/flatten.py), so a kind is often a slice of the frame already.
KINDS = (WRITE, READ, POSITION, OFFSET, WATERMARK)
# Visibility of a read value (vis): to read_committed readers, to read_uncommitted only.
VIS_RC, VIS_RU, VIS_NONE = 2, 1, 0


def typed(pdf: pd.DataFrame) -> pd.DataFrame:
    """Columns in nullable pandas dtypes whatever Arrow made of them (a long column
    with nulls arrives as float64, a boolean one as object)."""
    out = {}
    for fld in LOG_SCHEMA:
        if fld.name not in pdf:
            continue
        col = pdf[fld.name]
        if fld.type == pa.int64() and not isinstance(col.dtype, pd.Int64Dtype):
            col = col.astype("Int64")
        elif fld.type == pa.bool_() and not isinstance(col.dtype, pd.BooleanDtype):
            col = col.astype("boolean")
        out[fld.name] = col
    return pd.DataFrame(out, index=pdf.index, copy=False)


def equals(col: pd.Series, *values: str) -> np.ndarray:
    """Where `col` is one of `values`, as numpy booleans (missing: False)."""
    a = col.to_numpy(dtype=object)
    try:
        # numpy compares an object column several times faster than pandas' == or isin.
        out = a == values[0]
        for v in values[1:]:
            out |= a == v
        return np.asarray(out, dtype=bool)
    except TypeError:  # pd.NA among the values: it has no truth value
        return col.isin(values).fillna(False).to_numpy(dtype=bool)


def sort_order(*keys: np.ndarray) -> np.ndarray:
    """np.lexsort(keys) (last key primary), for integer-valued keys."""
    ints = [k.astype(np.int64) for k in keys]
    if len(ints[0]):
        lows = [int(k.min()) for k in ints]
        spans = [int(k.max()) - lo + 1 for k, lo in zip(ints, lows)]
        if np.prod(spans, dtype=object) < 2 ** 62:
            # One stable argsort of a combined key is several times faster than
            # lexsort's pass per key, and gives the same order.
            key = np.zeros(len(ints[0]), dtype=np.int64)
            for k, lo, span in zip(ints[::-1], lows[::-1], spans[::-1]):
                key *= span
                key += k - lo
            return np.argsort(key, kind="stable")
    return np.lexsort(ints)


class PartitionLog:
    """One partition's steps (a pandas frame of LOG_SCHEMA), and what follows from them."""

    def __init__(self, pdf: pd.DataFrame) -> None:
        pdf = typed(pdf)
        self.topic = pdf["topic"].iloc[0]
        partition = pdf["partition"].iloc[0]
        # Sends whose partition was never learned form a group of their own.
        self.partition = None if pd.isna(partition) else int(partition)
        # One numpy sort by (kind, invoke_index, rec), then each kind is a slice.
        kind = pdf["kind"].to_numpy(dtype=object)
        codes = {k: i for i, k in enumerate(KINDS)}
        # Kinds come in long runs: look up each run's kind, not each step's.
        heads = np.flatnonzero(np.r_[True, kind[1:] != kind[:-1]])
        kcode = np.repeat(np.array([codes.get(k, 9) for k in kind[heads]], dtype=np.int64),
                          np.diff(np.r_[heads, len(kind)]))
        order = sort_order(pdf["rec"].to_numpy(dtype=float, na_value=-1.0),
                           pdf["invoke_index"].to_numpy(dtype=float, na_value=-1.0), kcode)
        bounds = np.searchsorted(kcode[order], np.arange(6))
        # The converter writes a partition's steps in about this order, so a kind is
        # often a slice of the frame already, which needs no copy of every column.
        in_place = order == np.arange(len(order))

        def part(i):
            a, b = bounds[i], bounds[i + 1]
            rows = pdf.iloc[a:b] if in_place[a:b].all() else pdf.take(order[a:b])
            rows.index = pd.RangeIndex(len(rows))
            return rows
        self.writes, self.reads, self.positions, self.offsets, self.watermarks = (
            part(i) for i in range(5))
        self._memo: dict = {}

    @cached_property
    def has_txn_writes(self) -> bool:
        return bool(self.writes["txn"].notna().any())

    @cached_property
    def has_txn_reads(self) -> bool:
        return bool(self.reads["txn"].notna().any())

    def memo(self, name: str, build):
        """A derived frame several checks share, computed once per partition."""
        if name not in self._memo:
            self._memo[name] = build()
        return self._memo[name]

    # ------------------------------------------------------------------ the read log

    @cached_property
    def read_log(self) -> pd.DataFrame:
        """offset, value, vis: offsets reads always saw holding the same value."""
        r = self.reads[["offset", "value", "vis"]].dropna(subset=["offset"])
        r = r.drop_duplicates(["offset", "value"])
        single = ~r["offset"].duplicated(keep=False)
        return r[single & r["value"].notna()].sort_values("offset").reset_index(drop=True)

    @cached_property
    def _visible(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        rl = self.read_log
        out = {}
        for iso, least in ((READ_COMMITTED, VIS_RC), ("other", VIS_RU)):
            sel = rl[rl["vis"].fillna(0).to_numpy() >= least]
            out[iso] = (sel["offset"].to_numpy(dtype=np.int64),
                        sel["value"].to_numpy(dtype=np.int64))
        return out

    def visible(self, isolation: str) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, values), sorted by offset, of the read log visible to readers of
        this isolation."""
        return self._visible[READ_COMMITTED if isolation == READ_COMMITTED else "other"]

    def first_visible(self, isolation: str, lo: int, hi: int | None = None):
        """(offset, value) of the first visible value at lo <= offset (< hi), or None."""
        offs, vals = self.visible(isolation)
        i = np.searchsorted(offs, lo, side="left")
        if i < len(offs) and (hi is None or offs[i] < hi):
            return int(offs[i]), int(vals[i])
        return None

    # ------------------------------------------------------------------------- runs

    @cached_property
    def steps(self) -> pd.DataFrame:
        """Reads and position changes of each process in its order, with run ids.

        Columns: process, kind, op, rec, offset, value, isolation, txn, final, retracted,
        invoke_index, complete_index, run, start (the run's seek position, or NaN),
        start_op (that seek's op).
        """
        # Built column by column in numpy: pandas' concat and sort of nullable and
        # all-None columns cost many times more at millions of rows.
        parts = (self.reads, self.positions)
        nr, n = len(self.reads), len(self.reads) + len(self.positions)
        # Each part holds one kind, so per-part tests on the small or typed columns
        # stand in for object comparisons over the whole concatenation.
        pos_col = np.r_[np.zeros(nr, dtype=bool), np.ones(n - nr, dtype=bool)]
        seek_col = np.r_[np.zeros(nr, dtype=bool), equals(self.positions["type"], "seek")]
        outcome = self.reads["txn_outcome"].to_numpy(dtype=object)
        known = ~pd.isna(outcome)
        retr_col = np.zeros(n, dtype=bool)
        # Missing outcomes (most reads) compare slowly and are never ABORTED.
        retr_col[:nr][known] = outcome[known] == ABORTED
        process = np.concatenate([p["process"].to_numpy(dtype=object) for p in parts])
        codes = pd.factorize(process, sort=True)[0]
        rec = np.concatenate([p["rec"].to_numpy(dtype=float, na_value=np.nan) for p in parts])
        inv = np.concatenate([p["invoke_index"].to_numpy(dtype=float, na_value=np.nan)
                              for p in parts])
        # Each part is in (invoke_index, rec) order already, so that sort is a merge,
        # and a stable sort by the few process codes after it is a radix sort.
        order = sort_order(np.nan_to_num(rec, nan=-1.0), np.nan_to_num(inv, nan=-1.0))
        order = order[np.argsort(codes[order].astype(np.int16) if len(codes) and
                                 codes.max() < 2 ** 15 else codes[order], kind="stable")]
        # One 2-D object block: a frame of separate object columns would be stacked
        # into one by pandas, a second copy.
        # Only the columns the checks read: the kind of position step and the
        # transaction's outcome are in seek_col and retr_col already.
        obj_names = ("process", "kind", "isolation", "txn")
        obj = np.empty((len(obj_names), n), dtype=object)
        is_pos = pos_col[order]
        obj[0] = process[order]
        obj[1] = np.array([READ, POSITION], dtype=object)[is_pos.view(np.int8)]
        # Scattered straight to their rows: one pass over each object column, not a
        # concatenation and then a take.
        rank = np.empty(n, dtype=np.intp)
        rank[order] = np.arange(n)
        for j, c in enumerate(obj_names[2:], 2):
            obj[j, rank[:nr]] = self.reads[c].to_numpy(dtype=object)
            obj[j, rank[nr:]] = self.positions[c].to_numpy(dtype=object)
        # Strings and None only: pandas' look for dates in object columns finds none.
        s = pd.DataFrame(obj.T, columns=list(obj_names), dtype=object, copy=False)
        s["op"] = np.concatenate([p["op"].to_numpy(dtype=float, na_value=np.nan)
                                  for p in parts])[order]
        s["rec"] = rec[order]
        s["offset"] = np.concatenate([p["offset"].to_numpy(dtype=float, na_value=np.nan)
                                      for p in parts])[order]
        s["invoke_index"] = inv[order]
        s["complete_index"] = np.concatenate([
            p["complete_index"].to_numpy(dtype=float, na_value=np.nan) for p in parts])[order]
        fin = np.concatenate([p["final"].fillna(False).to_numpy(dtype=bool) for p in parts])[order]
        s["final"] = fin
        s["value"] = pd.arrays.IntegerArray(
            np.concatenate([p["value"].to_numpy(dtype=np.int64, na_value=0) for p in parts])[order],
            np.concatenate([p["value"].isna().to_numpy(dtype=bool) for p in parts])[order])
        proc = obj[0]
        pcodes = codes[order]
        # Equal codes are equal processes unless nulls (all -1) are among them.
        new_proc = np.r_[True, pcodes[1:] != pcodes[:-1]] if pcodes.min(initial=0) >= 0 \
            else np.r_[True, proc[1:] != proc[:-1]]
        # Isolation and final flag of the latest read at or before each step.
        last_read = np.maximum.accumulate(np.where(~is_pos, np.arange(n), 0))
        iso = obj[2][last_read]
        fin = fin[last_read]
        iso_change = np.r_[True, iso[1:] != iso[:-1]] & ~is_pos
        fin_change = np.r_[True, fin[1:] != fin[:-1]] & ~is_pos
        prev_pos = np.r_[False, is_pos[:-1]]
        # A read right after a position step belongs to the run the step started.
        new_run = new_proc | is_pos | ((iso_change | fin_change) & ~prev_pos)
        s["run"] = np.cumsum(new_run)
        starts = np.flatnonzero(new_run)
        lengths = np.diff(np.r_[starts, n])
        is_seek = seek_col[order][starts]
        s["start"] = np.repeat(np.where(is_seek, s["offset"].to_numpy()[starts], np.nan), lengths)
        s["start_op"] = np.repeat(np.where(is_seek, s["op"].to_numpy()[starts], np.nan), lengths)
        s["retracted"] = retr_col[order]
        return s

    @cached_property
    def read_rows(self) -> np.ndarray:
        """Row numbers in `steps` of the reads of a known offset, in run order."""
        # Reads of unknown offset (null: docs/history.md) say nothing of where a run went.
        # Row numbers, not a filtered copy of every column of the steps.
        st = self.steps
        return np.flatnonzero(equals(st["kind"], READ) & ~np.isnan(st["offset"].to_numpy()))

    @cached_property
    def scans(self) -> pd.DataFrame:
        """process, isolation, final, run, s, e: the offsets each run went over."""
        st = self.steps
        offs = st["offset"].to_numpy(dtype=float)
        rows = self.read_rows
        if not len(rows):
            return pd.DataFrame({"process": [], "isolation": [], "final": [], "run": [],
                                 "s": np.array([], dtype=np.int64),
                                 "e": np.array([], dtype=np.int64)})
        # Reads are in run order, so each run is a contiguous slice.
        run = st["run"].to_numpy()[rows]
        first = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
        offs = offs[rows]
        lo = np.minimum.reduceat(offs, first)
        hi = np.maximum.reduceat(offs, first)
        at = rows[first]
        start = st["start"].to_numpy(dtype=float)[at]
        return pd.DataFrame({
            "process": st["process"].to_numpy(dtype=object)[at],
            "isolation": st["isolation"].to_numpy(dtype=object)[at],
            "final": st["final"].to_numpy(dtype=bool)[at], "run": run[first],
            "s": np.fmin(lo, start).astype(np.int64), "e": hi.astype(np.int64)})

    # ------------------------------------------------------------------ write offsets

    @cached_property
    def write_bounds(self) -> pd.DataFrame:
        """Per write: known (offset or NA), lo, hi (NA when unbounded above)."""
        w = self.writes
        known_np = w["offset"].to_numpy(dtype=float, na_value=np.nan)
        # A write without an offset of its own is where a read first saw its value: look
        # up only those writes' values among the reads (exact integers, by hash).
        need = np.isnan(known_np) & w["value"].notna().to_numpy(dtype=bool)
        if need.any():
            r = self.reads
            wanted = w["value"].to_numpy(dtype=np.int64, na_value=0)[need]
            values = pd.Index(np.unique(wanted))
            at = values.get_indexer(r["value"].to_numpy(dtype=np.int64, na_value=0))
            at[(r["value"].isna() | r["offset"].isna()).to_numpy(dtype=bool)] = -1
            hit = at >= 0
            first = np.full(len(values), np.iinfo(np.int64).max)
            np.minimum.at(first, at[hit], r["offset"].to_numpy(dtype=np.int64, na_value=0)[hit])
            was_read = np.zeros(len(values), dtype=bool)
            was_read[at[hit]] = True
            k = values.get_indexer(wanted)
            known_np[need] = np.where(was_read[k], first[k].astype(float), np.nan)
        known = pd.Series(pd.array(known_np, dtype="Float64"), index=w.index)
        inv = w["invoke_index"].to_numpy(dtype=np.int64)
        done = w["complete_index"].to_numpy(dtype=float, na_value=np.nan)
        acked = equals(w["type"], "ok")

        # lo: after every write acknowledged (with a known offset) before this one's send.
        a = np.flatnonzero(acked & ~np.isnan(known_np) & ~np.isnan(done))
        order = a[np.argsort(done[a], kind="stable")]
        pref_max = np.maximum.accumulate(known_np[order]) if len(order) else np.array([])
        k = np.searchsorted(done[order], inv, side="left")
        lb = np.where(k > 0, pref_max[np.maximum(k - 1, 0)] if len(order) else -1, -1)
        # hi: before every write (with a known offset) sent after this one's ack.
        b = np.flatnonzero(~np.isnan(known_np))
        order_b = b[np.argsort(inv[b], kind="stable")]
        suf_min = (np.minimum.accumulate(known_np[order_b][::-1])[::-1]
                   if len(order_b) else np.array([]))
        j = np.searchsorted(inv[order_b], np.where(np.isnan(done), np.inf, done), side="right")
        ub = np.where(acked & (j < len(order_b)),
                      suf_min[np.minimum(j, max(len(order_b) - 1, 0))] if len(order_b)
                      else np.nan, np.nan)
        lo = np.where(np.isnan(known_np), lb + 1, known_np)
        hi = np.where(np.isnan(known_np), ub - 1, known_np)
        return pd.DataFrame({"known": known, "lo": lo, "hi": hi})

    def covered(self, lo: np.ndarray, hi: np.ndarray, scans: pd.DataFrame) -> np.ndarray:
        """Whether some scan surely went over an offset known to lie in [lo, hi]."""
        out = np.zeros(len(lo), dtype=bool)
        if len(scans) == 0 or len(lo) == 0:
            return out
        s = scans["s"].to_numpy(dtype=np.int64)
        order = np.argsort(s, kind="stable")
        s_sorted = s[order]
        e_max = np.maximum.accumulate(scans["e"].to_numpy(dtype=np.int64)[order])
        k = np.searchsorted(s_sorted, np.nan_to_num(lo, nan=-1), side="right") - 1
        ok = (k >= 0) & ~np.isnan(lo) & ~np.isnan(hi)
        out[ok] = e_max[k[ok]] >= hi[ok]
        return out

    def covering_scan(self, lo: float, hi: float, scans: pd.DataFrame):
        """A scan (row) that covers [lo, hi], for an example's detail, or None."""
        m = scans[(scans["s"] <= lo) & (scans["e"] >= hi)]
        return None if m.empty else m.iloc[0]

    def writer_of(self, value) -> int | None:
        """The send op that wrote `value` to this partition, when one did."""
        ops = self.memo("writer_of", lambda: pd.Series(
            self.writes["op"].to_numpy(dtype=object),
            index=self.writes["value"].to_numpy(dtype=object)).dropna())
        op = ops.get(value) if value is not None and ops.index.is_unique else None
        return None if op is None or pd.isna(op) else int(op)

    @cached_property
    def _scan_ops(self) -> pd.Series:
        """Per run, the op of its read of the highest offset."""
        st = self.steps
        r = st[((st["kind"] == READ) & st["offset"].notna()).to_numpy(dtype=bool)]
        if r.empty:
            return pd.Series(dtype=float)
        top = r.groupby("run", sort=False)["offset"].idxmax()
        return pd.Series(r.loc[top.to_numpy(), "op"].to_numpy(), index=top.index)

    def scan_op(self, scan) -> int | None:
        """The poll at the far end of a scan (its read of the highest offset)."""
        op = None if scan is None else self._scan_ops.get(scan["run"])
        return None if op is None or pd.isna(op) else int(op)
