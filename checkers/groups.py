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

from onceproof.history.format import COMMIT_OFFSETS, FETCH_OFFSETS, SEND_OFFSETS

from . import engine
from .anomaly import AT, VIOLATION, Anomaly, define, fills, num, witnesses
from .partlog import PartitionLog, equals, name_ranks
from .tables import COMMITTED, UNKNOWN

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("offset_regression", "groups", """
       A successful commit of a group's offset for a partition is lower than one the
       same process made that completed before it was invoked, and that process did not
       seek that partition below the earlier offset in between. Commits by different
       processes are not compared: any member of a group may commit, in any order.""",
       fills(**AT, op="the lower commit", offset="", txn="", detail="the earlier commit"),
       roles={"lower commit": "the commit of the lower offset",
              "earlier commit": "the same process's earlier commit of the higher one"}),
    define("stale_offset_fetch", "groups", """
       A fetch_offsets returned an offset no commit it could observe wrote: it may return
       the latest successful commit that completed before it was invoked (or any of
       several that raced each other), any commit in flight while it ran, or any commit
       of uncertain outcome invoked before it completed. Before any successful commit
       completed, it may return only nothing or such a racing or uncertain commit. Of a
       transaction's send_offsets for one partition, a later ok one replaces the earlier
       (the coordinator keeps the last).""",
       fills(**AT, op="the fetch", offset="what it returned, null for none", txn="",
             detail="what it was allowed to return"),
       roles={"fetch": "the fetch_offsets",
              "latest commit": "each commit of what it should have returned, when a commit had "
                               "completed before it began"}),
)
TYPES = tuple(a.name for a in ANOMALIES)


def _record(type, row, detail, offset, witnessed) -> dict:
    return {"type": type, "severity": VIOLATION, "process": row["process"],
            "op": num(row["op"]), "topic": row["topic"], "partition": num(row["partition"]),
            "offset": num(offset), "value": None, "txn": row["txn"], "detail": detail,
            "witnesses": witnesses(*witnessed)}


def _superseded(o: pd.DataFrame) -> np.ndarray:
    """The send_offsets of a transaction that a later ok one of the same transaction
    replaced for the group (the coordinator keeps a transaction's last offset per
    partition): the commit takes effect with the later one's offset alone."""
    sends = equals(o["f"], SEND_OFFSETS) & o["txn"].notna().to_numpy(dtype=bool)
    out = np.zeros(len(o), dtype=bool)
    if sends.sum() < 2:
        return out
    rows = np.flatnonzero(sends)
    # (txn, group) as one integer of their codes (the steps' strings are Categoricals,
    # partlog.typed): pandas' factorize of them as a MultiIndex made a tuple of each.
    txn = o["txn"].array.codes[rows].astype(np.int64)
    group = o["group"].array.codes[rows].astype(np.int64) + 1  # missing (-1): 0
    code = pd.factorize(txn * (int(group.max()) + 1) + group)[0]
    ok = equals(o["type"], "ok")[rows]
    # Steps are in invoke order (PartitionLog): the last ok row of each key, by place.
    last_ok = np.full(code.max() + 1, -1)
    np.maximum.at(last_ok, code[ok], np.flatnonzero(ok))
    out[rows] = np.arange(len(rows)) < last_ok[code]
    return out


class _Steps:
    """The columns of one partition's offset steps the checks use, as numpy arrays
    indexed by row position in pl.offsets (the full rows are read only to report)."""

    def __init__(self, o: pd.DataFrame) -> None:
        def ints(name):
            return (o[name].to_numpy(dtype=np.int64, na_value=0),
                    o[name].isna().to_numpy(dtype=bool))

        self.off, off_na = ints("offset")
        # Each step's effect window.
        self.eff_inv, inv_na = ints("t_begin")
        self.eff_cmp, cmp_na = ints("t_done")
        self.complete, complete_na = ints("complete_index")
        # Kept nullable, and made int64 where used: a missing one fails there as ever.
        self.invoke = o["invoke_index"].array
        self.op = o["op"].array
        # The float views stale_fetches compares in (NaN where missing).
        self.off_f = np.where(off_na, np.nan, self.off.astype(float))
        self.eff_inv_f = np.where(inv_na, np.nan, self.eff_inv.astype(float))
        self.eff_cmp_f = np.where(cmp_na, np.nan, self.eff_cmp.astype(float))
        status = o["status"]
        self.committed = equals(status, COMMITTED)
        self.unknown = equals(status, UNKNOWN)
        self.proc = o["process"].to_numpy(dtype=object)
        self.pcode = name_ranks(o["process"], np.arange(len(o)))
        self.commit = (equals(o["f"], COMMIT_OFFSETS, SEND_OFFSETS) & ~off_na & ~inv_na
                       & (~self.committed | ~cmp_na) & ~_superseded(o))
        self.fetch = equals(o["f"], FETCH_OFFSETS) & ~complete_na


