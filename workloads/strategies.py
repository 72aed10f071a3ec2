"""Hypothesis strategies for plans. They compose: `fault()` is a value a user can reuse,
and `plans()` puts a workload's clients, rounds and faults together.

Generated plans keep their structure meaningful under shrinking: a transaction is drawn
as begin / sends / commit-or-abort in consecutive rounds, and a fault that needs undoing
(pause, kill, a toxic) is drawn with its undo a few rounds later. Shrinking may still cut
a plan into pieces that do not fit; the runner skips ops that are not legal in a client's
state, so every shrunk plan still runs.
"""
from __future__ import annotations

from hypothesis import strategies as st

from .faults import SETS, drawn

# What each workload runs: its topics and clients. Suites (workloads/suites.py) override
# configs to make known-bad or known-good applications out of the same shapes.
WORKLOADS: dict[str, dict[str, dict]] = {
    "producers": {
        "topics": {"t": {"partitions": 2}},
        "clients": {"p0": {"role": "producer"}, "p1": {"role": "producer"},
                    "c0": {"role": "consumer"}},
    },
    "transactions": {
        "topics": {"t": {"partitions": 2}},
        "clients": {"t0": {"role": "txn_producer"}, "t1": {"role": "txn_producer"},
                    "c0": {"role": "consumer"}},
    },
    "pipeline": {
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
        "clients": {"p0": {"role": "producer", "topic": "in"},
                    "x0": {"role": "pipeline", "input": "in", "output": "out"},
                    "c0": {"role": "consumer", "topic": "out"}},
    },
    "rewind": {
        "topics": {"t": {"partitions": 2}},
        "clients": {"p0": {"role": "producer"}, "c0": {"role": "consumer"},
                    "c1": {"role": "consumer", "group": "c0"}},
    },
}


def fault(kinds=SETS["mixed"], nodes: int = 3) -> st.SearchStrategy:
    """One fault (a kind or preset of workloads/faults.py) with its undo, as a list of
    (rounds to wait, fault step)."""
    return st.sampled_from(kinds).flatmap(lambda kind: drawn(kind, nodes))


def client_op(role: str, state: dict, draw, options: dict) -> dict | None:
    """The next op of a client, given what it has open (a transaction)."""
    if role == "producer":
        return {"f": "send", "n": draw(st.integers(1, 3))}
    if role == "txn_producer":
        if not state.get("open"):
            state["open"] = True
            return {"f": "begin"}
        choice = draw(st.sampled_from(options.get("txn_ops", ["send", "send", "commit", "abort"])))
        if choice == "send":
            return {"f": "send", "n": draw(st.integers(1, 3))}
        state["open"] = False
        return {"f": choice}
    if role == "consumer":
        choice = draw(st.sampled_from(options.get("consumer_ops", ["poll", "poll", "poll", "seek",
                                                                  "commit_offsets", "fetch_offsets"])))
        if choice == "seek":
            return {"f": "seek", "to": draw(st.sampled_from(["beginning", "committed", "offset"])),
                    "back": draw(st.integers(1, 3))}
        return {"f": choice}
    if role == "pipeline":
        op = {"f": "process", "n": draw(st.integers(1, 5))}
        if draw(st.integers(0, 99)) < options.get("abort_percent", 20):
            op["abort"] = True
        elif draw(st.integers(0, 99)) < options.get("crash_percent", 0):
            op["crash"] = True
        return op
    return None


@st.composite
def plans(draw, workload: str = "pipeline", faults=SETS["mixed"], min_rounds: int = 2,
          max_rounds: int = 10, fault_percent: int = 25, nodes: int = 3,
          config: dict | None = None, options: dict | None = None) -> dict:
    """A whole plan for one of WORKLOADS, with config overrides merged in.

    config may set "topics", "producer", "consumer" (plan-wide client config) and
    "clients" (per-client spec overrides); options tune op mixes (abort_percent, crash_percent,
    consumer_ops)."""
    base = WORKLOADS[workload]
    config, options = config or {}, options or {}
    topics = config.get("topics", base["topics"])
    clients = {cid: {**spec, **config.get("clients", {}).get(cid, {})}
               for cid, spec in base["clients"].items()}
    plan = {"topics": topics, "clients": clients, "steps": []}
    for key in ("producer", "consumer"):
        if key in config:
            plan[key] = config[key]
    state: dict[str, dict] = {cid: {} for cid in clients}
    pending: list[tuple[int, dict]] = []  # undo steps, with rounds left before they apply
    n_rounds = draw(st.integers(min_rounds, max_rounds))
    for _ in range(n_rounds):
        if faults and draw(st.integers(0, 99)) < fault_percent:
            steps = draw(fault(faults, nodes))
            plan["steps"].append({"fault": steps[0][1]})
            pending += steps[1:]
        # Workloads list their writer first, and Hypothesis's simplest choice is the first
        # element, so the simplest round writes rather than polling an empty topic.
        active = list(clients) if options.get("all_clients") else draw(
            st.lists(st.sampled_from(list(clients)), min_size=1, unique=True))
        ops = {}
        for cid in sorted(active):
            op = client_op(clients[cid]["role"], state[cid], draw, options)
            if op:
                ops[cid] = op
        plan["steps"].append({"ops": ops})
        due = [f for wait, f in pending if wait <= 1]
        pending = [(wait - 1, f) for wait, f in pending if wait > 1]
        plan["steps"] += [{"fault": f} for f in due]
    plan["steps"] += [{"fault": f} for _, f in pending]
    # Close what is open so the final state is not decided by the settle timeout alone.
    closing = {cid: {"f": "commit"} for cid, s in state.items() if s.get("open")}
    if closing:
        plan["steps"].append({"ops": closing})
    return plan
