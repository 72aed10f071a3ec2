"""Named suites: configurations known to break exactly-once, which the harness must catch,
the configuration that must survive every fault, and hunts.

Each suite is a plan strategy plus the anomaly types that count as catching it. The
strategies lean toward the failure (the right faults, the right op mix) so that a small
budget finds it; they do not script it: Hypothesis still chooses the plan.

A historical suite calibrates the harness against Kafka's own past: a correct application
under the faults a documented broker bug needs, run on a release that had the bug (it must
be found) and on releases that fixed it (they must pass), side by side. Only when both
sides hold is a hit evidence that the load and faults reach real bugs.

A hunt is a correct configuration (nothing planted) plus the faults and client policy
that a known exposure of Kafka or librdkafka needs, run in concurrent plans: any safety
violation or stall it shows is a finding about the system under test, to be read op by
op and written up in docs/findings.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .faults import SETS
from .ops import ABORT, COMMIT, COMMIT_OFFSETS, FETCH_OFFSETS, POLL, SEEK, SEND, TRANSACTIONAL
from .plan import JAVA, LIBRDKAFKA
from .strategies import WORKLOADS, concurrent_plans, plans
from .upgrades import (
    alternate_libraries,
    heal_before_changes,
    restart_after_finalize,
    with_release_change,
)

# A concurrent suite plan: 10-30 s of nine clients, a fault about every 6 s and a client
# crash about every 15 s. Shrinking shortens it toward 10 s and drops faults and clients.
# Hunts run longer plans: what they look for needs load to build up.
CONCURRENT_SECONDS = (10, 30)
HUNT_SECONDS = (20, 60)


@dataclass(frozen=True)
class Suite:
    name: str
    why: str
    expect: frozenset[str]  # empty: the suite must pass
    workload: str
    config: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    faults: tuple[str, ...] = ()
    fault_percent: int = 40
    max_rounds: int = 8
    hunts: str = ""  # a hunt: the exposure it hunts for, and where it is described
    interval: float = 6.0  # concurrent plans: seconds between faults
    seconds: tuple[int, int] = CONCURRENT_SECONDS  # concurrent plans: how long, shortest first
    crash_every: float = 15.0  # concurrent plans: seconds between client crashes
    since: str = ""  # the first Kafka release the suite applies to, and why (after a colon)
    # The plan shapes a search can find its failure in; more than one, a side by side.
    shapes: tuple[str, ...] = ("rounds", "concurrent")
    # An upgrade under load (docs/plans.md, "Upgrades"): the release the suite's cluster
    # starts on (a fresh cluster of its own; empty: the session's), the release every
    # node moves to during each plan, one after another, and the features finalized
    # after the last node ({name: level}, one step each).
    kafka: str = ""
    upgrade_to: str = ""
    finalize: dict = field(default_factory=dict)
    # The client libraries a plan's clients are spread over (upgrades.alternate_
    # libraries), so each runs each role; empty: as the plan says.
    libraries: tuple[str, ...] = ()

    def strategy(self, nodes: int = 3, mode: str = "rounds"):
        """Plans of either shape, with the same workload, configs, op mix and faults; a
        suite that changes releases adds its upgrade and finalizations to each."""
        if mode == "concurrent":
            drawn = concurrent_plans(self.workload, faults=self.faults, duration=self.seconds,
                                     nodes=nodes, interval=self.interval,
                                     crash_every=self.crash_every,
                                     config=self.config, options=self.options)
        else:
            drawn = plans(self.workload, faults=self.faults, fault_percent=self.fault_percent,
                          max_rounds=self.max_rounds, nodes=nodes, config=self.config,
                          options=self.options)
        if not (self.libraries or self.changes_release):
            return drawn
        return drawn.map(lambda plan: self.with_change(plan, nodes))

    @property
    def changes_release(self) -> bool:
        return bool(self.upgrade_to or self.finalize)

    @property
    def evidence(self) -> tuple[str, ...]:
        """What a pass of this suite needs its plans to have shown, besides a write
        acknowledged or something committed (trial.exercised's names): for an upgrade of
        transactional clients, transactions committed before the change, while it went
        on and after it, and, once transaction.version=2 is finalized, transactions the
        Java client began on v2. (A Streams application's transactions are its own, out
        of the history's sight: its committed inputs are its evidence.)"""
        if not self.changes_release or self.workload == "streams":
            return ()
        return (*(f"txns_committed_{when}_change" for when in ("before", "during", "after")),
                *(("txns_begun_v2_after_finalize",) if JAVA in self.libraries
                  and (self.finalize.get("transaction.version") or 0) >= 2 else ()))

    def with_change(self, plan: dict, nodes: int) -> dict:
        """plan on the suite's libraries (Java on the release the nodes move to), with
        its upgrade and finalizations spread over it, every fault healed before each, and
        its Java transactional clients restarted after the last finalize."""
        plan = alternate_libraries(plan, self.libraries, TRANSACTIONAL)
        if not self.changes_release:
            return plan
        if self.upgrade_to and JAVA in self.libraries:
            # The Java client of the release the nodes move to (4.x speaks protocol v2),
            # not of the one they start on.
            plan = {**plan, "java_client": self.upgrade_to}
        plan = heal_before_changes(with_release_change(
            plan, nodes, self.upgrade_to or None, self.finalize, *UPGRADE_PACE))
        return restart_after_finalize(plan, TRANSACTIONAL, JAVA)

    @property
    def known_good(self) -> bool:
        return not self.expect

    @property
    def is_hunt(self) -> bool:
        return bool(self.hunts)

    def on(self, cluster) -> tuple[Suite | None, str]:
        """This suite as it can run on cluster, and what was left out, or (None, why not)
        when it cannot. On a cluster the harness did not start, a suite that needs broker
        settings, or a fault the cluster cannot do (workloads/faults.py), cannot run,
        except that a known-good suite runs under the faults that can be done."""
        from .faults import cannot, kind_of
        if (why := cluster.refuses(self.config.get("broker", {}))):
            return None, why
        if self.changes_release and (why := cannot("upgrade", cluster)):
            return None, f"it upgrades the cluster's nodes: {why}"
        blocked = {name: why for name in self.faults if (why := cannot(kind_of(name), cluster))}
        if not blocked:
            return self, ""
        if not self.known_good:
            name, why = next(iter(blocked.items()))
            return None, f"it needs the fault {name}: {why}"
        left = tuple(n for n in self.faults if n not in blocked)
        return replace(self, faults=left), ("without " + ", ".join(blocked)
                                            + (" (no fault left)" if not left else ""))

    def applies_to(self, kafka_version: str) -> bool:
        if not self.since:
            return True
        first = self.since.split(":")[0]
        return _release(kafka_version) >= _release(first)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".") if x.isdigit())


