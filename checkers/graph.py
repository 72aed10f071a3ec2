"""Strongly connected components and concrete cycles, on the driver, without recursion.

Dependency graphs have one node per committed transaction and a few edges per node,
so the edge list fits on the driver even for millions of transactions; what must not
happen is a recursive walk that overflows the stack on a long chain.
"""
from __future__ import annotations

from collections import deque

import numpy as np


def csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """(indptr, targets, edge ids) of the adjacency lists, as Python lists (fast to
    index one at a time)."""
    order = np.argsort(src, kind="stable")
    counts = np.bincount(src, minlength=n)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return indptr.tolist(), dst[order].tolist(), order.tolist()


def strongly_connected(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Component id of each node (Tarjan's algorithm with an explicit stack)."""
    indptr, targets, _ = csr(n, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    comp = [-1] * n
    stack: list[int] = []
    counter = 0
    ncomp = 0
    for root in range(n):
        if index[root] != -1:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, indptr[root])]
        while work:
            v, i = work[-1]
            end = indptr[v + 1]
            while i < end:
                w = targets[i]
                i += 1
                if index[w] == -1:
                    break
                if on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                # All successors of v done: pop it, maybe closing a component.
                work.pop()
                if work:
                    u = work[-1][0]
                    if low[v] < low[u]:
                        low[u] = low[v]
                if low[v] == index[v]:
                    while True:
                        x = stack.pop()
                        on_stack[x] = False
                        comp[x] = ncomp
                        if x == v:
                            break
                    ncomp += 1
                continue
            work[-1] = (v, i)
            index[w] = low[w] = counter
            counter += 1
            stack.append(w)
            on_stack[w] = True
            work.append((w, indptr[w]))
    return np.asarray(comp, dtype=np.int64)


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
