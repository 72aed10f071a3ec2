"""Where each consumer's reads went: poll_skip, nonmonotonic_poll, rewind_mismatch.

Per partition, each consumer's reads form runs (checkers/partlog.py): stretches with
no seek, assign or info op between. Within a run, the reads a consumer made inside a
transaction that aborted are *retracted*: an exactly-once consumer rewinds after an
abort, and an application that does not, and goes on from where the aborted reads
left it, skips those records as far as anything committed is concerned.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Literal

import numpy as np
import pandas as pd

from . import anomaly, engine
from .anomaly import num
from .partlog import PartitionLog
from .tables import READ_COMMITTED

TYPES = anomaly.of_family("consumption")


def _gap(pl: PartitionLog, is_rc: np.ndarray, a: np.ndarray, b: np.ndarray,
         inclusive_a: bool) -> np.ndarray:
    """How many values visible to each reader (read_committed where is_rc) lie strictly
    between a and b (or in [a, b) when inclusive_a)."""
    n = np.zeros(len(a), dtype=np.int64)
    side: Literal["left", "right"] = "left" if inclusive_a else "right"
    for rc in (True, False):
        m = is_rc == rc
        if not m.any():
            continue
        offs, _ = pl.visible(READ_COMMITTED if rc else "other")
        n[m] = (np.searchsorted(offs, b[m], side="left")
                - np.searchsorted(offs, a[m], side=side))
    return n


def _record(type, row, detail, *others) -> dict:
    return {"type": type, "severity": anomaly.VIOLATION, "process": row["process"],
            "op": num(row["op"]), "topic": None, "partition": None,
            "offset": num(row["offset"]), "value": num(row["value"]), "txn": row["txn"],
            "detail": detail, "witnesses": anomaly.witnesses((row["op"], "reader"), *others)}


def sequences(pl: PartitionLog) -> pd.DataFrame:
    """poll_skip: within one consumer's run, two consecutive (not retracted) reads of
    the partition at offsets a < b while the read log holds a value visible to that
    consumer at an offset strictly between them. Within one poll and across polls.
    After a seek to o whose first reads were retracted, the first remaining read b
    skips if a visible value lies in [o, b).

    nonmonotonic_poll: in the same setting the next read is at b <= a: the consumer
    went back, or read an offset again, with no seek or assign to explain it.

    rewind_mismatch: after a seek to offset o, the consumer's next read of the
    partition is not the first value visible to it at an offset >= o (it read below o,
    or passed over a visible value at or after o)."""
    out: list[dict] = []
    reads = np.arange(len(pl.runs["run"]))
    if not len(reads):
        return engine.anomalies(out)
    _pairs(pl, reads, out)
    _inside_aborts(pl, reads, out)
    _rewinds(pl, reads, out)
    return engine.anomalies(out)


def _pairs(pl: PartitionLog, reads: np.ndarray, out: list[dict]) -> None:
    retracted = pl.runs["retracted"]
    some_retracted = bool(retracted.any())
    # Every read kept (a partition with no aborts): the arrays as they are, not copied.
    kept = ~retracted if some_retracted else slice(None)
    eff = reads[kept]
    if not len(eff):
        return
    runs, op_at, rec_at = pl.runs["run"], pl.runs["op"], pl.runs["rec"]
    run = runs[kept]
    offs = pl.runs["offset"][kept].astype(np.int64, copy=False)
    iso, is_rc = pl.runs["isolation"][kept], pl.runs["rc"][kept]
    same = np.r_[False, run[1:] == run[:-1]]
    a = np.r_[0, offs[:-1]]
    ops = op_at[kept]
    if some_retracted:
        # A run that began with a seek and whose first reads were retracted continues,
        # for its first remaining read, from the seek position.
        # The reads are in run order (pl.runs), so a run's first read is where its run
        # number changes; every read has an op and a rec.
        heads = np.r_[True, runs[1:] != runs[:-1]]
        head = np.maximum.accumulate(np.where(heads, np.arange(len(runs)), 0))[kept]
        not_first_phys = (ops != op_at[head]) | (rec_at[kept] != rec_at[head])
        start = pl.runs["start"][kept]
        from_seek = ~same & ~np.isnan(start) & not_first_phys
        a = np.where(from_seek, np.nan_to_num(start, nan=0).astype(np.int64) - 1, a)
        seek = np.where(from_seek, pl.runs["start_op"][kept], np.nan)
    else:
        # Nothing retracted, so each run's first read is its own first read: none
        # continues from a seek (and none of the arrays above is needed).
        from_seek = np.zeros(len(eff), dtype=bool)
        seek = np.full(len(eff), np.nan)
    paired = same | from_seek
    prev = np.where(same, np.r_[np.nan, ops[:-1]], np.nan)

    def before(i: int) -> str:
        return (f"sought to {a[i] + 1} (its reads there retracted by an abort), then read"
                if from_seek[i] else f"read offset {a[i]} then")

    _judge(pl, eff, offs, a, iso, is_rc, paired, prev, seek, before, "", out)


def _inside_aborts(pl: PartitionLog, reads: np.ndarray, out: list[dict]) -> None:
    """A poll is an observation whatever its transaction's fate: the consumer's
    position moved. Consecutive reads of one run, one of them retracted by an abort,
    are held to the same order as any others (the pairs without a retracted read are
    _pairs' already)."""
    retracted = pl.runs["retracted"]
    if not retracted.any():  # no such pair: most partitions, and every one of no aborts
        return
    run = pl.runs["run"]
    offs = pl.runs["offset"].astype(np.int64)
    iso, is_rc = pl.runs["isolation"], pl.runs["rc"]
    pair = np.r_[False, (run[1:] == run[:-1]) & (retracted[1:] | retracted[:-1])]
    a = np.r_[0, offs[:-1]]
    ops = pl.runs["op"]
    prev = np.where(pair, np.r_[np.nan, ops[:-1]], np.nan)
    _judge(pl, reads, offs, a, iso, is_rc, pair, prev, np.full(len(ops), np.nan),
           lambda i: f"read offset {a[i]} then", " (in a transaction that aborted)", out)


def _judge(pl: PartitionLog, rows: np.ndarray, offs: np.ndarray, a: np.ndarray,
           iso: np.ndarray, is_rc: np.ndarray, paired: np.ndarray, prev: np.ndarray,
           seek: np.ndarray, before: Callable[[int], str], where: str,
           out: list[dict]) -> None:
    """nonmonotonic_poll and poll_skip for each paired read (rows: its number in
    pl.runs): the consumer stood just past a[i] (before(i) says how, in words: after the
    read by op prev[i], or the seek by op seek[i]) and read offs[i] next."""
    for i in np.flatnonzero(paired & (offs <= a)):
        row = pl.run_read(rows[i])
        out.append(_record("nonmonotonic_poll", row,
                           f"{row['process']} {before(int(i))} offset {offs[i]} with no seek "
                           f"between{where}", (prev[i], "previous read")))
    fwd = np.flatnonzero(paired & (offs > a + 1))
    if len(fwd):
        gaps = _gap(pl, is_rc[fwd], a[fwd], offs[fwd], inclusive_a=False)
        for i in fwd[gaps > 0]:
            row = pl.run_read(rows[i])
            skipped = pl.first_visible(iso[i], int(a[i]) + 1, int(offs[i]))
            out.append(_record(
                "poll_skip", row,
                f"{row['process']} ({iso[i]}) {before(int(i))} offset {offs[i]}, skipping "
                f"offset {skipped[0]} (value {skipped[1]}) visible to it{where}",
                (prev[i], "previous read"), (seek[i], "seek"),
                (pl.writer_of(skipped[1]), "skipped writer")))


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
    return [sequences(pl)]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
