"""Strongly connected components and concrete cycles, on the driver, without recursion.

Dependency graphs have one node per committed transaction and a few edges per node,
so the edge list fits on the driver even for millions of transactions; what must not
happen is a recursive walk that overflows the stack on a long chain.
"""
from __future__ import annotations

from collections import deque

import numpy as np
from scipy import sparse
from scipy.sparse import csgraph


def csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """(indptr, targets, edge ids) of the adjacency lists, as Python lists (fast to
    index one at a time)."""
    order = np.argsort(src, kind="stable")
    counts = np.bincount(src, minlength=n)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return indptr.tolist(), dst[order].tolist(), order.tolist()


def strongly_connected(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Component id of each node: two nodes share one exactly when each reaches the
    other. scipy's iterative search (no recursion, no Python loop per edge): on a
    random graph of a million nodes and three million edges 0.4 s, where a Tarjan
    in Python took 3.7 s."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    # Float weights: repeated edges add up, and never to zero.
    adj = sparse.csr_array((np.ones(len(src)), (src, dst)), shape=(n, n))
    _, comp = csgraph.connected_components(adj, directed=True, connection="strong")
    return comp.astype(np.int64)


def nontrivial(comp: np.ndarray) -> np.ndarray:
    """Ids of components with more than one node."""
    ids, counts = np.unique(comp, return_counts=True)
    return ids[counts > 1]


def path(adj: tuple[list[int], list[int], list[int]], start: int, goal: int,
         allowed_node, allowed_edge) -> list[int] | None:
    """Edge ids of a shortest path start -> goal (breadth first), through nodes and
    edges the predicates allow; [] when start == goal."""
    if start == goal:
        return []
    indptr, targets, eids = adj
    parent: dict[int, tuple[int, int]] = {start: (-1, -1)}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for k in range(indptr[v], indptr[v + 1]):
            w, e = targets[k], eids[k]
            if w in parent or not allowed_edge(e) or not allowed_node(w):
                continue
            parent[w] = (v, e)
            if w == goal:
                out = []
                while w != start:
                    w, e = parent[w]
                    out.append(e)
                return out[::-1]
            queue.append(w)
    return None
