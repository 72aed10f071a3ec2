"""A Kafka-compatible cluster the harness did not start: bring your own (`--bootstrap`).

The harness reaches it as any client would, with the client settings the user gives
(security.protocol, sasl.*, ssl.*), which may hold secrets: they go to the Kafka clients
and nowhere else (`described` names them without their values).

It offers the primitives of the harness's own cluster (workloads/faults.py lists them)
where it can:
- node faults run commands the user gives per primitive, as templates with {node},
  {host} and {port} (the broker's id and advertised address), e.g.
  `ssh {host} sudo systemctl kill -s KILL kafka`; each command's exit status and output
  go into the fault's op in the history;
- network faults need the harness's own proxies on every link, so none is offered: a
  plan or a selection that asks for one is refused before anything starts;
- broker settings are the cluster's own: a plan that needs others is refused too.

Its readiness (before each run and after `heal_all`) is what the harness asks of its own
cluster: every broker seen at the start is registered again, a fresh replicated topic has
its full ISR, and a group and a transaction coordinator answer.
"""
from __future__ import annotations

import shlex
import socket
import string
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from onceproof.cluster.cluster import Cluster
from onceproof.cluster.metadata import Metadata
from onceproof.errors import SetupError, Unsettled

# The primitives a user may give a command for, and what each does to a node.
COMMANDS = {
    "kill": "kill the node's broker process at once (SIGKILL)",
    "start": "start the node's broker again",
    "pause": "pause the node's broker process (SIGSTOP)",
    "resume": "resume a paused broker process (SIGCONT)",
    "stop": "stop the node's broker cleanly (SIGTERM)",
}
PLACEHOLDERS = ("node", "host", "port")
# The commands a fault primitive runs; wipe (deleting a broker's disk) is not offered.
_RUNS = {"kill": ("kill",), "start": ("start",), "pause": ("pause",), "resume": ("resume",),
         "stop": ("stop",), "restart": ("stop", "start")}
COMMAND_TIMEOUT = 120.0
READY_TIMEOUT = 180.0
# Client settings whose values a report may show; every other value is left out.
_SHOWN = {"security.protocol", "sasl.mechanism", "sasl.mechanisms", "client.dns.lookup"}


