"""The final reads go on past a partition that has no leader (one left offline by its
faults) instead of ending the run with a traceback: that partition is read no further."""
from __future__ import annotations

import time

import portpicker
from confluent_kafka import Consumer, TopicPartition

from onceproof.run import execute


def test_watermarks_of_a_partition_nobody_leads_are_none_not_an_exception():
    # A real client whose bootstrap answers nothing: no broker knows the partition.
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{portpicker.pick_unused_port()}",
                         "group.id": "final-reads-test", "socket.timeout.ms": 1000})
    try:
        assert execute._watermarks(consumer, TopicPartition("t", 0), time.monotonic() + 2) is None
    finally:
        consumer.close()
