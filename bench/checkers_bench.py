"""How fast the checkers are on a big history, as ratios measured in one run.

    python bench/checkers_bench.py                  # 1M then 10M events, one Spark session
    python bench/checkers_bench.py --events 250000  # any sizes; --keep DIR keeps the files

Steps, each timed:
1. synthesize a valid history of about N events with tests/support/synth/, streamed to
   JSONL (the model keeps compact per-partition arrays, never the events);
2. convert it once to the checkers' Parquet tables (checkers.store.convert), in a
   process of its own, whose peak RSS is the converter's alone;
3. the local check of the JSONL in one call (what `onceproof check history.jsonl`
   runs, which checks each bucket of steps as the converter makes it), in a fresh
   process of its own, as a user's command runs: once timed, once with its memory
   sampled (the sampling slows what it samples, so that run is not timed). Steps 1-3
   run for every size before Spark starts, as a user's command runs without a Spark
   session beside it holding gigabytes. Then the local check of the Parquet tables
   (the default engine on one machine); then the full check suite on those tables
   in one SparkSession, twice: the first full-size check of the session, and again
   warm (after the local ones: PySpark's workers stay, holding memory);
4. a Spark job that only scans the check's input (every column of the steps and ops
   tables), twice: the ratios are to the second, warm scan;
5. pandas doing only the duplicate and lost-write checks on the same Parquet.

It first times a fixed reference workload on this machine (a Python loop, a numpy
pass over memory, first writes to fresh pages), again at the end, and prints both with
the figures: the machines this runs on differ from day to day (seen: the same code 2x
slower in every figure), and the reference says whether a figure moved with the code
or with the machine.

It prints the figures: end to end (JSONL to verdict) per engine, check wall time,
events per second, peak RSS of the Python driver and of the Spark JVM (sampled by
psutil; for the local check of the JSONL, its process with its worker processes, as
the sum of their proportional set sizes, since the workers are forked and share
pages), and the check's time as a ratio to the bare scan and to the pandas checks. It
asserts nothing about time: machines differ, and the ratios are what to compare across
changes.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

# The repository root, so that the test support the benchmark shares (tests.support)
# imports when this runs as `python bench/checkers_bench.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.synth.clients import Shape, synthesize_file

SIZES = {"1m": 1_000_000, "10m": 10_000_000}


PSS_EVERY = 0.5  # seconds


def _pss(p: psutil.Process) -> int:
    try:
        return p.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):  # no PSS here: RSS, an overcount
        return p.memory_info().rss


class PeakRSS:
    """Peak resident memory of this process and, separately, of its children (the
    Spark JVM and PySpark's Python workers), sampled every 50 ms from /proc's cheap
    counters."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.driver = 0
        self.children = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.driver = max(self.driver, self.me.memory_info().rss)
                kids = 0
                for c in self.me.children(recursive=True):
                    try:
                        kids += c.memory_info().rss
                    except psutil.Error:
                        pass
                self.children = max(self.children, kids)
            except psutil.Error:
                pass
            self._stop.wait(0.05)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def peak_pss(proc: subprocess.Popen) -> int:
    """The peak of a process's proportional set size summed with its children's (a
    check's forked workers share its pages, which their RSS would count again), read
    every PSS_EVERY until it exits. The kernel walks every page of a process to count
    them, and a fault in it waits meanwhile: a 10M-event check sampled so ran 10-15 s
    longer, so the runs that are timed are not sampled."""
    peak = 0
    try:
        root = psutil.Process(proc.pid)
    except psutil.Error:
        return 0
    while proc.poll() is None:
        total = 0
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    total += _pss(p)
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(PSS_EVERY)
    return peak


# Its peak is its own memory's high-water mark (VmHWM), not getrusage's ru_maxrss: a
# process started by fork and exec reports there the largest of its own peak and the
# bench's RSS when it forked (the bench's reference workload, 1.8 GB, showed up as a
# 1M conversion's peak).
_CONVERT = """
import json, resource, sys, time
from pathlib import Path
from onceproof.checkers.store import convert
t = time.perf_counter()
convert(sys.argv[1], sys.argv[2])
seconds = time.perf_counter() - t
status = Path("/proc/self/status")
hwm = [line.split()[1] for line in status.read_text().splitlines()
       if line.startswith("VmHWM:")] if status.exists() else []
peak = int(hwm[0]) * 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "peak": peak}))
"""


_CHECK = """
import json, sys, time
from onceproof.checkers import check
t = time.perf_counter()
verdict = check(sys.argv[1], None, 3, None, True)
print(json.dumps({"seconds": time.perf_counter() - t, "counts": verdict.counts}))
"""


def check_alone(jsonl: Path, sampled: bool = False) -> tuple[float, dict, int]:
    """The local check of a JSONL history in a process of its own, as
    `onceproof check history.jsonl` runs: (its seconds, the anomaly counts, and with
    `sampled` the peak PSS of it and its workers, else 0)."""
    # Its output goes to files: a pipe that fills while the sampler waits for the
    # process to end would stop it.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", _CHECK, str(jsonl)],
                                stdout=out, stderr=err, text=True)
        peak = peak_pss(proc) if sampled else 0
        proc.wait()
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"the check failed: {err.read().strip()[-2000:]}")
        done = json.loads(out.read().strip().splitlines()[-1])
    return done["seconds"], done["counts"], peak


