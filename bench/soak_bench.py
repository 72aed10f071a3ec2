"""A long concurrent run under faults, watching the harness's own memory: whether a nightly
run of hours can go on in one process.

One concurrent plan (nine clients, mixed faults, client crashes, as `onceproof run`
draws it, but with a fault in every 10 s slot) runs for --duration seconds on a local
3-node cluster while the harness's memory is sampled every --every seconds: the
harness's processes together (itself, and the client processes it forks: run/host.py),
as their proportional set size (PSS: a page shared by several counts a share in each,
so the forked processes' common pages are counted once), beside the harness process's
own RSS, what glibc's malloc holds in it (mallinfo2: bytes in use, bytes free but
kept) and its threads by name. Growth is the peak after the first --after seconds plus
a minute, over the median of that minute; the target applies to the processes
together. After the run it times what a user waits for: the history converted, checked
and its report written. Prints figures and writes them to OUT/soak_bench.json; exits 1
when growth is past --max-growth percent, so the nightly can fail on it.

    python bench/soak_bench.py [--duration 1800] [--every 10] [--after 300] [--max-growth 10]
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import click
import psutil
from load_bench import fault_kinds, harness_processes  # this folder's load bench
from rich.console import Console
from rich.table import Table

from onceproof.checkers import check
from onceproof.checkers.store import convert
from onceproof.cluster.cluster import Cluster
from onceproof.memory import for_running
from onceproof.report.page import write_report
from onceproof.run.execute import run, under_test
from onceproof.run.fleet import CRASHED, ERROR, HUNG
from onceproof.workloads.generate import draw_plans
from onceproof.workloads.plan import PlanError, save
from onceproof.workloads.strategies import WORKLOADS, concurrent_plans

MIB = 2**20


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo():
    """glibc's mallinfo2, or None where there is none (another libc)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _Mallinfo2
    return libc.mallinfo2


def thread_names() -> dict[str, int]:
    """This process's threads by their system name, digits dropped: librdkafka names its
    own (rdk:main, rdk:broker3, ...); Python's are all the interpreter's name."""
    names: Counter[str] = Counter()
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            names[re.sub(r"\d+", "", comm.read_text().strip())] += 1
        except OSError:  # the thread ended meanwhile
            pass
    return dict(names)


class Samples:
    """Every `every` seconds: seconds since the start, RSS, malloc's bytes in use
    (uordblks + hblkhd: small blocks and mmapped ones) and free but kept (fordblks), and
    the thread count of this process."""

    def __init__(self, every: float) -> None:
        self.every, self.rows = every, []
        self.proc = psutil.Process()
        self.mallinfo = _mallinfo()
        self._stop = threading.Event()

    def _take(self) -> None:
        by_name: Counter[str] = Counter()
        n = 0
        for p in harness_processes(self.proc):
            try:
                # A client process is named for its plan client (run/host.py), and a
                # replacement takes its name, so each name is one client's series.
                # (A replacement's process name adds ".N", cut short at 15 bytes.)
                name = "harness" if p.pid == self.proc.pid else p.name().split(".")[0]
                by_name[name] += p.memory_full_info().pss
                n += 1
            except psutil.Error:  # it ended meanwhile
                pass
        row = {"t": round(time.monotonic() - self.started, 1),
               "pss_mib": sum(by_name.values()) / MIB, "processes": n,
               "pss_by_process_mib": {k: round(v / MIB, 1) for k, v in by_name.items()},
               "rss_mib": self.proc.memory_info().rss / MIB, "threads": self.proc.num_threads(),
               "thread_names": thread_names()}
        if self.mallinfo is not None:
            m = self.mallinfo()
            row |= {"malloc_used_mib": (m.uordblks + m.hblkhd) / MIB,
                    "malloc_free_mib": m.fordblks / MIB}
        self.rows.append(row)

    def _loop(self) -> None:
        while True:
            self._take()
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> Samples:
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="soak-samples")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._take()


def growth(rows: list[dict], after: float, key: str = "rss_mib") -> dict:
    """The peak of `key` from after+60 s on, against its median over [after, after+60)."""
    base = [r[key] for r in rows if after <= r["t"] < after + 60]
    later = [r[key] for r in rows if r["t"] >= after + 60]
    if not base or not later or not statistics.median(base):
        return {"base": None, "peak": None, "end": None, "percent": None}
    b = statistics.median(base)
    return {"base": round(b, 1), "peak": round(max(later), 1), "end": round(later[-1], 1),
            "percent": round(100 * (max(later) / b - 1), 1)}


@click.command(help=__doc__.splitlines()[0])
@click.option("--duration", type=click.IntRange(60), default=1800, show_default=True, help="seconds")
@click.option("--every", type=click.FloatRange(1), default=10.0, show_default=True,
              help="seconds between samples")
@click.option("--after", type=click.FloatRange(0), default=300.0, show_default=True,
              help="seconds of warm-up before growth is counted")
@click.option("--max-growth", type=float, default=10.0, show_default=True,
              help="percent of growth of the harness's processes' PSS past which the bench "
                   "exits 1")
