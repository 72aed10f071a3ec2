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

import atexit
import signal
import threading
import time

from confluent_kafka import KafkaException

from onceproof.run import backends
from onceproof.run.clients import RunContext
from onceproof.run.host import HostedClient, Stuck
from onceproof.workloads.plan import Plan

# The history's names for why a process was replaced.
ERROR, HUNG, CRASHED = "client_error", "client_hung", "client_crashed"
# Every client process a fleet of this harness process has stopped (pause_client) and
# not yet continued: continued at exit too, whatever ended the harness short of a kill,
# so that no stopped process outlives it.
_STOPPED: set[HostedClient] = set()


@atexit.register
def _continue_stopped() -> None:
    for client in list(_STOPPED):
        client.signal(signal.SIGCONT)
    _STOPPED.clear()


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
        # The processes pause_client stopped, by client; steps fired later (a pause's
        # resume_client), cancelled when the fleet ends.
        self.paused: dict[str, list[HostedClient]] = {}
        self._timers: list[threading.Timer] = []
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
                gone: HostedClient | None = None, after: float = 0.0,
                fresh: bool = False) -> HostedClient:
        """Retire the process running cid (unless `gone` names one that is already
        retired) and start the next `after` seconds later, under the same transactional
        id or, `fresh`, a new one; record the replacement. Returns the current client."""
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
            if fresh and self.plan.clients[cid].transactional:
                self.ctx.identities[cid] = self.ctx.identities.get(cid, 0) + 1
                value.update(identity="fresh", tid=self.ctx.tid(cid))
            self.ctx.writer.fault(why, value, type="info", error=detail)
            old.crash()  # for every reason: a supervisor kills what it replaces
            _STOPPED.discard(old)
            time.sleep(after)
            # The first incarnation was made with the same config, so this one can be too.
            new = self._make(cid, process)
            with self._lock:
                self.current[cid] = new
            return new

    def pause(self, cid: str) -> list[str]:
        """SIGSTOP the process running cid (every thread of it: a Java client's whole
        JVM); the processes stopped."""
        client = self.current[cid]
        if not client.signal(signal.SIGSTOP):
            return []
        with self._lock:
            self.paused.setdefault(cid, []).append(client)
            _STOPPED.add(client)
        return [client.process]

    def resume(self, cid: str | None = None) -> list[str]:
        """SIGCONT what pause stopped of cid (None: of every client); the processes
        continued (one since replaced, and so killed, is not among them)."""
        with self._lock:
            cids = [cid] if cid is not None else list(self.paused)
            stopped = [c for k in cids for c in self.paused.pop(k, [])]
            for client in stopped:
                _STOPPED.discard(client)
        return [c.process for c in stopped if c.signal(signal.SIGCONT)]

    def after(self, seconds: float, call) -> None:
        """call() in `seconds`, unless the fleet ends first."""
        timer = threading.Timer(seconds, call)
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def close(self, cids) -> None:
        """Close each client as an application shutting down would; its process ends."""
        for cid in cids:
            self.current[cid].close()

    def end(self) -> None:
        """Kill every client process still running (a run that stopped early), each
        continued first if it was stopped."""
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
        self.resume()
        for client in self.current.values():
            client.crash()
