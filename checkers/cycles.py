"""Cycles in the dependency graph of committed transactions: g0, g1c, g_single.

Nodes are committed transactions. Edges say "T1 must come before T2":

- ww T1 -> T2: in some partition every record T1 may have is below every record T2
  may have (offsets bounded as in checkers/spans.py; interleaved records give no
  edge). Only edges to the transactions that start first after T1 ends are built;
  the rest follow through them.
- wr T1 -> T2: T2 (a transaction that polls, such as a consume-transform-produce
  step) read a value T1 wrote.
- rw T1 -> T2: T1's polls read partition p up to offset o and every record T2 may
  have in p is beyond o: T1 saw p before T2's records were in it (again only to the
  first transactions after o).

An edge may show in several places (a ww edge in every partition both transactions
wrote in that order, a wr edge in every partition T2 read T1's values from): each is a
witness of it, and all of them hold.

g0: a cycle of ww edges only. g1c: a cycle of ww and wr edges with at least one wr.
g_single: a cycle with exactly one rw edge, the rest ww or wr. One cycle is reported
per strongly connected component (for g_single: per component of the whole graph).
A component holding a g0 cycle that is a violation (below) reports a g0 violation;
one holding such a g1c cycle reports a g1c or a g0 violation. g_single is searched
within bounds: a violation is reported when one of the first rw edges tried closes
one through an impossible edge (below).

Severity. Kafka does not claim serializability: transactions take no locks, so two
concurrent transactions writing the same two partitions can append in opposite orders
(a ww cycle), and a transaction that wrote p early can later read what a concurrent
transaction committed after appending to p behind it (a ww + wr cycle). Such cycles are
`note`s. A cycle is a `violation` only when no real-time execution could produce it:
each record was appended while its send was in flight, a read_committed read of a
value happened after that value's transaction began committing, and a
read_uncommitted one after the value was appended. The cycle's edges, with these
windows taken from the ops of every witness of each edge, form a system of
constraints; if it has no solution (for example a cycle of wr edges, or transactions
that did not overlap in time), the history contradicts real time and the cycle is a
violation.

A system has no solution exactly when one witness alone has none, or a chain of ww
witnesses in one partition along consecutive edges of the cycle does: a record was
sent after a record above it in the log was acknowledged. Such a chain implies a ww
edge (not built, as it follows through others) whose own witness has no solution
(unless a transaction's own sends to the partition landed out of order, a
nonmonotonic_send). So each search first closes a cycle through an edge with an
impossible witness, built or implied (`impossible`, `_Graph.implied` below): every cycle
through it is a violation. Then, for the notes, through any edge.
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from . import anomaly, engine, graph, spans
from .anomaly import AT, EITHER, Anomaly, define, fills
from .partlog import PartitionLog, equals, sort_order
from .tables import COMMITTED, READ_COMMITTED

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("g0", "cycles", """
       Write cycle: a cycle of ww edges between committed transactions. A note, since
       concurrent transactions may append to two partitions in opposite orders; a
       violation when no real-time execution could produce it.""",
       fills(**AT, op="the first edge's source op", offset="the first edge's source offset",
             txn="the first edge's source transaction", detail="the cycle, edge by edge"),
       on_driver=True,
       roles={"edge N source": "edge N's source op, the send of the source transaction's last record "
                               "below the target's (edge 1 is the detail's first)",
              "edge N target": "its target op, the send of the target's first record there"},
       severity=EITHER),
    define("g1c", "cycles", """
       Circular information flow: a cycle of ww and wr edges with at least one wr. A note
       when real time allows it; a violation when no real-time execution could produce
       it.""",
       fills(**AT, op="the first edge's source op", offset="the first edge's source offset",
             value="the value read, on a wr edge", txn="the first edge's source transaction",
             detail="the cycle, edge by edge"),
       on_driver=True,
       roles={"edge N source": "edge N's source op (edge 1 is the detail's first): on a ww edge the "
                               "send of the source's last record below the target's; on a wr edge the "
                               "send of the value read, unless the read was read_committed (the "
                               "commit orders it then, and no op is named)",
              "edge N target": "its target op: on a ww edge the send of the target's first record "
                               "there, on a wr edge the poll that read the value"},
       severity=EITHER),
    define("g_single", "cycles", """
       Read skew: a cycle with exactly one rw edge, the rest ww or wr. A note when real
       time allows it; a violation when no real-time execution could produce it.""",
       fills(**AT, op="the first edge's source op", offset="the first edge's source offset",
             value="the value read, on a wr edge", txn="the first edge's source transaction",
             detail="the cycle, edge by edge"),
       on_driver=True,
       roles={"edge N source": "edge N's source op, as for g1c; on the rw edge the source's poll of "
                               "the highest offset it read",
              "edge N target": "its target op, as for g1c; on the rw edge the send of the target's "
                               "first record there"},
       severity=EITHER),
)
TYPES = tuple(a.name for a in ANOMALIES)
WW, WR, RW = "ww", "wr", "rw"
EDGE_FACT = "edge"
FACTS = (EDGE_FACT,)  # the fact rows finish reads (checkers/engine.py)
# Their columns that edges() reads: 1.5M edge rows at 10M events, so no others converted.
FACT_COLUMNS = ("txn", "txn2", "kind", "process", "topic", "partition", "op", "a1", "a2",
                "a3", "a4", "a5", "a6", "offset", "value")
# The transactions' names come as Categoricals (engine.Facts.of): of 3M names at 10M
# events, each distinct one is made a Python string and hashed once (_node_codes).
FACT_CODED = ("txn", "txn2")
# An edge fact: txn -> txn2 of `kind`, witnessed by the source op (op, a1 = invoke
# index, a2 = complete index, offset = source offset) and the target op (a3, a4, a5,
# a6 = target offset); value = the value read, for wr.
# rw edges (and edges with an impossible witness) tried per component when looking for
# a g_single (g1c) cycle.
_RW_TRIES = 20


def _after(writers: pd.DataFrame, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j): writer j (of writers, sorted by lo) has every record above
    bounds[i] and starts no later than the first such writer to end."""
    los = writers["lo"].to_numpy(dtype=float)
    his = writers["hi"].to_numpy(dtype=float)
    his = np.where(np.isnan(his), np.inf, his)
    suffix_min = np.minimum.accumulate(his[::-1])[::-1]
    k = np.searchsorted(los, bounds, side="right")
    inside = k < len(los)
    m = np.where(inside, suffix_min[np.minimum(k, len(los) - 1)], -np.inf)
    end = np.where(inside, np.searchsorted(los, m, side="right"), k)
    count = np.maximum(end - k, 0)
    src = np.repeat(np.arange(len(bounds)), count)
    dst = (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
           + np.repeat(k, count))
    return src, dst


