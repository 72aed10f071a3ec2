"""What the converter keeps of each block of events as the JSONL streams in (a sink
for history.events_table), so that the parsed history is never held whole.

An event's `value` holds lists (a send's records, a poll's records, a seek's positions,
a commit's offsets...), which become rows of their own tables, and a few scalars (a
poll's isolation, a consumer's group, a transaction's tid, a timeout), which become
columns of the op. So each block is taken apart at once: the polls' records go to
disk (spool.PollSpool, most of a history's bulk), every other list is exploded into a
small table of its own (LISTS, read back with `Extract.table`), and the block shrinks
to one row of scalars per event (SCALARS), from which the converter makes the ops.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from onceproof.history.format import (
    ASSIGN,
    COMMIT_OFFSETS,
    FETCH_OFFSETS,
    NEMESIS,
    POLL,
    SEEK,
    SEND,
    SEND_OFFSETS,
    STREAMS,
    WATERMARKS,
)
from onceproof.history.schema import EVENT, VALUE_SCALARS

from .arrow import explode
from .spool import PollSpool

# The lists of `value` kept as tables: name -> (the fs, the event type, the field).
LISTS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "acked": ((SEND,), "ok", "records"),
    "asked": ((SEND,), "invoke", "records"),
    "sought": ((SEEK,), "invoke", "positions"),
    "resolved": ((SEEK,), "ok", "positions"),
    "assigned": ((ASSIGN,), "invoke", "partitions"),
    "kept": ((ASSIGN,), "invoke", "kept"),
    "kept_ok": ((ASSIGN,), "ok", "kept"),
    "started": ((ASSIGN,), "ok", "partitions"),
    "committed": ((COMMIT_OFFSETS, SEND_OFFSETS), "invoke", "offsets"),
    # A final streams op fetched an application's committed offsets (checkers/streams.py).
    "fetched": ((FETCH_OFFSETS, STREAMS), "ok", "offsets"),
    "watermarks": ((WATERMARKS,), "ok", "partitions"),
}
_VALUE = EVENT.field("value").type
# One row per event: its top-level fields, the scalars of its value, and for a send's
# invoke the number of records it asks to write.
SCALARS = pa.schema([f for f in EVENT if f.name != "value"]
                    + [_VALUE.field(n) for n in VALUE_SCALARS]
                    + [pa.field("n_records", pa.int64())])


def _list_schema(field: str) -> pa.Schema:
    item = _VALUE.field(field).type.value_type
    return pa.schema([("op", pa.int64()), ("rec", pa.int64())] + list(item))


class Extract:
    """The sink: `take(batch)` spools the batch's poll records, keeps its other lists
    (given once each by `table`) and returns its SCALARS. Several threads may take
    blocks at once, in any order (history.events_table parses a big file in parts)."""

    schema = SCALARS

    def __init__(self, polls: PollSpool) -> None:
        self.polls = polls
        # Per list: (the block's first event index, its rows), put in order by `table`.
        self._pieces: dict[str, list[tuple[int, pa.Table]]] = {name: [] for name in LISTS}
        # Where the fault events' lines are, when the fast reader found them
        # (history.events_table); None: search the file (history.nemesis_values).
        self.fault_lines: list[int] | None = None

    def take(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        events = pa.Table.from_batches([batch])
        # f and type as codes, each distinct string hashed once per block: the twelve
        # masks below compared strings for every event (a fifth of this function's
        # time).
        f, f_names = _codes(batch.column("f"))
        t, t_names = _codes(batch.column("type"))

        def where(fs: tuple[str, ...], type_: str) -> np.ndarray:
            # By code: a null's, -1, reads the last slot, which no name sets.
            named = np.zeros(len(f_names) + 1, dtype=bool)
            named[[f_names[n] for n in fs if n in f_names]] = True
            return named[f] & (t == t_names.get(type_, -2))

        polls = where((POLL,), "ok")
        if polls.any():
            # A read's size is not kept: only a write's is (the history's sizes written).
            self.polls.add(explode(events, polls, "records").drop_columns(["size"]))
        first = events.column("index")[0].as_py() if len(batch) else 0
        masks = {}
        for name, (fs, type_, field) in LISTS.items():
            masks[name] = mask = where(fs, type_)
            if mask.any():
                self._pieces[name].append((first, explode(events, mask, field)))
        value = batch.column("value")
        sends = pa.array(masks["asked"])
        counts = pc.list_value_length(pc.struct_field(value, "records")).fill_null(0)
        columns = [batch.column(n) for n in SCALARS.names if n in EVENT.names]
        # A fault's parameters are no client call's (reset_peer's timeout_ms is how
        # much data passes first): the per-line reader leaves them out too.
        client = pc.fill_null(pc.not_equal(batch.column("process"), NEMESIS), True)
        faults = not pc.all(client).as_py()
        for n in VALUE_SCALARS:
            col = pc.struct_field(value, n)
            columns.append(pc.if_else(client, col, pa.nulls(len(batch), col.type))
                           if faults else col)
        columns.append(pc.if_else(sends, counts.cast(pa.int64()), pa.nulls(len(batch), pa.int64())))
        return pa.RecordBatch.from_arrays(columns, schema=SCALARS)

    def clear(self) -> None:
        self.polls.clear()
        self.fault_lines = None
        self._pieces = {name: [] for name in LISTS}

    def table(self, name: str) -> pa.Table:
        """List `name` of every event that has it: op, rec (the item's place in the
        list) and the item's fields, in the order of the events. Each list is given
        once, and let go here: its memory goes when its one user is done with it."""
        given = self._pieces.pop(name, None)
        if given is None:
            raise KeyError(f"list {name!r} was given already, or is no list of LISTS")
        schema = _list_schema(LISTS[name][2])
        pieces = [p.cast(schema) for _, p in sorted(given, key=lambda x: x[0])]
        return pa.concat_tables(pieces) if pieces else schema.empty_table()


def _codes(column: pa.Array) -> tuple[np.ndarray, dict[str, int]]:
    """A string column's dictionary codes (-1 for null) and the code of each string."""
    coded = pc.dictionary_encode(column)
    codes = pc.fill_null(coded.indices, -1).to_numpy(zero_copy_only=False)
    return codes, {name: i for i, name in enumerate(coded.dictionary.to_pylist())}
