"""How a transaction's outcome, and each write's status, is decided from the history
(docs/history.md, "Transactions").

A transaction's outcome (`outcomes`):

- committed if any of its commit_txn ops completed ok;
- otherwise unknown if a commit_txn ended in info or never completed, even when an
  abort_txn followed: the commit request may already have been applied;
- otherwise aborted (a commit_txn that failed, an abort_txn, or no commit_txn at all:
  only a commit request from the producer can commit a transaction).

Then (`prove`): an unknown transaction is committed after all if a read_committed poll
returned one of its records (from a send that did not fail, in the partition it was
sent to), since such a reader sees a transaction's records only after its commit
marker.

A write's status (`write_status`): a send outside a transaction is committed if ok,
failed if fail, unknown if info. Inside a transaction: failed if the send failed,
aborted if the transaction aborted, unknown if its outcome is unknown (or the send's
is, in a committed transaction), committed if the send was ok and the transaction
committed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from onceproof.history.format import ABORT_TXN, BEGIN_TXN, COMMIT_TXN, NEMESIS

from .arrow import (
    KeyIndex,
    WriteIndex,
    empty_frame,
    equal_to,
    ints,
    positions_in,
    positions_of_strings,
    take_rows,
)
from .tables import ABORTED, COMMITTED, FAILED, READ_COMMITTED, UNKNOWN

if TYPE_CHECKING:
    from .spool import PollSpool


def outcomes(ops: pd.DataFrame) -> pd.DataFrame:
    """Outcome of each transaction, by the rules of docs/history.md.

    Any commit_txn ok commits it; otherwise a commit_txn that ended in info (or never
    ended) leaves it unknown, even if an abort followed, since the commit request may
    already have been applied; otherwise it aborted. (`prove` then commits the unknown
    ones a read_committed poll saw.)

    A commit may be retried (commit_txn again, same txn, after a retriable error or
    timeout), and the first attempt may already have committed: commit_invoke_index is
    the earliest commit_txn's invoke (from when it may have committed),
    commit_complete_index the ok commit's completion (by when it surely had), else the
    last commit_txn's.
    """
    t = ops[ops["txn"].notna() & (ops["process"] != NEMESIS)]
    if t.empty:
        return empty_frame("txns")
    commits = t[t["f"] == COMMIT_TXN]
    ok = commits[commits["type"] == "ok"].drop_duplicates("txn").set_index("txn")
    maybe = commits[commits["type"] == "info"].drop_duplicates("txn").set_index("txn")
    last_commit = commits.drop_duplicates("txn", keep="last").set_index("txn")
    g = t.groupby("txn", sort=False)
    out = pd.DataFrame({
        "process": g["process"].first(),
        "begin_index": g["invoke_index"].min(),
        "end_index": g["complete_index"].max(),
        "n_ops": g.size(),
        "n_writes": g["n_records"].sum(),
    })
    begins = t[t["f"] == BEGIN_TXN].groupby("txn")["tid"].first()
    out["tid"] = begins.reindex(out.index)
    out["outcome"] = ABORTED
    out.loc[out.index.isin(maybe.index), "outcome"] = UNKNOWN
    out.loc[out.index.isin(ok.index), "outcome"] = COMMITTED
    aborts = set(t.loc[t["f"] == ABORT_TXN, "txn"])
    ended = np.where(out.index.isin(aborts), ABORT_TXN,
                     np.where(out.index.isin(last_commit.index), COMMIT_TXN, "none"))
    out["ended_by"] = ended
    chosen = ok.reindex(out.index).combine_first(last_commit.reindex(out.index))
    first_commit = commits.groupby("txn")["invoke_index"].min()
    out["commit_op"] = chosen["op"]
    out["commit_invoke_index"] = first_commit.reindex(out.index)
    out["commit_complete_index"] = chosen["complete_index"]
    return out.rename_axis("txn").reset_index()


def deciding_ops(ops: pd.DataFrame) -> dict[str, list[int]]:
    """Per transaction, the ops that decided its outcome, by the rules of `outcomes`:
    its commit_txn that completed ok; else those that ended in info or never ended
    (one of them may have committed it); else what ended it aborted, its abort_txns
    and failed commit_txns. In op order; a transaction with none of these is left out.
    ops: at least op, f, type (info for an op that never completed) and txn."""
    t = ops[ops["f"].isin([COMMIT_TXN, ABORT_TXN]).to_numpy(dtype=bool)
            & ops["txn"].notna().to_numpy(dtype=bool)]
    commit = (t["f"] == COMMIT_TXN).to_numpy(dtype=bool)
    kind = t["type"].to_numpy(dtype=object)
    tier = np.where(commit & (kind == "ok"), 0, np.where(commit & (kind != "fail"), 1, 2))
    t = t.assign(tier=tier).sort_values("op", kind="stable")
    best = t.groupby("txn", sort=False)["tier"].transform("min")
    t = t[(t["tier"] == best).to_numpy(dtype=bool)]
    return {str(txn): [int(o) for o in g] for txn, g in t.groupby("txn", sort=False)["op"]}


def shared_txn(ops: pd.DataFrame) -> str | None:
    """Why some `txn` names more than one transaction, or None. A txn is one process's
    transaction, begun at most once (docs/history.md); ops of two processes under one
    name, or two begin_txn, would be judged as one transaction with one outcome."""
    if ops.empty:
        return None
    txn, names = pd.factorize(ops["txn"].to_numpy(dtype=object))
    process = pd.factorize(ops["process"].to_numpy(dtype=object))[0]
    first = np.empty(len(names), dtype=process.dtype)
    first[txn[::-1]] = process[::-1]  # the last write wins: each txn's first process
    other = np.flatnonzero(process != first[txn])
    if len(other):
        r = int(other[0])
        mine = ops.iloc[int(np.flatnonzero(txn == txn[r])[0])]
        return (f"txn {names[txn[r]]!r} has ops of {mine['process']} (op {mine['op']}) and "
                f"of {ops['process'].iloc[r]} (op {ops['op'].iloc[r]})")
    begins = ops.loc[ops["f"] == BEGIN_TXN, ["txn", "op"]]
    again = begins["txn"].duplicated(keep=False).to_numpy(dtype=bool)
    if again.any():
        twice = begins[again]
        twice = twice[twice["txn"] == twice["txn"].iloc[0]]
        return (f"txn {twice['txn'].iloc[0]!r} is begun by ops {twice['op'].iloc[0]} and "
                f"{twice['op'].iloc[1]}")
    return None


def prove(txns: pd.DataFrame, polls: PollSpool, ops_t: pa.Table, ops_index: KeyIndex,
           written: WriteIndex) -> pd.DataFrame:
    """txns with each unknown transaction that a read_committed poll saw made committed.

    A read_committed reader sees a transaction's records only after its commit marker,
    so a read_committed poll returning a record of a transaction of unknown outcome (its
    value, in the partition a send that did not fail wrote it to) proves it committed.
    Its commit_complete_index becomes the completion of the first such poll that
    completed after its first commit_txn was invoked, by when it surely had committed
    (none when every such poll came before: they are precommitted reads). Aborted
    transactions stay aborted (a read of one is an aborted_read)."""
    unknown = (txns["outcome"] == UNKNOWN).to_numpy(dtype=bool)
    w = written.writes
    if not unknown.any() or not polls.blocks or not w.num_rows:
        return txns
    candidates = pd.Index(txns.loc[unknown, "txn"].to_numpy(dtype=object))
    # The writes' strings stay Arrow's: as Python strings (two per write, some 0.5 GB
    # at 10M events) they were held through the loop, for the few reads it keeps.
    w_cand = ((positions_of_strings(candidates, w.column("txn")) >= 0)
              & pc.invert(equal_to(w.column("type"), "fail")).to_numpy(
                  zero_copy_only=False))
    values, valid = ints(w.column("value"))
    # Hashed once for every block (Arrow's is_in would hash them again for each).
    cand_values = KeyIndex(values[w_cand & valid])
    if not len(cand_values):
        return txns
    w_part, w_part_ok = ints(w.column("partition"))
    never = np.iinfo(np.int64).max
    # Per read that proves a commit: the row of its write, and its poll's completion.
    proofs: list[tuple[np.ndarray, np.ndarray]] = []
    for raw in polls.files():
        # Few reads are of candidate transactions: pick them out before any join.
        mask = positions_in(cand_values, *ints(raw.column("value"))) >= 0
        if not mask.any():
            continue
        r = raw.filter(pa.array(mask))
        wr = written.rows_of(*ints(r.column("value")))
        at = positions_in(ops_index, ints(r.column("op"))[0])
        op_rows = pa.array(np.maximum(at, 0), type=pa.int64())
        rc = equal_to(ops_t.column("isolation").take(op_rows), READ_COMMITTED).to_numpy(
            zero_copy_only=False)
        done, done_ok = ints(ops_t.column("complete_index").take(op_rows))
        r_part, r_part_ok = ints(r.column("partition"))
        wr_ = np.maximum(wr, 0)
        w_rows = pa.array(wr_, type=pa.int64())
        keep = ((wr >= 0) & (at >= 0) & rc
                & _same(r.column("topic"), w.column("topic").take(w_rows))
                & r_part_ok & w_part_ok[wr_] & (r_part == w_part[wr_]))
        if keep.any():
            proofs.append((wr_[keep], np.where(done_ok, done, never)[keep]))
    if not proofs:
        return txns
    rows = pa.array(np.concatenate([r for r, _ in proofs]), type=pa.int64())
    txn = w.column("txn").take(rows).to_numpy(zero_copy_only=False)
    done = np.concatenate([d for _, d in proofs])
    # A poll that completed before the first commit_txn was invoked proves the
    # commit (and is a precommitted_read) but not when it was: no bound then.
    commit_inv = txns.set_index("txn")["commit_invoke_index"]
    began = pd.Index(txn).map(commit_inv).to_numpy(dtype=float, na_value=np.nan)
    bound = pd.Series(np.where(done > np.nan_to_num(began, nan=-1), done, never))
    first = bound.groupby(txn).min()
    txns = txns.copy()
    proven = txns["txn"].isin(first.index).to_numpy(dtype=bool)
    txns.loc[proven, "outcome"] = COMMITTED
    seen = txns.loc[proven, "txn"].map(first)
    txns.loc[proven, "commit_complete_index"] = seen.where(seen < never)
    return txns


def _same(a, b) -> np.ndarray:
    """Where two Arrow columns hold equal values, two nulls being equal too."""
    equal = pc.fill_null(pc.equal(a, b), False)
    return pc.or_(equal, pc.and_(pc.is_null(a), pc.is_null(b))).to_numpy(
        zero_copy_only=False)


def write_status(txn, send_type, outcome):
    """The status of each write (Arrow columns in, one out): see the module's text."""
    in_txn = pc.is_valid(txn)
    ok = equal_to(send_type, "ok")
    return pc.case_when(
        pc.make_struct(equal_to(send_type, "fail"),
                       pc.and_(in_txn, equal_to(outcome, ABORTED)),
                       pc.and_(in_txn, equal_to(outcome, UNKNOWN)),
                       pc.and_(in_txn, pc.and_(ok, equal_to(outcome, COMMITTED))),
                       in_txn, ok),
        FAILED, ABORTED, UNKNOWN, COMMITTED, UNKNOWN, COMMITTED, UNKNOWN)


def join_txns(cols: dict, txns_t: pa.Table, txns_index: pd.Index) -> dict:
    """Set the txn_* columns and the status of write columns `cols` from the txns."""
    cols.update(take_rows(txns_t, positions_of_strings(txns_index, cols["txn"]), [
        "outcome", "begin_index", "commit_invoke_index", "commit_complete_index"],
        prefix="txn_"))
    cols["status"] = write_status(cols["txn"], cols["type"], cols["txn_outcome"])
    return cols


def rejoin_txns(writes: pa.Table, txns_t: pa.Table, txns_index: pd.Index) -> pa.Table:
    """The writes table (same rows, same order) joined to new txns."""
    cols = join_txns({c: writes.column(c) for c in writes.column_names}, txns_t, txns_index)
    return pa.table({f.name: cols[f.name] for f in writes.schema}).cast(writes.schema)