class _Seeks:
    """Per process, the (invoke_index, offset) of its seeks of the partition, sorted by
    invoke_index; built on first use, as most partitions need none."""

    def __init__(self, positions: pd.DataFrame) -> None:
        self._positions = positions
        self._by: dict | None = None

    def of(self, process):
        if self._by is None:
            pos = self._positions
            # A rewind asked for: a seek, or one that ended in info or whose position
            # is unknown (a reset caused by a seek; it may have gone anywhere asked).
            seek = np.flatnonzero(equals(pos["type"], "seek")
                                  | (equals(pos["type"], "reset") & equals(pos["status"], "seek")))
            code, procs = pd.factorize(pos["process"].to_numpy(dtype=object)[seek])
            order = np.argsort(code, kind="stable")
            bounds = np.searchsorted(code[order], np.arange(len(procs) + 1))
            self._by = {p: seek[order[a:b]] for p, a, b in zip(procs, bounds[:-1], bounds[1:])}
        if process not in self._by:
            return None
        rows = self._by[process]
        at = self._positions["invoke_index"].array[rows].to_numpy(dtype=np.int64)
        # An offset not known explains any regression: the consumer may be anywhere.
        off = self._positions["offset"].array[rows].to_numpy(dtype=np.int64,
                                                             na_value=np.iinfo(np.int64).min)
        # Ties in invoke_index fall in or out of a window together, so their order does
        # not change any window's minimum.
        order = np.argsort(at, kind="stable")
        return at[order], off[order]


def _by_eff_cmp(rows: np.ndarray, st: _Steps) -> np.ndarray:
    # Quicksort, as pandas' sort_values: the order among commits completing at the same
    # index (send_offsets of one transaction) decides which one an anomaly names.
    return rows[np.argsort(st.eff_cmp[rows], kind="quicksort")]


def _sought_below(seeks: _Seeks, procs: np.ndarray, after: np.ndarray,
                  before: np.ndarray, below: np.ndarray) -> np.ndarray:
    """For each i: did process procs[i] seek to an offset < below[i] in an op invoked
    strictly between after[i] and before[i]?"""
    out = np.zeros(len(procs), dtype=bool)
    if not len(procs):
        return out
    for p in set(procs):
        sought = seeks.of(p)
        if sought is None:
            continue
        mine = np.flatnonzero(procs == p)
        at, off = sought
        lo = np.searchsorted(at, after[mine], side="right")
        hi = np.searchsorted(at, before[mine], side="left")
        some = lo < hi
        if some.any():
            # The lowest offset sought in each window [lo, hi).
            mins = np.minimum.reduceat(np.r_[off, 0], np.ravel(np.c_[lo[some], hi[some]]))[::2]
            out[mine[some]] = mins < below[mine][some]
    return out


def regressions(o: pd.DataFrame, st: _Steps, commits: np.ndarray, seeks: _Seeks,
                group: str) -> list[dict]:
    """offset_regression: a successful commit of a group's offset for a partition is
    lower than one the same process made that completed before it was invoked (in
    effect windows), and that process did not seek the partition below the earlier
    offset in between. Committed offsets only move back when the application asks for a
    rewind. Commits by different processes are not compared: any member of a group may
    commit its offsets, in any order (manual assignment), so a lower commit by another
    process is the application's doing; fetches still must see the latest commit
    (stale_offset_fetch)."""
    c = commits[st.committed[commits]]
    out: list[dict] = []
    for p in np.unique(st.pcode[c]):
        if p >= 0:
            out += _regressions_of(o, st, _by_eff_cmp(c[st.pcode[c] == p], st), seeks,
                                   group)
    return out


