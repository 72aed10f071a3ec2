"""How the dependency-cycle search scales: time to judge a long ww ring whose every edge
has two witnesses (checkers/cycles.py find_cycles), at doubling lengths.

    python bench/graph_bench.py                    # 50k, 100k, 200k, 400k transactions
    python bench/graph_bench.py --sizes 10000 20000

It prints, per length, the seconds for the allowed ring and for the one a single witness
forbids, and the time per transaction: linear work keeps that figure flat as the ring
doubles, quadratic work doubles it. It asserts nothing about time (machines differ);
tests/test_checkers_graph.py checks the verdicts.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.histories
from onceproof.checkers.cycles import find_cycles
from tests.histories import ww_ring  # the tests' builder of the same ring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 100_000, 200_000, 400_000])
    args = parser.parse_args()
    print(f"{'transactions':>12} {'allowed s':>10} {'forbidden s':>12} {'us per txn':>11}")
    for n in args.sizes:
        allowed, forbidden = ww_ring(n), ww_ring(n, bad_at=n // 2)
        t0 = time.perf_counter()
        ok = find_cycles(allowed)
        t1 = time.perf_counter()
        bad = find_cycles(forbidden)
        t2 = time.perf_counter()
        assert list(ok["severity"]) == ["note"] and list(bad["severity"]) == ["violation"]
        print(f"{n:>12} {t1 - t0:>10.2f} {t2 - t1:>12.2f} {(t2 - t0) / (2 * n) * 1e6:>11.2f}",
              flush=True)


if __name__ == "__main__":
    main()
