"""The fast parse of a history: pyarrow's JSON parser, against EVENT, in blocks; a big
file in parts, each by a thread of its own. What it does not accept it raises as
ArrowInvalid, and the fast reader (read.py) then hands the file to the per-line one."""
from __future__ import annotations

import codecs
import io
import itertools
import os
import threading
from pathlib import Path
from queue import Empty, Full, Queue

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from .format import NON_NEGATIVE, PLACE_LIMIT
from .lines import FAULT_NEEDLE, NEWLINE, WHITESPACE, Mapped, line_starts
from .schema import EVENT, VALUE, required_of

# pyarrow parses a block at a time and needs whole lines inside one. Blocks of 16 MB
# parse in less CPU than of 64 (they stay in the caches; docs/performance.md, "Figures
# behind the code"); a line longer than a block (a poll that returned some hundred
# thousand records) makes the parse start again with blocks eight times larger, up to
# MAX_BLOCK.
BLOCK = 16 << 20
MAX_BLOCK = 1 << 30
# How many parts a big file is parsed in, at once (None: one per core).
PARTS: int | None = None


def parse_file(path: Path, cut: int, take, schema: pa.Schema, hits: list[int],
               block: int) -> pa.Table:
    """The first `cut` bytes of the file parsed into a table of `schema`, each block
    conformed to EVENT and passed through `take`, in blocks of `block` bytes; ArrowInvalid
    where the parse meets what it does not accept. `hits` gets the byte offsets where
    fault events may be."""
    # Read as a stream (not a map of the whole file, whose pages would all stay
    # resident while it is parsed): memory is the blocks in flight and what is kept.
    # A big file is cut at line ends into one part per core, each parsed, and each of
    # its blocks passed through `take`, by a thread of its own (both mostly in C++,
    # without the GIL); the parts' batches are then put back in file order.
    ranges = _ranges(path, cut, max(1, min(PARTS or cores(), cut // (2 * block))))
    if len(ranges) == 1:
        with open(path, "rb") as fh:
            source = _Scanned(fh, 0, cut, hits)
            kept = [take(_conform(batch)) for batch in _ahead(_reader(source, block))]
        return _one_per_line(pa.Table.from_batches(kept, schema=schema), path, cut,
                             source.newlines, source.blank, source.high)
    parts: list[list[pa.RecordBatch]] = [[] for _ in ranges]
    newlines = [0] * len(ranges)
    blank = [False] * len(ranges)
    high = [False] * len(ranges)
    errors: list[BaseException] = []
    stop = threading.Event()

    def run(i: int, start: int, end: int) -> None:
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                source = _Scanned(fh, start, end - start, hits)
                for batch in _reader(source, block):
                    if stop.is_set():
                        return
                    parts[i].append(take(_conform(batch)))
                newlines[i], blank[i], high[i] = source.newlines, source.blank, source.high
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(i, a, b), name=f"onceproof-json-{i}",
                                daemon=True) for i, (a, b) in enumerate(ranges)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    finally:
        stop.set()
    if errors:
        raise errors[0]
    return _one_per_line(pa.Table.from_batches([b for part in parts for b in part],
                                                schema=schema), path, cut, sum(newlines),
                         any(blank), any(high))


def _one_per_line(table: pa.Table, path: Path, cut: int, newlines: int,
                  blank: bool, high: bool) -> pa.Table:
    """The table, if it has one row per line of the first `cut` bytes that is not blank,
    and those bytes are UTF-8; else ArrowInvalid. pyarrow's parse reads events with no
    newline between them as rows of their own, where the per-line reader refuses their
    line. `blank`: some line may be blank; `high`: some byte is not ASCII (_Scanned).
    The parse checks the UTF-8 of the fields it keeps only (_conform), not of a
    fault's parameters or of fields no check reads, which the per-line reader refuses
    too."""
    if high:
        _utf8(path, cut)
    with Mapped(path) as data:
        lines = newlines + (data[cut - 1:cut] != b"\n")
        # With no blank line, the lines are counted already. Else the blank ones are
        # found: one of them could balance a line of two events in the count.
        if (blank or table.num_rows != lines) and table.num_rows != len(line_starts(data, cut)):
            raise pa.ArrowInvalid("a line holds more than one event")
    return table


def _utf8(path: Path, cut: int) -> None:
    """ArrowInvalid unless the first `cut` bytes of the file are UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as fh:
        left = cut
        while left > 0:
            chunk = fh.read(min(BLOCK, left))
            if not chunk:
                break
            left -= len(chunk)
            try:
                decoder.decode(chunk, final=left <= 0)
            except UnicodeDecodeError as exc:
                raise pa.ArrowInvalid(f"not UTF-8: {exc}") from None


def _reader(source, block: int):
    opts = pj.ParseOptions(explicit_schema=EVENT, unexpected_field_behavior="ignore")
    return pj.open_json(source, read_options=pj.ReadOptions(block_size=block),
                        parse_options=opts)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _ranges(path: Path, cut: int, n: int) -> list[tuple[int, int]]:
    """The first `cut` bytes of the file in n ranges of whole lines."""
    bounds = [0]
    with open(path, "rb") as fh:
        for i in range(1, n):
            fh.seek(max(bounds[-1], cut * i // n))
            tail = fh.readline()  # the rest of the line the cut falls in
            at = min(fh.tell(), cut) if tail else cut
            if at > bounds[-1]:
                bounds.append(at)
    bounds.append(cut)
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def _ahead(reader):
    """The batches of `reader`, the next one read in a thread while the caller works on
    this one; an error reading is raised here, in order."""
    done = object()
    queue: Queue = Queue(maxsize=1)
    stop = threading.Event()

    def run() -> None:
        try:
            for batch in reader:
                while not stop.is_set():
                    try:
                        queue.put(batch, timeout=0.1)
                        break
                    except Full:
                        continue
                if stop.is_set():
                    return
            queue.put(done)
        except BaseException as exc:
            queue.put(exc)

    thread = threading.Thread(target=run, name="onceproof-json", daemon=True)
    thread.start()
    try:
        while True:
            item = queue.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                queue.get_nowait()
            except Empty:
                pass
            thread.join(0.05)


class _Scanned(io.RawIOBase):
    """The `cut` bytes of an open binary file from its position `start`, as a file to
    read, noting in `hits` the offset of each FAULT_NEEDLE in them, and counting
    their newlines."""

    def __init__(self, fh, start: int, cut: int, hits: list[int]) -> None:
        self.fh, self.at, self.left, self.hits = fh, start, cut, hits
        self.tail = b""  # the end of the last read, where a needle may begin
        self.newlines = 0
        # Whether some line may be blank (it begins with whitespace, or is empty): only
        # then can a blank line hide a line of two events from the count of lines.
        self.blank = False
        self._line_begins = True  # the next byte read begins a line
        self.high = False  # some byte is not ASCII: the UTF-8 is checked then

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        # pyarrow reads through read(); the bytes it gets are the ones searched.
        data = self.fh.read(self.left if size < 0 else min(size, self.left))
        self.left -= len(data)
        self._count_lines(data)
        keep = len(FAULT_NEEDLE) - 1
        seam = self.tail + data[:keep]
        at = seam.find(FAULT_NEEDLE)
        if at >= 0:
            self.hits.append(self.at - len(self.tail) + at)
        at = data.find(FAULT_NEEDLE)
        while at >= 0:
            self.hits.append(self.at + at)
            at = data.find(FAULT_NEEDLE, at + 1)
        self.tail = (self.tail + data)[-keep:] if len(data) < keep else data[-keep:]
        self.at += len(data)
        return data

    def _count_lines(self, data: bytes) -> None:
        # numpy, not bytes.count: as fast, it lets the other parts' threads run, and the
        # newlines found say where lines begin.
        if not data:
            return
        a = np.frombuffer(data, np.uint8)
        nl = np.flatnonzero(a == NEWLINE)
        self.newlines += len(nl)
        if not self.blank:
            begins = a[nl[:-1] + 1] if len(nl) and nl[-1] == len(a) - 1 else a[nl + 1]
            self.blank = bool((self._line_begins and a[0] in WHITESPACE)
                              or np.isin(begins, WHITESPACE).any())
        self._line_begins = bool(a[-1] == NEWLINE)
        if not self.high:
            self.high = bool(a.max() >= 0x80)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A parsed batch as EVENT; ArrowInvalid if it holds what the per-line reader
    refuses beyond types (bytes that are not UTF-8 in a string, a null item in a list,
    an item without a field it requires, a negative partition or offset), so that it
    names the line."""
    batch = pa.RecordBatch.from_arrays([batch.column(n).cast(EVENT.field(n).type)
                                        for n in EVENT.names], schema=EVENT)
    # pyarrow's JSON parser passes bytes that are not UTF-8 into its strings.
    batch.validate(full=True)
    value = batch.column("value")
    for i, field in enumerate(VALUE):
        if not pa.types.is_list(field.type):
            continue
        items = pc.list_flatten(value.field(i))
        # A null in a list (`"records": [null]`) parses as a missing item; the per-line
        # reader refuses it: an item is an object.
        if items.null_count:
            raise pa.ArrowInvalid(f"value.{field.name}[] holds null")
        required = required_of(field.type.value_type)
        for j, item in enumerate(field.type.value_type):
            if item.name in required and items.field(j).null_count:
                raise pa.ArrowInvalid(f"value.{field.name}[] without {item.name}")
            if item.name in NON_NEGATIVE:
                span = pc.min_max(items.field(j))
                low, high = span["min"].as_py(), span["max"].as_py()
                if low is not None and not (low >= 0 and high < PLACE_LIMIT):
                    raise pa.ArrowInvalid(f"value.{field.name}[].{item.name} out of range")
    return batch
