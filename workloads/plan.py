"""Plans: what to run, as plain JSON, so a plan can be saved, read, edited and replayed
without Hypothesis (format: docs/plans.md).

A plan names its topics and its clients (each with a role and config), then what happens,
in one of two shapes:
- rounds (`steps`): a step is either a round of client operations, `{"ops": {client:
  op}}`, in which every named client runs its op concurrently with the others, or a fault,
  `{"fault": {...}}` (a kind of workloads/faults.py), applied between rounds. Faults are
  steps rather than timers so that a plan means the same thing on every run, which makes
  small properties cheap to shrink;
- concurrent (`duration`): every client runs its own op stream (drawn from its `seed` and
  the plan's `mix` by workloads/ops.py) as fast as it can, or at the plan's `rate`, for
  `duration` seconds, while a nemesis follows the `schedule`: faults and client crashes
  at given seconds, landing while ops are in flight. This is the shape that finds races.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import faults
from .ops import (
    COMMIT_TIMEOUT,
    GROUPED,
    MIX,
    PAUSE_BEFORE,
    PAUSE_MS,
    PIPELINE,
    PROCESS,
    PRODUCER,
    ROLES,
    ROUNDS,
    RW_TXN,
    SEEK,
    SEEK_TO,
    STREAMS,
    TRANSACTIONAL,
    TXN_PAUSE_MAX_MS,
    TXN_PRODUCER,
    TXN_SENDS_MAX,
    TXN_SHAPE_BOUNDS,
    range_problem,
)
from .settings import settings_problem

DEFAULT_PRODUCER = {"enable.idempotence": True, "acks": "all", "retries": 2147483647,
                    "message.timeout.ms": 15000, "request.timeout.ms": 5000,
                    "linger.ms": 5}
DEFAULT_CONSUMER = {"isolation.level": "read_committed"}
# Most threads one producer client may run (a client spec's `threads`).
MAX_THREADS = 16
DEFAULT_PIPELINE = {"offsets_in_txn": True, "rewind_on_abort": True, "subscribe": False}
# A streams client's application (docs/plans.md): its processing guarantee, what it
# computes, and settings for Kafka Streams over the harness's (run/jvm.py).
GUARANTEES = ("exactly_once_v2", "at_least_once")
TOPOLOGIES = ("map", "fold")
DEFAULT_STREAMS = {"guarantee": "exactly_once_v2", "topology": "fold", "config": {}}
# The client library a plan client runs on (its "client") unless it says: librdkafka, and
# for a streams client (Kafka Streams) the Java client. Which names it may say is
# onceproof.run.backends' registry's to know (BACKENDS), checked there before a run: this
# layer imports nothing of the run.
LIBRDKAFKA, JAVA = "librdkafka", "java"
# A record value's size and content (mix.value_bytes, mix.value_content; run/values.py):
# at least room for the identity and its header, at most 1 MiB.
COMPRESSIBLE, RANDOM = "compressible", "random"
VALUE_CONTENTS = (COMPRESSIBLE, RANDOM)
# The mix's keys of a record value's settings.
VALUE_SETTINGS = ("value_bytes", "value_content")
MIN_VALUE_BYTES, MAX_VALUE_BYTES = 32, 1 << 20
# A kafka-clients release (the plan's java_client).
RELEASE = re.compile(r"\d+\.\d+\.\d+")
# Whom a crashed client comes back as (a schedule entry's "identity"): the same
# transactional id, which fences what the crashed one left open (the default), or a
# fresh one, which leaves that to the coordinator's transaction timeout (Jepsen's way).
SAME, FRESH = "same", "fresh"
CRASH_IDENTITIES = (SAME, FRESH)


class PlanError(ValueError):
    """A plan that cannot run; the message says where and what to change."""


# The typed plan. `validate` checks a plan's JSON and returns it parsed, once, into these
# frozen objects, which the run (harness/run/) and the report read by attribute. The
# JSON stays the plan's format: `to_dict` gives back the dict it was parsed from (the
# same keys in the same order, keys no field models included), which is what a saved
# plan, a history's artifacts and a client process (run/host.py, the Java agent) get.
# Each object keeps the keys it was written with (`keys`), so that a setting left out
# stays left out: a field is None (or empty) when its key is absent, and the value in
# force then is the property beside it (ClientSpec.group_name, n_threads...).


def _written(keys: tuple[str, ...], values: dict[str, Any], extra: dict[str, Any]) -> dict:
    """An object's JSON: its keys in the order they were written, each its field's value
    (or the unmodelled value it was given), copied."""
    return {k: copy.deepcopy(values[k] if k in values else extra[k]) for k in keys}


def _extra(d: dict, modelled: tuple[str, ...]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in d.items() if k not in modelled}


@dataclass(frozen=True)
class Topic:
    """A topic of the plan (docs/plans.md `topics`)."""
    name: str
    partitions: int
    replicas: int | None = None  # None: 3, or the cluster's nodes if fewer
    config: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    FIELDS = ("partitions", "replicas", "config")

    @classmethod
    def from_dict(cls, name: str, d: dict) -> Topic:
        return cls(name, d.get("partitions"), d.get("replicas"),  # type: ignore[arg-type]
                   copy.deepcopy(d.get("config", {})), _extra(d, cls.FIELDS), tuple(d))

    def to_dict(self) -> dict:
        return _written(self.keys, {"partitions": self.partitions, "replicas": self.replicas,
                                    "config": self.config}, self.extra)


@dataclass(frozen=True)
class ClientSpec:
    """A client of the plan (docs/plans.md `clients`): its id and what its spec says."""
    id: str
    role: str  # one of workloads/ops.py ROLES
    topic: str | None = None
    input: str | None = None
    output: str | None = None
    group: str | None = None  # as written; group_name is the one in force
    partitions: tuple[int, ...] | None = None  # None: every partition it reads
    client: str | None = None  # the client library as written (library_of says which runs)
    config: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    threads: int | None = None
    pipeline: dict[str, Any] = field(default_factory=dict)  # as written; see pipeline_settings
    streams: dict[str, Any] = field(default_factory=dict)  # as written; see streams_settings
    offsets_in_txn: bool | None = None  # an rw_txn's: send its group's offsets (None: no)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    FIELDS = ("role", "topic", "input", "output", "group", "partitions", "client", "config",
              "seed", "threads", "pipeline", "streams", "offsets_in_txn")

    @classmethod
    def from_dict(cls, cid: str, d: dict) -> ClientSpec:
        return cls(cid, d.get("role"), d.get("topic"), d.get("input"),  # type: ignore[arg-type]
                   d.get("output"), d.get("group"),
                   tuple(d["partitions"]) if "partitions" in d else None, d.get("client"),
                   copy.deepcopy(d.get("config", {})), d.get("seed"), d.get("threads"),
                   copy.deepcopy(d.get("pipeline", {})), copy.deepcopy(d.get("streams", {})),
                   d.get("offsets_in_txn"), _extra(d, cls.FIELDS), tuple(d))

    def to_dict(self) -> dict:
        values = {k: getattr(self, k) for k in self.FIELDS}
        if self.partitions is not None:
            values["partitions"] = list(self.partitions)
        return _written(self.keys, values, self.extra)

    @property
    def group_name(self) -> str:
        """The plan's name of the group it reads in: its `group`, else its id."""
        return self.group if self.group is not None else self.id

    @property
    def n_threads(self) -> int:
        return self.threads if self.threads is not None else 1

    @property
    def op_seed(self) -> int:
        """The seed of its op stream (a concurrent plan's)."""
        return self.seed if self.seed is not None else 0

    @property
    def pipeline_settings(self) -> dict[str, Any]:
        return {**DEFAULT_PIPELINE, **self.pipeline}

    @property
    def streams_settings(self) -> dict[str, Any]:
        return {**DEFAULT_STREAMS, **self.streams}

    @property
    def transactional(self) -> bool:
        return self.role in TRANSACTIONAL

    @property
    def grouped(self) -> bool:
        return self.role in GROUPED


