"""How long the 3-node cluster takes to become ready, and how much memory it holds.

cold: a fresh cluster (new ports, storage formatted, first JVM start) with Kafka and
      toxiproxy already in the cache: the download is excluded, as it happens once.
warm: every node stopped and started again on its existing data.
Ready means what the harness waits for: every broker registered and a fresh RF-3 topic
with its full ISR. Prints figures; asserts nothing.

    python bench/cluster_bench.py [--nodes 3] [--kafka-version 4.3.1] [--runs 2]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from onceproof.cluster import procs
from onceproof.cluster.cluster import Cluster
from onceproof.cluster.provision import ensure_kafka, ensure_toxiproxy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--kafka-version", default=None)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    dist = ensure_kafka(args.kafka_version)
    ensure_toxiproxy()
    cold, warm, rss = [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as root:
            cluster = Cluster(root, args.nodes, dist.version)
            t = time.monotonic()
            cluster.up()
            try:
                cold.append(time.monotonic() - t)
                time.sleep(5)  # let startup work settle before reading memory
                rss.append(procs.rss_bytes(list(cluster.pids.values())))
                for node in cluster.topology.nodes:
                    cluster.stop(node)
                t = time.monotonic()
                for node in cluster.topology.nodes:
                    cluster.start(node)
                cluster.wait_ready()
                warm.append(time.monotonic() - t)
            finally:
                cluster.down()
    print(f"Kafka {dist.version}, {args.nodes} nodes, {args.runs} runs")
    print(f"cold start to ready: median {statistics.median(cold):.1f} s  (runs: "
          + ", ".join(f"{x:.1f}" for x in cold) + ")")
    print(f"warm start to ready: median {statistics.median(warm):.1f} s  (runs: "
          + ", ".join(f"{x:.1f}" for x in warm) + ")")
    print(f"resident memory, whole cluster (JVMs + toxiproxy): median "
          f"{statistics.median(rss) / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
