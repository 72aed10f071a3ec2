"""What the Java client does when transaction.version=2 is finalized under it (docs/
findings.md, "The Java client and the v2 finalize"): a 4.4.0 cluster formatted at
transaction.version=1, a plan of Java transactional producers that finalizes 2 during
the run, then each process's transaction protocol per begin_txn, before and after.

    python docs/findings/java-v2-switch-4.4.0/measure.py PLAN.json OUT_DIR
"""
import json
import sys
from collections import Counter
from pathlib import Path

from onceproof.checkers.verdict import check
from onceproof.cluster.cluster import Cluster
from onceproof.history.read import read_events
from onceproof.run.execute import run

plan, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
with Cluster(out / "cluster", 3, "4.4.0", features={"transaction.version": 1}) as cluster:
    run(plan, cluster, out / "run")
    print("transaction.version at the end:", cluster.described_features()["transaction.version"])
events = read_events(out / "run" / "history.jsonl")
t0 = events[0]["time"]
done = {e["f"]: e["time"] for e in events if e["process"] == "nemesis" and e["type"] == "ok"}
begun = {e["op"]: e["time"] for e in events if e["type"] == "invoke"}
seen: Counter = Counter()
for e in events:
    if e["f"] == "begin_txn" and e["type"] == "ok":
        when = "before" if begun[e["op"]] < done["finalize"] else "after"
        seen[e["process"], when, f"v{e['value'].get('txn_protocol')}"] += 1
print({f: round((t - t0) / 1e9, 1) for f, t in done.items()})
for (process, when, protocol), n in sorted(seen.items()):
    print(f"{process}: {n} begin_txn {when} the finalize on {protocol}")
print("valid:", check(out / "run" / "history.jsonl").valid)
