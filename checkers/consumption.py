"""Where each consumer's reads went: poll_skip, nonmonotonic_poll, rewind_mismatch.

Per partition, each consumer's reads form runs (checkers/partlog.py): stretches with
no seek, assign or info op between. Within a run, the reads a consumer made inside a
transaction that aborted are *retracted*: an exactly-once consumer rewinds after an
abort, and an application that does not, and goes on from where the aborted reads
left it, skips those records as far as anything committed is concerned. So the first
read after an abort is judged from where the consumer stood outside the aborted
transaction (its last read outside one, or its last commit of its offset since, or its
run's seek position), whether or not the history records the rewind as a seek
(sequences). A reader must return, when it goes over their offsets, the values
visible to it in the read log and those an acknowledged committed write's ack alone
places (_musts): passing over either is a skip.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Literal

import numpy as np
import pandas as pd

from onceproof.history.format import COMMIT_OFFSETS, SEND_OFFSETS

from . import anomaly, engine
from .anomaly import AT, Anomaly, define, fills, num
from .partlog import PartitionLog, equals, sorted_codes
from .tables import COMMITTED, READ_COMMITTED

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("poll_skip", "consumption", """
       Within one consumer's run, a read at offset b while the consumer stood just past
       offset a < b (after its previous read, or, across an aborted transaction, where it
       stood outside it: below), and an offset strictly between them holds a value the
       consumer must return: one visible to it in the read log, or the value of an
       acknowledged committed write whose ack put it there and that no poll returned (nor
       anything at that offset): the consumer skipped it, beside the lost_write. Within
       one poll and across polls. The first read of a run that began at a known position
       o (a seek, or an assign that named it) skips too when it passes over such a value
       known only from its ack in [o, b). Across an aborted transaction (an exactly-once
       consumer rewinds after one, recorded as a seek or not), the first read after the
       aborted transaction's reads is judged from where the consumer stood outside it:
       the later of its last read of the run outside any aborted transaction and its last
       successful commit of its offset since (commit_offsets ok, or send_offsets in a
       committed transaction), else the run's seek position; going back to it is
       allowed, skipping past it is poll_skip. Reads inside one aborted transaction are
       judged against each other, and its first read against where the consumer stood.
       This is what a pipeline that does not rewind after an abort does.""",
       fills(**AT, op="the poll that read b", offset="b", value="", txn="the poll's transaction",
             detail="the skipped offset and value"),
       roles={"reader": "the poll that read b",
              "previous read": "the poll that read a",
              "seek": "the seek (or the assign that said where reading starts), when the "
                      "consumer stood at its position",
              "committed offset": "the consumer's commit of its offset that said where it "
                                  "stood after an aborted transaction",
              "skipped writer": "the send of the skipped value"},
       # A skip over a value known only from its ack, which no poll returned: the log
       # lost that write.
       implies=("lost_write",)),
    define("nonmonotonic_poll", "consumption", """
       Within one consumer's run, a read at offset b <= a while the consumer stood just
       past offset a: back, or the same offset again, with no seek or assign between. a
       is the consumer's previous read, or, across an aborted transaction, where it stood
       outside it (as for poll_skip: its last read outside aborted transactions or its
       last commit of its offset since, else the run's seek position): a consumer that
       rewinds after an abort without a recorded seek goes back to there, which is
       allowed, and no further. Reads inside one aborted transaction are judged against
       each other.""",
       fills(**AT, op="the poll that read b", offset="b", value="", txn="the poll's transaction",
             detail=""),
       roles={"reader": "the poll that read b",
              "previous read": "the poll that read a",
              "seek": "the seek whose position said where the consumer stood after an "
                      "aborted transaction",
              "committed offset": "the consumer's commit of its offset that said where it "
                                  "stood after an aborted transaction"}),
    define("rewind_mismatch", "consumption", """
       After a seek to offset o (or an assign whose ok says the consumer starts at o),
       the consumer's next read of the partition is not the first value visible to it
       at an offset >= o.""",
       fills(**AT, op="the poll of that read", offset="", value="", txn="the poll's transaction",
             detail="what was expected"),
       roles={"reader": "the poll",
              "seek": "the seek (or the assign)",
              "expected writer": "the send of the value it should have read, when known"}),
)
TYPES = tuple(a.name for a in ANOMALIES)


def _acked_only(pl: PartitionLog) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values), sorted by offset, of the acknowledged committed writes known
    only from their acks: the send's ack names the offset, no poll returned the value
    and none returned anything at that offset (and no other such ack names it too).
    A consumer that went over such an offset skipped the value (poll_skip)."""
    def build() -> tuple[np.ndarray, np.ndarray]:
        w = pl.writes
        none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        m = (equals(w["status"], COMMITTED) & w["offset"].notna().to_numpy(dtype=bool)
             & w["value"].notna().to_numpy(dtype=bool))
        if not m.any():
            return none
        rows = np.flatnonzero(m)
        distinct, which, at = pl.value_matches
        was_read = np.zeros(len(distinct), dtype=bool)
        was_read[at[at >= 0]] = True
        rows = rows[~was_read[which[rows]]]
        if not len(rows):  # every acknowledged value was read: most partitions
            return none
        offs = w["offset"].to_numpy(dtype=np.int64, na_value=0)[rows]
        vals = w["value"].to_numpy(dtype=np.int64, na_value=0)[rows]
        # Offsets polls returned (one value, or several: contested).
        read_offs = np.union1d(pl.read_log["offset"].to_numpy(dtype=np.int64),
                               pl.contested_offsets)
        keep = ~np.isin(offs, read_offs) & ~pd.Series(offs).duplicated(keep=False).to_numpy()
        order = np.argsort(offs[keep], kind="stable")
        return offs[keep][order], vals[keep][order]
    return pl.memo("acked_only", build)


def _musts(pl: PartitionLog, isolation: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values), sorted by offset, a reader of this isolation must return when
    it goes over them: the read log visible to it, and the committed writes known only
    from their acks (_acked_only)."""
    rc = isolation == READ_COMMITTED

    def build() -> tuple[np.ndarray, np.ndarray]:
        offs, vals = pl.visible(READ_COMMITTED if rc else "other")
        ack_o, ack_v = _acked_only(pl)
        if not len(ack_o):
            return offs, vals
        o, v = np.concatenate([offs, ack_o]), np.concatenate([vals, ack_v])
        order = np.argsort(o, kind="stable")
        return o[order], v[order]
    return pl.memo("musts_rc" if rc else "musts_other", build)


def _gap(pl: PartitionLog, is_rc: np.ndarray, a: np.ndarray, b: np.ndarray,
         inclusive_a: bool, musts: bool = True) -> np.ndarray:
    """How many values a reader (read_committed where is_rc) must return lie strictly
    between a and b (or in [a, b) when inclusive_a): visible ones, and with `musts`
    those known only from their acks."""
    n = np.zeros(len(a), dtype=np.int64)
    side: Literal["left", "right"] = "left" if inclusive_a else "right"
    for rc in (True, False):
        m = is_rc == rc
        if not m.any():
            continue
        iso = READ_COMMITTED if rc else "other"
        offs, _ = _musts(pl, iso) if musts else pl.visible(iso)
        n[m] = (np.searchsorted(offs, b[m], side="left")
                - np.searchsorted(offs, a[m], side=side))
    return n


def _first_must(pl: PartitionLog, isolation: str, lo: int, hi: int) -> tuple[int, int, bool]:
    """(offset, value, seen) of the first value a reader must return at lo <= offset <
    hi; seen: a poll returned it (else only its ack placed it)."""
    offs, vals = _musts(pl, isolation)
    i = int(np.searchsorted(offs, lo, side="left"))
    ack_o, _ = _acked_only(pl)
    seen = not (len(ack_o) and bool(np.isin(offs[i], ack_o)))
    return int(offs[i]), int(vals[i]), seen


def _record(type, row, detail, *others) -> dict:
    return {"type": type, "severity": anomaly.VIOLATION, "process": row["process"],
            "op": num(row["op"]), "topic": None, "partition": None,
            "offset": num(row["offset"]), "value": num(row["value"]), "txn": row["txn"],
            "detail": detail, "witnesses": anomaly.witnesses((row["op"], "reader"), *others)}


def sequences(pl: PartitionLog) -> pd.DataFrame:
    """poll_skip: within one consumer's run, a read at offset b whose consumer stood
    just past offset a (its previous read, or where it stood after an abort: below),
    a < b, while an offset strictly between them holds a value it must return: one
    visible to it in the read log, or a committed write known at that offset only from
    its ack (no poll returned it, nor anything there; _acked_only). Within one poll
    and across polls. The first read of a run that began at a known position (a seek,
    or an assign that named it) that passes over such a value known only from its ack
    skips it too (one in the read log is rewind_mismatch's).

    Across an aborted transaction (an exactly-once consumer rewinds after one, and a
    history may record no seek for it), the first read after the aborted
    transaction's reads is judged from where the consumer stood outside it: the later
    of its last read of the run outside any aborted transaction and its last
    successful commit of its offset there (commit_offsets ok, or send_offsets in a
    committed transaction) since, else the run's seek position. Going back to it is
    allowed; going below it is nonmonotonic_poll, past it poll_skip. Reads inside one
    aborted transaction are judged against each other; the first read of an aborted
    transaction against where the consumer stood. Where the consumer stood is not
    known (none of those), the read is not judged (counted as unjudged).

    nonmonotonic_poll: in the same setting the read is at b <= a: the consumer went
    back, or read an offset again, with no seek or assign to explain it.

    rewind_mismatch: after a seek to offset o, the consumer's next read of the
    partition is not the first value visible to it at an offset >= o (it read below o,
    or passed over a visible value at or after o)."""
    return _sequences(pl)[0]


# What the rules could not judge for lack of information (the verdict's `unjudged`).
UNJUDGED_AFTER_ABORT = (
    "first reads after an aborted transaction where the consumer's position was not known "
    "(no read of its run outside aborted transactions, no commit of its offset, no seek)")
UNJUDGED_START = ("first reads of runs begun by an assign that named no position (and no "
                  "seek): not checked against where the consumer starts")


def _sequences(pl: PartitionLog) -> tuple[pd.DataFrame, pd.DataFrame]:
    """sequences' anomalies, and the unjudged fact rows of its rules."""
    out: list[dict] = []
    reads = np.arange(len(pl.runs["run"]))
    if not len(reads):
        return engine.anomalies(out), engine.unjudged("", 0, "")
    not_judged = _pairs(pl, reads, out)
    _rewinds(pl, reads, out)
    run = pl.runs["run"]
    heads = np.r_[True, run[1:] != run[:-1]]
    assigned = int((heads & pl.runs["from_assign"]).sum())
    counts = pd.concat([engine.unjudged("poll_skip, nonmonotonic_poll", not_judged,
                                        UNJUDGED_AFTER_ABORT),
                        engine.unjudged("rewind_mismatch", assigned, UNJUDGED_START)])
    return engine.anomalies(out), counts


def _commits_of(pl: PartitionLog) -> tuple[np.ndarray, ...]:
    """The successful commits of an offset of this partition (commit_offsets ok, or
    send_offsets in a committed transaction), sorted by process then invoke index:
    process codes (as sorted_codes gives the reads'), invoke index, effect completion
    index, offset and op."""
    o = pl.offsets
    m = (equals(o["f"], COMMIT_OFFSETS, SEND_OFFSETS) & equals(o["status"], COMMITTED)
         & o["offset"].notna().to_numpy(dtype=bool))
    rows = np.flatnonzero(m)
    proc = sorted_codes(pl.reads["process"], o["process"])[1][rows]
    inv = o["invoke_index"].to_numpy(dtype=np.int64, na_value=-1)[rows]
    done = o["t_done"].to_numpy(dtype=float, na_value=np.nan)[rows]
    done = np.where(np.isnan(done), o["complete_index"].to_numpy(dtype=float, na_value=np.inf)[rows],
                    done)
    off = o["offset"].to_numpy(dtype=np.int64, na_value=0)[rows]
    op = o["op"].to_numpy(dtype=float, na_value=np.nan)[rows]
    order = np.lexsort((inv, proc))
    return proc[order], inv[order], done[order], off[order], op[order]


def _pairs(pl: PartitionLog, reads: np.ndarray, out: list[dict]) -> int:
    """Each read of a run against where its consumer stood before it (sequences); how
    many first reads after an abort could not be judged (no position known)."""
    runs = pl.runs
    run, retracted, txn = runs["run"], runs["retracted"], runs["txn"]
    offs = runs["offset"].astype(np.int64, copy=False)
    ops = runs["op"]
    n = len(run)
    idx = np.arange(n)
    heads = np.r_[True, run[1:] != run[:-1]]
    same = ~heads
    if not retracted.any():
        # No aborts (most partitions): each read against the one before it.
        a = np.r_[0, offs[:-1]]
        prev = np.where(same, np.r_[np.nan, ops[:-1]], np.nan)
        nan = np.full(n, np.nan)
        _judge(pl, reads, offs, a, same, prev, nan, nan,
               lambda i: f"read offset {a[i]} then", np.zeros(n, dtype=bool), out)
        _head_skips(pl, reads, heads, out)
        return 0
    prev_retracted = np.r_[False, retracted[:-1]]
    # Consecutive reads of one aborted transaction are judged against each other.
    inside = same & retracted & prev_retracted & np.r_[False, txn[1:] == txn[:-1]]
    # The last read of the run before each read that no aborted transaction made.
    head_of = np.maximum.accumulate(np.where(heads, idx, 0))
    last_kept = np.maximum.accumulate(np.where(~retracted, idx, -1))
    kept_before = np.r_[-1, last_kept[:-1]]
    kept_before = np.where(kept_before >= head_of, kept_before, -1)
    pred = np.where(inside, idx - 1, kept_before)
    # The first read after an aborted transaction's reads: judged across the abort.
    across = same & ~inside & prev_retracted
    a = np.where(pred >= 0, offs[np.maximum(pred, 0)], 0)
    prev = np.where(same & (pred >= 0), ops[np.maximum(pred, 0)], np.nan)
    seek = np.full(n, np.nan)
    commit = np.full(n, np.nan)
    how = np.zeros(n, dtype=np.int8)  # 0 a read, 1 the seek position, 2 a commit
    start = runs["start"]
    from_seek = across & (pred < 0) & ~np.isnan(start)
    a = np.where(from_seek, np.nan_to_num(start, nan=0).astype(np.int64) - 1, a)
    seek = np.where(from_seek, runs["start_op"], seek)
    how[from_seek] = 1
    # A successful commit of its offset since (not before the run's first read), for
    # the first read of an aborted transaction and the first read after one.
    acr = np.flatnonzero(same & ~inside & (across | retracted))
    if len(acr):
        c_proc, c_inv, c_done, c_off, c_op = _commits_of(pl)
        if len(c_proc):
            r_proc = sorted_codes(pl.reads["process"], pl.offsets["process"])[0][
                pl._runs[1][acr]]
            inv = runs["invoke"]
            since = inv[np.where(pred[acr] >= 0, np.maximum(pred[acr], 0), head_of[acr])]
            # Per read (few: the first reads after aborts), the process's last commit
            # invoked before it.
            lo = np.searchsorted(c_proc, r_proc, side="left")
            hi = np.searchsorted(c_proc, r_proc, side="right")
            k = np.array([lo_ + int(np.searchsorted(c_inv[lo_:hi_], x, side="left")) - 1
                          for lo_, hi_, x in zip(lo, hi, inv[acr])], dtype=np.int64)
            kk = np.maximum(k, 0)
            ok = (k >= lo) & (c_inv[kk] > since) & (c_done[kk] < inv[acr])
            hit = acr[ok]
            a[hit] = c_off[kk[ok]] - 1
            commit[hit] = c_op[kk[ok]]
            prev[hit] = np.nan
            seek[hit] = np.nan
            how[hit] = 2
    judged = same & ((pred >= 0) | (how > 0))

    def before(i: int) -> str:
        if how[i] == 1:
            return (f"sought to {a[i] + 1} (its reads there retracted by an abort), then "
                    f"after an aborted transaction read")
        if how[i] == 2:
            return (f"committed offset {a[i] + 1} (op {num(commit[i])}) around an aborted "
                    f"transaction, then read")
        if across[i]:
            return (f"read offset {a[i]} (its last read outside an aborted transaction), "
                    f"then after an aborted transaction read")
        return f"read offset {a[i]} then"
    _judge(pl, reads, offs, a, judged, prev, seek, commit, before, inside, out)
    _head_skips(pl, reads, heads, out)
    return int((across & ~judged).sum())


def _judge(pl: PartitionLog, rows: np.ndarray, offs: np.ndarray, a: np.ndarray,
           paired: np.ndarray, prev: np.ndarray, seek: np.ndarray, commit: np.ndarray,
           before: Callable[[int], str], inside: np.ndarray, out: list[dict]) -> None:
    """nonmonotonic_poll and poll_skip for each paired read (rows: its number in
    pl.runs): the consumer stood just past a[i] (before(i) says how, in words: after the
    read by op prev[i], the seek by op seek[i] or the commit by op commit[i]) and read
    offs[i] next; inside[i]: both reads in one aborted transaction."""
    iso, is_rc = pl.runs["isolation"], pl.runs["rc"]

    def where(i: int) -> str:
        return " (in a transaction that aborted)" if inside[i] else ""
    for i in np.flatnonzero(paired & (offs <= a)):
        row = pl.run_read(rows[i])
        out.append(_record("nonmonotonic_poll", row,
                           f"{row['process']} {before(int(i))} offset {offs[i]} with no seek "
                           f"between{where(int(i))}", (prev[i], "previous read"),
                           (seek[i], "seek"), (commit[i], "committed offset")))
    fwd = np.flatnonzero(paired & (offs > a + 1))
    if len(fwd):
        gaps = _gap(pl, is_rc[fwd], a[fwd], offs[fwd], inclusive_a=False)
        for i in fwd[gaps > 0]:
            row = pl.run_read(rows[i])
            _skip(pl, row, iso[i], int(a[i]) + 1, int(offs[i]),
                  f"{row['process']} ({iso[i]}) {before(int(i))} offset {offs[i]}",
                  where(int(i)), (prev[i], "previous read"), (seek[i], "seek"),
                  (commit[i], "committed offset"), out=out)


def _skip(pl: PartitionLog, row: dict, iso: str, lo: int, hi: int, did: str, where: str,
          *others, out: list[dict]) -> None:
    off, value, seen = _first_must(pl, iso, lo, hi)
    why = "visible to it" if seen else "that its acknowledged send put there (no poll returned it)"
    out.append(_record("poll_skip", row, f"{did}, skipping offset {off} (value {value}) {why}{where}",
                       *others, (pl.writer_of(value), "skipped writer")))


def _head_skips(pl: PartitionLog, reads: np.ndarray, heads: np.ndarray, out: list[dict]) -> None:
    """The first read of a run begun at a known position o that passed over a value
    known only from its ack at or after o (and over none visible in the read log, which
    is rewind_mismatch)."""
    if not len(_acked_only(pl)[0]):
        return
    runs = pl.runs
    start = runs["start"]
    h = np.flatnonzero(heads & ~np.isnan(start))
    if not len(h):
        return
    o = start[h].astype(np.int64)
    b = runs["offset"][h].astype(np.int64)
    rc = runs["rc"][h]
    cand = (b > o) & (_gap(pl, rc, o, b, inclusive_a=True, musts=False) == 0) \
        & (_gap(pl, rc, o, b, inclusive_a=True) > 0)
    for k in np.flatnonzero(cand):
        i = h[k]
        row = pl.run_read(reads[i])
        _skip(pl, row, runs["isolation"][i], int(o[k]), int(b[k]),
              f"{row['process']} ({runs['isolation'][i]}) sought to {o[k]}, then read offset {b[k]}",
              "", (runs["start_op"][i], "seek"), out=out)


def _rewinds(pl: PartitionLog, reads: np.ndarray, out: list[dict]) -> None:
    # The first physical read of each run that began with a seek.
    run = pl.runs["run"]
    head = np.r_[True, run[1:] != run[:-1]] & ~np.isnan(pl.runs["start"])
    firsts = reads[head]
    if not len(firsts):
        return
    o = pl.runs["start"][head].astype(np.int64)
    b = pl.runs["offset"][head].astype(np.int64)
    iso, is_rc = pl.runs["isolation"][head], pl.runs["rc"][head]
    expect = np.full(len(o), np.iinfo(np.int64).max)
    for rc in (True, False):
        m = is_rc == rc
        offs, _ = pl.visible(READ_COMMITTED if rc else "other")
        if m.any() and len(offs):
            i = np.searchsorted(offs, o[m], side="left")
            expect[m] = np.where(i < len(offs), offs[np.minimum(i, len(offs) - 1)], expect[m])
    for k in np.flatnonzero((b < o) | (expect < b)):
        row = pl.run_read(firsts[k])
        first = pl.first_visible(iso[k], int(o[k]))
        want = (f"offset {first[0]} (value {first[1]})" if first is not None
                else f"an offset >= {o[k]}")
        out.append(_record(
            "rewind_mismatch", row,
            f"{row['process']} sought to offset {o[k]}, then read offset {b[k]} (value "
            f"{num(row['value'])}); expected {want}", (row["start_op"], "seek"),
            (pl.writer_of(first[1]) if first is not None else None, "expected writer")))


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    return list(_sequences(pl))


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