def _regressions_of(o: pd.DataFrame, st: _Steps, c: np.ndarray, seeks: _Seeks,
                    group: str) -> list[dict]:
    """offset_regression among the successful commits (rows of o) of one process,
    sorted by eff_cmp."""
    out: list[dict] = []
    if len(c) < 2:
        return out
    done = st.eff_cmp[c]
    offs = st.off[c]
    best = np.maximum.accumulate(offs)
    # Where each running maximum was set.
    arg = np.maximum.accumulate(np.where(np.r_[True, offs[1:] > best[:-1]],
                                         np.arange(len(offs)), 0))
    eff_inv = st.eff_inv[c]
    k = np.searchsorted(done, eff_inv, side="left") - 1
    cand = np.flatnonzero((k >= 0) & (best[np.maximum(k, 0)] > offs))
    prev = arg[k[cand]]
    inv = st.invoke[c].to_numpy(dtype=np.int64)
    rewound = _sought_below(seeks, st.proc[c][cand], eff_inv[prev], inv[cand], offs[prev])
    for j, p in zip(cand[~rewound], prev[~rewound]):
        row, prev_row = o.iloc[c[j]], o.iloc[c[p]]
        out.append(_record(
            "offset_regression", row,
            f"group {group} committed offset {num(row['offset'])} ({row['f']} op "
            f"{num(row['op'])}) after offset {num(prev_row['offset'])} was committed "
            f"({prev_row['f']} op {num(prev_row['op'])}) by the same process, with no "
            f"seek below it between", row["offset"],
            [(row["op"], "lower commit"), (prev_row["op"], "earlier commit")]))
    return out


def stale_fetches(o: pd.DataFrame, st: _Steps, commits: np.ndarray, fetches: np.ndarray,
                  group: str) -> list[dict]:
    """stale_offset_fetch: a fetch_offsets that returned, for a partition, an offset no
    commit it could observe wrote. It may return the offset of a successful commit that
    completed before the fetch was invoked and was not followed by another such commit
    invoked after it completed; or of any commit that may have taken effect while the
    fetch was in flight (or of uncertain outcome, invoked before the fetch completed).
    Before any successful commit completed, it may return none, or only such a racing
    or uncertain commit."""
    out: list[dict] = []
    if not len(fetches):
        return out
    sure = _by_eff_cmp(commits[st.committed[commits]], st)
    maybe = commits[(st.committed | st.unknown)[commits]]
    s_inv = st.eff_inv[sure]
    s_cmp = st.eff_cmp[sure]
    s_off = st.off[sure]
    s_op = st.op[sure].to_numpy(dtype=np.int64)
    latest_inv = np.maximum.accumulate(s_inv)
    m_inv = st.eff_inv_f[maybe]
    m_cmp = st.eff_cmp_f[maybe]
    m_sure = st.committed[maybe]
    m_off = st.off_f[maybe]
    f_inv = st.invoke[fetches].to_numpy(dtype=np.int64)
    f_cmp = st.complete[fetches]
    f_off = st.off_f[fetches]
    done = np.searchsorted(s_cmp, f_inv, side="left")    # sure[:done] completed before
    # Most fetches return the latest commit (or none before the first): only the
    # others need the full rule.
    latest_off = (np.where(done > 0, s_off[np.maximum(done - 1, 0)], np.nan) if len(s_off)
                  else np.full(len(f_inv), np.nan))
    same = (latest_off == f_off) | (np.isnan(latest_off) & np.isnan(f_off))
    # Commits by offset, to test one returned offset without building the whole set.
    by_off = np.argsort(m_off, kind="stable")
    sorted_off = m_off[by_off]

    def racing(i: int, m) -> np.ndarray:
        """Which of the commits m (rows of maybe) may have taken effect while fetch i
        was in flight, or were of uncertain outcome and invoked before it completed."""
        return racing_all(np.full(len(m_inv[m]), i), m)

    def racing_all(i: np.ndarray, m: np.ndarray) -> np.ndarray:
        """racing, of pairs: fetch i[x] and commit m[x]."""
        return (m_inv[m] < f_cmp[i]) & (~m_sure[m] | ~(m_cmp[m] < f_inv[i]))

    for i in _unexplained(np.flatnonzero(~same), done, f_off, s_cmp, s_off, latest_inv,
                          sorted_off, by_off, racing_all):
        k = done[i]
        got = None if np.isnan(f_off[i]) else int(f_off[i])
        if k == 0 and got is None:
            continue
        # What it may see besides racing commits: before any commit completed, nothing;
        # after, the latest that completed before it began, not superseded (the suffix
        # sure[j:k]).
        j = np.searchsorted(s_cmp, latest_inv[k - 1], side="right") if k > 0 else k
        if got is not None:
            wrote = by_off[np.searchsorted(sorted_off, got, side="left"):
                           np.searchsorted(sorted_off, got, side="right")]
            if (s_off[j:k] == got).any() or racing(int(i), wrote).any():
                continue
        if k == 0:
            latest, why = set(), "no commit had completed before the fetch began"
            latest_ops: list = []
        else:
            latest = {int(x) for x in s_off[j:k]}
            latest_ops = s_op[j:k][:3].tolist()
            why = f"offset {max(latest)} was committed before the fetch began"
        allowed = latest | {int(x) for x in m_off[racing(int(i), slice(None))]
                            if not np.isnan(x)}
        f = o.iloc[fetches[i]]
        shown = (["none"] if k == 0 else []) + [str(x) for x in sorted(allowed)]
        out.append(_record(
            "stale_offset_fetch", f,
            f"group {group} fetch returned offset {got if got is not None else 'none'}, "
            f"but {why} (allowed: [{', '.join(shown)}])", f["offset"],
            [(f["op"], "fetch"), *((op, "latest commit") for op in latest_ops)]))
    return out


