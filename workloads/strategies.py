"""Hypothesis strategies for plans. They compose: `fault()` is a value a user can reuse,
`plans()` puts a workload's clients, rounds and faults together, and `concurrent_plans()`
scales a workload's clients out and draws their seeds and the nemesis's schedule.

Generated plans keep their structure meaningful under shrinking: a transaction is drawn
as begin / sends / commit-or-abort in consecutive rounds, and a fault that needs undoing
(pause, kill, a toxic) is drawn with its undo a few rounds later. Shrinking may still cut
a plan into pieces that do not fit; the runner skips ops that are not legal in a client's
state, so every shrunk plan still runs.
"""
from __future__ import annotations

from hypothesis import strategies as st

from .faults import SETS, drawn
from .ops import (
    CONSUMER,
    PIPELINE,
    PRODUCER,
    RW_TXN,
    STREAMS,
    TRANSACTIONAL,
    TXN_PRODUCER,
    Drawn,
    closing_op,
    next_op,
)
from .plan import FRESH, SAME, VALUE_SETTINGS

# What each workload runs: its topics and clients. Suites (workloads/suites.py) override
# configs to make known-bad or known-good applications out of the same shapes.
WORKLOADS: dict[str, dict[str, dict]] = {
    "producers": {
        "topics": {"t": {"partitions": 2}},
        "clients": {"p0": {"role": PRODUCER}, "p1": {"role": PRODUCER},
                    "c0": {"role": CONSUMER}},
    },
    "transactions": {
        "topics": {"t": {"partitions": 2}},
        "clients": {"t0": {"role": TXN_PRODUCER}, "t1": {"role": TXN_PRODUCER},
                    "c0": {"role": CONSUMER},
                    # Its transactions commit its group's offsets, as a read-process-write
                    # application's do.
                    "w0": {"role": RW_TXN, "offsets_in_txn": True}},
    },
    "pipeline": {
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
        "clients": {"p0": {"role": PRODUCER, "topic": "in"},
                    "x0": {"role": PIPELINE, "input": "in", "output": "out"},
                    "c0": {"role": CONSUMER, "topic": "out"}},
    },
    "rewind": {
        "topics": {"t": {"partitions": 2}},
        "clients": {"p0": {"role": PRODUCER}, "c0": {"role": CONSUMER},
                    "c1": {"role": CONSUMER, "group": "c0"}},
    },
    # A Kafka Streams application (exactly_once_v2, a fold: docs/plans.md) between a
    # producer and a read_committed consumer; its copies are instances of one application.
    "streams": {
        "topics": {"in": {"partitions": 2}, "out": {"partitions": 2}},
        "clients": {"p0": {"role": PRODUCER, "topic": "in"},
                    "s0": {"role": STREAMS, "input": "in", "output": "out"},
                    "c0": {"role": CONSUMER, "topic": "out"}},
    },
}


def fault(kinds=SETS["mixed"], nodes: int = 3, plan: dict | None = None) -> st.SearchStrategy:
    """One fault (a kind or preset of workloads/faults.py) with its undo, as a list of
    (rounds to wait, fault step); targeted presets aim at `plan`'s clients and partitions."""
    return st.sampled_from(kinds).flatmap(lambda kind: drawn(kind, nodes, plan=plan))


@st.composite
def plans(draw, workload: str = "pipeline", faults=SETS["mixed"], min_rounds: int = 2,
          max_rounds: int = 10, fault_percent: int = 25, nodes: int = 3,
          config: dict | None = None, options: dict | None = None) -> dict:
    """A whole plan for one of WORKLOADS, with config overrides merged in.

    config may set "topics", "producer", "consumer" (plan-wide client config),
    "broker" (broker settings) and "clients" (per-client spec overrides); options tune
    op mixes (abort_percent, crash_percent, consumer_ops), and their record value
    settings (value_bytes, value_content) go into the plan's mix as in concurrent plans."""
    base = WORKLOADS[workload]
    config, options = config or {}, options or {}
    topics = config.get("topics", base["topics"])
    clients = {cid: {**spec, **config.get("clients", {}).get(cid, {})}
               for cid, spec in base["clients"].items()}
    plan = {"topics": topics, "clients": clients, "steps": []}
    if values := {k: options[k] for k in VALUE_SETTINGS if k in options}:
        plan["mix"] = values
    for key in ("producer", "consumer", "broker"):
        if key in config:
            plan[key] = config[key]
    state: dict[str, dict] = {cid: {} for cid in clients}
    pending: list[tuple[int, dict]] = []  # undo steps, with rounds left before they apply
    n_rounds = draw(st.integers(min_rounds, max_rounds))
    for _ in range(n_rounds):
        if faults and draw(st.integers(0, 99)) < fault_percent:
            steps = draw(fault(faults, nodes, plan))
            plan["steps"].append({"fault": steps[0][1]})
            pending += steps[1:]
        # Workloads list their writer first, and Hypothesis's simplest choice is the first
        # element, so the simplest round writes rather than polling an empty topic.
        active = list(clients) if options.get("all_clients") else draw(
            st.lists(st.sampled_from(list(clients)), min_size=1, unique=True))
        ops = {}
        for cid in sorted(active):
            op = next_op(clients[cid]["role"], state[cid], Drawn(draw), options)
            if op:
                ops[cid] = op
        plan["steps"].append({"ops": ops})
        due = [f for wait, f in pending if wait <= 1]
        pending = [(wait - 1, f) for wait, f in pending if wait > 1]
        plan["steps"] += [{"fault": f} for f in due]
    plan["steps"] += [{"fault": f} for _, f in pending]
    # Close what is open so the final state is not decided by the settle timeout alone.
    closing = {cid: op for cid, s in state.items()
               if (op := closing_op(clients[cid]["role"], s)) is not None}
    if closing:
        plan["steps"].append({"ops": closing})
    return plan


