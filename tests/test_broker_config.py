"""A plan's broker settings reach the real brokers, the history and the report, and the
next plan without them gets the harness's settings back."""
from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import ConfigResource

from onceproof.cluster.cluster import status
from onceproof.errors import SetupError
from onceproof.history.format import CLUSTER, NEMESIS
from onceproof.report.page import write_report
from onceproof.run import execute
from onceproof.trial import run_trial

pytestmark = pytest.mark.cluster

PLAN = {"topics": {"t": {"partitions": 1, "replicas": 2,
                         "config": {"min.insync.replicas": 2, "max.message.bytes": 500000}}},
        "clients": {"p0": {"role": "producer"}},
        "steps": [{"ops": {"p0": {"f": "send", "n": 2}}}]}


def _broker_setting(cluster, key: str) -> str:
    admin = cluster.admin()  # held: a handle collected mid-request fails it
    resource = ConfigResource(ConfigResource.Type.BROKER, str(cluster.nodes[0]))
    return admin.describe_configs([resource])[resource].result(15)[key].value


def _cluster_op(folder) -> dict:
    for line in (folder / "history.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["process"] == NEMESIS and event["f"] == CLUSTER and event["type"] == "ok":
            return event["value"]
    raise AssertionError("the history records no cluster op")


def test_a_plan_runs_on_brokers_with_its_settings_then_the_next_gets_the_defaults(
        cluster, tmp_path):
    plan = {**PLAN, "broker": {"log.flush.interval.messages": 7,
                               "unclean.leader.election.enable": True}}
    trial = run_trial(plan, cluster, tmp_path / "with")
    assert trial.exercised["acknowledged_writes"] == 2
    assert _broker_setting(cluster, "log.flush.interval.messages") == "7"
    assert _broker_setting(cluster, "unclean.leader.election.enable") == "true"
    recorded = _cluster_op(tmp_path / "with")
    assert recorded["broker"] == {"log.flush.interval.messages": "7",
                                  "unclean.leader.election.enable": "true"}
    assert recorded["kafka_version"] == cluster.dist.version
    assert status(cluster.root)["broker"] == recorded["broker"]
    admin = cluster.admin()
    # The new settings started the cluster over, so the run's topic is its only one.
    [topic] = [t for t in admin.list_topics(timeout=10).topics
               if t.startswith("onceproof-") and t.endswith("-t")]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(15)
    assert entries["max.message.bytes"].value == "500000"
    replicas = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas
    assert len(replicas) == 2
    page = write_report(tmp_path / "with").read_text()
    assert "broker settings" in page and "log.flush.interval.messages=7" in page

    trial = run_trial(PLAN, cluster, tmp_path / "without")
    assert trial.exercised["acknowledged_writes"] == 2
    assert _broker_setting(cluster, "unclean.leader.election.enable") == "false"
    assert _cluster_op(tmp_path / "without")["broker"] == {}


def test_a_setting_kafka_refuses_is_one_line_naming_it(cluster):
    try:
        with pytest.raises(SetupError) as caught:
            cluster.configure({"min.insync.replicas": "many"}, timeout=90)
        assert "\n" not in str(caught.value) and "min.insync.replicas" in str(caught.value)
    finally:
        cluster.configure({})


def _lagging_leader_dies(broker: dict, how: str = "kill") -> dict:
    """Both followers fall behind on replication, writes are acknowledged by the leader
    alone (min.insync.replicas=1), then the leader is killed (or wiped) while they lag."""
    return {"topics": {"t": {"partitions": 1}}, "broker": {"min.insync.replicas": 1, **broker},
            "clients": {"p0": {"role": "producer"}, "c0": {"role": "consumer"}},
            "steps": [
                {"fault": {"f": "latency", "ms": 6000, "node": "leader:t/0", "kinds": ["repl"]}},
                {"ops": {"p0": {"f": "send", "n": 3}}},
                {"ops": {"p0": {"f": "send", "n": 2}}},
                {"fault": {"f": how, "node": "leader:t/0"}},
                {"ops": {"p0": {"f": "send", "n": 2}, "c0": {"f": "poll"}}},
                {"fault": {"f": "heal"}},
                {"fault": {"f": "start"}},
                {"ops": {"p0": {"f": "send", "n": 1}, "c0": {"f": "poll"}}}]}


def test_unclean_election_loses_what_only_the_dead_leader_had_and_clean_waits_for_it(
        cluster, tmp_path):
    # The same faults on the same settings but one: the broker config alone decides.
    clean = run_trial(_lagging_leader_dies({}), cluster, tmp_path / "clean")
    assert clean.exercised["acknowledged_writes"] > 0
    assert clean.verdict.valid, clean.verdict.counts
    unclean = run_trial(_lagging_leader_dies({"unclean.leader.election.enable": True}),
                        cluster, tmp_path / "unclean")
    assert unclean.exercised["acknowledged_writes"] > 0
    assert {"lost_write", "unseen"} & set(unclean.verdict.counts), unclean.verdict.counts


# The controller's periodic leader adjustment (leader.imbalance.check.interval.seconds,
# 300 s by default) is what elects a partition's last known leader once it is back, even
# with unclean election off (KIP-966 as built: "elect the last known leader"). How often
# it runs decides which outcome a run sees, so each test fixes it.
RARE_CHECKS = {"leader.imbalance.check.interval.seconds": 3600}


def _kept_offline(trial) -> bool:
    v = trial.verdict
    return v.valid and not v.live and v.stalls == ["unrecovered_partition"]


def _lost_to_the_empty_leader(trial) -> bool:
    return bool({"lost_write", "unseen"} & set(trial.verdict.counts))


def test_a_partition_the_cluster_keeps_offline_is_unrecovered_not_valid(cluster, tmp_path,
                                                                         monkeypatch):
    # The only in-sync replica loses its disk. With eligible leader replicas (KIP-966,
    # on by default for new clusters from Kafka 4.1) the controller elects no follower
    # that lags, with unclean election off, and mostly the wiped node neither until its
    # periodic check: the partition has no leader to the end. At times Kafka elects the
    # wiped node, its last known leader, as soon as it is back (docs/findings.md, "Every
    # node killed, and no leader until the periodic check"; one CI run of about ten), and
    # the writes only it had are lost. Each run must be judged as one of the two; up to
    # four runs for one that keeps the partition offline. Shorter waits than a run's: the
    # outcome is the same.
    if cluster.dist.release < (4, 1):
        pytest.skip("needs eligible leader replicas (KIP-966), on by default from Kafka 4.1")
    monkeypatch.setattr(execute, "SETTLE_TIMEOUT", 15.0)
    monkeypatch.setattr(execute, "FINAL_READ_TIMEOUT", 15.0)
    seen = []
    for attempt in range(4):
        trial = run_trial(_lagging_leader_dies(RARE_CHECKS, how="wipe"), cluster,
                          tmp_path / f"wiped-{attempt}")
        assert trial.exercised["acknowledged_writes"] > 0
        assert _kept_offline(trial) or _lost_to_the_empty_leader(trial), trial.verdict.summary()
        seen.append(trial.verdict.summary())
        if _kept_offline(trial):
            break
    assert _kept_offline(trial), seen


# That the same faults with the periodic check inside the run (every 10 s) elect the wiped
# node back, empty, and lose what it had acknowledged is the known-bad suite
# min_insync_1_disk_loss (workloads/suites.py), whose kept counterexample, on those broker
# settings, tests/test_suites.py replays.
