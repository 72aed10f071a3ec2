"""The checkers on a real standalone Spark cluster, not only in local mode.

A master and one worker (1 core, 1 GB) are started from pyspark's own launcher
(`bin/spark-class`, since the pip package ships no sbin/start-master.sh), bound to
127.0.0.1 on free ports. `onceproof check --spark-master spark://...` runs in a
subprocess, because a JVM holds one SparkContext and the test session's local one must
stay up for the other tests. The verdict must equal the local one, and the master must
have seen the application, so a silent fallback to local mode cannot pass.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from onceproof.checkers import check
from tests.support.synth.clients import synthesize, write_history
from tests.support.synth.scenarios import inject

pytestmark = pytest.mark.spark_cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).resolve().parent


def _master_state(ui_port: int) -> dict:
    """The master's state, or {} while its UI is still starting: then its root page
    may answer every path, /json/ too, with HTML (seen once on a loaded CI machine)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
        body = r.read()
    try:
        return json.loads(body)
    except ValueError:
        return {}


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each daemon's process group (spark-class execs java, but its launcher
    may leave helpers), then SIGKILL what is left, and reap."""
    for p in reversed(procs):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in reversed(procs):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)


@contextlib.contextmanager
def standalone_cluster(tmp_path: Path):
    """A master and one worker, stopped (and reaped) on exit whatever happened."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    home = _spark_home()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(tmp_path / "logs"), SPARK_WORKER_DIR=str(tmp_path / "work"),
               # Daemons are bookkeeping only; the executor's memory is the worker's 1g.
               SPARK_DAEMON_MEMORY="256m", SPARK_NO_DAEMONIZE="1")
    port, ui = _free_port(), _free_port()
    wport, wui = _free_port(), _free_port()
    spark_class = str(home / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        for name, args in (
            ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(port), "--webui-port", str(ui)]),
            ("worker", ["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                        "--host", "127.0.0.1", "--port", str(wport), "--webui-port", str(wui),
                        "--cores", "1", "--memory", "1g",
                        "--work-dir", str(tmp_path / "work")]),
        ):
            # Open while the cluster runs; closed after it stops.
            log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115
            logs.append(log)
            procs.append(subprocess.Popen([spark_class, *args], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
            if name == "master":
                time.sleep(1)
        deadline = time.monotonic() + 120
        while True:
            for p in procs:
                assert p.poll() is None, (tmp_path / "master.log").read_text()[-3000:] + \
                    (tmp_path / "worker.log").read_text()[-3000:]
            try:
                if _master_state(ui).get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the worker never registered with the master"
            time.sleep(1)
        yield {"url": f"spark://127.0.0.1:{port}", "ui": ui, "pids": [p.pid for p in procs],
               "logs": tmp_path}
    finally:
        _stop(procs)
        for log in logs:
            log.close()


@pytest.fixture
def standalone(tmp_path):
    with standalone_cluster(tmp_path / "cluster") as c:
        yield c


_REMOTE = """
import sys
from onceproof.checkers import check
verdict = check(sys.argv[1], spark_master=sys.argv[2], local=False)
open(sys.argv[3], "w").write(verdict.to_json())
"""


def test_check_on_a_standalone_cluster_matches_local_mode(spark, standalone, tmp_path):
    # One violation and, most likely, a few notes: counts to compare, not just "valid".
    events = inject(synthesize(21, ops=120), "lost_write", random.Random(21))
    history = write_history(events, tmp_path / "history.jsonl")
    # local=False: a history this small would otherwise be checked in pandas, without
    # Spark (and `onceproof check` has no switch for that), which would prove nothing.
    local = check(history, spark, local=False)
    assert local.stats["engine"] == "spark"
    assert not local.valid and local.counts.get("lost_write") == 1

    out = tmp_path / "verdict.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("ONCEPROOF_SPARK_MASTER", None)
    done = subprocess.run([sys.executable, "-c", _REMOTE, str(history), standalone["url"],
                           str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    remote = json.loads(out.read_text())
    assert remote["stats"]["engine"] == "spark"
    assert remote["valid"] == local.valid
    assert remote["counts"] == local.counts
    assert sorted(remote["notes"]) == sorted(local.notes)

    state = _master_state(standalone["ui"])
    apps = state.get("completedapps", []) + state.get("activeapps", [])
    assert [a["name"] for a in apps] == ["onceproof-check"], "the check never ran on the master"


def test_no_daemon_outlives_the_cluster(tmp_path):
    """The teardown is what keeps orphan JVMs off a shared CI box."""
    with standalone_cluster(tmp_path) as c:
        procs = [psutil.Process(pid) for pid in c["pids"]]
        procs += [k for p in procs for k in p.children(recursive=True)]
        assert all(p.is_running() for p in procs)
    _, alive = psutil.wait_procs(procs, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