def _lagging_leader_lost(name: str, why: str, broker: dict, leader_fault: str) -> Suite:
    """A known-bad broker configuration: the followers of the one partition's leader lag,
    writes are acknowledged by the leader alone, then `leader_fault` takes the leader
    while they still lag; acknowledged writes must be found lost."""
    return Suite(name, why, frozenset({"lost_write", "unseen"}), "producers",
                 # One partition, so every write goes where the faults aim.
                 config={"topics": {"t": {"partitions": 1}}, "broker": broker},
                 # Two faults in order (the leader goes while its followers lag, after
                 # writes), so longer plans with a fault every round: 16 rounds at 100% have
                 # that order in about half the plans drawn, 10 rounds at 70% in a fifth
                 # (300 drawn each).
                 faults=("lag_followers", leader_fault), fault_percent=100, max_rounds=16,
                 # Concurrent plans draw each fault's time and hold (under 1.5 intervals)
                 # on their own, and rarely put a kill inside a lag that has already shrunk
                 # the ISR: 0 of 200 drawn did.
                 shapes=("rounds",))


def _on_java(workload: str, config: dict | None = None) -> dict:
    """`config` with every client of `workload` on the Java client (docs/plans.md)."""
    config = config or {}
    overrides = config.get("clients", {})
    return {**config, "clients": {cid: {**overrides.get(cid, {}), "client": "java"}
                                  for cid in WORKLOADS[workload]["clients"]}}


# acks=1 without retries, on one partition, so every write goes to the leader the fault
# takes away.
_ACKS1 = {"topics": {"t": {"partitions": 1}},
          "producer": {"enable.idempotence": False, "acks": 1, "retries": 0,
                       "message.timeout.ms": 5000}}

