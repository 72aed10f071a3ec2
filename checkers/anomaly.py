"""The one shape every checker reports in, and the severity of each anomaly type.

A row is one concrete anomaly: its `type`, its `severity`, and the fields a person needs
to find it in the history (the process and op that saw or did it, the partition and
offset, the value, the transaction) plus a `detail` sentence.

Severity: a `violation` contradicts what Kafka claims and makes the history invalid; a
`note` is reported but does not, because Kafka does not claim to prevent it (see
checkers/cycles.py).
"""
from __future__ import annotations

import pandas as pd
import pyarrow as pa

VIOLATION, NOTE = "violation", "note"

COLUMNS = ("type", "severity", "process", "op", "topic", "partition", "offset", "value",
           "txn", "detail")
LONGS = frozenset({"op", "partition", "offset", "value"})
SCHEMA = pa.schema([(c, pa.int64() if c in LONGS else pa.string()) for c in COLUMNS])

# Every anomaly type, in the order a verdict lists them.
TYPES = (
    "duplicate", "inconsistent_offset", "unattributed_read",
    "lost_write", "unseen", "hanging_txn",
    "aborted_read", "precommitted_read", "torn_txn",
    "poll_skip", "nonmonotonic_poll", "rewind_mismatch",
    "nonmonotonic_send", "commit_order",
    "g0", "g1c", "g_single",
    "offset_regression", "stale_offset_fetch",
    "duplicate_output", "lost_input",
)


def empty(spark):
    """No anomalies, as a Spark DataFrame."""
    from .spark import struct_type
    return spark.createDataFrame([], struct_type(SCHEMA))


def num(x) -> int | None:
    """A pandas/numpy integer (or NA) as a plain int for an anomaly record."""
    return None if x is None or pd.isna(x) else int(x)
