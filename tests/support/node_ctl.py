"""A user's own node script, as the bring-your-own-cluster test drives the harness's
cluster through it: it knows the cluster only from its state file, as an operator knows
a systemd unit, and nothing of the harness's process handling.

    python node_ctl.py start ROOT NODE   start node NODE of the cluster in ROOT, detached
    python node_ctl.py stop-all ROOT     SIGKILL every node this script started

Killing, pausing and resuming need no script: `pkill -KILL -f ROOT/nodeN/server.properties`.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def start(root: Path, node: str) -> None:
    argv = json.loads((root / "state.json").read_text())["start_commands"][node]
    with open(root / f"node{node}" / "stdout.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    with open(root / "started-by-script.pids", "a") as pids:
        pids.write(f"{proc.pid}\n")
    print(f"started node {node}: pid {proc.pid}")


def stop_all(root: Path) -> None:
    path = root / "started-by-script.pids"
    for pid in path.read_text().split() if path.exists() else []:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    what, root = sys.argv[1], Path(sys.argv[2])
    start(root, sys.argv[3]) if what == "start" else stop_all(root)
