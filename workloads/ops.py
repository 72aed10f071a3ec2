"""What each client does next: the one op vocabulary of both plan shapes.

A round-based plan lists its ops, drawn by Hypothesis (workloads/strategies.py); a
concurrent plan holds a seed per client and each client draws its own op stream while it
runs. Both draw through `next_op`, which only asks a Chooser for choices, so one role's
ops are defined once and mean the same thing in either shape. A client's state (an open
transaction) lives in a dict that next_op keeps, so a stream never commits a transaction
it did not begin.

The mix (a plan's `mix`, a suite's `options`) tunes the choices: `abort_percent` and
`crash_percent` of a pipeline's steps, `txn_ops` and `consumer_ops` (lists to pick from,
repeats weighting them), `max_records` per send.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")

# The role names (a plan client's "role") and the op names a plan gives them (an op's
# "f"): one definition each, which the plan's validation, the strategies, the run and
# the report read. The history's op kinds (what a client records) are another
# vocabulary, onceproof.history.format's (OP_KINDS): a plan op records ops of its
# kinds (a `begin` records a `begin_txn`); the names the two share are the same
# strings, which tests/test_plan_types.py holds.
PRODUCER, TXN_PRODUCER, CONSUMER = "producer", "txn_producer", "consumer"
PIPELINE, RW_TXN, STREAMS = "pipeline", "rw_txn", "streams"
SEND, BEGIN, COMMIT, ABORT = "send", "begin", "commit", "abort"
POLL, SEEK, COMMIT_OFFSETS, FETCH_OFFSETS = "poll", "seek", "commit_offsets", "fetch_offsets"
PROCESS, OBSERVE = "process", "observe"
ROLES = {
    # role -> the ops it can run
    PRODUCER: {SEND},
    TXN_PRODUCER: {BEGIN, SEND, COMMIT, ABORT},
    CONSUMER: {POLL, SEEK, COMMIT_OFFSETS, FETCH_OFFSETS},
    PIPELINE: {PROCESS},
    RW_TXN: {BEGIN, SEND, POLL, COMMIT, ABORT},
    # A Kafka Streams application: it runs by itself; its op looks at it (run/jvm.py).
    STREAMS: {OBSERVE},
}
# Roles whose client has a transactional id, and roles whose client reads in a group.
TRANSACTIONAL = frozenset({TXN_PRODUCER, PIPELINE, RW_TXN})
GROUPED = frozenset({CONSUMER, PIPELINE, RW_TXN, STREAMS})
SEEK_TO = ("beginning", "committed", "offset")
# What a mix may set (docs/plans.md).
MIX = {"abort_percent": "percent of pipeline steps that abort (default 20)",
       "crash_percent": "percent of pipeline steps that crash mid-step (default 0)",
       "txn_ops": "ops to pick from inside a transaction: send, poll (rw_txn), commit, abort",
       "consumer_ops": "ops a consumer picks from: poll, seek, commit_offsets, fetch_offsets",
       "max_records": "most records per send (default 3)",
       "txn_sends": "[low, high]: sends per transaction, each transaction drawing its count "
                    "(from 1 to 50; default: a transactional client picks its ops from "
                    "txn_ops, a pipeline polls once): a txn_producer's sends, an rw_txn's "
                    "poll-then-send pairs, a pipeline's poll-transform-send rounds (a batch "
                    "of input per transaction); more sends write to more partitions",
       "txn_pause_ms": "[low, high]: milliseconds (0 to 120000) a transaction pauses, once, "
                       "while it is open, as an application's work or a stalled handler: "
                       "between two sends or between the last send and the commit (with "
                       "txn_sends, the place is drawn; without, before the commit)",
       "poll_timeout": "seconds a poll waits for records (default 1, 0.2 in a read-write "
                       "transaction)",
       "commit_metadata": "sizes in bytes to pick from for the metadata a consumer "
                          "attaches to each partition's offset when it commits (default: "
                          "none; the broker refuses more than offset.metadata.max.bytes, "
                          "4096 by default)",
       "commit_timeout": "what a transactional client does when its commit fails with a "
                         "retriable error, a timeout most often: retry (the default, "
                         "librdkafka's advice; up to 3 attempts) or abort (what many "
                         "applications do)",
       "restart_after": "seconds a crashed client's application takes to come back (default "
                        "0; concurrent plans): time for its group to hand its partitions "
                        "to the other members, and back when it rejoins",
       "value_bytes": "each record value's size in bytes, from 32 to 1 MiB (1048576): a size, "
                      "or a list of sizes each record draws one of (default: the record's "
                      "identity alone, a few bytes; rounds plans too)",
       "value_content": "what fills a sized value after its identity: compressible (the "
                        "default, as most application data is) or random"}
COMMIT_TIMEOUT = ("retry", "abort")
TXN_OPS = (SEND, SEND, COMMIT, ABORT)
RW_TXN_OPS = (SEND, POLL, SEND, POLL, COMMIT, COMMIT, ABORT)
CONSUMER_OPS = (POLL, POLL, POLL, SEEK, COMMIT_OFFSETS, FETCH_OFFSETS)
# Metadata sizes a commit_offsets op draws (for its partitions in order, cycling).
METADATA_SIZES = 2
# A read-write transaction ends after this many micro-ops (Jepsen's is 4).
RW_TXN_MAX_OPS = 4
# The bounds of mix.txn_sends and mix.txn_pause_ms (docs/plans.md).
TXN_SENDS_MAX = 50
TXN_PAUSE_MAX_MS = 120_000
TXN_SHAPE_BOUNDS = {"txn_sends": (1, TXN_SENDS_MAX), "txn_pause_ms": (0, TXN_PAUSE_MAX_MS)}
# What an op may carry for the application's pause before it (a send's, a commit's or
# abort's; a process op's `pause_before` says before which of its rounds, its rounds
# plus one being before its commit) and a pipeline's rounds per transaction.
PAUSE_MS, PAUSE_BEFORE, ROUNDS = "pause_ms", "pause_before", "rounds"


def range_problem(value, low: int, high: int) -> str | None:
    """What is wrong with a mix range [low, high] within these bounds, or None."""
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in value)):
        return f"must be [low, high], two integers, not {value!r}"
    if not low <= value[0] <= value[1] <= high:
        return f"must have {low} <= low <= high <= {high}, not {value!r}"
    return None


class Chooser(Protocol):
    def pick(self, options: Sequence[T]) -> T: ...

    def integer(self, low: int, high: int) -> int: ...


class Drawn:
    """Choices drawn by Hypothesis, so they shrink (toward the first option, the low end)."""

    def __init__(self, draw):
        self.draw = draw

    def pick(self, options):
        from hypothesis import strategies as st
        return self.draw(st.sampled_from(list(options)))

    def integer(self, low, high):
        from hypothesis import strategies as st
        return self.draw(st.integers(low, high))


class Seeded:
    """Choices from a seeded generator: a concurrent client's op stream, the same on
    every replay of its plan."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def pick(self, options):
        return options[self.rng.randrange(len(options))]

    def integer(self, low, high):
        return self.rng.randint(low, high)


