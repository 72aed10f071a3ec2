"""What keeps a conversion's memory bounded: the polls' records (PollSpool, moved to
disk as the JSONL streams in, grouped by (topic, partition)), and the steps (Steps:
their other sources, moved to disk grouped the same way as each is made), from which
the buckets of steps the checks read are made, a few partitions at a time.

The reads are most of a history's steps (a poll returns many records, each a read),
and joining one to its op, transaction and write makes a row of some thirty columns
out of eight. So the polls' records are spooled narrow, and each partition's reads are
joined only when its bucket is made (Steps.finish, Steps.each): the wide rows are made
once, straight into the bucket, and never spooled or sorted."""
from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import forked
from .arrow import coded, ints
from .tables import SCHEMAS

BUCKETS = 32  # at most this many steps files (Spark tasks)
SOURCE_SLICE = 1 << 20  # rows of a steps source grouped by partition at a time
# Parquet's dictionary encoding pays for columns of few distinct values (names, kinds,
# outcomes). Offsets, values, indexes and transaction ids are nearly all distinct: a
# dictionary for them is built, outgrows its page and is thrown away. No statistics
# either: a bucket file is read whole, so they would never skip anything.
_DICTIONARY = [f.name for f in SCHEMAS["steps"]
               if f.type == pa.string() and f.name not in ("txn", "w_txn")]
# Integers as the differences from their neighbours, bit-packed, and no compression on
# top: offsets, indexes and ops rise along a partition's steps, and most columns are
# missing for most kinds of step. A bucket of 3M steps of the 10M bench history is
# 46 MB instead of 71 (plain, snappy), and pyarrow reads it with 0.23 s of CPU instead
# of 0.45 (decompressing was most of it).
_ENCODING = {f.name: "DELTA_BINARY_PACKED" for f in SCHEMAS["steps"] if f.type == pa.int64()}

Key = tuple[str | None, int | None]
T = TypeVar("T")


