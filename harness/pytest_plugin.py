"""The pytest plugin (entry point `onceproof`): options that pick what the cluster tests
run, a cluster per test session, and fixtures that hand each test a healthy cluster and a
search policy for its property.

The cluster is expensive (three JVMs), so one serves the whole session; each test that
breaks it gets it back healed (`heal_all`), and each workload example uses fresh topics,
groups and transactional ids, so examples do not see each other. Nothing starts unless a
test asks for a fixture, and the plugin leaves Hypothesis's settings alone: installing
onceproof changes no other project's tests (onceproof's own tests load its profiles in
tests/conftest.py).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

if TYPE_CHECKING:  # the search imports the whole harness: only tests that use it pay for it
    from onceproof.search import HuntResult, Search


def pytest_addoption(parser: pytest.Parser) -> None:
    from onceproof.run.backends import BACKENDS
    group = parser.getgroup("onceproof")
    group.addoption("--kafka-version", default=os.environ.get("ONCEPROOF_KAFKA_VERSION"),
                    help="Kafka release to test (default: the newest tested 4.x)")
    group.addoption("--nodes", type=int, default=3, help="KRaft nodes in the test cluster")
    group.addoption("--client", default=os.environ.get("ONCEPROOF_CLIENT"),
                    choices=tuple(BACKENDS),
                    help="client library of the plan clients the `trials` fixture runs that name "
                         "none (default: librdkafka)")
    group.addoption("--java-client-version", default=os.environ.get("ONCEPROOF_JAVA_CLIENT_VERSION"),
                    help="the Java client's release (default: the cluster's)")
    group.addoption("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for the test cluster (repeatable)")
    group.addoption("--broker-config-file", default=os.environ.get("ONCEPROOF_BROKER_CONFIG"),
                    help="a server.properties whose broker settings the test cluster runs with")
    group.addoption("--bootstrap", default=os.environ.get("ONCEPROOF_BOOTSTRAP"),
                    metavar="HOST:PORT[,...]",
                    help="run the properties against this existing cluster instead of starting "
                         "one (network faults are then not available)")
    group.addoption("--client-config", action="append", default=[], metavar="KEY=VALUE",
                    help="with --bootstrap: a client setting (security.protocol, sasl.*, ssl.*; "
                         "repeatable)")
    group.addoption("--client-config-file", default=os.environ.get("ONCEPROOF_CLIENT_CONFIG"),
                    help="with --bootstrap: a properties file of client settings")
    group.addoption("--fault-command", action="append", default=[], metavar="KIND=COMMAND",
                    help="with --bootstrap: the command for a node fault (kill, start, pause, "
                         "resume, stop) with {node}, {host}, {port} (repeatable)")
    group.addoption("--keep", action="store_true",
                    help="with --bootstrap: keep the topics and groups each example creates")
    group.addoption("--spark-master", default=os.environ.get("ONCEPROOF_SPARK_MASTER"),
                    help="Spark master for the checkers (default: local)")
    group.addoption("--shrink-budget", type=float,
                    default=float(os.environ.get("ONCEPROOF_SHRINK_BUDGET", 240)),
                    help="seconds of cluster runs one property may spend after its first failure")
    group.addoption("--artifacts", default=os.environ.get("ONCEPROOF_ARTIFACTS", "artifacts"),
                    help="where failing examples leave plans, histories, verdicts and logs")
    group.addoption("--time-limit", type=float,
                    default=float(os.environ.get("ONCEPROOF_TIME_LIMIT", 0)) or None,
                    help="seconds from the session's start after which properties and suites "
                         "run no further cluster examples (a nightly's hard bound)")


_DEADLINE = pytest.StashKey[float | None]()
# What the session's summary prints, gathered from the test reports (under pytest-xdist
# the tests run in worker processes and only their reports reach this one): properties
# the time limit cut short (name -> examples run before it), and hunt results.
_CUT: dict[str, int] = {}
_SUITE_ROWS: list[HuntResult] = []
_CUT_KEY, _ROW_KEY = "onceproof_cut", "onceproof_suite_row"


def pytest_configure(config: pytest.Config) -> None:
    limit = config.getoption("--time-limit", None)
    config.stash[_DEADLINE] = time.monotonic() + limit if limit else None


@pytest.fixture(scope="session")
def deadline(pytestconfig: pytest.Config) -> float | None:
    """The monotonic time after which no further cluster example starts (None: no limit)."""
    return pytestconfig.stash[_DEADLINE]


@pytest.fixture(scope="session")
def artifacts_dir(pytestconfig: pytest.Config) -> Path:
    path = Path(pytestconfig.getoption("--artifacts")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def session_cluster(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory):
    """The cluster of the session: one the plugin starts, or yours (--bootstrap)."""
    from onceproof.cluster.cluster import Cluster
    from onceproof.cluster.external import ExternalCluster, parse_commands
    from onceproof.errors import SetupError
    from onceproof.memory import for_running
    from onceproof.workloads.settings import SettingsError, parse, parse_client
    option = pytestconfig.getoption
    # Before the cluster's and the clients' threads: a session of hours stays flat.
    for_running()
    try:
        if option("--bootstrap"):
            external = ExternalCluster(option("--bootstrap"),
                                       parse_client(tuple(option("--client-config")),
                                                    option("--client-config-file")),
                                       parse_commands(option("--fault-command")), option("--keep"))
            with external.up() as cluster:
                yield cluster
            return
        broker = parse(tuple(option("--broker-config")), option("--broker-config-file"))
    except (SettingsError, SetupError) as exc:
        raise pytest.UsageError(str(exc)) from None
    root = tmp_path_factory.mktemp("cluster")
    with Cluster(root, option("--nodes"), option("--kafka-version"), overrides=broker) as cluster:
        yield cluster


@pytest.fixture
def cluster(session_cluster):
    """The session's cluster, healthy at the start of the test and healed after it."""
    if session_cluster.faults or session_cluster.down_nodes:
        session_cluster.heal_all()
    yield session_cluster
    if session_cluster.faults or session_cluster.down_nodes:
        session_cluster.heal_all()


