"""Named suites: configurations known to break exactly-once, which the harness must catch,
and the configuration that must survive every fault.

Each suite is a plan strategy plus the anomaly types that count as catching it. The
strategies lean toward the failure (the right faults, the right op mix) so that a small
budget finds it; they do not script it: Hypothesis still chooses the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .faults import SETS
from .strategies import concurrent_plans, plans

# A concurrent suite plan: 10-30 s of nine clients, a fault about every 6 s and a client
# crash about every 15 s. Shrinking shortens it toward 10 s and drops faults and clients.
CONCURRENT_SECONDS = (10, 30)


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

    def strategy(self, nodes: int = 3, mode: str = "rounds"):
        """Plans of either shape, with the same workload, configs, op mix and faults."""
        if mode == "concurrent":
            return concurrent_plans(self.workload, faults=self.faults, duration=CONCURRENT_SECONDS,
                                    nodes=nodes, interval=6.0, crash_every=15.0,
                                    config=self.config, options=self.options)
        return plans(self.workload, faults=self.faults, fault_percent=self.fault_percent,
                     max_rounds=self.max_rounds, nodes=nodes, config=self.config,
                     options=self.options)

    @property
    def known_good(self) -> bool:
        return not self.expect


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
          options={"all_clients": True, "txn_ops": ["send", "abort", "commit"]}),
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
          # One partition, so every write goes to the leader that the fault isolates.
          config={"topics": {"t": {"partitions": 1}},
                  "producer": {"enable.idempotence": False, "acks": 1, "retries": 0,
                               "message.timeout.ms": 5000}},
          faults=("partition_leader",), fault_percent=60),
    Suite("no_rewind_after_abort",
          "a pipeline aborts but keeps its consumer position, so the aborted input is "
          "never processed again",
          frozenset({"lost_input"}), "pipeline",
          config={"clients": {"x0": {"pipeline": {"rewind_on_abort": False}}}},
          options={"abort_percent": 50, "all_clients": True}),
    Suite("correct_pipeline",
          "idempotent, acks=all, read_committed, offsets in the transaction, rewind on "
          "abort: must pass under every fault",
          frozenset(), "pipeline", faults=SETS["mixed"], fault_percent=40),
    Suite("correct_transactions",
          "transactional producers and a read_committed consumer under every fault",
          frozenset(), "transactions", faults=SETS["mixed"], fault_percent=40),
]}
