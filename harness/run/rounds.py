"""Round-based plans: the steps in order, every op of a round running concurrently.

A fault step is applied between rounds, so no request is in flight when it fires: the
shape for small properties, which shrink cheaply because a plan means the same thing on
every run. The concurrent shape (run/load.py) is the one that lands faults mid-request.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from onceproof.run.fleet import HUNG, Fleet
from onceproof.workloads.plan import Plan

# A safety net far above what a round takes when every client call keeps to its bounds
# (clients.bounded): a client whose op has not returned by then is left behind, so no
# unknown hang of a client library can stop a run.
ROUND_TIMEOUT = 600.0


def drive(plan: Plan, fleet: Fleet, fire: Callable[[dict], None],
          on_progress: Callable[[float, float, str], None] | None = None) -> dict:
    """Run the plan's steps; fire(step) applies a fault step as an op of the nemesis."""
    steps = plan.steps
    for i, step in enumerate(steps):
        if on_progress:
            on_progress(i, len(steps), f"fault: {step.fault['f']}" if step.fault is not None
                        else f"{len(step.ops or ())} ops")
        if step.ops is not None:
            _round(fleet, step.ops)
        elif step.fault is not None:
            fire(step.fault)
    return {"ops": sum(len(s.ops or ()) for s in steps), "replaced": fleet.replaced}


def _round(fleet: Fleet, ops: dict) -> None:
    """Every named client runs its op, concurrently, each in a daemon thread (a thread
    blocked forever in a client library must not keep the process from exiting).

    A client still busy after ROUND_TIMEOUT is left behind: its op stays invoked without
    a completion, which the history reads as unknown (info), and the application goes on
    as a new process (run/fleet.py). A client library error that escapes an op replaces
    the process the same way, as a crash of the application would; any other exception
    is a bug of the harness and stops the run."""
    errors: dict[str, BaseException] = {}

    def work(cid, op, client):
        try:
            client.run(op)
        except KafkaException as exc:
            fleet.stopped(cid, client, exc, op)
        except BaseException as exc:  # re-raised in the runner's thread below
            errors[cid] = exc

    threads = {cid: threading.Thread(target=work, args=(cid, op, fleet.current[cid]), daemon=True,
                                     name=f"onceproof-client-{cid}")
               for cid, op in ops.items()}
    for t in threads.values():
        t.start()
    deadline = time.monotonic() + ROUND_TIMEOUT
    for cid, t in threads.items():
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            fleet.replace(cid, HUNG, f"client {fleet.current[cid].process} did not finish its op "
                          f"in {ROUND_TIMEOUT:.0f} s", ops[cid])
    for cid in threads:
        if cid in errors:
            raise errors[cid]
