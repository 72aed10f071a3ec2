"""The clients of one run: each plan client is an application, run by one process at a time.

When a process dies (a client library error escaped its op), hangs (its op outlived
every timeout it was given) or is crashed on purpose (a plan's schedule), the
application comes back as a new process, as a restarted one would: new client
instances with the same transactional id and consumer group, under a new process name
(`x0.1`, `x0.2`, ...). The new name keeps the history's rule that a process does one op
at a time: a hung process's op stays open forever, and its successor's ops are its own.
The history records each replacement as an `info` op of the nemesis (docs/history.md).
"""
from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaException

from onceproof.run.clients import CLIENTS, Client, RunContext

# The history's names for why a process was replaced.
ERROR, HUNG, CRASHED = "client_error", "client_hung", "client_crashed"


class Fleet:
    def __init__(self, plan: dict, ctx: RunContext):
        self.plan, self.ctx = plan, ctx
        self._lock = threading.Lock()
        self._incarnations = dict.fromkeys(plan["clients"], 0)
        self.current: dict[str, Client] = {cid: self._make(cid, cid) for cid in plan["clients"]}
        self.replaced = 0

    def _make(self, cid: str, process: str) -> Client:
        spec = self.plan["clients"][cid]
        return CLIENTS[spec["role"]](cid, spec, self.plan, self.ctx, process)

    def replace(self, cid: str, why: str, detail: str, op: dict | None = None,
                gone: Client | None = None, after: float = 0.0) -> Client:
        """Retire the process running cid (unless `gone` names one that is already
        retired) and start the next `after` seconds later; record the replacement.
        Returns the current client."""
        with self._lock:
            old = self.current[cid]
            if gone is not None and old is not gone:
                return old
            self._incarnations[cid] += 1
            process = f"{cid}.{self._incarnations[cid]}"
            self.replaced += 1
        value: dict = {"process": old.process, "by": process}
        if op is not None:
            value["op"] = op
        self.ctx.writer.fault(why, value, type="info", error=detail)
        if why == CRASHED:
            try:
                old.crash()
            except KafkaException:
                pass  # a crash records nothing either way
        time.sleep(after)
        # The first incarnation was made with the same config, so this one can be too.
        new = self._make(cid, process)
        with self._lock:
            self.current[cid] = new
        return new

    def close(self, cids) -> None:
        for cid in cids:
            try:
                self.current[cid].close()
            except KafkaException:
                pass  # closing records nothing, so its failure changes no history