@dataclass(frozen=True)
class Step:
    """A step of a round-based plan: a round (`ops`, client id -> its op) or a fault."""
    ops: dict[str, dict] | None = None
    fault: dict | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    FIELDS = ("ops", "fault")

    @classmethod
    def from_dict(cls, d: dict) -> Step:
        return cls(copy.deepcopy(d.get("ops")), copy.deepcopy(d.get("fault")),
                   _extra(d, cls.FIELDS), tuple(d))

    def to_dict(self) -> dict:
        return _written(self.keys, {"ops": self.ops, "fault": self.fault}, self.extra)


@dataclass(frozen=True)
class ScheduleEntry:
    """An entry of a concurrent plan's schedule: at `at` seconds, a fault or a crash
    of a client."""
    at: float
    fault: dict | None = None
    crash: str | None = None
    # A crash's replacement: "same" transactional id (None: as written without one) or
    # a "fresh" one (CRASH_IDENTITIES).
    identity: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    FIELDS = ("at", "fault", "crash", "identity")

    @classmethod
    def from_dict(cls, d: dict) -> ScheduleEntry:
        return cls(d.get("at"), copy.deepcopy(d.get("fault")), d.get("crash"),  # type: ignore[arg-type]
                   d.get("identity"), _extra(d, cls.FIELDS), tuple(d))

    def to_dict(self) -> dict:
        return _written(self.keys, {"at": self.at, "fault": self.fault, "crash": self.crash,
                                    "identity": self.identity}, self.extra)

    @property
    def fresh(self) -> bool:
        """Whether a crash's replacement comes back under a fresh transactional id."""
        return self.identity == FRESH


