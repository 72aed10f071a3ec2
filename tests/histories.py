"""A small builder of real JSONL histories for the checkers' tests.

Each call records one op (invoke, then its completion) through HistoryWriter, so the
tests exercise the same file format the harness writes. Records are short tuples on
one topic by default:

    send:  (partition, value) or (partition, value, offset)
    poll:  (partition, offset, value)
    seek / commit / fetch offsets: (partition, offset)
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from onceproof.checkers.cycles import WW
from onceproof.history.writer import HistoryWriter

RC, RU = "read_committed", "read_uncommitted"


class History:
    """`scope` prefixes process, transaction and group names and `base` is added to
    every value, so several scenarios can share one history without meeting."""

    def __init__(self, path: str | Path, topic: str = "t") -> None:
        self.path = Path(path)
        self.topic = topic
        self.scope = ""
        self.base = 0
        self.skipped = 0  # ns the clock was moved ahead (`late`), so time stays monotonic
        self.w = HistoryWriter(self.path, clock=lambda: time.monotonic_ns() + self.skipped)

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> Path:
        self.w.close()
        return self.path

    # Low level, for interleavings.
    def invoke(self, process, f, value, txn=None, final=False) -> int:
        return self.w.invoke(self.scope + process, f, value,
                             txn=None if txn is None else self.scope + txn, final=final)

    def _v(self, value):
        return None if value is None else value + self.base

    def _g(self, group):
        return self.scope + group

    def complete(self, op, type="ok", value=None, error=None) -> int:
        if type != "ok" and error is None:
            error = "injected"
        self.w.complete(op, type, value, error)
        return op

    def _op(self, process, f, value, done=None, type="ok", txn=None, final=False) -> int:
        op = self.invoke(process, f, value, txn=txn, final=final)
        self.complete(op, type, done if type == "ok" else None)
        return op

    def _t(self, topic):
        return topic or self.topic

    def late(self, process, f, timeout_s: float, took_s: float, type="ok", txn=None) -> int:
        """A call given `timeout_s` that completes `took_s` later (the clock jumps)."""
        op = self.invoke(process, f, {"timeout_ms": int(timeout_s * 1000)}, txn=txn)
        self.skipped += int(took_s * 1e9)
        return self.complete(op, type)

    # Producers.
    def send(self, process, records, type="ok", txn=None, topic=None, sources=None) -> int:
        asked, acked = [], []
        for i, r in enumerate(records):
            rec = {"topic": self._t(topic), "partition": r[0], "key": None,
                   "value": self._v(r[1])}
            if sources is not None and sources[i] is not None:
                rec["source"] = self._v(sources[i])
            asked.append(rec)
            acked.append({**rec, "offset": r[2] if len(r) > 2 else None})
        return self._op(process, "send", {"records": asked}, {"records": acked}, type, txn)

    def begin(self, process, txn, type="ok", timeout_s: float | None = None) -> int:
        """begin_txn; with `timeout_s`, naming the producer's transaction timeout."""
        v = {"tid": f"tid-{process}"}
        if timeout_s is not None:
            v["txn_timeout_ms"] = int(timeout_s * 1000)
        return self._op(process, "begin_txn", v, v, type, txn)

    def commit(self, process, txn, type="ok") -> int:
        return self._op(process, "commit_txn", {}, {}, type, txn)

    def abort(self, process, txn, type="ok") -> int:
        return self._op(process, "abort_txn", {}, {}, type, txn)

    def txn(self, process, txn, records, outcome="ok", topic=None) -> None:
        """begin, one send of records, then commit_txn completing with `outcome`
        (ok/fail/info), or abort_txn when outcome is "abort"."""
        self.begin(process, txn)
        self.send(process, records, txn=txn, topic=topic)
        if outcome == "abort":
            self.abort(process, txn)
        else:
            self.commit(process, txn, outcome)

    # Consumers.
    def poll(self, process, records, isolation=RC, type="ok", txn=None, final=False,
             topic=None, group=None) -> int:
        asked = {"isolation": isolation}
        if group:
            asked["group"] = self._g(group)
        # A record is (partition, offset, value), or with a fourth item the byte its
        # reader found the value differs from what its identity makes (`corrupt`).
        got = {"isolation": isolation, "records": [
            {"topic": self._t(topic), "partition": r[0], "offset": r[1], "key": None,
             "value": self._v(r[2]), **({"corrupt": r[3]} if len(r) > 3 else {})}
            for r in records]}
        return self._op(process, "poll", asked, got, type, txn, final)

    def seek(self, process, positions, type="ok", topic=None, final=False) -> int:
        v = {"positions": [{"topic": self._t(topic), "partition": p, "offset": o}
                           for p, o in positions]}
        return self._op(process, "seek", v, v, type, final=final)

    def assign(self, process, partitions, type="ok", topic=None, kept=None,
               starts: dict[int, int] | None = None) -> int:
        """`starts`: partition -> the offset the ok says the consumer starts at."""
        v: dict = {"partitions": [{"topic": self._t(topic), "partition": p} for p in partitions]}
        if kept is not None:
            v["kept"] = [{"topic": self._t(topic), "partition": p} for p in kept]
        done = v
        if starts is not None:
            done = {**v, "partitions": [{**x, "offset": starts.get(x["partition"])}
                                        for x in v["partitions"]]}
        return self._op(process, "assign", v, done, type)

    def commit_offsets(self, process, group, offsets, type="ok", topic=None) -> int:
        v = {"group": self._g(group), "offsets": [{"topic": self._t(topic), "partition": p,
                                          "offset": o} for p, o in offsets]}
        return self._op(process, "commit_offsets", v, v, type)

    def send_offsets(self, process, txn, group, offsets, type="ok", topic=None,
                     pipeline: bool | None = None) -> int:
        v = {"group": self._g(group), "offsets": [{"topic": self._t(topic), "partition": p,
                                          "offset": o} for p, o in offsets]}
        if pipeline is not None:
            v["pipeline"] = pipeline
        return self._op(process, "send_offsets", v, v, type, txn)

    def fetch_offsets(self, process, group, offsets, type="ok", topic=None) -> int:
        asked = {"group": self._g(group), "partitions": [{"topic": self._t(topic), "partition": p}
                                                for p, _ in offsets]}
        got = {"group": self._g(group), "offsets": [{"topic": self._t(topic), "partition": p,
                                            "offset": o} for p, o in offsets]}
        return self._op(process, "fetch_offsets", asked, got, type)

    def streams(self, process, group, input, output, topology="map", partitions=(0,),
                offsets=None) -> int:
        """A Kafka Streams application's op: what it declares (its group, input and
        output topics, topology) and the input partitions its tasks held; with
        `offsets` ((partition, offset) pairs), the final phase's fetch of its group's
        committed offsets instead (checkers/streams.py)."""
        app = {"group": self._g(group), "input": input, "output": output, "topology": topology}
        if offsets is None:
            return self._op(process, "streams", {**app, "guarantee": "exactly_once_v2"}, {
                "state": "RUNNING",
                "partitions": [{"topic": input, "partition": p} for p in partitions]})
        got = {"group": self._g(group), "offsets": [{"topic": input, "partition": p, "offset": o}
                                                    for p, o in offsets]}
        return self._op(process, "streams", {
            **app, "partitions": [{"topic": input, "partition": p} for p, _ in offsets],
            "timeout_ms": 10000}, got, final=True)

    def watermarks(self, process, partitions, topic=None, settled_s: float = 120) -> int:
        """partitions: (partition, low, high, lso) tuples, or with a fifth, where the
        final reads stopped (the row's `offset`); read `settled_s` after the op before
        (the clock jumps), as the harness settles before its final phase: long enough
        for Kafka to have aborted a transaction left open (checkers/loss.py)."""
        self.skipped += int(settled_s * 1e9)
        got = {"partitions": [{"topic": self._t(topic), "partition": p, "low": lo,
                               "high": hi, "lso": lso, **({"offset": end[0]} if end else {})}
                              for p, lo, hi, lso, *end in partitions]}
        return self._op(process, "watermarks", {}, got, final=True)

    def fault(self, f, value=None) -> int:
        return self.w.fault(f, value or {})