# A Streams application whose commits come every second and whose dead instances the
# group notices in 6 s, so a crash lands between commits and its tasks move within a plan.
_STREAMS_APP = {"topology": "fold", "config": {"commit.interval.ms": 1000,
                                               "session.timeout.ms": 6000}}

# An upgrade under load: from the newest 3.x to the newest release, the move most
# operators face (issue 60). A concurrent plan's nemesis fires its entries in order, so
# a slow move delays what follows, and an entry not reached by the end of the plan does
# not fire. A move took 23 s here (2 s to stop, 20 s for the 4.4.0 JVM to start on two
# busy cores, then its ISR), the finalize 5 to 9 s, a restarted Java client about 10 s:
# the moves start at 10 s, one every 20 s (back to back when slower), which leaves the
# plan's last 20 s or more for transactions on v2.
UPGRADE_FROM, UPGRADE_TO = "3.9.2", "4.4.0"
UPGRADE_SECONDS = (120, 150)
UPGRADE_PACE = (10.0, 20.0)  # the first move's second, and seconds between changes


def _upgrade(name: str, why: str, workload: str, config: dict | None = None,
             crash_every: float = 15.0) -> Suite:
    return Suite(name, why, frozenset(), workload, config=config or {}, faults=SETS["mixed"],
                 seconds=UPGRADE_SECONDS, crash_every=crash_every, shapes=("concurrent",),
                 kafka=UPGRADE_FROM, upgrade_to=UPGRADE_TO,
                 finalize={"transaction.version": 2}, libraries=(JAVA, LIBRDKAFKA))