def stopped_by_time_limit(name: str, properties: list, examples: int) -> None:
    """What the session's --time-limit does to a property it stops: one that ran no example
    is skipped, so it never passes for one that checked nothing; one stopped later is
    named in the session summary (through its test's user properties)."""
    if not examples:
        pytest.skip(f"the session's --time-limit was spent before {name} ran an example")
    properties.append((_CUT_KEY, [name, examples]))


@pytest.fixture
def trials(request, session_cluster, artifacts_dir, pytestconfig, deadline) -> Search:
    """The search policy of this property test: runs its plans on the session's cluster,
    keeps its smallest failure, and stops at the shrink budget or the time limit."""
    from functools import partial

    from onceproof.search import Search
    name = request.node.name
    return Search(name, session_cluster, artifacts_dir, pytestconfig.getoption("--spark-master"),
                  pytestconfig.getoption("--shrink-budget"), deadline,
                  on_cut=partial(stopped_by_time_limit, name, request.node.user_properties),
                  client=pytestconfig.getoption("--client"),
                  java_client_version=pytestconfig.getoption("--java-client-version"))


class _Rows(list):
    """A test's hunt results, each also kept in its report for the session's table."""

    def __init__(self, properties: list) -> None:
        super().__init__()
        self.properties = properties

    def append(self, result: HuntResult) -> None:
        from dataclasses import asdict
        super().append(result)
        self.properties.append((_ROW_KEY, asdict(result)))


@pytest.fixture
def suite_rows(request) -> list[HuntResult]:
    """Hunt results to print in the session's summary table."""
    return _Rows(request.node.user_properties)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A test's properties are complete in its teardown's report.
    if report.when != "teardown":
        return
    for key, value in report.user_properties:
        if key == _CUT_KEY:
            name, examples = cast(list, value)
            _CUT[name] = examples
        elif key == _ROW_KEY:
            from onceproof.search import HuntResult  # only a hunt's test imports the search
            _SUITE_ROWS.append(HuntResult(**cast(dict, value)))


def pytest_terminal_summary(terminalreporter) -> None:
    tr = terminalreporter
    if _CUT:
        tr.section("onceproof time limit")
        for name, n in sorted(_CUT.items()):
            tr.write_line(f"{name}: stopped by --time-limit after {n} cluster examples")
    if not _SUITE_ROWS:
        return
    tr.section("onceproof suites")
    head = (f"{'suite':28} {'mode':12} {'expected anomaly':22} {'caught':7} {'examples':>8} "
            f"{'first failure':>14} {'shrunk size':>11} {'reproduced':>10}")
    tr.write_line(head)
    for r in _SUITE_ROWS:
        first = f"{r.seconds_to_first:.0f} s" if r.seconds_to_first is not None else "-"
        tr.write_line(f"{r.suite:28} {r.mode:12} {r.expect[:22]:22} {r.outcome:7} {r.examples:>8} "
                      f"{first:>14} {r.shrunk_size or '-'!s:>11} {r.reproduced:>10}")
