"""The fault registry: every fault kind a plan step can name, each defined once.

A definition holds
- its parameters, each with what to write (plan.validate checks steps with it, and
  docs/plans.md's fault table is generated from it);
- how Hypothesis draws it (`first`) and what undoes it (`undo`): strategies.fault draws
  the one and schedules the other a few rounds later;
- what it does when it fires (`act`): it resolves its own targets (a node named "leader"
  becomes the node that leads at that moment) and returns the step as resolved, which the
  runner records as the nemesis op's `ok` value;
- what its window is in the report: a fault in force `until` one of `undone_by` fires
  (matched by node when both name one), an `instant` fault, or an `undo` that opens none.

Presets are named strategies that draw steps of registered kinds (`slow_acks` is a
latency on responses only; `partition_leader` cuts the leader off), so a plan's `f` is
always a kind of this registry.

Targets: wherever a step names a node it may name a node id or a target (the leader of a
partition or one of its in-sync followers, the transaction coordinator of a client, the
group coordinator of a client's group), resolved when the fault fires, to a node that is
neither down nor paused, and recorded as resolved. A new kind of target is
one more entry of TARGETS.

Nothing here imports the harness: `act` drives the cluster it is handed (a Scene) through
these primitives only: nodes, down_nodes, paused, kill/pause/resume/stop/start/restart/wipe(node),
links(node, kinds), links_crossing(sides), disable(links), toxic(type, links, attributes,
streams, toxicity), request_fault(links, attributes), release_requests(), heal(),
heal_all(), leader(topic, partition), followers(topic, partition), coordinator(kind, key).
Which kinds a cluster can do at all is `cannot`, over the cluster's lacks(primitive) (a
cluster the harness did not start has no links of ours and runs the user's commands for
nodes). A client-side fault acts on the run's client processes instead, through the
scene's `clients`: pause(client) and resume(client or None: every paused one), each
returning the processes it stopped or continued; and `later(seconds, step)` fires a
step (its undo) as a nemesis op of its own that many seconds on.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import strategies as st

from .ops import GROUPED, TRANSACTIONAL

LINK_KINDS = ("client", "repl", "ctl")
# The nemesis op that records what a kafka toxic did (matched, held, released, dropped a
# response, duplicated): one per event, its value the toxic's event.
REQUEST_EVENT = "request"
STREAMS = ("upstream", "downstream")


class NoTarget(Exception):
    """A fault's target could not be found when it fired (no leader known): the fault is
    not applied, and its op fails."""


class UnknownFault(ValueError):
    """A fault selection names something the registry does not hold."""


class Names(Protocol):
    """How a run names what a plan names: its real topics, transactional ids, groups."""
    def topic(self, name: str) -> str: ...
    def tid(self, client: str) -> str: ...
    def client_group(self, client: str) -> str: ...


class Clients(Protocol):
    """The run's client processes, as a client-side fault acts on them (run/fleet.py)."""
    def pause(self, client: str) -> list[str]: ...
    def resume(self, client: str | None) -> list[str]: ...


@dataclass
class Scene:
    """What a fault acts on when it fires: the cluster (its primitives, listed above),
    the plan's topics in plan order, and how this run names them; the run's client
    processes, and a way to fire a step later (None where a run has no clients: a
    client-side fault then acts on none)."""
    cluster: Any
    topics: list[str]  # plan names
    names: Names
    clients: Clients | None = None
    later: Callable[[float, dict], None] | None = None


# ---- targets ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    doc: str
    # (scene, the argument after "name:" or None) -> the node, or None when none is
    # known yet
    find: Callable[[Scene, str | None], int | None]
    arg: str  # "partition" (<topic>/<partition>, optional) or "client" (required)
    patience: float = 15.0  # seconds to keep asking: mid-fault, metadata may lag


def _leader(scene: Scene, arg: str | None) -> int | None:
    topic, partition = (arg.rsplit("/", 1) if arg else (scene.topics[0], "0"))
    return scene.cluster.leader(scene.names.topic(topic), int(partition))


def _follower(scene: Scene, arg: str | None) -> int | None:
    topic, partition = (arg.rsplit("/", 1) if arg else (scene.topics[0], "0"))
    followers = scene.cluster.followers(scene.names.topic(topic), int(partition))
    return followers[0] if followers else None


def _txn_coordinator(scene: Scene, client: str | None) -> int | None:
    assert client is not None
    return scene.cluster.coordinator("transaction", scene.names.tid(client))


def _group_coordinator(scene: Scene, client: str | None) -> int | None:
    assert client is not None
    return scene.cluster.coordinator("group", scene.names.client_group(client))


TARGETS = {
    "leader": Target("the leader of a partition, `leader:<topic>/<partition>` (plain "
                     "`leader`: the first topic's partition 0)", _leader, "partition"),
    "follower": Target("an in-sync follower of a partition (the lowest id), "
                       "`follower:<topic>/<partition>` (plain `follower`: of the first "
                       "topic's partition 0)", _follower, "partition"),
    "txn_coordinator": Target("the transaction coordinator of a client's transactional id, "
                              "`txn_coordinator:<client>`", _txn_coordinator, "client"),
    "group_coordinator": Target("the group coordinator of a client's consumer group, "
                                "`group_coordinator:<client>`", _group_coordinator, "client"),
}


def parse_target(ref) -> tuple[str, str | None] | None:
    """A target reference as (target, argument), or None when ref is not one."""
    if not isinstance(ref, str):
        return None
    name, _, arg = ref.partition(":")
    target = TARGETS.get(name)
    if target is None:
        return None
    if target.arg == "client":
        return (name, arg) if arg else None
    if not arg:
        return name, None
    topic, slash, partition = arg.rpartition("/")
    return (name, arg) if slash and topic and partition.isdigit() else None


def resolve(scene: Scene, ref) -> int:
    """A node id stays as it is; a target is asked until it names a running node of the
    cluster, neither down nor paused (for seconds after a kill, metadata may still name
    the dead node)."""
    if isinstance(ref, int):
        return ref
    parsed = parse_target(ref)
    assert parsed is not None, f"{ref!r} is no target; plan.validate lets none through"
    target = TARGETS[parsed[0]]
    deadline = time.monotonic() + target.patience
    while True:
        node = target.find(scene, parsed[1])
        if (node is not None and node in scene.cluster.nodes
                and node not in scene.cluster.down_nodes | scene.cluster.paused):
            return node
        if time.monotonic() > deadline:
            raise NoTarget(f"no {ref} known: {target.doc}")
        time.sleep(0.5)


# ---- parameters -------------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    doc: str  # what to write: an error says "<kind>'s <param> must be <doc>"
    valid: Callable[[Any], bool]
    required: bool = False
    nodes: Callable[[Any], list] | None = None  # the node references a value holds
    clients: bool = False  # the value names a client of the plan (plan.validate checks it)
    # The roles a client it names may have (None: any role).
    roles: frozenset[str] | None = TRANSACTIONAL


def _one(v) -> list:
    return [v]


