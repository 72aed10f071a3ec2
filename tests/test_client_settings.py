"""Your client settings on a local run (issue 59 point 2): `onceproof run
--producer-config ... --consumer-config ...` on a cluster the harness starts; the
history's cluster op and the report list the settings in force."""
from __future__ import annotations

import json
import subprocess

import pytest

from onceproof.history.read import read_events

pytestmark = pytest.mark.cluster


def test_a_local_run_runs_with_your_producer_and_consumer_settings(tmp_path):
    settings = tmp_path / "producer.properties"
    settings.write_text("linger.ms=20\ncompression.type=lz4\n")
    out = subprocess.run(
        ["onceproof", "run", "--mode", "rounds", "--rounds", "4", "--faults", "none",
         "--seed", "7", "--workload", "transactions", "--producer-config-file", str(settings),
         "--producer-config", "linger.ms=50", "--consumer-config", "fetch.wait.max.ms=100",
         "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = next((tmp_path / "out").glob("*/run-1"))
    plan = json.loads((run / "plan.json").read_text())
    # Written into the plan (a replay runs with them), the flag over the file.
    assert plan["producer"] == {"linger.ms": 50, "compression.type": "lz4"}
    assert plan["consumer"] == {"fetch.wait.max.ms": 100}
    cluster_op = next(e for e in read_events(run / "history.jsonl") if e["f"] == "cluster")
    force = cluster_op["value"]["client_settings"]
    assert force["producer"]["linger.ms"] == 50 and force["producer"]["compression.type"] == "lz4"
    assert force["producer"]["acks"] == "all"  # the harness's defaults beside them
    assert force["consumer"]["fetch.wait.max.ms"] == 100
    report = (run / "report.html").read_text()
    assert "producer settings in force" in report and "linger.ms=50" in report
