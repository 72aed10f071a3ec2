"""The fault registry (workloads/faults.py): each kind checks its parameters in one line,
draws with its undo, and opens and closes report windows; the docs name every kind; and
on the real cluster, one plan fires every kind with its targets resolved."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceproof.history.read import read_events
from onceproof.history.writer import HistoryWriter
from onceproof.report import faults as report_faults
from onceproof.report.history import load
from onceproof.workloads import faults
from onceproof.workloads.plan import PlanError, fault_problem, validate

DOCS = Path(__file__).resolve().parent.parent / "docs"

# A valid step of every kind, naming every parameter it takes.
FULL = {
    "kill": {"node": "leader"}, "pause": {"node": 2}, "restart": {"node": 1},
    "partition": {"sides": [["leader"], []]}, "isolate": {"node": 1},
    "latency": {"ms": 200, "jitter": 50, "node": "leader", "kinds": ["client", "repl"],
                "streams": ["downstream"], "toxicity": 0.5},
    "reset_peer": {"timeout_ms": 0, "node": 3, "kinds": ["client"]},
    "slicer": {"node": 1, "kinds": ["client"]}, "bandwidth": {"kb_per_s": 16, "node": 2},
    "cut_clients": {"nodes": [1, 2]}, "stop": {"node": 3}, "wipe": {"node": 3},
    "heal": {"all": True}, "resume": {"node": 2}, "start": {"node": 3},
    "hold_request": {"api": ["EndTxn"], "client": "t0", "nth": 2, "count": 1, "node": "leader",
                     "kinds": ["client"], "release_ms": 9000, "release_after": "Produce",
                     "release_after_count": 2, "release_delay_ms": 100},
    "drop_response": {"api": "Produce", "client": "t0", "nth": 1, "count": 2, "node": 1,
                      "kinds": ["client"]},
    "duplicate_request": {"api": "WriteTxnMarkers", "nth": 1, "count": 1, "node": 2,
                          "kinds": ["repl"]},
    "release": {},
    "upgrade": {"to": "4.4.0", "node": 1, "clean": False, "wait": False},
    "downgrade": {"to": "3.9.2", "node": "leader", "clean": True, "wait": True},
    "finalize": {"feature": "transaction.version", "level": 2},
    "pause_client": {"client": "p0", "ms": 25000}, "resume_client": {"client": "p0"},
}


def _plan(*fault_steps: dict) -> dict:
    return {"topics": {"t": {"partitions": 1}},
            "clients": {"p0": {"role": "producer"}, "t0": {"role": "txn_producer"}},
            "steps": [{"fault": s} for s in fault_steps]}


def test_every_kind_has_a_full_example_here():
    assert set(FULL) == set(faults.FAULTS)


@pytest.mark.parametrize("kind", list(faults.FAULTS))
def test_each_kind_checks_its_parameters_in_one_line(kind):
    definition = faults.FAULTS[kind]
    full = {"f": kind, **FULL[kind]}
    assert faults.problem(full) is None
    validate(_plan(full))
    bad_steps = [{**full, "meteor": 1}]
    bad_steps += [{k: v for k, v in full.items() if k != p}
                  for p, spec in definition.params.items() if spec.required]
    bad_steps += [{**full, p: "nonsense"} for p in definition.params]
    for step in bad_steps:
        with pytest.raises(PlanError) as caught:
            validate(_plan(step))
        message = str(caught.value)
        assert "\n" not in message and message.startswith("plan steps[0].fault: ")
        assert kind in message and "see docs/plans.md" in message


def _targeting(*refs) -> dict:
    return {"topics": {"t": {"partitions": 2}},
            "clients": {"p0": {"role": "producer"}, "t0": {"role": "txn_producer"},
                        "c0": {"role": "consumer"}, "w0": {"role": "rw_txn"}},
            "steps": [{"fault": {"f": "pause", "node": r}} for r in refs]}


def test_targets_name_partitions_and_clients_of_the_plan():
    validate(_targeting("leader", "leader:t/1", "txn_coordinator:t0", "txn_coordinator:w0",
                        "group_coordinator:c0", "group_coordinator:w0"))
    assert faults.targets({"f": "partition", "sides": [["txn_coordinator:t0", 2], []]}) == \
        [("txn_coordinator", "t0")]
    wrong = {
        "leader:t/2": "leader:t/2 names no partition of the plan's topics (t has 0..1)",
        "leader:u/0": "leader:u/0 names no partition of the plan's topics (no topic 'u')",
        "txn_coordinator:p0": "txn_coordinator:p0 needs a client of the plan with role "
                              "pipeline or rw_txn or txn_producer, and 'p0' is a producer",
        "group_coordinator:t0": "group_coordinator:t0 needs a client of the plan with role "
                                "consumer or pipeline or rw_txn or streams, and 't0' is a txn_producer",
        "group_coordinator:x9": "and 'x9' is no client of the plan",
        "txn_coordinator": "pause's node must be a node id or a target",
        "leader:t": "pause's node must be a node id or a target",
    }
    for ref, message in wrong.items():
        with pytest.raises(PlanError, match=r"^plan steps\[0\]\.fault: .*" + re.escape(message)):
            validate(_targeting(ref))


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_targeted_presets_aim_at_the_plans_own_parts(data):
    plan = {"topics": {"in": {"partitions": 3}},
            "clients": {"p0": {"role": "producer", "topic": "in"}, "x0": {"role": "pipeline"}}}
    aims = {"pause_txn_coordinator": "txn_coordinator:x0", "kill_group_coordinator":
            "group_coordinator:x0", "slow_txn_coordinator": "txn_coordinator:x0"}
    for name, ref in aims.items():
        assert data.draw(faults.drawn(name, plan=plan))[0][1]["node"] == ref
    assert data.draw(faults.drawn("isolate_leader", plan=plan))[0][1]["node"] in {
        "leader:in/0", "leader:in/1", "leader:in/2"}
    with pytest.raises(faults.UnknownFault, match="txn_coordinator needs a client with role"):
        data.draw(faults.drawn("pause_txn_coordinator", plan={"clients": {"p0": {"role": "producer"}}}))


def test_toxicity_is_a_share_of_connections():
    for share in (0, 1.5, "half", True):
        assert "toxicity must be" in faults.problem({"f": "latency", "ms": 5, "toxicity": share})
    assert faults.label("latency", {"f": "latency", "ms": 100, "node": 2, "toxicity": 0.25}) == \
        "latency 100ms n2 (25% of connections)"
    assert faults.label("latency", {"f": "latency", "ms": 100, "toxicity": 1}) == "latency 100ms"


def test_an_unknown_kind_lists_the_registry():
    with pytest.raises(PlanError) as caught:
        validate(_plan({"f": "meteor"}))
    assert all(kind in str(caught.value) for kind in faults.FAULTS)
    with pytest.raises(faults.UnknownFault) as caught:
        faults.selection("kill,meteor")
    assert "unknown fault meteor" in str(caught.value)
    assert all(name in str(caught.value) for name in faults.DRAWN)


def test_selections_are_named_sets_or_lists_of_kinds_and_presets():
    assert faults.selection("mixed") == faults.SETS["mixed"]
    assert (set(faults.SETS["node"]) | set(faults.SETS["net"]) | set(faults.SETS["client"])
            == set(faults.SETS["mixed"]))
    assert faults.SETS["client"] == ("pause_client",)
    assert faults.selection("slow_acks, kill") == ("slow_acks", "kill")
    assert faults.selection("none") == ()
    with pytest.raises(faults.UnknownFault):
        faults.selection("heal")  # an undo is drawn with the fault it undoes, not alone


@settings(max_examples=200, deadline=None)
@given(data=st.data(), name=st.sampled_from(faults.DRAWN))
def test_each_strategy_draws_valid_steps_with_their_undo(data, name):
    plan = _targeting()
    steps = data.draw(faults.drawn(name, nodes=3, plan=plan))
    for _, step in steps:
        assert fault_problem(plan, step) is None, step
    kind = faults.PRESETS[name].kind if name in faults.PRESETS else name
    definition = faults.FAULTS[kind]
    first = steps[0][1]
    assert first["f"] == kind and steps[0][0] == 0
    if definition.undo is None or (name in faults.PRESETS and not faults.PRESETS[name].undone):
        assert len(steps) == 1
        return
    (wait, undo), = steps[1:]
    assert wait >= 1 and undo["f"] in definition.undone_by
    # A node fault on a target is undone on every node: the target may have moved.
    if "node" in first and definition.family == "node":
        assert undo.get("node") == (first["node"] if isinstance(first["node"], int) else None)


def _windows(tmp_path, ops):
    """ops: (f, invoke value, ok value or None for fail); one op a second."""
    seconds = iter(range(1000))
    with HistoryWriter(tmp_path / "history.jsonl",
                       clock=lambda: int(next(seconds) * 1e9)) as w:
        ids = []
        for f, asked, resolved in ops:
            op = w.invoke("nemesis", f, asked)
            if resolved is None:
                w.fail(op, "no leader known")
            else:
                w.ok(op, resolved)
            ids.append(op)
    h = load(tmp_path)
    return ids, report_faults.windows(h.fault_ops, h.duration)


def test_windows_follow_the_registry(tmp_path):
    ids, wins = _windows(tmp_path, [
        ("kill", {"f": "kill", "node": "leader"}, {"f": "kill", "node": 2}),
        ("pause", {"f": "pause", "node": 3}, {"f": "pause", "node": 3}),
        ("latency", {"f": "latency", "ms": 200}, {"f": "latency", "ms": 200, "links": ["client-1"]}),
        ("isolate", {"f": "isolate", "node": "leader"}, None),  # failed: opens nothing
        ("resume", {"f": "resume", "node": 1}, {"f": "resume", "node": 1}),  # not n3's pause
        ("restart", {"f": "restart", "node": 1}, {"f": "restart", "node": 1}),  # n1 was up
        ("heal", {"f": "heal"}, {"f": "heal"}),
        ("start", {"f": "start"}, {"f": "start"}),  # every node: ends the kill of n2
        ("wipe", {"f": "wipe", "node": 1}, {"f": "wipe", "node": 1}),
        ("heal", {"f": "heal", "all": True}, {"f": "heal", "all": True}),
    ])
    by_label = {w.label: w for w in wins}
    assert list(by_label) == ["kill n2", "pause n3", "latency 200ms", "restart n1", "wipe n1"]
    assert by_label["kill n2"].closed_by == ids[7] and by_label["kill n2"].category == "node"
    assert by_label["latency 200ms"].closed_by == ids[6]
    assert by_label["latency 200ms"].category == "network"
    assert by_label["restart n1"].point and by_label["restart n1"].closed_by == ids[5]
    assert by_label["pause n3"].closed_by == ids[9] and by_label["wipe n1"].closed_by == ids[9]


def test_docs_name_every_kind():
    plans = (DOCS / "plans.md").read_text()
    assert faults.reference() in plans, "regenerate the fault table in docs/plans.md " \
                                        "from workloads.faults.reference()"
    # docs/history.md names the kinds through that table, and each kind its examples
    # show is one of the registry's.
    history = (DOCS / "history.md").read_text()
    section = history[history.index("Faults are operations"):history.index("## Transactions")]
    assert "fault table in [docs/plans.md](plans.md)" in section
    shown = set(re.findall(r'"f": "(\w+)"', section))
    assert shown and shown <= set(faults.FAULTS) | {faults.REQUEST_EVENT}, shown - set(faults.FAULTS)
    # Kinds that act on something else than the cluster say what they record there.
    client_kinds = {k for k, f in faults.FAULTS.items() if f.family == "client"}
    assert client_kinds and client_kinds <= shown, client_kinds - shown


@pytest.mark.cluster
def test_a_plan_fires_every_kind_with_its_targets_resolved(cluster, tmp_path):
    from onceproof.run.execute import run
    send = {"ops": {"p0": {"f": "send", "n": 2}}}
    steps = [
        {"fault": {"f": "partition", "sides": [["leader"], []]}}, send, {"fault": {"f": "heal"}},
        {"fault": {"f": "isolate", "node": 1}}, {"fault": {"f": "heal"}},
        {"fault": {"f": "latency", "ms": 100, "node": "leader"}}, send,
        {"fault": {"f": "reset_peer", "node": 2, "kinds": ["repl"]}},
        {"fault": {"f": "slicer", "node": 1}}, {"fault": {"f": "bandwidth", "kb_per_s": 512}},
        {"fault": {"f": "cut_clients", "nodes": [3]}}, {"fault": {"f": "heal"}}, send,
        {"fault": {"f": "kill", "node": "leader"}}, send, {"fault": {"f": "start"}},
        {"fault": {"f": "pause", "node": 2}}, {"fault": {"f": "resume", "node": 2}},
        {"fault": {"f": "stop", "node": 3}}, {"fault": {"f": "start", "node": 3}},
        {"fault": {"f": "restart", "node": 1}},
        {"fault": {"f": "wipe", "node": 3}}, {"fault": {"f": "start", "node": 3}}, send,
        {"fault": {"f": "hold_request", "api": "Produce", "release_ms": 2000}}, send,
        {"fault": {"f": "release"}}, {"fault": {"f": "drop_response", "api": "Produce"}}, send,
        {"fault": {"f": "duplicate_request", "api": "Produce"}}, send, {"fault": {"f": "heal"}},
        # Resumed by the step that follows, long before its own resume would fire.
        {"fault": {"f": "pause_client", "client": "p0", "ms": 600000}},
        {"fault": {"f": "resume_client", "client": "p0"}}, send,
    ]
    plan = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
            "steps": steps}
    # Moving nodes between releases needs a cluster of an older release than the
    # session's: tests/test_upgrades.py fires those kinds on one.
    assert {s["fault"]["f"] for s in steps if "fault" in s} | {"heal"} == \
        set(faults.FAULTS) - set(faults.RELEASE_KINDS)
    run(plan, cluster, tmp_path)
    events = read_events(tmp_path / "history.jsonl")
    nemesis = [e for e in events if e["process"] == "nemesis"]
    done = [e for e in nemesis if e["type"] != "invoke" and e["f"] in faults.FAULTS]
    assert [e["type"] for e in done] == ["ok"] * len(done), [(e["f"], e.get("error")) for e in done]
    assert [e["f"] for e in done][:-1] == [s["fault"]["f"] for s in steps if "fault" in s]
    assert done[-1]["value"] == {"f": "heal", "all": True}  # the settle phase
    for e in done:
        value = e["value"]
        assert not any(v == "leader" for v in value.values()), e  # every target resolved
        if "node" in value:
            assert value["node"] in cluster.nodes
    by_f = {e["f"]: e["value"] for e in done}
    leader = by_f["partition"]["sides"][0][0]
    assert leader in cluster.nodes and by_f["partition"]["links"]
    assert all(str(leader) in link.split("-")[1:] for link in by_f["partition"]["links"])
    assert by_f["latency"]["links"] == [f"client-{by_f['latency']['node']}"]
    assert by_f["reset_peer"]["links"] and all(l.startswith("repl-") for l in by_f["reset_peer"]["links"])
    assert by_f["cut_clients"]["links"] == ["client-3"]
    assert by_f["hold_request"]["links"] == ["client-1", "client-2", "client-3"]
    assert by_f["pause_client"]["processes"] == by_f["resume_client"]["processes"] == ["p0"]
    acted = {e["value"]["event"] for e in nemesis if e["f"] == faults.REQUEST_EVENT}
    assert {"hold", "release", "drop_response", "duplicate"} <= acted, acted
    assert not cluster.faults  # the settle phase healed everything


@pytest.mark.cluster
def test_targets_resolve_to_the_nodes_kafka_names(cluster, tmp_path):
    """Each target resolves, when it fires, to the node Kafka itself names for that part:
    the group coordinator the broker reports for the group, the transaction coordinator
    librdkafka finds for the transactional id, the leader of the partition."""
    import logging

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from onceproof.run.clients import RunContext
    from onceproof.run.execute import run
    plan = _targeting()
    refs = ["txn_coordinator:t0", "group_coordinator:c0", "leader:t/1"]
    plan["steps"] = ([{"ops": {"t0": {"f": "begin"}, "c0": {"f": "poll", "timeout": 0.5}}},
                      {"ops": {"t0": {"f": "send", "n": 2}, "c0": {"f": "commit_offsets"}}},
                      {"ops": {"t0": {"f": "commit"}}}]
                     + [s for ref in refs for s in ({"fault": {"f": "latency", "ms": 1, "node": ref}},
                                                    {"fault": {"f": "heal"}})])
    summary = run(plan, cluster, tmp_path)
    names = RunContext(None, cluster.connection(), summary["run_id"], {"t": 2})  # type: ignore[arg-type]
    fired = [e for e in read_events(tmp_path / "history.jsonl")
             if e["process"] == "nemesis" and e["f"] == "latency" and e["type"] != "invoke"]
    assert [e["type"] for e in fired] == ["ok"] * 3, fired
    resolved = dict(zip(refs, (e["value"]["node"] for e in fired)))

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    group = admin.describe_consumer_groups([names.client_group("c0")])[names.client_group("c0")]
    assert resolved["group_coordinator:c0"] == group.result(10).coordinator.id

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    logger = logging.getLogger("onceproof-test-txncoord")
    logger.setLevel(logging.DEBUG)  # librdkafka's debug lines arrive at DEBUG
    logger.addHandler(Keep())
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": names.tid("t0"),
                         "debug": "eos", "logger": logger})
    producer.init_transactions(30)
    producer.poll(0)  # serve the log queue
    # librdkafka names a broker host:port/node-id.
    found = [int(m.group(1)) for line in lines
             if (m := re.search(r"Transaction coordinator changed from \S+ -> [^/\s]+/(\d+)", line))]
    assert found and found[-1] == resolved["txn_coordinator:t0"], lines[-5:]

    assert resolved["leader:t/1"] == cluster.leader(names.topic("t"), 1)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_a_preset_may_hold_for_rounds_of_its_own(data):
    plan = {"topics": {"t": {"partitions": 2}}, "clients": {"t0": {"role": "txn_producer"}}}
    steps = data.draw(faults.drawn("delay_requests_leader", plan=plan))
    assert steps[0][1]["streams"] == ["upstream"] and steps[0][1]["node"].startswith("leader:")
    assert 2 <= steps[1][0] <= 4 and steps[1][1] == {"f": "heal"}
    # A concurrent plan passes its own hold, in seconds, which wins.
    timed = data.draw(faults.drawn("delay_requests_leader", hold=st.just(1), plan=plan))
    assert timed[1][0] == 1
