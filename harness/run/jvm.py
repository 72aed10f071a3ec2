"""Plan clients on the Java client (kafka-clients): each client process a JVM of its own,
running onceproof's agent (run/java/OnceproofAgent.java).

Why a JVM per process, speaking run/protocol.py's messages as JSON lines: a client process is
then exactly what it is for librdkafka (run/host.py), a process the harness starts,
records through, kills -9 on a crash and replaces when it hangs, and the history it
writes has the same ops, values and order rules. The agent implements the roles of
run/clients.py op for op; what differs between the two client libraries is said there.

Plans are written in librdkafka's setting names (docs/plans.md). A Java client gets the
same settings under Java's names where the two differ (JAVA_NAMES), and a setting the
Java client does not know is refused before the run starts, not ignored.
"""
from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

from onceproof.run.clients import (
    COMMIT_ATTEMPTS,
    FETCH_TIMEOUT,
    HANG_GRACE,
    OP_TIMEOUT,
    START_TIMEOUT,
    RunContext,
    consumer_settings,
    producer_settings,
)
from onceproof.run.host import HostedClient
from onceproof.run.jvm_build import JavaClientDist, ensure_java_client
from onceproof.run.protocol import HARNESS, START, message
from onceproof.run.values import Shape
from onceproof.workloads.ops import TRANSACTIONAL
from onceproof.workloads.plan import (
    DEFAULT_PIPELINE,
    DEFAULT_STREAMS,
    JAVA,
    RELEASE,
    PlanError,
    read_topic,
)
from onceproof.workloads.settings import setting_text

if TYPE_CHECKING:
    from onceproof.cluster.external import AnyCluster

# librdkafka's name -> the Java client's, for settings whose names differ.
# socket.timeout.ms is librdkafka's request timeout, the one the Java client calls
# request.timeout.ms.
JAVA_NAMES = {"message.timeout.ms": "delivery.timeout.ms", "queue.buffering.max.ms": "linger.ms",
              "socket.timeout.ms": "request.timeout.ms"}
# A small heap (the clients buffer little), and no optimizing JIT: nine of these share
# two cores with the brokers, and a client process lives for minutes, not hours.
JVM_OPTIONS = ("-Xms16m", "-Xmx256m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-XX:-UsePerfData")


def java_config(settings: dict) -> dict[str, str]:
    """Settings under the Java client's names (docs/plans.md). Settings that name
    socket.timeout.ms speak librdkafka's names: their request.timeout.ms is then the ack
    timeout a produce asks of the broker, which the Java client has no setting for (it
    sends its own request timeout), so it is left out and socket.timeout.ms becomes the
    request timeout."""
    if "socket.timeout.ms" in settings:
        settings = {k: v for k, v in settings.items() if k != "request.timeout.ms"}
    out = {JAVA_NAMES.get(k, k): setting_text(v) for k, v in settings.items()}
    if "message.timeout.ms" in settings:
        # librdkafka's message timeout counts from the send, as the Java client's
        # delivery timeout does, but the Java client refuses one below linger.ms plus
        # request.timeout.ms (5 + 30,000 by default), which librdkafka allows: raised to it.
        floor = int(out.get("linger.ms", 5)) + int(out.get("request.timeout.ms", 30000))
        out["delivery.timeout.ms"] = str(max(int(out["delivery.timeout.ms"]), floor))
    return out


def prepare(plan: dict, cluster: AnyCluster) -> JavaClientDist:
    """The Java client a plan's Java clients run on, fetched and built if need be. Its
    release is the plan's `java_client`, else the release of the cluster under test, as
    a user's application would most often match it."""
    version = plan.get("java_client") or str(cluster.described().get("kafka_version") or "")
    if not RELEASE.fullmatch(version):
        raise PlanError(f"the cluster does not say its Kafka release ({version or 'none'}): name "
                        "the Java client's with --java-client-version (plan java_client)")
    return ensure_java_client(version)


def unknown_settings(plan: dict, cid: str, dist: JavaClientDist) -> list[str]:
    """The settings a Java plan client is given that its client knows under no name."""
    names = dist.config_names
    known = set(names["producer"]) | set(names["consumer"])
    spec = plan["clients"][cid]
    given = {**plan.get("producer", {}), **plan.get("consumer", {}), **spec.get("config", {})}
    unknown = [k for k in given if JAVA_NAMES.get(k, k) not in known]
    if spec["role"] == "streams":
        # Kafka Streams' own settings, and its clients', which it hands them as they
        # are or under their prefixes.
        app = set(names.get("streams", ())) | known
        prefixed = [(f"{role}.", known) for role in ("producer", "consumer", "main.consumer",
                                                     "restore.consumer", "global.consumer")]
        unknown += [k for k in spec.get("streams", {}).get("config", {})
                    if k not in app and not any(k.startswith(pre) and k[len(pre):] in names_
                                                for pre, names_ in prefixed)]
    return sorted(unknown)


