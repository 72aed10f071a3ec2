"""An upgrade under load: a drawn plan with a rolling upgrade and feature finalizations
added to what it does, while its clients go on (`onceproof run --upgrade-to`).

The nodes move one after another, in id order, spread over the run (the first a
little after the start, so the clients are writing by then), and the features are
finalized after the last node, each in its own step, so that a plan can finalize one
without another and the report shows each.
"""
from __future__ import annotations

import copy

from .faults import RELEASE_KINDS


def release_steps(nodes: int, to: str | None, finalize: dict) -> list[dict]:
    """The fault steps of the change: each node to `to`, then each feature's level."""
    moves = [{"f": "upgrade", "node": node, "to": to} for node in range(1, nodes + 1)] if to else []
    return moves + [{"f": "finalize", "feature": name, "level": level}
                    for name, level in finalize.items()]


def with_release_change(plan: dict, nodes: int, to: str | None, finalize: dict,
                        first: float | None = None, every: float | None = None) -> dict:
    """`plan` with release_steps spread over it: in a concurrent plan at even seconds
    of its duration (or, given `first` and `every`, from second `first` on, one every
    `every` seconds), in a rounds plan between its rounds at even intervals."""
    steps = release_steps(nodes, to, finalize)
    if not steps:
        return plan
    out = copy.deepcopy(plan)
    gaps = len(steps) + 1
    if "duration" in out:
        at = ([min(out["duration"], round(first + i * every)) for i in range(len(steps))]
              if first is not None and every is not None else
              [round(out["duration"] * (i + 1) / gaps) for i in range(len(steps))])
        out["schedule"] = sorted(out.get("schedule", []) + [
            {"at": t, "fault": step} for t, step in zip(at, steps)], key=lambda e: e["at"])
        return out
    rounds = out["steps"]
    places = [len(rounds) * (i + 1) // gaps for i in range(len(steps))]
    for offset, (place, step) in enumerate(zip(places, steps)):
        rounds.insert(place + offset, {"fault": step})
    return out


def alternate_libraries(plan: dict, libraries: tuple[str, ...],
                        transactional: frozenset[str] = frozenset()) -> dict:
    """`plan` with its clients spread over client libraries in turn, in the plan's order:
    the clients of `transactional` roles from the first library on, the others from the
    second, so that even a plan of one transactional client has it on the first
    library (the Java client, whose protocol the history shows) and its other clients
    on the second. A streams client stays on Kafka Streams. `libraries` empty: as is."""
    if not libraries:
        return plan
    out = copy.deepcopy(plan)
    turn = {True: 0, False: 1}
    for spec in out["clients"].values():
        if spec.get("role") == "streams":
            continue
        kind = spec.get("role") in transactional
        spec["client"] = libraries[turn[kind] % len(libraries)]
        turn[kind] += 1
    return out


def restart_after_finalize(plan: dict, roles: frozenset[str], library: str) -> dict:
    """A concurrent `plan` whose clients of `roles` on `library` are restarted (crashed
    and replaced under their own id) one after another right after the last finalize,
    as an operator rolls the applications once a feature is on: a running Java producer
    keeps the transaction protocol it started with until it connects anew
    (docs/findings.md, 2026-12-05). A rounds plan, or one without a finalize, is as is."""
    schedule = plan.get("schedule")
    finals = [e["at"] for e in schedule or () if (e.get("fault") or {}).get("f") == "finalize"]
    if not finals:
        return plan
    out = copy.deepcopy(plan)
    chosen = [cid for cid, spec in out["clients"].items()
              if spec.get("role") in roles and spec.get("client") == library]
    out["schedule"] = sorted(out["schedule"] + [
        {"at": min(max(finals) + 1 + i, out["duration"]), "crash": cid}
        for i, cid in enumerate(chosen)], key=lambda e: e["at"])
    return out


HEAL_ALL = {"f": "heal", "all": True}


def heal_before_changes(plan: dict) -> dict:
    """`plan` with every fault healed, and every node resumed and started, right before
    each upgrade, downgrade and finalize, as an operator waits for a healthy cluster
    before touching the next node. A move waits for its node to be back in the ISR,
    which a fault in force (a paused leader, a partition) could hold back until the
    move gives up, while the nemesis, busy with the move, could not undo it."""
    out = copy.deepcopy(plan)

    def changes(step) -> bool:
        return (step or {}).get("f") in RELEASE_KINDS
    if "duration" in out:
        schedule: list[dict] = []
        for entry in out.get("schedule", []):
            if changes(entry.get("fault")):
                schedule.append({"at": entry["at"], "fault": dict(HEAL_ALL)})
            schedule.append(entry)
        out["schedule"] = schedule
        return out
    steps: list[dict] = []
    for step in out["steps"]:
        if changes(step.get("fault")):
            steps.append({"fault": dict(HEAL_ALL)})
        steps.append(step)
    out["steps"] = steps
    return out
