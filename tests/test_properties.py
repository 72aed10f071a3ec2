"""Exactly-once properties of a correctly configured Kafka application, each under faults,
on the real cluster. A failure leaves the smallest failing plan with its history, verdict
and node logs under artifacts/counterexamples/<test name>/.
"""
from __future__ import annotations

import pytest
from hypothesis import given

from onceproof.workloads.faults import SETS
from onceproof.workloads.strategies import plans

pytestmark = pytest.mark.cluster


def _holds(trials, plan):
    trial = trials.run(plan)
    if trial is not None:
        assert trial.verdict.valid, trials.failed(trial)


# A client-side request timeout below the slow_acks preset's latency makes the producer retry writes
# that were already appended: idempotence must keep each value to one offset.
@given(plan=plans("producers", faults=SETS["mixed"] + ("slow_acks",), max_rounds=8,
                  config={"producer": {"socket.timeout.ms": 1500, "message.timeout.ms": 180000}}))
def test_idempotent_producers_write_each_value_once(trials, plan):
    _holds(trials, plan)


@given(plan=plans("transactions", faults=SETS["mixed"], max_rounds=8))
def test_transactions_are_atomic_for_read_committed_consumers(trials, plan):
    _holds(trials, plan)


@given(plan=plans("pipeline", faults=SETS["mixed"], max_rounds=8,
                  options={"abort_percent": 25, "crash_percent": 15}))
def test_pipeline_outputs_each_input_exactly_once(trials, plan):
    _holds(trials, plan)


@given(plan=plans("rewind", faults=SETS["mixed"], max_rounds=8,
                  options={"consumer_ops": ["poll", "poll", "seek", "commit_offsets", "fetch_offsets"]}))
def test_rewinds_read_exactly_what_the_log_holds(trials, plan):
    _holds(trials, plan)
