"""The `onceproof` command: one subcommand per stage of plan -> run -> history -> check.

Every subcommand turns the harness's own failures (SetupError) into one line on stderr and
exit code 2, so "Kafka is broken" (exit 1) is never confused with "the harness is broken".
"""
from __future__ import annotations

import sys

import click

from onceproof.errors import SetupError


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    # One line per warning, as for errors: what happened, not the source line that
    # called warnings.warn (Python's default shows both, on two lines).
    click.echo(f"onceproof: warning: {message}", err=True)


class _Group(click.Group):
    def invoke(self, ctx):
        import warnings

        from onceproof.memory import for_running
        from onceproof.workloads.plan import PlanError
        warnings.showwarning = _warning_line
        for_running()  # before any thread: arenas made earlier stay (harness/memory.py)
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            # Click's own ways out (--help, a usage error, Ctrl-C at a prompt): click
            # prints them and picks the exit code; they are no failure of the harness.
            raise
        except (SetupError, PlanError) as exc:
            click.echo(f"onceproof: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("onceproof: interrupted; the cluster was stopped and what was recorded "
                       "so far is in the output folder", err=True)
            sys.exit(130)
        except Exception as exc:  # a bug of ours must still read as "could not decide"
            import tempfile
            import traceback
            with tempfile.NamedTemporaryFile("w", prefix="onceproof-crash-", suffix=".txt",
                                             delete=False) as f:
                traceback.print_exc(file=f)
            click.echo(f"onceproof: internal error ({type(exc).__name__}: {exc}); the "
                       f"traceback is in {f.name}; please report it", err=True)
            sys.exit(2)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import confluent_kafka

    from onceproof import __version__
    from onceproof.cluster.provision import DEFAULT_KAFKA_VERSION
    click.echo(f"onceproof {__version__}\n"
               f"Kafka {DEFAULT_KAFKA_VERSION} (default release)\n"
               f"librdkafka {confluent_kafka.libversion()[0]} (confluent-kafka "
               f"{confluent_kafka.version()})")
    ctx.exit()


# Where the docs are (in the repository, not in the wheel); README.md's "Docs" section is
# the index. \b keeps click from rewrapping the lines (it would split a path at a hyphen).
DOCS_EPILOG = """\b
Docs (the index is README.md's "Docs" section):
  docs/plans.md, docs/history.md, docs/checkers.md, docs/writing-properties.md,
  docs/suites.md, docs/your-cluster.md, docs/nightly.md, docs/performance.md,
  docs/findings.md, docs/known-issues.md, docs/architecture.md, docs/protocol.md"""


@click.group(cls=_Group, epilog=DOCS_EPILOG)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="Show onceproof's version, the default Kafka release and librdkafka's version.")
def main() -> None:
    """Evidence, not marketing, for Kafka's exactly-once claims."""


def _default_cluster_dir() -> str:
    from onceproof.cluster.provision import cache_dir
    return str(cache_dir() / "clusters" / "default")


kafka_version_option = click.option(
    "--kafka-version", envvar="ONCEPROOF_KAFKA_VERSION", default=None,
    help="Kafka release from Maven Central, any KRaft release from 3.3.0 (default: the "
         "release `onceproof --version` names).")


def client_options(f):
    """--client and --java-client-version: which client library the plan clients run on."""
    f = click.option("--java-client-version", default=None,
                     help="The Java client's release (kafka-clients from Maven Central; default: "
                          "the release of the cluster under test; with run --upgrade-to, the "
                          "release it names).")(f)
    return click.option("--client", default=None, cls=_BackendsHelp)(f)


class _BackendsHelp(click.Option):
    """--client's help, from the backend registry (run/backends.py), which loads the run
    stage: only when help is shown, not on every command's start."""

    def get_help_record(self, ctx: click.Context):
        from onceproof.run.backends import client_help, side_by_side_help
        self.help = side_by_side_help() if self.multiple else client_help()
        return super().get_help_record(ctx)


side_by_side_option = click.option("--client", "clients", multiple=True, cls=_BackendsHelp)
cluster_dir_option = click.option(
    "--dir", "root", default=_default_cluster_dir, show_default="~/.cache/onceproof/clusters/default",
    help="Where the cluster keeps its data, logs and state.")


def _broker_settings(pairs: tuple[str, ...], file: str | None) -> dict[str, str]:
    from onceproof.workloads.settings import SettingsError, parse
    try:
        return parse(pairs, file)
    except SettingsError as exc:
        raise SetupError(str(exc)) from None


def broker_config_options(f):
    """--broker-config KEY=VALUE (repeatable) and --broker-config-file PATH."""
    f = click.option("--broker-config-file", type=click.Path(), default=None,
                     help="A server.properties of your own: its broker settings apply on top "
                          "of the harness's (drop listeners, node ids, quorum voters and "
                          "log dirs: the harness owns them).")(f)
    return click.option("--broker-config", "broker_pairs", multiple=True, metavar="KEY=VALUE",
                        help="A broker setting for every node (repeatable; wins over "
                             "--broker-config-file).")(f)


def application_options(f):
    """--producer-config and --consumer-config (KEY=VALUE, repeatable) and their files:
    the application's own client settings, for a cluster the harness starts as for
    yours. The command gets them as `app`, {"producer": {...}, "consumer": {...}},
    checked (an unknown setting is refused later, once the client library is known:
    _refuse_unknown)."""
    import functools

    @functools.wraps(f)
    def wrapped(*args, producer_pairs, producer_config_file, consumer_pairs,
                consumer_config_file, **kwargs):
        from onceproof.workloads.settings import SettingsError, parse_application
        try:
            app = {"producer": parse_application("producer", producer_pairs, producer_config_file),
                   "consumer": parse_application("consumer", consumer_pairs, consumer_config_file)}
        except SettingsError as exc:
            raise SetupError(str(exc)) from None
        return f(*args, app=app, **kwargs)

    for kind, example in (("consumer", "max.poll.interval.ms=60000"),
                          ("producer", "linger.ms=50")):
        wrapped = click.option(f"--{kind}-config-file", type=click.Path(), default=None,
                               help=f"A properties file of {kind} settings for every plan "
                                    f"client (--{kind}-config wins over it).")(wrapped)
        wrapped = click.option(f"--{kind}-config", f"{kind}_pairs", multiple=True,
                               metavar="KEY=VALUE",
                               help=f"A {kind} setting of your application's, e.g. {example}, "
                                    "in librdkafka's names (a Java client gets Java's), for "
                                    "every plan client (repeatable); a plan's own settings win. "
                                    "The history's cluster op and the report list the "
                                    "settings in force.")(wrapped)
    return wrapped


