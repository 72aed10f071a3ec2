"""Upgrades under load: the release and feature faults' rules, where `--upgrade-to` puts
them in a plan, and on a real cluster a rolling 3.9.2 -> 4.4.0 upgrade and the
finalization of transaction.version=2 while a transactional producer commits."""
from __future__ import annotations

import pytest

from onceproof.history.format import COMMIT_TXN
from onceproof.history.read import read_events
from onceproof.workloads import faults
from onceproof.workloads.plan import validate
from onceproof.workloads.upgrades import release_steps, with_release_change

NODES = [1, 2, 3]


def _up(to: str, **more) -> dict:
    return {"f": "upgrade", "to": to, **more}


def test_a_release_change_goes_the_way_its_kind_says():
    assert faults.release_problem([_up("4.4.0")], "3.9.2", NODES) is None
    assert "is a downgrade" in faults.release_problem([_up("3.8.1")], "3.9.2", NODES)
    assert "is an upgrade" in faults.release_problem(
        [{"f": "downgrade", "to": "4.4.0"}], "3.9.2", NODES)
    # Node by node: the second upgrade of node 1 starts from where the first left it.
    assert "node 1 runs 4.4.0" in faults.release_problem(
        [_up("4.4.0", node=1), _up("4.0.2", node=1)], "3.9.2", NODES)
    assert faults.release_problem([_up("4.4.0", node=1), _up("4.0.2", node=2)], "3.9.2", NODES) is None


def test_a_finalize_waits_for_every_node_and_a_downgrade_must_know_what_was_finalized():
    tv2 = {"f": "finalize", "feature": "transaction.version", "level": 2}
    assert "needs every node on 4.0.0" in faults.release_problem([tv2], "3.9.2", NODES)
    assert "a node runs 3.9.2" in faults.release_problem([_up("4.4.0", node=1), tv2], "3.9.2", NODES)
    assert faults.release_problem([_up("4.4.0"), tv2], "3.9.2", NODES) is None
    back = {"f": "downgrade", "to": "3.9.2"}
    assert "does not know transaction.version=2" in faults.release_problem(
        [_up("4.4.0"), tv2, back], "3.9.2", NODES)
    assert faults.release_problem([_up("4.4.0"), back], "3.9.2", NODES) is None


def test_release_steps_are_checked_in_one_line():
    for step, words in [({"f": "upgrade", "to": "4.4"}, "upgrade's to must be"),
                        ({"f": "finalize", "feature": "metadata.version", "level": 2},
                         "metadata.version takes a release's metadata version"),
                        ({"f": "finalize", "feature": "transaction.version", "level": "two"},
                         "takes a level"),
                        ({"f": "downgrade"}, "downgrade needs to")]:
        problem = faults.problem(step)
        assert problem and words in problem and "\n" not in problem, problem


def test_an_upgrade_spreads_over_the_run_and_finalizes_after_the_last_node():
    steps = release_steps(3, "4.4.0", {"transaction.version": 2})
    assert [s["f"] for s in steps] == ["upgrade"] * 3 + ["finalize"]
    assert [s.get("node") for s in steps[:3]] == NODES
    concurrent = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
                  "duration": 50, "schedule": [{"at": 12, "fault": {"f": "kill", "node": 2}}]}
    out = with_release_change(concurrent, 3, "4.4.0", {"transaction.version": 2})
    validate(out)
    assert [e["at"] for e in out["schedule"]] == [10, 12, 20, 30, 40]
    assert [e["fault"]["f"] for e in out["schedule"]][-1] == "finalize"
    assert concurrent["schedule"] == [{"at": 12, "fault": {"f": "kill", "node": 2}}]  # a copy
    send = {"ops": {"p0": {"f": "send", "n": 1}}}
    rounds = {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
              "steps": [send] * 8}
    out = with_release_change(rounds, 3, "4.4.0", {})
    validate(out)
    kinds = ["ops" if "ops" in s else s["fault"]["f"] for s in out["steps"]]
    assert kinds == ["ops"] * 2 + ["upgrade"] + ["ops"] * 2 + ["upgrade"] + ["ops"] * 2 + \
        ["upgrade"] + ["ops"] * 2


