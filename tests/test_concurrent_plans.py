"""Concurrent plans are data: validated in one line, drawn by Hypothesis within their
bounds, and each client's op stream is a function of its seed."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceproof.workloads.faults import SETS
from onceproof.workloads.ops import ROLES, Seeded, next_op
from onceproof.workloads.plan import PlanError, concurrent, size, validate
from onceproof.workloads.strategies import WORKLOADS, concurrent_plans, deal


def _plan(**changes) -> dict:
    plan = {"topics": {"t": {"partitions": 3}},
            "clients": {"p0": {"role": "producer", "seed": 1}, "w0": {"role": "rw_txn", "seed": 2}},
            "duration": 30, "rate": 100, "mix": {"max_records": 5},
            "schedule": [{"at": 5, "fault": {"f": "pause", "node": "leader"}},
                         {"at": 9, "fault": {"f": "resume"}}, {"at": 12, "crash": "w0"}]}
    plan.update(changes)
    return {k: v for k, v in plan.items() if v is not None}


def test_a_concurrent_plan_validates_and_sizes_by_what_a_shrink_removes():
    plan = _plan()
    validate(plan)
    assert concurrent(plan)
    assert size(plan) == 3 + 2 + 30


@pytest.mark.parametrize("changes,words", [
    ({"duration": 0}, "duration: must be a positive number"),
    ({"duration": "long"}, "duration: must be a positive number"),
    ({"rate": 0}, "rate: must be a positive number"),
    ({"steps": []}, "either \"steps\" (rounds) or \"duration\" (concurrent)"),
    ({"clients": {}}, "at least one client"),
    ({"mix": {"abort_pct": 5}}, "mix.abort_pct: is no mix setting"),
    ({"schedule": [{"at": 31, "fault": {"f": "heal"}}]},
     "schedule[0].at: must be a number of seconds from 0"),
    ({"schedule": [{"at": 3, "crash": "zz"}]}, "schedule[0].crash: names no client"),
    ({"schedule": [{"at": 3, "fault": {"f": "meteor"}}]}, "schedule[0].fault: f must be one of"),
    ({"schedule": [{"at": 3}]}, "schedule[0]: must be"),
    ({"clients": {"x0": {"role": "pipeline", "input": "t"}}}, "needs \"input\" and \"output\""),
    ({"clients": {"c0": {"role": "consumer", "partitions": [3]}}}, "partitions of t (0..2)"),
    ({"clients": {"p0": {"role": "producer", "threads": 0}}}, "threads: must be an integer from 1"),
    ({"clients": {"p0": {"role": "producer", "threads": 17}}}, "threads: must be an integer from 1"),
    ({"clients": {"w0": {"role": "rw_txn", "threads": 2}}}, "only a producer"),
])
def test_a_bad_concurrent_plan_is_one_line_that_names_the_place(changes, words):
    with pytest.raises(PlanError) as caught:
        validate(_plan(**changes))
    message = str(caught.value)
    assert words in message and "\n" not in message and "docs/plans.md" in message


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_clients_op_stream_is_a_function_of_its_seed(role):
    def stream(seed):
        choose, state = Seeded(seed), {}
        return [next_op(role, state, choose, {}) for _ in range(50)]
    assert stream(7) == stream(7)
    ops = stream(7)
    assert {op["f"] for op in ops} <= ROLES[role]
    # A producer's sends and a streams application's observations have nothing to draw
    # (a send's value comes from the run's counter); every other role's stream does.
    if role not in ("producer", "streams"):
        assert stream(7) != stream(8)


def test_a_read_write_transaction_stream_begins_before_it_reads_and_ends_within_bounds():
    choose, state = Seeded(3), {}
    open_ops, seen = None, set()
    for _ in range(500):
        op = next_op("rw_txn", state, choose, {})
        seen.add(op["f"])
        if op["f"] == "begin":
            assert open_ops is None
            open_ops = 0
        elif op["f"] in ("commit", "abort"):
            assert open_ops is not None
            open_ops = None
        else:
            assert open_ops is not None
            open_ops += 1
            assert open_ops <= 4
    assert seen == ROLES["rw_txn"]


def test_copies_of_a_pipeline_share_its_group_and_split_its_input():
    templates = WORKLOADS["pipeline"]["clients"]
    topics = {"in": {"partitions": 6}, "out": {"partitions": 6}}
    clients = deal(templates, 9, topics)
    pipes = {cid: c for cid, c in clients.items() if c["role"] == "pipeline"}
    assert sorted(pipes) == ["x0", "x0_1", "x0_2"]
    assert {c["group"] for c in pipes.values()} == {"x0"}
    owned = sorted(q for c in pipes.values() for q in c["partitions"])
    assert owned == list(range(6))
    with pytest.raises(PlanError, match="raise the partitions"):
        deal(templates, 9, {"in": {"partitions": 2}, "out": {"partitions": 2}})


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_drawn_concurrent_plans_are_valid_and_within_their_bounds(data):
    workload = data.draw(st.sampled_from(sorted(WORKLOADS)))
    low = data.draw(st.integers(5, 40))
    high = data.draw(st.integers(low, 60))
    plan = data.draw(concurrent_plans(workload, faults=SETS["mixed"], duration=(low, high),
                                      interval=5, crash_every=10))
    validate(plan)
    assert low <= plan["duration"] <= high
    assert len(WORKLOADS[workload]["clients"]) <= len(plan["clients"]) <= 9
    assert all(0 <= e["at"] <= plan["duration"] for e in plan["schedule"])
    assert [e["at"] for e in plan["schedule"]] == sorted(e["at"] for e in plan["schedule"])
    assert all(isinstance(c["seed"], int) for c in plan["clients"].values())


def test_every_plan_example_in_the_docs_is_a_valid_plan():
    import json
    import re
    from pathlib import Path
    text = (Path(__file__).parent.parent / "docs" / "plans.md").read_text()
    examples = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]
    assert len(examples) == 2
    for plan in examples:
        validate(plan)
    assert [concurrent(p) for p in examples] == [False, True]


def test_copies_of_a_subscribing_pipeline_share_its_group_and_leave_partitions_to_it():
    templates = {**WORKLOADS["pipeline"]["clients"]}
    templates["x0"] = {**templates["x0"], "pipeline": {"subscribe": True}}
    clients = deal(templates, 9, {"in": {"partitions": 2}, "out": {"partitions": 2}})
    pipes = [c for c in clients.values() if c["role"] == "pipeline"]
    assert len(pipes) == 3 and all(c["group"] == "x0" and "partitions" not in c for c in pipes)


@pytest.mark.parametrize("pipeline,words", [
    ({"subscribe": "yes"}, "pipeline: maps any of"),
    ({"rewind": True}, "pipeline: maps any of"),
    ({"subscribe": True, "partitions": [0]}, "the group's to assign"),
])
def test_a_pipeline_setting_is_checked(pipeline, words):
    partitions = pipeline.pop("partitions", None)
    spec = {"role": "pipeline", "input": "t", "output": "t", "pipeline": pipeline}
    if partitions is not None:
        spec["partitions"] = partitions
    with pytest.raises(PlanError, match=words):
        validate(_plan(clients={"x0": spec}))


def test_a_consumer_commit_carries_metadata_sizes_only_when_its_mix_has_them():
    mix = {"consumer_ops": ["commit_offsets"], "commit_metadata": [0, 5000]}
    ops = [next_op("consumer", {}, Seeded(s), mix) for s in range(20)]
    assert all(len(op["metadata"]) == 2 and set(op["metadata"]) <= {0, 5000} for op in ops)
    assert any(set(op["metadata"]) == {0, 5000} for op in ops)
    plain = next_op("consumer", {}, Seeded(1), {"consumer_ops": ["commit_offsets"]})
    assert plain == {"f": "commit_offsets"}


@pytest.mark.parametrize("sizes", [["big"], [-1], 5000, [True]])
def test_commit_metadata_must_be_sizes_in_bytes(sizes):
    plan = {"topics": {"t": {"partitions": 2}}, "clients": {"c0": {"role": "consumer"}},
            "steps": [{"ops": {"c0": {"f": "commit_offsets", "metadata": sizes}}}]}
    with pytest.raises(PlanError, match="metadata: must be a list of sizes in bytes"):
        validate(plan)
