"""Order of appends: nonmonotonic_send, commit_order."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from . import coverage, engine, log_values, spans
from .anomaly import AT, VIOLATION, Anomaly, define, fills, num, witnesses
from .partlog import PartitionLog, equals, name_ranks, sort_order
from .tables import COMMITTED, UNKNOWN

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("nonmonotonic_send", "ordering", """
       One process's sends to one partition (outside transactions, or within one
       transaction), in the order it sent them, got offsets that do not increase
       (within one send, too). An offset is the ack's, or else the one a read returned
       for the record's value: a send that ended in info counts once a read found it.""",
       fills(**AT, op="the later send", offset="", value="", txn="",
             detail="the previous send and its offset"),
       roles={"later send": "the send whose offset did not increase (`op`)",
              "earlier send": "the process's previous send",
              "offset reader": "the first poll that read a send's value, for each of the two "
                               "whose ack did not say its offset"}),
    define("commit_order", "ordering", """
       Committed writes W1 and W2 to one partition, each a committed transaction or an
       acknowledged send outside any transaction: W1 completed (its commit surely done,
       or its send acknowledged) before W2 was invoked (its first op, or its send), yet a
       record of W2 precedes a record of W1 there. W2 may also be a send outside any
       transaction that ended in info (or never completed) whose record a read found: it
       was appended, after its invoke. Two sends of one process are left to
       nonmonotonic_send. A record counts only where the log still holds it: no read
       returned another value at its offset, and no reader went over it without
       returning it (for a send outside transactions, at an offset known from its ack or
       a read). A transaction proven committed only by reads made before its first
       commit_txn was invoked has no known time of commit, so it is no W1.""",
       fills(**AT, op="W2's first send", offset="W2's record", txn="W2's transaction",
             detail="names W1"),
       roles={"W2 send": "W2's send of its record below W1's (`op`)",
              "W1 send": "W1's send of its record above it",
              "W1 end": "the op that completed W1: its commit_txn, or its send",
              "W2 start": "the op that began W2: its transaction's first op, or its send"}),
)
TYPES = tuple(a.name for a in ANOMALIES)


def nonmonotonic_sends(pl: PartitionLog) -> list[dict]:
    """nonmonotonic_send: one process's sends to one partition (those outside
    transactions, or those within one transaction) that are in the log, in the order it
    sent them, got offsets that do not increase. A process sends one op at a time and
    a producer appends a partition's records in the order they were sent: within one
    send, and across its sends, unless it reorders retried batches (a non-idempotent
    producer with several requests in flight, which exactly-once rules out).

    A record's offset is its ack's, or else the offset a read returned for its value
    (values are unique). So a send that ended in info (or never completed) counts once
    a read found it: it was appended, and an idempotent producer appends the next
    send's records after it, retried or not. A send that failed is not in the log. An
    offset observed holding another value too orders nothing: the log was rewritten
    there, which inconsistent_offset reports."""
    known = pl.write_bounds["known"].to_numpy(dtype=float, na_value=np.nan)
    # Row numbers of the writes, at which the few columns used are read: no copy of
    # the wide rows.
    rows = np.flatnonzero(~equals(pl.writes["type"], "fail") & ~np.isnan(known))
    found = _out_of_order(pl, rows, known)
    if len(found[0]):  # rare: only then are the rewritten offsets looked for
        rows = rows[~np.isin(known[rows], _rewritten(pl))]
        found = _out_of_order(pl, rows, known)
    w = pl.writes
    out: list[dict] = []
    readers = _offset_readers(pl, np.r_[found[0], found[3]])
    for row, offset, prev, prev_row in zip(*found, strict=True):
        x, prev_op = w.iloc[row], num(w["op"].iloc[prev_row])
        out.append({"type": "nonmonotonic_send", "severity": VIOLATION,
                    "process": x["process"], "op": num(x["op"]), "offset": int(offset),
                    "value": num(x["value"]), "txn": x["txn"],
                    "witnesses": witnesses((x["op"], "later send"), (prev_op, "earlier send"),
                                           (readers.get(row), "offset reader"),
                                           (readers.get(prev_row), "offset reader")),
                    "detail": f"{x['process']}'s send (op {num(x['op'])}) "
                              f"{'was acknowledged' if pd.notna(x['offset']) else 'was read'} "
                              f"at offset {offset}, not after its previous send's offset "
                              f"{prev} (op {prev_op})"})
    return out


