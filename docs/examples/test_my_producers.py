"""My producers' settings keep each write to one offset under faults."""
from hypothesis import settings

from onceproof.api import FAULT_SETS, holds_on, plans

# The settings my application runs its producers with (any librdkafka setting).
MY_PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 20,
               "compression.type": "lz4", "message.timeout.ms": 60000}


@holds_on(plans("producers", faults=FAULT_SETS["mixed"] + ("slow_acks",), max_rounds=6,
                config={"producer": MY_PRODUCER}),
          exercising=("acknowledged_writes",))
@settings(max_examples=2)  # cluster runs of 10-30 s each; raise it for a real search
def test_my_producers_write_each_value_once(trials, plan):
    trial = trials.run(plan)
    if trial is None:  # the search is spent (shrink budget or --time-limit): nothing ran
        return
    assert trial.verdict.valid, trials.failed(trial)
