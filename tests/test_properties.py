"""Exactly-once properties of a correctly configured Kafka application, each under faults,
on the real cluster. A failure leaves the smallest failing plan with its history, verdict
and node logs under artifacts/counterexamples/<test name>/.

A property passes only with evidence that its claim was exercised: across the examples
that ran, the histories must show what the claim is about (acknowledged writes, committed
transactions, seeks and reads), so a run that tested nothing cannot pass.
"""
from __future__ import annotations

import pytest

from onceproof.api import holds_on
from onceproof.workloads.faults import SETS
from onceproof.workloads.strategies import concurrent_plans, plans

pytestmark = pytest.mark.cluster


def _valid(trials, plan):
    trial = trials.run(plan)
    if trial is not None:
        assert trial.verdict.valid, trials.failed(trial)


# A client-side request timeout below the slow_acks preset's latency makes the producer retry writes
# that were already appended: idempotence must keep each value to one offset.
@holds_on(plans("producers", faults=SETS["mixed"] + ("slow_acks",), max_rounds=8,
                config={"producer": {"socket.timeout.ms": 1500, "message.timeout.ms": 180000}}),
          exercising=("acknowledged_writes",))
def test_idempotent_producers_write_each_value_once(trials, plan):
    _valid(trials, plan)


@holds_on(plans("transactions", faults=SETS["mixed"], max_rounds=8),
          exercising=("commit_txn",))
def test_transactions_are_atomic_for_read_committed_consumers(trials, plan):
    _valid(trials, plan)


@holds_on(plans("pipeline", faults=SETS["mixed"], max_rounds=8,
                options={"abort_percent": 25, "crash_percent": 15}),
          exercising=("commit_txn",))
def test_pipeline_outputs_each_input_exactly_once(trials, plan):
    _valid(trials, plan)


@holds_on(plans("rewind", faults=SETS["mixed"], max_rounds=8,
                options={"consumer_ops": ["poll", "poll", "seek", "commit_offsets", "fetch_offsets"]}),
          exercising=("seek", "records_read"))
def test_rewinds_read_exactly_what_the_log_holds(trials, plan):
    _valid(trials, plan)


# The concurrent shape: nine clients nonstop, faults landing mid-request, clients crashing.
@holds_on(concurrent_plans("transactions", faults=SETS["mixed"], duration=(10, 20), interval=5.0,
                           crash_every=8.0),
          exercising=("commit_txn", "records_read", "faults"))
def test_concurrent_transactions_stay_atomic_under_mid_request_faults(trials, plan):
    _valid(trials, plan)


@holds_on(concurrent_plans("pipeline", faults=SETS["mixed"], duration=(10, 20), interval=5.0,
                           crash_every=8.0, options={"abort_percent": 25, "crash_percent": 10}),
          exercising=("commit_txn", "send_offsets", "faults"))
def test_concurrent_pipelines_output_each_input_exactly_once(trials, plan):
    _valid(trials, plan)
