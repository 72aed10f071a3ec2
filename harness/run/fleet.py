"""The clients of one run: each plan client is an application, run by one process at a time.

Each process is an operating-system process of its own (run/host.py). When it dies (a
client library error escaped its op), hangs (its op outlived every timeout it was
given, or a library call in it never returned) or is crashed on purpose (a plan's
schedule), the harness kills it and the application comes back as a new process, as a
restarted one would: new client instances with the same transactional id and consumer
group, under a new process name (`x0.1`, `x0.2`, ...). The new name keeps the history's
rule that a process does one op at a time: an op the killed process had open stays open
forever, and its successor's ops are its own. The history records each replacement as
an `info` op of the nemesis (docs/history.md).
"""
from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaException

from onceproof.run import backends
from onceproof.run.clients import RunContext
from onceproof.run.host import HostedClient, Stuck
from onceproof.workloads.plan import Plan

# The history's names for why a process was replaced.
ERROR, HUNG, CRASHED = "client_error", "client_hung", "client_crashed"


class Fleet:
    def __init__(self, plan: dict | Plan, ctx: RunContext):
        self.plan, self.ctx = Plan.of(plan), ctx
        # The plan as data, which each client's process is given (run/host.py, run/jvm.py).
        self.raw = self.plan.to_dict()
        self._lock = threading.Lock()
        # One replacement of a client at a time: a process killed by one replacement
        # fails the ops its other threads wait on, and their stopped() must find the
        # replacement, not replace it again while it starts.
        self._replacing = {cid: threading.Lock() for cid in self.plan.clients}
        self._incarnations = dict.fromkeys(self.plan.clients, 0)
        self.replaced = 0
        # Every host starts at once; each then waits for its client to be made.
        self.current: dict[str, HostedClient] = {}
        try:
            for cid in self.plan.clients:
                self.current[cid] = self._host(cid)(cid, self.raw["clients"][cid], self.raw, ctx, cid)
            for client in self.current.values():
                client.wait_started()
        except BaseException:
            self.end()
            raise

    def _host(self, cid: str) -> type[HostedClient]:
        """What runs a plan client's processes: its client library's host."""
        return backends.of(self.raw["clients"][cid]).host

    def _make(self, cid: str, process: str) -> HostedClient:
        client = self._host(cid)(cid, self.raw["clients"][cid], self.raw, self.ctx, process)
        client.wait_started()
        return client

    def stopped(self, cid: str, client: HostedClient, exc: KafkaException,
                op: dict | None) -> HostedClient:
        """Replace the process whose op raised `exc`: a client library error that
        escaped it, or a library call stuck in it (host.Stuck)."""
        return self.replace(cid, HUNG if isinstance(exc, Stuck) else ERROR,
                            f"client {client.process} stopped: {exc}", op, gone=client)

    def replace(self, cid: str, why: str, detail: str, op: dict | None = None,
                gone: HostedClient | None = None, after: float = 0.0) -> HostedClient:
        """Retire the process running cid (unless `gone` names one that is already
        retired) and start the next `after` seconds later; record the replacement.
        Returns the current client."""
        with self._replacing[cid]:
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
            old.crash()  # for every reason: a supervisor kills what it replaces
            time.sleep(after)
            # The first incarnation was made with the same config, so this one can be too.
            new = self._make(cid, process)
            with self._lock:
                self.current[cid] = new
            return new

    def close(self, cids) -> None:
        """Close each client as an application shutting down would; its process ends."""
        for cid in cids:
            self.current[cid].close()

    def end(self) -> None:
        """Kill every client process still running (a run that stopped early)."""
        for client in self.current.values():
            client.crash()