@dataclass(frozen=True)
class Mix:
    """A concurrent plan's op mix (docs/plans.md `mix`; workloads/ops.py MIX): each
    setting None when the plan leaves it to its default, which workloads/ops.py
    next_op and the run apply."""
    abort_percent: float | None = None
    crash_percent: float | None = None
    txn_ops: tuple[str, ...] | None = None
    consumer_ops: tuple[str, ...] | None = None
    max_records: int | None = None
    txn_sends: tuple[int, int] | None = None  # [low, high] sends per transaction
    txn_pause_ms: tuple[int, int] | None = None  # [low, high] ms of a pause in one
    poll_timeout: float | None = None
    commit_metadata: tuple[int, ...] | None = None
    commit_timeout: str | None = None  # None: "retry"
    restart_after: float | None = None  # None: 0 s
    # A size, or sizes to draw from (run/values.py); None: the identity alone.
    value_bytes: int | tuple[int, ...] | None = None
    value_content: str | None = None  # None: compressible
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    FIELDS = tuple(MIX)
    LISTS = ("txn_ops", "consumer_ops", "commit_metadata", "value_bytes", "txn_sends",
             "txn_pause_ms")

    @classmethod
    def from_dict(cls, d: dict) -> Mix:
        given: dict[str, Any] = {
            k: tuple(d[k]) if k in cls.LISTS and isinstance(d[k], list) else d[k]
            for k in cls.FIELDS if k in d}
        return cls(**given, extra=_extra(d, cls.FIELDS), keys=tuple(d))

    def to_dict(self) -> dict:
        """The mix as written, which is also what next_op takes."""
        values = {k: getattr(self, k) for k in self.FIELDS}
        values.update({k: list(values[k]) for k in self.LISTS if isinstance(values[k], tuple)})
        return _written(self.keys, values, self.extra)


