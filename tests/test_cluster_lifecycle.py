"""The harness cleans up after itself however it ends, and the detached CLI cluster works.

Each test starts its own cluster in a subprocess, because what is tested is what happens
to the cluster's processes when the process that owns them ends.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka.admin import AdminClient

from onceproof.cluster.provision import CI_KAFKA_VERSIONS, DEFAULT_KAFKA_VERSION

pytestmark = pytest.mark.cluster

HARNESS = """
import sys, time
from onceproof.cluster.cluster import Cluster
c = Cluster(sys.argv[1], 3, sys.argv[2] if len(sys.argv) > 2 else None)
with c:
    print("READY", flush=True)
    time.sleep(600)
"""


def _alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            pass
    return out


def _wait_gone(pids, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(pids)


def _start_harness(root: Path, *args: str) -> tuple[subprocess.Popen, list[int]]:
    # Its stderr goes to a file beside the cluster, so a start that fails says why.
    err = root.parent / f"{root.name}.stderr"
    with open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", HARNESS, str(root), *args],
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "READY", (f"harness did not start a cluster (said {line!r}); "
                                     f"its stderr ended: {err.read_text()[-2000:]}")
    pids = list(json.loads((root / "state.json").read_text())["pids"].values())
    assert len(_alive(pids)) == 4  # three nodes and toxiproxy
    return proc, pids


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=["crash", "sigterm", "ctrl-c"])
def test_no_orphans_when_the_harness_ends(tmp_path, sig):
    proc, pids = _start_harness(tmp_path / "c")
    proc.send_signal(sig)
    proc.wait(60)
    assert _wait_gone(pids) == []
    # Logs survive for the user.
    assert (tmp_path / "c" / "node1" / "server.log").stat().st_size > 0


def test_detached_cluster_up_status_down(tmp_path):
    root = tmp_path / "detached"
    env = dict(os.environ)
    up = subprocess.run(["onceproof", "cluster", "up", "--dir", str(root)],
                        capture_output=True, text=True, env=env, timeout=300)
    assert up.returncode == 0, up.stderr
    assert "ready" in up.stdout
    try:
        st = json.loads(subprocess.run(
            ["onceproof", "cluster", "status", "--dir", str(root), "--json"],
            capture_output=True, text=True, check=True).stdout)
        assert [n["alive"] for n in st["nodes"]] == [True, True, True]
        assert len(st["proxies"]) == 3 + 2 * 3 * 2  # client, and repl + ctl per ordered pair
        assert all(p["enabled"] for p in st["proxies"].values())
        # Ready includes the coordinators: a plan's first poll or transaction does not
        # wait for the internal topics to be created.
        internal = AdminClient({"bootstrap.servers": st["bootstrap"]}).list_topics(timeout=10).topics
        assert {"__consumer_offsets", "__transaction_state"} <= set(internal)
        again = subprocess.run(["onceproof", "cluster", "up", "--dir", str(root)],
                               capture_output=True, text=True)
        assert again.returncode == 2 and "already running" in again.stderr
    finally:
        down = subprocess.run(["onceproof", "cluster", "down", "--dir", str(root)],
                              capture_output=True, text=True)
    assert down.returncode == 0
    pids = list(json.loads((root / "state.json").read_text())["pids"].values())
    assert _wait_gone(pids) == []


@pytest.mark.parametrize("version", [v for v in CI_KAFKA_VERSIONS if v != DEFAULT_KAFKA_VERSION])
def test_other_tested_version_accepts_the_topology(tmp_path, version):
    proc, pids = _start_harness(tmp_path / "c", version)
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    assert _wait_gone(pids) == []


def test_unknown_version_is_one_clear_line(tmp_path):
    out = subprocess.run(["onceproof", "cluster", "up", "--dir", str(tmp_path / "x"),
                          "--kafka-version", "banana"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "unknown Kafka version" in out.stderr
    assert "Traceback" not in out.stderr
