"""Everything the history says about one partition's log, in one place.

Most anomalies are properties of one partition: what each offset holds, where each
consumer's reads went, which writes a reader passed over. So the converter writes the
history as one table of steps (checkers/tables.py, "steps"), grouped by (topic,
partition) when it is written (checkers/spool.py), and every per-partition check is a
pandas function over one partition's steps (PartitionLog). checkers/engine.py hands
each partition's steps to every family's check at once, in this process or in one
Spark job, with no shuffle.

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

from collections.abc import Iterator
from functools import cached_property

import numpy as np
import pandas as pd
import pyarrow as pa

from .arrow import KeyIndex
from .tables import ABORTED, READ_COMMITTED, SCHEMAS

LOG_SCHEMA = SCHEMAS["steps"]

# Kinds of steps in the log table.
WRITE, READ, POSITION, WATERMARK, OFFSET = "w", "r", "p", "m", "o"
# The order of the kinds within each partition's steps, as the converter writes them
# (checkers/flatten.py), so a kind is often a slice of the frame already.
KINDS = (WRITE, READ, POSITION, OFFSET, WATERMARK)
# Visibility of a read value (vis): to read_committed readers, to read_uncommitted only.
VIS_RC, VIS_RU, VIS_NONE = 2, 1, 0
NONE = np.iinfo(np.int64).min  # stands for a missing value in integer arrays


def typed(pdf: pd.DataFrame) -> pd.DataFrame:
    """Columns in nullable pandas dtypes whatever Arrow made of them (a long column
    with nulls arrives as float64, a boolean one as object), strings as Categoricals
    (as engine.steps_frame makes them)."""
    out = {}
    for fld in LOG_SCHEMA:
        if fld.name not in pdf:
            continue
        col = pdf[fld.name]
        if fld.type == pa.string() and not isinstance(col.dtype, pd.CategoricalDtype):
            col = col.astype("category")
        elif fld.type == pa.int64() and not isinstance(col.dtype, pd.Int64Dtype):
            col = col.astype("Int64")
        elif fld.type == pa.bool_() and not isinstance(col.dtype, pd.BooleanDtype):
            col = col.astype("boolean")
        out[fld.name] = col
    return pd.DataFrame(out, index=pdf.index, copy=False)


def equals(col: pd.Series, *values: str) -> np.ndarray:
    """Where `col` is one of `values`, as numpy booleans (missing: False)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        want = col.cat.categories.get_indexer(list(values))
        codes = col.array.codes
        out = np.zeros(len(codes), dtype=bool)
        for code in want[want >= 0]:
            out |= codes == code
        return out
    a = col.to_numpy(dtype=object)
    try:
        # numpy compares an object column several times faster than pandas' == or isin.
        out = a == values[0]
        for v in values[1:]:
            out |= a == v
        return np.asarray(out, dtype=bool)
    except TypeError:  # pd.NA among the values: it has no truth value
        return col.isin(values).fillna(False).to_numpy(dtype=bool)


def sorted_codes(*cols: pd.Series) -> list[np.ndarray]:
    """Each column of strings as integers that order its values as they sort, the same
    integer for the same value in every column, -1 where missing: pd.factorize's
    codes with sort=True, without making every value a Python object. The columns are
    Categoricals of one frame of steps (typed), so they share their categories."""
    dtype = cols[0].dtype
    if any(c.dtype != dtype for c in cols):
        raise ValueError("sorted_codes compares columns of one frame of steps only")
    names = dtype.categories.to_numpy(dtype=object)
    rank = np.empty(len(names) + 1, dtype=np.int64)
    rank[np.argsort(names, kind="stable")] = np.arange(len(names))
    rank[-1] = -1  # a missing value's code, -1, takes the last place: -1 again
    return [rank[c.array.codes] for c in cols]