@dataclass(frozen=True)
class Plan:
    """A plan, parsed (docs/plans.md). Rounds have `steps`; a concurrent plan has a
    `duration`, a `schedule` and a `mix`. Settings maps (`producer`, `consumer`,
    `broker`, a client's `config`) and ops and faults stay the plain dicts they are in
    the JSON: they are handed on as they are (to a client library, to a client process,
    to the fault registry)."""
    topics: dict[str, Topic]
    clients: dict[str, ClientSpec]
    steps: tuple[Step, ...] = ()
    duration: float | None = None
    rate: float | None = None  # None: as fast as the clients go
    mix: Mix = field(default_factory=Mix)
    schedule: tuple[ScheduleEntry, ...] = ()
    producer: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    broker: dict[str, Any] = field(default_factory=dict)
    java_client: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    FIELDS = ("topics", "clients", "steps", "duration", "rate", "mix", "schedule", "producer",
              "consumer", "broker", "java_client")

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        """The plan's objects, as its JSON gives them (no checks: `validate` checks)."""
        return cls(
            {name: Topic.from_dict(name, t) for name, t in d.get("topics", {}).items()},
            {cid: ClientSpec.from_dict(cid, c) for cid, c in d.get("clients", {}).items()},
            tuple(Step.from_dict(s) for s in d.get("steps", ())), d.get("duration"),
            d.get("rate"), Mix.from_dict(d.get("mix", {})),
            tuple(ScheduleEntry.from_dict(e) for e in d.get("schedule", ())),
            copy.deepcopy(d.get("producer", {})), copy.deepcopy(d.get("consumer", {})),
            copy.deepcopy(d.get("broker", {})), d.get("java_client"), _extra(d, cls.FIELDS),
            tuple(d))

    @classmethod
    def parse(cls, d: dict) -> Plan:
        """A plan's JSON, checked (PlanError says what is wrong) and parsed."""
        return validate(d)

    @classmethod
    def of(cls, plan: dict | Plan) -> Plan:
        """A plan as objects: itself, or a dict parsed as it is (unchecked)."""
        return plan if isinstance(plan, Plan) else cls.from_dict(plan)

    def to_dict(self) -> dict:
        """The plan's JSON, as it was parsed: what `save` writes."""
        return _written(self.keys, {
            "topics": {name: t.to_dict() for name, t in self.topics.items()},
            "clients": {cid: c.to_dict() for cid, c in self.clients.items()},
            "steps": [s.to_dict() for s in self.steps], "duration": self.duration,
            "rate": self.rate, "mix": self.mix.to_dict(),
            "schedule": [e.to_dict() for e in self.schedule], "producer": self.producer,
            "consumer": self.consumer, "broker": self.broker, "java_client": self.java_client},
            self.extra)

    @property
    def concurrent(self) -> bool:
        """Whether it has the concurrent shape (a duration) rather than steps."""
        return self.duration is not None

    @property
    def partitions(self) -> dict[str, int]:
        """Each topic's partition count."""
        return {name: t.partitions for name, t in self.topics.items()}

    @property
    def fault_steps(self) -> list[dict]:
        """Every fault of the plan, of either shape, in order."""
        if self.concurrent:
            return [e.fault for e in self.schedule if e.fault is not None]
        return [s.fault for s in self.steps if s.fault is not None]

    @property
    def size(self) -> int:
        """How big a counterexample is, for keeping the smallest. Rounds: ops plus faults.
        Concurrent: scheduled faults and crashes, plus clients, plus whole seconds of
        duration (each a unit a shrink can remove)."""
        if self.concurrent:
            return len(self.schedule) + len(self.clients) + int(self.duration or 0)
        return sum(len(s.ops) if s.ops is not None else 1 for s in self.steps)

    def topic_of(self, client: ClientSpec) -> str:
        """A client's `topic`, else the plan's first topic."""
        return client.topic or next(iter(self.topics))

    def read_topic(self, client: ClientSpec) -> str:
        """The topic a client reads: its input, its topic, else the plan's first topic."""
        return client.input or self.topic_of(client)


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


def save(plan: dict | Plan, path: str | Path) -> None:
    """Write a plan's JSON (a Plan as its to_dict)."""
    Path(path).write_text(json.dumps(plan.to_dict() if isinstance(plan, Plan) else plan, indent=1))


def _number(v, low: float = 0.0) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > low


def concurrent(plan: dict | Plan) -> bool:
    """Whether a (valid) plan has the concurrent shape (Plan.concurrent)."""
    return plan.concurrent if isinstance(plan, Plan) else "duration" in plan


def read_topic(plan: dict, client: dict) -> str:
    """The topic a client reads: its input, its topic, else the plan's first topic (of
    the JSON; Plan.read_topic of the parsed plan)."""
    return client.get("input") or client.get("topic") or next(iter(plan["topics"]))


