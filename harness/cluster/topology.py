"""Where every byte between clients and nodes flows: one toxiproxy proxy per directed link.

A toxiproxy proxy guards only its destination, so disabling "the proxy of node 1" would stop
traffic *to* node 1 while node 1 still reaches the others. To cut both directions, each
ordered pair of nodes gets its own proxies:

- ``client-i``: clients -> node i (node i advertises its CLIENT listener at this proxy);
- ``repl-j-i``: node j -> node i for inter-broker traffic (replication fetches, transaction
  markers). Broker j's inter-broker listener is ``REPL_FROM_j``; every broker i binds a
  ``REPL_FROM_j`` listener and advertises it at ``repl-j-i``, so j reaches i only there;
- ``ctl-j-i``: node j -> node i for KRaft controller traffic (Raft fetches and votes,
  broker heartbeats). The same trick: every node binds a ``CTL_FROM_j`` controller listener
  per source j and advertises it at ``ctl-j-i``; node j names ``CTL_FROM_j`` first in its
  ``controller.listener.names``, and its ``controller.quorum.voters`` names the proxies.
  Advertising matters: since KIP-853 a Raft leader tells followers its own endpoints,
  and an unadvertised listener is announced at its real port, which bypassed the proxy
  (seen on 4.3.1: a partitioned leader kept its followers).

A node reaches itself directly: that is no network link, and a partition never cuts it.
"""
from __future__ import annotations

import base64
import fcntl
import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import portpicker

from onceproof.cluster.provision import cache_dir

HOST = "127.0.0.1"
# Where a cluster's ports are drawn from: below the kernel's ephemeral range (read at
# run time), from which the system hands out the local ports of outgoing connections.
# A port picked there (as portpicker's bind(0) picks) could be taken by some client's
# connection in the seconds before the JVM binds it: a CI run lost a cluster start so.
_FIRST_PORT = 10000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _claim(port: int) -> int | None:
    """A lock on `port` that this process holds until it closes the descriptor returned,
    or until it ends however it ends; None when another process holds it.

    Being free when drawn is not enough: a partition disables proxies, which closes
    their listening ports for as long as it lasts, and another cluster on the machine
    starting meanwhile could draw one of them (a soak lost its run so); re-enabling the
    proxy then fails. Every cluster of onceproof's claims its ports here first."""
    folder = cache_dir() / "ports"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def free_port(claims: dict[int, int]) -> int:
    """A loopback port free now, outside the ephemeral range, claimed by no other
    cluster of onceproof's; adds it and its claim's descriptor to `claims`."""
    try:
        end = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        end = 32768  # Linux's default start of the range
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(_FIRST_PORT, max(end, _FIRST_PORT + 1000))
        if port in claims or (fd := _claim(port)) is None:
            continue
        if portpicker.is_port_free(port):
            claims[port] = fd
            return port
        os.close(fd)
    raise OSError(f"no free port between {_FIRST_PORT} and {end} after 1000 tries")


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of 16 bytes). Like
    Kafka's own Uuid.randomUuid(), never one that starts with "-": the storage tool's
    argument parser would take it for an option (1 start in 64 failed to format)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass(frozen=True)
class Link:
    """A directed link that a proxy carries: src is a node id, or 0 for the clients."""
    kind: str  # "client", "repl" or "ctl"
    src: int
    dst: int
    listen: int  # the proxy's port
    upstream: int  # the real port on dst

    @property
    def name(self) -> str:
        return f"client-{self.dst}" if self.kind == "client" else f"{self.kind}-{self.src}-{self.dst}"


@dataclass(frozen=True)
class NodePorts:
    client: int
    controller: dict[int, int]  # source node -> the port this node listens on for that source
    repl: dict[int, int]


