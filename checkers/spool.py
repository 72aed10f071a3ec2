"""The two spools that keep a conversion's memory bounded: the polls' records
(PollSpool, moved to disk as the JSONL streams in) and the steps table (StepSpool,
regrouped by partition on disk into the bucket files the checks read)."""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .arrow import explode, ints
from .tables import SCHEMAS

BUCKETS = 32  # at most this many steps files (Spark tasks)


class PollSpool:
    """The records of ok polls, moved to disk as the JSONL streams in (a sink for
    history.events_table): exploded per block (op, rec, topic, partition, offset, key,
    value, source) into Arrow files, and taken out of the events kept in memory."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: list[Path] = []

    def take(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        events = pa.Table.from_batches([batch])
        polls = pc.fill_null(pc.and_(pc.equal(events.column("f"), "poll"),
                                     pc.equal(events.column("type"), "ok")), False)
        mask = polls.to_numpy()
        if not mask.any():
            return batch
        exploded = explode(events, mask, "records")
        path = self.folder / f"polls-{len(self.files):06d}.arrow"
        with pa.ipc.new_file(path, exploded.schema) as out:
            out.write_table(exploded)
        self.files.append(path)
        value = batch.column("value")
        fields = [value.field(i) for i in range(value.type.num_fields)]
        at = value.type.get_field_index("records")
        fields[at] = pc.if_else(polls.combine_chunks(), pa.nulls(len(batch), fields[at].type),
                                fields[at])
        kept = pa.StructArray.from_arrays(fields, fields=list(value.type), mask=value.is_null())
        return pa.RecordBatch.from_arrays(
            [kept if n == "value" else batch.column(n) for n in batch.schema.names],
            schema=batch.schema)

    def clear(self) -> None:
        for path in self.files:
            path.unlink(missing_ok=True)
        self.files = []

    def blocks(self):
        for path in self.files:
            with pa.memory_map(str(path)) as source:
                yield pa.ipc.open_file(source).read_all()


class StepSpool:
    """The steps table, spooled to disk in blocks sorted by (topic, partition), then
    written as bucket files that each hold whole partitions in one Parquet row group:
    a check task (on Spark or local) reads one file whole, so it sees all the steps of
    the partitions it is given (checkers/engine.py), with no shuffle at check time.

    Each block file holds one record batch per partition, so `finish` reads, for each
    bucket (two at a time), only the batches of that bucket's partitions: its memory is
    two buckets' steps, not the whole table."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.groups: dict[tuple, int] = {}
        self.sizes: list[int] = []
        # Per block file: group -> the record batch of the file that holds its steps.
        self.blocks: list[tuple[Path, dict[int, int]]] = []

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        # (topic, partition) keys, nulls distinct from every value, numbered in order of
        # first appearance: the topic's dictionary code (null its own) and the partition's
        # factorized code (null its own), combined into one integer and factorized.
        topic = pc.dictionary_encode(table.column("topic").combine_chunks(),
                                     null_encoding="encode")
        codes = topic.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = topic.dictionary.to_pylist()
        part, part_ok = ints(table.column("partition"))
        pcodes, puniq = pd.factorize(np.where(part_ok, part, 0))
        width = len(puniq) + 1
        local, keys = pd.factorize(codes * width + np.where(part_ok, pcodes, len(puniq)))
        gids = np.array([self._group((names[k // width],
                                      int(puniq[k % width]) if k % width < len(puniq) else None))
                         for k in keys.tolist()], dtype=np.int64)
        gid = gids[local]
        order = np.argsort(gid, kind="stable")
        gid = gid[order]
        cuts = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
        ends = np.r_[cuts[1:], len(gid)]
        sorted_ = table.take(pa.array(order, type=pa.int64()))
        where = {}
        path = self.folder / f"steps-{len(self.blocks):06d}.arrow"
        with pa.ipc.new_file(path, table.schema) as out:
            for i, (a, b) in enumerate(zip(cuts, ends)):
                g = int(gid[a])
                self.sizes[g] += int(b - a)
                where[g] = i
                out.write_table(sorted_.slice(int(a), int(b - a)).combine_chunks(),
                                max_chunksize=int(b - a))
        self.blocks.append((path, where))

    def _group(self, key: tuple) -> int:
        if key not in self.groups:
            self.groups[key] = len(self.sizes)
            self.sizes.append(0)
        return self.groups[key]

    def finish(self, folder: Path) -> int:
        """Write the bucket files into `folder`; return the number of steps."""
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        n = max(1, min(BUCKETS, len(self.sizes)))
        # Largest partitions first, each to the emptiest bucket: balanced tasks.
        load = [0] * n
        members: list[list[int]] = [[] for _ in range(n)]
        for g in sorted(range(len(self.sizes)), key=lambda g: -self.sizes[g]):
            b = load.index(min(load))
            load[b] += self.sizes[g]
            members[b].append(g)
        schema = SCHEMAS["steps"]

        def write(b: int) -> None:
            pieces = []
            for g in members[b]:
                for path, where in self.blocks:
                    if g in where:
                        # Read into memory (not a map, whose pages would stay resident).
                        with pa.OSFile(str(path)) as src:
                            pieces.append(pa.ipc.open_file(src).get_batch(where[g]))
            part = pa.Table.from_batches(pieces, schema=schema) if pieces else schema.empty_table()
            pq.write_table(part, folder / f"part-{b:05d}.parquet",
                           row_group_size=max(1, part.num_rows))

        # Two buckets at a time: Parquet encodes without the GIL, and memory is still a
        # couple of buckets' steps.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="onceproof-buckets") as pool:
            list(pool.map(write, range(n)))
        return sum(self.sizes)