@click.option("--workload", type=click.Choice(list(WORKLOADS)), default="pipeline", show_default=True)
@click.option("--faults", "kinds", default="mixed", show_default=True, callback=fault_kinds)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("soak-bench"), show_default=True)
def main(duration, every, after, max_growth, workload, kinds, seed, out) -> None:
    if after + 120 > duration:
        raise click.UsageError(f"--duration {duration} leaves too little after --after {after:g}: "
                               f"give at least {after + 120:g} s")
    for_running()  # as `onceproof` does first thing
    console = Console()
    try:
        # A fault in every slot of the nemesis's clock (one per 10 s, as `onceproof run`
        # spaces them), so the faults go on for the whole run, not only its first minutes.
        plan = draw_plans(concurrent_plans(workload, faults=kinds, duration=(duration, duration),
                                           min_clients=9, min_faults=duration // 10),
                          1, seed)[0]
    except PlanError as exc:
        raise click.UsageError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    save(plan, out / "plan.json")
    folder = out / "run"
    with tempfile.TemporaryDirectory(prefix="onceproof-soak-") as root, Cluster(root, 3) as cluster:
        console.print(f"Kafka {cluster.dist.version}: {len(plan['clients'])} clients for "
                      f"{duration} s, {len(plan['schedule'])} scheduled faults and crashes")
        with Samples(every) as samples:
            run(plan, cluster, folder)
        tested = under_test(cluster)
        # A client call that never returned holds its thread and its client instance
        # until its process is killed (run/host.py): none should be left in this one.
        abandoned = sum(t.name == "onceproof-bounded" for t in threading.enumerate())
    # The samples first: what comes after the run (the check, the report) must not be
    # able to lose half an hour of them.
    (out / "soak_bench.json").write_text(json.dumps({"samples": samples.rows}, indent=1))
    with open(folder / "history.jsonl") as history:
        replaced = Counter(e["f"] for e in map(json.loads, history)
                           if e["type"] == "info" and e["f"] in (CRASHED, ERROR, HUNG))
    # What a user waits for once the run is over: its verdict and its report.
    started = time.monotonic()
    tables = convert(folder / "history.jsonl", folder / "history.parquet")
    verdict = check(tables)
    verdict.tested = tested
    (folder / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=1, default=str))
    write_report(folder)
    after_run = time.monotonic() - started
    pss = growth(samples.rows, after, "pss_mib")
    rss = growth(samples.rows, after)
    figures = {"duration": duration, "seed": seed, "workload": workload,
               "faults": ",".join(kinds) or "none", "every": every, "after": after,
               "pss_growth": pss, "rss_growth": rss, "replaced": dict(replaced),
               "malloc_used_growth": growth(samples.rows, after, "malloc_used_mib")
               if samples.mallinfo else None,
               "malloc_free_growth": growth(samples.rows, after, "malloc_free_mib")
               if samples.mallinfo else None,
               "threads_max": max(r["threads"] for r in samples.rows),
               "calls_abandoned": abandoned,
               "librdkafka_instances_after_run": samples.rows[-1]["thread_names"].get("rdk:main", 0),
               "verdict_and_report_seconds": round(after_run, 1), "valid": verdict.valid,
               "live": verdict.live, "events": verdict.stats.get("events"),
               "samples": samples.rows}
    (out / "soak_bench.json").write_text(json.dumps(figures, indent=1))
    table = Table("minute", "processes", "PSS MiB", "harness RSS MiB", "malloc in use MiB",
                  "malloc free MiB", "threads",
                  title=f"Harness memory over {duration} s (seed {seed})")
    for r in samples.rows:
        if int(r["t"]) % 60 < every or r is samples.rows[-1]:
            table.add_row(f"{r['t'] / 60:.1f}", str(r["processes"]), f"{r['pss_mib']:.0f}",
                          f"{r['rss_mib']:.0f}",
                          f"{r.get('malloc_used_mib', float('nan')):.0f}",
                          f"{r.get('malloc_free_mib', float('nan')):.0f}", str(r["threads"]))
    console.print(table)
    console.print(f"the harness's processes' PSS from minute {after / 60:g} (median "
                  f"{pss['base']} MiB) to the end: peak {pss['peak']} MiB, last {pss['end']} MiB, "
                  f"growth {pss['percent']}% (target <= {max_growth:g}%)")
    console.print(f"the harness process's own RSS: median {rss['base']} MiB, peak {rss['peak']} "
                  f"MiB, growth {rss['percent']}%")
    by_process = Table("process", "median MiB, first minute counted", "peak MiB", "last MiB",
                       "growth %", title="PSS by process, most grown first")
    names = {k for r in samples.rows for k in r["pss_by_process_mib"]}
    grown = {k: growth([{"t": r["t"], k: r["pss_by_process_mib"].get(k, 0.0)} for r in samples.rows],
                       after, k) for k in names}
    figures["pss_growth_by_process"] = grown
    (out / "soak_bench.json").write_text(json.dumps(figures, indent=1))
    for k, g in sorted(grown.items(), key=lambda kv: -((kv[1]["peak"] or 0) - (kv[1]["base"] or 0))):
        by_process.add_row(k, *(str(g[f]) for f in ("base", "peak", "end", "percent")))
    console.print(by_process)
    console.print(f"client processes replaced: {dict(replaced) or 'none'}; after the run: "
                  f"{abandoned} calls left blocked in the harness process, "
                  f"{figures['librdkafka_instances_after_run']} librdkafka instances alive in it")
    console.print(f"verdict and report {after_run:.1f} s after the run ended "
                  f"({'VALID' if verdict.valid else 'ANOMALIES FOUND'}"
                  f"{'' if verdict.live else ', NOT LIVE'}); figures in {out / 'soak_bench.json'}")
    sys.exit(1 if pss["percent"] is None or pss["percent"] > max_growth else 0)


if __name__ == "__main__":
    main()
