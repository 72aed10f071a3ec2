"""Exactly-once properties of a correctly configured Kafka application, each under faults,
on the real cluster. A failure leaves the smallest failing plan with its history, verdict
and node logs under artifacts/counterexamples/<test name>/.

A property passes only with evidence that its claim was exercised: across the examples
that ran, the histories must show what the claim is about (acknowledged writes, committed
transactions, seeks and reads) and at least one fault that fired, so a run that tested
nothing, or nothing under faults, cannot pass. A property fails on a stall (a client call
that overstayed its own timeout) as on a violation, unless it names the stall it allows
and why.
"""
from __future__ import annotations

import pytest

from onceproof.api import holds_on
from onceproof.workloads.faults import SETS
from onceproof.workloads.strategies import concurrent_plans, plans

pytestmark = pytest.mark.cluster


# A stall a property may show, as (anomaly type, the client call it is of, why).
SEND_OFFSETS_STALL = ("late_return", "send_offsets",
                      "librdkafka's send_offsets_to_transaction blocks past its timeout when "
                      "its group coordinator goes away (librdkafka #5456 and #5511; "
                      "docs/findings.md), which the mixed faults do")


def _valid(trials, plan, allowed: tuple[tuple[str, str, str], ...] = ()):
    """The plan's run is valid and live, but for the stalls `allowed` names: each of
    their examples must be of the call allowed."""
    trial = trials.run(plan)
    if trial is None:
        return
    verdict = trial.verdict
    assert verdict.valid, trials.failed(trial)
    unexplained = [t for t in verdict.stalls
                   if not any(t == kind and all(e["detail"].startswith(f"{call} ")
                                                for e in verdict.examples.get(t, ()))
                              for kind, call, _ in allowed)]
    assert not unexplained, trials.failed(trial)


# A client-side request timeout below the slow_acks preset's latency makes the producer retry writes
# that were already appended: idempotence must keep each value to one offset.
@holds_on(plans("producers", faults=SETS["mixed"] + ("slow_acks",), max_rounds=8,
                config={"producer": {"socket.timeout.ms": 1500, "message.timeout.ms": 180000}}),
          exercising=("acknowledged_writes", "faults"))
def test_idempotent_producers_write_each_value_once(trials, plan):
    _valid(trials, plan)


@holds_on(plans("transactions", faults=SETS["mixed"], max_rounds=8),
          exercising=("commit_txn", "faults"))
def test_transactions_are_atomic_for_read_committed_consumers(trials, plan):
    # The workload's rw_txn sends its group's offsets in its transactions.
    _valid(trials, plan, allowed=(SEND_OFFSETS_STALL,))


@holds_on(plans("pipeline", faults=SETS["mixed"], max_rounds=8,
                options={"abort_percent": 25, "crash_percent": 15}),
          exercising=("commit_txn", "faults"))
def test_pipeline_outputs_each_input_exactly_once(trials, plan):
    _valid(trials, plan, allowed=(SEND_OFFSETS_STALL,))


@holds_on(plans("rewind", faults=SETS["mixed"], max_rounds=8,
                options={"consumer_ops": ["poll", "poll", "seek", "commit_offsets", "fetch_offsets"]}),
          exercising=("seek", "records_read", "faults"))
def test_rewinds_read_exactly_what_the_log_holds(trials, plan):
    _valid(trials, plan)


# The concurrent shape: nine clients nonstop, faults landing mid-request, clients crashing.
@holds_on(concurrent_plans("transactions", faults=SETS["mixed"], duration=(10, 20), interval=5.0,
                           crash_every=8.0),
          exercising=("commit_txn", "records_read", "send_offsets", "faults"))
def test_concurrent_transactions_stay_atomic_under_mid_request_faults(trials, plan):
    _valid(trials, plan, allowed=(SEND_OFFSETS_STALL,))


@holds_on(concurrent_plans("pipeline", faults=SETS["mixed"], duration=(10, 20), interval=5.0,
                           crash_every=8.0, options={"abort_percent": 25, "crash_percent": 10}),
          exercising=("commit_txn", "send_offsets", "faults"))
def test_concurrent_pipelines_output_each_input_exactly_once(trials, plan):
    _valid(trials, plan, allowed=(SEND_OFFSETS_STALL,))