SUITES = {s.name: s for s in [
    Suite("non_idempotent_retries",
          "a producer without idempotence retries a write whose ack was slow, and the "
          "broker appends it again",
          frozenset({"duplicate"}), "producers",
          # socket.timeout.ms is librdkafka's client-side request timeout (request.timeout.ms
          # is the broker's ack timeout, sent inside the request). Below the injected
          # response latency, a produce times out after it was appended; librdkafka drops
          # the connection, cannot reconnect until the fault heals (its handshake is slow
          # too), and retries then: the message timeout must outlive the fault.
          config={"producer": {"enable.idempotence": False, "acks": "all", "retries": 20,
                               "socket.timeout.ms": 1500, "message.timeout.ms": 180000,
                               "retry.backoff.ms": 100}},
          faults=("slow_acks",), fault_percent=60),
    Suite("read_uncommitted_aborts",
          "a read_uncommitted consumer returns records of transactions that abort",
          frozenset({"aborted_read"}), "transactions",
          config={"consumer": {"isolation.level": "read_uncommitted"}},
          options={"all_clients": True, "txn_ops": [SEND, ABORT, COMMIT]}),
    Suite("offsets_outside_txn_crash",
          "a pipeline commits input offsets after its transaction, and crashes in between: "
          "the restarted pipeline processes the same input again",
          frozenset({"duplicate_output"}), "pipeline",
          config={"clients": {"x0": {"pipeline": {"offsets_in_txn": False}}}},
          options={"abort_percent": 0, "crash_percent": 50}),
    Suite("acks1_leader_loss",
          "acks=1 acknowledges a write only the leader has; a partition takes the leader "
          "away and the write is truncated when it rejoins",
          frozenset({"lost_write", "unseen"}), "producers",
          config=_ACKS1, faults=("partition_leader",), fault_percent=60),
    Suite("acks1_leader_kill",
          "acks=1 acknowledges a write only the leader has; the leader is killed (SIGKILL) "
          "before its followers fetched it, a follower takes over without it, and the old "
          "leader truncates it when it comes back",
          frozenset({"lost_write", "unseen"}), "producers",
          # A node fault only, so a cluster the harness did not start finds it through
          # the user's kill and start commands.
          config=_ACKS1,
          # Concurrent plans only: a kill loses what the followers have not fetched yet,
          # which is milliseconds of writes; lock-step rounds have none in flight then
          # (0 of 8 rounds plans caught it, 4 concurrent plans did).
          faults=("kill_leader",), fault_percent=60, shapes=("concurrent",)),
    # Broker configuration alone, with correct clients (idempotent, acks=all,
    # read_committed): see _lagging_leader_lost.
    _lagging_leader_lost(
        "unclean_leader_election",
        "unclean.leader.election.enable lets a follower that fell behind lead once the "
        "in-sync leader dies: the writes acknowledged while it lagged are truncated from "
        "the old leader when it rejoins",
        # min.insync.replicas=1 (Kafka's shipped default), so the in-sync replicas can be
        # the leader alone. On three nodes that each run a controller, an ISR of two down
        # takes the controller quorum with it and nothing is elected at all. The same
        # faults with unclean election off stay valid: the partition waits for its
        # leader (tests/test_broker_config.py).
        {"unclean.leader.election.enable": True, "min.insync.replicas": 1}, "kill_leader"),
    _lagging_leader_lost(
        "min_insync_1_disk_loss",
        "min.insync.replicas=1 lets acks=all mean the leader alone once its followers "
        "lag; that leader loses its disk, comes back empty and is elected again: the "
        "followers truncate to its empty log",
        # Unclean election stays off. On 4.3.1 (eligible leader replicas, KIP-966) the
        # controller keeps the partition offline until its periodic leader adjustment,
        # which elects the last known leader back, empty (docs/findings.md). That check
        # runs every 300 s by default; 10 s here only brings it inside a plan.
        {"min.insync.replicas": 1, "leader.imbalance.check.interval.seconds": 10},
        "wipe_leader"),
    Suite("no_rewind_after_abort",
          "a pipeline aborts but keeps its consumer position, so the aborted input is "
          "never processed again",
          frozenset({"lost_input"}), "pipeline",
          config={"clients": {"x0": {"pipeline": {"rewind_on_abort": False}}}},
          options={"abort_percent": 50, "all_clients": True}),
    Suite("java_non_idempotent_retries",
          "the Java client without idempotence retries a write whose ack was slow, and the "
          "broker appends it again",
          frozenset({"duplicate"}), "producers",
          # The Java client's request.timeout.ms is its own request timeout, the one
          # librdkafka calls socket.timeout.ms: below the injected response latency, a
          # produce times out after it was appended and is sent again.
          config=_on_java("producers", {"producer": {
              "enable.idempotence": False, "acks": "all", "retries": 20,
              "request.timeout.ms": 1500, "message.timeout.ms": 180000,
              "retry.backoff.ms": 100}}),
          faults=("slow_acks",), fault_percent=60),
    Suite("correct_pipeline",
          "idempotent, acks=all, read_committed, offsets in the transaction, rewind on "
          "abort: must pass under every fault",
          frozenset(), "pipeline", faults=SETS["mixed"], fault_percent=40),
    Suite("java_correct_pipeline",
          "correct_pipeline with every client on the Java client (transaction protocol v2 "
          "from 4.0): must pass under every fault",
          frozenset(), "pipeline", config=_on_java("pipeline"), faults=SETS["mixed"],
          fault_percent=40),
    Suite("streams_at_least_once",
          "a Kafka Streams fold with processing.guarantee=at_least_once, its instances "
          "killed and replaced: a successor redoes inputs whose outputs and folded state "
          "were already written",
          frozenset({"streams_duplicate_output", "wrong_fold"}), "streams",
          config={"clients": {"s0": {"streams": {**_STREAMS_APP, "guarantee": "at_least_once"}}}},
          faults=SETS["node"], crash_every=8.0, seconds=(30, 60), shapes=("concurrent",)),
    Suite("streams_exactly_once",
          "the same Kafka Streams fold with exactly_once_v2, its instances killed and "
          "replaced: must pass under every fault",
          frozenset(), "streams", config={"clients": {"s0": {"streams": _STREAMS_APP}}},
          faults=SETS["mixed"], crash_every=8.0, seconds=(30, 60), shapes=("concurrent",)),
    Suite("correct_transactions",
          "transactional producers and a read_committed consumer under every fault",
          frozenset(), "transactions", faults=SETS["mixed"], fault_percent=40),
    # Records the size of application data, compressed (issue 59): the brokers'
    # decompression and validation of compressed transactional batches under every
    # fault, each value read back checked byte for byte (corrupt_value).
    Suite("large_values_compressed",
          "transactional producers and read-write transactions writing 16 KiB "
          "compressible values with lz4, and a read_committed consumer, under every fault: "
          "must pass, every value read back byte for byte",
          frozenset(), "transactions", config={"producer": {"compression.type": "lz4"}},
          options={"value_bytes": 16384, "value_content": "compressible"},
          faults=SETS["mixed"], fault_percent=40),
    # Upgrades under load (docs/plans.md, "Upgrades"): each starts a cluster of its own
    # on UPGRADE_FROM, moves every node to UPGRADE_TO one after another while its
    # clients, half on the Java client of UPGRADE_TO and half on librdkafka, run under
    # the mixed faults, then finalizes transaction.version=2 and restarts the Java
    # transactional clients (search.UPGRADE_EVIDENCE says what must be seen).
    _upgrade("upgrade_transactions",
             "transactional producers and read-write transactions, on the Java client and "
             "librdkafka, and a read_committed consumer, through a rolling upgrade and "
             "transaction protocol v2 turned on, under every fault: must pass", "transactions"),
    _upgrade("upgrade_pipeline",
             "consume-transform-produce pipelines, on the Java client and librdkafka, "
             "through a rolling upgrade and transaction protocol v2 turned on, under every "
             "fault: must pass", "pipeline"),
    _upgrade("upgrade_streams",
             "the Kafka Streams fold with exactly_once_v2 through a rolling upgrade and "
             "transaction protocol v2 turned on, its instances killed and replaced, under "
             "every fault: must pass", "streams",
             config={"clients": {"s0": {"streams": _STREAMS_APP}}}, crash_every=8.0),
    # One known-good suite per request fault, on the correct configuration; and the
    # known-bad twin of duplicate_request.
    Suite("held_produce_verified",
          "transactional producers whose Produce requests are held until after later "
          "requests of theirs (the transaction's end included) or for seconds: the "
          "partition leader checks a transactional write against its coordinator "
          "(KIP-890 part 1, on by default from 3.6), so a late one is refused",
          frozenset(), "transactions", faults=("hold_txn_request",), fault_percent=60,
          since="3.6.0: the first release that verifies transactional writes"),
    Suite("dropped_txn_responses",
          "transactional producers and a read_committed consumer whose requests take "
          "effect while their responses are lost: every retry must be recognised",
          frozenset(), "transactions", faults=("drop_txn_response",), fault_percent=60),
    Suite("duplicated_requests_idempotent",
          "idempotent producers and transactional ones whose requests (Produce included) "
          "reach the broker twice: its sequence and epoch checks keep one",
          frozenset(), "transactions", faults=("duplicate_txn_request", "duplicate_produce"),
          options={"all_clients": True}, fault_percent=60),
    Suite("duplicated_produce_plain",
          "a producer without idempotence whose Produce request reaches the broker twice: "
          "the broker has nothing to tell the copy by and appends it again",
          frozenset({"duplicate"}), "producers",
          config={"producer": {"enable.idempotence": False, "acks": "all"}},
          faults=("duplicate_produce",), fault_percent=60),
]}


