"""What the concurrent workload mode does on a real 3-node cluster under faults.

For one concurrent plan (one with a `duration`): throughput, latency per role, how many
faults land on requests in flight, the harness's own CPU and memory, what recording the
history costs, and how long the check takes. Prints figures and writes them to
OUT/load_bench.json; asserts nothing.

    python bench/load_bench.py [--duration 60] [--workload pipeline] [--faults mixed]
                               [--rate OPS] [--no-null-recorder] [--no-check] [--spark]
                               [--kafka-toxic-pairs N] [--value-bytes N[,N...]]

One plan is drawn from --seed and run with its history recorded, then (unless
--no-null-recorder) run again on the same cluster with a recorder that writes nothing:
the ratio of their client throughputs is what recording costs. Under faults the two
runs also differ by what each fault happened to hit (a partition can stall every client
for seconds), so for the recording cost alone use --faults none. The system under test
is nondeterministic: compare several invocations, not one.

--value-bytes 100,1024,16384 measures the plan's writes at each record value size
instead (run/values.py; compressible values unless --value-content random): for each
client library and each size, the harness's client ops/s, records/s and MB/s of values,
then a bare client on the same cluster writing the same number of records of that size
to a topic of the same partitions, with the plan's producer settings and no harness:
for librdkafka a plain confluent-kafka producer loop (bench/bare_producer.py, one
process, every send in flight) and, apart, the same producer in the harness's op shape
(as many processes as the plan has producers, each send of 1-3 records awaited before
the next); for the Java client Kafka's own kafka-producer-perf-test (ProducerPerformance,
one JVM, with the agent's JVM options). It prints the ratios harness / bare of the
records/s, and writes the figures to OUT/value_sizes.json. Use --workload producers
--faults none to compare writes alone.

--kafka-toxic-pairs N then runs the plan N more times in pairs, A B A B: without a toxic,
then with the kafka toxic (the request faults' toxic, harness/cluster/kafkatoxic) on
every link of the cluster, reading every request's framing and matching none. The ratio
of their client ops/s (medians over the pairs) is what the toxic costs a request.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import click
import numpy as np
import pandas as pd
import psutil
from rich.console import Console
from rich.table import Table

from onceproof.checkers import check
from onceproof.checkers.store import convert, read_manifest, read_table
from onceproof.cluster.cluster import Cluster
from onceproof.history.format import NEMESIS
from onceproof.history.writer import HistoryWriter
from onceproof.run.backends import BACKENDS
from onceproof.run.clients import producer_settings
from onceproof.run.execute import run
from onceproof.run.fleet import CRASHED, ERROR, HUNG
from onceproof.trial import exercised
from onceproof.workloads import faults
from onceproof.workloads.generate import draw_plans
from onceproof.workloads.ops import PRODUCER
from onceproof.workloads.plan import (
    VALUE_CONTENTS,
    PlanError,
    on_client,
    save,
    value_sizes_problem,
    with_values,
)
from onceproof.workloads.strategies import WORKLOADS, concurrent_plans

FINAL = "final"  # the process of the harness's final reads (run/execute.py)
MIB = 2**20
WARMUP = 10  # seconds


def is_client(process: str, final: bool = False) -> bool:
    """An op of a plan client, not of the nemesis or of the final reads."""
    return process not in (NEMESIS, FINAL) and not final


def harness_processes(proc: psutil.Process) -> list[psutil.Process]:
    """`proc` and the client processes under it: the fork server and the client
    processes of run/host.py, multiprocessing's resource tracker, and the Java client's
    JVMs (run/jvm.py); not the cluster's JVMs and toxiproxy, which are its children too."""
    found = [proc]
    for child in proc.children(recursive=True):
        try:
            if child.name().startswith(("python", "onceproof")) or "OnceproofAgent" in child.cmdline():
                found.append(child)
        except psutil.Error:
            pass
    return found