def validate(plan) -> Plan:
    """Check a plan's JSON (a PlanError says where and what to change) and return it
    parsed; a Plan is checked as its JSON."""
    if isinstance(plan, Plan):
        plan = plan.to_dict()

    def bad(where: str, what: str):
        raise PlanError(f"plan {where}: {what} (see docs/plans.md)")
    if not isinstance(plan, dict):
        bad("", "must be a JSON object")
    for key in ("topics", "clients"):
        if key not in plan:
            bad(key, "is missing")
    if ("steps" in plan) == ("duration" in plan):
        bad("", "needs either \"steps\" (rounds) or \"duration\" (concurrent), not both or neither")
    topics = plan["topics"]
    if not isinstance(topics, dict) or not topics:
        bad("topics", "must map topic names to {\"partitions\": N}")
    for name, spec in topics.items():
        if (not isinstance(spec, dict) or not isinstance(spec.get("partitions"), int)
                or spec["partitions"] < 1):
            bad(f"topics.{name}", "needs \"partitions\": a positive integer")
        if "replicas" in spec and (not isinstance(spec["replicas"], int)
                                   or isinstance(spec["replicas"], bool) or spec["replicas"] < 1):
            bad(f"topics.{name}.replicas", "must be a positive integer (at most the cluster's nodes)")
        if (problem := settings_problem(spec.get("config", {}))):
            bad(f"topics.{name}.config", problem)
    if (problem := settings_problem(plan.get("broker", {}), broker=True)):
        bad("broker", problem)
    clients = plan["clients"]
    if not isinstance(clients, dict) or not clients:
        bad("clients", "must map client ids to {\"role\": ...}; a plan needs at least one client")
    for cid, client in clients.items():
        if not isinstance(client, dict) or client.get("role") not in ROLES:
            bad(f"clients.{cid}", f"role must be one of {', '.join(sorted(ROLES))}")
        for key in ("topic", "input", "output"):
            if key in client and client[key] not in topics:
                bad(f"clients.{cid}.{key}", f"names no topic in plan.topics: {client[key]!r}")
        if client["role"] in (PIPELINE, STREAMS) and not {"input", "output"} <= set(client):
            bad(f"clients.{cid}", f"a {client['role']} client needs \"input\" and \"output\" topics")
        if client["role"] == STREAMS:
            _validate_streams(cid, client, bad)
        settings = client.get("pipeline", {})
        if (not isinstance(settings, dict) or not set(settings) <= set(DEFAULT_PIPELINE)
                or not all(isinstance(v, bool) for v in settings.values())):
            bad(f"clients.{cid}.pipeline", "maps any of "
                f"{', '.join(DEFAULT_PIPELINE)} to true or false")
        if "offsets_in_txn" in client and (client["role"] != RW_TXN
                                           or not isinstance(client["offsets_in_txn"], bool)):
            bad(f"clients.{cid}.offsets_in_txn", "true or false, for an rw_txn client (a "
                "pipeline's is in its \"pipeline\" settings)")
        if settings.get("subscribe") and "partitions" in client:
            bad(f"clients.{cid}", "a subscribing pipeline's partitions are the group's to "
                "assign: drop \"partitions\" or \"subscribe\"")
        if "partitions" in client:
            read = read_topic(plan, client)
            n = topics[read]["partitions"]
            if (not isinstance(client["partitions"], list) or not client["partitions"]
                    or not all(isinstance(q, int) and 0 <= q < n for q in client["partitions"])):
                bad(f"clients.{cid}.partitions", f"must be a list of partitions of {read} (0..{n - 1})")
        if not isinstance(client.get("client", LIBRDKAFKA), str):
            bad(f"clients.{cid}.client", f"must be a client library's name, such as "
                f"{LIBRDKAFKA!r}, not {client['client']!r}")
        if "seed" in client and not isinstance(client["seed"], int):
            bad(f"clients.{cid}.seed", "must be an integer")
        if "threads" in client:
            if client["role"] != PRODUCER or "duration" not in plan:
                bad(f"clients.{cid}.threads", "only a producer of a concurrent plan runs "
                    "several threads")
            if (not isinstance(client["threads"], int) or isinstance(client["threads"], bool)
                    or not 1 <= client["threads"] <= MAX_THREADS):
                bad(f"clients.{cid}.threads", f"must be an integer from 1 to {MAX_THREADS}")
    if "java_client" in plan and not (isinstance(plan["java_client"], str)
                                      and RELEASE.fullmatch(plan["java_client"])):
        bad("java_client", f"must be a kafka-clients release like \"3.8.0\", not {plan['java_client']!r}")
    if concurrent(plan):
        _validate_concurrent(plan, bad)
    else:
        _validate_steps(plan, bad)
    _validate_values(plan.get("mix", {}), bad)
    _validate_txn_shape(plan.get("mix", {}), bad)
    return Plan.from_dict(plan)


