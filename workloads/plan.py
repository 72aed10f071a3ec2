"""Plans: what to run, as plain JSON, so a plan can be saved, read, edited and replayed
without Hypothesis (format: docs/plans.md).

A plan names its topics, its clients (each with a role and config), and a list of steps.
A step is either a round of client operations, `{"ops": {client: op}}`, in which every
named client runs its op concurrently with the others, or a fault, `{"fault": {...}}`
(a kind of workloads/faults.py), applied between rounds. Faults are steps rather than
timers so that a plan means the same thing on every run, which is what lets Hypothesis
shrink it.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import faults

ROLES = {
    # role -> the ops it can run
    "producer": {"send"},
    "txn_producer": {"begin", "send", "commit", "abort"},
    "consumer": {"poll", "seek", "commit_offsets", "fetch_offsets"},
    "pipeline": {"process"},
}
SEEK_TO = {"beginning", "committed", "offset"}

DEFAULT_PRODUCER = {"enable.idempotence": True, "acks": "all", "retries": 2147483647,
                    "message.timeout.ms": 15000, "request.timeout.ms": 5000,
                    "linger.ms": 5}
DEFAULT_CONSUMER = {"isolation.level": "read_committed"}
DEFAULT_PIPELINE = {"offsets_in_txn": True, "rewind_on_abort": True}


class PlanError(ValueError):
    """A plan that cannot run; the message says where and what to change."""


def load(path: str | Path) -> dict:
    path = Path(path)
    try:
        plan = json.loads(path.read_text())
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise PlanError(f"{path} is not JSON ({exc}); pass a plan.json that onceproof saved") from None
    # A saved counterexample folder holds the plan beside its history and verdict.
    validate(plan.get("plan", plan) if isinstance(plan, dict) else plan)
    return plan.get("plan", plan)


def save(plan: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(plan, indent=1))


def validate(plan) -> None:
    def bad(where: str, what: str):
        raise PlanError(f"plan {where}: {what} (see docs/plans.md)")
    if not isinstance(plan, dict):
        bad("", "must be a JSON object")
    for key in ("topics", "clients", "steps"):
        if key not in plan:
            bad(key, "is missing")
    topics = plan["topics"]
    if not isinstance(topics, dict) or not topics:
        bad("topics", "must map topic names to {\"partitions\": N}")
    for name, spec in topics.items():
        if (not isinstance(spec, dict) or not isinstance(spec.get("partitions"), int)
                or spec["partitions"] < 1):
            bad(f"topics.{name}", "needs \"partitions\": a positive integer")
    clients = plan["clients"]
    if not isinstance(clients, dict) or not clients:
        bad("clients", "must map client ids to {\"role\": ...}")
    for cid, client in clients.items():
        if not isinstance(client, dict) or client.get("role") not in ROLES:
            bad(f"clients.{cid}", f"role must be one of {', '.join(sorted(ROLES))}")
        for key in ("topic", "input", "output"):
            if key in client and client[key] not in topics:
                bad(f"clients.{cid}.{key}", f"names no topic in plan.topics: {client[key]!r}")
    if not isinstance(plan["steps"], list):
        bad("steps", "must be a list")
    for i, step in enumerate(plan["steps"]):
        if not isinstance(step, dict) or len(step) != 1 or not ({"ops", "fault"} & set(step)):
            bad(f"steps[{i}]", "must be {\"ops\": {client: op}} or {\"fault\": {...}}")
        if "ops" in step:
            for cid, op in step["ops"].items():
                if cid not in clients:
                    bad(f"steps[{i}].ops", f"names no client in plan.clients: {cid!r}")
                role = clients[cid]["role"]
                if not isinstance(op, dict) or op.get("f") not in ROLES[role]:
                    bad(f"steps[{i}].ops.{cid}",
                        f"a {role} runs one of {', '.join(sorted(ROLES[role]))}")
                if op["f"] == "seek" and op.get("to") not in SEEK_TO:
                    bad(f"steps[{i}].ops.{cid}", f"seek needs \"to\": one of {', '.join(sorted(SEEK_TO))}")
        else:
            problem = faults.problem(step["fault"])
            if problem:
                bad(f"steps[{i}].fault", problem)


def size(plan: dict) -> int:
    """How big a counterexample is, for keeping the smallest: ops plus faults."""
    return sum(len(s["ops"]) if "ops" in s else 1 for s in plan["steps"])