class Partitions:
    """The (topic, partition)s a conversion meets, numbered in order of first
    appearance, with the number of steps each will have (to balance the buckets)."""

    def __init__(self) -> None:
        # Held by whoever changes these or a spool's block list.
        self.lock = threading.Lock()
        self.ids: dict[Key, int] = {}
        self.keys: list[Key] = []
        self.sizes: list[int] = []

    def ids_of(self, table: pa.Table) -> np.ndarray:
        """The partition id of each row of `table` (columns topic and partition)."""
        # (topic, partition) keys, nulls distinct from every value: the topic's
        # dictionary code (null its own) and the partition's factorized code (null
        # its own), combined into one integer and factorized, so only the distinct
        # keys are looked up in Python.
        topic = pc.dictionary_encode(table.column("topic").combine_chunks(),
                                     null_encoding="encode")
        codes = topic.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = topic.dictionary.to_pylist()
        part, part_ok = ints(table.column("partition"))
        pcodes, puniq = pd.factorize(np.where(part_ok, part, 0))
        width = len(puniq) + 1
        local, keys = pd.factorize(codes * width + np.where(part_ok, pcodes, len(puniq)))
        ids = np.array([self._id((names[k // width],
                                  int(puniq[k % width]) if k % width < len(puniq) else None))
                        for k in keys.tolist()], dtype=np.int64)
        return ids[local]

    def _id(self, key: Key) -> int:
        if key not in self.ids:
            self.ids[key] = len(self.keys)
            self.keys.append(key)
            self.sizes.append(0)
        return self.ids[key]


def _order(key: Key) -> tuple:
    topic, partition = key
    return (topic is None, topic or "", partition is None, partition or 0)


class _Grouped:
    """Tables spooled to disk a block at a time, each block file holding one record
    batch per partition, so a partition's rows are read back without reading the
    rest."""

    def __init__(self, folder: Path, prefix: str, partitions: Partitions) -> None:
        self.folder = folder
        self.prefix = prefix
        self.partitions = partitions
        # Per block file: partition id -> (the record batch of the file that holds its
        # rows, how many).
        self.blocks: list[tuple[Path, dict[int, tuple[int, int]]]] = []
        # Blocks may be added from several threads (history.events_table's parts).
        self._lock = partitions.lock

    def add(self, table: pa.Table) -> list[tuple[int, pa.Table]]:
        """Spool `table`; return its rows as (partition id, rows of that partition)."""
        if not table.num_rows:
            return []
        with self._lock:
            pid = self.partitions.ids_of(table)
            path = self.folder / f"{self.prefix}-{len(self.blocks):06d}.arrow"
            self.blocks.append((path, {}))
            where = self.blocks[-1][1]
        # A stable sort of small integers is numpy's radix sort; of int64, a merge sort.
        order = np.argsort(pid.astype(np.int16) if len(pid) and pid.max() < 2**15 else pid,
                           kind="stable")
        pid = pid[order]
        cuts = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
        ends = np.r_[cuts[1:], len(pid)]
        sorted_ = table.take(pa.array(order, type=pa.int64()))
        groups = []
        with pa.ipc.new_file(path, table.schema) as out:
            for a, b in zip(cuts, ends):
                rows = sorted_.slice(int(a), int(b - a)).combine_chunks()
                out.write_table(rows, max_chunksize=int(b - a))
                groups.append((int(pid[a]), rows))
        with self._lock:
            for i, (p, rows) in enumerate(groups):
                self.partitions.sizes[p] += rows.num_rows
                where[p] = (i, rows.num_rows)
        return groups

    def pieces(self, p: int) -> list[pa.RecordBatch]:
        """Partition p's rows, block by block in the order they were added."""
        out = []
        for path, where in self.blocks:
            if p in where:
                # Read into memory (not a map, whose pages would stay resident).
                with pa.OSFile(str(path)) as src:
                    out.append(pa.ipc.open_file(src).get_batch(where[p][0]))
        return out

    def files(self):
        """Every block, whole, in the order added."""
        for path, _ in self.blocks:
            with pa.OSFile(str(path)) as src:
                yield pa.ipc.open_file(src).read_all()

    def clear(self) -> None:
        for path, where in self.blocks:
            path.unlink(missing_ok=True)
            for p, (_, n) in where.items():
                self.partitions.sizes[p] -= n
        self.blocks = []


class PollSpool(_Grouped):
    """The records of ok polls (op, rec, topic, partition, offset, value, source; not
    the key, which no check reads), moved to disk grouped by partition as the JSONL
    streams in (checkers/extract.py)."""

    def __init__(self, folder: Path, partitions: Partitions) -> None:
        super().__init__(folder, "polls", partitions)
        self.schema: pa.Schema | None = None
        # Per partition id: the ops (polls) that returned records of it, block by block.
        self.readers: dict[int, list[np.ndarray]] = {}

    def add(self, table: pa.Table) -> list[tuple[int, pa.Table]]:
        self.schema = table.schema
        groups = super().add(table)
        # A poll's records of a partition are together in its group (one event, and the
        # grouping is stable): each poll once, without a sort.
        ops = [(p, _runs_of(rows.column("op").to_numpy())) for p, rows in groups]
        with self._lock:
            for p, unique in ops:
                self.readers.setdefault(p, []).append(unique)
        return groups

    def clear(self) -> None:
        super().clear()
        self.readers = {}

    def reader_ops(self) -> dict[int, np.ndarray]:
        """Partition id -> the polls that returned any of its records, each once: a
        poll's records come in its one completion event, so in one block."""
        return {p: np.concatenate(ops) for p, ops in self.readers.items()}

    def records(self, p: int) -> pa.Table | None:
        """Partition p's poll records, or None when no poll returned any."""
        pieces = self.pieces(p)
        return pa.Table.from_batches(pieces, schema=self.schema) if pieces else None


def _runs_of(values: np.ndarray) -> np.ndarray:
    """The first value of each run of equal neighbours."""
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


class Steps:
    """The steps table, kept as its sources (the writes, positions, offsets and
    watermarks tables, spooled to disk grouped by partition as they are added), then
    written as bucket files that each hold whole partitions: a check task (on Spark or
    local) reads one file whole, so it sees all the steps of the partitions it is given
    (checkers/engine.py), with no shuffle at check time.

    Only a partition's rows of each source are read back, and made steps, as its bucket
    is made; the reads are made then too (`add_later`), a slice at a time. `finish`
    writes each slice as a row group as soon as it is made, two buckets at a time: its
    memory is a few slices of steps, not a bucket's, nor the whole table's, nor the
    sources'."""

    def __init__(self, partitions: Partitions, folder: Path, order: tuple[str, ...]) -> None:
        self.partitions = partitions
        self.folder = folder
        # Each partition's steps come source by source in this order, whichever source
        # was added first (two threads add them).
        self.order = order
        # Per source: partition id -> its steps, in slices.
        self.sources: dict[str, Callable[[int], Iterable[pa.Table]]] = {}

    def add(self, name: str, table: pa.Table, as_steps: Callable[[pa.Table], pa.Table]) -> None:
        """Spool source `name`, whose rows `as_steps` makes into steps (row by row);
        the caller may let the table go."""
        rows = _Grouped(self.folder, f"source-{name}", self.partitions)
        # A slice at a time: grouping copies what it groups.
        for start in range(0, table.num_rows, SOURCE_SLICE):
            rows.add(table.slice(start, SOURCE_SLICE))

        def made(p: int) -> Iterator[pa.Table]:
            for piece in rows.pieces(p):
                yield as_steps(pa.Table.from_batches([piece]))
        self._put(name, made)

    def add_later(self, name: str, make: Callable[[Key], Iterable[pa.Table]]) -> None:
        """Source `name`: steps that `make` makes of a partition (by key) only when its
        bucket is made. The partitions' sizes must already count them (the polls'
        spool does, for the reads)."""
        self._put(name, lambda p: make(self.partitions.keys[p]))

    def _put(self, name: str, rows: Callable[[int], Iterable[pa.Table]]) -> None:
        if name not in self.order:
            raise ValueError(f"steps source {name!r} is none of {self.order}")
        if name in self.sources:
            raise ValueError(f"steps source {name!r} was added already")
        self.sources[name] = rows

    def _slices(self, members: list[int]) -> Iterator[pa.Table]:
        """The steps of the partitions `members`, partition by partition, source by
        source in their order, as the sources make them."""
        missing = [name for name in self.order if name not in self.sources]
        if missing:
            raise ValueError(f"steps sources {missing} were never added")
        for p in members:
            for name in self.order:
                yield from (t for t in self.sources[name](p) if t.num_rows)

    def _buckets(self) -> list[list[int]]:
        """The partition ids of each bucket."""
        sizes, keys = self.partitions.sizes, self.partitions.keys
        n = max(1, min(BUCKETS, len(sizes)))
        # Largest partitions first, each to the emptiest bucket: balanced tasks.
        load = [0] * n
        members: list[list[int]] = [[] for _ in range(n)]
        # Ties go by key, not by id: ids follow the order the parse threads met them.
        for p in sorted(range(len(sizes)), key=lambda p: (-sizes[p], _order(keys[p]))):
            b = load.index(min(load))
            load[b] += sizes[p]
            members[b].append(p)
        return members

    def _bucket(self, members: list[int]) -> pa.Table:
        """The steps of partitions `members`, their strings coded (arrow.coded): the
        checks take them as codes (engine.steps_frame), and the reads come with some
        of theirs coded already (flatten.write_tables)."""
        tables = [coded(t) for t in self._slices(members)]
        return pa.concat_tables(tables) if tables else coded(SCHEMAS["steps"].empty_table())

    def finish(self, folder: Path) -> int:
        """Write the bucket files into `folder`; return the number of steps."""
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        members = self._buckets()
        counts = [0] * len(members)

        def write(b: int) -> None:
            with pq.ParquetWriter(folder / f"part-{b:05d}.parquet", SCHEMAS["steps"],
                                  use_dictionary=_DICTIONARY, column_encoding=_ENCODING,
                                  compression="none", write_statistics=False) as out:
                for rows in self._slices(members[b]):
                    counts[b] += rows.num_rows
                    out.write_table(rows, row_group_size=rows.num_rows)

        # Two buckets at a time: joins, Parquet encoding and file reads are mostly
        # Arrow's, without the GIL.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="onceproof-buckets") as pool:
            list(pool.map(write, range(len(members))))
        return sum(counts)

    def each(self, func: Callable[[pa.Table], T]) -> tuple[int, list[T]]:
        """`func` of each bucket's steps, made and given in memory instead of written:
        (the number of steps, the results in bucket order). The buckets are made and
        `func` runs in forked processes, one per core (checkers/forked.py)."""
        members = self._buckets()

        def one(b: int) -> tuple[int, T]:
            part = self._bucket(members[b])
            return part.num_rows, func(part)

        done = forked.each(one, range(len(members)), sum(self.partitions.sizes))
        return sum(n for n, _ in done), [result for _, result in done]
