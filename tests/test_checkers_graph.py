"""Strongly connected components, cycle search and real-time classification of the
dependency graph (checkers/graph.py, checkers/cycles.py). No Spark."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceproof.checkers import graph
from onceproof.checkers.cycles import RW, WR, WW, _node_codes, find_cycles, solvable
from tests.histories import History, example, found, verdict, ww_ring


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


def _edge(src, dst, kind, src_win, dst_win, part=0, offs=(0, 1)):
    return {"src": src, "dst": dst, "kind": kind, "process": "p" + src, "topic": "t",
            "partition": part, "src_op": 1, "src_inv": src_win[0], "src_cmp": src_win[1],
            "dst_op": 2, "dst_inv": dst_win[0], "dst_cmp": dst_win[1], "src_off": offs[0],
            "dst_off": offs[1], "value": 7 if kind == WR else None}


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


def _crossed_with_third_partition(path, t1_first_in_p1):
    """T1 and T2 send to t/0 and t/2 concurrently and land in opposite orders (a ww
    cycle real time allows), and both also write t/1, where T1's record is at offset 0
    and T2's at 1: a second witness of the edge T1 -> T2."""
    h = History(path)
    h.begin("p1", "T1")
    h.begin("p2", "T2")

    def rec(p, v, o=None):
        return {"topic": "t", "partition": p, "key": None, "value": v,
                **({} if o is None else {"offset": o})}

    a = h.invoke("p1", "send", {"records": [rec(0, 1), rec(2, 2)]}, txn="T1")
    b = h.invoke("p2", "send", {"records": [rec(0, 3), rec(2, 4)]}, txn="T2")
    h.complete(a, "ok", {"records": [rec(0, 1, 0), rec(2, 2, 1)]})
    h.complete(b, "ok", {"records": [rec(0, 3, 1), rec(2, 4, 0)]})
    if t1_first_in_p1:
        late = h.send("p1", [(1, 5, 0)], txn="T1")
        h.send("p2", [(1, 6, 1)], txn="T2")
    else:
        # T2's record is acknowledged at offset 1 before T1's send is even invoked,
        # yet T1's lands at offset 0: no real-time order allows that.
        h.send("p2", [(1, 6, 1)], txn="T2")
        late = h.send("p1", [(1, 5, 0)], txn="T1")
    h.commit("p1", "T1")
    h.commit("p2", "T2")
    return h, late


def test_every_witness_of_an_edge_constrains_the_cycle(tmp_path):
    # The edge T1 -> T2 shows in t/0 (possible) and in t/1 (impossible): the cycle is
    # a violation, and the example points at the impossible witness.
    h, late = _crossed_with_third_partition(tmp_path / "h.jsonl", t1_first_in_p1=False)
    v = verdict(h)
    assert not v.valid and found(v) == {"g0"}, v.summary()
    example(v, "g0", severity="violation", process="p1", op=late, topic="t",
            partition=1, offset=0, txn="T1", value=None,
            detail="2-transaction cycle: T1 -[ww: t/1 offset 0 < 1]-> T2 "
                   "-[ww: t/2 offset 0 < 1]-> T1")


def test_a_possible_second_witness_leaves_the_cycle_a_note(tmp_path):
    h, _ = _crossed_with_third_partition(tmp_path / "h.jsonl", t1_first_in_p1=True)
    v = verdict(h)
    assert v.valid and found(v) == {"g0"} and v.notes == ["g0"], v.summary()
    example(v, "g0", severity="note", txn="T1")


# A component holding a cycle real time allows and one it forbids reports the violation.

def test_an_impossible_cycle_is_not_hidden_by_a_possible_one_in_its_component():
    e = pd.DataFrame([_edge("T1", "T2", WW, (1, 4), (2, 5), part=0),
                      _edge("T2", "T1", WW, (3, 6), (2, 7), part=1),  # T1, T2: a note
                      _edge("T2", "T3", WW, (3, 6), (20, 21), part=2),
                      _edge("T3", "T2", WW, (20, 21), (3, 6), part=3)])  # T3 after T2
    found = find_cycles(e, {"T3": "p3"})
    assert found[["type", "severity", "txn", "process", "partition"]].values.tolist() == [
        ["g0", "violation", "T3", "p3", 3]]
    assert found["detail"][0] == ("2-transaction cycle: T3 -[ww: t/3 offset 0 < 1]-> T2 "
                                  "-[ww: t/2 offset 0 < 1]-> T3")


# T1 -> T2 -> T3 in t/0, T3 -> T1 in t/1, T2 -> T1 in t/2: each edge alone possible.
_CHAIN = [_edge("T1", "T2", WW, (10, 11), (1, 20), part=0, offs=(0, 1)),
          _edge("T2", "T3", WW, (1, 20), (5, 6), part=0, offs=(1, 2)),
          _edge("T3", "T1", WW, (5, 6), (7, 8), part=1),
          _edge("T2", "T1", WW, (1, 20), (12, 13), part=2)]
_G1C = [_edge("T1", "T2", WR, (8, 9), (10, 11)),
        _edge("T2", "T1", WW, (3, 6), (2, 7), part=1),   # a note
        _edge("T2", "T3", WR, (12, 13), (14, 15)),
        _edge("T3", "T2", WW, (14, 15), (3, 6), part=2)]  # impossible
