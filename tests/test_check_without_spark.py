"""A check that runs locally (every check without a Spark master) never starts Spark: no
pyspark import, no JVM. Run in a fresh interpreter, so nothing else has loaded pyspark."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.histories import History

_SCRIPT = """
import json, os, sys
from onceproof.checkers import check
verdict = check(sys.argv[1])
children = []
for pid in os.listdir("/proc"):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                children.append(f.read().replace(b"\\0", b" ").decode())
    except (OSError, ValueError, IndexError):
        continue
print(json.dumps({"valid": verdict.valid, "engine": verdict.stats["engine"],
                  "spark_modules": sorted(m for m in sys.modules if m.split(".")[0] in
                                          ("pyspark", "py4j")),
                  "children": children}))
"""


def test_a_small_history_is_checked_without_spark(tmp_path):
    with History(tmp_path / "h.jsonl") as h:
        h.send("p0", [(0, 1, 0), (0, 2, 1)])
        h.txn("p1", "A", [(0, 3, 2)])
        h.poll("c0", [(0, 0, 1), (0, 1, 2), (0, 2, 3)])
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(h.path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["valid"] and out["engine"] == "local"
    assert out["spark_modules"] == []
    assert not [c for c in out["children"] if "java" in c], out["children"]
