"""A bare confluent-kafka producer, for bench/load_bench.py's --value-bytes table: no
harness, no history, only the client writing records, to compare the harness's records/s
with.

    python bench/bare_producer.py '{"connection": {...}, "settings": {...}, "topic": T,
        "partitions": P, "records": N, "size": S, "shape": "async"|"ops", "max_records": 3,
        "seed": 1}'

It connects and writes one record first (metadata, connections and the idempotent
producer's id are start-up, not load), prints `ready`, waits for a line on stdin, then
writes N records of S bytes (one payload, made once) and prints a JSON line: the records
acknowledged, the failed ones, and the wall-clock start and end of the writing.

- async: produce every record, serving delivery reports as it goes, then flush: a plain
  producer loop, the client's own pace;
- ops: the harness's op shape: sends of 1 to max_records records, each awaited (flush)
  before the next, as a harness producer's send op waits for its acknowledgements.
"""
from __future__ import annotations

import json
import random
import sys
import time

from confluent_kafka import Producer


def main(spec: dict) -> None:
    producer = Producer({**spec["connection"], **spec["settings"]})
    topic, parts, size = spec["topic"], spec["partitions"], spec["size"]
    payload = (b"onceproof bare producer " * (size // 24 + 1))[:size]
    failed = 0

    def report(err, msg) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    producer.produce(topic, payload, key=b"bare", partition=0, on_delivery=report)
    producer.flush(30)
    failed = 0
    print("ready", flush=True)
    sys.stdin.readline()
    n, rng = spec["records"], random.Random(spec.get("seed", 1))
    start = time.time()
    i = 0
    while i < n:
        batch = n - i if spec["shape"] == "async" else min(n - i, rng.randint(1, spec["max_records"]))
        for _ in range(batch):
            while True:
                try:
                    producer.produce(topic, payload, key=b"bare", partition=i % parts,
                                     on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
            i += 1
        producer.flush(60)
    end = time.time()
    print(json.dumps({"records": n - failed, "failed": failed, "start": start, "end": end}),
          flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