def _ordered_edges(pl: PartitionLog) -> list[pd.DataFrame]:
    w = spans.writers(pl)
    out: list[pd.DataFrame] = []
    if w.empty:
        return out
    for kind, srcs in ((WW, w[w["hi"].notna()].reset_index(drop=True)),
                       (RW, spans.readers(pl))):
        if srcs.empty:
            continue
        i, j = _after(w, srcs["hi"].to_numpy(dtype=float))
        s, d = srcs.iloc[i].reset_index(drop=True), w.iloc[j].reset_index(drop=True)
        e = pd.DataFrame({
            "txn": s["txn"], "txn2": d["txn"], "kind": kind, "process": s["process"],
            "op": s["hi_op"],
            "a1": s["hi_inv"], "a2": s["hi_cmp"], "offset": s["hi"], "a3": d["lo_op"],
            "a4": d["lo_inv"], "a5": d["lo_cmp"], "a6": d["lo"]})
        out.append(e[e["txn"] != e["txn2"]])
    return out


def _read_edges(pl: PartitionLog) -> list[pd.DataFrame]:
    r = pl.reads
    # Rows picked before columns are copied: the reads are most steps, and wide. The
    # outcomes first: a comparison of a (mostly missing) string is cheaper than
    # asking each object whether it is missing.
    txn, w_txn = r["txn"].to_numpy(dtype=object), r["w_txn"].to_numpy(dtype=object)
    rows = np.flatnonzero(equals(r["txn_outcome"], COMMITTED)
                          & equals(r["w_txn_outcome"], COMMITTED))
    rows = rows[~pd.isna(txn[rows]) & ~pd.isna(w_txn[rows])]
    rows = rows[w_txn[rows] != txn[rows]]
    if not len(rows):
        return []

    def col(name: str) -> pd.arrays.IntegerArray:
        return engine.ints(r[name]).take(rows)
    # One witness per edge and partition: wr witnesses are not chained to others, and
    # one constrains as much as all when it is the tightest, the read that completed
    # soonest after its value's write (read_uncommitted) or commit began.
    rc = equals(r["isolation"].take(rows), READ_COMMITTED)
    began = np.where(rc, col("w_commit_inv").to_numpy(dtype=float, na_value=np.nan),
                     col("w_inv").to_numpy(dtype=float, na_value=np.nan))
    done = col("complete_index")
    slack = np.nan_to_num(done.to_numpy(dtype=float, na_value=np.nan) - began, nan=np.inf)
    # In order of slack, then completion (missing last), the first of each pair of
    # transactions (by their codes: hashing each string pair once is the cost).
    order = np.lexsort((done.to_numpy(dtype=float, na_value=np.inf), slack))
    pair = pd.factorize(w_txn[rows])[0] * np.int64(len(rows)) + pd.factorize(txn[rows])[0]
    order = order[~pd.Series(pair[order]).duplicated().to_numpy()]
    rows, rc = rows[order], rc[order]

    def either(if_rc: str, if_not: str) -> pd.arrays.IntegerArray:
        a, b = col(if_rc), col(if_not)
        return pd.arrays.IntegerArray(np.where(rc, a._data, b._data),
                                      np.where(rc, a._mask, b._mask))
    w_op = col("w_op")
    return [pd.DataFrame({
        "txn": w_txn[rows], "txn2": txn[rows], "kind": WR,
        "process": r["w_process"].to_numpy(dtype=object)[rows],
        "op": pd.arrays.IntegerArray(w_op._data, w_op._mask | rc),
        "a1": either("w_commit_inv", "w_inv"), "a2": either("w_commit_cmp", "w_cmp"),
        "a3": col("op"), "a4": col("invoke_index"), "a5": done[order],
        "a6": col("offset"), "value": col("value")})]


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    edges = _ordered_edges(pl) if pl.has_txn_writes else []
    if pl.has_txn_reads:
        edges += _read_edges(pl)
    return [engine.facts(EDGE_FACT, e) for e in edges]