def _validate_txn_shape(mix: dict, bad) -> None:
    """mix.txn_sends and mix.txn_pause_ms: ranges within their bounds."""
    for key, (low, high) in TXN_SHAPE_BOUNDS.items():
        if key in mix and (problem := range_problem(mix[key], low, high)):
            bad(f"mix.{key}", problem)


def _op_shape_problem(op: dict) -> str | None:
    """What is wrong with an op's pause and rounds (workloads/ops.py), or None."""
    def count(v, low: int, high: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
    if PAUSE_MS in op and not count(op[PAUSE_MS], 0, TXN_PAUSE_MAX_MS):
        return f"{PAUSE_MS} must be milliseconds from 0 to {TXN_PAUSE_MAX_MS}, not {op[PAUSE_MS]!r}"
    if ROUNDS in op and (op["f"] != PROCESS or not count(op[ROUNDS], 1, TXN_SENDS_MAX)):
        return f"{ROUNDS} is a process op's rounds per transaction, 1 to {TXN_SENDS_MAX}"
    if PAUSE_BEFORE in op and (op["f"] != PROCESS
                               or not count(op[PAUSE_BEFORE], 1, TXN_SENDS_MAX + 1)):
        return (f"{PAUSE_BEFORE} is before which of a process op's rounds it pauses "
                f"(its rounds plus one: before its commit)")
    return None


def value_sizes_problem(sizes) -> str | None:
    """What is wrong with mix.value_bytes (a size or a list of sizes), or None."""
    listed = sizes if isinstance(sizes, list) else [sizes]
    if not listed or not all(isinstance(n, int) and not isinstance(n, bool) for n in listed):
        return f"must be a size in bytes or a non-empty list of sizes, not {sizes!r}"
    wrong = next((n for n in listed if not MIN_VALUE_BYTES <= n <= MAX_VALUE_BYTES), None)
    if wrong is not None:
        return (f"must be from {MIN_VALUE_BYTES} (room for the record's identity) to "
                f"{MAX_VALUE_BYTES} (1 MiB) bytes, not {wrong}")
    return None


def _validate_values(mix, bad) -> None:
    if not isinstance(mix, dict):
        bad("mix", "must be an object of op-mix settings (docs/plans.md)")
    if "value_bytes" in mix and (problem := value_sizes_problem(mix["value_bytes"])):
        bad("mix.value_bytes", problem)
    if mix.get("value_content", COMPRESSIBLE) not in VALUE_CONTENTS:
        bad("mix.value_content", f"must be one of {', '.join(VALUE_CONTENTS)}, not "
                                 f"{mix['value_content']!r}")


def largest_value(plan: dict | Plan) -> int | None:
    """The largest record value a plan's writers make, in bytes (None: the identity
    alone, a few bytes)."""
    sizes = Plan.of(plan).mix.value_bytes
    if sizes is None:
        return None
    return max(sizes) if isinstance(sizes, tuple) else sizes


# Room a record's value leaves for the rest of its batch: the batch's header (61 bytes),
# the record's own (its lengths, offset and time deltas) and its key (the client's id).
RECORD_OVERHEAD = 128
# Kafka's defaults: the broker's message.max.bytes (a topic's max.message.bytes unless it
# sets one) and librdkafka's message.max.bytes (the largest request it sends).
BROKER_MESSAGE_MAX_BYTES = 1048588
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1000000
_WRITERS = (PRODUCER, TXN_PRODUCER, PIPELINE, RW_TXN)


def value_size_problem(plan: dict | Plan, broker: dict | None = None) -> str | None:
    """Why the plan's largest value cannot be written, in one line with the numbers, or
    None: a value and its record's overhead (RECORD_OVERHEAD) must fit each written
    topic's max.message.bytes (its config, else the broker's message.max.bytes: `broker`,
    the settings the cluster runs with, then the plan's own), and a librdkafka
    producer's message.max.bytes."""
    p = Plan.of(plan)
    largest = largest_value(p)
    if largest is None:
        return None
    need = largest + RECORD_OVERHEAD
    settings = {**(broker or {}), **p.broker}
    default = int(settings.get("message.max.bytes", BROKER_MESSAGE_MAX_BYTES))
    for name, topic in p.topics.items():
        limit = int(topic.config.get("max.message.bytes", default))
        if need > limit:
            return (f"mix.value_bytes {largest} needs {need} bytes a record with its headers, "
                    f"above topic {name}'s max.message.bytes {limit}: set "
                    f"topics.{name}.config max.message.bytes (or --broker-config "
                    f"message.max.bytes) to at least {need}, or ask for smaller values")
    for cid, spec in p.clients.items():
        if spec.role not in _WRITERS or library_of(spec.to_dict()) != LIBRDKAFKA:
            continue
        given = {**DEFAULT_PRODUCER, **p.producer, **(spec.config or {})}
        limit = int(given.get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES))
        if need > limit:
            return (f"mix.value_bytes {largest} needs {need} bytes a record with its headers, "
                    f"above client {cid}'s librdkafka message.max.bytes {limit}: set the "
                    f"plan's producer message.max.bytes to at least {need}, or ask for "
                    f"smaller values")
    return None


