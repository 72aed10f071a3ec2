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

g0: a cycle of ww edges only. g1c: a cycle of ww and wr edges with at least one wr.
g_single: a cycle with exactly one rw edge, the rest ww or wr. One cycle is reported
per strongly connected component (for g_single: per component of the whole graph).

Severity. Kafka does not claim serializability: transactions take no locks, so two
concurrent transactions writing the same two partitions can append in opposite orders
(a ww cycle), and a transaction that wrote p early can later read what a concurrent
transaction committed after appending to p behind it (a ww + wr cycle). Such cycles are
`note`s. A cycle is a `violation` only when no real-time execution could produce it:
each record was appended while its send was in flight, a read_committed read of a
value happened after that value's transaction began committing, and a
read_uncommitted one after the value was appended. The cycle's edges, with these
windows taken from the ops that witness them, form a system of constraints; if it has
no solution (for example a cycle of wr edges, or transactions that did not overlap in
time), the history contradicts real time and the cycle is a violation.
"""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from . import anomaly, engine, graph, spans
from .partlog import PartitionLog
from .tables import COMMITTED, READ_COMMITTED

TYPES = ("g0", "g1c", "g_single")
WW, WR, RW = "ww", "wr", "rw"
EDGE_FACT = "edge"
# An edge fact: txn -> txn2 of `kind`, witnessed by the source op (op, a1 = invoke
# index, a2 = complete index, offset = source offset) and the target op (a3, a4, a5,
# a6 = target offset); value = the value read, for wr.
_INF = np.iinfo(np.int64).max
# Longest cycle whose real-time constraints are solved; longer ones stay notes.
_MAX_SOLVE = 10_000
# rw edges tried per component when looking for a g_single cycle.
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
    out = []
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
    r = r[(r["txn"].notna() & (r["txn_outcome"] == COMMITTED) & r["w_txn"].notna()
           & (r["w_txn_outcome"] == COMMITTED) & (r["w_txn"] != r["txn"]))
          .fillna(False).to_numpy(dtype=bool)]
    if r.empty:
        return []
    r = r.sort_values("complete_index").drop_duplicates(["w_txn", "txn"])
    rc = (r["isolation"] == READ_COMMITTED).to_numpy(dtype=bool)
    return [pd.DataFrame({
        "txn": r["w_txn"].to_numpy(), "txn2": r["txn"].to_numpy(), "kind": WR,
        "process": r["w_process"].to_numpy(),
        "op": np.where(rc, None, r["w_op"].to_numpy(dtype=object)),
        "a1": np.where(rc, r["w_commit_inv"].to_numpy(dtype=object),
                       r["w_inv"].to_numpy(dtype=object)),
        "a2": np.where(rc, r["w_commit_cmp"].to_numpy(dtype=object),
                       r["w_cmp"].to_numpy(dtype=object)),
        "a3": r["op"].to_numpy(dtype=object), "a4": r["invoke_index"].to_numpy(dtype=object),
        "a5": r["complete_index"].to_numpy(dtype=object),
        "a6": r["offset"].to_numpy(dtype=object), "value": r["value"].to_numpy(dtype=object)})]


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    edges = _ordered_edges(pl) if pl.has_txn_writes else []
    if pl.has_txn_reads:
        edges += _read_edges(pl)
    return [engine.facts(EDGE_FACT, e) for e in edges]


def edges(facts: pd.DataFrame) -> pd.DataFrame:
    """Edge facts as src, dst, kind, topic, partition, src_op, src_inv, src_cmp, dst_op,
    dst_inv, dst_cmp, src_off, dst_off, value."""
    f = facts[facts["row"] == EDGE_FACT]
    return pd.DataFrame({
        "src": f["txn"], "dst": f["txn2"], "kind": f["kind"], "process": f["process"],
        "topic": f["topic"],
        "partition": f["partition"], "src_op": f["op"], "src_inv": f["a1"],
        "src_cmp": f["a2"], "dst_op": f["a3"], "dst_inv": f["a4"], "dst_cmp": f["a5"],
        "src_off": f["offset"], "dst_off": f["a6"], "value": f["value"]}).reset_index(drop=True)


# ------------------------------------------------------------------- on the driver

def solvable(cycle: pd.DataFrame) -> bool:
    """Whether some real-time order satisfies the cycle's constraints (module doc).

    Points: each edge j has a source point (in its source transaction) and a target
    point (in its target), each strictly inside its witness op's [invoke, complete].
    ww and wr edges require source < target; rw edges require nothing. Two ww points
    of one transaction in one partition are ordered (first record <= last record).
    Earliest times are propagated around the cycle; a point pushed past its window,
    or a loop of constraints that never settles, has no solution."""
    k = len(cycle)
    if k > _MAX_SOLVE:
        return True
    kind = cycle["kind"].tolist()
    part = list(zip(cycle["topic"], cycle["partition"]))
    src_lo = cycle["src_inv"].tolist()
    src_hi = [_INF if pd.isna(x) else x for x in cycle["src_cmp"]]
    dst_lo = cycle["dst_inv"].tolist()
    dst_hi = [_INF if pd.isna(x) else x for x in cycle["dst_cmp"]]
    # Earliest times of the points, as (index, epsilons after it).
    x = [(0 if pd.isna(v) else int(v), 1) for v in src_lo]
    y = [(0 if pd.isna(v) else int(v), 1) for v in dst_lo]
    linked = [kind[j] == WW and kind[(j + 1) % k] == WW and part[j] == part[(j + 1) % k]
              for j in range(k)]
    for _ in range(2 * k + 2):
        changed = False
        for j in range(k):
            if kind[j] != RW:
                t = (x[j][0], x[j][1] + 1)
                if t > y[j]:
                    y[j], changed = t, True
            n = (j + 1) % k
            if linked[j] and y[j] > x[n]:
                x[n], changed = y[j], True
        for j in range(k):
            if x[j][0] >= src_hi[j] or y[j][0] >= dst_hi[j]:
                return False
        if not changed:
            return True
    return False


def _describe(edges: list[dict]) -> str:
    steps = []
    for e in edges:
        if e["kind"] == WR:
            how = f"wr: read value {anomaly.num(e['value'])}"
        elif e["kind"] == WW:
            how = (f"ww: {e['topic']}/{anomaly.num(e['partition'])} offset "
                   f"{anomaly.num(e['src_off'])} < {anomaly.num(e['dst_off'])}")
        else:
            how = (f"rw: read {e['topic']}/{anomaly.num(e['partition'])} to offset "
                   f"{anomaly.num(e['src_off'])}, other wrote {anomaly.num(e['dst_off'])}")
        steps.append(f"{e['src']} -[{how}]-> ")
    return "".join(steps) + str(edges[-1]["dst"])


def _report(type: str, cycle: pd.DataFrame, procs: dict) -> dict:
    edges = cycle.to_dict("records")
    first = edges[0]
    severity = anomaly.NOTE if solvable(cycle) else anomaly.VIOLATION
    op = first["src_op"] if pd.notna(first["src_op"]) else first["dst_op"]
    return {"type": type, "severity": severity, "process": procs.get(first["src"]),
            "op": anomaly.num(op), "topic": first["topic"],
            "partition": anomaly.num(first["partition"]),
            "offset": anomaly.num(first["src_off"]), "value": anomaly.num(first["value"]),
            "txn": first["src"],
            "detail": f"{len(edges)}-transaction cycle: {_describe(edges)}"}


def find_cycles(e: pd.DataFrame, procs: dict | None = None) -> pd.DataFrame:
    """Anomaly records (anomaly.COLUMNS) for the cycles in edge list e."""
    procs = procs or {}
    out: list[dict] = []
    if e.empty:
        return engine.anomalies(out)
    # A fixed order, so the cycles reported do not depend on how partitions were
    # scheduled (Spark or local, any number of tasks).
    e = (e.sort_values(["src", "dst", "kind", "topic", "partition"], kind="stable")
         .drop_duplicates(["src", "dst", "kind"]).reset_index(drop=True))
    names, codes = np.unique(np.concatenate([e["src"].to_numpy(dtype=object),
                                             e["dst"].to_numpy(dtype=object)]).astype(str),
                             return_inverse=True)
    src, dst = codes[:len(e)], codes[len(e):]
    full = graph.strongly_connected(len(names), src, dst)
    inner = full[src] == full[dst]
    if not (inner & np.isin(full[src], graph.nontrivial(full))).any():
        return engine.anomalies(out)
    # Only edges inside a component can be on a cycle.
    e, src, dst = e[inner].reset_index(drop=True), src[inner], dst[inner]
    kind = e["kind"].to_numpy(dtype=object)
    adj = graph.csr(len(names), src, dst)

    def search(type, mask, wanted, via, tries=1):
        """In each nontrivial component of the subgraph of `mask` edges, close a cycle
        through one of its first `tries` edges that `wanted` allows, with a shortest
        path back along `via` edges."""
        ids = np.flatnonzero(mask)
        via_l = via.tolist()
        comp = graph.strongly_connected(len(names), src[ids], dst[ids])
        big = set(graph.nontrivial(comp).tolist())
        comp_l = comp.tolist()
        tried: dict[int, int] = {}
        for x in ids:
            c = comp_l[src[x]]
            if c not in big or comp_l[dst[x]] != c or not wanted[x]:
                continue
            if tried.get(c, 0) >= tries:
                continue
            tried[c] = tried.get(c, 0) + 1
            back = graph.path(adj, int(dst[x]), int(src[x]),
                              lambda v, c=c: comp_l[v] == c, lambda y: via_l[y])
            if back is not None:
                out.append(_report(type, e.iloc[[x, *back]], procs))
                tried[c] = tries

    ww, wr, rw = kind == WW, kind == WR, kind == RW
    search("g0", ww, ww, ww)
    search("g1c", ww | wr, wr, ww | wr)
    # A component may hold rw edges none of which closes with ww/wr edges alone.
    search("g_single", np.ones(len(e), dtype=bool), rw, ~rw, tries=_RW_TRIES)
    return engine.anomalies(out)


def finish(facts: pd.DataFrame) -> pd.DataFrame:
    e = edges(facts)
    return find_cycles(e, dict(zip(e["src"], e["process"])))


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
