"""A client role for the tests of run/host.py: it talks to no Kafka, and does to its host
what each op asks (record an op, die, hang at its start, garble the protocol), so the
host's handling of each can be seen in the history the harness writes.

A host finds a client class in run/clients.py's CLIENTS by the spec's role. This module
adds its own there when it is imported, and a host imports it when it unpickles a spec
that carries the class itself (`spec()`), so no test code runs in the harness's fork
server.
"""
from __future__ import annotations

import json
import os
import time

from confluent_kafka import KafkaException

from onceproof.run import clients
from onceproof.run.clients import CLIENTS, Client

ROLE = "scripted"


class Scripted(Client):
    role = ROLE

    def __init__(self, cid, spec, plan, ctx, process=None):
        super().__init__(cid, spec, plan, ctx, process)
        if spec.get("start") == "hang":
            time.sleep(3600)
        if spec.get("start") == "kafka":
            raise KafkaException("no broker answers")
        self.invoked = 0

    def _invoke(self) -> int:
        self.invoked += 1
        record = {"topic": "t", "partition": 0, "key": self.cid, "value": self.ctx.value()}
        return self.w.invoke(self.process, "send", {"records": [record]})

    def op_record(self, op: dict) -> None:
        """An op whose call goes on only once its invoke is in the history file: the
        completion says whether the file held it when the call went on."""
        h = self._invoke()
        with open(op["history"], encoding="utf-8") as f:
            events = [json.loads(line) for line in f if line.strip()]
        mine = [e for e in events if e["process"] == self.process and e["type"] == "invoke"]
        self.w.ok(h, {"records": [], "seen": len(mine) == self.invoked})

    def op_die(self, op: dict) -> None:
        """The process ends in the middle of its op, as a crashed client's would."""
        self._invoke()
        os._exit(3)

    def op_garble(self, op: dict) -> None:
        """A completion of an op the harness never heard of: the protocol is broken."""
        self._invoke()
        self.w.send(("complete", 10**6, "ok", None, None))
        time.sleep(3600)  # the harness ends the process

    def op_stuck(self, op: dict) -> None:
        """A library call given up on (clients.bounded): the op ends, the process is of
        no more use."""
        h = self._invoke()
        clients.abandoned.append("flush did not return 30 s after it was called with a 20 s timeout")
        self.w.info(h, "flush did not return")

    def op_kafka(self, op: dict) -> None:
        """A client library error that escapes the op."""
        self._invoke()
        raise KafkaException("fenced")


CLIENTS[ROLE] = Scripted


def spec(**more) -> dict:
    """A plan client of this role; the class rides along so that the host imports this
    module before it looks the role up."""
    return {"role": ROLE, "impl": Scripted, **more}
