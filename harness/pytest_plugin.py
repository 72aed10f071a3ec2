"""pytest plugin (entry point `onceproof`): a cluster per test session, options to pick
what it runs, and a fixture that hands each test a healthy cluster.

The cluster is expensive (three JVMs), so one serves the whole session; each test that
breaks it gets it back healed (`heal_all`), and each workload example uses fresh topics,
groups and transactional ids, so examples do not see each other.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("onceproof")
    group.addoption("--kafka-version", default=os.environ.get("ONCEPROOF_KAFKA_VERSION"),
                    help="Kafka release to test (default: the newest tested 4.x)")
    group.addoption("--nodes", type=int, default=3, help="KRaft nodes in the test cluster")
    group.addoption("--spark-master", default=os.environ.get("ONCEPROOF_SPARK_MASTER"),
                    help="Spark master for the checkers (default: local)")
    group.addoption("--artifacts", default=os.environ.get("ONCEPROOF_ARTIFACTS", "artifacts"),
                    help="where failing examples leave plans, histories, verdicts and logs")


@pytest.fixture(scope="session")
def artifacts_dir(pytestconfig: pytest.Config) -> Path:
    path = Path(pytestconfig.getoption("--artifacts")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def session_cluster(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory):
    from harness.cluster import Cluster
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