def verdict(h: History, spark=None):
    """Close the history and check it: on Spark when given a session, else with the
    same checks run locally in pandas (checkers/engine.py)."""
    from onceproof.checkers import check
    return check(h.close(), spark=spark, local=spark is None)


def found(v) -> set[str]:
    """Anomaly types a verdict reports."""
    return {t for t, n in v.counts.items() if n}


def example(v, type: str, **expected) -> dict:
    """The first example of `type`, asserting the given fields."""
    assert type in v.examples, f"{type} not reported: {v.summary()}"
    ex = v.examples[type][0]
    for k, want in expected.items():
        assert ex[k] == want, f"{type} example {k}={ex[k]!r}, want {want!r}: {ex}"
    return ex


_SEND, _POLL, _COMMITS = {"send"}, {"poll"}, {"commit_offsets", "send_offsets"}
# The kinds of op each role may name (roles not here may name any op).
ROLE_OPS: dict[str, set[str]] = {
    **dict.fromkeys(("writer", "missing writer", "seen writer", "skipped writer",
                     "expected writer", "candidate writer", "input writer", "later send",
                     "earlier send", "W1 send", "W2 send", "output"), _SEND),
    **dict.fromkeys(("reader", "final reader", "missing reader", "previous read",
                     "offset reader", "input poll"), _POLL),
    "observer": _SEND | _POLL, "edge N source": _SEND | _POLL, "edge N target": _SEND | _POLL,
    "scan start": {"seek", "assign", "poll"}, "seek": {"seek", "assign"},
    "watermarks": {"watermarks"}, "commit": {"commit_txn"}, "abort": {"abort_txn", "commit_txn"},
    "W1 end": {"commit_txn", "send"},
    "lower commit": _COMMITS, "committed offset": _COMMITS, "earlier commit": _COMMITS,
    "latest commit": _COMMITS,
    "fetch": {"fetch_offsets", "streams"}, "send_offsets": {"send_offsets"},
    "output reader": _POLL, "input reader": _POLL, "application": {"streams"},
}


