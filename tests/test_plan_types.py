"""The typed plan (workloads/plan.py Plan): every plan kept in the repository parses and
gives back the very JSON it was parsed from, and the two op vocabularies, the plan's
(workloads/ops.py) and the history's (onceproof.history.format), agree on the names they
share. No cluster."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from onceproof.history import format as history
from onceproof.workloads import ops, strategies
from onceproof.workloads.plan import Plan, PlanError, save, size, validate

ROOT = Path(__file__).parent.parent
KEPT = sorted([*ROOT.glob("tests/counterexamples/*.json"), *ROOT.glob("docs/findings/**/plan*.json")])


def _plan_of(path: Path) -> dict:
    kept = json.loads(path.read_text())
    return kept.get("plan", kept)


def test_there_are_kept_plans_of_both_shapes():
    shapes = {"duration" in _plan_of(p) for p in KEPT}
    assert len(KEPT) >= 20 and shapes == {True, False}


@pytest.mark.parametrize("path", KEPT, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_kept_plan_parses_and_round_trips(path, tmp_path):
    raw = _plan_of(path)
    plan = validate(raw)
    assert isinstance(plan, Plan)
    assert plan.to_dict() == raw
    # The same JSON, key order included, is what save writes.
    assert json.dumps(plan.to_dict()) == json.dumps(raw)
    save(plan, tmp_path / "plan.json")
    assert (tmp_path / "plan.json").read_text() == json.dumps(raw, indent=1)
    # Parsed again from its own JSON, it is the same plan.
    assert Plan.parse(plan.to_dict()) == plan and validate(plan) == plan
    assert plan.size == size(raw)
    assert plan.concurrent == ("duration" in raw)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(plan=strategies.plans(workload="pipeline") | strategies.concurrent_plans(workload="pipeline"))
def test_drawn_plans_round_trip(plan):
    assert validate(plan).to_dict() == plan


def test_attributes_say_what_the_json_says():
    raw = {"topics": {"in": {"partitions": 2}, "out": {"partitions": 3, "replicas": 2}},
           "clients": {"p0": {"role": "producer", "topic": "in", "seed": 7, "threads": 2},
                       "x0": {"role": "pipeline", "input": "in", "output": "out",
                              "group": "g", "pipeline": {"rewind_on_abort": False}},
                       "c0": {"role": "consumer", "topic": "out", "partitions": [0, 2]}},
           "duration": 10, "rate": None, "mix": {"restart_after": 2, "txn_ops": ["send"]},
           "schedule": [{"at": 1, "fault": {"f": "pause", "node": "leader"}},
                        {"crash": "x0", "at": 3}]}
    plan = validate(raw)
    assert plan.concurrent and plan.size == 2 + 3 + 10
    assert plan.partitions == {"in": 2, "out": 3} and plan.topics["out"].replicas == 2
    p0, x0, c0 = plan.clients["p0"], plan.clients["x0"], plan.clients["c0"]
    assert (p0.n_threads, p0.op_seed, p0.group_name) == (2, 7, "p0")
    assert x0.group_name == "g" and x0.transactional and x0.grouped
    assert x0.pipeline_settings == {"offsets_in_txn": True, "rewind_on_abort": False,
                                    "subscribe": False}
    assert plan.read_topic(x0) == "in" and plan.topic_of(x0) == "in"
    assert c0.partitions == (0, 2) and plan.read_topic(c0) == "out"
    assert plan.mix.restart_after == 2 and plan.mix.txn_ops == ("send",)
    assert plan.mix.commit_timeout is None and plan.rate is None
    assert plan.fault_steps == [{"f": "pause", "node": "leader"}]
    assert [(e.at, e.crash) for e in plan.schedule] == [(1, None), (3, "x0")]
    assert plan.to_dict() == raw
    # What to_dict gives is a copy: changing it changes no plan.
    plan.to_dict()["clients"]["p0"]["config"] = {"acks": 1}
    assert plan.clients["p0"].config == {} and plan.to_dict() == raw


def test_a_plan_validate_refuses_is_refused_when_parsed():
    with pytest.raises(PlanError, match="role must be one of"):
        Plan.parse({"topics": {"t": {"partitions": 1}}, "clients": {"a": {"role": "x"}},
                    "steps": []})


def test_plan_ops_and_history_op_kinds_share_their_common_names():
    """onceproof.workloads may import nothing of onceproof, and onceproof.history nothing
    of it: each names its own vocabulary, and a name in both (a plan op that records a
    history op of its name, the streams role whose final op is a streams op) is the same
    constant, of the same value, in each."""
    plan_names = set(ops.ROLES) | set().union(*ops.ROLES.values())
    shared = plan_names & set(history.OP_KINDS)
    assert {"send", "poll", "seek", "commit_offsets", "fetch_offsets", "streams"} <= shared

    def constants(module) -> dict[str, str]:
        return {name: value for name, value in vars(module).items()
                if name.isupper() and isinstance(value, str) and value in shared}
    assert constants(ops) == constants(history)
    assert set(constants(ops).values()) == shared
    assert len(set(history.OP_KINDS)) == len(history.OP_KINDS)
