"""The `onceproof run` job: plans from a seed, each run on a local cluster under faults and checked.

Each run leaves a folder that a person can read: plan.json, history.jsonl,
history.parquet/, verdict.json, logs/ (node and toxiproxy logs) and report.html. Exit
codes say who is at fault: 0 every run valid, 1 anomalies found (Kafka, or the
application config, broke a claim), 2 the harness could not decide (setup failed,
cluster never ready): never mix up the last two. With `--known-issues report`, a run
whose every failing anomaly matches a known upstream issue (checkers/known.py) counts
as passed; its anomalies are shown all the same.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from onceproof.checkers.known import match_text
from onceproof.checkers.verdict import known_issues_only
from onceproof.cluster.cluster import Cluster, effect_text
from onceproof.cluster.external import AnyCluster, ExternalCluster
from onceproof.report.text import client_libraries, txn_protocols
from onceproof.run.backends import on_client
from onceproof.trial import keep_logs, run_trial
from onceproof.workloads import faults
from onceproof.workloads.generate import draw_plans
from onceproof.workloads.plan import libraries, value_size_problem, with_values
from onceproof.workloads.strategies import WORKLOADS, concurrent_plans, plans
from onceproof.workloads.upgrades import release_steps, with_release_change


@dataclass
class JobOptions:
    workload: str = "pipeline"
    faults: str | None = None  # None: mixed, or on a cluster you bring, what it can do
    runs: int = 1
    rounds: int = 24
    time_budget: float | None = None
    seed: int | None = None
    nodes: int = 3
    kafka_version: str | None = None
    spark_master: str | None = None
    out: str = "onceproof-runs"
    mode: str = "concurrent"  # or "rounds"
    duration: int = 120
    rate: float | None = None
    clients_per_node: int = 3
    partitions: int = 6
    interval: float = 10.0
    broker: dict = field(default_factory=dict)  # broker settings on top of the harness's
    external: ExternalCluster | None = None  # a cluster you bring (--bootstrap), connected
    client: str | None = None  # the client library of every plan client (None: librdkafka)
    java_client_version: str | None = None  # the Java client's release (None: the broker's)
    # fail: every violation or stall fails the job; report: a run whose every failing
    # anomaly matches a known issue (checkers/known.py) does not
    known_issues: str = "fail"
    # An upgrade under load (workloads/upgrades.py): every node moved to this release
    # during each run, then these features finalized ({name: level}); and the levels
    # the cluster's storage is formatted with.
    upgrade_to: str | None = None
    finalize: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    # The application's client settings (--producer-config, --consumer-config), under
    # each plan's own.
    producer: dict = field(default_factory=dict)
    consumer: dict = field(default_factory=dict)
    # Every record value's size in bytes (sizes to draw from) and content, in each
    # plan's mix (run/values.py); None: as the plans say.
    value_bytes: list[int] | None = None
    value_content: str | None = None
    # Transactions shaped like an application's (--txn-sends, --txn-pause-ms): the
    # strategies' options mix.txn_sends and mix.txn_pause_ms, each [low, high].
    txn_shape: dict = field(default_factory=dict)

    def release_change(self) -> list[dict]:
        """The upgrade's and finalizations' steps, checked against the starting release."""
        from onceproof.cluster.provision import kafka_version
        from onceproof.errors import SetupError
        steps = release_steps(self.nodes, self.upgrade_to, self.finalize)
        if steps and self.external is not None:
            raise SetupError("--upgrade-to and --finalize change a cluster the harness starts; "
                             "with --bootstrap your cluster runs as it is")
        for step in steps:
            if (why := faults.problem(step)):
                raise SetupError(f"--upgrade-to/--finalize: {why}")
        start = kafka_version(self.kafka_version)
        if (why := faults.release_problem(steps, start, list(range(1, self.nodes + 1)))):
            raise SetupError(f"{why.replace('fault ', 'step ')} (the cluster starts on {start})")
        return steps

    def strategy(self):
        """The plans this job draws; every option is checked here, before anything starts."""
        from onceproof.errors import SetupError
        if self.workload not in WORKLOADS:
            raise SetupError(f"unknown workload {self.workload!r}: use one of {', '.join(WORKLOADS)}")
        kinds = fault_kinds(self.faults or "mixed")
        if self.external is not None:
            for name in kinds:
                if (why := faults.cannot(faults.kind_of(name), self.external)):
                    raise SetupError(f"--faults {name} cannot run on the cluster at "
                                     f"{self.external.bootstrap}: {why}")
        if self.mode == "rounds":
            if self.rounds < 1:
                raise SetupError(f"--rounds must be at least 1, not {self.rounds}")
            return plans(self.workload, faults=kinds, min_rounds=self.rounds,
                         max_rounds=self.rounds, fault_percent=35, nodes=self.nodes,
                         options=dict(self.txn_shape))
        for name, value, low in (("--duration", self.duration, 1), ("--clients-per-node",
                                 self.clients_per_node, 1), ("--partitions", self.partitions, 1)):
            if value < low:
                raise SetupError(f"{name} must be at least {low}, not {value}")
        for name, number in (("--rate", self.rate), ("--interval", self.interval)):
            if number is not None and number <= 0:
                raise SetupError(f"{name} must be a positive number, not {number}")
        pipelines = sum(1 for c in WORKLOADS[self.workload]["clients"].values()
                        if c["role"] == "pipeline")
        copies = -(-self.clients_per_node * self.nodes // len(WORKLOADS[self.workload]["clients"]))
        if pipelines and copies > self.partitions:
            raise SetupError(f"{copies} copies of each pipeline need at least {copies} partitions "
                             f"to share; raise --partitions to {copies} or lower --clients-per-node")
        return concurrent_plans(self.workload, faults=kinds, duration=(self.duration, self.duration),
                                clients_per_node=self.clients_per_node, nodes=self.nodes,
                                partitions=self.partitions, interval=self.interval, rate=self.rate,
                                min_clients=self.clients_per_node * self.nodes,
                                options=dict(self.txn_shape))


def fault_kinds(spec: str) -> tuple[str, ...]:
    """A named set (mixed, net, node, none) or a comma-separated list of fault kinds and
    presets of the registry (workloads/faults.py)."""
    from onceproof.errors import SetupError
    try:
        return faults.selection(spec)
    except faults.UnknownFault as exc:
        raise SetupError(str(exc)) from None


def run_job(opts: JobOptions, console: Console | None = None) -> int:
    from onceproof.errors import SetupError
    from onceproof.report.page import write_report
    console = console or Console()
    from onceproof.cluster.provision import kafka_version
    # Every input is checked before anything slow starts (the cluster; Spark, if a
    # Spark master is named).
    kafka_version(opts.kafka_version)
    if opts.external is not None:
        # Connected first (one line and nothing created when it cannot be), since the
        # plans are drawn for its brokers and the faults its commands can do.
        opts.external.up()
        opts.nodes = opts.external.n
        if opts.faults is None:
            opts.faults = ",".join(k for k in faults.SETS["node"]
                                   if not faults.cannot(k, opts.external)) or "none"
    strategy = opts.strategy()
    opts.release_change()
    if opts.upgrade_to and opts.java_client_version is None:
        # Java clients of the release the cluster moves to: the starting release's
        # (3.x) would speak transaction protocol v1 whatever is finalized.
        opts.java_client_version = opts.upgrade_to
    seed = opts.seed if opts.seed is not None else int(time.time()) % 100000
    todo = [with_release_change(with_values(on_client(plan, opts.client, opts.java_client_version,
                                                      opts.producer, opts.consumer),
                                            opts.value_bytes, opts.value_content),
                                opts.nodes, opts.upgrade_to, opts.finalize)
            for plan in draw_plans(strategy, opts.runs, seed)]
    # A value the topics or the producers cannot take is refused before anything starts.
    for plan in todo:
        if (why := value_size_problem(plan, opts.broker)):
            raise SetupError(f"--value-bytes: {why}")
    root = Path(opts.out) / time.strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    shape = (f"{opts.duration} s, {len(todo[0]['clients'])} clients" if opts.mode == "concurrent"
             else f"{opts.rounds} rounds")
    console.print(f"onceproof: {opts.workload} workload ({opts.mode}: {shape}) on "
                  f"{' and '.join(sorted(libraries(todo[0])))}, faults {opts.faults or 'mixed'}, "
                  f"seed {seed}, results in {root}")
    started = time.monotonic()
    trials = []
    anomalies: Counter = Counter()
    with (opts.external or Cluster(root / "cluster", opts.nodes, opts.kafka_version,
                                   overrides=opts.broker, features=opts.features)) as cluster, Progress(
            TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[status]}"),
            console=console, transient=False) as progress:
        if isinstance(cluster, ExternalCluster):
            console.print(f"cluster ready: Kafka {cluster.version} at {cluster.bootstrap}, "
                          f"{cluster.n} brokers; not injected: "
                          + "; ".join(faults.not_injected(cluster)))
        else:
            console.print(f"cluster ready: Kafka {cluster.version}, {cluster.n} nodes"
                          + (f", broker settings {_settings(cluster.base)}" if cluster.base else ""))
        for i, plan in enumerate(todo):
            if opts.time_budget and time.monotonic() - started > opts.time_budget:
                break
            label = f"run {i + 1}/{len(todo)}"
            task = progress.add_task(label, total=1.0, status="")

            def on_progress(done, total, what, task=task):
                current = ", ".join(map(effect_text, cluster.faults)) or "nothing"
                progress.update(task, completed=done / total if total else 1.0,
                                status=f"{what} | in force: {current} | "
                                       f"anomalies so far: {sum(anomalies.values())}")

            folder = root / f"run-{i + 1}"
            trial = run_trial(plan, cluster, folder, opts.spark_master, on_progress=on_progress)
            progress.update(task, completed=1.0,
                            status=trial.verdict.headline.lower()
                            if trial.verdict.fine or trial.verdict.unknown else
                            "ANOMALIES: " + ", ".join(sorted(trial.verdict.failing))
                            + (f" ({known_issues_only(trial.verdict.known)})"
                               if trial.verdict.known_only else ""))
            anomalies.update({t: n for t, n in trial.verdict.counts.items() if n})
            _finish_folder(trial, cluster)
            write_report(folder)
            trials.append(trial)
    if not trials:
        raise SetupError("the time budget ran out before the first run; raise --time-budget")
    _summary(console, trials, root)
    return exit_code([t.verdict for t in trials], opts.known_issues)


def exit_code(verdicts: list, known_issues: str = "fail") -> int:
    """The job's exit code: 1 when a run's verdict fails (Verdict.fails: under
    `--known-issues report`, only an anomaly no known issue matches), else 2 when a
    run had nothing to judge, else 0."""
    if any(v.fails(known_issues) for v in verdicts):
        return 1
    # A run without evidence decided nothing: the harness could not tell.
    return 2 if any(v.unknown for v in verdicts) else 0


def describe_clients(tested: dict) -> str:
    """The client libraries a run drove, and the transaction protocols the clients that
    report one said they spoke."""
    protocols = tested.get("txn_protocols")
    return (client_libraries(tested.get("clients", {}))
            + (f" (protocol, as the Java client says: {txn_protocols(protocols)})" if protocols else ""))


def _settings(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))


def _finish_folder(trial, cluster: AnyCluster) -> None:
    keep_logs(cluster, trial.folder)


def _outcomes(tables: Path) -> tuple[Counter, Counter]:
    """Completed client ops by outcome, and completed faults by kind, from the ops table
    of a run's history.parquet/."""
    from onceproof.checkers.store import read_table
    from onceproof.history.format import CLUSTER, NEMESIS
    ops = read_table(tables, "ops", ["process", "f", "type", "complete_index"]).to_pandas()
    done = ops[ops["complete_index"].notna() & (ops["f"] != CLUSTER)]
    fault = done["process"] == NEMESIS
    return Counter(done.loc[~fault, "type"]), Counter(done.loc[fault, "f"])


