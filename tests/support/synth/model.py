"""The broker side of the reference model: partitions as real logs, transactions, committed
group offsets; and the shapes of records and partition lists that ops carry.

Each partition is a real log: offset -> record (value, and the transaction that wrote it,
if any) or control marker. An op's effect on the model happens when the op completes
(clients.py); that is the moment a real op "happens" between its invoke and its
completion, and it keeps reads behind the writes they see.

What the model promises, which is what Kafka promises:
- appends get the next offset; a record is never appended twice, even when its send is
  `info` (an idempotent producer); `fail` sends never land;
- a transaction's records and its commit or abort marker occupy offsets; the last stable
  offset (LSO) of a partition is the first offset of its earliest open transaction;
- read_committed polls return records below the LSO that are not transactional or whose
  transaction committed, in offset order per partition; read_uncommitted polls return
  every record below the high watermark; both skip markers;
- a transaction commits or aborts as a whole, at the completion of commit_txn (`ok`, or
  `info` when the model decides it landed) or abort_txn; a transaction its producer left
  open is aborted when the same transactional id begins again (fencing) or when the
  coordinator times it out before the final phase;
- committed group offsets change only by commit_offsets (applied at `ok`, maybe at
  `info`) or by a committed transaction's send_offsets; fetch_offsets returns them.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

RC = "read_committed"
RU = "read_uncommitted"

TOPIC_PLAIN = "t"    # written by idempotent producers only
TOPIC_TXN = "tx"     # written by transactional producers only
TOPIC_IN = "in"      # both; the pipeline's input
TOPIC_OUT = "out"
PIPE_GROUP = "g-pipe"

# Kinds of log entries besides a transaction's index (>= 0).
_PLAIN = -1
_MARKER = -2

# A transaction's status.
OPEN, COMMITTED, ABORTED = 0, 1, 2

Event = dict[str, Any]
TP = tuple[str, int]

def key_of(value: int) -> str:
    """Keys follow from values, so the model never has to store them."""
    return f"k{value % 7}"


class _Log:
    """One partition: parallel arrays keep ten million events within a few hundred MB."""

    __slots__ = ("kinds", "values")

    def __init__(self) -> None:
        self.values = array("q")
        self.kinds = array("q")

    def append(self, value: int, kind: int) -> int:
        self.values.append(value)
        self.kinds.append(kind)
        return len(self.values) - 1

    @property
    def hw(self) -> int:
        return len(self.values)


class Model:
    """The broker side: logs, transactions, committed group offsets."""

    def __init__(self, topics: dict[str, int], whole_txn_reads: bool = False) -> None:
        self.whole_txn_reads = whole_txn_reads
        self.logs: dict[TP, _Log] = {(t, p): _Log() for t, n in topics.items() for p in range(n)}
        self.status = bytearray()
        # txn -> {tp: first offset}: only open transactions, to find markers and the LSO.
        self.open: dict[int, dict[TP, int]] = {}
        self.open_first: dict[TP, dict[int, int]] = {tp: {} for tp in self.logs}
        # Records of transactions that wrote the pipeline's input, for its whole-txn cut.
        self.txn_records: dict[int, list[tuple[TP, int]]] = {}
        self.txn_offsets: dict[int, tuple[str, dict[TP, int]]] = {}
        self.committed: dict[str, dict[TP, int]] = {}
        self.abandoned: set[int] = set()

    def hw(self, tp: TP) -> int:
        return self.logs[tp].hw

    def lso(self, tp: TP) -> int:
        firsts = self.open_first[tp]
        return min(firsts.values()) if firsts else self.logs[tp].hw

    def append(self, tp: TP, value: int) -> int:
        return self.logs[tp].append(value, _PLAIN)

    def begin(self) -> int:
        self.status.append(OPEN)
        idx = len(self.status) - 1
        self.open[idx] = {}
        return idx

    def txn_append(self, idx: int, tp: TP, value: int) -> int:
        off = self.logs[tp].append(value, idx)
        if tp not in self.open[idx]:
            self.open[idx][tp] = off
            self.open_first[tp][idx] = off
        if self.whole_txn_reads and tp[0] == TOPIC_IN:
            self.txn_records.setdefault(idx, []).append((tp, off))
        return off

    def end(self, idx: int, commit: bool) -> None:
        if self.status[idx] != OPEN:
            return
        for tp in self.open.pop(idx):
            self.logs[tp].append(0, _MARKER)
            del self.open_first[tp][idx]
        self.status[idx] = COMMITTED if commit else ABORTED
        staged = self.txn_offsets.pop(idx, None)
        if commit and staged:
            group, offsets = staged
            self.committed.setdefault(group, {}).update(offsets)
        self.abandoned.discard(idx)

    def visible(self, tp: TP, off: int, isolation: str) -> bool:
        kind = self.logs[tp].kinds[off]
        if kind == _MARKER:
            return False
        if kind == _PLAIN or isolation == RU:
            return True
        return self.status[kind] == COMMITTED

    def read(self, tp: TP, pos: int, isolation: str, limit: int,
             cutoff: int | None = None) -> tuple[list[tuple[int, int]], int]:
        """Visible (offset, value) pairs from pos, and the position after them."""
        log = self.logs[tp]
        end = self.lso(tp) if isolation == RC else log.hw
        if cutoff is not None:
            end = min(end, cutoff)
        out: list[tuple[int, int]] = []
        off = pos
        while off < end:
            if self.visible(tp, off, isolation):
                if len(out) >= limit:
                    break
                out.append((off, log.values[off]))
            off += 1
        return out, max(off, pos)

    def whole_txn_cut(self, positions: dict[TP, int], limit: int) -> dict[TP, int]:
        """Per-partition cutoffs below the LSO such that every committed transaction is
        either wholly below them or wholly at or above them (see the module docstring).
        About `limit` records per partition, more when a transaction needs them whole."""
        cut = self._cut(positions, limit)
        if all(cut[tp] == pos for tp, pos in positions.items()):
            # The limit split the first transaction; take it whole rather than stall.
            cut = self._cut(positions, 1 << 62)
        return cut

    def _cut(self, positions: dict[TP, int], limit: int) -> dict[TP, int]:
        cut: dict[TP, int] = {}
        for tp, pos in positions.items():
            recs, _ = self.read(tp, pos, RC, limit)
            cut[tp] = recs[-1][0] + 1 if len(recs) >= limit else self.lso(tp)
            cut[tp] = max(cut[tp], pos)
        changed = True
        while changed:
            changed = False
            seen: set[int] = set()
            for tp, pos in positions.items():
                kinds = self.logs[tp].kinds
                for off in range(pos, cut[tp]):
                    k = kinds[off]
                    if k >= 0 and self.status[k] == COMMITTED:
                        seen.add(k)
            for idx in seen:
                recs = self.txn_records.get(idx, ())
                if any(tp in cut and off >= cut[tp] for tp, off in recs):
                    for tp, off in recs:
                        if tp in cut and positions[tp] <= off < cut[tp]:
                            cut[tp] = off
                            changed = True
        return cut

    def forget_below(self, offsets: dict[TP, int]) -> None:
        """Drop cut bookkeeping of decided transactions the pipeline has committed past."""
        for idx in [i for i, recs in self.txn_records.items()
                    if self.status[i] != OPEN and all(off < offsets.get(tp, 0) for tp, off in recs)]:
            del self.txn_records[idx]


# ------------------------------------------------------------ what ops and events carry

def record(tp: TP, value: int, offset: Any = ..., source: int | None = None) -> dict:
    r: dict[str, Any] = {"topic": tp[0], "partition": tp[1], "key": key_of(value), "value": value}
    if source is not None:
        r["source"] = source
    if offset is not ...:
        r["offset"] = offset
    return r


def read_record(tp: TP, off: int, value: int) -> dict:
    return {"topic": tp[0], "partition": tp[1], "offset": off, "key": key_of(value), "value": value}


def tp_list(parts: Iterable[TP]) -> list[dict]:
    return [{"topic": t, "partition": p} for t, p in parts]


def offset_list(offsets: dict[TP, int | None]) -> list[dict]:
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]
