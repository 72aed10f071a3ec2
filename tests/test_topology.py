"""The topology and provisioning, without starting anything."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from onceproof.cluster import topology
from onceproof.cluster.topology import Topology


def test_every_node_to_node_link_has_its_own_proxy():
    topo = Topology.allocate(3)
    kinds = {(l.kind, l.src, l.dst) for l in topo.links}
    for j in topo.nodes:
        assert ("client", 0, j) in kinds
        for i in topo.nodes:
            if i != j:
                assert ("repl", j, i) in kinds and ("ctl", j, i) in kinds
    ports = [l.listen for l in topo.links] + [l.upstream for l in topo.links]
    assert len(set(l.listen for l in topo.links)) == len(topo.links)
    assert not set(l.listen for l in topo.links) & set(l.upstream for l in topo.links)
    assert len(ports) == 2 * len(topo.links)


def test_nodes_reach_each_other_only_through_proxies():
    topo = Topology.allocate(3)
    proxy_ports = {l.listen for l in topo.links}
    for node in topo.nodes:
        props = topo.server_properties(node, "/tmp/x")
        ports = topo.ports[node]
        own = {ports.client, *ports.controller.values(), *ports.repl.values()}
        for entry in props["advertised.listeners"].split(",") + props["controller.quorum.voters"].split(","):
            port = int(entry.rsplit(":", 1)[1])
            # Anything a peer or client is told to dial is a proxy, or this node's own port
            # advertised to itself.
            assert port in proxy_ports or port in own, entry
        assert props["inter.broker.listener.name"] == f"REPL_FROM_{node}"
        assert props["controller.listener.names"].split(",")[0] == f"CTL_FROM_{node}"
        for entry in props["advertised.listeners"].split(","):
            name, port = entry.split("://")[0], int(entry.rsplit(":", 1)[1])
            src = int(name.rsplit("_", 1)[1]) if "_FROM_" in name else 0
            if src not in (0, node):
                kind = "repl" if name.startswith("REPL") else "ctl"
                assert port == topo.link(kind, src, node).listen


def test_controller_listeners_are_advertised_from_3_9_only():
    # Before KIP-853 (3.9) a node that is also a broker may not advertise them; from it
    # they must be, or a Raft leader announces its real ports and peers bypass the proxies.
    topo = Topology.allocate(3)
    for release, advertised in [((3, 5, 2), False), ((3, 8, 1), False), ((3, 9, 0), True),
                                ((4, 4, 0), True)]:
        props = topo.server_properties(1, "/tmp/x", release=release)
        assert ("CTL_FROM_" in props["advertised.listeners"]) is advertised, release
        assert "CTL_FROM_1" in props["listeners"]


def test_partition_cuts_exactly_the_crossing_links_both_ways():
    topo = Topology.allocate(3)
    cut = {(l.kind, l.src, l.dst) for l in topo.crossing([[1], [2, 3]])}
    assert cut == {(k, a, b) for k in ("repl", "ctl") for a, b in
                   [(1, 2), (1, 3), (2, 1), (3, 1)]}
    assert {(l.src, l.dst) for l in topo.crossing([[1]])} == {(1, 2), (1, 3), (2, 1), (3, 1)}


def test_missing_java_is_one_clear_line(tmp_path):
    # A fresh cache forces a fetch; a PATH without java must say what to install.
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=str(bindir), ONCEPROOF_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([str(bindir / "onceproof"), "install"], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("onceproof: java not found on PATH: install a JDK 17")
    assert len(out.stderr.strip().splitlines()) == 1


def test_cluster_ids_never_start_with_a_dash():
    # kafka-storage's parser reads "-t -abc..." as a missing argument and the format fails.
    from onceproof.cluster.topology import new_cluster_id
    ids = [new_cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids)


def test_a_port_one_cluster_claimed_is_never_drawn_by_another(tmp_path, monkeypatch):
    # A partition closes a proxy's port for a while: being free then must not make it
    # drawable by another cluster (cluster/topology.py, _claim).
    monkeypatch.setenv("ONCEPROOF_CACHE", str(tmp_path))
    first = Topology.allocate(3)
    taken = set(first.claims)
    assert taken == {link.listen for link in first.links} | {first.toxiproxy_api} | {
        p for ports in first.ports.values()
        for p in [ports.client, *ports.controller.values(), *ports.repl.values()]}
    assert all(topology._claim(port) is None for port in taken)
    first.release()
    again = topology._claim(next(iter(taken)))
    assert again is not None
    os.close(again)
