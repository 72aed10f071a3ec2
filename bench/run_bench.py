"""What one `onceproof run` costs end to end: wall time, the peak memory of its whole
process tree (Kafka JVMs, toxiproxy, and Spark's JVM if one starts), and whether Spark
started at all. Prints figures; asserts nothing.

    python bench/run_bench.py [--seed 1] [--runs 1] [-- extra `onceproof run` options]

Run it twice on two checkouts with the same seed to compare them: the plan drawn from a
seed is the same, the system under test is not, so compare more than one run each.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

import psutil


def measure(args: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="onceproof-bench-") as out:
        started = time.monotonic()
        proc = psutil.Popen([sys.executable, "-m", "onceproof", "run", "--out", out, *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak, spark = 0, False
        while proc.poll() is None:
            tree = [proc]
            try:
                tree += proc.children(recursive=True)
            except psutil.Error:
                pass
            total = 0
            for p in tree:
                try:
                    total += p.memory_info().rss
                    spark = spark or any("spark" in part.lower() for part in p.cmdline()
                                         if part.startswith("org.apache.spark"))
                except psutil.Error:
                    pass
            peak = max(peak, total)
            time.sleep(0.5)
        return {"exit": proc.returncode, "seconds": time.monotonic() - started,
                "peak_rss_mib": peak / 2**20, "spark_started": spark}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("extra", nargs="*", help="more `onceproof run` options (after --)")
    a = ap.parse_args()
    for i in range(a.runs):
        r = measure(["--seed", str(a.seed), *a.extra])
        print(f"run {i + 1}: exit {r['exit']}, {r['seconds']:.1f} s wall, peak RSS of the "
              f"process tree {r['peak_rss_mib']:.0f} MiB, Spark JVM started: "
              f"{'yes' if r['spark_started'] else 'no'}")


if __name__ == "__main__":
    main()