# Aggressive client timeouts, as latency-sensitive applications set them: transactions
# that time out on the broker in seconds, so fences, epoch bumps and aborts by the
# coordinator happen while requests are still in flight. (librdkafka requires
# message.timeout.ms <= transaction.timeout.ms.)
_FAST_TXNS = {"transaction.timeout.ms": 3000, "message.timeout.ms": 3000,
              "socket.timeout.ms": 3000, "request.timeout.ms": 2000}

# Every request fault aimed at a transaction's requests, client and broker links alike.
_LATE_REQUESTS = ("hold_txn_request", "hold_endtxn", "drop_txn_response",
                  "duplicate_txn_request", "hold_marker", "duplicate_marker")

HUNTS = {s.name: s for s in [
    Suite("delayed_end_txn",
          "transactional producers and read-write transactions with 3 s transaction "
          "timeouts, while their transaction coordinator is paused for 1-12 s, cut off "
          "from the other nodes, or slow on some of its connections, and partition "
          "leaders are slow on some connections, so a commit or abort (EndTxn) or a "
          "produce can arrive after its transaction ended",
          frozenset(), "transactions",
          config={"producer": _FAST_TXNS},
          options={"commit_timeout": "abort"},
          faults=("pause_txn_coordinator", "isolate_txn_coordinator", "slow_txn_coordinator",
                  "slow_leader"),
          seconds=HUNT_SECONDS,
          hunts="KAFKA-17754 class (KIP-890): a delayed EndTxn or produce of one transaction "
                "lands in the next; librdkafka speaks transaction protocol v1, which KIP-890 "
                "part 2 does not protect (librdkafka #5423)"),
    Suite("late_txn_requests",
          "transactional producers and read-write transactions whose requests, one at a "
          "time, are held until the client has moved on, answered without the client "
          "hearing it, or sent twice; and transaction markers between nodes held or sent "
          "twice",
          frozenset(), "transactions",
          faults=_LATE_REQUESTS,
          seconds=HUNT_SECONDS,
          hunts="the KAFKA-17754 family (a request that arrives after its retry): "
                "request-level faults on every request of a transaction, client and broker "
                "links (docs/plans.md, request faults)"),
    Suite("late_pipeline_requests",
          "consume-transform-produce pipelines whose transactions' requests, offsets "
          "included (AddOffsetsToTxn, TxnOffsetCommit), are held, answered unheard or sent "
          "twice; and transaction markers between nodes held or sent twice",
          frozenset(), "pipeline",
          faults=_LATE_REQUESTS,
          seconds=HUNT_SECONDS,
          hunts="the KAFKA-17754 family on the offsets of a transaction: a late "
                "TxnOffsetCommit or EndTxn moving a group's offsets in the next transaction"),
    Suite("idempotent_leader_churn",
          "idempotent producers (acks=all, 5 requests in flight), each sending from 4 "
          "threads at once, every send across up to 12 of 12 partitions, while partition "
          "leaders are killed, paused, cut off or slowed every 8-12 s",
          frozenset(), "producers",
          config={"topics": {"t": {"partitions": 12}},
                  "producer": {"max.in.flight.requests.per.connection": 5, "linger.ms": 20},
                  "clients": {"p0": {"threads": 4}, "p1": {"threads": 4}}},
          options={"max_records": 12},
          faults=("kill_leader", "pause_leader", "isolate_leader", "slow_leader"),
          interval=8.0, seconds=HUNT_SECONDS,
          hunts="librdkafka #4953 (fix PR #4972 open): duplicates when an OUT_OF_ORDER_SEQUENCE "
                "on one partition bumps the idempotent epoch while other partitions' batches "
                "are in flight, during leader changes"),
    Suite("send_offsets_hang",
          "consume-transform-produce pipelines sending offsets in their transactions while "
          "their group coordinator is paused, killed, cut off or slowed",
          frozenset(), "pipeline",
          faults=("pause_group_coordinator", "kill_group_coordinator",
                  "isolate_group_coordinator", "slow_group_coordinator"),
          seconds=HUNT_SECONDS,
          hunts="librdkafka #5456 and #5511: send_offsets_to_transaction blocks past its "
                "timeout when the group coordinator goes away"),
    Suite("kip848_rebalance",
          "consume-transform-produce pipelines of one group on KIP-848's consumer "
          "rebalance protocol (group.protocol=consumer), subscribed to their input, while "
          "members crash and rejoin every few seconds and the group coordinator is paused, "
          "killed, cut off or slowed, so partitions move while transactions hold input "
          "from them",
          frozenset(), "pipeline",
          config={"consumer": {"group.protocol": "consumer"},
                  "clients": {"x0": {"pipeline": {"subscribe": True}}}},
          # A crashed member stays away longer than the group's 5 s heartbeat, so its
          # partitions move to the others, and move again when it rejoins.
          options={"restart_after": 8},
          faults=("pause_group_coordinator", "kill_group_coordinator",
                  "isolate_group_coordinator", "slow_group_coordinator"),
          seconds=HUNT_SECONDS, crash_every=4.0,
          since="4.0: before it the consumer protocol is early access, off by default and "
                "not for production (its 3.7 notes have transactions run with KIP-890's "
                "verification turned off)",
          hunts="KIP-848 (GA in Kafka 4.0 and librdkafka 2.12): reports of stalls and "
                "STALE_MEMBER_EPOCH commit failures; a KIP under discussion says the broker "
                "accepts transactional offsets for partitions the member does not own"),
]}