def _refuse_unknown(app: dict, libraries, java_release: str | None = None) -> None:
    """Refuse, in one line and before anything starts, an application setting that a
    client library the run uses knows under no name. The Java client is asked only when
    its release is known (`java_release`): on a cluster you bring, its release is the
    cluster's, and the run refuses it before its clients start."""
    from onceproof.run.backends import BACKENDS, unknown_application_settings, unknown_text
    if not app["producer"] and not app["consumer"]:
        return
    for library in sorted(set(libraries)):
        if (prepared := BACKENDS[library].early(java_release)) is None:
            continue
        for kind in ("producer", "consumer"):
            unknown = unknown_application_settings(
                app[kind] if kind == "producer" else {}, app[kind] if kind == "consumer" else {},
                library, prepared)
            if unknown:
                raise SetupError(f"--{kind}-config: {unknown_text(library, prepared, unknown)}")


def _java_release(java_client_version: str | None, kafka_version: str | None,
                  external) -> str | None:
    """The Java client's release a run uses, when known before the cluster starts."""
    if java_client_version:
        return java_client_version
    if external is not None:
        return None
    from onceproof.cluster.provision import kafka_version as release
    return release(kafka_version)


def value_options(f):
    """--value-bytes and --value-content: the size and content of every record value
    (a plan's mix.value_bytes and mix.value_content, run/values.py). The command gets
    them as `values`, {"value_bytes": [sizes] or None, "value_content": name or None},
    checked here in one line each."""
    import functools

    @functools.wraps(f)
    def wrapped(*args, value_bytes, value_content, **kwargs):
        return f(*args, values=_values(value_bytes, value_content), **kwargs)

    wrapped = click.option(
        "--value-content", default=None, metavar="compressible|random",
        help="What fills each value after its identity: compressible (the default, as most "
             "application data is: compression.type then compresses it) or random.")(wrapped)
    return click.option(
        "--value-bytes", default=None, metavar="N[,N...]",
        help="Each record value's size in bytes, from 32 to 1048576 (1 MiB), or sizes to "
             "draw each record's from, e.g. 100,1024,16384 (default: the record's identity "
             "alone, a few bytes). A record read back is verified byte for byte "
             "(corrupt_value).")(wrapped)


def transaction_options(f):
    """--txn-sends and --txn-pause-ms: transactions shaped like an application's (a
    plan's mix.txn_sends and mix.txn_pause_ms, docs/plans.md). The command gets them as
    `txn_shape`, {name: [low, high]} for those given, checked here in one line each."""
    import functools

    @functools.wraps(f)
    def wrapped(*args, txn_sends, txn_pause_ms, **kwargs):
        from onceproof.workloads.ops import TXN_SHAPE_BOUNDS
        given = {"txn_sends": txn_sends, "txn_pause_ms": txn_pause_ms}
        shape = {name: _range(f"--{name.replace('_', '-')}", given[name], low, high)
                 for name, (low, high) in TXN_SHAPE_BOUNDS.items() if given[name] is not None}
        return f(*args, txn_shape=shape, **kwargs)

    wrapped = click.option(
        "--txn-pause-ms", default=None, metavar="LOW-HIGH",
        help="Each transaction pauses once while open, for a time drawn from this range "
             "(0 to 120000 ms), between two sends or before its commit, as an "
             "application's work or a stalled handler would.")(wrapped)
    return click.option(
        "--txn-sends", default=None, metavar="LOW-HIGH",
        help="Sends per transaction, each transaction drawing its count from this range "
             "(1 to 50): a txn_producer sends that many times, an rw_txn polls before "
             "each send, a pipeline processes that many batches (default: as the "
             "workload draws, one to a few).")(wrapped)


def _range(option: str, text: str, low: int, high: int) -> list[int]:
    """LOW-HIGH (or one number N, for N-N) as [low, high], within the bounds."""
    from onceproof.workloads.ops import range_problem
    try:
        bounds = [int(x) for x in text.split("-", 1)] if "-" in text.strip("-") else [int(text)] * 2
    except ValueError:
        raise SetupError(f"{option} takes a range LOW-HIGH such as 2-10, or one number, "
                         f"not {text!r}") from None
    if range_problem(bounds, low, high):
        raise SetupError(f"{option} takes LOW-HIGH with {low} <= LOW <= HIGH <= {high}, "
                         f"not {text}")
    return bounds


def _values(value_bytes: str | None, value_content: str | None) -> dict:
    from onceproof.workloads.plan import VALUE_CONTENTS, value_sizes_problem
    sizes = None
    if value_bytes is not None:
        try:
            sizes = [int(x) for x in value_bytes.split(",")]
        except ValueError:
            raise SetupError(f"--value-bytes takes a size in bytes or sizes separated by "
                             f"commas, like 1024 or 100,16384, not {value_bytes!r}") from None
        if (problem := value_sizes_problem(sizes)):
            raise SetupError(f"--value-bytes {problem.replace('must be', 'must each be', 1)}")
    if value_content is not None and value_content not in VALUE_CONTENTS:
        raise SetupError(f"--value-content must be {' or '.join(VALUE_CONTENTS)}, "
                         f"not {value_content!r}")
    return {"value_bytes": sizes, "value_content": value_content}