def edges(facts: pd.DataFrame) -> pd.DataFrame:
    """Edge facts as src, dst, kind, topic, partition, src_op, src_inv, src_cmp, dst_op,
    dst_inv, dst_cmp, src_off, dst_off, value."""
    # Each column's edge rows taken alone: filtering the whole facts frame first copied
    # its other columns too (millions of rows at 10M events).
    at = equals(facts["row"], EDGE_FACT)
    every = bool(at.all())  # as Facts.of gives them: then nothing to pick

    def picked(col: str):
        c = facts[col]
        a = c.to_numpy() if c.dtype == object else c.array
        return a if every else a[at]
    # Fresh arrays, not copied again: pandas' copy of the object columns into one block
    # took most of this function's time (docs/performance.md, "Figures behind the code").
    return pd.DataFrame({name: picked(col) for name, col in (
        ("src", "txn"), ("dst", "txn2"), ("kind", "kind"), ("process", "process"),
        ("topic", "topic"), ("partition", "partition"), ("src_op", "op"),
        ("src_inv", "a1"), ("src_cmp", "a2"), ("dst_op", "a3"), ("dst_inv", "a4"),
        ("dst_cmp", "a5"), ("src_off", "offset"), ("dst_off", "a6"), ("value", "value"))},
        copy=False)


# ------------------------------------------------------------------- on the driver