@pytest.mark.cluster
def test_a_rolling_upgrade_and_v2_finalized_under_transactions(tmp_path):
    from onceproof.checkers.verdict import check
    from onceproof.cluster.cluster import Cluster
    from onceproof.run.execute import run

    def txn(n: int) -> list[dict]:
        return [{"ops": {"t0": {"f": "begin"}}}, {"ops": {"t0": {"f": "send", "n": n}}},
                {"ops": {"t0": {"f": "commit"}, "c0": {"f": "poll", "timeout": 0.5}}}]
    steps = txn(2)
    for node in NODES:
        steps += [{"fault": {"f": "upgrade", "node": node, "to": "4.4.0"}}, *txn(2)]
    steps += [{"fault": {"f": "finalize", "feature": "transaction.version", "level": 2}}, *txn(2)]
    plan = {"topics": {"t": {"partitions": 3}},
            "clients": {"t0": {"role": "txn_producer"}, "c0": {"role": "consumer"}},
            "steps": steps}
    with Cluster(tmp_path / "cluster", 3, "3.9.2") as cluster:
        run(plan, cluster, tmp_path / "run")
        releases = cluster.releases()
        features = cluster.described_features()
        logs = {n: (cluster.node_dir(n) / "server.log").read_text(errors="replace") for n in NODES}
    events = read_events(tmp_path / "run" / "history.jsonl")
    done = [e for e in events if e["process"] == "nemesis" and e["type"] != "invoke"
            and e["f"] in faults.RELEASE_KINDS]
    assert [(e["f"], e["type"]) for e in done] == [("upgrade", "ok")] * 3 + [("finalize", "ok")], done
    assert done[2]["value"]["releases"] == {"1": "4.4.0", "2": "4.4.0", "3": "4.4.0"}
    assert done[3]["value"]["features"]["transaction.version"] == 2
    # Really so: each node's own log names the release it started on last, and Kafka's
    # admin API says the level is finalized.
    assert releases == dict.fromkeys(NODES, "4.4.0")
    for node, log in logs.items():
        assert "Kafka version: 3.9.2" in log and log.rindex("Kafka version: 4.4.0") > \
            log.rindex("Kafka version: 3.9.2"), node
    assert features["transaction.version"]["finalized"] == 2
    commits = [e for e in events if e["process"] == "t0" and e["f"] == COMMIT_TXN and e["type"] == "ok"]
    assert len(commits) == 5, "a transaction committed before, between each upgrade and after"
    verdict = check(tmp_path / "run" / "history.jsonl")
    assert verdict.valid, verdict.counts


@pytest.mark.parametrize("args, words", [
    (["--kafka-version", "4.4.0", "--upgrade-to", "3.9.2"], "is a downgrade"),
    (["--kafka-version", "3.9.2", "--finalize", "transaction.version=2"],
     "finalize transaction.version=2 needs every node on 4.0.0"),
    (["--finalize", "transaction.version"], "--finalize takes FEATURE=LEVEL"),
    (["--upgrade-to", "4.4"], "upgrade's to must be a Kafka release"),
])
def test_run_refuses_an_upgrade_it_cannot_do_in_one_line_before_starting(args, words, tmp_path):
    from click.testing import CliRunner

    from onceproof.cli import main
    result = CliRunner().invoke(main, ["run", "--out", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.output
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


@pytest.mark.parametrize("arg, words", [("4.4.0:3.9.2", "is a downgrade"),
                                        ("3.9:4.4.0", "--upgrade takes FROM:TO"),
                                        ("4.4.0", "--upgrade takes FROM:TO")])
def test_versions_refuses_an_upgrade_path_it_cannot_run_in_one_line(arg, words, tmp_path):
    from click.testing import CliRunner

    from onceproof.cli import main
    result = CliRunner().invoke(main, ["versions", "--out", str(tmp_path), "--upgrade", arg])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.output
    assert not any(tmp_path.iterdir())


def test_the_version_matrix_has_a_row_per_upgrade_path(tmp_path, monkeypatch):
    # Each upgrade row is a run that starts on the path's first release and moves every
    # node to its second, then finalizes transaction.version=2, long enough for both;
    # the release rows stay as they were. (The run itself is run_job's, tested apart.)
    from rich.console import Console

    from onceproof import versions
    from onceproof.run_job import JobOptions
    ran: list[JobOptions] = []
    monkeypatch.setattr(versions, "run_job", lambda job, console: ran.append(job) or 0)
    rows = versions.matrix(("4.4.0",), JobOptions(out=str(tmp_path), duration=30),
                           Console(file=None, quiet=True), versions.UPGRADES)
    assert versions.UPGRADES == (("3.9.2", "4.4.0"), ("4.3.1", "4.4.0"))
    assert [r.version for r in rows] == ["4.4.0", "3.9.2 -> 4.4.0", "4.3.1 -> 4.4.0"]
    assert [r.outcome for r in rows] == ["valid"] * 3
    plain, *upgrades = ran
    assert (plain.kafka_version, plain.upgrade_to, plain.finalize, plain.duration) == (
        "4.4.0", None, {}, 30)
    for job, (start, to) in zip(upgrades, versions.UPGRADES):
        assert (job.kafka_version, job.upgrade_to, job.finalize) == (
            start, to, {"transaction.version": 2})
        assert job.duration >= versions.UPGRADE_SECONDS
        assert job.release_change()[-1] == {"f": "finalize", "feature": "transaction.version",
                                            "level": 2}
    assert "3.9.2 -> 4.4.0" in versions.markdown(rows)