def parse_commands(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`KIND=TEMPLATE` pairs (from --fault-command) as {kind: template}, each checked."""
    commands: dict[str, str] = {}
    for pair in pairs:
        kind, eq, template = pair.partition("=")
        kind = kind.strip()
        if not eq or not template.strip():
            raise SetupError(f"--fault-command {pair!r} must be KIND=COMMAND, e.g. "
                             "kill='ssh {host} sudo systemctl kill -s KILL kafka'")
        if kind not in COMMANDS:
            raise SetupError(f"--fault-command {kind!r} is no fault command: use "
                             f"{', '.join(COMMANDS)}")
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            raise SetupError(f"--fault-command {kind}: {exc} (write {{{{ and }}}} for literal "
                             "braces)") from None
        unknown = sorted({f for f in fields if f not in PLACEHOLDERS})
        if unknown:
            raise SetupError(f"--fault-command {kind}: unknown placeholder "
                             f"{', '.join('{' + f + '}' for f in unknown)}; use "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        commands[kind] = template
    return commands


@dataclass
class Broker:
    id: int
    host: str
    port: int


@dataclass
class ExternalCluster(Metadata):
    """A cluster at `bootstrap`, reached with `client_config`, its node faults run by
    `commands` (kind -> template). `keep`: leave what runs create (topics, groups)
    instead of deleting it."""
    bootstrap: str
    client_config: dict = field(default_factory=dict, repr=False)
    commands: dict[str, str] = field(default_factory=dict)
    keep: bool = False
    owned = False
    base: dict = field(default_factory=dict)  # broker settings: the cluster's own
    brokers: dict[int, Broker] = field(default_factory=dict)
    version: str = "unknown"
    down_nodes: set[int] = field(default_factory=set)
    paused: set[int] = field(default_factory=set)
    # Commands run since the last take_commands(), for the fault op that ran them.
    ran: list[dict] = field(default_factory=list)
    on_event: object = None

    def __post_init__(self) -> None:
        self.overrides = self.base
        # Probe topics, groups and ids of readiness checks: under one prefix of their
        # own, so what they leave after a crash can be found and deleted.
        self.probe_prefix = f"onceproof-ready-{uuid.uuid4().hex[:6]}-"

    # ---- lifecycle -------------------------------------------------------------------

    def up(self, timeout: float = 10.0) -> ExternalCluster:
        """Connect and learn the brokers; refuses in one line, having created nothing,
        when the cluster cannot be reached or refuses the client settings."""
        try:
            meta = self.admin().list_topics(timeout=timeout)
        except KafkaException as exc:
            raise SetupError(f"cannot reach the cluster at {self.bootstrap}: {_reason(exc)}; "
                             "check --bootstrap and --client-config") from None
        self.brokers = {b.id: Broker(b.id, b.host, b.port) for b in meta.brokers.values()}
        if not self.brokers:
            raise SetupError(f"the cluster at {self.bootstrap} reports no brokers")
        self.version = reported_version(self.bootstrap, self.client_config)
        return self

    def down(self) -> None:
        """Nothing to stop, the cluster is not ours; what the readiness probes left
        (groups, topics) goes."""
        if self.brokers:
            self.clean_up(self.probe_prefix)

    def __enter__(self) -> ExternalCluster:
        if not self.brokers:
            self.up()
        self.wait_ready()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    # Plans name nodes 1..N (strategies draw them so, and the harness's own cluster has
    # those ids); a cluster brought by the user may number its brokers 0..N-1 or 1001...
    # Node i of a plan is the i-th broker by id here, both ways: what the faults are
    # handed, and what the targets resolve to (coordinator goes through leader). The
    # user's commands get the broker's own id.
    @property
    def nodes(self) -> list[int]:
        return list(range(1, len(self.brokers) + 1))

    def broker(self, node: int) -> Broker:
        """The broker a plan's node number stands for."""
        if node not in self.nodes:
            raise SetupError(f"no node {node}: the cluster's {self.n} brokers are nodes "
                             f"{self.nodes[0]}-{self.nodes[-1]}")
        return self.brokers[sorted(self.brokers)[node - 1]]

    def _node(self, broker_id: int | None) -> int | None:
        ids = sorted(self.brokers)
        return ids.index(broker_id) + 1 if broker_id in ids else None

    def leader(self, topic: str, partition: int) -> int | None:
        return self._node(super().leader(topic, partition))

    def followers(self, topic: str, partition: int) -> list[int]:
        return [n for b in super().followers(topic, partition) if (n := self._node(b))]

    @property
    def n(self) -> int:
        return len(self.brokers)

    def ensure_instruments(self) -> None:
        """No instruments of ours to keep up."""

    def refuses(self, broker: dict) -> str | None:
        """Why these broker settings cannot be had: a cluster the harness did not start
        keeps its own."""
        if not broker:
            return None
        return ("it sets broker settings (" + ", ".join(f"{k}={v}" for k, v in sorted(broker.items()))
                + "), and a cluster the harness did not start keeps its own")

    def configure(self, broker: dict, timeout: float = 180.0) -> None:
        if (why := self.refuses(broker)):
            raise SetupError(f"this plan cannot run here: {why}; drop the plan's `broker`, or "
                             "run it without --bootstrap")

    def described(self) -> dict:
        """What a run on this cluster tested, for its history, verdict and report."""
        return {"kafka_version": self.version, "nodes": self.nodes, "broker": {},
                "external": True, "bootstrap": self.bootstrap,
                "brokers": [f"{b.id}@{b.host}:{b.port}" for b in map(self.broker, self.nodes)],
                "client_config": {k: (v if k in _SHOWN else "(set)")
                                  for k, v in sorted(self.client_config.items())},
                "fault_commands": sorted(self.commands)}

    def install_release(self, version: str) -> None:
        raise SetupError(f"cannot move the nodes of a cluster the harness did not start to "
                         f"Kafka {version}; upgrade it yourself and run again")

    def lacks(self, primitive: str) -> str | None:
        """Why this cluster cannot do a primitive of workloads/faults.py (`links` for every
        network one), or None: node primitives need the user's commands."""
        if primitive == "links":
            return "network faults need the harness's own proxies"
        if primitive == "wipe":
            return "deleting a broker's disk is not offered for a cluster the harness did not start"
        if primitive in ("upgrade", "downgrade", "finalize"):
            return ("changing a broker's release or feature levels is not offered for a "
                    "cluster the harness did not start")
        missing = [c for c in _RUNS[primitive] if c not in self.commands]
        return "no " + ", ".join(f"--fault-command {c}=..." for c in missing) if missing else None

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                admin = self.admin()
                seen = set(admin.list_topics(timeout=5).brokers)
                if not set(self.brokers) <= seen:
                    last = f"broker(s) {sorted(set(self.brokers) - seen)} not registered"
                elif (missing := self.probes_fail(admin)):
                    last = missing
                else:
                    return
            except KafkaException as exc:
                last = _reason(exc)
            time.sleep(1)
        raise SetupError(f"the cluster at {self.bootstrap} was not ready after {timeout:.0f} s "
                         f"({last})")

    # ---- node primitives, by the user's commands -------------------------------------

    def _run(self, kind: str, node: int) -> None:
        if kind not in self.commands:
            raise SetupError(f"no --fault-command {kind}=... was given")
        broker = self.broker(node)
        command = self.commands[kind].format(node=broker.id, host=broker.host, port=broker.port)
        started = time.monotonic()
        try:
            proc = subprocess.run(command, shell=True, capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
            exit_code, output = proc.returncode, (proc.stdout + proc.stderr)
        except subprocess.TimeoutExpired as exc:
            exit_code = None
            output = f"timed out after {COMMAND_TIMEOUT:.0f} s; " + _text(exc.stdout) + _text(exc.stderr)
        record = {"command": kind, "node": node, "broker": broker.id, "run": command,
                  "exit": exit_code, "seconds": round(time.monotonic() - started, 3),
                  "output": output[-2000:]}
        self.ran.append(record)
        if exit_code != 0:
            raise CommandFailed(f"fault command {kind} for node {node} "
                                + (f"exited {exit_code}" if exit_code is not None
                                   else "timed out") + f": {shlex.quote(output.strip()[-300:])}")

    def take_commands(self) -> list[dict]:
        ran, self.ran = self.ran, []
        return ran

    def _take_down(self, kind: str, node: int) -> None:
        self.broker(node)  # an unknown node is refused before any command
        self.down_nodes.add(node)  # whatever the command says, the node may be down now
        self.paused.discard(node)
        self._run(kind, node)

    def _bring_back(self, kind: str, node: int, state: set[int]) -> None:
        """Undo a node's state by the command `kind`, if this harness put it there."""
        self.broker(node)
        if node in state:
            self._run(kind, node)
            state.discard(node)

    def kill(self, node: int) -> None:
        self._take_down("kill", node)

    def stop(self, node: int) -> None:
        self._take_down("stop", node)

    def start(self, node: int) -> None:
        self._bring_back("start", node, self.down_nodes)

    def restart(self, node: int) -> None:
        self.stop(node)
        self.start(node)

    def pause(self, node: int) -> None:
        self.broker(node)
        self.paused.add(node)
        self._run("pause", node)

    def resume(self, node: int) -> None:
        self._bring_back("resume", node, self.paused)

    def wipe(self, node: int) -> None:
        raise SetupError(self.lacks("wipe") or "")

    # ---- links: not ours ---------------------------------------------------------------

    def links(self, node: int | None = None, kinds: tuple[str, ...] = ()) -> list[str]:
        raise SetupError(self.lacks("links") or "")

    def links_crossing(self, sides: list[list[int]]) -> list[str]:
        raise SetupError(self.lacks("links") or "")

    def disable(self, links: list[str]) -> None:
        raise SetupError(self.lacks("links") or "")

    def toxic(self, *args, **kwargs) -> None:
        raise SetupError(self.lacks("links") or "")

    def request_fault(self, links: list[str], attributes: dict) -> str:
        raise SetupError(self.lacks("links") or "")

    def release_requests(self) -> list[str]:
        return []

    def request_events(self) -> list[dict]:
        """No kafka toxic of ours sits on this cluster's links: nothing to tell."""
        return []

    def heal(self) -> None:
        """No link of this cluster is ours to break, so none needs healing."""

    def heal_all(self, timeout: float = READY_TIMEOUT) -> None:
        """Resume and start every node this harness paused or took down, by the user's
        commands, then wait until the cluster is ready."""
        for node in sorted(self.paused):
            self.resume(node)
        for node in sorted(self.down_nodes):
            self.start(node)
        self.wait_ready(timeout)

    @property
    def faults(self) -> list[dict]:
        return ([{"effect": "down", "node": n} for n in sorted(self.down_nodes)]
                + [{"effect": "paused", "node": n} for n in sorted(self.paused)])

    # ---- what runs create ----------------------------------------------------------------

    def clean_up(self, prefix: str) -> list[str]:
        """Delete the topics and consumer groups whose names start with prefix (a run's,
        or this object's probes), unless `keep`; return what could not be deleted.
        Transactional ids cannot be deleted by a client: the brokers expire them
        (transactional.id.expiration.ms, 7 days by default)."""
        if self.keep:
            return []
        admin = self.admin()
        left: list[str] = []
        try:
            topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
            if topics:
                left += _failed("topic", admin.delete_topics(topics, operation_timeout=30))
            groups = [g.group_id for g in admin.list_consumer_groups().result(15).valid
                      if g.group_id.startswith(prefix)]
            if groups:
                left += _failed("group", admin.delete_consumer_groups(groups, request_timeout=15))
        except KafkaException as exc:
            left.append(f"everything under {prefix} ({_reason(exc)})")
        if left:
            # Said where the user looks, not only returned: it is their cluster.
            print(f"onceproof: could not delete {'; '.join(left)} from {self.bootstrap}",
                  file=sys.stderr)
        return left


# Either kind of cluster: what a run, a search or a trial is handed.
AnyCluster = Cluster | ExternalCluster


class CommandFailed(Unsettled):
    """A user's fault command exited non-zero or timed out: whether the fault happened is
    unknown (its op is info)."""


def _failed(what: str, futures: dict) -> list[str]:
    """The deletions (name -> future) that failed, each with its reason."""
    failed = []
    for name, fut in futures.items():
        try:
            fut.result(40)
        except KafkaException as exc:
            failed.append(f"{what} {name} ({_reason(exc)})")
    return failed


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if err is not None and hasattr(err, "str") else str(exc)


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


# ---- the version the cluster reports --------------------------------------------------

# metadata.version feature levels and the release line that introduced each, from
# MetadataVersion in Kafka's server-common (levels 7-34, Kafka 3.3 to 4.5).
_LEVELS = {7: "3.3", 8: "3.4", 9: "3.5", 10: "3.5", 11: "3.5", 12: "3.6", 13: "3.6", 14: "3.6",
           15: "3.7", 16: "3.7", 17: "3.7", 18: "3.7", 19: "3.7", 20: "3.8", 21: "3.9",
           22: "4.0", 23: "4.0", 24: "4.0", 25: "4.0", 26: "4.1", 27: "4.1", 28: "4.2",
           29: "4.2", 30: "4.3", 31: "4.4", 32: "4.4", 33: "4.4", 34: "4.5"}


def reported_version(bootstrap: str, client_config: dict, timeout: float = 5.0) -> str:
    """The release line the first bootstrap broker reports, from the highest
    metadata.version it supports (ApiVersions v3, KIP-584), e.g. "Kafka 3.9.x"; a
    broker that reports no features (not Kafka, or before 3.3) or cannot be asked in
    plain TCP (SSL) is said to be so."""
    protocol = str(client_config.get("security.protocol", "plaintext")).lower()
    if protocol not in ("plaintext", "sasl_plaintext"):
        return f"not asked (ApiVersions is read in plain TCP, not over {protocol})"
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        features = _supported_features(host.strip("[]"), int(port), timeout)
    except (OSError, ValueError, struct.error):
        return "not reported (the broker did not answer ApiVersions v3)"
    level = features.get("metadata.version")
    if level is None:
        return "not reported (no metadata.version feature: not Kafka, or before 3.3)"
    line = _LEVELS.get(level)
    return (f"{line}.x (metadata.version level {level})" if line
            else f"newer than Kafka 4.5 (metadata.version level {level})")


def _supported_features(host: str, port: int, timeout: float) -> dict[str, int]:
    """{feature: highest supported level} from an ApiVersions v3 response."""
    client = b"onceproof"
    header = struct.pack(">hhih", 18, 3, 11, len(client)) + client + b"\x00"
    body = _compact(b"onceproof") + _compact(b"1") + b"\x00"
    request = header + body
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", _recv(conn, 4))[0]
        data = _recv(conn, size)
    reader = _Reader(data)
    reader.take(">i")  # correlation id (the response header of ApiVersions is v0)
    if reader.take(">h") != 0:
        raise ValueError("ApiVersions refused")
    for _ in range(reader.uvarint() - 1):
        reader.take(">hhh")
        reader.skip_tags()
    reader.take(">i")  # throttle
    features: dict[str, int] = {}
    for _ in range(reader.uvarint()):
        tag, size = reader.uvarint(), reader.uvarint()
        end = reader.at + size
        if tag == 0:  # SupportedFeatures: name, min_version, max_version
            for _ in range(reader.uvarint() - 1):
                name = reader.compact_string()
                _, high = reader.take(">hh")
                reader.skip_tags()
                features[name] = high
        reader.at = end
    return features


def _compact(raw: bytes) -> bytes:
    return _uvarint(len(raw) + 1) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        text = self.data[self.at:self.at + n].decode()
        self.at += n
        return text

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.at += self.uvarint()
