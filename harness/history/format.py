"""What an event of a history is, in plain Python (docs/history.md): its types and op
kinds, the nemesis, the fields it needs and the places never negative. No pandas, numpy
or Arrow: the writer records with these in a client's process; schema.py gives the same
event as Arrow types."""
from __future__ import annotations

EVENT_TYPES = ("invoke", "ok", "fail", "info")
COMPLETIONS = ("ok", "fail", "info")
# The kinds of a client's op (docs/history.md, "Operation kinds"): an op of another
# kind would be read as nothing, its records unjudged. The nemesis's are free.
# Each kind is a name of this module, which the writers (run/) and the checkers use
# rather than the string. A plan's op names (workloads/ops.py) are another vocabulary;
# where the two share a name (send, poll, seek, commit_offsets, fetch_offsets, and the
# streams role) it is the same string, which tests/test_plan_types.py holds, since
# onceproof.workloads may import nothing of onceproof and this package nothing of it.
SEND, POLL, SEEK, ASSIGN = "send", "poll", "seek", "assign"
COMMIT_OFFSETS, FETCH_OFFSETS = "commit_offsets", "fetch_offsets"
BEGIN_TXN, SEND_OFFSETS, COMMIT_TXN, ABORT_TXN = "begin_txn", "send_offsets", "commit_txn", "abort_txn"
WATERMARKS, STREAMS = "watermarks", "streams"
OP_KINDS = (SEND, POLL, SEEK, ASSIGN, COMMIT_OFFSETS, FETCH_OFFSETS,
            BEGIN_TXN, SEND_OFFSETS, COMMIT_TXN, ABORT_TXN, WATERMARKS, STREAMS)
NEMESIS = "nemesis"
# The nemesis's first op: the cluster the run had (Kafka version, nodes, broker settings).
CLUSTER = "cluster"
# The nemesis's ops that stop (SIGSTOP) and continue a client's processes
# (workloads/faults.py); their ok values name the `processes`. A heal continues them too.
PAUSE_CLIENT, RESUME_CLIENT, HEAL = "pause_client", "resume_client", "heal"
REQUIRED = ("index", "op", "process", "type", "f", "time")
# Where a record, position or partition is: never negative in Kafka. A tool that
# writes -1 (or librdkafka's -1001) for "not known" writes null instead.
NON_NEGATIVE = ("partition", "offset", "low", "high", "lso", "size", "corrupt")
# And below 2**53: the checks bound places by floats (NaN where unknown), exact below
# that; Kafka's offsets stay far below it.
PLACE_LIMIT = 2 ** 53
# What an item of a list must hold: the partition it is about (Kafka names one by its
# topic and number), and a record the value that identifies its write.
ITEM_REQUIRED = ("topic", "partition")
RECORD_REQUIRED = (*ITEM_REQUIRED, "value")


def is_text(s: str) -> bool:
    """Whether a string is text: a lone surrogate escape ("\\ud800") is valid JSON, but
    no UTF-8 string, Arrow's or a report's, can hold it."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class HistoryError(Exception):
    """A history that cannot be checked; the message is one line that says what to do."""
