"""Concurrent plans: every client on its own op stream, and a nemesis on its own clock.

Each client runs in its own thread (librdkafka releases the GIL while it waits, so
threads keep many requests in flight), drawing its next op from its seed as soon as
the last one returns, or at its share of the plan's `rate`. The nemesis thread follows
the plan's schedule: a fault fires at its second whatever the clients are doing, so it
lands while their requests are in flight, and a scheduled crash makes that client's
process die before its next op. A watchdog (the calling thread) replaces a process whose
op has run past HANG_AFTER, as a supervisor restarts a stuck application.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from onceproof.memory import trim
from onceproof.run.clients import lane_process
from onceproof.run.fleet import CRASHED, HUNG, Fleet
from onceproof.workloads.ops import Seeded, closing_op, next_op
from onceproof.workloads.plan import Plan

# Far above what an op takes when every client call keeps to its bounds (clients.bounded).
HANG_AFTER = 120.0
# How often the watchdog looks and reports progress.
TICK = 0.5
# How often a run gives back what malloc's arenas keep freed (harness/memory.py,
# for_running): a run of hours would otherwise keep what its threads once freed.
TRIM_EVERY = 30.0
# Seeds of a client's threads after its first: its seed plus a multiple of this.
LANE_SEED_STEP = 1_000_003


@dataclass
class Worker:
    """One thread of a client (a producer may run several, its `threads`, sharing one
    producer instance) and what it is doing now."""
    cid: str
    lane: int = 0  # which of the client's threads: its ops are recorded as lane_process
    thread: threading.Thread | None = None
    op: dict | None = None
    since: float = 0.0  # monotonic start of the current op
    ops: int = 0  # ops started
    crash: threading.Event = field(default_factory=threading.Event)
    fresh: bool = False  # the crash asked for brings it back under a fresh transactional id
    retired: bool = False  # a hung thread left behind: when it returns, it stops


def drive(plan: Plan, fleet: Fleet, fire: Callable[[dict], None],
          on_progress: Callable[[float, float, str], None] | None = None) -> dict:
    """Run the clients and the schedule for the plan's duration. fire(step) applies a
    fault step as an op of the nemesis. Returns counts: ops started, replacements."""
    assert plan.duration is not None, "a concurrent plan has a duration (plan.validate)"
    duration = float(plan.duration)
    mix = plan.mix.to_dict()  # what next_op takes
    restart_after = plan.mix.restart_after or 0.0
    rate = plan.rate
    workers = {lane_process(cid, lane): Worker(cid, lane) for cid, spec in plan.clients.items()
               for lane in range(spec.n_threads)}
    interval = len(workers) / rate if rate else 0.0  # between one thread's ops
    stop = threading.Event()
    errors: list[BaseException] = []
    start = time.monotonic()

    def work(w: Worker, thread_stop: threading.Event) -> None:
        spec = plan.clients[w.cid]
        # Each thread of a client has its own op stream, a function of the client's seed.
        choose = Seeded(spec.op_seed + w.lane * LANE_SEED_STEP)
        state: dict = {}
        next_at = time.monotonic()
        try:
            while not stop.is_set() and not w.retired:
                if w.crash.is_set():
                    w.crash.clear()
                    fleet.replace(w.cid, CRASHED, "crashed by the plan's schedule",
                                  after=restart_after, fresh=w.fresh)
                    state = {}  # the new process has nothing open
                op = next_op(spec.role, state, choose, mix)
                if op is None:
                    break
                if interval:
                    next_at += interval
                    if stop.wait(max(0.0, next_at - time.monotonic())):
                        break
                client = fleet.current[w.cid]
                w.op, w.since = op, time.monotonic()
                w.ops += 1
                try:
                    client.run(op, w.lane)
                except KafkaException as exc:
                    fleet.stopped(w.cid, client, exc, op)
                    state = {}
                w.op = None
            # The run is over: end what is open, as an application shutting down would,
            # so that settling need not wait for the transaction timeout.
            op = closing_op(spec.role, state)
            if op is not None and not w.retired:
                try:
                    fleet.current[w.cid].run(op)
                except KafkaException:
                    pass  # its commit is recorded; a dying client has nothing more to say
        except BaseException as exc:  # a bug of the harness: stop the run, re-raised below
            if not w.retired and not stop.is_set():
                errors.append(exc)
                stop.set()

    def start_worker(w: Worker) -> None:
        w.thread = threading.Thread(target=work, args=(w, stop), daemon=True,
                                    name=f"onceproof-client-{w.cid}")
        w.thread.start()

    def nemesis() -> None:
        try:
            for entry in sorted(plan.schedule, key=lambda e: e.at):
                if stop.wait(max(0.0, start + entry.at - time.monotonic())):
                    return
                if entry.crash is not None:
                    # The application dies as one: its first thread replaces it, and the
                    # others go on with the replacement from their next op.
                    workers[entry.crash].fresh = entry.fresh
                    workers[entry.crash].crash.set()
                elif entry.fault is not None:
                    fire(entry.fault)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    for w in workers.values():
        start_worker(w)
    keeper = threading.Thread(target=nemesis, daemon=True, name="onceproof-nemesis")
    keeper.start()
    trimmed = start
    try:
        while not stop.wait(TICK):
            now = time.monotonic()
            if now - start >= duration:
                break
            if now - trimmed >= TRIM_EVERY:
                trim()
                trimmed = now
            for w in list(workers.values()):
                if w.op is not None and now - w.since > HANG_AFTER:
                    _retire(w, fleet, workers, start_worker)
            if on_progress:
                on_progress(now - start, duration,
                            f"{sum(w.ops for w in workers.values())} ops, "
                            f"{fleet.replaced} clients replaced")
    finally:
        stop.set()
    keeper.join(HANG_AFTER)
    for w in list(workers.values()):
        if w.thread is not None:
            running = time.monotonic() - w.since if w.op is not None else 0.0
            w.thread.join(max(1.0, HANG_AFTER - running))
            if w.thread.is_alive():
                _retire(w, fleet, workers, None)
    if errors:
        raise errors[0]
    return {"ops": sum(w.ops for w in workers.values()), "replaced": fleet.replaced,
            "seconds": time.monotonic() - start}


def _retire(w: Worker, fleet: Fleet, workers: dict[str, Worker], start_worker) -> None:
    """Leave a hung thread behind and, while the run goes on, give its client a new one."""
    w.retired = True
    fleet.replace(w.cid, HUNG, f"{fleet.current[w.cid].process}'s op had not returned "
                  f"{HANG_AFTER:.0f} s after it began", w.op)
    if start_worker is not None:
        fresh = Worker(w.cid, w.lane, ops=w.ops)
        workers[lane_process(w.cid, w.lane)] = fresh
        start_worker(fresh)
