"""Hunts (workloads/suites.py HUNTS) run: each is searched briefly on the session cluster,
its targeted faults fire on the node they aim at, and its clients do what the exposure
needs. Whether a hunt finds anything is a fact about Kafka and librdkafka, not about the
harness: it is reported in the session's table, never asserted. `onceproof hunts` runs
them with real budgets (docs/findings.md)."""
from __future__ import annotations

import os
from collections import Counter

import pytest

from onceproof.history.read import read_events
from onceproof.search import hunt
from onceproof.workloads import faults
from onceproof.workloads.suites import HUNTS

pytestmark = pytest.mark.cluster

EXAMPLES = int(os.environ.get("ONCEPROOF_HUNT_EXAMPLES", 1))
BUDGET = float(os.environ.get("ONCEPROOF_HUNT_BUDGET", 60))
# What each hunt's clients must have done for its run to count as a try.
EVIDENCE = {"delayed_end_txn": "commit_txn", "idempotent_leader_churn": "acknowledged_writes",
            "send_offsets_hang": "send_offsets", "kip848_rebalance": "send_offsets",
            "late_txn_requests": "commit_txn", "late_pipeline_requests": "send_offsets"}


def test_every_hunt_names_its_evidence():
    assert set(EVIDENCE) == set(HUNTS)


@pytest.mark.parametrize("name", list(HUNTS))
def test_hunt_runs_with_its_faults_on_target(name, cluster, pytestconfig, artifacts_dir,
                                             suite_rows, deadline):
    if not HUNTS[name].applies_to(cluster.dist.version):
        pytest.skip(f"{name} applies from Kafka {HUNTS[name].since}")
    result = hunt(HUNTS[name], cluster, artifacts_dir / "hunts",
                  pytestconfig.getoption("--spark-master"), max_examples=EXAMPLES, budget=BUDGET,
                  replays=0, seed=0, deadline=deadline, mode="concurrent")
    if result.cut and not result.examples:
        pytest.skip(f"the session's --time-limit stopped {name} before its first plan")
    suite_rows.append(result)
    assert result.exercised.get(EVIDENCE[name]), (name, result.exercised)
    assert result.exercised.get("faults"), (name, result.exercised)
    histories = sorted((artifacts_dir / "hunts" / "trials" / f"{name}-concurrent").glob("*/history.jsonl"))
    assert histories
    aimed = reassigned = acted = 0
    for history in histories:
        events = read_events(history)
        assigned = Counter(e["process"] for e in events
                           if e["f"] == "assign" and e["type"] == "ok" and not e.get("final"))
        reassigned += sum(n - 1 for n in assigned.values())
        invoked = {e["op"]: e["value"] for e in events
                   if e["process"] == "nemesis" and e["type"] == "invoke"}
        acted += sum(1 for e in events if e["f"] == faults.REQUEST_EVENT
                     and e["value"].get("event") in ("hold", "drop_response", "duplicate"))
        for e in events:
            if e["process"] != "nemesis" or e["type"] == "invoke" or e["f"] not in faults.FAULTS:
                continue
            if e["f"] in faults.ACTIONS and "client" in invoked[e["op"]]:
                # Aimed at a client's requests: one fault over the links it named.
                aimed += 1
                assert e["type"] == "ok" and e["value"]["fault_id"], e
            targets = faults.targets(invoked[e["op"]]) if faults.problem(invoked[e["op"]]) is None else []
            if any(t in ("txn_coordinator", "group_coordinator") or arg for t, arg in targets):
                aimed += 1
                assert e["type"] == "ok" and isinstance(e["value"]["node"], int), e
                assert e["value"]["node"] in cluster.nodes
    assert aimed, f"{name}: no fault aimed at a coordinator, a partition's leader or a client fired"
    if any(faults.kind_of(f) in faults.ACTIONS for f in HUNTS[name].faults):
        assert acted, f"{name}: no request fault held, dropped the response of, or repeated a request"
    if HUNTS[name].config.get("consumer", {}).get("group.protocol") == "consumer":
        # The group moved partitions between members while they ran.
        assert reassigned, f"{name}: no subscribed consumer's assignment changed"