_G_SINGLE = [_edge("T1", "T2", RW, (1, 2), (3, 4)),
             _edge("T2", "T1", WW, (3, 4), (5, 6), part=1),   # a note
             _edge("T2", "T3", WW, (3, 4), (1, 2), part=2),   # impossible
             _edge("T3", "T1", WW, (1, 2), (5, 6), part=3)]


def test_a_chain_in_one_partition_that_real_time_forbids_is_not_hidden():
    # In t/0 T1's record lies below T2's and T2's below T3's, so T1's below T3's; but
    # T3's send completed (6) before T1's was invoked (10). Each edge alone is possible.
    t1_t2, t2_t3, t3_t1, t2_t1 = _CHAIN
    assert not solvable(pd.DataFrame([t1_t2, t2_t3, t3_t1]))
    assert solvable(pd.DataFrame([t1_t2, t2_t1]))
    found = find_cycles(pd.DataFrame([t1_t2, t2_t3, t3_t1, t2_t1]))
    assert list(found["type"]) == ["g0"] and list(found["severity"]) == ["violation"]
    # Through the order the chain implies, T1 -> T3 in t/0.
    assert found["detail"][0] == ("2-transaction cycle: T1 -[ww: t/0 offset 0 < 2]-> T3 "
                                  "-[ww: t/1 offset 0 < 1]-> T1")


def test_an_impossible_g1c_is_not_hidden_by_a_possible_one():
    found = find_cycles(pd.DataFrame(_G1C))
    assert list(found["type"]) == ["g1c"] and list(found["severity"]) == ["violation"]
    assert found["txn"][0] == "T3"


def test_an_impossible_g_single_is_not_hidden_by_a_possible_one():
    found = find_cycles(pd.DataFrame(_G_SINGLE))
    assert list(found["type"]) == ["g_single"] and list(found["severity"]) == ["violation"]
    assert found["detail"][0].startswith("3-transaction cycle: T2 -[ww: t/2 offset 0 < 1]-> T3")


def _coded(e: pd.DataFrame) -> pd.DataFrame:
    """e with src and dst as Categoricals, as engine.Facts.of gives cycles.FACT_CODED,
    each side's categories its own and in reverse order of the names."""
    return e.assign(**{c: pd.Categorical(e[c], categories=sorted(
        {x for x in e[c] if x is not None}, reverse=True)) for c in ("src", "dst")})


@pytest.mark.parametrize("edges", [_CHAIN, _G1C, _G_SINGLE], ids=["implied", "g1c", "g_single"])
def test_transactions_named_by_categoricals_give_the_same_cycles(edges):
    e = pd.DataFrame(edges)
    plain = find_cycles(e, {"T3": "p3"})
    assert len(plain) and plain.equals(find_cycles(_coded(e), {"T3": "p3"}))


def test_transaction_codes_follow_the_names_whatever_their_categories():
    e = pd.DataFrame(_G1C + [_edge("T9", None, WR, (1, 2), (3, 4))])
    codes, n = _node_codes(e)
    assert n == 5 and codes[0].tolist() == [0, 1]
    coded, m = _node_codes(_coded(e))
    assert m == n and np.array_equal(coded, codes)


def test_a_long_cycle_with_many_witnesses_is_a_note_unless_one_witness_forbids_it():
    # Big enough that work quadratic in the ring's length would not finish; how long it
    # takes is measured by bench/graph_bench.py, not asserted here.
    n = 200_000
    ok = find_cycles(ww_ring(n))
    bad = find_cycles(ww_ring(n, bad_at=n // 2))
    assert list(ok["severity"]) == ["note"] and list(bad["severity"]) == ["violation"]
    assert bad["txn"][0] == f"T{n // 2:07d}" and bad["partition"][0] == 10**6 + n // 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(2, 5), st.lists(st.integers(0, 9), min_size=5, max_size=5),
                          st.integers(1, 3)), min_size=1, max_size=6))
def test_cycles_reported_all_at_once_read_as_each_reported_alone(rings):
    """_Graph.reports makes every cycle's record from lists gathered for all cycles at
    once, and finds each cycle's first impossible witness for all of them together:
    each record is the one _report makes of that cycle's own witnesses, for rings of
    several lengths and witnesses per edge, an impossible witness anywhere or nowhere."""
    from onceproof.checkers.cycles import _Graph, _report
    rows, cycles_of = [], []
    for i, (length, bad_at, witnesses) in enumerate(rings):
        names = [f"r{i}t{j}" for j in range(length)]
        for j in range(length):
            for w in range(witnesses):
                # Witness w of edge j: impossible (its source window empty) when the
                # drawn positions name it.
                bad = bad_at[(j + w) % 5] == j * witnesses + w
                rows.append(_edge(names[j], names[(j + 1) % length], WW,
                                  (5, 5) if bad else (j, j + 10), (j + 1, j + 11), part=w,
                                  offs=(j, j + 1)))
        cycles_of.append(names)
    e = pd.DataFrame(rows)
    codes, _ = _node_codes(e)
    gr = _Graph(e, codes)
    code = dict(zip(e["src"], codes[:, 0]))
    edge = {(s, d): k for k, (s, d) in enumerate(zip(gr.src.tolist(), gr.dst.tolist()))}
    cycles = [("g0", [edge[code[a], code[b]] for a, b in zip(names, names[1:] + names[:1])])
              for names in cycles_of]
    procs = {name: f"p{name}" for names in cycles_of for name in names}
    together = gr.reports(cycles, procs)
    alone = [_report(t, gr.rows(edges), procs) for t, edges in cycles]
    assert together == alone
    assert {r["severity"] for r in together} <= {"violation", "note"}