@dataclass(frozen=True)
class Leg:
    """One side of a historical suite: a Kafka release, broker settings added to the
    suite's, and whether the bug must show there (`has_bug`) or the run must pass."""
    kafka: str
    has_bug: bool
    broker: dict = field(default_factory=dict)
    why: str = ""
    tag: str = ""  # names a leg apart from its release's plain leg (settings, client)
    # The client library of every plan client, as suites' --client names it
    # (java:3.8.0); empty: as the suite's plans say (librdkafka unless they name java).
    client: str = ""

    @property
    def label(self) -> str:
        settings = ",".join(f"{k}={v}" for k, v in sorted(self.broker.items()))
        return (f"{self.kafka}" + (f" ({settings})" if settings else "")
                + (f" on {self.client}" if self.client else ""))


@dataclass(frozen=True)
class Historical:
    """A documented bug of Kafka itself. `suite` is a correct application and the faults
    the bug needs; its `expect` is what the bug shows in a history. Each leg runs the same
    search on its own release and broker settings."""
    suite: Suite
    bug: str
    source: str  # where the bug and its fix are documented, and why the suite reaches it
    legs: tuple[Leg, ...]

    @property
    def name(self) -> str:
        return self.suite.name

    def leg(self, leg: Leg) -> Suite:
        """The suite one leg searches: the bug's anomalies where it must show, nothing at
        all (any violation fails it) where it must pass."""
        broker = {**self.suite.config.get("broker", {}), **leg.broker}
        config = {**self.suite.config, **({"broker": broker} if broker else {})}
        tag = leg.kafka + (f"-{leg.tag}" if leg.tag else "")  # the search adds the client
        return replace(self.suite, name=f"{self.suite.name}-{tag}", config=config,
                       expect=self.suite.expect if leg.has_bug else frozenset())