def _unexplained(fetches: np.ndarray, done: np.ndarray, f_off: np.ndarray,
                 s_cmp: np.ndarray, s_off: np.ndarray, latest_inv: np.ndarray,
                 sorted_off: np.ndarray, by_off: np.ndarray, racing_all) -> np.ndarray:
    """Of `fetches` (that did not return the latest commit), those stale_fetches' rule
    does not allow, all at once: the rule for one fetch, below, takes tens of
    microseconds, and a partition may have thousands of such fetches (a commit racing
    each). A fetch returned `got` with done commits (of `sure`, by completion) completed
    before it began: allowed is none before any completed, got among the commits
    sure[j:k] (the latest completed, not superseded), or got written by a racing commit."""
    k = done[fetches]
    got = f_off[fetches]
    has = ~np.isnan(got)
    ok = (k == 0) & ~has
    # sure[j:k] holds got when the last of the sure commits of offset got below k is at
    # or after j: commits ranked by (offset, place), one search per fetch.
    j = k.copy()
    after = k > 0
    j[after] = np.searchsorted(s_cmp, latest_inv[k[after] - 1], side="right")
    if len(s_off):
        values, rank = np.unique(s_off, return_inverse=True)
        span = len(s_off) + 1
        keys = np.sort(rank.astype(np.int64) * span + np.arange(len(s_off)))
        where = np.searchsorted(values, np.where(has, got, 0).astype(np.int64))
        known = has & (where < len(values))
        known[known] = values[where[known]] == got[known].astype(np.int64)
        below = np.searchsorted(keys, where.astype(np.int64) * span + k, side="left") - 1
        last = keys[np.maximum(below, 0)]
        ok |= known & (below >= 0) & (last // span == where) & (last % span >= j)
    # Or a racing commit wrote got: each fetch paired with every commit of offset got.
    lo = np.searchsorted(sorted_off, got, side="left")
    n = np.where(has & ~ok, np.searchsorted(sorted_off, got, side="right") - lo, 0)
    if n.sum():
        pair = np.repeat(np.arange(len(fetches)), n)
        first = np.cumsum(n) - n
        commit = by_off[lo[pair] + np.arange(n.sum()) - first[pair]]
        hit = racing_all(fetches[pair], commit)
        ok |= np.bincount(pair[hit], minlength=len(fetches)) > 0
    return fetches[~ok]


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    out: list[dict] = []
    if pl.offsets.empty:
        return []
    o = pl.offsets
    # The groups in the order of their names (a Categorical would sort by its codes).
    gcode, names = pd.factorize(o["group"].to_numpy(dtype=object), sort=True)
    if len(names):
        st = _Steps(o)
        seeks = _Seeks(pl.positions)
        # Each group's rows, in log order.
        rows = np.argsort(gcode, kind="stable")
        bounds = np.searchsorted(gcode[rows], np.arange(len(names) + 1))
        for g, group in enumerate(names):
            mine = rows[bounds[g]:bounds[g + 1]]
            commits = mine[st.commit[mine]]
            out += regressions(o, st, commits, seeks, group)
            out += stale_fetches(o, st, commits, mine[st.fetch[mine]], group)
    return [engine.anomalies(out)]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