def external_options(f):
    """--bootstrap and what goes with it: run against a cluster the harness did not start."""
    f = click.option("--keep", is_flag=True,
                     help="With --bootstrap: keep the topics and groups each run creates "
                          "(default: deleted when the run ends, Ctrl-C included).")(f)
    f = click.option("--fault-command", "fault_commands", multiple=True, metavar="KIND=COMMAND",
                     help="With --bootstrap: the shell command that does a node fault "
                          "(kill, start, pause, resume, stop), with {node}, {host} and {port} "
                          "of the broker, e.g. kill='ssh {host} sudo systemctl kill -s KILL "
                          "kafka' (repeatable). None: the run is fault-free.")(f)
    f = click.option("--client-config-file", type=click.Path(), default=None,
                     help="With --bootstrap: a properties file of client settings "
                          "(security.protocol, sasl.*, ssl.*).")(f)
    f = click.option("--client-config", "client_pairs", multiple=True, metavar="KEY=VALUE",
                     help="With --bootstrap: a client setting (repeatable; wins over the file). "
                          "Values never reach plans, histories, reports or logs.")(f)
    return click.option("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                        help="Run against this existing Kafka-compatible cluster instead of "
                             "starting one (network faults are then not available).")(f)


def _external(bootstrap: str | None, client_pairs: tuple[str, ...], client_file: str | None,
              fault_commands: tuple[str, ...], keep: bool):
    """The cluster --bootstrap names (not yet connected), or None without --bootstrap;
    every option checked here, in one line each."""
    from onceproof.cluster.external import ExternalCluster, parse_commands
    from onceproof.workloads.settings import SettingsError, parse_client
    if not bootstrap:
        given = [name for name, v in (("--client-config", client_pairs),
                                      ("--client-config-file", client_file),
                                      ("--fault-command", fault_commands), ("--keep", keep)) if v]
        if given:
            raise SetupError(f"{', '.join(given)} apply to a cluster you bring: add --bootstrap HOST:PORT")
        return None
    try:
        client = parse_client(client_pairs, client_file)
    except SettingsError as exc:
        raise SetupError(str(exc)) from None
    return ExternalCluster(bootstrap, client, parse_commands(fault_commands), keep)


spark_option = click.option("--spark-master", envvar="ONCEPROOF_SPARK_MASTER", default=None,
                            help="Spark master for checking histories too big to check "
                                 "in this process (default: local).")
# checkers/known.py MODES, spelled out here so that the CLI starts without the checkers.
KNOWN_ISSUES_MODES = ("fail", "report")