# The newest release the historical controls run on; tests keep it the newest tested one.
NEWEST_KAFKA = "4.4.0"

HISTORICAL = {h.name: h for h in [
    Historical(
        Suite("kafka_12671",
              "a correct transactional application (idempotent, acks=all, read_committed, "
              "aborting after a send fails) whose requests to one partition's leader are "
              "held past its client's timeouts: it aborts, and the held produce lands after "
              "the abort marker, opening a transaction on that partition that nobody ends "
              "(the last stable offset stops) or that the producer's next transaction "
              "commits (a read_committed consumer returns an aborted write)",
              frozenset({"hanging_txn", "aborted_read"}), "transactions",
              # Short client timeouts, so the application gives up on a produce long before
              # toxiproxy delivers it; a long transaction timeout, so the coordinator does
              # not abort on its own first.
              config={"producer": {"socket.timeout.ms": 2000, "message.timeout.ms": 4000,
                                   "transaction.timeout.ms": 60000}},
              # Concurrent plans: transactions keep going while requests are held, so
              # some send into the held link, give up, and abort before the heal delivers
              # the produce. In rounds plans the heal mostly came first, between a send's
              # round and its commit's: 0 of 20 plans (seed 0) reached the bug.
              faults=("delay_requests_leader",), interval=10.0, seconds=(30, 60),
              shapes=("concurrent",)),
        "KAFKA-12671",
        "KAFKA-12671 (hanging transactions: a produce that lands after its transaction "
        "ended opens one the coordinator does not know); closed by KIP-890 part 1 "
        "(KAFKA-14402, Kafka 3.6.0): the partition leader asks the coordinator whether the "
        "partition is in the transaction before it appends a transactional write "
        "(transaction.partition.verification.enable, true by default)",
        (Leg("3.5.2", True, why="the newest release before KIP-890 part 1"),
         Leg("3.9.2", False, why="KIP-890 part 1's verification, on by default"),
         Leg(NEWEST_KAFKA, False, why="the newest release, verification on"),
         Leg(NEWEST_KAFKA, True, {"transaction.partition.verification.enable": False},
             why="the newest release with the verification turned off: the bug is back",
             tag="noverify"),
         # KIP-890 part 2, the other defence: a client on transaction protocol v2 bumps
         # its epoch with every commit or abort, so the held produce comes with an epoch
         # the partition's leader has seen ended, even with the verification off.
         Leg(NEWEST_KAFKA, False, {"transaction.partition.verification.enable": False},
             why="verification off, the Java client of the release (transaction protocol "
                 "v2): its epoch bump fences the held produce", tag="noverify-java",
             client="java"),
         Leg(NEWEST_KAFKA, True, {"transaction.partition.verification.enable": False},
             why="verification off, the Java client 3.8.0 (transaction protocol v1): "
                 "nothing fences it", tag="noverify-java-3.8.0", client="java:3.8.0"))),
    Historical(
        Suite("kafka_17754",
              "transactional producers and read-write transactions, a read_committed "
              "consumer; the next EndTxn of one transactional client at a time is held "
              "past its request timeout, its retry passes and is answered, and the held "
              "one is let go once the client's next transaction has written",
              frozenset({"aborted_read", "lost_write", "torn_txn"}), "transactions",
              # A request timeout of 3 s, so the client retries the held EndTxn soon; a
              # transaction timeout of a minute, so the coordinator does not end the
              # next transaction on its own before the held request lands.
              config={"producer": {"socket.timeout.ms": 3000, "message.timeout.ms": 10000,
                                   "transaction.timeout.ms": 60000},
                      # After the late EndTxn ends the open transaction, what shows it is
                      # the client writing to a partition that transaction did not have
                      # (its AddPartitionsToTxn opens another under the same epoch) and
                      # then ending the other way: several sends a transaction, over six
                      # partitions, make that likely. (On two partitions, 0 of 3 plans
                      # showed it on 3.8.1; 1 of 3 on 4.4.0.)
                      "topics": {"t": {"partitions": 6}}},
              options={"txn_ops": [SEND, SEND, SEND, COMMIT, ABORT],
                       "max_records": 2},
              faults=("hold_endtxn",), interval=6.0, seconds=(30, 60),
              shapes=("concurrent",)),
        "KAFKA-17754",
        "KAFKA-17754 (a delayed EndTxn or produce of one transaction lands in the "
        "producer's next, which has the same epoch under transaction protocol v1: an "
        "aborted transaction's writes become visible, a committed one's are lost or torn), "
        "found by Jepsen with the Java client 3.8.0; closed by KIP-890 part 2 (Kafka 4.0, "
        "transaction protocol v2: an epoch bump on every commit or abort, so the late "
        "request is fenced), for clients that speak v2. The suite holds the EndTxn itself "
        "(hold_endtxn, a request fault): the order the bug needs is made by the proxy",
        (Leg("3.8.1", True, client="java:3.8.0",
             why="where Jepsen found it: a 3.8 cluster, the Java client 3.8.0"),
         Leg(NEWEST_KAFKA, True, client="java:3.8.0", tag="java-3.8.0",
             why="the newest brokers and a v1 client: part 2 needs the client's bump"),
         Leg(NEWEST_KAFKA, True, tag="librdkafka",
             why="the newest brokers and librdkafka, which speaks only v1 (librdkafka #5423)"),
         Leg(NEWEST_KAFKA, False, client="java", tag="java",
             why="the newest brokers and the Java client of the release, on v2"))),
    Historical(
        Suite("kafka_16371",
              "read_committed consumers of one group commit their offsets with metadata, "
              "sometimes more on one partition than the broker takes "
              "(offset.metadata.max.bytes, 4096): that partition's commit is refused, the "
              "others' go through, and the group's committed offsets must stay readable",
              frozenset({"unreadable_offsets"}), "rewind",
              # Two partitions, a size drawn for each per commit: a commit with one over
              # the limit and one under comes in 4 of 9.
              options={"consumer_ops": [POLL, POLL, COMMIT_OFFSETS, FETCH_OFFSETS, SEEK],
                       "commit_metadata": [0, 100, 5000]},
              # Nothing else: the bug needs no fault.
              faults=(), shapes=("rounds",)),
        "KAFKA-16371",
        "KAFKA-16371 (unstable offsets after a commit in which some partitions' metadata is "
        "over the broker's limit): the group coordinator marks every partition of the "
        "commit pending, completes only those it accepted, and keeps the refused ones "
        "pending for good, so a fetch that asks for stable offsets, as read_committed "
        "consumers do (KIP-447), gets UNSTABLE_OFFSET_COMMIT until the coordinator moves; "
        "fixed in 3.7.1 and 3.8.0 (apache/kafka PR 16072, which leaves the refused "
        "partitions out of the pending set)",
        (Leg("3.7.0", True, why="the last release with the bug"),
         Leg("3.7.1", False, why="the release that fixed it"),
         Leg(NEWEST_KAFKA, False, why="the newest release (the new group coordinator, "
                                      "KIP-848's rewrite, default from 4.0)"))),
]}
