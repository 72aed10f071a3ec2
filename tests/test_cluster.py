"""Proofs that the topology does what it claims: nothing bypasses a proxy, a partition cuts
both directions, and each toxic has an effect a client can observe.

Effects are observed as outcomes (a request that succeeded now fails, data that should not
have moved did not), never as durations.
"""
from __future__ import annotations

import socket
import time
import uuid

import psutil
import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from onceproof.cli import main
from onceproof.cluster.cluster import status

pytestmark = pytest.mark.cluster

QUIET = {"log_level": 0, "log.connection.close": False}


def _until(predicate, timeout: float = 60.0, step: float = 0.5):
    """Poll predicate until it returns a truthy value; return it (or the last falsy one)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def _topic(cluster, replicas: list[int]) -> str:
    """A fresh one-partition topic whose preferred leader is replicas[0]."""
    name = f"t-{uuid.uuid4().hex[:8]}"

    def create() -> bool:
        # Right after a node fault a client may still wait on the dead node as the
        # controller its metadata names (and time out): a fresh client asks again.
        admin = cluster.admin()  # held until the result: a dropped client cancels it
        try:
            admin.create_topics(
                [NewTopic(name, num_partitions=1, replica_assignment=[replicas])])[name].result(30)
        except KafkaException as exc:
            return exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
        return True

    assert _until(create, 90), f"could not create topic {name}"
    admin = cluster.admin()
    _until(lambda: (p := _partition(admin, name)) and len(p.isrs) == len(replicas))
    return name


def _partition(admin: AdminClient, topic: str):
    try:
        return admin.list_topics(topic, timeout=5).topics[topic].partitions.get(0)
    except KafkaException:
        return None


def _bootstrap(cluster, nodes) -> str:
    return ",".join(f"127.0.0.1:{cluster.topology.link('client', 0, n).listen}" for n in nodes)


def _produce(bootstrap: str, topic: str, values: list[bytes], timeout_ms: int = 20000) -> list:
    """Send values with acks=all; return the per-message errors (None for acked)."""
    results = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": timeout_ms,
                         **QUIET})
    for value in values:
        producer.produce(topic, value, callback=lambda err, msg: results.append(err))
    producer.flush(timeout_ms / 1000 + 10)
    return results


def _log_bytes(cluster, node: int, topic: str) -> int:
    part_dir = cluster.node_dir(node) / "data" / f"{topic}-0"
    return sum(f.stat().st_size for f in part_dir.glob("*.log"))


def test_clients_see_only_proxy_addresses(cluster):
    advertised = {(b.host, b.port) for b in cluster.admin().list_topics(timeout=10).brokers.values()}
    proxies = {("127.0.0.1", cluster.topology.link("client", 0, n).listen) for n in cluster.topology.nodes}
    assert advertised == proxies


def test_every_proxy_disabled_no_client_reaches_any_broker(cluster):
    cluster.disable(cluster.links())
    assert cluster.faults == [{"effect": "disabled", "links": sorted(cluster.links())}]
    # `onceproof cluster status` shows what is in force, from state.json.
    assert status(cluster.root)["faults"] == cluster.faults
    shown = CliRunner().invoke(main, ["cluster", "status", "--dir", str(cluster.root)]).output
    assert "In force: links disabled: client-1" in shown
    with pytest.raises(KafkaException):
        cluster.admin().list_topics(timeout=3)
    for n in cluster.topology.nodes:
        with socket.socket() as s:
            s.settimeout(2)
            assert s.connect_ex(("127.0.0.1", cluster.topology.link("client", 0, n).listen)) != 0
    cluster.heal()
    assert len(cluster.admin().list_topics(timeout=10).brokers) == cluster.n


def test_partition_cuts_both_directions_and_majority_goes_on(cluster):
    nodes = cluster.topology.nodes
    isolated, majority = nodes[0], nodes[1:]
    led_by_isolated = _topic(cluster, [isolated, *majority])
    led_by_majority = _topic(cluster, [majority[0], isolated, *majority[1:]])
    assert _produce(cluster.bootstrap, led_by_isolated, [b"before"]) == [None]

    cluster.disable(cluster.links_crossing([[isolated], majority]))

    # The majority moves leadership away and drops the isolated node from the ISR.
    # A fresh client per look: librdkafka may keep asking the isolated broker, whose own
    # view of the partition is stale by design.
    def moved():
        fresh = AdminClient({"bootstrap.servers": _bootstrap(cluster, majority), **QUIET})
        p = _partition(fresh, led_by_isolated)
        return p if p and p.leader in majority and isolated not in p.isrs else None
    part = _until(moved, timeout=90)
    assert part, "the majority never took leadership from the isolated node"

    # Writes to the majority still get acks=all; none of them reaches the isolated node.
    before = _log_bytes(cluster, isolated, led_by_majority), _log_bytes(cluster, isolated, led_by_isolated)
    values = [f"v{i}".encode() for i in range(20)]
    assert _produce(_bootstrap(cluster, majority), led_by_majority, values) == [None] * 20
    assert _produce(_bootstrap(cluster, majority), led_by_isolated, values) == [None] * 20
    after = _log_bytes(cluster, isolated, led_by_majority), _log_bytes(cluster, isolated, led_by_isolated)
    assert after == before

    # The other direction: a client that can reach only the isolated node gets no acks=all
    # write accepted, because the isolated node cannot replicate to anyone.
    cluster.disable([name for n in majority for name in cluster.links(n, ("client",))])
    errors = _produce(_bootstrap(cluster, [isolated]), led_by_isolated, [b"lonely"], timeout_ms=8000)
    assert errors[0] is not None

    cluster.heal()
    rejoined = _until(lambda: all(
        (p := _partition(cluster.admin(), t)) and len(p.isrs) == len(nodes)
        for t in (led_by_isolated, led_by_majority)), timeout=120)
    assert rejoined, "the isolated node never rejoined the ISR after heal"


def test_latency_makes_a_short_request_time_out(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    admin.list_topics(timeout=10)
    cluster.toxic("latency", cluster.links(kinds=("client",)), {"latency": 3000})
    fresh = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    with pytest.raises(KafkaException):
        fresh.list_topics(timeout=1)
    cluster.heal()
    assert fresh.list_topics(timeout=10).brokers


def test_reset_peer_breaks_connections(cluster):
    topic = _topic(cluster, cluster.topology.nodes)
    cluster.toxic("reset_peer", cluster.links(kinds=("client",)), {"timeout": 0}, ("upstream",))
    errors = _produce(cluster.bootstrap, topic, [b"x"], timeout_ms=5000)
    assert errors[0] is not None
    cluster.heal()
    assert _produce(cluster.bootstrap, topic, [b"y"]) == [None]


def test_bandwidth_limit_stops_a_large_write(cluster):
    topic = _topic(cluster, cluster.topology.nodes)
    big = b"x" * 400_000
    cluster.toxic("bandwidth", cluster.links(kinds=("client",)), {"rate": 2})
    errors = _produce(cluster.bootstrap, topic, [big], timeout_ms=6000)
    assert errors[0] is not None
    cluster.heal()
    assert _produce(cluster.bootstrap, topic, [big]) == [None]


def test_slicer_keeps_data_intact(cluster):
    from confluent_kafka import Consumer
    topic = _topic(cluster, cluster.topology.nodes)
    cluster.toxic("slicer", cluster.links(kinds=("client",)),
                  {"average_size": 16, "size_variation": 8, "delay": 100}, ("downstream",))
    proxies = cluster.toxi.proxies()
    assert all(any(t["type"] == "slicer" for t in proxies[f"client-{n}"]["toxics"])
               for n in cluster.topology.nodes)
    values = [f"sliced-{i}".encode() * 50 for i in range(10)]
    assert _produce(cluster.bootstrap, topic, values) == [None] * 10
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest", **QUIET})
    consumer.subscribe([topic])
    got = []
    _until(lambda: got.extend(m.value() for m in consumer.consume(10, 1) if not m.error())
           or len(got) >= 10, timeout=60, step=0)
    consumer.close()
    assert got == values


def test_kill_and_restart_a_node(cluster):
    victim = cluster.topology.nodes[-1]
    cluster.kill(victim)
    from onceproof.cluster import procs
    assert not procs.alive(cluster.pids[f"node{victim}"])
    topic = _topic(cluster, [n for n in cluster.topology.nodes if n != victim])
    assert _produce(cluster.bootstrap, topic, [b"while-down"]) == [None]
    cluster.heal_all()
    assert procs.alive(cluster.pids[f"node{victim}"])
    assert len(cluster.admin().list_topics(timeout=10).brokers) == cluster.n


def test_healing_right_after_a_kill_waits_for_the_node_itself(cluster):
    # Within its session timeout a killed node is still registered, and a topic created
    # then lists it in its ISR: ready must mean the restarted node answers.
    from onceproof.cluster.cluster import _answers_api_versions
    victim = cluster.topology.nodes[-1]
    cluster.kill(victim)
    cluster.heal_all()
    assert _answers_api_versions(cluster.topology.link("client", 0, victim).listen)
    assert all(len(cluster.admin().list_topics(timeout=10).brokers) == cluster.n
               for _ in range(5))


def test_healing_a_restart_allows_for_the_controllers_periodic_election(cluster, monkeypatch):
    # A partition whose every replica was killed may get its last known leader only at
    # the controller's periodic check (docs/findings.md, "Every node killed, and no
    # leader until the periodic check"): a heal that starts nodes waits that long before
    # it calls the cluster not ready; one that starts none does not.
    waits = []
    wait_ready = cluster.wait_ready
    monkeypatch.setattr(cluster, "wait_ready", lambda timeout: (waits.append(timeout),
                                                                wait_ready(timeout)))
    cluster.kill(cluster.topology.nodes[-1])
    cluster.heal_all()
    cluster.disable(cluster.links(cluster.topology.nodes[0], ("client",)))
    cluster.heal_all()
    interval = float(cluster.overrides.get("leader.imbalance.check.interval.seconds", 300))
    assert waits == [max(180, interval + 60), 180]


def test_pause_and_resume_a_node(cluster):
    from onceproof.cluster import procs
    victim = cluster.topology.nodes[0]
    cluster.pause(victim)
    assert procs.paused(cluster.pids[f"node{victim}"])
    assert cluster.faults == [{"effect": "paused", "node": victim}]
    cluster.resume(victim)
    assert not procs.paused(cluster.pids[f"node{victim}"])
    assert not cluster.faults


def test_toxiproxy_dying_is_survived_with_faults_reapplied(cluster):
    from onceproof.cluster import procs
    events = []
    cluster.on_event = lambda f, value: events.append(f)
    try:
        cluster.disable(cluster.links_crossing([[1], [2, 3]]))
        procs.kill(cluster.pids["toxiproxy"])
        cluster.toxic("latency", ["client-1"], {"latency": 10})
    finally:
        cluster.on_event = None
    assert events == ["toxiproxy_restart"]
    proxies = cluster.toxi.proxies()
    assert not proxies["repl-1-2"]["enabled"] and not proxies["ctl-3-1"]["enabled"]
    assert proxies["repl-2-3"]["enabled"]
    assert {t["type"] for t in proxies["client-1"]["toxics"]} == {"latency"}
    cluster.heal()
    assert all(p["enabled"] and not p["toxics"] for p in cluster.toxi.proxies().values())


def test_a_hung_toxiproxy_is_replaced_and_the_heal_goes_through(cluster, monkeypatch):
    import os
    import signal

    from onceproof.cluster.toxi import StrictAPI
    monkeypatch.setattr(StrictAPI, "timeout", 2.0)
    events = []
    cluster.on_event = lambda f, value: events.append(f)
    hung = cluster.pids["toxiproxy"]
    try:
        cluster.toxic("latency", ["client-2"], {"latency": 10})
        os.kill(hung, signal.SIGSTOP)  # alive, and answers nothing
        cluster.heal()
    finally:
        cluster.on_event = None
        if psutil.pid_exists(hung):
            os.kill(hung, signal.SIGKILL)
    assert events == ["toxiproxy_restart"] and cluster.pids["toxiproxy"] != hung
    assert all(p["enabled"] and not p["toxics"] for p in cluster.toxi.proxies().values())


def test_wiped_node_comes_back_empty_and_catches_up(cluster):
    # The KRaft leader is the hard case: a peer that still follows it when it starts on
    # its empty disk makes Kafka stop it ("... inconsistent with current leader").
    # An earlier test may leave an election under way: wait until node 1 knows a leader.
    assert _until(lambda: cluster.quorum_leader(cluster.topology.nodes[0]) is not None,
                  timeout=60)
    victim = cluster.quorum_leader(cluster.topology.nodes[0])
    assert victim in cluster.topology.nodes
    topic = _topic(cluster, cluster.topology.nodes)
    assert _produce(cluster.bootstrap, topic, [b"kept"]) == [None]
    cluster.wipe(victim)
    assert not (cluster.node_dir(victim) / "data" / f"{topic}-0").exists()
    assert cluster.quorum_state(victim) is None
    cluster.start(victim)  # on its empty disk, once no running peer follows it
    assert all(cluster.quorum_leader(peer) != victim for peer in cluster.topology.nodes
               if peer != victim)
    cluster.heal_all()
    # The ISR may never have dropped the victim (a kill and restart can beat the broker
    # session timeout), so a full ISR alone proves nothing: the copied bytes do.
    copied = _until(lambda: _log_bytes(cluster, victim, topic) > 0, timeout=120)
    assert copied, "the wiped node never copied the partition back"
    rejoined = _until(lambda: (p := _partition(cluster.admin(), topic)) and len(p.isrs) == cluster.n,
                      timeout=120)
    assert rejoined, "the wiped node never rejoined the ISR"


def test_a_wiped_leader_comes_back_when_every_node_was_down(cluster):
    # Its peers start first and elect another leader: started before them, the wiped
    # node would hear from them that it led the epoch its disk forgot.
    assert _until(lambda: cluster.quorum_leader(cluster.topology.nodes[0]) is not None,
                  timeout=60)
    victim = cluster.quorum_leader(cluster.topology.nodes[0])
    for node in cluster.topology.nodes:
        if node != victim:
            cluster.kill(node)
    cluster.wipe(victim)
    cluster.heal_all()  # raises if a node exits while it starts
    # The wiped node joined the quorum afresh: it knows a leader again.
    assert _until(lambda: cluster.quorum_leader(victim) is not None, timeout=60)