def _summary(console: Console, trials, root: Path) -> None:
    ops: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    for t in trials:
        o, f = _outcomes(t.folder / "history.parquet")
        ops.update(o)
        faults.update(f)
    table = Table("", "", title="Summary", show_header=False)
    table.add_row("runs", str(len(trials)))
    table.add_row("clients", describe_clients(trials[0].verdict.tested))
    table.add_row("operations", ", ".join(f"{n} {k}" for k, n in sorted(ops.items())))
    table.add_row("faults applied", ", ".join(f"{n} {k}" for k, n in sorted(faults.items())) or "none")
    console.print(table)
    known = any(t.verdict.known for t in trials)
    found = Table("anomaly", "count", "severity", "example", *(["known issue"] if known else []),
                  title="Anomalies")
    for t in trials:
        v = t.verdict
        for kind, n in sorted(v.counts.items()):
            if n:
                ex = (v.examples.get(kind) or [{}])[0]
                where = ("op", "process", "topic", "partition", "offset", "value")
                detail = ex.get("detail") or ", ".join(f"{k}={ex[k]}" for k in where
                                                      if ex.get(k) is not None)
                matched = "; ".join(match_text(m) for m in v.known if m["type"] == kind)
                found.add_row(kind, str(n), v.severity(kind),
                              f"{t.folder.name}: {detail}", *([matched] if known else []))
    if found.row_count:
        console.print(found)
    valid, live = all(t.verdict.valid for t in trials), all(t.verdict.live for t in trials)
    headline = ("VALID" if valid else "ANOMALIES FOUND") + ("" if live else ", NOT LIVE")
    failed = [t for t in trials if t.verdict.failing]
    if failed and all(t.verdict.known_only for t in failed):
        # Shown whatever --known-issues says; that option changes only the exit code.
        headline += f" ({known_issues_only([m for t in failed for m in t.verdict.known])})"
    unknown = [t for t in trials if t.verdict.unknown]
    if unknown and valid:
        # A run with nothing to judge decided nothing (checkers/verdict.py, missing_evidence).
        headline = ("UNKNOWN" if len(unknown) == len(trials)
                    else f"{headline}, {len(unknown)} of {len(trials)} runs UNKNOWN")
    tested = trials[0].verdict.tested
    if tested.get("external"):
        from onceproof.checkers.verdict import describe_tested
        injected = sum(t.verdict.tested.get("faults_injected", 0) for t in trials)
        console.print(describe_tested({**tested, "faults_injected": injected}))
        if not injected:
            headline += " (fault-free: no fault was injected)"
    console.print(f"[bold]{headline}[/bold]: "
                  f"reports: " + ", ".join(str(t.folder / 'report.html') for t in trials))