def convert_alone(jsonl: Path, tables: Path) -> tuple[float, int]:
    """Convert in a process of its own: (seconds, its peak RSS in bytes, the kernel's
    high-water mark, not a sample). In this process the figure would count what the
    bench itself holds (a Spark driver, the runs before), 1.2 GB before the 10M one."""
    done = subprocess.run([sys.executable, "-c", _CONVERT, str(jsonl), str(tables)],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the conversion failed: {done.stderr.strip()[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  {'convert JSONL -> Parquet (alone)':<34} {out['seconds']:9.2f} s", flush=True)
    return out["seconds"], out["peak"]


def machine_reference() -> dict[str, float]:
    """_reference, in a process of its own: the bench's own memory stays as it was
    (its peak would otherwise be every later measured process's, above)."""
    done = subprocess.run([sys.executable, "-c", _REFERENCE], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent)
    if done.returncode:
        raise SystemExit(f"the reference workload failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


_REFERENCE = """
import json
from checkers_bench import _reference
print(json.dumps(_reference()))
"""


def _reference() -> dict[str, float]:
    """Fixed work timed on this machine, best of three: python_loop_s, a loop of 10M
    additions in the interpreter (most of the checks' fixed cost per call); memory_gb_s,
    numpy summing 800 MB (the checks' passes over arrays of millions of rows);
    page_fault_us, the first write to each 4 KB page of 1 GB freshly mapped (what a
    process pays for memory it has not used yet: a check's workers map gigabytes, and
    what one page costs differs from machine to machine, 3.3-4.5 us on this one)."""
    import mmap

    import numpy as np

    def loop() -> None:
        s = 0
        for i in range(10_000_000):
            s += i

    def fault() -> None:
        with mmap.mmap(-1, 1 << 30) as fresh:  # plain pages: numpy would ask for huge ones
            pages = np.frombuffer(fresh, np.uint8)
            pages[::mmap.PAGESIZE] = 1
            del pages
    block = np.ones(100_000_000)  # 800 MB, touched once before it is timed
    loop_s = min(_seconds(loop) for _ in range(3))
    sum_s = min(_seconds(block.sum) for _ in range(3))
    fault_s = min(_seconds(fault) for _ in range(3))
    return {"python_loop_s": round(loop_s, 2), "memory_gb_s": round(block.nbytes / sum_s / 1e9, 1),
            "page_fault_us": round(fault_s / ((1 << 30) // mmap.PAGESIZE) * 1e6, 2)}


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _print_reference(when: str, ref: dict[str, float]) -> None:
    print(f"machine reference, {when:<5}  Python 10M-step loop {ref['python_loop_s']:.2f} s, "
          f"memory read {ref['memory_gb_s']} GB/s, a fresh page {ref['page_fault_us']} us",
          flush=True)


def timed(label: str, fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    dt = time.perf_counter() - t
    print(f"  {label:<34} {dt:9.2f} s", flush=True)
    return out, dt


def shape_for(events: int) -> Shape:
    # About two events per op (the final phase's reads add a few percent).
    return Shape(processes=12, ops=max(100, events // 2), partitions=6)


# What the check reads (checkers/engine.py): every step, and the ops table for the
# families that judge whole ops and for naming witnesses.
CHECK_INPUT = ("steps", "ops")


def spark_scan(spark, tables: Path) -> int:
    """Every column of the tables the check reads, read once, nothing computed: Spark's
    floor for the check."""
    for name in CHECK_INPUT:
        df = spark.read.parquet(str(tables / f"{name}.parquet"))
        df.write.format("noop").mode("overwrite").save()
    return len(CHECK_INPUT)


def pandas_checks(tables: Path) -> dict[str, int]:
    """duplicate and lost_write in plain pandas, on the same Parquet tables.

    duplicate: a value observed (acked or read) at two offsets of a partition.
    lost_write: an acknowledged write (status committed) with a known offset, never
    read, below the highest offset read in its partition. (The Spark checker bounds
    unknown offsets and uses each reader's scan; this is the simple version a person
    would write first, and a floor for what a single machine costs.)"""
    import pandas as pd

    from onceproof.checkers.store import read_table
    w = pd.read_parquet(tables / "writes.parquet",
                        columns=["topic", "partition", "value", "offset", "type", "status"])
    # The reads are the steps of kind r (docs/history.md, "Parquet tables").
    r = read_table(tables, "reads", ["topic", "partition", "value", "offset"]).to_pandas()
    key = ["topic", "partition"]
    acks = w.loc[(w["type"] == "ok") & w["offset"].notna(), key + ["value", "offset"]]
    obs = pd.concat([acks, r], ignore_index=True).dropna(subset=["value", "offset"])
    per = obs.drop_duplicates(key + ["value", "offset"])
    dup = int(per.duplicated(key + ["value"]).sum())
    top = r.groupby(key)["offset"].max().rename("top").reset_index()
    committed = w[(w["status"] == "committed") & w["offset"].notna()].merge(top, on=key)
    unread = ~committed["value"].isin(r["value"])
    lost = int((unread & (committed["offset"] < committed["top"])).sum())
    return {"duplicate": dup, "lost_write": lost}


def _per_s(n: int, seconds: float) -> int | None:
    # None when a step was reused (--reuse) and so not timed.
    return None if math.isnan(seconds) else round(n / seconds)


def _n(x: int | None) -> str:
    return "-" if x is None else f"{x:,}"


def prepare(target: int, seed: int, work: Path, reuse: bool) -> dict:
    """Synthesize and convert one history of about `target` events, and check it end to
    end locally; before any Spark starts, whose JVM and Python workers hold gigabytes
    for the rest of the bench (7.5 GB after the 1M checks), which a user's
    `onceproof check history.jsonl` does not compete with."""
    from onceproof.checkers.store import is_converted
    work.mkdir(parents=True, exist_ok=True)
    jsonl, tables = work / "history.jsonl", work / "tables"
    print(f"checkers bench: ~{target:,} events, seed {seed}, in {work}", flush=True)
    with PeakRSS() as rss:
        if reuse and jsonl.is_file():
            n, t_gen = sum(1 for _ in jsonl.open("rb")), float("nan")
        else:
            n, t_gen = timed("synthesize (JSONL, streamed)", synthesize_file, jsonl,
                             seed, shape_for(target))
    if reuse and is_converted(tables):
        t_conv, conv_peak = float("nan"), 0
    else:
        if tables.exists():
            shutil.rmtree(tables)
        t_conv, conv_peak = convert_alone(jsonl, tables)
    t_whole, whole, _ = check_alone(jsonl)
    print(f"  {'check JSONL -> verdict (alone)':<34} {t_whole:9.2f} s", flush=True)
    whole_peak = check_alone(jsonl, sampled=True)[2]
    print(f"  {'  again, its memory sampled':<34} (peak PSS {whole_peak / 2**20:,.0f} MB)",
          flush=True)
    return {"target": target, "seed": seed, "work": work, "jsonl": jsonl, "tables": tables,
            "n": n, "t_gen": t_gen, "gen_peak": rss.driver, "t_conv": t_conv,
            "conv_peak": conv_peak, "t_whole": t_whole, "whole": whole,
            "whole_peak": whole_peak}


def bench_one(prepared: dict, spark) -> dict:
    """Check one prepared history on Parquet, locally and on Spark; print and return
    all its figures."""
    from onceproof.checkers import check
    target, seed, work = prepared["target"], prepared["seed"], prepared["work"]
    jsonl, tables, n = prepared["jsonl"], prepared["tables"], prepared["n"]
    t_gen, gen_peak = prepared["t_gen"], prepared["gen_peak"]
    t_conv, conv_peak = prepared["t_conv"], prepared["conv_peak"]
    t_whole, whole, whole_peak = (prepared["t_whole"], prepared["whole"],
                                  prepared["whole_peak"])
    mb = jsonl.stat().st_size / 1e6
    print(f"checkers bench: ~{target:,} events, seed {seed}, in {work}, on Parquet",
          flush=True)
    with PeakRSS() as rss:
        local, t_local = timed("full check suite (Parquet, local)", check, tables, None,
                               3, None, True)
        rss.driver = rss.children = 0
        verdict, t_check = timed("full check suite (Parquet, Spark)", check, tables, spark,
                                 3, None, False)
        check_driver, check_jvm = rss.driver, rss.children
        # Twice too, as the scan: the first full-size check in a session pays for the
        # JVM's JIT of what the check runs and for its workers' first touch of memory,
        # which a session that checks again (a test run, the job's suites) does not.
        # Both are printed: the first is what a one-off `onceproof check` waits for.
        _, t_check_warm = timed("  again, warm", check, tables, spark, 3, None, False)
        # Twice: the first pays for the JIT of the JVM's Parquet reader at this size
        # (the check does not use it), so the ratio is to the second, warm scan.
        _, t_scan_first = timed("Spark scan of the check's input", spark_scan, spark, tables)
        _, t_scan = timed("  again, warm", spark_scan, spark, tables)
        found, t_pandas = timed("pandas duplicate + lost_write", pandas_checks, tables)

    steps = verdict.stats.get("steps", 0)
    figures = {
        "events": n, "steps": steps, "jsonl_mb": round(mb, 1),
        "parquet_mb": round(sum(f.stat().st_size for f in tables.rglob("*.parquet")
                                if f.is_file()) / 1e6, 1),
        "synthesize_s": round(t_gen, 2), "convert_s": round(t_conv, 2),
        "convert_events_per_s": _per_s(n, t_conv),
        "check_s": round(t_check, 2), "events_per_s": round(n / t_check),
        # What a user waits for: JSONL to verdict, on each engine.
        "end_to_end_events_per_s": _per_s(n, t_conv + t_check),
        "check_local_s": round(t_local, 2),
        # The local check of a JSONL, as `onceproof check history.jsonl` runs it: one
        # call, which checks each bucket of steps as the converter makes it.
        "end_to_end_local_s": round(t_whole, 2),
        "end_to_end_local_events_per_s": _per_s(n, t_whole),
        "peak_pss_end_to_end_local_mb": round(whole_peak / 2**20),
        "steps_per_s": round(steps / t_check),
        "scan_s": round(t_scan, 2), "scan_first_s": round(t_scan_first, 2),
        "pandas_s": round(t_pandas, 2),
        "check_over_scan": round(t_check / t_scan, 2),
        "check_warm_s": round(t_check_warm, 2),
        "check_warm_over_scan": round(t_check_warm / t_scan, 2),
        "check_over_pandas": round(t_check / t_pandas, 2),
        "peak_rss_synthesize_mb": round(gen_peak / 2**20),
        "peak_rss_convert_mb": round(conv_peak / 2**20),
        "peak_rss_driver_check_mb": round(check_driver / 2**20),
        "peak_rss_spark_jvm_and_workers_mb": round(check_jvm / 2**20),
        "valid": verdict.valid, "anomalies": verdict.counts, "pandas_found": found,
    }
    print()
    print(f"events                 {n:,} ({figures['jsonl_mb']} MB JSONL, "
          f"{figures['parquet_mb']} MB Parquet; {steps:,} steps)")
    print(f"full check suite       {t_check:.1f} s  ({figures['events_per_s']:,} events/s, "
          f"{figures['steps_per_s']:,} steps/s)")
    print(f"  / Spark scan, input  {figures['check_over_scan']}x  (scan {t_scan:.1f} s warm, "
          f"{t_scan_first:.1f} s the first time)")
    print(f"  again, warm          {t_check_warm:.1f} s, {figures['check_warm_over_scan']}x the "
          f"warm scan")
    print(f"  / pandas dup + lost  {figures['check_over_pandas']}x  (pandas {t_pandas:.1f} s)")
    print(f"convert to Parquet     {t_conv:.1f} s ({_n(figures['convert_events_per_s'])} events/s, "
          f"peak {figures['peak_rss_convert_mb']} MB, a process of its own; once per "
          f"history)")
    print(f"end to end, local      {t_whole:.1f} s "
          f"({_n(figures['end_to_end_local_events_per_s'])} events/s; one call, JSONL to "
          f"verdict; peak {figures['peak_pss_end_to_end_local_mb']} MB, PSS of its process "
          f"and workers)")
    print(f"end to end, Spark      {t_conv + t_check:.1f} s "
          f"({_n(figures['end_to_end_events_per_s'])} events/s; convert, then check the "
          f"Parquet; the local check of the Parquet {t_local:.1f} s)")
    print(f"peak RSS               driver {figures['peak_rss_driver_check_mb']} MB during the "
          f"check; Spark JVM + workers {figures['peak_rss_spark_jvm_and_workers_mb']} MB; "
          f"{figures['peak_rss_synthesize_mb']} MB synthesizing, "
          f"{figures['peak_rss_convert_mb']} MB converting")
    if not local.counts == whole == verdict.counts:
        print(f"ENGINES DISAGREE: local found {local.counts}, from the JSONL "
              f"{whole}, Spark {verdict.counts}", flush=True)
    print(f"verdict                {'VALID' if verdict.valid else 'INVALID'} {verdict.counts}; "
          f"pandas found {found}")
    print(json.dumps(figures), flush=True)
    return figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", nargs="+", default=["1m", "10m"],
                    help="history sizes, run in this order: 1m, 10m, or numbers of events")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="directory to keep the JSONL and Parquet in (a "
                                   "subdirectory per size)")
    ap.add_argument("--master", help="Spark master (default: the checkers' own, local[2])")
    ap.add_argument("--reuse", action="store_true",
                    help="with --keep: reuse the JSONL and Parquet already there (so a big "
                         "history's generation and conversion can run as separate steps)")
    args = ap.parse_args(argv)
    try:
        targets = [SIZES.get(e.lower()) or int(float(e)) for e in args.events]
    except ValueError:
        ap.error("--events takes sizes such as 1m, 10m or 250000")

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="onceproof-bench-"))
    before = machine_reference()
    _print_reference("first", before)
    prepared = [prepare(target, args.seed, root / f"{target}", args.reuse)
                for target in targets]
    from onceproof.checkers import check
    from onceproof.checkers.spark import session
    spark, _ = timed("start Spark", session, args.master)
    # One small check and one scan on Spark first, so no timed run pays for JIT and
    # worker start. The scan needs its own: the check's tasks read their files with
    # pyarrow, so the JVM's Parquet reader is first used by the scan.
    from onceproof.checkers.store import convert
    small = root / "warmup.jsonl"
    root.mkdir(parents=True, exist_ok=True)
    synthesize_file(small, 0, Shape(ops=200))
    warm = convert(small, root / "warmup")
    timed("warm-up check (Spark, ~400 events)", check, warm, spark, 3, None, False)
    timed("warm-up scan (Spark, ~400 events)", spark_scan, spark, warm)
    figures = [bench_one(one, spark) for one in prepared]
    after = machine_reference()
    _print_reference("first", before)
    _print_reference("last", after)
    print(json.dumps({"machine_reference": {"first": before, "last": after},
                      "runs": figures}), flush=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
