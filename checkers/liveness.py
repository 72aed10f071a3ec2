"""Liveness: late_return, unrecovered_partition, unreadable_offsets.

A client call that is given a timeout promises to return within it: librdkafka bounds
commit_transaction, abort_transaction, send_offsets_to_transaction, flush, consume and
committed by the timeout they are passed. An application relies on that bound to stay
live, and a harness that waits only so long for each call (run/clients.py `bounded`)
records a call it gave up on as `info` after its timeout plus a grace. Such a call is no
safety violation (nothing wrong was committed or read), but a stall: its transaction
stays open, its application stops. So it is its own severity, `liveness`, and the verdict
reports it apart from the safety verdict.

The history says which timeout each call was given (`timeout_ms` in its invoke value);
ops without one are not judged. A process the nemesis stopped (`pause_client`, a
garbage-collection pause or a slow handler) cannot keep a promise while it is stopped:
the time a call spent stopped, from the pause's invoke to the resume (its own
`resume_client`, or a heal) that continued the process, does not count against it.
Unlike every other family, this one reads the ops table on the driver, not the
per-partition steps: a call belongs to no partition.

A partition that no leader answered for through the final phase, after every fault was
undone and every node started, is the cluster's stall: its writes could be neither read
nor judged lost (lost_write and unseen need a final read that went over them), so the
verdict says so rather than passing over them in silence. That one is judged per
partition, from its last watermarks.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from onceproof.history.format import FETCH_OFFSETS, HEAL, PAUSE_CLIENT, RESUME_CLIENT, STREAMS

from . import coverage, engine
from .anomaly import AT, LIVENESS, Anomaly, define, fills, num, witnesses
from .partlog import PartitionLog
from .tables import COMMITTED

# The types this family finds, each defined beside the code that finds it, in the
# order a verdict lists them (checkers/registry.py gathers every family's).
ANOMALIES: tuple[Anomaly, ...] = (
    define("late_return", "liveness", """
       A client call given a timeout returned more than 5 s after that timeout, or had not
       returned that long after it when the harness gave up on it or the history ended.
       The client library bounds such calls by their timeout; an application relies on
       that bound to stay live. Time its process was stopped by the nemesis
       (pause_client, until the resume that continued it) does not count.""",
       fills(process="", op="the call", txn="the call's transaction",
             detail="the call, its timeout and how long it took"),
       on_driver=True,
       roles={"call": "the call"},
       severity=LIVENESS),
    define("unrecovered_partition", "liveness", """
       The last watermarks read name no high watermark for a partition: no leader
       answered for it through the final reads, after every fault was undone and every
       node started. The cluster kept it offline (a safe choice when no replica it may
       elect has every acknowledged write), so its writes could not be read at the end
       and whether any was lost is not known.""",
       fills(**AT, op="the watermarks op",
             detail="how many of its surely written values the final phase did not read"),
       roles={"watermarks": "the last watermarks op"},
       severity=LIVENESS),
    define("unreadable_offsets", "liveness", """
       The final phase could not read a consumer group's committed offsets the way a
       read_committed consumer asks for them (stable offsets only, KIP-447) within its
       bound: 60 s plus the plan's longest transaction timeout, after every fault was
       undone and every node started. The group coordinator holds an offset commit it
       never finished, so an application of that group cannot learn where to resume.""",
       fills(process="", op="the final fetch of the group's committed offsets",
             detail="the group, and the error the fetch ended with"),
       on_driver=True,
       roles={"fetch": "the final fetch of the group's committed offsets"},
       severity=LIVENESS),
)
TYPES = tuple(a.name for a in ANOMALIES)

# Slack past a call's own timeout before it counts as late: scheduling delays of a
# loaded two-core machine, and the GIL a returning call must take back. Below the
# harness's own grace (run/clients.py HANG_GRACE, 10 s), so every call the harness
# gave up on is late.
LATE_MS = 5_000
OPS_COLUMNS = ["op", "process", "f", "type", "txn", "invoke_time", "complete_time",
               "timeout_ms", "error", "final", "group"]
# The final fetches of groups' offsets: of consumer groups, and of streams applications'.
_FETCHES = pa.array([FETCH_OFFSETS, STREAMS])
# The columns that say which ops are judged, read first: the rest only when some are.
_JUDGED_BY = ["timeout_ms", "final", "f"]


def from_ops(read: Callable[[list[str]], pa.Table],
             read_faults: Callable[[list[str]], pa.Table | None] | None = None) -> pd.DataFrame:
    """late_return and unreadable_offsets anomalies of the ops table, whose columns
    read(names) gives in Arrow (the engine's hook for families that judge whole ops);
    read_faults gives the faults table's, for the client pauses (None: none known).

    Only the ops these judge become pandas: the calls given a timeout and the final
    fetches of offsets (at 10M events, pandas of all 5M ops took 1.7 s, for none); and
    of a history with none, only the three columns that say so are read."""
    which = read(_JUDGED_BY)
    judged = pc.or_(pc.is_valid(which["timeout_ms"]),
                    pc.fill_null(pc.and_(which["final"], pc.is_in(which["f"], _FETCHES)),
                                 False))
    if not pc.any(judged).as_py():
        return pd.DataFrame()
    ops = read(OPS_COLUMNS)
    ends = [pc.max(ops[c]).as_py() for c in ("invoke_time", "complete_time")]
    end = max((t for t in ends if t is not None), default=None)
    rows = engine.frame_of(ops.filter(judged))
    faults = read_faults(_FAULT_COLUMNS) if read_faults is not None else None
    stopped = _stopped(faults, end) if faults is not None else {}
    return pd.DataFrame.from_records(_late(rows, end, stopped) + _unreadable(rows))


_FAULT_COLUMNS = ["f", "type", "invoke_time", "complete_time", "done_value"]


def _stopped(faults: pa.Table, end: int | None) -> dict[str, list[tuple[int, float]]]:
    """When each client process was (or may have been) stopped: from a pause_client's
    invoke to the completion of the resume_client or heal after it that continued it
    (the history's end, when none did), process -> [(start, stop)] in nanoseconds."""
    wanted = pc.is_in(faults["f"], pa.array([PAUSE_CLIENT, RESUME_CLIENT, HEAL]))
    rows = faults.filter(wanted).to_pylist()
    rows.sort(key=lambda r: r["invoke_time"] or 0)
    open_: dict[str, int] = {}
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        said = json.loads(r["done_value"]) if r["done_value"] else {}
        if r["f"] == PAUSE_CLIENT:
            for process in said.get("processes") or ():
                open_.setdefault(process, r["invoke_time"])
            continue
        done = r["complete_time"] if r["complete_time"] is not None else r["invoke_time"]
        ended = (said.get("processes") or ()) if r["f"] == RESUME_CLIENT else list(open_)
        for process in ended:
            if process in open_:
                out.setdefault(process, []).append((open_.pop(process), done))
    for process, start in open_.items():
        out.setdefault(process, []).append((start, float("inf") if end is None else end))
    return out


def _stopped_ns(process: str, start: int, stop: float,
                stopped: dict[str, list[tuple[int, float]]]) -> float:
    """How long of [start, stop] the process was stopped."""
    return sum(max(0.0, min(stop, b) - max(start, a)) for a, b in stopped.get(process, ()))


def _unreadable(ops: pd.DataFrame) -> list[dict]:
    """unreadable_offsets: the harness's final fetch of a group's committed offsets
    (run/execute.py, read_committed, retried until its bound) did not complete ok."""
    final = ops["final"].fillna(False).astype(bool)
    stuck = ops[final & ops["f"].isin(_FETCHES.to_pylist()) & (ops["type"] != "ok")]
    return [{"type": "unreadable_offsets", "severity": LIVENESS, "process": r["process"],
             "op": int(r["op"]), "witnesses": witnesses((r["op"], "fetch")),
             "detail": f"group {r['group']}'s committed offsets could not be read at the end "
                       f"(read_committed): {r['error'] or r['type']}"}
            for _, r in stuck.iterrows()]


def _late(ops: pd.DataFrame, end: int | None,
          stopped: dict[str, list[tuple[int, float]]] | None = None) -> list[dict]:
    """late_return: a call not returned when the history ends (`end`: the latest time
    in it) is judged by how long it had been running by then, less the time its
    process was stopped (`stopped`, from _stopped)."""
    timed = ops[ops["timeout_ms"].notna()]
    if timed.empty:
        return []
    returned = timed["complete_time"].notna()
    ended = timed["complete_time"].where(returned, end)
    took = ended - timed["invoke_time"]
    if stopped:
        took = took - [_stopped_ns(p, s, e, stopped) for p, s, e in
                       zip(timed["process"], timed["invoke_time"], ended)]
    late = took > timed["timeout_ms"] * 1_000_000 + LATE_MS * 1_000_000
    rows = []
    for (_, r), ns, done in zip(timed[late].iterrows(), took[late], returned[late]):
        given, secs = r["timeout_ms"] / 1000, ns / 1e9
        what = (f"returned {r['type']} after {secs:.1f} s" if done and not _given_up(r)
                else f"had not returned after {secs:.1f} s" + (
                    "; the harness gave up on it" if done else " when the history ended"))
        rows.append({"type": "late_return", "severity": LIVENESS, "process": r["process"],
                     "op": int(r["op"]), "txn": r["txn"],
                     "witnesses": witnesses((r["op"], "call")),
                     "detail": f"{r['f']} given a {given:g} s timeout {what}"})
    return rows


def _given_up(row) -> bool:
    # run/clients.py `Hung`: the harness stopped waiting; the call itself never returned.
    return isinstance(row["error"], str) and "did not return" in row["error"]


def partition(pl: PartitionLog) -> list[pd.DataFrame]:
    """unrecovered_partition: the last watermarks read have no high watermark for the
    partition (the harness records null when no leader answered for it)."""
    last = pl.last_watermarks
    if last is None or pd.notna(last["high"]):
        return []
    cov = coverage.of(pl)
    unread = int(((cov["status"] == COMMITTED) & ~cov["seen_final"]).sum()) if len(cov) else 0
    return [engine.anomalies([{
        "type": "unrecovered_partition", "severity": LIVENESS, "process": last["process"],
        "op": num(last["op"]), "witnesses": witnesses((last["op"], "watermarks")),
        "detail": f"no leader answered for it in the final phase; {unread} surely written "
                  "values in it were not read there"}])]