def with_values(plan: dict, value_bytes: list[int] | None = None,
                value_content: str | None = None) -> dict:
    """The plan with these record value sizes and content (a run's --value-bytes and
    --value-content) in its mix, in either shape: written into the plan, so that its
    saved copy replays the same."""
    if value_bytes is None and value_content is None:
        return plan
    mix = dict(plan.get("mix", {}))
    if value_bytes is not None:
        mix["value_bytes"] = value_bytes[0] if len(value_bytes) == 1 else list(value_bytes)
    if value_content is not None:
        mix["value_content"] = value_content
    out = {**plan, "mix": mix}
    validate(out)
    return out


def _validate_streams(cid: str, client: dict, bad) -> None:
    app = client.get("streams", {})
    if not isinstance(app, dict) or not set(app) <= set(DEFAULT_STREAMS):
        bad(f"clients.{cid}.streams", f"maps any of {', '.join(DEFAULT_STREAMS)}")
    for key, allowed in (("guarantee", GUARANTEES), ("topology", TOPOLOGIES)):
        if app.get(key, DEFAULT_STREAMS[key]) not in allowed:
            bad(f"clients.{cid}.streams.{key}", f"must be one of {', '.join(allowed)}")
    if (problem := settings_problem(app.get("config", {}))):
        bad(f"clients.{cid}.streams.config", problem)
    if client.get("client", JAVA) != JAVA:
        bad(f"clients.{cid}.client", "a streams client runs Kafka Streams, on the Java client: "
            "drop \"client\" or make it \"java\"")
    if "partitions" in client:
        bad(f"clients.{cid}.partitions", "a streams application's partitions are its group's "
            "to assign: drop \"partitions\"")


def library_of(client: dict) -> str:
    """The client library a plan client runs on: a streams client runs Kafka Streams,
    which is Java."""
    return client.get("client", JAVA if client["role"] == "streams" else LIBRDKAFKA)


def libraries(plan: dict) -> set[str]:
    """The client libraries a plan's clients run on."""
    return {library_of(c) for c in plan["clients"].values()}


def _validate_steps(plan: dict, bad) -> None:
    clients = plan["clients"]
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
                if op["f"] == SEEK and op.get("to") not in SEEK_TO:
                    bad(f"steps[{i}].ops.{cid}", f"seek needs \"to\": one of {', '.join(SEEK_TO)}")
                if (problem := _op_shape_problem(op)):
                    bad(f"steps[{i}].ops.{cid}", problem)
                sizes = op.get("metadata", [])
                if (not isinstance(sizes, list) or not all(
                        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes)):
                    bad(f"steps[{i}].ops.{cid}.metadata", "must be a list of sizes in bytes, one "
                        "per partition committed (cycling)")
        else:
            problem = fault_problem(plan, step["fault"])
            if problem:
                bad(f"steps[{i}].fault", problem)


