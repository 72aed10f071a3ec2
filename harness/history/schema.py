"""An event as Arrow types (EVENT), which the fast reader parses a history against and
the per-line reader checks each line against."""
from __future__ import annotations

import pyarrow as pa

from .format import ITEM_REQUIRED, RECORD_REQUIRED

# What an event holds and the types of its fields (docs/history.md). Fields not named
# here (a fault's parameters, anything a tool adds) are not checked and not parsed by
# the fast reader. `value` is described as a field of every event, but a missing one
# is read as {} so that tools writing `{}`-valued kinds (commit_txn, abort_txn) may
# leave it out; a fault's `value` is free-form.
I, S = pa.int64(), pa.string()
# A record's `key` is not among its fields: no check reads it, and parsing the keys of
# every poll's records cost a quarter of the fast reader's time (docs/performance.md,
# "Figures behind the code"). Left in the file, it is skipped unread.
# `size`: a send's record names its value's size in bytes when the plan asks for one;
# `corrupt`: a poll's record whose value is not byte for byte the one its identity makes
# names where it first differs (run/values.py; checkers/log_values.py corrupt_value).
RECORD = pa.struct([("topic", S), ("partition", I), ("value", I), ("source", I),
                    ("offset", I), ("size", I), ("corrupt", I)])
POSITION = pa.struct([("topic", S), ("partition", I), ("offset", I)])
# A partition as assign and watermarks name it: `offset` is where an assigned consumer
# starts reading (an assign's ok), low/high/lso its watermarks.
PARTITION = pa.struct([("topic", S), ("partition", I), ("offset", I), ("low", I), ("high", I),
                       ("lso", I)])
VALUE = pa.struct([
    ("records", pa.list_(RECORD)), ("isolation", S), ("group", S), ("tid", S),
    ("positions", pa.list_(POSITION)), ("partitions", pa.list_(PARTITION)),
    ("offsets", pa.list_(POSITION)), ("timeout_ms", I), ("kept", pa.list_(PARTITION)),
    ("txn_timeout_ms", I),
    # A streams op's declaration: the application's input and output topics, and what
    # it computes (checkers/streams.py).
    ("input", S), ("output", S), ("topology", S),
    # A send_offsets of a group whose input is not each to become an output record (an
    # rw_txn's) says false; absent, true (checkers/pipeline.py).
    ("pipeline", pa.bool_()),
])
# The fields of `value` that are no lists: each is a column of the checkers' ops table
# (checkers/tables.py), so a field added to VALUE is one there with no other edit.
VALUE_SCALARS = tuple(f.name for f in VALUE if not pa.types.is_list(f.type))
EVENT = pa.schema([
    ("index", I), ("op", I), ("process", S), ("type", S), ("f", S), ("time", I),
    ("txn", S), ("error", S), ("final", pa.bool_()), ("value", VALUE),
])


def required_of(item: pa.StructType) -> tuple[str, ...]:
    """What an item of a list of this type must hold."""
    return RECORD_REQUIRED if item == RECORD else ITEM_REQUIRED