def assert_witnessed(row: dict, kinds: dict[int, str] | None = None) -> None:
    """An anomaly row (or verdict example) names its ops as data: a non-empty list of
    {op, role} that holds its `op`, in roles its type's registry entry names; given the
    history's `kinds` (op -> f), each is an op of it, of a kind its role may name."""
    from onceproof.checkers.registry import BY_NAME
    ws = row.get("witnesses")
    assert isinstance(ws, list) and ws, f"no witnesses: {row}"
    assert all(isinstance(w["op"], int) and isinstance(w["role"], str) for w in ws), row
    if row.get("op") is not None:
        assert row["op"] in {w["op"] for w in ws}, f"op {row['op']} not a witness: {row}"
    a = BY_NAME[row["type"]]
    assert all(a.has_role(w["role"]) for w in ws), f"a role {a.name} does not name: {row}"
    for w in ws if kinds is not None else ():
        role = re.sub(r"^edge \d+ ", "edge N ", w["role"])
        assert w["op"] in kinds, f"witness op {w['op']} is not in the history: {row}"
        assert kinds[w["op"]] in ROLE_OPS.get(role, {kinds[w["op"]]}), \
            f"{role} names a {kinds[w['op']]} (op {w['op']}): {row}"


def witnessed(ex: dict) -> set[tuple[int, str]]:
    """(op, role) of each witness of an example."""
    return {(w["op"], w["role"]) for w in ex["witnesses"]}


def ww_ring(n: int, bad_at: int | None = None) -> pd.DataFrame:
    """The edges (checkers/cycles.py's input) of a ww cycle of n transactions, every edge
    witnessed in two partitions, runs of 1000 edges chained in one of them; real time
    allows it unless bad_at names an edge whose second witness it forbids."""
    names = [f"T{i:07d}" for i in range(n)]
    rows = []
    for w, part in enumerate((np.arange(n) // 1000, 10**6 + np.arange(n))):
        d = pd.DataFrame({"src": names, "dst": names[1:] + names[:1], "kind": WW,
                          "process": "p", "topic": "t", "partition": part, "src_op": 1,
                          "src_inv": 1, "src_cmp": 10**9, "dst_op": 2, "dst_inv": 1,
                          "dst_cmp": 10**9, "src_off": np.arange(n), "dst_off": np.arange(n) + 1,
                          "value": None})
        if w == 1 and bad_at is not None:
            d.loc[bad_at, ["src_inv", "dst_cmp"]] = [50, 40]
        rows.append(d)
    return pd.concat(rows, ignore_index=True)
