"""pytest plugin (entry point `onceproof`): a cluster per test session, options to pick
what it runs, and a fixture that hands each test a healthy cluster.

The cluster is expensive (three JVMs), so one serves the whole session; each test that
breaks it gets it back healed (`heal_all`), and each workload example uses fresh topics,
groups and transactional ids, so examples do not see each other.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis loads its own derandomized "ci" profile whenever CI is set, so CI runs the
# same examples every time. Nightly must explore new ones: it is not derandomized, and
# it keeps an example database (.hypothesis/) that the nightly workflow carries over.
_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("dev", max_examples=3, **_COMMON)
settings.register_profile("ci", max_examples=3, derandomize=True, database=None, **_COMMON)
settings.register_profile("nightly", max_examples=25, derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("onceproof")
    group.addoption("--kafka-version", default=os.environ.get("ONCEPROOF_KAFKA_VERSION"),
                    help="Kafka release to test (default: the newest tested 4.x)")
    group.addoption("--nodes", type=int, default=3, help="KRaft nodes in the test cluster")
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
# Properties and suites the time limit cut short: name -> examples run before it.
_CUT: dict[str, int] = {}


def pytest_configure(config: pytest.Config) -> None:
    limit = config.getoption("--time-limit", None)
    config.stash[_DEADLINE] = time.monotonic() + limit if limit else None


@pytest.fixture(scope="session")
def deadline(pytestconfig: pytest.Config) -> float | None:
    """The monotonic time after which no further cluster example starts (None: no limit)."""
    return pytestconfig.stash[_DEADLINE]


def out_of_time(deadline: float | None, name: str, examples_run: int) -> bool:
    """Whether the session's time limit stops `name` from running another example. A
    test stopped before its first example is skipped, so it never passes for one that
    checked nothing; one stopped later is named in the session summary."""
    if deadline is None or time.monotonic() < deadline:
        return False
    if not examples_run:
        pytest.skip(f"the session's --time-limit was spent before {name} ran an example")
    _CUT[name] = examples_run
    return True


@pytest.fixture(scope="session")
def artifacts_dir(pytestconfig: pytest.Config) -> Path:
    path = Path(pytestconfig.getoption("--artifacts")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def session_cluster(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory):
    from onceproof.cluster.cluster import Cluster
    root = tmp_path_factory.mktemp("cluster")
    with Cluster(root, pytestconfig.getoption("--nodes"),
                 pytestconfig.getoption("--kafka-version")) as cluster:
        yield cluster


@pytest.fixture
def cluster(session_cluster):
    """The session's cluster, healthy at the start of the test and healed after it."""
    if session_cluster.faults or session_cluster.down_nodes:
        session_cluster.heal_all()
    yield session_cluster
    if session_cluster.faults or session_cluster.down_nodes:
        session_cluster.heal_all()


@pytest.fixture(scope="session")
def onceproof_spark(pytestconfig: pytest.Config):
    from onceproof.checkers.spark import session
    return session(pytestconfig.getoption("--spark-master"))


class Trials:
    """Runs plans for one property and keeps its smallest failing plan.

    Once the property has failed, each further run (Hypothesis shrinking) costs a cluster
    run; after the shrink budget, plans are not run any more and count as passing, so
    Hypothesis stops, and the smallest failure seen is what the artifacts hold. The
    session's --time-limit stops further runs the same way."""

    def __init__(self, name, cluster, spark, artifacts: Path, budget: float,
                 deadline: float | None = None):
        from onceproof.trial import Counterexamples
        self.name, self.cluster, self.spark, self.budget = name, cluster, spark, budget
        self.deadline = deadline
        self.scratch = artifacts / "trials" / name
        self.store = Counterexamples(artifacts / "counterexamples")
        self.failed_at: float | None = None
        self.count = 0

    def run(self, plan: dict):
        """Run plan; return the Trial, or None when the shrink budget is spent."""
        from onceproof.trial import run_trial
        if self.failed_at is not None and time.monotonic() - self.failed_at > self.budget:
            return None
        if out_of_time(self.deadline, self.name, self.count):
            return None
        if self.cluster.faults or self.cluster.down_nodes:
            self.cluster.heal_all()
        self.count += 1
        return run_trial(plan, self.cluster, self.scratch / f"{self.count:04d}", self.spark)

    def failed(self, trial) -> str:
        """Record a failing trial; return the message for the assertion."""
        if self.failed_at is None:
            self.failed_at = time.monotonic()
        self.store.offer(self.name, trial, self.cluster)
        where = self.store.folder(self.name)
        return (f"{', '.join(sorted(trial.anomalies)) or 'invalid verdict'}; smallest "
                f"counterexample: {where} (replay: onceproof replay {where})")


@pytest.fixture
def trials(request, session_cluster, onceproof_spark, artifacts_dir, pytestconfig,
           deadline) -> Trials:
    return Trials(request.node.name, session_cluster, onceproof_spark, artifacts_dir,
                  pytestconfig.getoption("--shrink-budget"), deadline)


_SUITE_ROWS: list = []


@pytest.fixture(scope="session")
def suite_rows() -> list:
    return _SUITE_ROWS


def pytest_terminal_summary(terminalreporter) -> None:
    tr = terminalreporter
    if _CUT:
        tr.section("onceproof time limit")
        for name, n in sorted(_CUT.items()):
            tr.write_line(f"{name}: stopped by --time-limit after {n} cluster examples")
    if not _SUITE_ROWS:
        return
    tr.section("onceproof suites")
    head = f"{'suite':28} {'expected anomaly':22} {'caught':7} {'examples':>8} {'first failure':>14} {'shrunk size':>11} {'reproduced':>10}"
    tr.write_line(head)
    for r in _SUITE_ROWS:
        caught = ("passed" if r.caught else "FAILED") if not r.expect or r.expect.startswith("(") else (
            "yes" if r.caught else "NO")
        first = f"{r.seconds_to_first:.0f} s" if r.seconds_to_first is not None else "-"
        tr.write_line(f"{r.suite:28} {r.expect[:22]:22} {caught:7} {r.examples:>8} {first:>14} "
                      f"{r.shrunk_size or '-'!s:>11} {r.reproduced:>10}")