def streams_settings(spec: dict) -> dict:
    """A streams client's application: what it reads, computes and writes, and Kafka
    Streams' settings: the processing guarantee and one stream thread (a plan scales
    an application by its instances, each a client), under the plan's own."""
    app = {**DEFAULT_STREAMS, **spec.get("streams", {})}
    return {"input": spec["input"], "output": spec["output"], "topology": app["topology"],
            "guarantee": app["guarantee"],
            "config": java_config({"processing.guarantee": app["guarantee"],
                                   "num.stream.threads": 1, **app["config"]})}


def settings(cid: str, spec: dict, plan: dict, ctx: RunContext) -> dict:
    """Everything the agent needs to make a plan client, worked out here, so each default
    has one definition (run/clients.py, workloads/plan.py)."""
    # max.block.ms bounds the Java client's own waits (metadata, buffer, init), which
    # librdkafka bounds per call instead.
    producer = {"max.block.ms": round(OP_TIMEOUT * 1000),
                **producer_settings(plan, spec, spec["role"] in TRANSACTIONAL)}
    consumer = consumer_settings(plan, spec)
    # A transactional client's own reader reads committed data, whatever its config says.
    reader = {**consumer_settings(plan, {}), "isolation.level": "read_committed"}
    read = read_topic(plan, spec)
    return {"topic": spec.get("topic") or next(iter(plan["topics"])), "tid": ctx.tid(cid),
            "group": ctx.group(spec.get("group", cid)),
            "partitions": spec.get("partitions", list(range(ctx.partitions[read]))),
            "producer": java_config(producer), "consumer": java_config(consumer),
            "reader": java_config(reader),
            "pipeline": {**DEFAULT_PIPELINE, **spec.get("pipeline", {})},
            "mix": plan.get("mix", {}),
            **({"streams": streams_settings(spec)} if spec["role"] == "streams" else {})}


class _Lines:
    """run/protocol.py's messages as JSON lines on a process's stdin and stdout."""

    def __init__(self, proc: subprocess.Popen):
        self._in, self._out = proc.stdin, proc.stdout

    def send(self, message) -> None:
        assert self._in is not None
        self._in.write(json.dumps(message) + "\n")
        self._in.flush()

    def recv(self):
        assert self._out is not None
        line = self._out.readline()
        if not line:
            raise EOFError
        return json.loads(line)

    def close(self) -> None:
        for stream in (self._in, self._out):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class JavaClient(HostedClient):
    """A client process on the Java client: a JVM running the agent."""

    def _launch(self, cid: str, spec: dict, plan: dict, ctx: RunContext, process: str):
        dist = ctx.prepared.get(JAVA)
        if dist is None:
            raise RuntimeError("a Java plan client in a run without a Java client (run/execute.py)")
        # A session of its own keeps a terminal's Ctrl-C away from it: the harness ends
        # it, and it ends by itself when the harness's end of its stdin closes (the
        # harness exited, or was killed).
        self._proc = subprocess.Popen(
            ["java", *JVM_OPTIONS, "-cp", dist.classpath, "OnceproofAgent"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            start_new_session=True)
        conn = _Lines(self._proc)
        context = {"prefix": ctx.prefix, "partitions": ctx.partitions,
                   "values": Shape.of(plan).to_dict(),
                   "connection": {k: setting_text(v) for k, v in ctx.connection.items()},
                   "timeouts": {"op": OP_TIMEOUT, "fetch": FETCH_TIMEOUT, "hang_grace": HANG_GRACE,
                                "start": START_TIMEOUT, "commit_attempts": COMMIT_ATTEMPTS}}
        try:
            conn.send(message(HARNESS, START, cid=cid, spec={**spec, "java": settings(cid, spec, plan, ctx)},
                              context=context, process=process))
        except OSError:
            pass  # it died at once: the reader reports it
        return conn

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def crash(self) -> None:
        """kill -9 of the JVM: nothing flushed, committed or aborted."""
        self._proc.kill()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def _exit_code(self) -> int | None:
        try:
            return self._proc.wait(1)
        except subprocess.TimeoutExpired:
            return None