def next_op(role: str, state: dict, choose: Chooser, mix: dict) -> dict | None:
    """The next op of a client of `role`, given what it has open (state["open"]: the ops
    of its open transaction so far)."""
    records = mix.get("max_records", 3)
    if role == PRODUCER:
        return {"f": SEND, "n": choose.integer(1, records)}
    if role in (TXN_PRODUCER, RW_TXN):
        if "open" not in state:
            state["open"] = 0
            if "txn_sends" in mix:
                state.update(sends=choose.integer(*mix["txn_sends"]), sent=0, polled=0)
            if "txn_pause_ms" in mix:
                # Before which op of the transaction it pauses: a send after the first,
                # or (its sends plus one) the commit.
                k = state.get("sends", 1)
                state.update(pause_ms=choose.integer(*mix["txn_pause_ms"]),
                             pause_before=choose.integer(2, k + 1) if "sends" in state else 2)
            return {"f": BEGIN}
        if "sends" in state:
            return _shaped(role, state, choose, mix, records)
        if role == RW_TXN and state["open"] >= RW_TXN_MAX_OPS:
            choice = choose.pick((COMMIT, COMMIT, ABORT))
        else:
            default = RW_TXN_OPS if role == RW_TXN else TXN_OPS
            choice = choose.pick(mix.get("txn_ops", default))
        if choice == SEND:
            state["open"] += 1
            return {"f": SEND, "n": choose.integer(1, records)}
        if choice == POLL:
            state["open"] += 1
            return {"f": POLL, "n": choose.integer(1, 10), "timeout": mix.get("poll_timeout", 0.2)}
        return _ended(choice, state)
    if role == CONSUMER:
        choice = choose.pick(mix.get("consumer_ops", CONSUMER_OPS))
        if choice == SEEK:
            return {"f": SEEK, "to": choose.pick(SEEK_TO), "back": choose.integer(1, 3)}
        if choice == POLL and "poll_timeout" in mix:
            return {"f": POLL, "timeout": mix["poll_timeout"]}
        if choice == COMMIT_OFFSETS and mix.get("commit_metadata"):
            # One size for each of the first partitions it commits; the rest cycle.
            return {"f": choice, "metadata": [choose.pick(mix["commit_metadata"])
                                              for _ in range(METADATA_SIZES)]}
        return {"f": choice}
    if role == PIPELINE:
        op: dict = {"f": PROCESS, "n": choose.integer(1, 5)}
        if "poll_timeout" in mix:
            op["timeout"] = mix["poll_timeout"]
        if "txn_sends" in mix:
            op[ROUNDS] = choose.integer(*mix["txn_sends"])
        if "txn_pause_ms" in mix:
            op[PAUSE_MS] = choose.integer(*mix["txn_pause_ms"])
            op[PAUSE_BEFORE] = choose.integer(2, op.get(ROUNDS, 1) + 1)
        if choose.integer(0, 99) < mix.get("abort_percent", 20):
            op["abort"] = True
        elif choose.integer(0, 99) < mix.get("crash_percent", 0):
            op["crash"] = True
        return op
    if role == STREAMS:
        return {"f": OBSERVE}
    return None