@st.composite
def concurrent_plans(draw, workload: str = "pipeline", faults=SETS["mixed"],
                     duration: tuple[int, int] = (60, 60), clients_per_node: int = 3,
                     nodes: int = 3, partitions: int = 6, interval: float = 10.0,
                     rate: float | None = None, crash_every: float | None = 30.0,
                     min_clients: int | None = None, min_faults: int = 1,
                     config: dict | None = None,
                     options: dict | None = None) -> dict:
    """A concurrent plan for one of WORKLOADS: its clients dealt out to
    clients_per_node * nodes clients (copies of a template client share its config and
    overrides; copies of a pipeline split its input partitions and share its group), a
    seed each, and a schedule of at least min_faults and about one fault per `interval`
    seconds, each undone after a hold of up to 1.5 intervals (so faults may overlap),
    plus about one client crash per `crash_every` seconds.

    Shrinking removes faults and crashes, shortens the duration toward its minimum and
    deals fewer clients (down to min_clients, default one of each template)."""
    base = WORKLOADS[workload]
    config, options = config or {}, options or {}
    topics = config.get("topics") or {t: {"partitions": partitions} for t in base["topics"]}
    templates = {cid: {**spec, **config.get("clients", {}).get(cid, {})}
                 for cid, spec in base["clients"].items()}
    total = clients_per_node * nodes
    n = draw(st.integers(min(min_clients or len(templates), total), total))
    clients = deal(templates, n, topics)
    seconds = draw(st.integers(*duration))
    # Polls wait briefly: a client that is caught up should get on with its next op,
    # not idle for the second a round-based poll allows for records to arrive.
    mix = {"poll_timeout": 0.1, **{k: v for k, v in options.items() if k != "all_clients"}}
    plan: dict = {"topics": topics, "clients": clients, "duration": seconds, "mix": mix}
    for key in ("producer", "consumer", "broker"):
        if key in config:
            plan[key] = config[key]
    if rate is not None:
        plan["rate"] = rate
    for cid in clients:
        clients[cid]["seed"] = draw(st.integers(0, 2**31 - 1))
    schedule = []
    if faults:
        slots = max(1, int(seconds // interval))
        # Holds reach past the next fault's start, and past the cluster's failure
        # detection (a 4 s broker session), so some faults outlast it and some do not.
        hold = st.integers(1, max(2, int(interval * 1.5)))
        # At least one fault: a plan of this shape is a test under faults. Each lands in
        # the second half of its slot, so the clients are under way when the first fires.
        for k in range(draw(st.integers(min(min_faults, slots), slots))):
            at = int((k + 0.5) * interval) + draw(st.integers(0, max(0, int(interval) // 2)))
            for wait, step in draw(st.sampled_from(faults).flatmap(
                    lambda kind: drawn(kind, nodes, hold, plan))):
                if at + wait <= seconds:
                    schedule.append({"at": at + wait, "fault": step})
    if crash_every:
        for _ in range(draw(st.integers(0, int(seconds // crash_every)))):
            crash: dict = {"at": draw(st.integers(1, max(1, seconds - 1))),
                           "crash": draw(st.sampled_from(sorted(clients)))}
            # A transactional client comes back under its own id (which fences what it
            # left open; the simplest draw) or a fresh one (left to the coordinator).
            if clients[crash["crash"]]["role"] in TRANSACTIONAL and draw(
                    st.sampled_from([SAME, FRESH])) == FRESH:
                crash["identity"] = FRESH
            schedule.append(crash)
    plan["schedule"] = sorted(schedule, key=lambda e: e["at"])
    return plan


def deal(templates: dict[str, dict], n: int, topics: dict) -> dict[str, dict]:
    """n clients dealt round-robin from the templates: template cid's copy k is cid
    itself for k = 0, else cid_k. Copies of a pipeline are one application scaled out:
    one consumer group (the template's), each copy reading its own share of the input
    partitions, or, when they subscribe, whatever share the group gives it; copies of a
    streams client are instances of one application (its group)."""
    order = list(templates)
    dealt = {}
    copies: dict[str, list[str]] = {cid: [] for cid in order}
    for i in range(n):
        cid = order[i % len(order)]
        name = cid if i < len(order) else f"{cid}_{i // len(order)}"
        copies[cid].append(name)
        dealt[name] = dict(templates[cid])
    for cid, names in copies.items():
        spec = templates[cid]
        if spec["role"] == STREAMS:  # the group hands out its tasks
            for name in names:
                dealt[name]["group"] = spec.get("group", cid)
            continue
        if spec["role"] != PIPELINE or len(names) < 2:
            continue
        if spec.get("pipeline", {}).get("subscribe"):
            for name in names:
                dealt[name]["group"] = spec.get("group", cid)
            continue
        parts = topics[spec["input"]]["partitions"]
        if parts < len(names):
            from .plan import PlanError
            raise PlanError(f"{len(names)} copies of pipeline {cid} need at least {len(names)} "
                            f"partitions of {spec['input']}, which has {parts}; raise the "
                            f"partitions or lower the clients per node")
        for k, name in enumerate(names):
            dealt[name].update(group=spec.get("group", cid),
                               partitions=[q for q in range(parts) if q % len(names) == k])
    return dealt