def _windows(w: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """src_inv, src_cmp, dst_inv, dst_cmp of witnesses as floats: an unknown invoke is 0,
    an unknown completion never."""
    si, sc, di, dc = (pd.to_numeric(w[c], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
                      for c in ("src_inv", "src_cmp", "dst_inv", "dst_cmp"))
    return (np.nan_to_num(si, nan=0.0), np.where(np.isnan(sc), np.inf, sc),
            np.nan_to_num(di, nan=0.0), np.where(np.isnan(dc), np.inf, dc))


def _impossible(win: tuple[np.ndarray, ...], ordered: np.ndarray) -> np.ndarray:
    si, sc, di, dc = win
    return (si >= sc) | (di >= dc) | (ordered & (si >= dc))


def impossible(w: pd.DataFrame) -> np.ndarray:
    """Witnesses whose own constraints have no solution: the source point (or, for ww and
    wr, the target point after it) cannot fit in its op's window. Any cycle through such
    a witness is a violation."""
    return _impossible(_windows(w), (w["kind"] != RW).to_numpy(dtype=bool))


def _blame(cycle: pd.DataFrame) -> list[int] | None:
    """None when some real-time order satisfies the cycle's constraints (module doc);
    else positions of witnesses whose constraints together have no solution.

    Rows are witnesses; `step` (default: the row's position) says which edge of the
    cycle each witnesses, in cycle order, and every witness of an edge holds. Each
    witness has a source point (in its source transaction) and a target point (in its
    target), strictly inside its ops' [invoke, complete]; ww and wr witnesses require
    source < target, rw ones nothing. The target point of a ww witness in partition p
    and the source point of the next edge's ww witness in p are the first and last
    records of one transaction there, so ordered (<=). The constraints thus form one
    chain per partition and run of consecutive edges (a loop when every edge has a ww
    witness in p, which has no solution); earliest times propagate along each chain,
    linear in the witnesses."""
    n = len(cycle)
    if n == 0:
        return None
    steps = cycle["step"].to_numpy(dtype=np.int64) if "step" in cycle else np.arange(n)
    return _blame_of(_windows(cycle), cycle["kind"].to_numpy(dtype=object),
                     cycle["topic"].tolist(), cycle["partition"].tolist(), steps)


def _blame_of(win: tuple[np.ndarray, ...], kinds: np.ndarray, topic: list, part: list,
              steps: np.ndarray) -> list[int] | None:
    """_blame on a cycle's witnesses as arrays: their windows (_windows), kinds,
    topics, partitions and steps."""
    if len(steps) == 0:
        return None
    bad = np.flatnonzero(_impossible(win, kinds != RW))
    si, sc, di, dc = (a.tolist() for a in win)
    return _blame_in(int(bad[0]) if len(bad) else None, si, sc, di, dc, kinds.tolist(),
                     topic, part, steps.tolist())


def _blame_in(first_bad: int | None, si: list, sc: list, di: list, dc: list, kind: list,
              topic: list, part: list, steps_l: list[int]) -> list[int] | None:
    """_blame_of on a cycle's witnesses as lists (where `first_bad`, the first witness
    with no solution of its own, or None, was found for many cycles at once)."""
    n = len(steps_l)
    if n == 0:
        return None
    if first_bad is not None:
        return [first_bad]
    k = max(steps_l) + 1
    chains: dict[tuple, dict[int, int]] = {}
    for r in range(n):
        if kind[r] == WW:
            chains.setdefault((topic[r], part[r]), {})[steps_l[r]] = r
    for rows in chains.values():
        if len(rows) < 2:
            continue
        if len(rows) == k:
            return [rows[j] for j in range(k)]
        for s0 in rows:
            if (s0 - 1) % k in rows:
                continue  # not the start of a run
            # Earliest times as (index, epsilons after it), and the witness whose own
            # invoke set them.
            run: list[int] = []
            t, origin = None, 0
            j = s0
            while j in rows:
                r = rows[j]
                run.append(r)
                x = (si[r], 1)
                if t is not None and t > x:
                    x = t
                else:
                    origin = len(run) - 1
                if x[0] >= sc[r]:
                    return run[origin:]
                y = (x[0], x[1] + 1)
                if (di[r], 1) > y:
                    y, origin = (di[r], 1), len(run) - 1
                if y[0] >= dc[r]:
                    return run[origin:]
                t = y
                j = (j + 1) % k
    return None


def solvable(cycle: pd.DataFrame) -> bool:
    """Whether some real-time order satisfies the cycle's constraints (see _blame)."""
    return _blame(cycle) is None


def _describe(edges: list[dict]) -> str:
    steps = []
    for e in edges:
        if e["kind"] == WR:
            how = f"wr: read value {e['value']}"
        elif e["kind"] == WW:
            how = f"ww: {e['topic']}/{e['partition']} offset {e['src_off']} < {e['dst_off']}"
        else:
            how = (f"rw: read {e['topic']}/{e['partition']} to offset {e['src_off']}, "
                   f"other wrote {e['dst_off']}")
        steps.append(f"{e['src']} -[{how}]-> ")
    return "".join(steps) + str(edges[-1]["dst"])


def _report(type: str, cycle: pd.DataFrame, procs: dict) -> dict:
    """cycle: witnesses with `step` (sorted by it). One witness is shown per edge: the
    first, or for a violation the ones with no solution, starting the cycle there."""
    return _reported(type, _blame(cycle), cycle["step"].tolist(),
                     lambda col, rows: cycle[col].iloc[rows].tolist(), procs)


# The witness columns a cycle's record shows (_reported).
_SHOWN = ("src", "dst", "kind", "topic", "partition", "src_off", "dst_off", "value",
          "src_op", "dst_op")


def _reported(type: str, blame: list[int] | None, steps: list[int], column,
              procs: dict) -> dict:
    """_report's record, from the cycle's blame (_blame), its witnesses' steps and
    column(name, rows): that column's values at those witness positions, as a list."""
    k = steps[-1] + 1
    shown: dict[int, int] = {}
    for r, s in enumerate(steps):
        shown.setdefault(s, r)
    start = 0
    if blame is not None:
        shown.update({steps[r]: r for r in blame})
        start = steps[blame[0]]
    rows = [shown[(start + j) % k] for j in range(k)]
    cols = {col: column(col, rows) for col in ("src", "dst", "kind", "topic", "src_op",
                                               "dst_op")}
    for col in ("partition", "src_off", "dst_off", "value"):  # as anomaly.num, faster
        cols[col] = [None if x is None or x is pd.NA or x != x else int(x)
                     for x in column(col, rows)]
    edges = [dict(zip(cols, vals)) for vals in zip(*cols.values())]
    first = edges[0]
    severity = anomaly.NOTE if blame is None else anomaly.VIOLATION
    op = first["src_op"] if pd.notna(first["src_op"]) else first["dst_op"]
    return {"type": type, "severity": severity, "process": procs.get(first["src"]),
            "op": anomaly.num(op), "topic": first["topic"],
            "partition": anomaly.num(first["partition"]),
            "offset": anomaly.num(first["src_off"]), "value": anomaly.num(first["value"]),
            "txn": first["src"],
            "detail": f"{len(edges)}-transaction cycle: {_describe(edges)}",
            "witnesses": anomaly.witnesses(*[
                pair for k, e in enumerate(edges, 1)
                for pair in ((e["src_op"], f"edge {k} source"), (e["dst_op"], f"edge {k} target"))])}


class _Graph:
    """Witnesses (rows of e, sorted so each edge's are together, with their windows and
    offsets as arrays) and the edges they witness (one per src, dst, kind), as node
    codes."""

    def __init__(self, e: pd.DataFrame, codes: np.ndarray, rows: np.ndarray | None = None):
        """codes: each row's (src, dst) node codes (_node_codes); rows: the rows of e
        the graph holds (default all)."""
        # By src, dst, kind, topic, partition (missing last), stable: pandas'
        # sort_values of those object columns, as one sort of integer keys. The rows
        # picked and sorted by one take: each is a copy of every column.
        rows = np.arange(len(e)) if rows is None else rows
        order = rows[sort_order(*(_ranks(e[c])[rows] for c in ("partition", "topic", "kind")),
                                codes[rows, 1], codes[rows, 0])]
        e, codes = e.take(order), codes[order]
        e.index = pd.RangeIndex(len(e))  # e is always a copy of its own here
        self.e = e
        self._cols: dict | None = None
        self.codes = codes
        self.w_src, self.w_dst = codes[:, 0], codes[:, 1]
        self.w_kind = self.e["kind"].to_numpy(dtype=object)
        new = np.ones(len(self.e), dtype=bool)
        new[1:] = ((self.w_src[1:] != self.w_src[:-1]) | (self.w_dst[1:] != self.w_dst[:-1])
                   | (self.w_kind[1:] != self.w_kind[:-1]))
        self.start = np.flatnonzero(new)
        self.end = np.append(self.start[1:], len(self.e))
        self.src, self.dst = self.w_src[self.start], self.w_dst[self.start]
        self.kind = self.w_kind[self.start]
        self.win = _windows(self.e)
        bad = _impossible(self.win, self.w_kind != RW)
        self.bad = np.logical_or.reduceat(bad, self.start) if len(bad) else bad

    def _witnesses(self, edges: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Rows of e witnessing a cycle of edges, and the step of each."""
        ids = np.asarray(edges, dtype=np.int64)
        lens = self.end[ids] - self.start[ids]
        first = np.cumsum(lens) - lens
        idx = np.arange(lens.sum()) - np.repeat(first, lens) + np.repeat(self.start[ids], lens)
        return idx, np.repeat(np.arange(len(ids)), lens)

    def reports(self, cycles: list[tuple[str, list[int]]], procs: dict) -> list[dict]:
        """_report of each (type, cycle of edges), from the graph's arrays: thousands of
        cycles cost no frame each, and their witnesses are found for all at once."""
        if not cycles:
            return []
        idx, steps = self._witnesses([x for _, edges in cycles for x in edges])
        # A witness's step is its edge's place among all cycles' edges: made its edge's
        # place in its own cycle. Witnesses come in edge order, so each cycle's are a slice.
        sizes = np.array([len(edges) for _, edges in cycles])
        cycle = np.repeat(np.arange(len(cycles)), sizes)[steps]
        steps = steps - (np.cumsum(sizes) - sizes)[cycle]
        bounds = np.searchsorted(cycle, np.arange(len(cycles) + 1))
        # Only the witnesses shown, made plain: a few percent of the rows.
        rows, at = np.unique(idx, return_inverse=True)
        # Every cycle's witnesses as Python lists, made at once: per cycle, numpy's
        # slices and tolist cost more than the record they fill (docs/performance.md,
        # "Figures behind the code").
        plain = {name: col[at].tolist() for name, col in self._plain(rows).items()}
        win = tuple(a[idx] for a in self.win)
        kinds = self.w_kind[idx]
        # Each cycle's first impossible witness: the first at or after its start, if it
        # comes before the next cycle's (len(idx) stands for none).
        bad = np.append(np.flatnonzero(_impossible(win, kinds != RW)), len(idx))
        first_bad = bad[np.searchsorted(bad, bounds[:-1])]
        has_bad = first_bad < bounds[1:]
        si, sc, di, dc = (w.tolist() for w in win)
        kind_l, steps_l = kinds.tolist(), steps.tolist()
        bounds_l, first_l, has_l = bounds.tolist(), first_bad.tolist(), has_bad.tolist()
        out = []
        for c, (type, _) in enumerate(cycles):
            a, b = bounds_l[c], bounds_l[c + 1]
            blame = _blame_in(first_l[c] - a if has_l[c] else None, si[a:b], sc[a:b],
                              di[a:b], dc[a:b], kind_l[a:b], plain["topic"][a:b],
                              plain["partition"][a:b], steps_l[a:b])
            out.append(_reported(type, blame, steps_l[a:b],
                                 lambda col, picked, a=a: [plain[col][a + r] for r in picked],
                                 procs))
        return out

    def rows(self, edges: list[int]) -> pd.DataFrame:
        """The witnesses of a cycle of edges, with their step."""
        idx, steps = self._witnesses(edges)
        # Column by column from the arrays (same dtypes): a frame's iloc on the whole
        # witness table costs milliseconds per cycle, and a history may have thousands.
        cols = {name: col.take(idx) for name, col in self._columns().items()}
        cols["step"] = steps
        return pd.DataFrame(cols)

    def _columns(self) -> dict:
        if self._cols is None:
            self._cols = {name: self.e[name].array for name in self.e.columns}
        return self._cols

    def _plain(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The columns a report shows at `rows`, as object arrays with None for a missing
        value: a nullable array's take and tolist cost tens of microseconds a call, and
        a history may have thousands of cycles of ten columns each."""
        return {name: self.e[name].array.take(rows).to_numpy(dtype=object, na_value=None)
                for name in _SHOWN}

    def implied(self, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """ww edges that chains of ww witnesses in one partition imply and no real-time
        order allows, as pairs of witness rows (source side, target side); none in a
        history real time allows.

        Only edges to the first transactions after T are built; T -> S for any S whose
        records in p all lie above T's follows through them, and is a true ww edge,
        witnessed by T's last record and S's first. For each S entered in p, the T in
        S's component (of comp) with the latest-invoked last record below S's first: if
        that send was invoked at or after S's first record's send completed, T -> S is
        impossible. Sorting, no walk."""
        none = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        rows = np.flatnonzero((self.w_kind == WW) & (comp[self.w_src] == comp[self.w_dst]))
        if not len(rows):
            return none
        # Only the columns used, of only those rows: a take copies every column it keeps.
        e = self.e[["topic", "partition", "src_off", "dst_off"]].iloc[rows]
        # (topic, partition) numbered in order of first appearance, as one integer key:
        # pandas' factorize of the pairs as a MultiIndex took most of this function's
        # time (docs/performance.md, "Figures behind the code").
        topic = pd.factorize(e["topic"].to_numpy(dtype=object))[0].astype(np.int64)
        p = e["partition"].to_numpy(dtype=np.int64, na_value=-1) + 1
        part = pd.factorize(topic * (int(p.max()) + 1) + p)[0]
        group = part.astype(np.int64) * (len(comp) + 1) + comp[self.w_src[rows]]
        si, _, _, dc = (a[rows] for a in self.win)
        so = pd.to_numeric(e["src_off"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        do = pd.to_numeric(e["dst_off"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        # Each transaction's last record (first record) in p, once.
        _, s_at = np.unique(self.w_src[rows] * (part.max() + 1) + part, return_index=True)
        _, d_at = np.unique(self.w_dst[rows] * (part.max() + 1) + part, return_index=True)
        s_at, d_at = s_at[~np.isnan(so[s_at])], d_at[~np.isnan(do[d_at])]
        ref = np.concatenate([s_at, d_at])
        is_src = np.repeat([True, False], [len(s_at), len(d_at)])
        off = np.concatenate([so[s_at], do[d_at]])
        g = group[ref]
        # By partition and component, then offset; at one offset a first record is not
        # above a last record, so targets come first.
        # (Offsets here are known: whole numbers.)
        order = sort_order(is_src, off.astype(np.int64), g)
        ref, is_src, g = ref[order], is_src[order], g[order]
        val = np.where(is_src, si[ref], -1.0).astype(np.int64)
        head = np.ones(len(g), dtype=bool)
        head[1:] = g[1:] != g[:-1]
        first = np.maximum.accumulate(np.where(head, np.arange(len(g)), 0))
        gid = np.cumsum(head) - 1  # g is sorted: its groups numbered in order
        lift = gid.astype(np.int64) * (int(val.max()) + 2)
        top = np.maximum.accumulate(val + lift) - lift
        at = np.maximum.accumulate(np.where(is_src & (val == top), np.arange(len(g)), -1))
        hit = ~is_src & (at >= first) & (top >= dc[ref])
        if not hit.any():
            return none
        return rows[ref[at[hit]]], rows[ref[hit]]


def _node_codes(e: pd.DataFrame) -> tuple[np.ndarray, int]:
    """Each witness's (src, dst) as codes of its transactions, numbered in the order of
    their names as text (a fixed order, whatever order the partitions' facts came in),
    and the number of transactions."""
    src, dst = e["src"].array, e["dst"].array
    if isinstance(src, pd.Categorical) and isinstance(dst, pd.Categorical):
        # Only the distinct names of each side hashed (FACT_CODED), then each side's
        # codes mapped; a missing name (code -1) is the last word, None.
        words = [np.asarray(c.categories, dtype=object) for c in (src, dst)]
        nameless = bool((src.codes < 0).any() or (dst.codes < 0).any())
        at, names = pd.factorize(np.concatenate([*words, np.array([None] * nameless, dtype=object)]),
                                 use_na_sentinel=False)
        side = np.cumsum([0, len(words[0]), len(words[1])])
        codes = np.concatenate([np.append(at[side[k]:side[k + 1]], at[-1:])[c.codes]
                                for k, c in enumerate((src, dst))])
    else:
        # Hashed once, then only the distinct names sorted: sorting every witness's
        # names as numpy text cost seconds (docs/performance.md, "Figures behind the
        # code").
        codes, names = pd.factorize(np.concatenate([src.to_numpy(dtype=object),
                                                    dst.to_numpy(dtype=object)]),
                                    use_na_sentinel=False)
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.argsort(np.asarray(names, dtype=object).astype(str), kind="stable")] = \
        np.arange(len(names))
    return rank[codes].reshape(2, -1).T, len(names)


def _ranks(col: pd.Series) -> np.ndarray:
    """Each value's place among the column's distinct values in sorted order, missing
    ones after all others (as sort_values orders them)."""
    codes, _ = pd.factorize(col, sort=True)
    return np.where(codes < 0, codes.max(initial=-1) + 1, codes)


def find_cycles(e: pd.DataFrame, procs: dict | None = None) -> pd.DataFrame:
    """Anomaly records (anomaly.COLUMNS) for the cycles in edge list e (witnesses: an
    edge may have several, in several partitions; all of them hold)."""
    procs = procs or {}
    if e.empty:
        return engine.anomalies([])
    # A fixed order, so the cycles reported do not depend on how partitions were
    # scheduled (Spark or local, any number of tasks).
    codes, n = _node_codes(e)
    full = graph.strongly_connected(n, codes[:, 0], codes[:, 1])
    inner = full[codes[:, 0]] == full[codes[:, 1]]
    if not (inner & np.isin(full[codes[:, 0]], graph.nontrivial(full))).any():
        return engine.anomalies([])
    # Only edges inside a component can be on a cycle: the graph holds only those.
    gr = _Graph(e, codes, np.flatnonzero(inner))

    def comps(mask):
        ids = np.flatnonzero(mask)
        return graph.strongly_connected(n, gr.src[ids], gr.dst[ids])

    ww, wr, rw = gr.kind == WW, gr.kind == WR, gr.kind == RW
    labels = {"g0": comps(ww), "g1c": comps(ww | wr), "g_single": full}
    # Impossible orders that only chains in one partition show, as edges, so the searches
    # below can close cycles through them. The whole graph's components are the
    # coarsest: with nothing implied there, nothing is in the others.
    pairs = []
    for comp in (labels["g_single"], labels["g1c"], labels["g0"]):
        i, j = gr.implied(comp)
        if not len(i):
            break
        pairs.append((i, j))
    if pairs:
        i, j = (np.concatenate(x) for x in zip(*pairs))
        # Source side of row i, target side of row j; not twice, not one already built.
        cols = ["src", "dst", "kind", "topic", "partition"]
        more = gr.e.iloc[i][cols].assign(dst=gr.e["dst"].to_numpy()[j]).astype(object)
        key = pd.MultiIndex.from_frame(more)
        built = pd.MultiIndex.from_frame(gr.e[cols].astype(object))
        new = ~key.duplicated() & ~key.isin(built)
        if new.any():
            i, j = i[new], j[new]
            e = gr.e.iloc[np.concatenate([np.arange(len(gr.e)), i])].reset_index(drop=True)
            for col in ("dst", "dst_op", "dst_inv", "dst_cmp", "dst_off", "value"):
                e.loc[len(gr.e):, col] = gr.e[col].to_numpy()[j] if col != "value" else None
            codes = np.concatenate([gr.codes, np.c_[gr.codes[i, 0], gr.codes[j, 1]]])
            gr = _Graph(e, codes)
            ww, wr, rw = gr.kind == WW, gr.kind == WR, gr.kind == RW
    src, dst, bad = gr.src, gr.dst, gr.bad
    adj = graph.csr(n, src, dst)

    found: list[tuple[str, list[int]]] = []  # reported at the end, all at once

    def report(type, edges):
        found.append((type, edges))

    def search(type, comp, mask, wanted, via, tries=1, done=(), through_bad=True):
        """In each nontrivial component of the subgraph of `mask` edges, close a cycle
        through one of its first `tries` edges that `wanted` allows, with a shortest
        path back along `via` edges. First through an edge with an impossible witness,
        which makes any cycle through it a violation (accepted if `wanted` allows some
        edge of the cycle), then through the rest."""
        via_l, wanted_l = via.tolist(), wanted.tolist()
        big = set(graph.nontrivial(comp).tolist())
        comp_l = comp.tolist()
        found = set(done)
        for first in ((True, False) if through_bad else (False,)):
            ids = np.flatnonzero(mask & bad) if first else np.flatnonzero(mask & wanted)
            tried: dict[int, int] = {}
            for x in ids.tolist():
                c = comp_l[src[x]]
                if c not in big or comp_l[dst[x]] != c or c in found:
                    continue
                if tried.get(c, 0) >= (tries if not first else _RW_TRIES):
                    continue
                tried[c] = tried.get(c, 0) + 1
                back = graph.path(adj, int(dst[x]), int(src[x]),
                                  lambda v, c=c: comp_l[v] == c, lambda y: via_l[y])
                if back is None or not any(wanted_l[y] for y in (x, *back)):
                    continue
                report(type, [x, *back])
                found.add(c)
        return found

    search("g0", labels["g0"], ww, ww, ww)
    search("g1c", labels["g1c"], ww | wr, wr, ww | wr)
    # g_single: an impossible ww or wr edge on a path back from an rw edge. Paths on two
    # layers of the graph: ww and wr edges stay on a layer, impossible ones also go
    # from layer 0 to layer 1; a path from the rw edge's target on layer 0 to its
    # source on layer 1 crosses exactly one impossible edge, and takes no rw edge.
    done: set[int] = set()
    nr = np.flatnonzero(~rw)
    jump = np.flatnonzero(~rw & bad)
    if len(jump):
        lid = np.concatenate([nr, nr, jump])
        adj2 = graph.csr(2 * n, np.concatenate([src[nr], src[nr] + n, src[jump]]),
                         np.concatenate([dst[nr], dst[nr] + n, dst[jump] + n]))
        full_l = full.tolist()
        with_jump = set(full[src[jump]].tolist())
        tried: dict[int, int] = {}
        for x in np.flatnonzero(rw).tolist():
            c = full_l[src[x]]
            if c not in with_jump or c in done or tried.get(c, 0) >= _RW_TRIES:
                continue
            tried[c] = tried.get(c, 0) + 1
            back = graph.path(adj2, int(dst[x]), int(src[x]) + n,
                              lambda v, c=c: full_l[v % n] == c, lambda y: True)
            if back is None:
                continue
            back = lid[back].tolist()
            # A walk through some transaction twice holds a ww/wr cycle through the
            # impossible edge: that is a g0 or g1c violation, reported above.
            if len({int(src[y]) for y in (x, *back)}) <= len(back):
                continue
            report("g_single", [x, *back])
            done.add(c)
    # A component may hold rw edges none of which closes with ww/wr edges alone.
    search("g_single", full, np.ones(len(src), dtype=bool), rw, ~rw, tries=_RW_TRIES,
           done=done, through_bad=False)
    return engine.anomalies(gr.reports(found, procs))


def finish(facts: pd.DataFrame) -> pd.DataFrame:
    e = edges(facts)
    # Each transaction's process, from its last edge: a dict of the distinct ones, not
    # of every edge (1.5M at 10M events).
    src = e["src"].array
    last = ~pd.Series(src.codes if isinstance(src, pd.Categorical) else src
                      ).duplicated(keep="last").to_numpy()
    return find_cycles(e, dict(zip(e["src"].to_numpy()[last], e["process"].to_numpy()[last])))


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
