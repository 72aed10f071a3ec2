"""Strongly connected components, cycle search and real-time classification of the
dependency graph (checkers/graph.py, checkers/cycles.py). No Spark."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from checkers import graph
from checkers.cycles import RW, WR, WW, find_cycles, solvable


def _reach(n, edges):
    r = np.eye(n, dtype=bool)
    for a, b in edges:
        r[a, b] = True
    for k, i, j in itertools.product(range(n), repeat=3):
        r[i, j] |= r[i, k] and r[k, j]
    return r


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=20))))
def test_components_are_mutual_reachability(case):
    n, edges = case
    src = np.array([a for a, _ in edges], dtype=np.int64)
    dst = np.array([b for _, b in edges], dtype=np.int64)
    comp = graph.strongly_connected(n, src, dst)
    r = _reach(n, edges)
    for i, j in itertools.product(range(n), repeat=2):
        assert (comp[i] == comp[j]) == (r[i, j] and r[j, i])


def test_a_million_transaction_chain_does_not_recurse():
    n = 1_000_000
    src = np.arange(n - 1)
    comp = graph.strongly_connected(n, src, src + 1)
    assert len(graph.nontrivial(comp)) == 0
    # Closing the chain makes it one component, and the cycle is found whole.
    comp = graph.strongly_connected(n, np.r_[src, n - 1], np.r_[src + 1, 0])
    assert len(np.unique(comp)) == 1
    adj = graph.csr(n, np.r_[src, n - 1], np.r_[src + 1, 0])
    back = graph.path(adj, 1, 0, lambda v: True, lambda e: True)
    assert len(back) == n - 1


def _edge(src, dst, kind, src_win, dst_win, part=0):
    return {"src": src, "dst": dst, "kind": kind, "process": "p" + src, "topic": "t",
            "partition": part, "src_op": 1, "src_inv": src_win[0], "src_cmp": src_win[1],
            "dst_op": 2, "dst_inv": dst_win[0], "dst_cmp": dst_win[1], "src_off": 0,
            "dst_off": 1, "value": 7 if kind == WR else None}


def test_chain_of_transactions_has_no_cycle_at_scale():
    n = 200_000
    names = [f"T{i}" for i in range(n)]
    e = pd.DataFrame({"src": names[:-1], "dst": names[1:], "kind": WW, "process": "p",
                      "topic": "t", "partition": 0, "src_op": 1, "src_inv": 1, "src_cmp": 2,
                      "dst_op": 3, "dst_inv": 3, "dst_cmp": 4, "src_off": 0, "dst_off": 1,
                      "value": None})
    assert find_cycles(e).empty


def test_ww_cycle_of_overlapping_sends_is_allowed():
    # T1 appends to p0 during [1, 4], T2 to p0 during [2, 5]; p1 the other way round.
    cycle = pd.DataFrame([_edge("T1", "T2", WW, (1, 4), (2, 5), part=0),
                          _edge("T2", "T1", WW, (3, 6), (2, 7), part=1)])
    assert solvable(cycle)
    found = find_cycles(cycle)
    assert list(found["type"]) == ["g0"] and list(found["severity"]) == ["note"]


def test_ww_cycle_against_real_time_is_a_violation():
    # T2's append (during [10, 11]) cannot precede T1's (during [1, 2]).
    cycle = pd.DataFrame([_edge("T1", "T2", WW, (1, 2), (10, 11), part=0),
                          _edge("T2", "T1", WW, (10, 11), (1, 2), part=1)])
    assert not solvable(cycle)
    assert list(find_cycles(cycle)["severity"]) == ["violation"]


def test_a_cycle_of_reads_is_a_violation():
    # T2's poll [5, 6] saw T1 committed during [8, 9]: impossible for read_committed.
    cycle = pd.DataFrame([_edge("T1", "T2", WR, (8, 9), (5, 6)),
                          _edge("T2", "T1", WR, (10, 11), (3, 4))])
    assert not solvable(cycle)
    found = find_cycles(cycle)
    assert list(found["type"]) == ["g1c"] and list(found["severity"]) == ["violation"]


def test_first_and_last_record_of_one_partition_chain_through_a_transaction():
    # T2's first and last record in p0 come from one send: ww in, ww out, same partition.
    cycle = pd.DataFrame([_edge("T1", "T2", WW, (1, 9), (1, 9), part=0),
                          _edge("T2", "T1", WW, (1, 9), (1, 9), part=0)])
    assert not solvable(cycle)


def test_g_single_needs_exactly_one_rw_edge():
    edges = pd.DataFrame([_edge("T1", "T2", RW, (1, 2), (3, 4)),
                          _edge("T2", "T1", WW, (3, 4), (5, 6), part=1)])
    found = find_cycles(edges)
    assert list(found["type"]) == ["g_single"]
    two_rw = pd.DataFrame([_edge("T1", "T2", RW, (1, 2), (3, 4)),
                           _edge("T2", "T1", RW, (3, 4), (5, 6))])
    assert find_cycles(two_rw).empty