def name_ranks(col: pd.Series, rows: np.ndarray, empty_is_missing: bool = False) -> np.ndarray:
    """The values of a Categorical column of strings at `rows` as pd.factorize's codes
    with sort=True (their places among the distinct values there, by name; -1 where
    missing), from the codes: only the names in use are sorted, and no Python object is
    made per row. With empty_is_missing, an empty name is missing too."""
    codes = col.array.codes[rows].astype(np.int64)
    names = col.cat.categories.to_numpy(dtype=object)
    if empty_is_missing:
        codes[np.isin(codes, np.flatnonzero(names == ""))] = -1
    used, at = np.unique(codes, return_inverse=True)
    known = used >= 0  # -1, when there, is used[0]
    rank = np.full(len(used), -1, dtype=np.int64)
    rank[np.flatnonzero(known)[np.argsort(names[used[known]], kind="stable")]] = \
        np.arange(int(known.sum()))
    return rank[at]


def row_at(frame: pd.DataFrame, i: int) -> dict:
    """Row i (a place, not a label) of a frame as a dict, taken column by column: pandas
    makes a row of the steps' Categoricals by hashing every category (every
    transaction's name), 0.04 s a bucket at 10M events."""
    return {c: frame[c].iloc[i] for c in frame.columns}


def each_row(frame: pd.DataFrame) -> Iterator[pd.Series]:
    """The rows of a frame, as iterrows gives them. A frame with Categorical columns
    (the steps, engine.steps_frame) makes pandas hash their categories (every
    transaction's name) to lay out its rows, even when it has none: at 10M events
    that was 0.13 of a bucket's 2 s, for frames of anomalies that mostly are empty."""
    if frame.empty:
        return iter(())
    return (row for _, row in frame.iterrows())