def _paused(op: dict, state: dict, index: int) -> dict:
    """op, the index-th of its transaction after its begin, with the transaction's
    pause before it if that is where the pause was drawn."""
    if state.get("pause_before") == index and state.get("pause_ms"):
        return {**op, PAUSE_MS: state["pause_ms"]}
    return op


def _ended(choice: str, state: dict) -> dict:
    """The op that ends the open transaction (commit or abort); its state forgotten."""
    index = state.get("sends", 1) + 1 if "sends" in state else 2
    op = _paused({"f": choice}, state, index)
    for key in ("open", "sends", "sent", "polled", "pause_ms", "pause_before"):
        state.pop(key, None)
    return op


def _shaped(role: str, state: dict, choose: Chooser, mix: dict, records: int) -> dict:
    """The next op of a transaction of mix.txn_sends sends: each send (an rw_txn's after
    a poll), then a commit or an abort."""
    if state["sent"] < state["sends"]:
        if role == RW_TXN and state["polled"] == state["sent"]:
            state["polled"] += 1
            return {"f": POLL, "n": choose.integer(1, 10), "timeout": mix.get("poll_timeout", 0.2)}
        state["sent"] += 1
        return _paused({"f": SEND, "n": choose.integer(1, records)}, state, state["sent"])
    return _ended(choose.pick((COMMIT, COMMIT, ABORT)), state)


def closing_op(role: str, state: dict) -> dict | None:
    """The op that ends what a client has open (a commit), or None."""
    if "open" in state:
        _ended(COMMIT, state)
        return {"f": COMMIT}  # no pause: the application is shutting down
    return None