class Usage:
    """The harness's CPU time and memory while a run goes, sampled every second over its
    processes (harness_processes): a load generator whose memory grows with the run
    cannot run long. Memory is their PSS together (the forked processes' common pages
    counted once). The CPU of a client process is its last sample's, so a process that
    ended loses at most its last second."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.pss: list[int] = []
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()

    def _take(self) -> None:
        pss = 0
        for p in harness_processes(self.proc):
            try:
                t = p.cpu_times()
                self._cpu[p.pid] = t.user + t.system
                pss += p.memory_full_info().pss
            except psutil.Error:  # it ended meanwhile
                pass
        self.pss.append(pss)

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self._take()

    def __enter__(self) -> Usage:
        self.started = time.monotonic()
        self._take()
        self.cpu0 = sum(self._cpu.values())
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._take()
        self.seconds = time.monotonic() - self.started
        self.cpu = sum(self._cpu.values()) - self.cpu0

    def figures(self) -> dict:
        return {"wall_seconds": round(self.seconds, 1),
                "cpu_percent": round(100 * self.cpu / self.seconds, 1),
                "pss_min_mib": round(min(self.pss) / MIB, 1),
                "pss_max_mib": round(max(self.pss) / MIB, 1), "pss_samples": len(self.pss)}


class NullRecorder(HistoryWriter):
    """A HistoryWriter that writes nothing: it hands out op ids as the writer does, and
    counts the client ops completed and the span from the first client invoke to the
    last client completion, the same measure as the recorded run's, so only the
    writing differs."""

    def __init__(self) -> None:
        self.completed = 0
        self.first: int | None = None
        self.last: int | None = None
        super().__init__(os.devnull)

    def _open(self) -> None:
        self._file = None

    def _emit(self, op: int, type: str, meta: dict, value: dict | None,
              error: str | None) -> None:
        if not is_client(meta["process"], meta["final"]):
            return
        if type == "invoke":
            self.first = self.first or time.monotonic_ns()
        else:
            self.completed += 1
            self.last = time.monotonic_ns()

    def figures(self) -> dict:
        seconds = (self.last - self.first) / 1e9 if self.first and self.last else 0.0
        return {"workload_seconds": round(seconds, 1), "client_ops_completed": self.completed,
                "client_ops_per_s": round(self.completed / seconds, 1) if seconds else None}


def history_figures(plan: dict, folder: Path) -> tuple[dict, pd.DataFrame]:
    """Throughput, fault timing and latency per role and op kind, from a recorded run."""
    started = time.perf_counter()
    tables = convert(folder / "history.jsonl", folder / "history.parquet")
    converted = time.perf_counter() - started
    ops = read_table(tables, "ops", ["process", "f", "type", "final", "invoke_time",
                                     "complete_time"]).to_pandas()
    final = ops["final"].fillna(False).astype(bool)
    clients = ops[[is_client(p, f) for p, f in zip(ops["process"], final)]]
    begin, end = clients["invoke_time"].min(), clients["complete_time"].max()
    seconds = (end - begin) / 1e9
    done = clients[clients["complete_time"].notna()].copy()
    seen = exercised(tables)
    nemesis = ops[ops["process"] == NEMESIS]
    # The settle's heal-all comes after the last client op; only the schedule's faults count.
    fired = nemesis[nemesis["f"].isin(faults.FAULTS) & (nemesis["invoke_time"] <= end)]
    # An op that never completed (a hung process's) is in flight to the end.
    lo = clients["invoke_time"].to_numpy(dtype=float)
    hi = clients["complete_time"].to_numpy(dtype=float, na_value=np.inf)
    landed = sum(bool(((lo <= t) & (t <= hi)).any()) for t in fired["invoke_time"])
    replaced = nemesis["f"].value_counts()
    history = folder / "history.jsonl"
    figures = {
        "workload_seconds": round(seconds, 1),
        "client_ops_completed": len(done),
        "client_ops_ok": int((done["type"] == "ok").sum()),
        "client_ops_per_s": round(len(done) / seconds, 1),
        "records_written": seen["acknowledged_writes"],
        "records_written_per_s": round(seen["acknowledged_writes"] / seconds, 1),
        "records_read": seen["records_read"],
        "client_processes": int(clients["process"].nunique()),
        "processes_replaced": {k: int(replaced.get(k, 0)) for k in (CRASHED, ERROR, HUNG)},
        "faults": len(fired),
        "faults_with_ops_in_flight": landed,
        "history_mib": round(history.stat().st_size / MIB, 1),
        "history_events": read_manifest(tables)["stats"]["events"],
        "convert_seconds": round(converted, 1),
    }
    # A process is its client's id, then a replacement's .N and a thread's ~N.
    done["role"] = [plan["clients"][re.sub(r"(\.\d+)?(~\d+)?$", "", p)]["role"]
                    for p in done["process"]]
    done["ms"] = (done["complete_time"] - done["invoke_time"]) / 1e6
    by = done.groupby(["role", "f"])["ms"]
    latency = by.quantile([0.5, 0.9, 0.99]).unstack().set_axis(["p50", "p90", "p99"], axis=1)
    latency["max"], latency["n"] = by.max(), by.size()
    return figures, latency.reset_index()


def timed_check(tables: Path, spark: bool) -> dict:
    started = time.perf_counter()
    verdict = check(tables, spark_master=None, local=False if spark else None)
    return {"check_seconds": round(time.perf_counter() - started, 1), "valid": verdict.valid,
            "anomalies": verdict.counts, "engine": verdict.stats.get("engine"),
            "pyspark_imported": "pyspark" in sys.modules}


def report(console: Console, out: dict, latency: pd.DataFrame) -> None:
    table = Table("figure", "value", title="Concurrent load", show_header=False)
    rec, null = out["recorded"], out.get("null_recorder")
    rows = [
        ("plan", f"{out['workload']}, {out['clients']} clients, {out['duration']} s, "
                 f"rate {out['rate'] or 'unthrottled'}, faults {out['faults']}, seed {out['seed']}, "
                 f"clients on {out['client']}"),
        ("workload seconds", rec["workload_seconds"]),
        ("client ops completed (ok)", f"{rec['client_ops_completed']} ({rec['client_ops_ok']})"),
        ("client ops/s", rec["client_ops_per_s"]),
        ("records written, /s", f"{rec['records_written']}, {rec['records_written_per_s']}"),
        ("records read", rec["records_read"]),
        ("client processes", rec["client_processes"]),
        ("processes replaced", ", ".join(f"{k} {n}" for k, n in rec["processes_replaced"].items())),
        ("faults with client ops in flight", f"{rec['faults_with_ops_in_flight']} of {rec['faults']}"),
        ("history", f"{rec['history_mib']} MiB, {rec['history_events']} events, "
                    f"converted in {rec['convert_seconds']} s"),
        ("harness CPU (its processes)", f"{rec['cpu_percent']}% of one core over "
                                        f"{rec['wall_seconds']} s, {rec['cpu_ms_per_op']} ms per op"),
        ("harness PSS min / max", f"{rec['pss_min_mib']} / {rec['pss_max_mib']} MiB "
                                  f"({rec['pss_samples']} samples)"),
    ]
    if null:
        rows += [("null recorder: ops/s, CPU", f"{null['client_ops_per_s']}, {null['cpu_percent']}%"),
                 ("ops/s recording / null", out["recording_ratio"])]
    if "check" in out:
        c = out["check"]
        rows += [("check", f"{c['check_seconds']} s on {c['engine']}, "
                           f"{'VALID' if c['valid'] else 'INVALID'}, pyspark imported: "
                           f"{'yes' if c['pyspark_imported'] else 'no'}"),
                 ("anomalies", ", ".join(f"{t} {n}" for t, n in c["anomalies"].items()) or "none")]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    lat = Table("role", "op", "n", "p50 ms", "p90 ms", "p99 ms", "max ms", title="Latency")
    for r in latency.itertuples():
        lat.add_row(r.role, r.f, str(r.n), *(f"{x:.1f}" for x in (r.p50, r.p90, r.p99, r.max)))
    console.print(lat)


def fault_kinds(ctx, param, spec: str) -> tuple[str, ...]:
    try:
        return faults.selection(spec)
    except faults.UnknownFault as exc:
        raise click.BadParameter(str(exc)) from None


def parse_value_sizes(ctx, param, spec: str | None) -> list[int] | None:
    if spec is None:
        return None
    try:
        sizes = [int(x) for x in spec.split(",")]
    except ValueError:
        raise click.BadParameter(f"sizes in bytes separated by commas, not {spec!r}") from None
    if (problem := value_sizes_problem(sizes)):
        raise click.BadParameter(problem)
    return sizes


@click.command(help=__doc__.splitlines()[0])
@click.option("--duration", type=click.IntRange(1), default=60, show_default=True, help="seconds")
@click.option("--workload", type=click.Choice(list(WORKLOADS)), default="pipeline", show_default=True)
@click.option("--faults", "kinds", default="mixed", show_default=True, callback=fault_kinds,
              help="mixed, net, node, none or a list of kinds and presets")
@click.option("--clients-per-node", type=click.IntRange(1), default=3, show_default=True)
@click.option("--partitions", type=click.IntRange(1), default=6, show_default=True)
@click.option("--rate", type=click.FloatRange(0, min_open=True), default=None,
              help="ops per second over all clients [default: unthrottled]")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--null-recorder/--no-null-recorder", default=True, show_default=True,
              help="run the plan again recording nothing, for the recording overhead")
@click.option("--check/--no-check", "do_check", default=True, show_default=True)
@click.option("--spark", is_flag=True, help="check on Spark whatever the history's size")
@click.option("--client", "libraries", multiple=True, default=("librdkafka",), show_default=True,
              type=click.Choice(list(BACKENDS)),
              help="client library of every plan client; repeat it to run the same plan on "
                   "each, one after the other on the same cluster, and compare")
@click.option("--kafka-toxic-pairs", "toxic_pairs", type=click.IntRange(0), default=0,
              show_default=True,
              help="then run the plan N times without and N times with the kafka toxic on "
                   "every link, matching nothing, alternating, and print both ops/s")
@click.option("--value-bytes", "value_sizes", default=None, callback=parse_value_sizes,
              metavar="N[,N...]",
              help="measure the plan's writes at each of these record value sizes instead, "
                   "beside a bare client writing as many records of that size")
@click.option("--value-content", type=click.Choice(VALUE_CONTENTS), default="compressible",
              show_default=True, help="what fills the values of --value-bytes")
@click.option("--max-records", type=click.IntRange(1), default=None,
              help="most records per send op (the plan's mix.max_records) [default: 3]")
@click.option("--threads", type=click.IntRange(1, 16), default=None,
              help="threads of each producer client, each with a send in flight "
                   "(a client's `threads`) [default: 1]")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("load-bench"), show_default=True)
def main(duration, workload, kinds, clients_per_node, partitions, rate, seed,
         null_recorder, do_check, spark, libraries, toxic_pairs, value_sizes, value_content,
         max_records, threads, out) -> None:
    console = Console()
    nodes = 3
    try:
        plan = draw_plans(concurrent_plans(
            workload, faults=kinds, duration=(duration, duration),
            clients_per_node=clients_per_node, partitions=partitions, rate=rate,
            min_clients=clients_per_node * nodes,
            options={"max_records": max_records} if max_records else None), 1, seed)[0]
    except PlanError as exc:
        raise click.UsageError(str(exc)) from None
    if threads:
        for spec in plan["clients"].values():
            if spec["role"] == PRODUCER:
                spec["threads"] = threads
    out.mkdir(parents=True, exist_ok=True)
    save(plan, out / "plan.json")
    base: dict = {"workload": workload, "faults": ",".join(kinds) or "none", "seed": seed, "rate": rate,
                  "duration": duration, "clients": len(plan["clients"]),
                  "schedule": len(plan["schedule"]), "max_records": max_records or 3,
                  "threads": threads or 1}
    results = {}
    # The cluster's data is not a figure; it stays out of OUT.
    with tempfile.TemporaryDirectory(prefix="onceproof-bench-") as root, \
            Cluster(root, nodes) as cluster:
        console.print(f"cluster ready: Kafka {cluster.dist.version}; running {len(plan['clients'])} "
                      f"clients for {duration} s, {len(plan['schedule'])} scheduled events, "
                      f"after a {WARMUP} s warm-up, on {', '.join(libraries)}")
        if value_sizes:
            sized = {library: measure_sizes(console, plan, library, value_sizes, value_content,
                                            cluster, out / library)
                     for library in libraries}
            figures = {**base, "value_content": value_content, "by_client": sized}
            (out / "value_sizes.json").write_text(json.dumps(figures, indent=1, default=int))
            Console(width=max(150, console.width)).print(sizes_table(figures))
            console.print(f"figures in {out / 'value_sizes.json'}")
            return
        for library in libraries:
            mine = out / library if len(libraries) > 1 else out
            results[library] = measure(on_client(plan, library), cluster, mine, null_recorder)
        if toxic_pairs:
            toxic_cost(console, on_client(plan, libraries[0]), cluster, out / "kafka-toxic",
                       toxic_pairs)
    for library, (figures, latency) in results.items():
        mine = out / library if len(libraries) > 1 else out
        figures = {**base, "client": library, **figures}
        if do_check:
            figures["check"] = timed_check(mine / "recorded" / "history.parquet", spark)
        figures["latency_ms"] = latency.round(1).to_dict("records")
        (mine / "load_bench.json").write_text(json.dumps(figures, indent=1, default=int))
        report(console, figures, latency)
        console.print(f"figures in {mine / 'load_bench.json'}")
    if len(libraries) > 1:
        side = Table("client", "client ops/s", "harness CPU, % of a core", "harness CPU ms per op",
                     "harness PSS max MiB", title="Side by side: the same plan on each client")
        for library, (figures, _) in results.items():
            rec = figures["recorded"]
            side.add_row(library, str(rec["client_ops_per_s"]), str(rec["cpu_percent"]),
                         str(rec["cpu_ms_per_op"]), str(rec["pss_max_mib"]))
        console.print(side)


def measure_sizes(console: Console, plan: dict, library: str, sizes: list[int], content: str,
                  cluster, out: Path) -> list[dict]:
    """The plan's figures on one client library at each value size, each beside a bare
    client's writing as many records of that size (module docstring)."""
    plan = on_client(plan, library)
    run({**plan, "duration": WARMUP, "schedule": []}, cluster, out / "warmup",
        on_progress=None, writer=NullRecorder())
    rows = []
    for size in sizes:
        sized = with_values(plan, [size], content)
        folder = out / str(size)
        with Usage() as usage:
            run(sized, cluster, folder, on_progress=None, writer=None)
        figures, _ = history_figures(sized, folder)
        row = {"size": size, "client_ops_per_s": figures["client_ops_per_s"],
               "records": figures["records_written"],
               "records_per_s": figures["records_written_per_s"],
               "mb_per_s": round(figures["records_written_per_s"] * size / 1e6, 2),
               "harness_cpu_percent": usage.figures()["cpu_percent"], "bare": {}}
        n = max(1, row["records"])
        bare = bare_runs(plan, library, cluster, size, n)
        for name, got in bare.items():
            rate = got["records"] / got["seconds"] if got["seconds"] else None
            row["bare"][name] = {**got, "records_per_s": round(rate, 1) if rate else None,
                                 "mb_per_s": round(rate * size / 1e6, 2) if rate else None,
                                 "ratio": round(row["records_per_s"] / rate, 3) if rate else None}
        console.print(f"{library}, {size} B: harness {row['records_per_s']} records/s; bare "
                      + ", ".join(f"{k} {v['records_per_s']}" for k, v in row["bare"].items()))
        rows.append(row)
    return rows