def _keys(*sets: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    """For each set of integer-valued columns (first column primary), one int64 per row
    that orders the rows of every set as their columns do."""
    cols = [[k.astype(np.int64, copy=False) for k in col] for col in zip(*sets)]
    if not any(len(k) for k in cols[0]):
        return [np.zeros(0, dtype=np.int64) for _ in sets]
    lows = [min(int(k.min()) for k in col if len(k)) for col in cols]
    spans = [max(int(k.max()) for k in col if len(k)) - lo + 1 for col, lo in zip(cols, lows)]
    if np.prod(spans, dtype=object) < 2 ** 62:
        # The columns folded into one integer, the first one most significant.
        out = []
        for j in range(len(sets)):
            # In place, no temporary per column; a sum past int64 before its `lo` is
            # taken off wraps, and wraps back (the key itself is below 2**62).
            key = cols[0][j] - lows[0]
            for col, lo, span in zip(cols[1:], lows[1:], spans[1:]):
                key *= span
                key += col[j]
                key -= lo
            out.append(key)
        return out
    # Else each row's rank among the distinct rows.
    sizes = np.cumsum([len(keys[0]) for keys in sets])[:-1]
    ints = [np.concatenate(col) for col in cols[::-1]]  # lexsort's order: last primary
    order = np.lexsort(ints)
    differs = np.zeros(len(order), dtype=bool)
    for k in ints:
        ko = k[order]
        differs[1:] |= ko[1:] != ko[:-1]
    key = np.empty(len(order), dtype=np.int64)
    key[order] = np.cumsum(differs)
    return np.split(key, sizes)


def first_of_each(*cols: np.ndarray) -> np.ndarray:
    """Where a row is the first with its values of the integer-valued cols: the rows
    drop_duplicates keeps.

    When the first column's values are dense (a partition's offsets), each value's
    first row is found by one scatter, and only the rows that differ from it in
    another column are hashed: about half the CPU of hashing every row."""
    head = cols[0].astype(np.int64, copy=False)
    n = len(head)
    lo, hi = (int(head.min()), int(head.max())) if n else (0, 0)
    if not n or hi - lo + 1 > 2 * n:
        return _first_hashed(cols)
    at_head = head - lo
    first = np.full(hi - lo + 1, n)
    np.minimum.at(first, at_head, np.arange(n))
    at = first[at_head]
    keep = np.zeros(n, dtype=bool)
    keep[at] = True
    differs = np.zeros(n, dtype=bool)
    for col in cols[1:]:
        differs |= col != col[at]
    if differs.any():
        # Every row of such values differs from its value's first row: all are here.
        odd = np.flatnonzero(differs)
        keep[odd[_first_hashed(tuple(col[odd] for col in cols))]] = True
    return keep


def _first_hashed(cols: tuple[np.ndarray, ...]) -> np.ndarray:
    # One hash of a folded key: pandas hashes each column, then their combination.
    return ~pd.Series(_keys(cols)[0]).duplicated().to_numpy()


def sort_order(*keys: np.ndarray) -> np.ndarray:
    """np.lexsort(keys) (last key primary), for integer-valued keys."""
    # One stable argsort of a combined key is several times faster than lexsort's pass
    # per key, and gives the same order.
    return np.argsort(_keys(keys[::-1])[0], kind="stable")


class PartitionLog:
    """One partition's steps (a pandas frame of LOG_SCHEMA), and what follows from them."""

    def __init__(self, pdf: pd.DataFrame) -> None:
        pdf = typed(pdf)
        self.topic = pdf["topic"].iloc[0]
        partition = pdf["partition"].iloc[0]
        # Sends whose partition was never learned form a group of their own.
        self.partition = None if pd.isna(partition) else int(partition)
        # One numpy sort by (kind, invoke_index, rec), then each kind is a slice.
        codes = {k: i for i, k in enumerate(KINDS)}
        kind = pdf["kind"]
        # Each kind's code looked up once, then taken by the steps' codes (a missing
        # kind's, -1, takes the last).
        kinds = np.array([codes.get(k, 9) for k in kind.cat.categories] + [9], dtype=np.int64)
        kcode = kinds[kind.array.codes]
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
        if self.reads["offset"].hasnans:
            self.reads = _placed(self.reads, self.writes)
        self._memo: dict = {}

    @cached_property
    def has_txn_writes(self) -> bool:
        return bool(self.writes["txn"].notna().any())

    @cached_property
    def has_txn_reads(self) -> bool:
        return bool(self.reads["txn"].notna().any())

    @cached_property
    def read_committed(self) -> np.ndarray:
        """Which of the reads are read_committed (numpy booleans), compared once."""
        return equals(self.reads["isolation"], READ_COMMITTED)

    @cached_property
    def last_watermarks(self) -> dict | None:
        """The last watermarks read of the partition (its row of `watermarks`), or None."""
        return row_at(self.watermarks, -1) if len(self.watermarks) else None

    def memo(self, name: str, build):
        """A derived frame several checks share, computed once per partition."""
        if name not in self._memo:
            self._memo[name] = build()
        return self._memo[name]

    # ------------------------------------------------------------------ the read log

    @property
    def read_log(self) -> pd.DataFrame:
        """offset, value, vis: offsets reads always saw holding the same value."""
        return self._read_log[0]

    @property
    def read_log_reads(self) -> np.ndarray:
        """For each row of read_log, the first of self.reads that saw it."""
        return self._read_log[1]

    @cached_property
    def _read_log(self) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        r = self.reads[["offset", "value", "vis"]].dropna(subset=["offset"])
        missing = r["value"].isna().to_numpy()
        first = first_of_each(r["offset"].to_numpy(dtype=np.int64),
                              r["value"].to_numpy(dtype=np.int64, na_value=0),
                              missing.astype(np.int64))
        r, missing = r[first], missing[first]
        single = ~r["offset"].duplicated(keep=False).to_numpy()
        log = r[single & ~missing].sort_values("offset")
        contested = np.unique(r["offset"].to_numpy(dtype=np.int64)[~single])
        # The reads are numbered 0.. (__init__), so their labels are their places.
        return log.reset_index(drop=True), log.index.to_numpy(), contested

    @property
    def contested_offsets(self) -> np.ndarray:
        """The offsets reads saw holding two or more values, sorted."""
        return self._read_log[2]

    def holds(self, offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Whether what reads saw at each offset (float, NaN: not known) agrees with
        its value: no read there, or every read there returned that value."""
        out = np.isnan(offsets)
        at = np.flatnonzero(~out)
        if not len(at):
            return out
        o = offsets[at].astype(np.int64)
        log = self.read_log
        i, read = _places(log["offset"].to_numpy(dtype=np.int64), o)
        same = np.zeros(len(o), dtype=bool)
        same[read] = log["value"].to_numpy(dtype=np.int64)[i[read]] == values[at][read]
        out[at] = ~_places(self.contested_offsets, o)[1] & (~read | same)
        return out

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
    def _runs(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The reads of a known offset, each process's in its order, with the runs
        they belong to; and where each is among self.reads."""
        r, p = self.reads, self.positions
        nr = len(r)
        # A process's steps in (invoke_index, rec) order, a missing one as -1, reads
        # before positions on a tie: the order __init__ gave each kind already, so a
        # stable sort by process code puts each kind in place, and the few positions
        # are merged in between the reads by one binary search.
        codes = np.concatenate(sorted_codes(r["process"], p["process"]))
        small = codes.astype(np.int16) if len(codes) and codes.max() < 2 ** 15 else codes
        r_order = np.argsort(small[:nr], kind="stable")
        p_order = np.argsort(small[nr:], kind="stable")

        def ints(frame, name):
            return frame[name].to_numpy(dtype=np.int64, na_value=-1)
        rkey, pkey = _keys((codes[:nr], ints(r, "invoke_index"), ints(r, "rec")),
                           (codes[nr:], ints(p, "invoke_index"), ints(p, "rec")))
        rkey, pkey = rkey[r_order], pkey[p_order]
        # ins[j]: how many reads come before position j (in p_order).
        ins = np.searchsorted(rkey, pkey, side="right")
        i = np.arange(nr)
        pos_before = np.zeros(nr + 1, dtype=bool)
        pos_before[ins] = True
        pos_before = pos_before[:nr]
        # The last position of each gap: the step before the read after it.
        gap_pos = np.full(nr, -1)
        ends = np.r_[ins[1:] != ins[:-1], True] & (ins < nr)
        gap_pos[ins[ends]] = np.flatnonzero(ends)
        rcode, pcode = codes[:nr][r_order], codes[nr:][p_order]
        prev_code = np.r_[-2, rcode][:nr]
        prev_code[pos_before] = pcode[gap_pos[pos_before]]
        iso = r["isolation"].array.codes[r_order]  # compared with neighbours only
        fin = r["final"].fillna(False).to_numpy(dtype=bool)[r_order]
        # A run starts at every position step, at a change of process, and at a change
        # of isolation or of the final flag between two reads.
        new_run = (rcode != prev_code) | (~pos_before & (
            np.r_[True, iso[1:] != iso[:-1]] | np.r_[True, fin[1:] != fin[:-1]]))
        # Reads of unknown offset (null: docs/history.md) say nothing of where a run
        # went: the read after one starts a run of its own, at an unknown position (it
        # may have returned what a gap around it holds).
        known = ~r["offset"].isna().to_numpy(dtype=bool)[r_order]
        if not known.all():
            new_run[1:] |= ~known[:-1] & (rcode[1:] == rcode[:-1])
        # Plus how many positions come at or before each read (counted, not searched).
        run = np.cumsum(new_run) + np.cumsum(np.bincount(ins, minlength=nr + 1))[:nr]
        # A read's run began at a position when a gap with positions comes after its
        # run's first read: then at the last position of that gap, if it was a seek.
        last_new = np.maximum.accumulate(np.where(new_run, i, -1))
        last_gap = np.maximum.accumulate(np.where(pos_before, i, -1))
        seek = equals(p["type"], "seek")[p_order]
        gap_start = np.full(nr + 1, np.nan)  # the last one: no position
        gap_start_op = np.full(nr + 1, np.nan)
        head = gap_pos[pos_before]
        gap_start[:nr][pos_before] = np.where(
            seek[head], p["offset"].to_numpy(dtype=float, na_value=np.nan)[p_order][head], np.nan)
        gap_start_op[:nr][pos_before] = np.where(
            seek[head], p["op"].to_numpy(dtype=float, na_value=np.nan)[p_order][head], np.nan)
        # A run begun at an assign that named no position (a reset caused by an assign).
        gap_assign = np.zeros(nr + 1, dtype=bool)
        gap_assign[:nr][pos_before] = (~seek[head]
                                       & equals(p["status"], "assign")[p_order][head])
        gap = np.where(last_gap > last_new, last_gap, nr)
        offset = r["offset"].to_numpy(dtype=np.int64, na_value=-1)
        keep = slice(None) if known.all() else known
        at = r_order[keep]
        retracted = equals(r["txn_outcome"], ABORTED)
        gap = gap[keep]
        return {"run": run[keep], "offset": offset[at],
                "op": r["op"].to_numpy(dtype=float, na_value=np.nan)[at],
                "rec": r["rec"].to_numpy(dtype=float, na_value=np.nan)[at],
                "isolation": r["isolation"].array.take(at), "rc": self.read_committed[at],
                "retracted": retracted[at],
                "txn": r["txn"].array.codes[at].astype(np.int64),
                "invoke": r["invoke_index"].to_numpy(dtype=np.int64, na_value=-1)[at],
                "start": gap_start[gap], "start_op": gap_start_op[gap],
                "from_assign": gap_assign[gap]}, at

    @property
    def runs(self) -> dict[str, np.ndarray]:
        """The reads of a known offset, each process's in its order (the order of its
        ops, and within a poll of its records), as equal-length arrays: run (its run's
        number), offset, op, rec, isolation, rc (`read_committed`'s), retracted (its
        transaction aborted), txn (its poll's transaction, as a code of the steps'
        Categorical; -1: none), invoke (its poll's invoke index), start (its run's seek
        position, or NaN), start_op (that seek's op) and from_assign (its run began at an
        assign that named no position)."""
        return self._runs[0]

    def run_read(self, i: int) -> dict:
        """Read i of `runs`, every column of the read and its run's start_op."""
        return {**self.reads.iloc[int(self._runs[1][i])].to_dict(),
                "start_op": self.runs["start_op"][i]}

    @cached_property
    def _run_heads(self) -> np.ndarray:
        """Where each run starts among `runs`: each run is a contiguous slice of them."""
        run = self.runs["run"]
        return np.flatnonzero(np.r_[True, run[1:] != run[:-1]]) if len(run) else np.zeros(0, int)

    @cached_property
    def scans(self) -> pd.DataFrame:
        """process, isolation, final, run, s, e: the offsets each run went over; and
        start_op: the op where its scan began (the seek or assign whose position is s,
        else the poll of its first read); known_start: a seek or assign gave its start."""
        runs, at = self._runs
        if not len(at):
            return pd.DataFrame({"known_start": np.array([], dtype=bool),
                                 "process": [], "isolation": [], "final": [], "run": [],
                                 "s": np.array([], dtype=np.int64),
                                 "e": np.array([], dtype=np.int64),
                                 "start_op": np.array([], dtype=float)})
        run, offs, first = runs["run"], runs["offset"], self._run_heads
        lo = np.minimum.reduceat(offs, first)
        hi = np.maximum.reduceat(offs, first)
        heads = at[first]
        r = self.reads
        start = runs["start"][first]
        from_start = start <= lo  # False where NaN: no recorded position
        return pd.DataFrame({
            "known_start": ~np.isnan(start),
            "process": r["process"].to_numpy(dtype=object)[heads],
            "isolation": runs["isolation"][first],
            "final": r["final"].to_numpy(dtype=bool, na_value=False)[heads], "run": run[first],
            "s": np.fmin(lo, start).astype(np.int64), "e": hi,
            "start_op": np.where(from_start, runs["start_op"][first],
                                 runs["op"][first]).astype(float)})

    # ------------------------------------------------------------------ write offsets

    @cached_property
    def value_matches(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct values written (a missing one as NONE), which of them each write
        wrote, and which of them each read returned (-1: none), computed once: each read
        is matched by hash once, for every kind of read and every check."""
        # Exact integers: values need not fit a float's 53 bits.
        values = self.writes["value"].to_numpy(dtype=np.int64, na_value=NONE)
        distinct, which = np.unique(values, return_inverse=True)
        read = self.reads["value"].to_numpy(dtype=np.int64, na_value=NONE)
        at = KeyIndex(distinct).get_indexer(read)
        # NONE is a value a history may hold too (the least int64): a missing one is
        # matched by its mask, not by it.
        if self.reads["value"].hasnans:
            at[self.reads["value"].isna().to_numpy(dtype=bool)] = -1
        return distinct, which, at

    @cached_property
    def write_bounds(self) -> pd.DataFrame:
        """Per write: known (offset or NA), lo, hi (NA when unbounded above)."""
        w = self.writes
        known_np = w["offset"].to_numpy(dtype=float, na_value=np.nan)
        # A write without an offset of its own is where a read first saw its value (a
        # read of a known offset).
        need = np.isnan(known_np) & w["value"].notna().to_numpy(dtype=bool)
        if need.any():
            distinct, which, at = self.value_matches
            wanted = np.zeros(len(distinct), dtype=bool)
            wanted[which[need]] = True
            offset = self.reads["offset"]
            hit = np.flatnonzero(at >= 0)
            hit = hit[wanted[at[hit]] & offset.notna().to_numpy(dtype=bool)[hit]]
            first = np.full(len(distinct), np.iinfo(np.int64).max)
            np.minimum.at(first, at[hit], offset.to_numpy(dtype=np.int64, na_value=0)[hit])
            was_read = np.zeros(len(distinct), dtype=bool)
            was_read[at[hit]] = True
            k = which[need]
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
        return _covering(lo, hi, scans) >= 0

    def covering_scan_ops(self, lo: np.ndarray, hi: np.ndarray,
                          scans: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """For each [lo, hi], a scan that covers it: the poll at its far end and the op
        where it began (NaN when none covers)."""
        far, start = np.full(len(lo), np.nan), np.full(len(lo), np.nan)
        at = _covering(lo, hi, scans)
        ok = at >= 0
        chosen = scans.iloc[at[ok]]
        far[ok] = self._scan_ops.reindex(chosen["run"].to_numpy()).to_numpy(dtype=float)
        start[ok] = chosen["start_op"].to_numpy(dtype=float)
        return far, start

    def first_reads(self, rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """For the writes at `rows`, the position in `reads` of the first read in `mask`
        that returned the write's value, or -1."""
        distinct, which, at = self.value_matches
        hits = np.flatnonzero((at >= 0) & mask)
        first = np.full(len(distinct), len(at))
        np.minimum.at(first, at[hits], hits)
        found = first[which[rows]]
        return np.where(found < len(at), found, -1)

    def covering_scans(self, lo: float, hi: float, scans: pd.DataFrame) -> pd.DataFrame:
        """The scans that cover [lo, hi], the first of each process: its witnesses."""
        m = scans[(scans["s"] <= lo) & (scans["e"] >= hi)]
        return m.drop_duplicates("process")

    def writer_of(self, value) -> int | None:
        """The send op that wrote `value` to this partition, when one did."""
        ops = self.memo("writer_of", lambda: pd.Series(
            self.writes["op"].to_numpy(dtype=object),
            index=self.writes["value"].to_numpy(dtype=object)).dropna())
        op = ops.get(value) if value is not None and ops.index.is_unique else None
        return None if op is None or pd.isna(op) else int(op)

    @cached_property
    def _scan_ops(self) -> pd.Series:
        """Per run, the op of its read of the highest offset (the first such read)."""
        runs = self.runs
        run, offs, first = runs["run"], runs["offset"], self._run_heads
        if not len(run):
            return pd.Series(dtype=float)
        top = offs == np.repeat(np.maximum.reduceat(offs, first), np.diff(np.r_[first, len(run)]))
        hits = np.flatnonzero(top)
        hits = hits[np.r_[True, run[hits][1:] != run[hits][:-1]]]
        return pd.Series(runs["op"][hits], index=run[hits])

    def scan_op(self, scan) -> int | None:
        """The poll at the far end of a scan (its read of the highest offset)."""
        op = None if scan is None else self._scan_ops.get(scan["run"])
        return None if op is None or pd.isna(op) else int(op)


def _places(sorted_: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of x would stand in the sorted array, and whether it is there."""
    i = np.searchsorted(sorted_, x)
    if not len(sorted_):
        return i, np.zeros(len(x), dtype=bool)
    return i, sorted_[np.minimum(i, len(sorted_) - 1)] == x


def _placed(reads: pd.DataFrame, writes: pd.DataFrame) -> pd.DataFrame:
    """The reads, each of unknown offset (null: the client did not say) placed where
    its value is known to be, from an ack or another read, when that is one offset:
    the order of reads is known from acks as that of sends is from reads."""
    def placed(f: pd.DataFrame) -> np.ndarray:
        return f["offset"].notna().to_numpy(dtype=bool) & f["value"].notna().to_numpy(dtype=bool)

    miss = reads["offset"].isna().to_numpy(dtype=bool) & reads["value"].notna().to_numpy(dtype=bool)
    if not miss.any():
        return reads
    # Every (value, offset) an ack or a read observed.
    at = [placed(f) for f in (writes, reads)]
    pairs = pd.DataFrame({c: np.concatenate([f[c].to_numpy(dtype=np.int64, na_value=0)[m]
                                             for f, m in zip((writes, reads), at)])
                          for c in ("value", "offset")}).drop_duplicates()
    one = pairs[~pairs["value"].duplicated(keep=False).to_numpy(dtype=bool)]
    where = pd.Series(one["offset"].to_numpy(), index=one["value"].to_numpy())
    rows = np.flatnonzero(miss)
    found = where.reindex(reads["value"].to_numpy(dtype=np.int64, na_value=0)[rows])
    known = found.notna().to_numpy(dtype=bool)
    if not known.any():
        return reads
    reads = reads.copy()
    offset = reads["offset"].array.copy()
    offset[rows[known]] = found.to_numpy()[known].astype(np.int64)
    reads["offset"] = offset
    return reads


def _covering(lo: np.ndarray, hi: np.ndarray, scans: pd.DataFrame) -> np.ndarray:
    """For each [lo, hi], the position in `scans` of one that surely went over it (the
    furthest-reaching of those begun at or below lo), or -1."""
    out = np.full(len(lo), -1)
    if len(scans) == 0 or len(lo) == 0:
        return out
    s = scans["s"].to_numpy(dtype=np.int64)
    e = scans["e"].to_numpy(dtype=np.int64)
    order = np.argsort(s, kind="stable")
    # The furthest-reaching scan among the first k+1 to begin, for every k.
    top = np.maximum.accumulate(e[order])
    rises = np.r_[True, top[1:] > top[:-1]]  # where a new furthest is first reached
    best = order[np.maximum.accumulate(np.where(rises, np.arange(len(order)), 0))]
    k = np.searchsorted(s[order], np.nan_to_num(lo, nan=-1), side="right") - 1
    ok = (k >= 0) & ~np.isnan(lo) & ~np.isnan(hi)
    ok[ok] = top[k[ok]] >= hi[ok]
    out[ok] = best[k[ok]]
    return out