def _out_of_order(pl: PartitionLog, rows: np.ndarray, known: np.ndarray):
    """Of the writes at `rows` (offsets `known`), each whose offset is not above that of
    its process's previous one (in one transaction, or outside any): its row, its
    offset, and the previous one's offset and row."""
    if len(rows) < 2:
        return (np.empty(0, np.int64),) * 4
    w = pl.writes
    # In order of process, transaction ("" outside one), invoke_index and rec, missing
    # ones last, as pandas' sort_values by those columns orders them, but sorted by
    # numpy codes: pandas makes a categorical of each column first.
    pcode = name_ranks(w["process"], rows)
    pcode[pcode < 0] = pcode.max() + 1
    tcode = name_ranks(w["txn"], rows, empty_is_missing=True)  # sorts as "", first
    order = sort_order(*(_missing_last(w[c].array[rows]) for c in ("rec", "invoke_index")),
                       tcode, pcode)
    pcode, tcode = pcode[order], tcode[order]
    same = np.r_[False, (pcode[1:] == pcode[:-1]) & (tcode[1:] == tcode[:-1])]
    rows = rows[order]
    offs = known[rows].astype(np.int64)
    prev = np.r_[0, offs[:-1]]
    prev_row = np.r_[0, rows[:-1]]
    bad = np.flatnonzero(same & (offs <= prev))
    return rows[bad], offs[bad], prev[bad], prev_row[bad]


def _offset_readers(pl: PartitionLog, rows: np.ndarray) -> dict[int, float]:
    """Of the writes at `rows`, each whose offset its ack did not say: the op of the
    first poll that read its value at a known offset (where its offset is known from)."""
    read = pl.first_reads(rows, pl.reads["offset"].notna().to_numpy(dtype=bool))
    ops = pl.reads["op"].to_numpy(dtype=float, na_value=np.nan)
    acked = pl.writes["offset"].notna().to_numpy(dtype=bool)
    return {int(row): ops[at] for row, at in zip(rows, read, strict=True)
            if not acked[row] and at >= 0}


def _rewritten(pl: PartitionLog) -> np.ndarray:
    """The offsets observed (by an ack or a read) holding two or more values."""
    obs = log_values.observations(pl).drop_duplicates(["offset", "value"])
    return obs["offset"][obs["offset"].duplicated()].unique()


def _missing_last(a: pd.api.extensions.ExtensionArray) -> np.ndarray:
    """An Int64 array's values, its missing ones above them all."""
    values = a.to_numpy(dtype=np.int64, na_value=0)
    missing = a.isna()
    values[missing] = values[~missing].max(initial=0) + 1
    return values


# The completion of a writer whose append may come at any time: after every op.
_NEVER_DONE = np.iinfo(np.int64).max


def _plain_senders(pl: PartitionLog) -> pd.DataFrame:
    """Sends outside transactions as writers (one row per send op, columns _COLS): those
    acknowledged, and those that ended in info (or never completed) whose record a read
    found, from the records whose offset is known and still held by them
    (coverage.held). A send of unknown outcome may have been appended at any time
    after its invoke: it is a later writer (W2) only, never done before another
    began."""
    cov = coverage.of(pl)
    off = cov["offset"].to_numpy(dtype=float)
    acked = (equals(cov["status"], COMMITTED)
             & cov["complete_index"].notna().to_numpy(dtype=bool))
    found = equals(cov["status"], UNKNOWN) & cov["seen_any"].to_numpy(dtype=bool)
    keep = (acked | found) & cov["txn"].isna().to_numpy(dtype=bool) & ~np.isnan(off)
    if keep.any():
        keep &= coverage.held(pl)
    c = cov[keep]
    if c.empty:
        return pd.DataFrame(columns=_COLS)
    # Rows of one send are contiguous (writes are sorted by invoke_index, rec).
    op = c["op"].to_numpy(dtype=np.int64)
    first = np.flatnonzero(np.r_[True, op[1:] != op[:-1]])
    o = c["offset"].to_numpy(dtype=float)
    done = np.where(acked[keep], c["complete_index"].to_numpy(dtype=np.int64, na_value=0),
                    _NEVER_DONE)
    return pd.DataFrame({
        "txn": None, "process": c["process"].to_numpy(dtype=object)[first],
        "sure_lo": np.minimum.reduceat(o, first), "sure_hi": np.maximum.reduceat(o, first),
        "lo_op": op[first], "hi_op": op[first], "t_begin": c["invoke_index"].to_numpy(dtype=np.int64)[first],
        "t_done": done[first]})


_COLS = ["txn", "process", "sure_lo", "sure_hi", "lo_op", "hi_op", "t_begin", "t_done"]