def _bare_topic(plan: dict, cluster) -> tuple[str, int]:
    """A fresh topic for a bare client, with the partitions and replicas of the plan's
    first topic."""
    from confluent_kafka.admin import NewTopic
    spec = next(iter(plan["topics"].values()))
    name, parts = f"bare-{uuid.uuid4().hex[:8]}", spec.get("partitions", 1)
    admin = cluster.admin()
    admin.create_topics([NewTopic(name, parts, spec.get("replicas") or min(3, cluster.n))]
                        )[name].result(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        if meta and len(meta.partitions) == parts and all(
                p.leader >= 0 for p in meta.partitions.values()):
            break
        time.sleep(0.25)
    return name, parts


def bare_runs(plan: dict, library: str, cluster, size: int, records: int) -> dict:
    """{name: {"records", "seconds"}} of the bare clients of `library` writing `records`
    records of `size` bytes."""
    writer = next((spec for spec in plan["clients"].values() if spec["role"] == PRODUCER),
                  {"role": PRODUCER})
    settings = producer_settings(plan, writer)
    if library == "java":
        return {"perf-test": _java_perf_test(plan, cluster, settings, size, records)}
    # A producer's sends in flight: one per thread (its lanes share one producer in the
    # harness; here each is a process of its own).
    lanes = sum(spec.get("threads", 1) for spec in plan["clients"].values()
                if spec["role"] == PRODUCER) or 1
    return {"async loop": _bare_librdkafka(plan, cluster, settings, size, records, "async", 1),
            f"op shape, {lanes} senders": _bare_librdkafka(plan, cluster, settings, size,
                                                           records, "ops", lanes)}


def _bare_librdkafka(plan: dict, cluster, settings: dict, size: int, records: int,
                     shape: str, processes: int) -> dict:
    topic, parts = _bare_topic(plan, cluster)
    script = Path(__file__).with_name("bare_producer.py")
    shares = [records // processes + (i < records % processes) for i in range(processes)]
    procs = []
    for i, share in enumerate(shares):
        spec = {"connection": cluster.connection(), "topic": topic, "partitions": parts,
                "settings": {**settings, "log_level": 0}, "records": share, "size": size,
                "shape": shape, "max_records": plan.get("mix", {}).get("max_records", 3),
                "seed": i}
        procs.append(subprocess.Popen([sys.executable, str(script), json.dumps(spec)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:  # every one connected: all start together
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    done = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    return {"records": sum(d["records"] for d in done), "failed": sum(d["failed"] for d in done),
            "seconds": round(max(d["end"] for d in done) - min(d["start"] for d in done), 3)}


def _java_perf_test(plan: dict, cluster, settings: dict, size: int, records: int) -> dict:
    """Kafka's kafka-producer-perf-test on the Java client of the cluster's release, with
    the plan's producer settings under the Java client's names and the agent's JVM
    options; its first tenth of the records (at most 1,000) a warm-up it leaves out."""
    from onceproof.cluster.provision import ensure_kafka_tools
    from onceproof.run.jvm import JVM_OPTIONS, java_config
    topic, _ = _bare_topic(plan, cluster)
    warmup = min(1000, records // 10)
    tools = ensure_kafka_tools(cluster.version)
    props = {**java_config(settings), **{k: str(v) for k, v in cluster.connection().items()}}
    cmd = ["java", *JVM_OPTIONS, "-cp", tools.classpath, "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records + warmup), "--record-size", str(size),
           "--throughput", "-1", "--reporting-interval", "600000",
           *(["--warmup-records", str(warmup)] if warmup else []),
           "--command-property", *(f"{k}={v}" for k, v in props.items())]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    # "N records sent, X records/sec (Y MB/sec), ..." overall, then, after a warm-up,
    # the same for the steady state alone: the last such line.
    said = [line for line in out.stdout.splitlines() if "records/sec" in line and "records sent" in line]
    if not said:
        raise click.ClickException(f"kafka-producer-perf-test said nothing usable: "
                                   f"{(out.stdout + out.stderr)[-500:]}")
    m = re.search(r"(\d+) (?:steady state )?records sent, ([\d.]+) records/sec", said[-1])
    assert m, said[-1]
    sent, rate = int(m.group(1)), float(m.group(2))
    return {"records": sent, "failed": 0, "seconds": round(sent / rate, 3) if rate else 0.0,
            "said": said[-1].strip()}


def sizes_table(figures: dict) -> Table:
    table = Table("client", "value", "client ops/s", "records/s", "MB/s", "bare client",
                  "bare records/s", "bare MB/s", "harness / bare",
                  title=f"Record value sizes ({figures['workload']}, faults {figures['faults']}, "
                        f"{figures['value_content']} values, {figures['duration']} s a size, "
                        f"sends of 1-{figures['max_records']} records, {figures['threads']} "
                        f"thread(s) a producer)")
    for library, rows in figures["by_client"].items():
        for row in rows:
            for i, (name, bare) in enumerate(row["bare"].items()):
                table.add_row(*((library, f"{row['size']} B", str(row["client_ops_per_s"]),
                                 str(row["records_per_s"]), str(row["mb_per_s"])) if i == 0
                                else ("", "", "", "", "")),
                              name, str(bare["records_per_s"]), str(bare["mb_per_s"]),
                              str(bare["ratio"]))
    return table


def toxic_cost(console: Console, plan: dict, cluster, out: Path, pairs: int) -> None:
    """Client ops/s without and with the kafka toxic on every link, in pairs."""
    rates: dict[str, list[float]] = {"none": [], "kafka toxic": []}
    for i in range(pairs):
        for name in rates:
            if name != "none":
                # A run's settle heals every toxic, so each run that measures it puts it on.
                cluster.request_fault(cluster.links(), {"action": "observe", "api": []})
            folder = out / f"{i}-{name.replace(' ', '-')}"
            run(plan, cluster, folder, on_progress=None, writer=None)
            rates[name].append(history_figures(plan, folder)[0]["client_ops_per_s"])
    table = Table("toxic", *(f"run {i + 1}" for i in range(pairs)), "median ops/s",
                  title="The kafka toxic's cost: client ops/s without it and with it on every link")
    for name, xs in rates.items():
        table.add_row(name, *(f"{x:.0f}" for x in xs), f"{np.median(xs):.0f}")
    console.print(table)
    ratio = np.median(rates["kafka toxic"]) / np.median(rates["none"])
    console.print(f"with / without: {ratio:.3f}")
    (out / "kafka_toxic.json").write_text(json.dumps({"ops_per_s": rates, "ratio": ratio}, indent=1))


def measure(plan: dict, cluster, out: Path, null_recorder: bool) -> tuple[dict, pd.DataFrame]:
    """One plan's figures on the cluster: its recorded run (after a warm-up) and, unless
    told not to, the same plan with the null recorder."""
    # A fresh cluster spends its first seconds creating its internal topics
    # (__transaction_state, __consumer_offsets) at a fifth of the later throughput;
    # that is start-up, not load, and would count against whichever run goes first.
    run({**plan, "duration": WARMUP, "schedule": []}, cluster, out / "warmup",
        on_progress=None, writer=NullRecorder())
    with Usage() as usage:
        run(plan, cluster, out / "recorded", on_progress=None, writer=None)
    figures: dict = {}
    if null_recorder:
        recorder = NullRecorder()
        with Usage() as null_usage:
            run(plan, cluster, out / "null", on_progress=None, writer=recorder)
    recorded, latency = history_figures(plan, out / "recorded")
    used = usage.figures()
    ops = recorded["client_ops_completed"]
    used["cpu_ms_per_op"] = round(used["cpu_percent"] * 10 * used["wall_seconds"] / ops, 2) if ops else None
    figures["recorded"] = {**recorded, **used}
    if null_recorder:
        figures["null_recorder"] = {**recorder.figures(), **null_usage.figures()}
        null_rate = figures["null_recorder"]["client_ops_per_s"]
        figures["recording_ratio"] = round(recorded["client_ops_per_s"] / null_rate, 3) \
            if null_rate else None
    return figures, latency


if __name__ == "__main__":
    main()
