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

ROLES = {
    # role -> the ops it can run
    "producer": {"send"},
    "txn_producer": {"begin", "send", "commit", "abort"},
    "consumer": {"poll", "seek", "commit_offsets", "fetch_offsets"},
    "pipeline": {"process"},
    "rw_txn": {"begin", "send", "poll", "commit", "abort"},
    # A Kafka Streams application: it runs by itself; its op looks at it (run/jvm.py).
    "streams": {"observe"},
}
# Roles whose client has a transactional id, and roles whose client reads in a group.
TRANSACTIONAL = frozenset({"txn_producer", "pipeline", "rw_txn"})
GROUPED = frozenset({"consumer", "pipeline", "rw_txn", "streams"})
SEEK_TO = ("beginning", "committed", "offset")
# What a mix may set (docs/plans.md).
MIX = {"abort_percent": "percent of pipeline steps that abort (default 20)",
       "crash_percent": "percent of pipeline steps that crash mid-step (default 0)",
       "txn_ops": "ops to pick from inside a transaction: send, poll (rw_txn), commit, abort",
       "consumer_ops": "ops a consumer picks from: poll, seek, commit_offsets, fetch_offsets",
       "max_records": "most records per send (default 3)",
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
                        "to the other members, and back when it rejoins"}
COMMIT_TIMEOUT = ("retry", "abort")
TXN_OPS = ("send", "send", "commit", "abort")
RW_TXN_OPS = ("send", "poll", "send", "poll", "commit", "commit", "abort")
CONSUMER_OPS = ("poll", "poll", "poll", "seek", "commit_offsets", "fetch_offsets")
# Metadata sizes a commit_offsets op draws (for its partitions in order, cycling).
METADATA_SIZES = 2
# A read-write transaction ends after this many micro-ops (Jepsen's is 4).
RW_TXN_MAX_OPS = 4


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
    if role == "producer":
        return {"f": "send", "n": choose.integer(1, records)}
    if role in ("txn_producer", "rw_txn"):
        if "open" not in state:
            state["open"] = 0
            return {"f": "begin"}
        if role == "rw_txn" and state["open"] >= RW_TXN_MAX_OPS:
            choice = choose.pick(("commit", "commit", "abort"))
        else:
            default = RW_TXN_OPS if role == "rw_txn" else TXN_OPS
            choice = choose.pick(mix.get("txn_ops", default))
        if choice == "send":
            state["open"] += 1
            return {"f": "send", "n": choose.integer(1, records)}
        if choice == "poll":
            state["open"] += 1
            return {"f": "poll", "n": choose.integer(1, 10), "timeout": mix.get("poll_timeout", 0.2)}
        del state["open"]
        return {"f": choice}
    if role == "consumer":
        choice = choose.pick(mix.get("consumer_ops", CONSUMER_OPS))
        if choice == "seek":
            return {"f": "seek", "to": choose.pick(SEEK_TO), "back": choose.integer(1, 3)}
        if choice == "poll" and "poll_timeout" in mix:
            return {"f": "poll", "timeout": mix["poll_timeout"]}
        if choice == "commit_offsets" and mix.get("commit_metadata"):
            # One size for each of the first partitions it commits; the rest cycle.
            return {"f": choice, "metadata": [choose.pick(mix["commit_metadata"])
                                              for _ in range(METADATA_SIZES)]}
        return {"f": choice}
    if role == "pipeline":
        op: dict = {"f": "process", "n": choose.integer(1, 5)}
        if "poll_timeout" in mix:
            op["timeout"] = mix["poll_timeout"]
        if choose.integer(0, 99) < mix.get("abort_percent", 20):
            op["abort"] = True
        elif choose.integer(0, 99) < mix.get("crash_percent", 0):
            op["crash"] = True
        return op
    if role == "streams":
        return {"f": "observe"}
    return None


def closing_op(role: str, state: dict) -> dict | None:
    """The op that ends what a client has open (a commit), or None."""
    if "open" in state:
        del state["open"]
        return {"f": "commit"}
    return None