@dataclass
class Topology:
    nodes: list[int]
    ports: dict[int, NodePorts]
    links: list[Link]
    toxiproxy_api: int
    cluster_id: str = field(default_factory=lambda: new_cluster_id())
    # The descriptors of the ports' claims (_claim), held while the cluster runs.
    claims: dict[int, int] = field(default_factory=dict, repr=False)

    def release(self) -> None:
        """Give up the ports' claims: the cluster is down."""
        for fd in self.claims.values():
            os.close(fd)
        self.claims.clear()

    @classmethod
    def allocate(cls, n: int) -> Topology:
        nodes = list(range(1, n + 1))
        claims: dict[int, int] = {}

        def pick() -> int:
            return free_port(claims)
        ports = {i: NodePorts(pick(), {j: pick() for j in nodes}, {j: pick() for j in nodes})
                 for i in nodes}
        links = [Link("client", 0, i, pick(), ports[i].client) for i in nodes]
        for j in nodes:
            for i in nodes:
                if i != j:
                    links.append(Link("repl", j, i, pick(), ports[i].repl[j]))
                    links.append(Link("ctl", j, i, pick(), ports[i].controller[j]))
        return cls(nodes, ports, links, pick(), claims=claims)

    def link(self, kind: str, src: int, dst: int) -> Link:
        for link in self.links:
            if (link.kind, link.src, link.dst) == (kind, src, dst):
                return link
        raise KeyError((kind, src, dst))

    def crossing(self, sides: list[list[int]]) -> list[Link]:
        """The node-to-node links whose two ends lie on different sides of a partition.

        Nodes named on no side form a side of their own, so ``[[1]]`` isolates node 1.
        """
        side_of = {node: k for k, side in enumerate(sides) for node in side}
        rest = len(sides)
        return [l for l in self.links if l.kind != "client"
                and side_of.get(l.src, rest) != side_of.get(l.dst, rest)]

    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{self.link('client', 0, i).listen}" for i in self.nodes)

    def server_properties(self, node: int, data_dir: str, overrides: dict | None = None,
                          release: tuple[int, ...] = (4,)) -> dict:
        """Node `node`'s server.properties for Kafka `release` (its version as numbers):
        the one place where settings differ between releases."""
        p = self.ports[node]
        def via(kind: str, src: int, dst: int, real: int) -> int:
            return real if src == dst else self.link(kind, src, dst).listen
        repl_names = [f"REPL_FROM_{j}" for j in self.nodes]
        ctl_names = [f"CTL_FROM_{node}"] + [f"CTL_FROM_{j}" for j in self.nodes if j != node]
        listeners = [f"CLIENT://{HOST}:{p.client}"]
        listeners += [f"CTL_FROM_{j}://{HOST}:{p.controller[j]}" for j in self.nodes]
        listeners += [f"REPL_FROM_{j}://{HOST}:{p.repl[j]}" for j in self.nodes]
        advertised = [f"CLIENT://{HOST}:{self.link('client', 0, node).listen}"]
        if release >= (3, 9):
            advertised += [f"CTL_FROM_{j}://{HOST}:{via('ctl', j, node, p.controller[j])}"
                           for j in self.nodes]
        # Before 3.9 (KIP-853) a node that is also a broker must not advertise controller
        # listeners: the storage tool and the broker refuse them. Nor does it need to: a
        # Raft leader did not announce its endpoints then, and peers found each other
        # only through controller.quorum.voters, which names the proxies.
        advertised += [f"REPL_FROM_{j}://{HOST}:{via('repl', j, node, p.repl[j])}"
                       for j in self.nodes]
        voters = [f"{i}@{HOST}:{via('ctl', node, i, self.ports[i].controller[node])}"
                  for i in self.nodes]
        n = len(self.nodes)
        rf = min(3, n)
        isr = max(1, rf - 1)
        props = {
            "process.roles": "broker,controller",
            "node.id": node,
            "controller.listener.names": ",".join(ctl_names),
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "inter.broker.listener.name": f"REPL_FROM_{node}",
            "listener.security.protocol.map": ",".join(
                f"{name}:PLAINTEXT" for name in ["CLIENT", *ctl_names, *repl_names]),
            "controller.quorum.voters": ",".join(voters),
            "log.dirs": data_dir,
            "num.partitions": 1,
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": 3,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "auto.create.topics.enable": "false",
            "unclean.leader.election.enable": "false",
            "group.initial.rebalance.delay.ms": 0,
            # Test-friendly timings: faults should show within seconds, not minutes.
            "replica.lag.time.max.ms": 4000,
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 4000,
            "controller.quorum.election.timeout.ms": 1000,
            "controller.quorum.fetch.timeout.ms": 2000,
            "controller.quorum.request.timeout.ms": 2000,
            "replica.socket.timeout.ms": 5000,
            "controller.socket.timeout.ms": 5000,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000,
            "transaction.max.timeout.ms": 120000,
            "log.segment.bytes": 16 * 1024 * 1024,
            "num.network.threads": 2,
            "num.io.threads": 2,
            "background.threads": 2,
        }
        props.update(overrides or {})
        return props
