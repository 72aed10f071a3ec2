"""Broker settings a user brings (workloads/settings.py): from a plan's `broker`
and `topics.<name>.config`, from --broker-config and from a server.properties file, each
checked with one line that says what to change."""
from __future__ import annotations

import pytest

from onceproof.cluster.topology import Topology
from onceproof.workloads.plan import PlanError, validate
from onceproof.workloads.settings import OWNED_SETTINGS, SettingsError, parse, settings_problem


def _plan(**extra) -> dict:
    return {"topics": {"t": {"partitions": 1}}, "clients": {"p0": {"role": "producer"}},
            "steps": [], **extra}


def test_a_properties_file_is_read_as_java_reads_it(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# a comment\n! another\n\nmin.insync.replicas=1\n"
                    "unclean.leader.election.enable : true\nlog.flush.interval.messages 1\n"
                    "log.cleanup.policy=delete,\\\n    compact\n")
    assert parse((), path) == {"min.insync.replicas": "1",
                               "unclean.leader.election.enable": "true",
                               "log.flush.interval.messages": "1",
                               "log.cleanup.policy": "delete,compact"}


def test_pairs_win_over_the_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("min.insync.replicas=1\n")
    assert parse(("min.insync.replicas=2", "x.y=a=b"), path) == {
        "min.insync.replicas": "2", "x.y": "a=b"}


def test_settings_the_harness_owns_are_refused_by_name(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("node.id=1\nlisteners=PLAINTEXT://:9092\nlog.dirs=/var/kafka\n"
                    "listener.name.internal.ssl.keystore.location=/k\nnum.io.threads=8\n")
    with pytest.raises(SettingsError) as caught:
        parse((), path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    for key in ("node.id", "listeners", "log.dirs", "listener.name.internal.ssl.keystore.location"):
        assert key in message
    assert "num.io.threads" not in message


def test_every_owned_setting_is_one_the_harness_really_sets():
    props = Topology.allocate(3).server_properties(1, "/data")
    # The harness owns what it writes to wire a node in; a few it leaves unset on
    # purpose (broker.id, log.dir, ...) are owned because they would override those.
    assert {"process.roles", "node.id", "listeners", "advertised.listeners",
            "controller.quorum.voters", "log.dirs"} <= set(props) & OWNED_SETTINGS


@pytest.mark.parametrize("pair, words", [
    ("min.insync.replicas", "KEY=VALUE"),
    ("=2", "KEY=VALUE"),
    ("Min.Insync=2", "not a Kafka setting name"),
])
def test_a_bad_pair_says_how_to_write_one(pair, words):
    with pytest.raises(SettingsError, match=words):
        parse((pair,))


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(SettingsError, match=r"cannot read broker config file .*nothing\.properties"):
        parse((), tmp_path / "nothing.properties")


@pytest.mark.parametrize("settings, words", [
    ({"min.insync.replicas": [1]}, "min.insync.replicas must be a string, a number or true/false"),
    ([("a", 1)], "must map Kafka setting names"),
    ({"": 1}, "not a Kafka setting name"),
])
def test_settings_maps_are_checked(settings, words):
    assert words in settings_problem(settings)


def test_a_plan_broker_section_is_validated():
    validate(_plan(broker={"min.insync.replicas": 1, "unclean.leader.election.enable": True}))
    with pytest.raises(PlanError, match=r"^plan broker: the harness sets controller\.quorum"
                                        r"\.voters itself .*; remove it"):
        validate(_plan(broker={"controller.quorum.voters": "1@x:1"}))
    with pytest.raises(PlanError, match=r"^plan broker: must map"):
        validate(_plan(broker="min.insync.replicas=1"))


def test_topic_configs_and_replicas_are_validated():
    validate(_plan(topics={"t": {"partitions": 1, "replicas": 2,
                                 "config": {"min.insync.replicas": 1}}}))
    with pytest.raises(PlanError, match=r"^plan topics\.t\.config: x must be a string"):
        validate(_plan(topics={"t": {"partitions": 1, "config": {"x": None}}}))
    with pytest.raises(PlanError, match=r"^plan topics\.t\.replicas: must be a positive integer"):
        validate(_plan(topics={"t": {"partitions": 1, "replicas": 0}}))
    # A topic config is not the broker's: topics may set what brokers may not, and
    # the broker validates it when the topic is created.
    validate(_plan(topics={"t": {"partitions": 1, "config": {"cleanup.policy": "compact"}}}))
