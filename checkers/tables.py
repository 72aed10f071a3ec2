"""The flat tables a history becomes before any checker runs (docs/history.md, "Parquet
tables"). Defined in one place so the converter, the Parquet files and the checkers
agree on every column and type.

Orders in a history are positions in the file (`index`), not clock readings: they are
exact, and a process does one op at a time, so the invoke index of an op orders it
against everything else that process did.
"""
from __future__ import annotations

import pyarrow as pa

from onceproof.history.schema import VALUE, VALUE_SCALARS

I = pa.int64()
S = pa.string()
B = pa.bool_()


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in fields])


_OP_TIMES = (("invoke_index", I), ("complete_index", I), ("invoke_time", I),
             ("complete_time", I))

SCHEMAS: dict[str, pa.Schema] = {
    # One row per operation: its invoke joined with its completion (type `info` and
    # null complete_* when the history ends before the completion), with the number of
    # records a send asks to write, and each field of its value that is no list
    # (isolation, group, tid; timeout_ms: the timeout the client call was given, when
    # it takes one...), as the invoke has it.
    "ops": _schema(
        ("op", I), ("process", S), ("f", S), ("type", S), ("txn", S), ("final", B),
        *_OP_TIMES, ("error", S), ("n_records", I),
        *((n, VALUE.field(n).type) for n in VALUE_SCALARS)),
    # One row per record a send tried to write. status: committed (in the log and
    # visible to read_committed readers), aborted (appended, or maybe appended, by a
    # transaction that aborted), failed (the send definitely did not happen), unknown.
    # size: the value's size in bytes, when the plan asked for one (run/values.py).
    "writes": _schema(
        ("op", I), ("rec", I), ("process", S), ("txn", S), ("type", S), ("topic", S),
        ("partition", I), ("value", I), ("source", I), ("offset", I), ("size", I),
        *_OP_TIMES, ("txn_outcome", S), ("status", S), ("txn_begin_index", I),
        ("txn_commit_invoke_index", I), ("txn_commit_complete_index", I), ("final", B)),
    # One row per record a poll returned, in the order returned (rec), with what is
    # known of the write of its value (w_*; w_found false when no send wrote it). The
    # converter joins each read in this shape and stores it as a step (kind r, below):
    # there is no reads file, and `reads` of a converted folder is its steps' reads
    # (checkers/store.py), with the columns the steps keep. Nothing else: the join
    # takes each column for tens of millions of reads (w_type, w_topic and
    # w_partition decide their visibility, vis). corrupt: where the value read first
    # differs from the one its identity makes (run/values.py), null when it does not.
    "reads": _schema(
        ("op", I), ("rec", I), ("process", S), ("txn", S), ("txn_outcome", S),
        ("isolation", S), ("group", S), ("final", B), ("topic", S), ("partition", I),
        ("offset", I), ("value", I), ("corrupt", I), ("invoke_index", I), ("complete_index", I),
        ("w_found", B), ("w_op", I), ("w_process", S), ("w_txn", S), ("w_type", S),
        ("w_status", S), ("w_txn_outcome", S), ("w_topic", S), ("w_partition", I),
        ("w_source", I), ("w_invoke_index", I), ("w_complete_index", I),
        ("w_txn_commit_invoke_index", I), ("w_txn_commit_complete_index", I)),
    # Changes of a consumer's position per partition: `seek` (offset = next offset to
    # read) or `reset` (position unknown from here on), with the op that caused it
    # (cause: seek, assign, info = an op of that process ended in info). A seek that
    # ended in info or left its position unknown is a reset with the offset it asked.
    "positions": _schema(
        ("process", S), ("op", I), ("kind", S), ("cause", S), ("topic", S),
        ("partition", I), ("offset", I), ("invoke_index", I), ("complete_index", I)),
    # Consumer-group offsets committed, fetched or sent to a transaction. outcome:
    # committed, unknown, failed (commits) or fetched. effect_*: when a commit could
    # take effect (the commit_txn op for send_offsets).
    "offsets": _schema(
        ("op", I), ("process", S), ("f", S), ("type", S), ("group", S), ("txn", S),
        ("txn_outcome", S), ("topic", S), ("partition", I), ("offset", I),
        ("outcome", S), ("invoke_index", I), ("complete_index", I),
        ("effect_invoke_index", I), ("effect_complete_index", I)),
    # One row per transaction. outcome: committed, aborted or unknown (docs/history.md).
    "txns": _schema(
        ("txn", S), ("process", S), ("tid", S), ("outcome", S), ("ended_by", S),
        ("begin_index", I), ("end_index", I), ("commit_op", I),
        ("commit_invoke_index", I), ("commit_complete_index", I), ("n_ops", I),
        ("n_writes", I)),
    # Faults the nemesis applied, with their parameters: `value` of the invoke and
    # done_value of the completion (which may name what the runner resolved, such as
    # the node a "leader" was), each as JSON text.
    "faults": _schema(("op", I), ("f", S), ("type", S), *_OP_TIMES, ("error", S),
                      ("value", S), ("done_value", S)),
    # Every step of every partition in one table, the input of the per-partition pass
    # (checkers/engine.py): writes (w), reads (r), position changes (p), watermarks (m)
    # and group offsets (o), with the columns of their own tables renamed into one
    # shape: for reads, status = w_status, source = w_source, w_inv/w_cmp = the write's
    # op, w_commit_inv/w_commit_cmp = its transaction's commit_txn, and vis = 2 if the
    # value is visible to read_committed readers, 1 to read_uncommitted ones only, 0 if
    # it is not attributable to a send to this partition that did not fail; for writes,
    # t_begin/t_done = its transaction's first op / commit_txn completion; for
    # positions, type = kind, status = cause; for watermarks, offset = low and value =
    # read_to (where the final reads stopped); for
    # offsets, status = outcome, t_begin/t_done = the effect window.
    "steps": _schema(
        ("topic", S), ("partition", I), ("kind", S), ("process", S), ("op", I),
        ("rec", I), ("f", S), ("txn", S), ("txn_outcome", S), ("type", S),
        ("status", S), ("isolation", S), ("group", S), ("final", B), ("offset", I),
        ("value", I), ("source", I), ("vis", I), ("invoke_index", I),
        ("complete_index", I), ("t_begin", I), ("t_done", I),
        ("w_found", B), ("w_op", I), ("w_process", S), ("w_txn", S),
        ("w_txn_outcome", S), ("w_inv", I), ("w_cmp", I), ("w_commit_inv", I),
        ("w_commit_cmp", I), ("high", I), ("lso", I), ("corrupt", I)),
    # Watermarks read by ok `watermarks` ops, one row per partition.
    "watermarks": _schema(
        ("op", I), ("process", S), ("topic", S), ("partition", I), ("low", I),
        ("high", I), ("lso", I), ("read_to", I), ("invoke_index", I), ("complete_index", I)),
}

# The tables a converted folder holds as files.
TABLES = tuple(n for n in SCHEMAS if n != "reads")

# Write statuses (writes.status, reads.w_status).
COMMITTED, ABORTED, FAILED, UNKNOWN = "committed", "aborted", "failed", "unknown"
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