def _int(low: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_ref(v) -> bool:
    return _int(1)(v) or parse_target(v) is not None


def _subset(options: tuple[str, ...]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and bool(v) and set(v) <= set(options)


_REF_DOC = ("a node id or a target: leader, leader:<topic>/<partition>, "
            + ", ".join(f"{t}:<client>" for t, spec in TARGETS.items() if spec.arg == "client"))
NODE = Param(_REF_DOC, _is_ref, required=True, nodes=_one)
NODE_ID = Param("a node id; without it, every node", _int(1), nodes=_one)
LINKS = {
    "node": Param(f"{_REF_DOC}: only the links of that node (default: every node)", _is_ref,
                  nodes=_one),
    "kinds": Param("a list of link kinds: " + ", ".join(LINK_KINDS) + ' (default ["client"])',
                   _subset(LINK_KINDS)),
}


def _share(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1


# A toxic's parameters besides its own: where, and on what share of connections.
TOXIC = {**LINKS, "toxicity": Param(
    "a number above 0 and at most 1: the share of connections the toxic affects, each "
    "new connection drawn once (default 1: all), so one request can overtake another "
    "on an unaffected connection", _share)}


# ---- request faults ---------------------------------------------------------------------
# Kafka's api keys by the names of its protocol, as the kafka toxic names them
# (harness/cluster/kafkatoxic/frame.go; a test keeps the two the same).
KAFKA_APIS = (
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
    "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups",
    "ListGroups", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "WriteTxnMarkers", "TxnOffsetCommit", "DescribeConfigs", "CreatePartitions",
    "AlterPartition", "BrokerRegistration", "BrokerHeartbeat", "Vote", "BeginQuorumEpoch",
    "EndQuorumEpoch", "DescribeQuorum", "FetchSnapshot", "ConsumerGroupHeartbeat",
    "DescribeTransactions", "ListTransactions", "DescribeProducers", "AllocateProducerIds")
# Requests whose body names the transactional id: a `client` filter matches on it, and
# a release waits for one of them carrying the held request's id.
TXN_ID_APIS = ("InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "Produce",
               "TxnOffsetCommit", "EndTxn")
# Requests only brokers and controllers send one another: on `repl` or `ctl` links.
BROKER_APIS = frozenset({"WriteTxnMarkers", "AlterPartition", "BrokerRegistration",
                         "BrokerHeartbeat", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch",
                         "FetchSnapshot", "AllocateProducerIds"})
ACTIONS = ("hold_request", "drop_response", "duplicate_request")
# The same requests as strategies draw them, those every transaction sends first: the
# simplest draw (Hypothesis's first choice, and a shrink's aim) must act on something,
# which InitProducerId, sent once when a client starts, rarely does.
DRAWN_TXN_APIS = ("EndTxn", "Produce", "AddPartitionsToTxn", "AddOffsetsToTxn",
                  "TxnOffsetCommit", "InitProducerId")


def _apis(v) -> list[str]:
    return [v] if isinstance(v, str) else list(v)


def _is_apis(v) -> bool:
    names = _apis(v) if isinstance(v, (str, list)) else []
    return bool(names) and all(isinstance(a, str) and a in KAFKA_APIS for a in names)


_API_DOC = ("a Kafka api key name or a list of them: " + ", ".join(KAFKA_APIS))
REQUEST = {
    "api": Param(_API_DOC, _is_apis, required=True),
    "client": Param("a transactional client of the plan: only its requests, matched by its "
                    "transactional id (which only " + ", ".join(TXN_ID_APIS) + " carry)",
                    lambda v: isinstance(v, str) and bool(v), clients=True),
    "nth": Param("a positive integer: the first matching request acted on, counted over "
                 "every link of the fault (default 1)", _int(1)),
    "count": Param("a positive integer: how many matching requests from the nth on "
                   "(default 1)", _int(1)),
    **LINKS,
}
HOLD_RELEASE = {
    "release_ms": Param("a positive integer: milliseconds a held request waits", _int(1)),
    "release_after": Param("an api key name: release once the held request's client (its "
                           "transactional id) has sent `release_after_count` more of these "
                           "past the fault's links since the hold", lambda v: _is_apis(v)
                           and isinstance(v, str)),
    "release_after_count": Param("a positive integer (default 1)", _int(1)),
    "release_delay_ms": Param("a non-negative integer: milliseconds from the release_after "
                              "condition to the release (default 0)", _int(0)),
}


def _request_problem(step: Step) -> str | None:
    """The rules across a request fault's parameters: no fault that can never act, no
    release that can never come."""
    apis, kinds = _apis(step.get("api", [])), set(step.get("kinds", ["client"]))
    broker = [a for a in apis if a in BROKER_APIS]
    if broker and kinds == {"client"}:
        return (f"{step['f']}: {broker[0]} travels between nodes, never from a client: give "
                'kinds ["repl"] (or ["ctl"] for the KRaft quorum)')
    if "client" in step and not set(apis) & set(TXN_ID_APIS):
        return (f"{step['f']}: client matches by transactional id, which none of "
                f"{', '.join(apis)} carry; match one of {', '.join(TXN_ID_APIS)}")
    after = step.get("release_after")
    if after is not None and set(apis) <= set(TXN_ID_APIS) and after not in TXN_ID_APIS:
        return (f"{step['f']}: release_after {after} never carries the held request's "
                f"transactional id, so the release would never come; use one of "
                f"{', '.join(TXN_ID_APIS)}")
    if ("release_after_count" in step or "release_delay_ms" in step) and after is None:
        return f"{step['f']}: release_after_count and release_delay_ms need release_after"
    return None


def _request(action: str) -> Callable[[Scene, Step], Step]:
    """A kafka toxic on the requests of the client links (or the `kinds` given) of one
    node or all, one fault over all of them."""
    def act(scene: Scene, step: Step) -> Step:
        node = resolve(scene, step["node"]) if "node" in step else None
        links = scene.cluster.links(node, tuple(step.get("kinds", ["client"])))
        attributes = {"action": action, "api": _apis(step["api"]), "nth": step.get("nth", 1),
                      "count": step.get("count", 1)}
        if "client" in step:
            attributes["transactional_id"] = scene.names.tid(step["client"])
        if action == "hold_request":
            attributes.update(release_ms=step.get("release_ms", 0),
                              release_after_api=step.get("release_after", ""),
                              release_after_count=step.get("release_after_count", 1),
                              release_delay_ms=step.get("release_delay_ms", 0))
        fault = scene.cluster.request_fault(links, attributes)
        return {**step, **({"node": node} if node is not None else {}), "links": links,
                "fault_id": fault}
    return act


def _release(scene: Scene, step: Step) -> Step:
    return {**step, "faults": scene.cluster.release_requests()}


def _request_label(v: Step) -> str:
    what = "/".join(_apis(v.get("api", []))) or "request"
    who = f" of {v['client']}" if "client" in v else ""
    nth = v.get("nth", 1)
    return (f"{v.get('f', 'request')} {what}{who}" + (f" #{nth}" if nth != 1 else "")
            + (f" n{v['node']}" if "node" in v else ""))


def _request_step(action: str, **more) -> Callable[[int], st.SearchStrategy]:
    """A request fault on one transactional api of any client, for plans that name no
    client (presets aim at one of the plan's)."""
    return lambda nodes: st.sampled_from(DRAWN_TXN_APIS).map(
        lambda api: {"f": action, "api": api, **more})


# ---- releases and features ---------------------------------------------------------------
# A rolling upgrade, a downgrade and a feature's finalization, as an operator does them
# while the applications run (docs/plans.md, "Upgrades").
RELEASE_KINDS = ("upgrade", "downgrade", "finalize")
# The feature levels a release knows first (Kafka's FeatureCommand `describe` on each
# release says; only those measured are here): a finalize needs every node on one of
# them, and a downgrade's target must know every level finalized by then.
FEATURE_SINCE: dict[tuple, str] = {("kraft.version", 1): "3.9.0", ("transaction.version", 1): "4.0.0",
                 ("transaction.version", 2): "4.0.0", ("group.version", 1): "4.0.0"}
METADATA_VERSION = "metadata.version"


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _is_release(v) -> bool:
    return (isinstance(v, str) and len(v.split(".")) == 3
            and all(part.isdigit() for part in v.split(".")))


def _is_feature(v) -> bool:
    return isinstance(v, str) and bool(v) and (v == METADATA_VERSION or v.endswith(".version"))


def _finalize_problem(step: Step) -> str | None:
    level, metadata = step.get("level"), step.get("feature") == METADATA_VERSION
    if metadata and not (isinstance(level, str) and level[:1].isdigit()):
        return ('finalize: metadata.version takes a release\'s metadata version as text, '
                f'like "4.4-IV2" or "4.4", not {level!r}')
    if not metadata and not _int(0)(level):
        return f"finalize: {step.get('feature')} takes a level: a non-negative integer, not {level!r}"
    return None


def _release_params(than: str, example: str) -> dict[str, Param]:
    def flag(doc: str) -> Param:
        return Param(doc, lambda v: isinstance(v, bool))
    return {"to": Param(f"a Kafka release {than} than the node's, like \"{example}\"",
                        _is_release, required=True),
            "node": Param(f"{_REF_DOC} (default: every node, in id order)", _is_ref, nodes=_one),
            "clean": flag("true: SIGTERM (default); false: SIGKILL"),
            "wait": flag("true: wait until the node is back in the ISR (default); false: go "
                         "on at once")}


def _change_release(scene: Scene, step: Step) -> Step:
    """Move the node named, or every node in id order (a rolling change), to release
    `to`; nodes already on it are left as they are. Which way it may go was checked
    before the run (release_problem)."""
    nodes = [resolve(scene, step["node"])] if "node" in step else list(scene.cluster.nodes)
    moved = []
    for node in nodes:
        if scene.cluster.releases()[node] != step["to"]:
            scene.cluster.change_release(node, step["to"], clean=step.get("clean", True),
                                         wait=step.get("wait", True))
            moved.append(node)
    return {**step, **({"node": nodes[0]} if "node" in step else {}), "moved": moved,
            "releases": {str(n): v for n, v in scene.cluster.releases().items()}}


def _finalize(scene: Scene, step: Step) -> Step:
    scene.cluster.finalize(step["feature"], step["level"])
    return {**step, "features": {name: levels["finalized"] for name, levels
                                 in scene.cluster.described_features().items()}}


def _release_label(v: Step) -> str:
    where = f" n{v['node']}" if "node" in v else ""
    return f"{v.get('f', 'upgrade')}{where} to {v.get('to', '?')}"


def release_problem(steps: list[Step], start: str, nodes: list[int]) -> str | None:
    """Whether a plan's upgrades, downgrades and finalizes, in order, can run on a
    cluster that starts on release `start`: each upgrade goes up and each downgrade down
    from where its nodes are then, a downgrade's target knows every level finalized by
    then, and a finalize comes once every node runs a release that has its level."""
    on = dict.fromkeys(nodes, start)
    finalized: dict[str, object] = {}
    for i, step in enumerate(steps, 1):
        f = step.get("f")
        if f in ("upgrade", "downgrade"):
            # A target (the leader) may be any node when it fires: each is checked, and
            # none counted as moved.
            targets = [step["node"]] if isinstance(step.get("node"), int) else list(on)
            for node in targets:
                now, to = release_key(on[node]), release_key(step["to"])
                if f == "upgrade" and to < now:
                    return (f"fault {i}: upgrade to {step['to']}, but node {node} runs "
                            f"{on[node]} then: a move to an older release is a downgrade")
                if f == "downgrade" and to > now:
                    return (f"fault {i}: downgrade to {step['to']}, but node {node} runs "
                            f"{on[node]} then: a move to a newer release is an upgrade")
                if to < (3, 3):
                    return f"fault {i}: {step['to']} has no KRaft mode to run this cluster in (3.3.0 on)"
                unknown = [f"{name}={level}" for name, level in finalized.items()
                           if release_key(FEATURE_SINCE.get((name, level), "0.0.0")) > to]
                if f == "downgrade" and unknown:
                    return (f"fault {i}: downgrade to {step['to']}, which does not know "
                            f"{', '.join(unknown)}, finalized before it")
                if "node" not in step:
                    on = dict.fromkeys(on, step["to"])
                elif isinstance(step["node"], int):
                    on[node] = step["to"]
        elif f == "finalize" and step.get("feature") != METADATA_VERSION:
            since = FEATURE_SINCE.get((step.get("feature"), step.get("level")))
            oldest = min(on.values(), key=release_key)
            if since and release_key(oldest) < release_key(since):
                return (f"fault {i}: finalize {step['feature']}={step['level']} needs every "
                        f"node on {since} or later, and a node runs {oldest} then; upgrade first")
            finalized[step["feature"]] = step.get("level")
    return None


def releases_named(steps: list[Step]) -> list[str]:
    """The releases a plan's steps move nodes to, to install before the run starts."""
    return sorted({s["to"] for s in steps if s.get("f") in ("upgrade", "downgrade")},
                  key=release_key)


def _directions(default: tuple[str, ...]) -> Param:
    return Param(f"a list of {', '.join(STREAMS)} (default {', '.join(default)})", _subset(STREAMS))


# ---- definitions ------------------------------------------------------------------------

Step = dict
HOLD = st.integers(1, 3)  # rounds a fault stays before its undo


@dataclass(frozen=True)
class Fault:
    name: str
    doc: str  # one line: what it does to the cluster
    family: str  # "network", "request" or "node": how the report groups its windows
    params: dict[str, Param]
    act: Callable[[Scene, Step], Step]
    window: str  # "until" (undone_by ends it), "instant", or "undo" (opens no window)
    undone_by: frozenset[str] = frozenset()
    first: Callable[[int], st.SearchStrategy] | None = None  # nodes -> the step drawn
    undo: Callable[[Step], Step] | None = None  # the step that undoes a drawn one
    label: Callable[[Step], str] | None = None
    mixed: bool = True  # drawn by the named sets (mixed, net, node, client)
    check: Callable[[Step], str | None] | None = None  # rules across its parameters
    # (nodes, plan) -> the step drawn, for a kind that aims at the plan's own parts (a
    # client of it) rather than at nodes; `first` draws the others.
    aim: Callable[[int, dict], st.SearchStrategy] | None = None

    @property
    def drawable(self) -> bool:
        return self.first is not None or self.aim is not None

    def problem(self, step: Step) -> str | None:
        """What is wrong with a step of this kind, in one line, or None."""
        missing = [p for p, spec in self.params.items() if spec.required and p not in step]
        if missing:
            return f"{self.name} needs {', '.join(missing)}: {self.params[missing[0]].doc}"
        for key, value in step.items():
            if key == "f":
                continue
            if key not in self.params:
                takes = ", ".join(self.params) or "no parameters"
                return f"{self.name} takes {takes}, not {key!r}"
            if not self.params[key].valid(value):
                return f"{self.name}'s {key} must be {self.params[key].doc}, not {value!r}"
        return self.check(step) if self.check else None

    def node_ids(self, step: Step) -> set[int]:
        """The node ids a (valid) step names, targets left out."""
        return {n for p, spec in self.params.items() if spec.nodes and p in step
                for n in spec.nodes(step[p]) if isinstance(n, int)}

    def title(self, value: Step) -> str:
        """How the report names one application of this fault."""
        node = value.get("node")
        title = self.label(value) if self.label else self.name + (
            f" n{node}" if node is not None else "")
        share = value.get("toxicity", 1)
        return title + (f" ({share:.0%} of connections)" if _share(share) and share < 1 else "")


def _on_node(method: str) -> Callable[[Scene, Step], Step]:
    def act(scene: Scene, step: Step) -> Step:
        node = resolve(scene, step["node"])
        getattr(scene.cluster, method)(node)
        return {**step, "node": node}
    return act


def _on_nodes(method: str) -> Callable[[Scene, Step], Step]:
    """An undo of a node fault: of the node named, or of every node (the fault it undoes
    named a target, which may be another node by now)."""
    def act(scene: Scene, step: Step) -> Step:
        for node in [step["node"]] if "node" in step else scene.cluster.nodes:
            getattr(scene.cluster, method)(node)
        return dict(step)
    return act


def _nodes(nodes: int) -> st.SearchStrategy:
    return st.one_of(st.just("leader"), st.integers(1, nodes))


def _node_step(f: str) -> Callable[[int], st.SearchStrategy]:
    return lambda nodes: _nodes(nodes).map(lambda node: {"f": f, "node": node})


def _undo_on_node(f: str) -> Callable[[Step], Step]:
    return lambda step: {"f": f, **({"node": step["node"]} if isinstance(step["node"], int) else {})}


def _heal(step: Step) -> Step:
    return {"f": "heal"}


def _partition(scene: Scene, step: Step) -> Step:
    sides = [[resolve(scene, n) for n in side] for side in step["sides"]]
    links = scene.cluster.links_crossing(sides)
    scene.cluster.disable(links)
    return {**step, "sides": sides, "links": links}


def _isolate(scene: Scene, step: Step) -> Step:
    node = resolve(scene, step["node"])
    links = scene.cluster.links_crossing([[node]])
    scene.cluster.disable(links)
    return {**step, "node": node, "links": links}


def _cut_clients(scene: Scene, step: Step) -> Step:
    links = [name for node in step.get("nodes", scene.cluster.nodes)
             for name in scene.cluster.links(node, ("client",))]
    scene.cluster.disable(links)
    return {**step, "links": links}


def _heal_act(scene: Scene, step: Step) -> Step:
    if step.get("all"):
        scene.cluster.heal_all()
    else:
        scene.cluster.heal()
    resumed = scene.clients.resume(None) if scene.clients is not None else []
    return {**step, **({"resumed": resumed} if resumed else {})}


# ---- client-side faults -----------------------------------------------------------------
# The harness's defaults a drawn pause is measured against: a transactional client's
# transaction.timeout.ms (run/clients.py TXN_TIMEOUT_MS, unless its plan sets one) and
# librdkafka's and the Java client's max.poll.interval.ms.
DEFAULT_TIMEOUTS_MS = {"transaction.timeout.ms": 20000, "max.poll.interval.ms": 300000}
MAX_PAUSE_MS = 600_000


def _pause_client(scene: Scene, step: Step) -> Step:
    """SIGSTOP every process of the client now, and have a resume_client of it fire
    `ms` later (a heal, or the run's end, resumes it sooner)."""
    paused = scene.clients.pause(step["client"]) if scene.clients is not None else []
    if scene.later is not None:
        scene.later(step["ms"] / 1000, {"f": "resume_client", "client": step["client"]})
    return {**step, "processes": paused}


def _resume_client(scene: Scene, step: Step) -> Step:
    resumed = scene.clients.resume(step.get("client")) if scene.clients is not None else []
    return {**step, "processes": resumed}


def pause_lengths(plan: dict) -> list[int]:
    """The pauses (ms) a strategy draws for a plan's clients: shorter and longer than
    the transaction timeout in force (the harness's default, and any the plan sets), and
    than any max.poll.interval.ms the plan sets; the shortest first (what shrinking
    aims at)."""
    configs = [plan.get("producer", {}), plan.get("consumer", {})] + [
        c.get("config", {}) for c in plan.get("clients", {}).values()]
    limits = {DEFAULT_TIMEOUTS_MS["transaction.timeout.ms"]}
    for config in configs:
        for name in DEFAULT_TIMEOUTS_MS:
            value = config.get(name)
            if isinstance(value, (int, str)) and str(value).isdigit() and int(value) > 0:
                limits.add(int(value))
    lengths = {min(MAX_PAUSE_MS, n) for limit in limits for n in (limit // 2, limit * 3 // 2)}
    return sorted(n for n in lengths if n >= 1)


def _pause_client_step(nodes: int, plan: dict) -> st.SearchStrategy:
    clients = sorted(plan.get("clients", {}))
    if not clients:
        raise UnknownFault("pause_client needs a client of the plan; the plan has none")
    return st.tuples(st.sampled_from(clients), st.sampled_from(pause_lengths(plan))).map(
        lambda t: {"f": "pause_client", "client": t[0], "ms": t[1]})


def _client_label(v: Step) -> str:
    what = f"{v.get('f', 'pause_client')} {v.get('client', 'every client')}"
    return what + (f" {v['ms']}ms" if "ms" in v else "")


_CLIENT = Param("a client of the plan (any role)", lambda v: isinstance(v, str) and bool(v),
                required=True, clients=True, roles=None)


def _toxic(type: str, attributes: Callable[[Step], dict], streams: tuple[str, ...]
           ) -> Callable[[Scene, Step], Step]:
    """A toxiproxy toxic on the client links (or the `kinds` given) of one node or all."""
    def act(scene: Scene, step: Step) -> Step:
        node = resolve(scene, step["node"]) if "node" in step else None
        links = scene.cluster.links(node, tuple(step.get("kinds", ["client"])))
        scene.cluster.toxic(type, links, attributes(step), tuple(step.get("streams", streams)),
                            step.get("toxicity", 1.0))
        return {**step, **({"node": node} if node is not None else {}), "links": links}
    return act


def _partition_label(v: Step) -> str:
    if not isinstance(v.get("sides"), list):
        return "partition"
    # Nodes on no side form one more side, which an empty side names.
    return "partition " + " | ".join(" ".join(map(str, s)) or "rest" for s in v["sides"])


def _with(unit: str, key: str, name: str) -> Callable[[Step], str]:
    def label(v: Step) -> str:
        parts = [name] + ([f"{v[key]}{unit}"] if key in v else [])
        return " ".join(parts + ([f"n{v['node']}"] if "node" in v else []))
    return label


_NETWORK = frozenset({"heal"})
_HELD = frozenset({"heal", "release"})
_NODE_DOWN = frozenset({"start", "restart"})

_DEFINITIONS = [
    # Kinds in the order Hypothesis draws them from (its simplest choice is the first).
    Fault("kill", "SIGKILL the node's JVM", "node", {"node": NODE}, _on_node("kill"),
          "until", _NODE_DOWN, _node_step("kill"), _undo_on_node("start")),
    Fault("pause", "SIGSTOP the node's JVM", "node", {"node": NODE}, _on_node("pause"),
          "until", frozenset({"resume", "restart"}), _node_step("pause"), _undo_on_node("resume")),
    Fault("restart", "SIGTERM the node, then start it again", "node", {"node": NODE},
          _on_node("restart"), "instant", first=_node_step("restart")),
    Fault("partition", "cut every node-to-node link between the sides, both directions "
          "(clients still reach every node)", "network",
          {"sides": Param(f"a list of sides, each a list of nodes ({_REF_DOC}); nodes on no "
                          "side form one more side",
                          lambda v: isinstance(v, list) and bool(v) and all(
                              isinstance(s, list) and all(map(_is_ref, s)) for s in v),
                          required=True, nodes=lambda v: [n for side in v for n in side])},
          _partition, "until", _NETWORK,
          lambda nodes: _nodes(nodes).map(lambda n: {"f": "partition", "sides": [[n], []]}),
          _heal, _partition_label),
    Fault("isolate", "cut every node-to-node link of the node", "network", {"node": NODE},
          _isolate, "until", _NETWORK, _node_step("isolate"), _heal),
    Fault("latency", "delay data on links", "network",
          {"ms": Param("a positive integer (milliseconds)", _int(1), required=True),
           "jitter": Param("a non-negative integer (milliseconds)", _int(0)),
           **TOXIC, "streams": _directions(STREAMS)},
          _toxic("latency", lambda s: {"latency": s["ms"], "jitter": s.get("jitter", 0)}, STREAMS),
          "until", _NETWORK,
          lambda nodes: st.sampled_from([200, 1000, 6000]).map(
              lambda ms: {"f": "latency", "ms": ms, "jitter": ms // 4}),
          _heal, _with("ms", "ms", "latency")),
    Fault("reset_peer", "reset connections (TCP RST) on links, after `timeout_ms` of data",
          "network", {"timeout_ms": Param("a non-negative integer (milliseconds)", _int(0)), **TOXIC},
          _toxic("reset_peer", lambda s: {"timeout": s.get("timeout_ms", 0)}, ("upstream",)),
          "until", _NETWORK, lambda nodes: st.just({"f": "reset_peer"}), _heal),
    Fault("slicer", "cut data on links into small delayed chunks (responses only)", "network",
          dict(TOXIC),
          _toxic("slicer", lambda s: {"average_size": 64, "size_variation": 32, "delay": 100},
                 ("downstream",)),
          "until", _NETWORK, lambda nodes: st.just({"f": "slicer"}), _heal),
    Fault("bandwidth", "limit the data rate of links", "network",
          {"kb_per_s": Param("a positive integer (KB/s)", _int(1), required=True), **TOXIC},
          _toxic("bandwidth", lambda s: {"rate": s["kb_per_s"]}, STREAMS),
          "until", _NETWORK, lambda nodes: st.just({"f": "bandwidth", "kb_per_s": 16}), _heal,
          _with("KB/s", "kb_per_s", "bandwidth")),
    Fault("pause_client", "SIGSTOP every process of a client of the plan (for the Java "
          "client, its JVM) for `ms`, then SIGCONT it (a resume_client step fired `ms` "
          "later; a heal, or the run's end, resumes it sooner): a garbage-collection pause "
          "or a stalled handler, shorter or longer than the client's transaction.timeout.ms "
          "and max.poll.interval.ms", "client",
          {"client": _CLIENT,
           "ms": Param(f"a positive integer (milliseconds), at most {MAX_PAUSE_MS}",
                       lambda v: _int(1)(v) and v <= MAX_PAUSE_MS, required=True)},
          _pause_client, "until", frozenset({"resume_client", "heal"}),
          label=_client_label, aim=_pause_client_step),
    # Kinds a plan or a selection names explicitly; the named sets do not draw them.
    Fault("cut_clients", "clients can no longer reach the nodes (nodes still reach each "
          "other)", "network",
          {"nodes": Param("a list of node ids (default: every node)",
                          lambda v: isinstance(v, list) and bool(v) and all(map(_int(1), v)),
                          nodes=list)},
          _cut_clients, "until", _NETWORK, lambda nodes: st.just({"f": "cut_clients"}), _heal,
          mixed=False),
    Fault("stop", "SIGTERM the node (a clean shutdown); it stays down", "node", {"node": NODE},
          _on_node("stop"), "until", _NODE_DOWN, _node_step("stop"), _undo_on_node("start"),
          mixed=False),
    Fault("wipe", "SIGKILL the node, delete its data and format it afresh; it stays down "
          "(start brings it back empty, once no running peer still follows it as the KRaft "
          "leader: Kafka stops a voter that hears it led an epoch its empty disk forgot)",
          "node", {"node": NODE}, _on_node("wipe"), "until",
          _NODE_DOWN, _node_step("wipe"), _undo_on_node("start"), mixed=False),
    # Request faults: a kafka toxic reads Kafka's framing and acts on one chosen request,
    # so a late request is a plan step, not a draw of luck (docs/plans.md).
    Fault("hold_request", "hold the matching requests (and what follows them on their "
          "connection) while new connections pass; deliver them at the release (release_ms, "
          "release_after, a `release` step, or the heal), even when the client has closed the "
          "connection they came on", "request", {**REQUEST, **HOLD_RELEASE},
          _request("hold_request"), "until", _HELD,
          _request_step("hold_request", release_ms=5000), _heal, _request_label, mixed=False,
          check=_request_problem),
    Fault("drop_response", "deliver the matching requests, then close their connection "
          "before the response: the request took effect, the client does not know", "request",
          dict(REQUEST), _request("drop_response"), "until", _NETWORK,
          _request_step("drop_response"), _heal, _request_label, mixed=False,
          check=_request_problem),
    Fault("duplicate_request", "deliver the matching requests twice: on their connection, "
          "and a copy on a fresh connection to the same node (a retransmission), whose "
          "response is discarded", "request", dict(REQUEST), _request("duplicate_request"),
          "until", _NETWORK, _request_step("duplicate_request"), _heal, _request_label,
          mixed=False, check=_request_problem),
    # Releases and features (plans name them; the named sets do not draw them).
    Fault("upgrade", "stop the node (or every node, one after another: a rolling upgrade) "
          "and start it on Kafka release `to` with its data; with `wait`, each is back in "
          "the ISR of its partitions before the next", "node",
          _release_params("newer", "4.4.0"), _change_release, "instant", label=_release_label,
          mixed=False),
    Fault("downgrade", "the same as upgrade, to an older release `to`: one that knows the "
          "cluster's finalized feature levels", "node",
          _release_params("older", "3.9.2"), _change_release, "instant", label=_release_label,
          mixed=False),
    Fault("finalize", "set a feature's finalized level with Kafka's FeatureCommand, up or "
          "down (metadata.version only up), as an operator does after an upgrade", "node",
          {"feature": Param("a feature's name: metadata.version, transaction.version, "
                            "group.version, kraft.version, ...", _is_feature, required=True),
           "level": Param("a non-negative integer (metadata.version: its name, like "
                          "\"4.4-IV2\", or a release like \"4.4\")",
                          lambda v: _int(0)(v) or (isinstance(v, str) and bool(v)),
                          required=True)},
          _finalize, "instant",
          label=lambda v: f"finalize {v.get('feature', '?')}={v.get('level', '?')}",
          mixed=False, check=_finalize_problem),
    # Undos.
    Fault("release", "deliver every request a hold_request holds now (its toxics stay, "
          "acting on no more requests than they were told, until the heal)", "request", {},
          _release, "undo"),
    Fault("heal", "enable every link and remove every toxic; with `all`, also resume and "
          "start every node and wait until the cluster is ready", "network",
          {"all": Param("true or false", lambda v: isinstance(v, bool))}, _heal_act, "undo",
          label=lambda v: "heal all" if v.get("all") else "heal"),
    Fault("resume", "SIGCONT a paused node", "node", {"node": NODE_ID}, _on_nodes("resume"), "undo"),
    Fault("resume_client", "SIGCONT the paused processes of a client (without `client`: of "
          "every client)", "client",
          {"client": Param("a client of the plan (any role); without it, every client",
                           lambda v: isinstance(v, str) and bool(v), clients=True, roles=None)},
          _resume_client, "undo", label=_client_label),
    Fault("start", "start a node that is down", "node", {"node": NODE_ID}, _on_nodes("start"), "undo"),
]
FAULTS: dict[str, Fault] = {f.name: f for f in _DEFINITIONS}


@dataclass(frozen=True)
class Preset:
    """A named way to draw a registered kind with chosen parameters. `first` gets the
    node count and the plan (its topics and clients), so a preset can aim at a part
    one of the plan's clients or partitions plays."""
    name: str
    doc: str
    kind: str
    first: Callable[[int, dict], st.SearchStrategy] = field(repr=False)
    # Rounds before the undo in a rounds plan, where the preset needs its own (HOLD
    # otherwise); a concurrent plan draws its holds in seconds for every fault alike.
    rounds_hold: st.SearchStrategy | None = field(default=None, repr=False)
    # False: drawn without its kind's undo. A hold that lets itself go (release_after,
    # release_ms) needs none, and a heal would deliver what it holds early, not late
    # (it delivers what every fault holds, so an earlier fault's heal would too); the
    # settle's heal at the end of the run delivers anything still held.
    undone: bool = True


def _clients_of(roles: frozenset[str], why: str) -> Callable[[dict], st.SearchStrategy]:
    def clients(plan: dict) -> st.SearchStrategy:
        found = sorted(c for c, spec in plan.get("clients", {}).items() if spec.get("role") in roles)
        if not found:
            raise UnknownFault(f"{why} needs a client with role {' or '.join(sorted(roles))}; "
                               "the plan has none")
        return st.sampled_from(found)
    return clients


def _partitions(plan: dict) -> st.SearchStrategy:
    return st.sampled_from([f"{t}/{q}" for t, spec in plan.get("topics", {}).items()
                            for q in range(spec["partitions"])])


# What a targeted preset aims at: a strategy of target references, from the plan.
_AIMS: dict[str, tuple[str, Callable[[dict], st.SearchStrategy]]] = {
    "leader": ("the leader of one of the plan's partitions",
               lambda plan: _partitions(plan).map(lambda tp: f"leader:{tp}")),
    "follower": ("an in-sync follower of one of the plan's partitions",
                 lambda plan: _partitions(plan).map(lambda tp: f"follower:{tp}")),
    "txn_coordinator": ("the transaction coordinator of one of the plan's transactional "
                        "clients",
                        lambda plan: _clients_of(TRANSACTIONAL, "txn_coordinator")(plan).map(
                            lambda c: f"txn_coordinator:{c}")),
    "group_coordinator": ("the group coordinator of one of the plan's reading clients",
                          lambda plan: _clients_of(GROUPED, "group_coordinator")(plan).map(
                              lambda c: f"group_coordinator:{c}")),
}


def _aimed(aim: str, make: Callable[[str], st.SearchStrategy]
           ) -> Callable[[int, dict], st.SearchStrategy]:
    return lambda nodes, plan: _AIMS[aim][1](plan).flatmap(make)


def _on_target(kind: str) -> Callable[[str], st.SearchStrategy]:
    return lambda ref: st.just({"f": kind, "node": ref})


def _slow(ref: str) -> st.SearchStrategy:
    # Some connections only, so a request on a fast connection can overtake one sent
    # earlier on a slow one (a delayed EndTxn or produce landing late). 5 s outlasts
    # a client's request timeout of a few seconds: it gives up on the slow connection
    # and retries on a new one, which may be fast, while the first request still lands.
    return st.tuples(st.sampled_from([100, 500, 2000, 5000]),
                     st.sampled_from([0.3, 0.5, 0.7])).map(
        lambda t: {"f": "latency", "ms": t[0], "jitter": t[0] // 4, "node": ref,
                   "toxicity": t[1]})


def _lag(ref: str) -> st.SearchStrategy:
    # Replication only: a follower whose fetches take longer than replica.lag.time.max.ms
    # leaves the ISR, yet it is alive and its controller links work, so it can be elected.
    # A paused or isolated follower is also out of the quorum, and two of them leave the
    # leader without one to shrink the ISR.
    return st.just({"f": "latency", "ms": 6000, "node": ref, "kinds": ["repl"]})


def _late(ref: str) -> st.SearchStrategy:
    # Requests only, and far longer than a producer's request and message timeouts: the
    # client gives up on a produce (its transaction aborts) while toxiproxy still holds
    # the bytes, and delivers them when the latency ends or the fault heals. What lands
    # then is a write of a transaction that is already over (KAFKA-12671).
    return st.sampled_from([10000, 25000]).map(
        lambda ms: {"f": "latency", "ms": ms, "node": ref, "kinds": ["client"],
                    "streams": ["upstream"]})


def _aimed_client(make: Callable[[str], st.SearchStrategy]
                  ) -> Callable[[int, dict], st.SearchStrategy]:
    """A request fault on the requests of one of the plan's transactional clients."""
    return lambda nodes, plan: _clients_of(TRANSACTIONAL, "a request fault")(plan).flatmap(make)


def _hold_endtxn(client: str) -> st.SearchStrategy:
    # Held past the client's request timeout, it retries the EndTxn on a new connection,
    # which passes and is answered; the next transaction begins and writes, and the held
    # request lands in it (KAFKA-17754's order, made by the proxy, not by luck).
    # A few hundred ms after the next transaction's first Produce passed the proxy, so it
    # has landed (a late EndTxn racing it fails the Produce's verification instead).
    return st.sampled_from([50, 150, 300]).map(
        lambda delay: {"f": "hold_request", "api": "EndTxn", "client": client,
                       "release_after": "Produce", "release_delay_ms": delay})


def _hold_txn_request(client: str) -> st.SearchStrategy:
    # Any request of a transaction, let go after a later request of the same client, so
    # it lands after its retry and inside what the client did next; or after a time.
    by_event = st.tuples(st.sampled_from(DRAWN_TXN_APIS),
                         st.sampled_from(["Produce", "AddPartitionsToTxn", "EndTxn",
                                          "AddOffsetsToTxn"]),
                         st.integers(1, 3)).map(
        lambda t: {"f": "hold_request", "api": t[0], "client": client, "release_after": t[1],
                   "release_after_count": t[2]})
    by_time = st.tuples(st.sampled_from(DRAWN_TXN_APIS), st.sampled_from([1000, 4000, 10000])).map(
        lambda t: {"f": "hold_request", "api": t[0], "client": client, "release_ms": t[1]})
    return st.one_of(by_event, by_time)


def _once(action: str) -> Callable[[str], st.SearchStrategy]:
    return lambda client: st.tuples(st.sampled_from(DRAWN_TXN_APIS), st.integers(1, 3)).map(
        lambda t: {"f": action, "api": t[0], "client": client, "nth": t[1]})


def _marker(action: str, **more) -> Callable[[int, dict], st.SearchStrategy]:
    # Transaction markers travel from the coordinator to each partition's leader on the
    # replication links; a late one must not land in the producer's next transaction.
    return lambda nodes, plan: st.integers(1, 3).map(
        lambda nth: {"f": action, "api": "WriteTxnMarkers", "kinds": ["repl"], "nth": nth,
                     **more})


PRESETS = {p.name: p for p in [
    Preset("slow_acks", "latency of 3 s on responses only: a write lands, its producer does "
           "not hear of it in time and retries", "latency",
           lambda nodes, plan: st.just({"f": "latency", "ms": 3000, "streams": ["downstream"]})),
    Preset("partition_leader", "a partition that cuts the leader off from the other nodes",
           "partition", lambda nodes, plan: st.just({"f": "partition", "sides": [["leader"], []]})),
] + [Preset(f"{kind}_{aim}", what, kind, _aimed(aim, _on_target(kind)))
     for aim, (what, _) in _AIMS.items() for kind in ("pause", "kill", "isolate")
] + [Preset("wipe_leader", "the leader of one of the plan's partitions loses its disk "
            "(killed, its data deleted; it stays down until started)", "wipe",
            _aimed("leader", _on_target("wipe")))
] + [Preset("lag_followers", "latency of 6 s on the replication links of the leader of "
            "one of the plan's partitions: its followers fall out of sync (past the harness's "
            "replica.lag.time.max.ms of 4 s) while every node stays in the controller quorum",
            "latency", _aimed("leader", _lag))
] + [Preset("delay_requests_leader", "latency of 10 or 25 s on client requests only "
            "(not responses) to the leader of one of the plan's partitions, for 2-4 rounds: "
            "a produce outlives its client's timeouts, the client ends its transaction, and "
            "the produce lands after that", "latency", _aimed("leader", _late),
            # A round to send (and give up), one to end the transaction, then the heal
            # delivers what toxiproxy held; healed a round after the send, the produce
            # would land before its transaction ended.
            rounds_hold=st.integers(2, 4))
] + [Preset(f"slow_{aim}", f"latency of 100-5000 ms on 30-70% of the client connections "
            f"of {what}", "latency", _aimed(aim, _slow))
     for aim, (what, _) in _AIMS.items()
] + [Preset("hold_endtxn", "hold the next EndTxn of one of the plan's transactional clients "
            "until its next transaction has written (a Produce passed), then 50-300 ms more: "
            "the client's retry ended the transaction, the held one lands in the next",
            "hold_request", _aimed_client(_hold_endtxn), undone=False),
     Preset("hold_txn_request", "hold the next request of a transaction (InitProducerId, "
            "AddPartitionsToTxn, AddOffsetsToTxn, Produce, TxnOffsetCommit or EndTxn) of one "
            "of the plan's transactional clients until it sent 1-3 more of a kind, or for "
            "1-10 s", "hold_request", _aimed_client(_hold_txn_request), undone=False),
     Preset("drop_txn_response", "drop the response to the 1st-3rd next request of a "
            "transaction of one of the plan's transactional clients", "drop_response",
            _aimed_client(_once("drop_response"))),
     Preset("duplicate_txn_request", "send the 1st-3rd next request of a transaction of one "
            "of the plan's transactional clients twice", "duplicate_request",
            _aimed_client(_once("duplicate_request"))),
     Preset("duplicate_produce", "send the next Produce request twice", "duplicate_request",
            lambda nodes, plan: st.just({"f": "duplicate_request", "api": "Produce"})),
     Preset("hold_marker", "hold the 1st-3rd next transaction marker request "
            "(WriteTxnMarkers, between nodes) for 2-8 s", "hold_request",
            lambda nodes, plan: st.tuples(st.integers(1, 3), st.sampled_from([2000, 8000])).map(
                lambda t: {"f": "hold_request", "api": "WriteTxnMarkers", "kinds": ["repl"],
                           "nth": t[0], "release_ms": t[1]}), undone=False),
     Preset("duplicate_marker", "send the 1st-3rd next transaction marker request twice",
            "duplicate_request", _marker("duplicate_request"))]}

DRAWN = tuple(f.name for f in _DEFINITIONS if f.drawable) + tuple(PRESETS)
SETS = {
    "mixed": tuple(f.name for f in _DEFINITIONS if f.drawable and f.mixed),
    "node": tuple(f.name for f in _DEFINITIONS if f.drawable and f.mixed and f.family == "node"),
    "net": tuple(f.name for f in _DEFINITIONS if f.drawable and f.mixed and f.family == "network"),
    "client": tuple(f.name for f in _DEFINITIONS if f.drawable and f.family == "client"),
    "none": (),
}


def problem(step) -> str | None:
    """What is wrong with a fault step, in one line, or None."""
    if not isinstance(step, dict) or step.get("f") not in FAULTS:
        return f"f must be one of {', '.join(FAULTS)}"
    return FAULTS[step["f"]].problem(step)


def cannot(kind: str, cluster) -> str | None:
    """Why `cluster` cannot inject a fault kind with its undo, or None: its `lacks`
    names a primitive it cannot do (`links`: any network one). heal can always run,
    since with no link broken there is nothing to heal."""
    fault = FAULTS[kind]
    if kind == "heal" or fault.family == "client":
        return None  # a client-side fault acts on the run's own processes, on any cluster
    if fault.family in ("network", "request"):
        return cluster.lacks("links")
    undo = [fault.undo({"f": kind, "node": 1})["f"]] if fault.undo else []
    whys = [why for k in (kind, *undo) if (why := cluster.lacks(k))]
    return "; ".join(dict.fromkeys(whys)) or None


def not_injected(cluster) -> list[str]:
    """The faults `cluster` cannot inject, and why: `network faults (why)`, then each node
    kind (`kill (why)`), the undos left out."""
    network = cannot("isolate", cluster)
    # A release change is an operator's step a plan names, never drawn: a plan that
    # names one on such a cluster is refused before it runs.
    node = [f"{f.name} ({why})" for f in _DEFINITIONS if f.family == "node"
            and f.window != "undo" and f.name not in RELEASE_KINDS
            and (why := cannot(f.name, cluster))]
    return ([f"network faults ({network})"] if network else []) + node


def kind_of(name: str) -> str:
    """The registered kind a kind or preset name draws."""
    return PRESETS[name].kind if name in PRESETS else name


def node_ids(step: Step) -> set[int]:
    """The node ids a valid fault step names, so a run can check them against its cluster."""
    return FAULTS[step["f"]].node_ids(step)


def clients(step: Step) -> list[tuple[str, frozenset[str] | None]]:
    """The plan clients a valid fault step names (not as targets), each with the roles
    it may have (None: any)."""
    return [(step[p], spec.roles) for p, spec in FAULTS[step["f"]].params.items()
            if spec.clients and p in step]


def targets(step: Step) -> list[tuple[str, str | None]]:
    """The targets a valid fault step names, as (target, argument)."""
    refs = [r for p, spec in FAULTS[step["f"]].params.items() if spec.nodes and p in step
            for r in spec.nodes(step[p])]
    return [t for t in map(parse_target, refs) if t is not None]


def apply(scene: Scene, step: Step) -> Step:
    """Fire a (valid) fault step; returns it with its targets resolved. Raises NoTarget
    when a target names no node now."""
    return FAULTS[step["f"]].act(scene, step)


def drawn(name: str, nodes: int = 3, hold: st.SearchStrategy | None = None,
          plan: dict | None = None) -> st.SearchStrategy:
    """A kind or preset, drawn with its undo: a list of (wait, step), the wait drawn
    from `hold` (seconds, in a concurrent plan; by default rounds, HOLD or the preset's
    own). A targeted preset aims at the partitions and clients of `plan`."""
    kind = FAULTS[PRESETS[name].kind] if name in PRESETS else FAULTS.get(name)
    if hold is None:
        own = PRESETS[name].rounds_hold if name in PRESETS else None
        hold = own if own is not None else HOLD
    if name in PRESETS:
        first = PRESETS[name].first(nodes, plan or {})
    elif kind is not None and kind.first is not None:
        first = kind.first(nodes)
    elif kind is not None and kind.aim is not None:
        first = kind.aim(nodes, plan or {})
    else:
        raise UnknownFault(f"unknown fault {name}: draw one of {', '.join(DRAWN)}")
    assert kind is not None
    undo = kind.undo if name not in PRESETS or PRESETS[name].undone else None
    if undo is None:
        return first.map(lambda step: [(0, step)])
    return st.tuples(first, hold).map(lambda t: [(0, t[0]), (t[1], undo(t[0]))])


def selection(spec: str) -> tuple[str, ...]:
    """A named set (mixed, net, node, client, none) or a comma-separated list of kinds and presets."""
    if spec in SETS:
        return SETS[spec]
    names = tuple(k.strip() for k in spec.split(",") if k.strip())
    unknown = [k for k in names if k not in DRAWN]
    if unknown or not names:
        raise UnknownFault(f"unknown fault {', '.join(unknown) or repr(spec)}: use "
                           f"{', '.join(SETS)} or a list of {', '.join(DRAWN)}")
    return names


# ---- the report's view ------------------------------------------------------------------

def label(f: str, value: dict | None) -> str:
    return FAULTS[f].title(value or {}) if f in FAULTS else f


def category(f: str) -> str:
    if f == REQUEST_EVENT:
        return "request"
    return FAULTS[f].family if f in FAULTS else "other"


def lasts(f: str) -> bool:
    """In force from when it fires until something undoes it."""
    return f in FAULTS and FAULTS[f].window == "until"


def is_undo(f: str) -> bool:
    """Only an undo: when it ends nothing, it is no event of its own."""
    return f in FAULTS and FAULTS[f].window == "undo"


def ends(f: str, value: dict | None) -> frozenset[str]:
    """The kinds that an op of kind f ends (on its node, when both name one)."""
    if f == "heal" and (value or {}).get("all"):
        return frozenset(k for k in FAULTS if lasts(k))
    return frozenset(k for k, d in FAULTS.items() if f in d.undone_by)


# ---- the reference in docs/plans.md -----------------------------------------------------

def reference() -> str:
    """The fault table of docs/plans.md (a test keeps the two the same)."""
    rows = ["| fault | parameters | what it does | undone by |",
            "|-------|------------|--------------|-----------|"]
    for f in _DEFINITIONS:
        params = "; ".join(f"`{p}`{'' if spec.required else ' (optional)'}: {spec.doc}"
                           for p, spec in f.params.items()) or "none"
        undone = ", ".join(f"`{u}`" for u in sorted(f.undone_by)) or (
            "(an undo)" if f.window == "undo" else "(over when it returns)")
        rows.append(f"| `{f.name}` | {params} | {f.doc} | {undone} |")
    rows += ["", "Targets, which any parameter naming a node accepts:", "",
             "| target | the node |", "|--------|----------|"]
    rows += [f"| `{t}` | {spec.doc} |" for t, spec in TARGETS.items()]
    rows += ["", "Presets, which `--faults` and strategies accept besides the kinds:", "",
             "| preset | the kind it draws: on what |", "|--------|--------------|"]
    rows += [f"| `{p.name}` | `{p.kind}`: {p.doc} |" for p in PRESETS.values()]
    return "\n".join(rows) + "\n"
