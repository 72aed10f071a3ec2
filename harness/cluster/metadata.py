"""What any Kafka cluster tells a fresh client, the one the harness started or one it was
pointed at: leaders, in-sync followers, coordinators, and whether it is ready for a run.

A subclass gives `bootstrap`, `client_config` (the settings every client of a run needs to
reach the cluster: empty for the harness's own), `n` and `probe_prefix` (the name of the
probe topics, groups and transactional ids its readiness checks create and delete).
"""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, PartitionMetadata

QUIET = {"log_level": 0, "log.connection.close": False}
# The internal topic whose partitions place each kind of coordinator.
INTERNAL_TOPIC = {"transaction": "__transaction_state", "group": "__consumer_offsets"}


def _java_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, in 32-bit signed arithmetic."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_abs(n: int) -> int:
    """Kafka's Utils.abs: the absolute value, and 0 for Integer.MIN_VALUE."""
    return 0 if n == -(1 << 31) else abs(n)


class Metadata:
    bootstrap: str
    n: int
    client_config: dict
    probe_prefix: str

    def connection(self) -> dict:
        """What a client needs to reach the cluster: bootstrap servers and client settings."""
        return {"bootstrap.servers": self.bootstrap, **self.client_config}

    def admin(self) -> AdminClient:
        # Quiet: what goes wrong reaches the caller as an error; librdkafka's own log of
        # each failed connection would flood a terminal while a node is down.
        return AdminClient({**self.connection(), "socket.timeout.ms": 5000, **QUIET,
                            "socket.connection.setup.timeout.ms": 5000})

    def leader(self, topic: str, partition: int) -> int | None:
        """The leader of a partition as a fresh client sees it now (None: none known).
        A fresh client each time: mid-fault, any one broker's view may be stale or empty."""
        part = self._partition(topic, partition)
        return part.leader if part is not None and part.leader >= 0 else None

    def followers(self, topic: str, partition: int) -> list[int]:
        """The in-sync replicas of a partition other than its leader, as a fresh client
        sees them now (empty: none known)."""
        part = self._partition(topic, partition)
        if part is None or part.leader < 0:
            return []
        return sorted(r for r in part.isrs if r != part.leader)

    def _partition(self, topic: str, partition: int):
        try:
            return self.admin().list_topics(topic, timeout=5).topics[topic].partitions.get(partition)
        except (KafkaException, KeyError):
            return None

    def coordinator(self, kind: str, key: str) -> int | None:
        """The node coordinating a transactional id (kind "transaction") or a group
        ("group") now: the leader of the internal partition the key hashes to, as the
        broker computes it (abs of Java's String.hashCode, modulo the partition count),
        so it is known before the client has asked, and while a fault hides it from
        FindCoordinator. None when the internal topic or its leader is not known."""
        part = self._coordinating_partition(kind, key)
        return part.leader if part is not None and part.leader >= 0 else None

    def _coordinating_partition(self, kind: str, key: str) -> PartitionMetadata | None:
        """The partition of a kind of coordinator's internal topic that a key hashes to,
        as a fresh client sees it now (None: the topic or its partitions are not known
        yet)."""
        topic = INTERNAL_TOPIC[kind]
        try:
            parts = self.admin().list_topics(topic, timeout=5).topics[topic].partitions
        except (KafkaException, KeyError):
            return None
        return parts.get(_java_abs(_java_hash(key)) % len(parts)) if parts else None

    # ---- readiness probes --------------------------------------------------------------

    def _probe_name(self) -> str:
        return f"{self.probe_prefix}{uuid.uuid4().hex[:8]}"

    def probes_fail(self, admin: AdminClient) -> str | None:
        """What the readiness probes found missing (None: nothing): a replicated topic's
        full ISR, then a group and a transaction coordinator."""
        if not self.probe_isr(admin):
            return "probe topic has not reached its full ISR"
        return self.probe_coordinators()

    def probe_isr(self, admin: AdminClient) -> bool:
        """A fresh topic replicated to every node reaches its full ISR."""
        topic = self._probe_name()
        replicas = self.n
        try:
            admin.create_topics([NewTopic(topic, 1, replicas)])[topic].result(15)
        except KafkaException:
            return False
        try:
            for _ in range(40):
                part = admin.list_topics(topic, timeout=5).topics[topic].partitions.get(0)
                if part is not None and part.leader >= 0 and len(part.isrs) == replicas:
                    return True
                time.sleep(0.25)
            return False
        finally:
            admin.delete_topics([topic])

    def probe_coordinators(self) -> str | None:
        """None when a fresh group and a fresh transactional id each get an answer from
        their coordinator; otherwise which did not, its internal partition as metadata
        shows it, and the client's error (what a failed readiness wait reports)."""
        # The first group and the first transactional id create __consumer_offsets and
        # __transaction_state. Done here, so a plan's first seconds measure the plan and
        # not the creation of internal topics (a 3 s poll at the start of a run on a
        # fresh cluster otherwise times out before its group coordinator exists).
        # A consumer's committed() and not the admin client's list_consumer_group_offsets:
        # the latter crashes librdkafka (a NULL group handle) when the coordinator is not
        # ready yet (librdkafka #5040), which is exactly when this runs.
        probe = self._probe_name()
        quiet = {**self.connection(), **QUIET}
        consumer = Consumer({**quiet, "group.id": probe})
        kind = "group"
        try:
            consumer.committed([TopicPartition(probe, 0)], timeout=15)
            kind = "transaction"
            producer = Producer({**quiet, "transactional.id": probe})
            producer.init_transactions(15)
        except KafkaException as exc:
            return f"no {kind} coordinator answers yet ({self._internal_partition(kind, probe)}: {exc})"
        finally:
            consumer.close()
        return None

    def _internal_partition(self, kind: str, key: str) -> str:
        """The internal partition that coordinates a key, with its leader and ISR: what
        tells a coordinator that is loading from one that has no leader."""
        topic, part = INTERNAL_TOPIC[kind], self._coordinating_partition(kind, key)
        if part is None:
            return f"{topic} not known yet"
        return f"{topic}-{part.id} leader {part.leader} isr {sorted(part.isrs)}"
