"""run/host.py on its own: the seam every client process goes through. No cluster: the
clients (tests/support/host_clients.py) talk to no Kafka, and do to their host what each
op asks.

What is checked is what the history's rules rest on (docs/history.md): requests and
completions reach the history in order; an invoke is written before its call goes on
(the checkers read the history's order as real time); and a process that dies in an op
(GONE), never starts (START_TIMEOUT), breaks the protocol (BUG) or holds a stuck call
(STUCK) leaves its open op open, which the history reads as unknown (info), and is
replaced as the nemesis's info op, or stops the run as a bug of the harness.
"""
from __future__ import annotations

import signal
import time
from contextlib import contextmanager

import pytest

from onceproof.checkers.store import tables_of
from onceproof.history.format import NEMESIS
from onceproof.history.read import read_events
from onceproof.history.writer import HistoryWriter
from onceproof.run import host, rounds
from onceproof.run.clients import RunContext
from onceproof.run.fleet import ERROR, HUNG, Fleet
from onceproof.run.host import Gone, Stuck
from tests.support.host_clients import spec


class SlowWriter(HistoryWriter):
    """A harness slow to write an invoke: a call that went on before its invoke was
    written would find the history without it."""

    def invoke(self, *args, **kwargs):
        time.sleep(0.3)
        return super().invoke(*args, **kwargs)


@contextmanager
def fleet_of(path, client: dict, writer=HistoryWriter):
    """A fleet of one plan client, s0, recording to path."""
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"s0": client}, "steps": []}
    with writer(path) as w:
        fleet = Fleet(plan, RunContext(w, {}, "host", {"t": 1}))
        try:
            yield fleet
        finally:
            fleet.end()


def _ops(path):
    """The converted history's client ops: (process, type) by op id, in invoke order."""
    ops = tables_of(path)[0]["ops"].to_pandas()
    ops = ops[ops["process"] != NEMESIS].sort_values("invoke_index")
    return list(zip(ops["process"], ops["type"], strict=True))


def _replaced(path):
    return [(e["f"], e["type"], e["value"]["process"], e["value"]["by"])
            for e in read_events(path) if e["process"] == NEMESIS and e["type"] != "invoke"]


def test_requests_and_completions_reach_the_history_in_order(tmp_path):
    path = tmp_path / "history.jsonl"
    with fleet_of(path, spec()) as fleet:
        for i in range(3):
            fleet.current["s0"].run({"f": "record", "history": str(path)})
            # run returns once the op's completion is written, not only sent.
            events = read_events(path)
            assert [(e["op"], e["type"]) for e in events[-2:]] == [(i, "invoke"), (i, "ok")]
    events = read_events(path)
    assert [e["index"] for e in events] == list(range(6))
    assert [e["type"] for e in events] == ["invoke", "ok"] * 3
    assert all(e["process"] == "s0" for e in events)
    assert _ops(path) == [("s0", "ok")] * 3


def test_an_invoke_is_written_before_its_call_goes_on(tmp_path):
    path = tmp_path / "history.jsonl"
    with fleet_of(path, spec(), SlowWriter) as fleet:
        for _ in range(2):
            fleet.current["s0"].run({"f": "record", "history": str(path)})
    seen = [e["value"]["seen"] for e in read_events(path) if e["type"] == "ok"]
    assert seen == [True, True]


def test_a_process_that_dies_in_an_op_is_gone_its_op_unknown_and_it_is_replaced(tmp_path):
    path = tmp_path / "history.jsonl"
    with fleet_of(path, spec()) as fleet:
        died = fleet.current["s0"]
        with pytest.raises(Gone, match=r"^client s0: its process ended \(exit code 3\)$"):
            died.run({"f": "die"})
        # The rounds driver replaces a process that is gone: the application comes back
        # as s0.1, whose ops are its own.
        rounds._round(fleet, {"s0": {"f": "record", "history": str(path)}})
        rounds._round(fleet, {"s0": {"f": "record", "history": str(path)}})
        assert fleet.current["s0"].process == "s0.1" and not died._proc.is_alive()
    assert _replaced(path) == [(ERROR, "info", "s0", "s0.1")]
    # The dead process's op stays open for good: unknown, neither ok nor failed.
    assert _ops(path) == [("s0", "info"), ("s0.1", "ok")]


def test_a_process_that_never_starts_is_ended_and_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "START_TIMEOUT", 1.0)
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        ctx = RunContext(w, {}, "host", {"t": 1})
        plan = {"topics": {"t": {"partitions": 1}}, "clients": {"s0": spec(start="hang")}}
        client = host.HostedClient("s0", plan["clients"]["s0"], plan, ctx, "s0")
        with pytest.raises(Gone, match=r"client s0 did not start in 1 s"):
            client.wait_started()
        assert not client._proc.is_alive()
        # A fleet that cannot start its clients stops with that error, every host ended.
        with pytest.raises(Gone, match="did not start"):
            Fleet(plan, ctx)
    assert read_events(path) == []


def test_a_client_that_cannot_be_made_says_why(tmp_path):
    from confluent_kafka import KafkaException
    path = tmp_path / "history.jsonl"
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"s0": spec(start="kafka")}}
    with HistoryWriter(path) as w, pytest.raises(KafkaException, match="no broker answers"):
        Fleet(plan, RunContext(w, {}, "host", {"t": 1}))
    assert read_events(path) == []


def test_a_protocol_error_is_a_bug_that_stops_the_run_and_leaves_its_op_open(tmp_path):
    path = tmp_path / "history.jsonl"
    with fleet_of(path, spec()) as fleet:
        broken = fleet.current["s0"]
        with pytest.raises(RuntimeError, match=r"(?s)client s0 failed in its process:.*KeyError"):
            rounds._round(fleet, {"s0": {"f": "garble"}})
        # The harness killed the process that broke the protocol (not left to notice
        # its pipe closed), and replaced nothing.
        broken._proc.join(10)
        assert broken._proc.exitcode == -signal.SIGKILL and fleet.replaced == 0
    assert _replaced(path) == []
    assert _ops(path) == [("s0", "info")]


def test_a_process_holding_a_stuck_call_is_replaced_once_its_op_is_recorded(tmp_path):
    path = tmp_path / "history.jsonl"
    with fleet_of(path, spec()) as fleet:
        with pytest.raises(Stuck, match="flush did not return"):
            fleet.current["s0"].run({"f": "stuck"})
        # What the rounds driver does with it: the next op of s0 runs and is recorded,
        # then the process is replaced, since the call it gave up on still holds it.
        rounds._round(fleet, {"s0": {"f": "record", "history": str(path)}})
        assert fleet.current["s0"].process == "s0.1"
        rounds._round(fleet, {"s0": {"f": "record", "history": str(path)}})
    assert _replaced(path) == [(HUNG, "info", "s0", "s0.1")]
    assert _ops(path) == [("s0", "info"), ("s0", "ok"), ("s0.1", "ok")]