def _best_elsewhere(hi: np.ndarray, grp: np.ndarray) -> tuple[np.ndarray, ...]:
    """For writers in completion order with record offsets `hi` and groups `grp`: at
    each position i, the highest `hi` among writers 0..i (best, arg) and the highest
    among those 0..i not in the group of best's writer (alt, alt_arg; -inf / -1 when
    none). The best among writers outside any group g is then best if g is not the
    leader's group, else alt."""
    n = len(hi)
    idx = np.arange(n)
    best = np.maximum.accumulate(hi)
    arg = np.maximum.accumulate(np.where(np.r_[True, hi[1:] > best[:-1]], idx, 0))
    lead = grp[arg]
    # Segments where one group leads. Before a segment starts, the leader was another
    # group, so the best outside the new leader's group is the previous best; within
    # the segment, a running maximum of the others' offsets.
    seg_start = np.r_[True, lead[1:] != lead[:-1]]
    seg = np.cumsum(seg_start) - 1
    starts = np.flatnonzero(seg_start)
    prev = np.where(starts > 0, best[np.maximum(starts - 1, 0)], -np.inf)[seg]
    prev_arg = np.where(starts > 0, arg[np.maximum(starts - 1, 0)], -1)[seg]
    other = np.where(grp != lead, hi, -np.inf)
    run = pd.Series(other).groupby(seg).cummax().to_numpy()
    setter = (other == run) & ~np.isneginf(other) & (
        seg_start | (run > np.r_[-np.inf, run[:-1]]))
    run_arg = pd.Series(np.where(setter, idx, -1)).groupby(seg).cummax().to_numpy()
    use_run = run > prev
    return (best, arg, np.where(use_run, run, prev),
            np.where(use_run, run_arg, prev_arg))


def commit_orders(pl: PartitionLog) -> list[dict]:
    """commit_order: two committed writes W1 and W2 to one partition, each a committed
    transaction or an acknowledged send outside any transaction, where W1 completed
    (for a transaction: its commit_txn completed; for a send: its ack) before W2 was
    invoked (its send; for a transaction, its first op), yet some record of W2 precedes
    some record of W1 in that partition. An acknowledged append is in the log before
    its ack, and the log of a partition is totally ordered, so W2's records land after
    all of W1's: the log contradicts real time. Two sends of one process are left to
    nonmonotonic_send. A record counts only where it is still held (coverage.held; for
    a send, at an offset known from its ack or a read): a record truncated by a failover
    (acks=1) and its offset reused is a lost_write or inconsistent_offset instead."""
    t = spans.writers(pl) if pl.has_txn_writes else pd.DataFrame(columns=_COLS)
    t = t[t["t_begin"].notna() & t["t_done"].notna() & t["sure_lo"].notna()][_COLS]
    found = _violations(t, _plain_senders(pl))
    if found is None:
        return []
    w, top_arg, rows = found
    out = []
    for j in rows:
        w1, w2 = w.iloc[top_arg[j]], w.iloc[j]
        out.append({
            "type": "commit_order", "severity": VIOLATION, "process": w2["process"],
            "op": num(w2["lo_op"]), "offset": int(w2["sure_lo"]), "txn": w2["txn"],
            "witnesses": witnesses((w2["lo_op"], "W2 send"), (w1["hi_op"], "W1 send")),
            "witness_at": engine.at_events((w1["t_done"], "W1 end"), (w2["t_begin"], "W2 start")),
            "detail": f"{_name(w1)} {'committed' if pd.notna(w1['txn']) else 'was acknowledged'}"
                      f" (index {num(w1['t_done'])}) before {_name(w2)} "
                      f"{'began' if pd.notna(w2['txn']) else 'was sent'} "
                      f"(index {num(w2['t_begin'])}), yet its record at offset "
                      f"{int(w2['sure_lo'])} is below offset {int(w1['sure_hi'])}, where "
                      f"{_name(w1)} wrote"})
    return out


def _violations(t: pd.DataFrame, s: pd.DataFrame):
    """(writers in completion order, the earlier writer for each, the later writers
    that precede it), or None when there are none."""
    parts = [f for f in (t, s) if len(f)]
    if sum(map(len, parts)) < 2:
        return None
    w = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    w = w.sort_values("t_done", kind="stable").reset_index(drop=True)
    done = w["t_done"].to_numpy(dtype=np.int64)
    his = w["sure_hi"].to_numpy(dtype=float)
    plain = w["txn"].isna().to_numpy(dtype=bool)
    # Groups never compared with each other: a process's sends outside transactions
    # (nonmonotonic_send's); every transaction is a group of its own.
    procs = pd.factorize(w["process"].to_numpy(dtype=object))[0]
    txns = pd.factorize(w["txn"].to_numpy(dtype=object))[0]
    grp = np.where(plain, procs, procs.max(initial=0) + 1 + txns)
    best, arg, alt, alt_arg = _best_elsewhere(his, grp)
    k = np.searchsorted(done, w["t_begin"].to_numpy(dtype=np.int64), side="left") - 1
    kk = np.maximum(k, 0)
    mine = grp[arg[kk]] == grp
    top = np.where(mine, alt[kk], best[kk])
    top_arg = np.where(mine, alt_arg[kk], arg[kk])
    rows = np.flatnonzero((k >= 0) & (top > w["sure_lo"].to_numpy(dtype=float)))
    return (w, top_arg, rows) if len(rows) else None


def _name(w) -> str:
    return w["txn"] if pd.notna(w["txn"]) else f"{w['process']}'s send (op {num(w['lo_op'])})"


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    found = nonmonotonic_sends(pl) + commit_orders(pl)
    return [engine.anomalies(found)]


def find(tables):
    return engine.find(tables, [sys.modules[__name__]])
