"""My consume-transform-produce application's settings output each input exactly once,
with nine clients running nonstop while nodes are killed, paused and cut off."""
from hypothesis import settings

from onceproof.api import concurrent_plans, holds_on

MY_CONSUMER = {"isolation.level": "read_committed", "fetch.wait.max.ms": 100}
MY_PRODUCER = {"transaction.timeout.ms": 10000, "message.timeout.ms": 10000}


@holds_on(concurrent_plans("pipeline", faults=("kill", "pause", "isolate", "slow_leader"),
                           duration=(10, 20), interval=5.0,
                           config={"consumer": MY_CONSUMER, "producer": MY_PRODUCER},
                           options={"abort_percent": 20}),
          exercising=("commit_txn", "send_offsets", "faults"))
@settings(max_examples=2)
def test_my_pipeline_outputs_each_input_once(trials, plan):
    trial = trials.run(plan)
    if trial is None:
        return
    # Safety only: `trial.verdict.live` would also fail the property on a stall, and
    # librdkafka's send_offsets_to_transaction is known to stall when its group
    # coordinator goes away (docs/suites.md, "Hunts").
    assert trial.verdict.valid, trials.failed(trial)