def _validate_concurrent(plan: dict, bad) -> None:
    duration = plan["duration"]
    if not _number(duration):
        bad("duration", f"must be a positive number of seconds, not {duration!r}")
    if plan.get("rate") is not None and not _number(plan["rate"]):
        bad("rate", f"must be a positive number of ops per second (or null: as fast as the "
                    f"clients go), not {plan['rate']!r}")
    mix = plan.get("mix", {})
    if not isinstance(mix, dict):
        bad("mix", "must be an object of op-mix settings (docs/plans.md)")
    unknown = sorted(set(mix) - set(MIX))
    if unknown:
        bad(f"mix.{unknown[0]}", f"is no mix setting; use {', '.join(MIX)}")
    if "restart_after" in mix and not _number(mix["restart_after"], low=-1e-9):
        bad("mix.restart_after", f"must be a number of seconds from 0, not "
                                 f"{mix['restart_after']!r}")
    if mix.get("commit_timeout", "retry") not in COMMIT_TIMEOUT:
        bad("mix.commit_timeout", f"must be one of {', '.join(COMMIT_TIMEOUT)}, not "
                                  f"{mix['commit_timeout']!r}")
    schedule = plan.get("schedule", [])
    if not isinstance(schedule, list):
        bad("schedule", "must be a list of {\"at\": seconds, \"fault\": {...}} or "
                        "{\"at\": seconds, \"crash\": client}")
    for i, entry in enumerate(schedule):
        where = f"schedule[{i}]"
        if (not isinstance(entry, dict) or set(entry) not in (
                {"at", "fault"}, {"at", "crash"}, {"at", "crash", "identity"})):
            bad(where, "must be {\"at\": seconds, \"fault\": {...}} or {\"at\": seconds, "
                       "\"crash\": client, \"identity\"?: \"same\" or \"fresh\"}")
        if "identity" in entry and entry["identity"] not in CRASH_IDENTITIES:
            bad(f"{where}.identity", f"must be {' or '.join(CRASH_IDENTITIES)} (the crashed "
                                     f"client's transactional id, or a fresh one), not "
                                     f"{entry['identity']!r}")
        if not (_number(entry["at"]) or entry["at"] == 0) or entry["at"] > duration:
            bad(f"{where}.at", f"must be a number of seconds from 0 to the duration ({duration}), "
                               f"not {entry['at']!r}")
        if "crash" in entry and entry["crash"] not in plan["clients"]:
            bad(f"{where}.crash", f"names no client in plan.clients: {entry['crash']!r}")
        if "fault" in entry:
            problem = fault_problem(plan, entry["fault"])
            if problem:
                bad(f"{where}.fault", problem)


def fault_problem(plan: dict, step) -> str | None:
    """What is wrong with a fault step of this plan, in one line, or None: the step as
    the registry defines it, then the clients and partitions its targets name."""
    problem = faults.problem(step)
    if problem:
        return problem
    for client, roles in faults.clients(step):
        role = plan["clients"].get(client, {}).get("role")
        if roles is None and role is None:
            return (f"{step['f']}'s client names no client of the plan: {client!r} (it has "
                    f"{', '.join(plan['clients'])})")
        if roles is not None and role not in roles:
            return (f"{step['f']}'s client needs a client of the plan with role "
                    f"{' or '.join(sorted(roles))}, and {client!r} is "
                    + (f"a {role}" if role else "no client of the plan"))
    for name, arg in faults.targets(step):
        if name in ("txn_coordinator", "group_coordinator"):
            roles = TRANSACTIONAL if name == "txn_coordinator" else GROUPED
            role = plan["clients"].get(arg, {}).get("role")
            if role not in roles:
                return (f"{name}:{arg} needs a client of the plan with role "
                        f"{' or '.join(sorted(roles))}, and {arg!r} is "
                        + (f"a {role}" if role else "no client of the plan"))
        elif arg is not None:
            topic, partition = arg.rsplit("/", 1)
            n = plan["topics"].get(topic, {}).get("partitions", 0)
            if not int(partition) < n:
                return (f"{name}:{arg} names no partition of the plan's topics"
                        + (f" ({topic} has 0..{n - 1})" if n else f" (no topic {topic!r})"))
    return None


def size(plan: dict | Plan) -> int:
    """How big a counterexample is (Plan.size), for keeping the smallest."""
    return Plan.of(plan).size
