"""What the kafka toxics did, recorded in the history as it happens.

A request fault (workloads/faults.py hold_request, drop_response, duplicate_request) is
applied once, as one op of the nemesis; what it then does to single requests, at moments
the harness does not choose (a match, a hold, a release, a dropped response, a copy), the
toxic appends to its event file (harness/cluster/kafkatoxic). A thread reads that file
every POLL seconds and records each event as a `request` op of the nemesis, so the
history's times, which are the recorder's clock, place each event within POLL of when
it happened; the toxic's own wall-clock time stays in the value (`at_ns`).
"""
from __future__ import annotations

import threading

from onceproof.history.writer import HistoryWriter
from onceproof.workloads.faults import REQUEST_EVENT

POLL = 0.05


class ToxicEvents:
    """Records a cluster's request_events() into `writer` from start() until stop(),
    which records what is left (a heal releases what was held as it removes the toxics,
    so stop after the settle's heal)."""

    def __init__(self, cluster, writer: HistoryWriter, client_of_tid) -> None:
        self.cluster = cluster
        self.writer = writer
        self.client_of_tid = client_of_tid  # transactional id -> plan client, or None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toxic-events", daemon=True)
        self.recorded = 0

    def __enter__(self) -> ToxicEvents:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.drain()

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            self.drain()

    def drain(self) -> None:
        for event in self.cluster.request_events():
            self.writer.fault(REQUEST_EVENT, self.value(event))
            self.recorded += 1

    def value(self, event: dict) -> dict:
        """A toxic's event as the history holds it: the plan's name for the client."""
        value = {k: v for k, v in event.items() if k != "t_ns" and v not in (None, "")}
        value["at_ns"] = event.get("t_ns")
        if "proxy" in value:
            value["link"] = value.pop("proxy")
        tid = event.get("transactional_id")
        client = self.client_of_tid(tid) if tid else None
        if client is not None:
            value["client"] = client
        return value
