"""An upgrade under load: a drawn plan with a rolling upgrade and feature finalizations
added to what it does, while its clients go on (`onceproof run --upgrade-to`).

The nodes move one after another, in id order, spread over the run (the first a
little after the start, so the clients are writing by then), and the features are
finalized after the last node, each in its own step, so that a plan can finalize one
without another and the report shows each.
"""
from __future__ import annotations

import copy


def release_steps(nodes: int, to: str | None, finalize: dict) -> list[dict]:
    """The fault steps of the change: each node to `to`, then each feature's level."""
    moves = [{"f": "upgrade", "node": node, "to": to} for node in range(1, nodes + 1)] if to else []
    return moves + [{"f": "finalize", "feature": name, "level": level}
                    for name, level in finalize.items()]


def with_release_change(plan: dict, nodes: int, to: str | None, finalize: dict) -> dict:
    """`plan` with release_steps spread over it: in a concurrent plan at even seconds
    of its duration, in a rounds plan between its rounds at even intervals."""
    steps = release_steps(nodes, to, finalize)
    if not steps:
        return plan
    out = copy.deepcopy(plan)
    gaps = len(steps) + 1
    if "duration" in out:
        at = [round(out["duration"] * (i + 1) / gaps) for i in range(len(steps))]
        out["schedule"] = sorted(out.get("schedule", []) + [
            {"at": t, "fault": step} for t, step in zip(at, steps)], key=lambda e: e["at"])
        return out
    rounds = out["steps"]
    places = [len(rounds) * (i + 1) // gaps for i in range(len(steps))]
    for offset, (place, step) in enumerate(zip(places, steps)):
        rounds.insert(place + offset, {"fault": step})
    return out