def _known_issues_mode(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    # Checked here rather than by click.Choice, whose usage error takes three lines.
    if value not in KNOWN_ISSUES_MODES:
        raise SetupError(f"--known-issues must be {' or '.join(KNOWN_ISSUES_MODES)}, "
                         f"not {value!r}")
    return value


known_issues_option = click.option(
    "--known-issues", default="fail", show_default=True, metavar="fail|report",
    callback=_known_issues_mode,
    help="fail: every violation or stall fails (exit 1); report: a run whose every failing "
         "anomaly matches a known upstream issue (docs/known-issues.md) exits 0, still "
         "showing each match; a new anomaly fails either way.")
artifacts_option = click.option("--artifacts", default="artifacts", show_default=True,
                                help="Folder for plans, histories, verdicts and logs.")


@main.group()
def cluster() -> None:
    """Stand up, inspect and tear down a local cluster behind toxiproxy."""


@cluster.command()
@click.option("--nodes", default=3, show_default=True, help="Number of KRaft nodes.")
@kafka_version_option
@cluster_dir_option
@broker_config_options
def up(nodes: int, kafka_version: str | None, root: str, broker_pairs: tuple[str, ...],
       broker_config_file: str | None) -> None:
    """Start a cluster that keeps running after this command returns."""
    from onceproof.cluster import cluster as cl
    broker = _broker_settings(broker_pairs, broker_config_file)
    if cl.status(root).get("running"):
        raise SetupError(f"a cluster is already running in {root}; "
                         f"stop it with `onceproof cluster down --dir {root}`")
    c = cl.Cluster(root, nodes, kafka_version, owned=False, overrides=broker)
    c.up()
    click.echo(f"ready: Kafka {c.dist.version}, {nodes} nodes, bootstrap {c.bootstrap}")
    click.echo(f"logs and state in {c.root}")


@cluster.command()
@cluster_dir_option
def down(root: str) -> None:
    """Stop the cluster started by `onceproof cluster up`."""
    from onceproof.cluster import cluster as cl
    stopped = cl.stop_detached(root)
    click.echo(f"stopped {stopped} processes" if stopped else f"no cluster running in {root}")


@cluster.command()
@cluster_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(root: str, as_json: bool) -> None:
    """Show nodes, proxies and the faults in force."""
    import json as _json

    from rich.console import Console
    from rich.table import Table

    from onceproof.cluster import cluster as cl
    st = cl.status(root)
    if as_json:
        click.echo(_json.dumps(st, indent=1))
        return
    if "nodes" not in st:
        click.echo(f"no cluster in {root}; start one with `onceproof cluster up`")
        sys.exit(3)
    console = Console()
    console.print(f"Kafka {st['kafka_version']}  bootstrap {st['bootstrap']}  "
                  f"toxiproxy {st['toxiproxy']['api']} "
                  f"({'up' if st['toxiproxy']['alive'] else 'DOWN'})")
    if st.get("broker"):
        console.print("Broker settings: " + ", ".join(f"{k}={v}" for k, v in sorted(
            st["broker"].items())))
    nodes = Table("node", "pid", "state", title="Nodes")
    for n in st["nodes"]:
        state = "paused" if n["paused"] else "running" if n["alive"] else "down"
        nodes.add_row(str(n["node"]), str(n["pid"]), state)
    console.print(nodes)
    proxies = Table("proxy", "listen", "upstream", "enabled", "toxics", title="Proxies")
    for name, p in sorted(st["proxies"].items()):
        toxics = ", ".join(t["type"] + "/" + t["stream"] for t in p.get("toxics", []))
        proxies.add_row(name, p["listen"], p["upstream"], "yes" if p["enabled"] else "NO", toxics)
    console.print(proxies)
    faults = [cl.effect_text(f) for f in st["faults"]]
    console.print("In force: " + ("; ".join(faults) if faults else "nothing"))


nodes_option = click.option("--nodes", default=3, show_default=True, help="Number of KRaft nodes.")


def _fresh_cluster(artifacts: str, nodes: int, kafka_version: str | None, external=None):
    """A fresh cluster of the harness's own, or the one the user brought (connected now,
    so that a bad address or refused credentials stop everything before it starts)."""
    from pathlib import Path

    from onceproof.cluster.cluster import Cluster
    if external is not None:
        if kafka_version:
            raise SetupError("--kafka-version picks the release of a cluster the harness starts; "
                             "with --bootstrap the cluster's own release is tested")
        return external.up()
    return Cluster(Path(artifacts) / "cluster", nodes, kafka_version)


@main.command()
@click.argument("plan_file", type=click.Path())
@click.option("--runs", default=3, show_default=True, help="How many times to run the plan.")
@nodes_option
@kafka_version_option
@client_options
@spark_option
@artifacts_option
@external_options
@known_issues_option
@application_options
@value_options
def replay(plan_file: str, runs: int, nodes: int, kafka_version: str | None, client: str | None,
           java_client_version: str | None, spark_master: str | None, artifacts: str, bootstrap,
           client_pairs, client_config_file, fault_commands, keep, known_issues: str,
           app: dict, values: dict) -> None:
    """Re-run a saved plan (plan.json, a counterexample folder, or a counterexample kept as
    one file, such as tests/counterexamples/*.json) on a fresh cluster, or on yours
    (--bootstrap), and report how many runs show the anomaly it was saved for. Exit 1
    when one did (with --known-issues report, only a run where what it showed is not
    all known issues)."""
    import json
    from pathlib import Path

    from onceproof.checkers.verdict import Verdict
    from onceproof.run.backends import on_client
    from onceproof.trial import reproduces, run_trial
    from onceproof.workloads.plan import PlanError, load, value_size_problem, with_values
    path = Path(plan_file)
    folder = path if path.is_dir() else path.parent
    try:
        plan = on_client(load(folder / "plan.json" if path.is_dir() else path), client,
                         java_client_version, app["producer"], app["consumer"])
        plan = with_values(plan, values["value_bytes"], values["value_content"])
        if (why := value_size_problem(plan)):
            raise PlanError(f"plan {why}")
    except PlanError as exc:
        raise SetupError(str(exc)) from None
    from onceproof.workloads.plan import libraries
    _refuse_unknown(app, libraries(plan), _java_release(
        plan.get("java_client"), kafka_version, bootstrap))
    saved = folder / "verdict.json"
    # What the plan was saved for: what failed its verdict (violations, stalls), never
    # its notes, which most runs show (Verdict.failing); a run reproduces it when one of
    # them fails the run's verdict too.
    if path.is_file() and "shown" in (kept := json.loads(path.read_text())):
        wanted = set(kept["shown"])  # a counterexample kept as one file (search.keep)
    else:
        wanted = (Verdict.from_dict(json.loads(saved.read_text())).failing
                  if saved.exists() else set())
    hits = new = 0
    external = _external(bootstrap, client_pairs, client_config_file, fault_commands, keep)
    with _fresh_cluster(artifacts, nodes, kafka_version, external) as cluster:
        for i in range(runs):
            trial = run_trial(plan, cluster, Path(artifacts) / "replays" / f"run-{i + 1}",
                              spark_master)
            failing = trial.verdict.failing
            hit = reproduces(wanted, trial.verdict)
            hits += hit
            # Under --known-issues report, a run counts for the exit code only when
            # what it reproduced is not all known issues.
            unexplained = trial.verdict.unexplained
            new += hit and (known_issues == "fail"
                            or bool(unexplained & wanted if wanted else unexplained))
            notes = sorted(trial.anomalies - failing)
            matched = sorted({f"{m['issue']}, {m['state']}" for m in trial.verdict.known})
            click.echo(f"run {i + 1}/{runs}: {', '.join(sorted(failing)) or 'valid'}"
                       + (f" (notes: {', '.join(notes)})" if notes else "")
                       + (f" (matches {'; '.join(matched)})" if matched else "")
                       + f"  ({trial.folder})")
    target = ", ".join(sorted(wanted)) or "any violation or stall"
    click.echo(f"reproduced {target} in {hits} of {runs} runs"
               + (f", {hits - new} of them known issues only" if hits > new else ""))
    sys.exit(1 if new else 0)


@main.command()
@click.option("--only", multiple=True, help="Run only these suites (repeatable).")
@click.option("--examples", default=8, show_default=True, help="Plans to try per suite.")
@click.option("--budget", default=300.0, show_default=True,
              help="Seconds per suite for searching and shrinking.")
@click.option("--replays", default=2, show_default=True,
              help="Replays of each counterexample to measure how often it reproduces.")
@click.option("--seed", type=int, default=None, help="Derandomize Hypothesis with this seed.")
@click.option("--json", "json_out", type=click.Path(), default=None, help="Also write rows as JSON.")
@click.option("--time-limit", type=float, default=None,
              help="Seconds after which no further plan starts; suites not reached show as not run.")
@click.option("--mode", type=click.Choice(["rounds", "concurrent", "both"]), default="rounds",
              show_default=True, help="Plan shape to hunt with; both: each suite in each shape, "
              "side by side at the same budget.")
@click.option("--save-counterexamples", "save_to", type=click.Path(file_okay=False), default=None,
              help="Write each caught known-bad suite's smallest counterexample to this folder "
                   "as <suite>.json, which `onceproof replay` runs and CI replays "
                   "(tests/counterexamples).")
@nodes_option
@kafka_version_option
@side_by_side_option
@spark_option
@artifacts_option
@external_options
@application_options
@value_options
def suites(only, examples, budget, replays, seed, json_out, time_limit, mode, save_to, nodes,
           kafka_version, clients, spark_master, artifacts, bootstrap, client_pairs,
           client_config_file, fault_commands, keep, app, values) -> None:
    """Hunt every known-bad configuration and check the known-good one; print the table.
    With --bootstrap, the suites your cluster and fault commands can run. Exit 2 when the
    harness broke in a search (its traceback is in the artifacts' errors/)."""
    from onceproof.search import keep as keep_counterexample
    from onceproof.workloads.suites import SUITES
    external = _external(bootstrap, client_pairs, client_config_file, fault_commands, keep)
    rows = _search(SUITES, only, examples, budget, replays, seed, json_out, time_limit,
                   ["rounds", "concurrent"] if mode == "both" else [mode], nodes, kafka_version,
                   spark_master, artifacts, "Known-bad and known-good suites", external, clients,
                   _with_values(app, values))
    if not rows:
        raise SetupError("no suite ran: each chosen one says why above (a plan shape it is "
                         "not hunted in, or what your cluster lacks)")
    for r in rows:
        if save_to and r.caught and not r.known_good and r.counterexample:
            click.echo(f"{r.suite} ({r.mode}): kept {keep_counterexample(r, save_to)}", err=True)
    if any(r.error for r in rows):
        sys.exit(2)  # the harness broke in a search: that search decided nothing
    # Suites the time limit stopped are shown as such, not counted as misses.
    sys.exit(0 if all((r.caught or r.cut) and not r.idle for r in rows) else 1)


@main.command()
@click.option("--only", multiple=True, help="Run only these historical suites (repeatable).")
@click.option("--examples", default=8, show_default=True,
              help="Plans to try per leg (every leg the same).")
@click.option("--budget", default=300.0, show_default=True,
              help="Seconds of shrinking per leg after its first failure.")
@click.option("--replays", default=2, show_default=True,
              help="Replays of each counterexample to measure how often it reproduces.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Hypothesis seed, the same on every leg, so the legs run the same plans.")
@click.option("--json", "json_out", type=click.Path(), default=None, help="Also write rows as JSON.")
@click.option("--time-limit", type=float, default=None,
              help="Seconds after which no further plan starts; legs not reached show as not run.")
@click.option("--kafka-version", "releases", multiple=True,
              help="Run only the legs on this release (repeatable; default: every leg).")
@nodes_option
@spark_option
@artifacts_option
def calibrate(only, examples, budget, replays, seed, json_out, time_limit, releases, nodes,
              spark_master, artifacts) -> None:
    """Calibrate against history: each documented Kafka bug (workloads/suites.py
    HISTORICAL) searched with a correct application on a release that had it (it must be
    found) and on releases that fixed it (they must pass), side by side, each on a fresh
    cluster. Exit 0 when every leg did what it must, 2 when the harness broke in one (its
    traceback is in the artifacts' errors/)."""
    import json
    import time
    from dataclasses import replace
    from pathlib import Path

    from rich.console import Console

    from onceproof.calibration import as_row, fetch_all, markdown, search_legs, table
    from onceproof.workloads.suites import HISTORICAL
    unknown = set(only) - set(HISTORICAL)
    if unknown:
        raise SetupError(f"no historical suite named {', '.join(sorted(unknown))}: choose from "
                         f"{', '.join(HISTORICAL)}")
    chosen = [HISTORICAL[n] for n in (only or HISTORICAL)]
    if releases:
        chosen = [replace(h, legs=tuple(leg for leg in h.legs if leg.kafka in releases))
                  for h in chosen]
        if not any(h.legs for h in chosen):
            pinned = sorted({leg.kafka for h in HISTORICAL.values() for leg in h.legs})
            raise SetupError(f"no leg runs on {', '.join(releases)}: the legs run on "
                             f"{', '.join(pinned)}")
    fetch_all(chosen)
    deadline = time.monotonic() + time_limit if time_limit else None
    rows = []
    for h in chosen:
        click.echo(f"calibrating {h.name} ({h.bug}) on {len(h.legs)} legs ...", err=True)
        rows += search_legs(h, artifacts, nodes, spark_master, examples, budget, replays, seed,
                         deadline, on_leg=lambda row: click.echo(
                             f"  {row.leg}: {row.outcome} {row.why_not}".rstrip()
                             + (f": {row.result.error}" if row.result and row.result.error else ""),
                             err=True))
    Console(width=max(140, Console().width)).print(table(rows))
    if json_out:
        with open(json_out, "w") as f:
            json.dump([as_row(r) for r in rows], f, indent=1)
        # The same table for people, beside it (the nightly keeps both).
        Path(json_out).with_suffix(".md").write_text(markdown(rows))
    if any(r.result is not None and r.result.error for r in rows):
        sys.exit(2)  # the harness broke in a leg: that leg decided nothing
    sys.exit(0 if all(r.held or (r.result is not None and r.result.cut) for r in rows) else 1)


@main.command()
@click.option("--only", multiple=True, help="Run only these hunts (repeatable).")
@click.option("--examples", default=8, show_default=True, help="Plans to try per hunt.")
@click.option("--budget", default=600.0, show_default=True,
              help="Seconds per hunt for searching and shrinking.")
@click.option("--replays", default=3, show_default=True,
              help="Replays of each counterexample to measure how often it reproduces.")
@click.option("--seed", type=int, default=None, help="Derandomize Hypothesis with this seed.")
@click.option("--json", "json_out", type=click.Path(), default=None, help="Also write rows as JSON.")
@click.option("--time-limit", type=float, default=None,
              help="Seconds after which no further plan starts, shared evenly by the releases; "
                   "hunts not reached show as not run.")
@click.option("--kafka-version", "versions", multiple=True,
              help="Kafka release to hunt on, each on its own fresh cluster (repeatable; "
                   "default: the default release and 3.5.2).")
@nodes_option
@side_by_side_option
@spark_option
@artifacts_option
@application_options
@value_options
def hunts(only, examples, budget, replays, seed, json_out, time_limit, versions, nodes, clients,
          spark_master, artifacts, app, values) -> None:
    """Hunt for real bugs: correct configurations under the faults a known exposure needs
    (workloads/suites.py HUNTS); print a table per Kafka release. Exit 1 when a hunt found
    a violation or a stall (read its counterexample op by op before reporting it:
    docs/findings.md), or exercised nothing (no write acknowledged, nothing committed);
    exit 2 when the harness broke in a hunt (its traceback is in the artifacts' errors/)."""
    import json
    from pathlib import Path

    from onceproof.cluster.provision import CI_KAFKA_VERSIONS
    from onceproof.search import as_row
    from onceproof.workloads.suites import HUNTS
    rows = []
    versions = versions or CI_KAFKA_VERSIONS
    app = _with_values(app, values)
    for version in versions:
        registry = {n: h for n, h in HUNTS.items() if h.applies_to(version)}
        for name in sorted(set(only or HUNTS) & set(HUNTS) - set(registry)):
            click.echo(f"{name}: not run on Kafka {version}, it applies from "
                       f"{HUNTS[name].since}", err=True)
        wanted = [n for n in only if n not in HUNTS or n in registry]
        if only and not wanted:
            continue
        rows += _search(registry, wanted, examples, budget, replays, seed, None,
                        time_limit / len(versions) if time_limit else None,
                        ["concurrent"], nodes, version, spark_master,
                        str(Path(artifacts) / f"kafka-{version}"),
                        "Hunts: correct configurations under targeted faults", None, clients,
                        app)
    if json_out:
        with open(json_out, "w") as f:
            json.dump([as_row(r) for r in rows], f, indent=1)
    if any(r.error for r in rows):
        sys.exit(2)  # the harness broke in a hunt: that hunt decided nothing
    sys.exit(1 if any(r.caught or r.idle for r in rows) else 0)


def _with_values(app: dict, values: dict) -> dict:
    """The application's settings with --value-bytes and --value-content, which a search
    writes into each plan's mix (search.Search.run): refused in one line, before any
    cluster starts, when values of that size do not fit Kafka's default limits."""
    from onceproof.workloads.plan import value_size_problem, with_values
    if values["value_bytes"] is None and values["value_content"] is None:
        return app
    probe = with_values({"topics": {"t": {"partitions": 1}},
                         "clients": {"p": {"role": "producer"}}, "steps": []},
                        values["value_bytes"], values["value_content"])
    if (why := value_size_problem({**probe, "producer": app.get("producer") or {}})):
        raise SetupError(f"--value-bytes: {why}")
    return {**app, "values": values}


def _search(registry, only, examples, budget, replays, seed, json_out, time_limit, modes,
            nodes, kafka_version, spark_master, artifacts, title, external=None,
            clients: tuple[str, ...] = (), app: dict | None = None) -> list:
    """Search each chosen suite of registry in each mode (on each client library asked
    for) on one fresh cluster, every plan with the application's settings `app` under
    its own; print and optionally save the table, a column per client."""
    import json
    import time

    from rich.console import Console

    from onceproof.run.backends import client_spec
    from onceproof.search import as_row, hunt
    from onceproof.workloads.plan import LIBRDKAFKA
    asked = [client_spec(c) for c in clients]  # an unknown one is one line before any cluster
    app = app or {"producer": {}, "consumer": {}}
    for library, release in asked or [(LIBRDKAFKA, None)]:
        _refuse_unknown(app, [library], _java_release(release, kafka_version, external))
    unknown = set(only) - set(registry)
    if unknown:
        raise SetupError(f"nothing named {', '.join(sorted(unknown))} to hunt: choose from "
                         f"{', '.join(registry)}")
    chosen = [registry[n] for n in (only or registry)]
    # A suite that starts on a release of its own (an upgrade under load) runs on a
    # fresh cluster of it, after the others; on your cluster it is refused (Suite.on).
    own = [s for s in chosen if s.kafka and external is None]
    chosen = [s for s in chosen if s not in own]
    deadline = time.monotonic() + time_limit if time_limit else None
    rows = []
    with _fresh_cluster(artifacts, nodes, kafka_version, external) as cluster:
        for asked in chosen:
            suite, left_out = asked.on(cluster)
            if suite is None:
                click.echo(f"{asked.name}: not run on this cluster: {left_out}", err=True)
                continue
            if left_out:
                click.echo(f"{suite.name}: run {left_out}", err=True)
            for shape in modes:
                if shape not in suite.shapes:
                    click.echo(f"{suite.name}: hunted in {', '.join(suite.shapes)} plans only, "
                               f"not in {shape} plans (workloads/suites.py says why)", err=True)
                    continue
                for client in clients or (None,):
                    on = f" on {client}" if client else ""
                    click.echo(f"hunting {suite.name} ({shape}){on} ...", err=True)
                    rows.append(hunt(suite, cluster, artifacts, spark_master, examples, budget,
                                     replays, seed, deadline, shape, client, app))
                    if rows[-1].error:
                        click.echo(f"{suite.name} ({shape}){on}: {rows[-1].error}", err=True)
        version = cluster.version
    for suite in own:
        rows += _on_own_release(suite, modes, clients, artifacts, nodes, spark_master, examples,
                                budget, replays, seed, deadline)
    Console(width=max(120, Console().width)).print(_table(f"{title} (Kafka {version})", rows,
                                                          clients))
    if json_out:
        with open(json_out, "w") as f:
            json.dump([as_row(r) for r in rows], f, indent=1)
    return rows


def _on_own_release(suite, modes, clients, artifacts, nodes, spark_master, examples, budget,
                    replays, seed, deadline) -> list:
    """Search a suite that starts on a release of its own on a fresh cluster of it
    (its rows name the release it started on and the one it moved to)."""
    import time
    from pathlib import Path

    from onceproof.cluster.cluster import Cluster
    from onceproof.search import hunt
    rows: list = []
    shapes = [m for m in modes if m in suite.shapes]
    if not shapes:
        click.echo(f"{suite.name}: hunted in {', '.join(suite.shapes)} plans only", err=True)
        return rows
    if deadline is not None and time.monotonic() >= deadline:
        click.echo(f"{suite.name}: not run (time limit)", err=True)
        return rows
    with Cluster(Path(artifacts) / suite.name / "cluster", nodes, suite.kafka) as cluster:
        for shape in shapes:
            for client in clients or (None,):
                click.echo(f"hunting {suite.name} ({shape}, Kafka {suite.kafka} -> "
                           f"{suite.upgrade_to or suite.kafka}) ...", err=True)
                rows.append(hunt(suite, cluster, artifacts, spark_master, examples, budget,
                                 replays, seed, deadline, shape, client))
                if rows[-1].error:
                    click.echo(f"{suite.name} ({shape}): {rows[-1].error}", err=True)
    return rows


def _table(title: str, rows: list, clients: tuple[str, ...]):
    """The searches' table: a row per suite and shape; with several client libraries, the
    same plans' outcome on each side by side, a column per client."""
    from rich.table import Table

    def cell(r) -> str:
        first = f"{r.seconds_to_first:.0f} s" if r.seconds_to_first is not None else "-"
        return f"{r.outcome}, {r.examples} plans, first {first}, reproduced {r.reproduced}"

    table = Table(title=title)
    if len(clients) > 1:
        for name in ("suite", "mode", "expected anomaly", *clients):
            table.add_column(name, no_wrap=name == "suite")
        by = {(r.suite, r.mode, r.client): r for r in rows}
        for suite, mode, expect in dict.fromkeys((r.suite, r.mode, r.expect) for r in rows):
            table.add_row(suite, mode, expect, *(cell(by[suite, mode, c]) if (suite, mode, c) in by
                                                 else "-" for c in clients))
        return table
    for name in ("suite", "mode", "expected anomaly", "caught", "examples",
                 "time to first failure", "shrunk plan size", "reproduced"):
        # Names and outcomes whole; the numbers' headers may wrap.
        table.add_column(name, no_wrap=name in ("suite", "caught"))
    for r in rows:
        table.add_row(r.suite, r.mode, r.expect, r.outcome, str(r.examples),
                      f"{r.seconds_to_first:.0f} s" if r.seconds_to_first is not None else "-",
                      str(r.shrunk_size or "-"), r.reproduced)
    return table


@main.command()
@kafka_version_option
def install(kafka_version: str | None) -> None:
    """Fetch Kafka and its Java client (Maven Central; the Java client's agent compiled
    against it) and toxiproxy (its server built with the kafka toxic, from the Go module
    proxy) into the cache."""
    from onceproof.cluster.provision import ensure_kafka, ensure_toxiproxy
    from onceproof.run.backends import BACKENDS
    dist = ensure_kafka(kafka_version)
    lines = [f"Kafka {dist.version}: {dist.libs}"]
    lines += [line for b in BACKENDS.values() if (line := b.install(dist.version))]
    lines.append(f"toxiproxy: {ensure_toxiproxy()}")
    click.echo("\n".join(lines))


@main.command("run")
@click.option("--workload", default="pipeline", show_default=True,
              help="producers, transactions, pipeline, rewind or streams.")
@click.option("--faults", default=None,
              help="mixed, net, node, client, none, or a comma-separated list of fault kinds "
                   "(default: mixed; with --bootstrap, the node faults your --fault-command "
                   "templates can do).")
@click.option("--runs", default=1, show_default=True, help="How many generated plans to run.")
@click.option("--mode", type=click.Choice(["concurrent", "rounds"]), default="concurrent",
              show_default=True, help="concurrent: every client runs nonstop for --duration while "
              "faults fire on their own clock; rounds: lock-step rounds, faults between them.")
@click.option("--duration", default=120, show_default=True, help="Seconds of workload per plan (concurrent).")
@click.option("--rate", type=float, default=None,
              help="Most client ops per second, all clients together (concurrent; default: no limit).")
@click.option("--clients-per-node", default=3, show_default=True,
              help="Clients per cluster node (concurrent).")
@click.option("--partitions", default=6, show_default=True, help="Partitions per topic (concurrent).")
@click.option("--interval", default=10.0, show_default=True,
              help="Seconds between faults the nemesis starts (concurrent).")
@click.option("--rounds", default=24, show_default=True, help="Rounds of client ops per plan (rounds).")
@click.option("--time-budget", type=float, default=None,
              help="Stop starting new runs after this many seconds.")
@click.option("--seed", type=int, default=None, help="Seed for plan generation (printed if not given).")
@click.option("--out", default="onceproof-runs", show_default=True, help="Where run folders go.")
@nodes_option
@kafka_version_option
@client_options
@broker_config_options
@spark_option
@external_options
@known_issues_option
@click.option("--upgrade-to", default=None, metavar="RELEASE",
              help="Move every node to this Kafka release during each run, one after "
                   "another, while the clients go on (a rolling upgrade), e.g. "
                   "--kafka-version 3.9.2 --upgrade-to 4.4.0.")
@click.option("--finalize", "finalize_pairs", multiple=True, metavar="FEATURE=LEVEL",
              help="After the upgrade (or alone), finalize a feature at a level, e.g. "
                   "transaction.version=2 (repeatable; one step each).")
@value_options
@transaction_options
@click.option("--initial-features", "feature_pairs", multiple=True, metavar="FEATURE=LEVEL",
              help="Format the cluster with this feature level, e.g. transaction.version=1 "
                   "on 4.x, to finalize another during the run (repeatable).")
@application_options
def run_command(workload, faults, runs, mode, duration, rate, clients_per_node, partitions,
                interval, rounds, time_budget, seed, out, nodes, kafka_version, client,
                java_client_version, broker_pairs, broker_config_file, spark_master, bootstrap,
                client_pairs, client_config_file, fault_commands, keep, known_issues,
                upgrade_to, finalize_pairs, feature_pairs, app, values, txn_shape) -> None:
    """Generate a workload, run it on a local cluster under faults (or on yours, with
    --bootstrap), check it, report."""

    from onceproof.run_job import JobOptions, run_job
    broker = _broker_settings(broker_pairs, broker_config_file)
    external = _external(bootstrap, client_pairs, client_config_file, fault_commands, keep)
    if external is not None and (broker or kafka_version):
        raise SetupError("--broker-config and --kafka-version set up a cluster the harness "
                         "starts; with --bootstrap your cluster runs as it is")
    from onceproof.workloads.plan import JAVA, LIBRDKAFKA
    _refuse_unknown(app, {client or LIBRDKAFKA} | ({JAVA} if workload == "streams" else set()),
                    _java_release(java_client_version, kafka_version, external))
    code = run_job(JobOptions(workload, faults, runs, rounds, time_budget, seed, nodes,
                              kafka_version, spark_master, out, mode, duration, rate,
                              clients_per_node, partitions, interval, broker, external,
                              client, java_client_version, known_issues, upgrade_to,
                              _feature_levels("--finalize", finalize_pairs),
                              _feature_levels("--initial-features", feature_pairs),
                              producer=app["producer"], consumer=app["consumer"],
                              value_bytes=values["value_bytes"],
                              value_content=values["value_content"], txn_shape=txn_shape))
    sys.exit(code)


def _feature_levels(option: str, pairs: tuple[str, ...]) -> dict:
    """FEATURE=LEVEL pairs as {feature: level}: a number, or for metadata.version a
    metadata version's name (4.4-IV2)."""
    out: dict = {}
    for pair in pairs:
        name, eq, level = pair.partition("=")
        if not eq or not name or not level:
            raise SetupError(f"{option} takes FEATURE=LEVEL, like transaction.version=2, not {pair!r}")
        out[name.strip()] = level.strip() if name.strip() == "metadata.version" else (
            int(level) if level.strip().isdigit() else level.strip())
    return out


@main.command("versions")
@click.option("--kafka-version", "versions", multiple=True,
              help="A release to run (repeatable; default: every tested release, newest first).")
@click.option("--upgrade", "upgrades", multiple=True, metavar="FROM:TO",
              help="An upgrade path to run: a cluster started on FROM whose nodes move to TO "
                   "during the run, then transaction.version=2 finalized (repeatable; "
                   "default, with no --kafka-version either: 3.9.2:4.4.0 and 4.3.1:4.4.0).")
@click.option("--workload", default="pipeline", show_default=True,
              help="producers, transactions, pipeline, rewind or streams.")
@click.option("--faults", default="mixed", show_default=True,
              help="mixed, net, node, client, none, or a comma-separated list of fault kinds.")
@click.option("--duration", default=30, show_default=True, help="Seconds of workload per release.")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Seed of the one plan every release runs.")
@click.option("--out", default="onceproof-versions", show_default=True,
              help="Where run folders, versions.json and versions.md go.")
@nodes_option
@spark_option
@known_issues_option
def versions_command(versions, upgrades, workload, faults, duration, seed, out, nodes,
                     spark_master, known_issues) -> None:
    """The version matrix: the same short correct run under faults on each Kafka release,
    each on a fresh cluster. Exit 0 when every release started and stayed valid (with
    --known-issues report, or failed on known issues only)."""
    from pathlib import Path

    from rich.console import Console

    from onceproof.cluster.provision import TESTED_KAFKA_VERSIONS, kafka_version
    from onceproof.run_job import JobOptions
    from onceproof.versions import UPGRADES, matrix, table, write
    wanted = versions or (() if upgrades else TESTED_KAFKA_VERSIONS)
    paths = [_upgrade_path(u) for u in upgrades] or ([] if versions else list(UPGRADES))
    for v in [*wanted, *(v for path in paths for v in path)]:
        kafka_version(v)  # a malformed release stops the matrix before anything starts
    opts = JobOptions(workload=workload, faults=faults, seed=seed, nodes=nodes, out=out,
                      duration=duration, spark_master=spark_master, known_issues=known_issues)
    opts.strategy()
    console = Console()
    rows = matrix(tuple(wanted), opts, console, tuple(paths))
    console.print(table(rows))
    write(rows, Path(out))
    click.echo(f"table: {Path(out) / 'versions.md'}")
    sys.exit(0 if all(r.outcome == "valid" for r in rows) else 1)


def _upgrade_path(text: str) -> tuple[str, str]:
    """FROM:TO as (from, to), checked as run --upgrade-to checks it."""
    from onceproof.workloads import faults
    from onceproof.workloads.upgrades import release_steps
    start, colon, to = text.partition(":")
    if not colon or not all(faults.problem({"f": "upgrade", "to": v}) is None for v in (start, to)):
        raise SetupError(f"--upgrade takes FROM:TO, two Kafka releases like 3.9.2:4.4.0, not {text!r}")
    steps = release_steps(3, to, {"transaction.version": 2})
    why = faults.problem(steps[0]) or faults.release_problem(steps, start, [1, 2, 3])
    if why:
        raise SetupError(f"--upgrade {text}: {why}")
    return start, to


@main.command("check")
@click.argument("history", type=click.Path())
@spark_option
@click.option("--json", "json_out", type=click.Path(), default=None,
              help="Also write the verdict as JSON to this file.")
@known_issues_option
def check_command(history: str, spark_master: str | None, json_out: str | None,
                  known_issues: str) -> None:
    """Check a history (history.jsonl, or its Parquet folder) and print the verdict.
    Exit 0: valid; 1: anomalies or stalls; 2: the history could not be checked, or holds
    nothing to judge (verdict UNKNOWN). With --known-issues report, 0 also when every
    failing anomaly matches a known issue. A plan.json beside the history tells which
    client library each process ran on."""
    import json
    from pathlib import Path

    from onceproof.checkers.render import run_check
    from onceproof.history.format import HistoryError
    beside = Path(history).parent / "plan.json"
    plan_clients = None
    if beside.is_file():
        from onceproof.trial import plan_clients as of_plan
        try:
            plan_clients = of_plan(json.loads(beside.read_text()))
        except (ValueError, KeyError, AttributeError, TypeError):
            plan_clients = None  # not a plan: the history's own cluster op says what it can
    try:
        code = run_check(history, spark_master, json_out, known_issues=known_issues,
                         plan_clients=plan_clients)
    except HistoryError as exc:
        raise SetupError(str(exc)) from None
    sys.exit(code)


@main.command("report")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
def report_command(folder: str) -> None:
    """Write FOLDER/report.html from a run folder's history.jsonl (and verdict.json and
    plan.json when present): one page to open in a browser."""
    from onceproof.history.format import HistoryError
    from onceproof.report.page import write_report
    try:
        path = write_report(folder)
    except HistoryError as exc:
        raise SetupError(str(exc)) from None
    click.echo(str(path))
