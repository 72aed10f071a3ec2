"""The clients a plan runs, one class per role, each recording what it does as history ops.

Each client is driven by one thread at a time (the runner runs a client's ops in order),
and each op is bounded by client timeouts, so a paused or partitioned broker delays a
round but never hangs it. An op that is not legal in the client's current state (a commit
with no open transaction, which shrinking can produce) is skipped and recorded nowhere.
"""
from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from onceproof.history.format import (
    ABORT_TXN,
    ASSIGN,
    BEGIN_TXN,
    COMMIT_OFFSETS,
    COMMIT_TXN,
    FETCH_OFFSETS,
    POLL,
    SEEK,
    SEND,
    SEND_OFFSETS,
)
from onceproof.history.writer import Recorder
from onceproof.run.outcomes import commit_outcome, describe, error_of, send_outcome
from onceproof.run.values import PLAIN, Shape, decode
from onceproof.workloads.ops import (
    CONSUMER,
    PAUSE_BEFORE,
    PAUSE_MS,
    PIPELINE,
    PRODUCER,
    ROUNDS,
    RW_TXN,
    TXN_PRODUCER,
)
from onceproof.workloads.ops import PROCESS as PROCESS_OP

# librdkafka logs a fatal error (a fenced producer, which faults cause all the time) at
# its most severe level, which log_level cannot silence; the history records it anyway.
_LIBRDKAFKA_LOG = logging.getLogger("onceproof.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False
QUIET = {"log_level": 0, "log.connection.close": False, "logger": _LIBRDKAFKA_LOG}


def log_settings(config: dict) -> dict:
    """librdkafka's log settings for a client with these settings: silent, unless they
    ask for librdkafka's debug log (`debug`, e.g. "eos"). Then librdkafka's own printer
    writes every line, stamped when its thread wrote it, to the process's stderr, which
    the client's host has sent to a file (run/host.py): through Python's logger a line
    waits for the next poll, and its time would be when Python saw it."""
    return {"log.connection.close": False} if config.get("debug") else QUIET


def asks_for_debug_log(plan: dict, spec: dict) -> bool:
    """Whether a client's producer or consumer settings set librdkafka's `debug`."""
    return any(s.get("debug") for s in (producer_settings(plan, spec), consumer_settings(plan, spec)))

# How far ahead a librdkafka consumer fetches, unless a plan says otherwise: at least 1000
# messages per partition rather than librdkafka's 100,000, at most 1 MiB queued, and
# 64 KiB a partition a fetch rather than 1 MiB. A consumer that lags (a pipeline or
# consumer taking at most ten records an op while producers write nonstop) otherwise
# holds ever more fetched records in its process, and ever larger fetch responses,
# which its queued records keep whole (the soak: a pipeline process grew from 25 to 30-42
# MiB in 12 minutes with 4 MiB and 1 MiB, stayed at 21-22 with these); what it is
# given, and when, stays the same.
PREFETCH = {"queued.min.messages": 1000, "queued.max.messages.kbytes": 1024,
            "max.partition.fetch.bytes": 65536}
OP_TIMEOUT = 20.0
FETCH_TIMEOUT = 10.0
# A transactional client's transaction timeout unless its plan sets one.
TXN_TIMEOUT_MS = 20000
# How long a new consumer waits for its start positions before leaving them unknown.
START_TIMEOUT = 2.0
# How long past its own timeout a librdkafka call may block before we stop waiting for it.
HANG_GRACE = 10.0
# commit_transaction calls per transaction before the client gives up on it (see op_commit).
COMMIT_ATTEMPTS = 3
# How client processes are made (run/host.py): forked from a server that has this
# module imported.
PROCESSES = multiprocessing.get_context("forkserver")
# The calls this process gave up on (bounded): each left a thread blocked with its client.
abandoned: list[str] = []


@dataclass
class RunContext:
    """What every client of one run shares: where to record, how to reach the cluster, and
    how plan names map to this run's fresh topics, groups and transactional ids, each
    under the run's own prefix (so a run on a shared cluster can be told apart, granted
    prefixed ACLs, and cleaned up)."""
    writer: Recorder  # the run's HistoryWriter, or in a client process its Forwarder (run/host.py)
    # bootstrap.servers and the cluster's client settings, which may hold secrets: used
    # to connect, never recorded.
    connection: dict = field(repr=False)
    run_id: str
    partitions: dict[str, int]  # plan topic -> partition count
    clients: dict[str, dict] = field(default_factory=dict)  # the plan's clients
    # Where write values come from: one counter in shared memory, so that values stay
    # unique across the run's client processes (run/host.py).
    values: Any = field(default_factory=lambda: PROCESSES.Value("q", 0))
    # What each client backend the plan's clients run on made ready for the run, by its
    # name in run/backends.py BACKENDS (the Java client's JavaClientDist, which its
    # host needs to start a JVM).
    prepared: dict[str, Any] = field(default_factory=dict)
    # Transactions begun per transaction protocol, as the clients that report it say
    # (the Java client: run/jvm.py); the run's summary and verdict name them.
    txn_protocols: Counter = field(default_factory=Counter)
    # The folder where a client process whose settings ask for librdkafka's debug log
    # writes it (run/host.py; the run's client-logs/); None: the process's stderr.
    logs: str | None = None
    # How many times each client came back under a fresh transactional id (a crash of
    # identity "fresh", run/fleet.py): its tid's generation, 0 (absent) for the first.
    identities: dict[str, int] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        """What every name this run creates starts with."""
        return run_prefix(self.run_id)

    def topic(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def plan_topic(self, real: str) -> str:
        return real[len(self.prefix):]

    def tid(self, client: str) -> str:
        """The transactional id of a client: of every process of it, until a crash
        brings it back under a fresh one (`<prefix>tx-<client>~<generation>`)."""
        generation = self.identities.get(client, 0)
        return f"{self.prefix}tx-{client}" + (f"~{generation}" if generation else "")

    def client_of_tid(self, tid: str) -> str | None:
        """The plan client whose transactional id (of any generation) this is, or None."""
        mine = f"{self.prefix}tx-"
        client = tid[len(mine):].split("~")[0] if tid.startswith(mine) else ""
        return client if client in self.clients else None

    def group(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def client_group(self, client: str) -> str:
        """The group a client reads in: its plan's `group`, else its own id."""
        return self.group(self.clients.get(client, {}).get("group", client))

    def value(self) -> int:
        with self.values.get_lock():
            self.values.value += 1
            return self.values.value


def run_prefix(run_id: str) -> str:
    return f"onceproof-{run_id}-"


class Client:
    role = ""

    def __init__(self, cid: str, spec: dict, plan: dict, ctx: RunContext,
                 process: str | None = None):
        # cid is the application (its transactional id and group derive from it);
        # process names this incarnation of it in the history: a replaced client is a
        # new process of the same application, as a restarted one would be.
        self.cid, self.spec, self.plan, self.ctx = cid, spec, plan, ctx
        self.process = process or cid
        self.w = ctx.writer
        self.topic = spec.get("topic") or next(iter(plan["topics"]))
        # The values it writes: their sizes and content (run/values.py).
        self.shape = Shape.of(plan)

    def run(self, op: dict, lane: int = 0) -> None:
        """Run op; `lane` is which of the client's threads runs it (only a producer with
        several `threads` has more than one). An op with `pause_ms` (a transaction's
        pause, mix.txn_pause_ms) waits that long first, its transaction open."""
        if op.get(PAUSE_MS) and op["f"] != PROCESS_OP:
            time.sleep(op[PAUSE_MS] / 1000)
        getattr(self, "op_" + op["f"])(op)

    def close(self) -> None:
        pass

    def crash(self) -> None:
        """Stop as a killed process would: nothing flushed, committed or aborted. What
        it left open (a transaction) is for the next incarnation to fence and abort."""


def lane_process(process: str, lane: int) -> str:
    """The history's name for thread `lane` of a client process: the process itself for
    the first, `process~lane` for the others. Each does one op at a time."""
    return process if lane == 0 else f"{process}~{lane}"


class Hung(Exception):
    """A client library call that did not return long after its own timeout."""


def bounded(call, *args, timeout: float | None = None):
    """call(*args, timeout), given up on HANG_GRACE seconds after its timeout.

    librdkafka's transactional calls can block well past the timeout they are given
    (send_offsets_to_transaction after the group coordinator restarts: librdkafka issues
    5456 and 5511, open at 2.14). A harness must not hang with them, so the call runs in
    a daemon thread; if it does not return in time it raises Hung, and that thread stays
    blocked with the producer it holds, which the caller abandons: the next producer
    with the same transactional id fences it. The call is noted in `abandoned`, and the
    host of this client process (run/host.py) has the harness replace the process once
    its op is recorded, which frees what the blocked thread holds."""
    timeout = OP_TIMEOUT if timeout is None else timeout
    box: dict = {}
    done = threading.Event()

    def target():
        try:
            box["value"] = call(*args, timeout)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, daemon=True, name="onceproof-bounded").start()
    if not done.wait(timeout + HANG_GRACE):
        hung = (f"{getattr(call, '__name__', 'call')} did not return {timeout + HANG_GRACE:.0f} s "
                f"after it was called with a {timeout:.0f} s timeout")
        abandoned.append(hung)
        raise Hung(hung)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def producer_settings(plan: dict, spec: dict, transactional: bool = False) -> dict:
    """A client's producer settings as the plan gives them: the defaults, the plan's,
    then the client's own. Each client library adds its own connection and names."""
    from onceproof.workloads.plan import DEFAULT_PRODUCER
    role = {"transaction.timeout.ms": TXN_TIMEOUT_MS} if transactional else {}
    return {**DEFAULT_PRODUCER, **role, **plan.get("producer", {}), **spec.get("config", {})}


def consumer_settings(plan: dict, spec: dict) -> dict:
    """A client's consumer settings as the plan gives them, merged as producer_settings."""
    from onceproof.workloads.plan import DEFAULT_CONSUMER
    return {**DEFAULT_CONSUMER, **plan.get("consumer", {}), **spec.get("config", {})}


def _producer_config(ctx: RunContext, plan: dict, spec: dict, transactional: bool = False,
                     fixed: dict | None = None) -> dict:
    """librdkafka's producer config: the plan's settings; `fixed` (a transactional id)
    over them."""
    settings = producer_settings(plan, spec, transactional)
    return {**settings, **(fixed or {}), **ctx.connection, **log_settings(settings)}


def timed(value: dict, seconds: float) -> dict:
    """An op's invoke value with the timeout its client call is given, so a checker can
    tell a call that overstayed it (checkers/liveness.py)."""
    return {**value, "timeout_ms": round(seconds * 1000)}


def _send(w: Recorder, producer: Producer, process: str, records: list[dict],
          ctx: RunContext, txn: str | None = None, timeout: float = OP_TIMEOUT,
          shared: bool = False, shape: Shape = PLAIN) -> tuple[str, list]:
    """Produce records as one send op; return its outcome and the errors seen. A
    `shared` producer has other threads' sends in flight: wait for this send's own
    delivery reports, since a flush would wait for theirs too. Each record's value is
    its identity, padded to its `size` when it has one (run/values.py)."""
    op = w.invoke(process, SEND, timed({"records": records}, timeout), txn=txn)
    out = [dict(r, offset=None) for r in records]
    errors: list[KafkaError | None] = [None] * len(records)
    delivered = [False] * len(records)

    def on_delivery(i):
        def cb(err, msg):
            if err is None:
                delivered[i], out[i]["offset"] = True, msg.offset()
            else:
                errors[i] = err
        return cb

    for i, r in enumerate(records):
        try:
            producer.produce(ctx.topic(r["topic"]), value=shape.encode(r["value"], r.get("size")),
                             key=(r["key"] or "").encode(), partition=r["partition"],
                             on_delivery=on_delivery(i))
        except BufferError:
            errors[i] = KafkaError(KafkaError._QUEUE_FULL)
        except KafkaException as exc:
            errors[i] = error_of(exc)
    try:
        if shared:
            deadline = time.monotonic() + timeout
            while (time.monotonic() < deadline
                   and not all(d or e is not None for d, e in zip(delivered, errors, strict=True))):
                producer.poll(0.05)
        else:
            producer.flush(timeout)
    except KafkaException as exc:
        # A transactional producer's flush raises its fatal error (fenced, most often:
        # Kafka 4 bumps the epoch when it aborts a timed-out transaction). Records not
        # delivered by then carry it; they may or may not be in the log.
        for i, err in enumerate(errors):
            if not delivered[i] and err is None:
                errors[i] = error_of(exc)
    outcome = send_outcome(errors, delivered)
    first = next((e for e in errors if e is not None), None)
    w.complete(op, outcome, {"records": out},
               None if outcome == "ok" else describe(first) if first else "delivery not confirmed in time")
    return outcome, errors


def _records(ctx: RunContext, cid: str, topic: str, op: dict, n_default: int = 1,
             shape: Shape = PLAIN) -> list[dict]:
    """The records of a send op; each names the size of its value when the plan asks
    for one (the history records the sizes written)."""
    parts = ctx.partitions[topic]
    records = []
    for _ in range(op.get("n", n_default)):
        v = ctx.value()
        p = op["partition"] % parts if "partition" in op else v % parts
        r = {"topic": topic, "partition": p, "key": cid, "value": v}
        if (size := shape.size(v)) is not None:
            r["size"] = size
        records.append(r)
    return records


class PlainProducer(Client):
    """Sends outside transactions, with whatever idempotence, acks and retries the plan
    sets. With `threads` > 1 its threads share the one producer, each waiting only for
    its own send, so as many sends as threads are in flight at once: one application
    producing from several threads, as a server does for its requests."""
    role = PRODUCER

    def __init__(self, *a):
        super().__init__(*a)
        self.producer = Producer(_producer_config(self.ctx, self.plan, self.spec))
        self.shared = self.spec.get("threads", 1) > 1

    def run(self, op: dict, lane: int = 0) -> None:
        producer = self.producer
        if producer is None:
            return  # crashed while this thread was between ops: its successor takes over
        _send(self.w, producer, lane_process(self.process, lane),
              _records(self.ctx, self.cid, self.topic, op, shape=self.shape), self.ctx,
              shared=self.shared, shape=self.shape)

    def close(self):
        self.producer.flush(5)

    def crash(self):
        self.producer = None


class TxnProducer(Client):
    """A transactional producer: begin, send, commit or abort, one transaction at a time.

    After an abortable error the application must abort, and does so at its next commit.
    After a fatal error (fenced, for instance) the producer is replaced by a new one with
    the same transactional id, as an application restarting would do; its
    init_transactions aborts whatever the old one left open."""
    role = TXN_PRODUCER

    def __init__(self, *a):
        super().__init__(*a)
        self.tid = self.ctx.tid(self.cid)
        self.producer = None
        self.txn: str | None = None
        self.must_abort = False
        self.count = 0
        self.txn_timeout_ms = TXN_TIMEOUT_MS

    def _ensure(self) -> bool:
        if self.producer is not None:
            return True
        config = _producer_config(self.ctx, self.plan, self.spec, transactional=True,
                                  fixed={"transactional.id": self.tid})
        self.txn_timeout_ms = int(config["transaction.timeout.ms"])
        producer = Producer(config)
        try:
            bounded(producer.init_transactions)
        except (KafkaException, Hung):
            return False
        self.producer = producer
        return True

    def _on_error(self, err: KafkaError | None) -> None:
        if err is not None and err.fatal():
            self.producer, self.txn = None, None
        elif err is not None and err.txn_requires_abort():
            self.must_abort = True

    def op_begin(self, op):
        if self.txn is not None or not self._ensure():
            return
        self.count += 1
        txn = f"{self.process}/{self.count}"
        # The timeout after which Kafka aborts it, for the checkers (hanging_txn).
        h = self.w.invoke(self.process, BEGIN_TXN,
                          {"tid": self.tid, "txn_timeout_ms": self.txn_timeout_ms}, txn=txn)
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            self.w.fail(h, describe(error_of(exc) or exc))  # begin is local: nothing happened
            self._on_error(error_of(exc))
            return
        self.w.ok(h, {"tid": self.tid})
        self.txn, self.must_abort = txn, False

    def op_send(self, op):
        if self.txn is None or self.must_abort:
            return
        _, errors = _send(self.w, self.producer, self.process,
                          _records(self.ctx, self.cid, self.topic, op, shape=self.shape),
                          self.ctx, txn=self.txn, shape=self.shape)
        for err in errors:
            self._on_error(err)

    def op_commit(self, op) -> bool:
        """Returns whether the transaction certainly committed.

        A retriable error (a timeout, most often) leaves the commit in progress inside
        librdkafka, which refuses a new transaction until commit_transaction is called
        again: a correct application retries, and so do we, each attempt recorded as its
        own commit_txn op of the same transaction. If the commit is still undecided after
        that, the producer is replaced; the new one's init_transactions finishes or aborts
        what the old one left, so the outcome stays unknown (info) and the client goes on.
        A plan whose mix sets commit_timeout "abort" aborts after the first retriable
        failure instead, as many applications do. A commit that fails with an abortable
        error is followed by the abort the application owes, recorded as any other."""
        if self.txn is None:
            return False
        if self.must_abort:
            self.op_abort(op)
            return False
        err = None
        for _ in range(COMMIT_ATTEMPTS):
            h = self.w.invoke(self.process, COMMIT_TXN, timed({}, OP_TIMEOUT), txn=self.txn)
            try:
                bounded(self.producer.commit_transaction)
                self.w.ok(h)
                self.txn = None
                return True
            except Hung as exc:
                self.w.info(h, describe(exc))
                break
            except KafkaException as exc:
                err = error_of(exc)
                self.w.complete(h, commit_outcome(err) if err else "info", {}, describe(err or exc))
                if err is None or err.fatal() or err.txn_requires_abort() or not err.retriable():
                    break
                if self.plan.get("mix", {}).get("commit_timeout") == "abort":
                    # The application gives up on a commit that timed out; its outcome
                    # stays unknown until the abort lands (docs/history.md).
                    self.op_abort(op)
                    return False
        if err is not None and err.txn_requires_abort():
            # Recorded: whether the abort landed, and when, decides what a request
            # still held by the network can do after it (KAFKA-12671).
            self.op_abort(op)
            return False
        if err is not None and err.fatal():
            self._on_error(err)
        else:
            self.producer = None
        self.txn = None
        return False

    def op_abort(self, op):
        if self.txn is None:
            return
        h = self.w.invoke(self.process, ABORT_TXN, timed({}, OP_TIMEOUT), txn=self.txn)
        try:
            bounded(self.producer.abort_transaction)
            self.w.ok(h)
        except (KafkaException, Hung) as exc:
            # An abort never commits; a new producer with this id finishes the job.
            self.w.info(h, describe(error_of(exc) or exc))
            self.producer = None
        self.txn, self.must_abort = None, False

    def close(self):
        self.producer = None

    def crash(self):
        self.producer, self.txn = None, None

    def send_offsets(self, reader: TopicConsumer, txn: str, positions: list[TopicPartition],
                     pipeline: bool = True) -> None:
        """Send `reader`'s group offsets to the open transaction. `pipeline` False says, in
        the history, that the group's input does not each become an output record (an
        rw_txn's), so checkers/pipeline.py does not hold the group to one."""
        offsets = [dict(reader._tp(tp), offset=tp.offset) for tp in positions]
        value: dict = {"group": reader.group, "offsets": offsets}
        if not pipeline:
            value["pipeline"] = False
        h = self.w.invoke(self.process, SEND_OFFSETS, timed(value, OP_TIMEOUT), txn=txn)
        try:
            bounded(self.producer.send_offsets_to_transaction, positions,
                    reader.consumer.consumer_group_metadata())
            self.w.ok(h, value)
        except Hung as exc:
            self.w.info(h, describe(exc))
            # The hung call holds the producer; its open transaction gets no commit, and
            # the next producer with this id aborts it.
            self.producer, self.txn = None, None
            return
        except KafkaException as exc:
            err = error_of(exc)
            self.w.info(h, describe(err or exc))
            self._on_error(err)
            # The offsets may be missing from the transaction: committing it would commit
            # its writes without the input offsets they stand on, so it must abort.
            self.must_abort = True


class TopicConsumer(Client):
    """A consumer in its own group, assigned every partition of its topic (or the plan
    client's `partitions`), or subscribed to the topic so that the group assigns them.

    A subscribed consumer's assignment changes inside a poll: librdkafka runs the
    rebalance callbacks from the poll call. The history records each change as an
    `assign` op, which splits the poll around it: the records the call hands over are
    the second part's, after the reassignment (they reach the application only when
    the call returns)."""
    role = CONSUMER

    def __init__(self, *a, topic: str | None = None, final: bool = False,
                 subscribe: bool = False):
        super().__init__(*a)
        self.topic = topic or self.topic
        self.final = final
        self.subscribed = subscribe
        # The poll op in progress (its history handle, transaction and value), which a
        # reassignment splits; partitions revoked since the owner last cleared the set.
        self._poll: tuple[int, str | None, dict] | None = None
        self.revoked: set[int] = set()
        self.group = self.ctx.group(self.spec.get("group", self.cid))
        config = consumer_settings(self.plan, self.spec)
        self.isolation = config["isolation.level"]
        self.consumer = Consumer({**PREFETCH, **config, **self.ctx.connection,
                                  "group.id": self.group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", **log_settings(config)})
        self.tps = [TopicPartition(self.ctx.topic(self.topic), p)
                    for p in self.spec.get("partitions", range(self.ctx.partitions[self.topic]))]
        # Where the application stands: after the last record it was given, or where it
        # last sought. librdkafka's position() lags an assign() with offsets (it can
        # still report the position from before a seek), so an application that
        # committed it would commit offsets it never reached.
        self.positions: dict[int, int] = {}
        if subscribe:
            self.tps = []
            self.consumer.subscribe([self.ctx.topic(self.topic)], on_assign=self._on_assign,
                                    on_revoke=self._on_revoke, on_lost=self._on_revoke)
            return
        parts = [{"topic": self.topic, "partition": tp.partition} for tp in self.tps]
        h = self.w.invoke(self.process, ASSIGN, {"partitions": parts}, final=final)
        self.consumer.assign(self.tps)
        self.w.ok(h, {"partitions": parts})
        if not final:
            # Say where reading starts, as the group's committed offsets (or the log's
            # beginning) put it, so a checker knows what this consumer went over before
            # its first record. If that cannot be had in time, librdkafka finds it and
            # the history says the position is unknown, as it is.
            start = self.resolve("committed", timeout=START_TIMEOUT)
            if start is not None:
                self.seek_to(start)

    def _on_assign(self, consumer, partitions: list[TopicPartition]) -> None:
        self._reassigned(added=[tp.partition for tp in partitions], removed=[])

    def _on_revoke(self, consumer, partitions: list[TopicPartition]) -> None:
        self._reassigned(added=[], removed=[tp.partition for tp in partitions])

    def _reassigned(self, added: list[int], removed: list[int]) -> None:
        """Record the whole new assignment as an assign op. Runs inside librdkafka's
        call (a poll, or close), so it must not raise."""
        if not added and not removed:
            return  # librdkafka also calls back when a rebalance leaves this member as it was
        before = {tp.partition for tp in self.tps}
        now = sorted(before - set(removed) | set(added))
        # librdkafka changes an assignment incrementally here: partitions that stay
        # keep their positions.
        kept = [{"topic": self.topic, "partition": p} for p in now
                if p in before and p not in added]
        self.tps = [TopicPartition(self.ctx.topic(self.topic), p) for p in now]
        self.revoked.update(removed)
        for p in (*added, *removed):
            # Where a newly assigned partition starts is the group's to say: unknown
            # until the next record from it.
            self.positions.pop(p, None)
        if self._poll is not None:
            self.w.ok(self._poll[0], {"isolation": self.isolation, "records": []})
        parts = [{"topic": self.topic, "partition": p} for p in now]
        value = {"partitions": parts, "kept": kept}
        h = self.w.invoke(self.process, ASSIGN, value, final=self.final)
        self.w.ok(h, value)
        if self._poll is not None:
            _, txn, value = self._poll
            self._poll = (self.w.invoke(self.process, POLL, value, txn=txn,
                                        final=self.final), txn, value)

    def _tp(self, tp: TopicPartition) -> dict:
        return {"topic": self.ctx.plan_topic(tp.topic), "partition": tp.partition}

    def _record(self, m: Message) -> dict:
        topic, value = m.topic(), m.value()
        # Only error events lack a topic or value, and those are never records.
        assert topic is not None and value is not None
        # The identity, and where the value differs from the one it makes, if it does.
        identity, corrupt = decode(value)
        record = {"topic": self.ctx.plan_topic(topic), "partition": m.partition(),
                  "offset": m.offset(), "key": (m.key() or b"").decode() or None,
                  "value": identity}
        if corrupt is not None:
            record["corrupt"] = corrupt
        return record

    def op_poll(self, op, txn: str | None = None) -> list[dict]:
        timeout = op.get("timeout", 1.0)
        value = timed({"isolation": self.isolation, "group": self.group}, timeout)
        self._poll = (self.w.invoke(self.process, POLL, value, txn=txn, final=self.final),
                      txn, value)
        failure: KafkaException | None = None
        try:
            msgs = self.consumer.consume(op.get("n", 10), timeout)
        except KafkaException as exc:
            msgs, failure = [], exc
        # A reassignment during the call may have split the op being recorded.
        h, self._poll = self._poll[0], None
        if failure is not None:
            self.w.fail(h, describe(error_of(failure) or failure))
            return []
        records = [self._record(m) for m in msgs if m.error() is None]
        self.w.ok(h, {"isolation": self.isolation, "records": records})
        for r in records:
            self.positions[r["partition"]] = r["offset"] + 1
        return records

    def known_positions(self) -> list[TopicPartition]:
        """The positions this consumer knows it reached, as offsets to commit."""
        return [TopicPartition(self.ctx.topic(self.topic), p, o)
                for p, o in sorted(self.positions.items())]

    def _low(self, tp: TopicPartition, timeout: float = FETCH_TIMEOUT) -> int:
        return self.consumer.get_watermark_offsets(tp, timeout=timeout)[0]

    def seek_to(self, offsets: list[TopicPartition], txn: str | None = None) -> bool:
        """Move positions; recorded as a seek with the absolute offsets it resolved to.
        Returns whether every position moved."""
        if not offsets:
            return True
        positions = [dict(self._tp(tp), offset=tp.offset) for tp in offsets]
        h = self.w.invoke(self.process, SEEK, {"positions": positions}, txn=txn, final=self.final)
        moved = 0
        try:
            if self.subscribed:
                # The group owns the assignment: seek within it, one partition at a time.
                for tp in offsets:
                    self.consumer.seek(tp)
                    moved += 1
            else:
                # Assigning with explicit offsets sets positions whether or not fetching
                # has started, which seek() does not.
                self.consumer.assign(offsets)
        except KafkaException as exc:
            # Some partitions may have moved already: where this consumer stands is unknown.
            if moved:
                self.w.info(h, describe(error_of(exc) or exc))
                for tp in offsets:
                    self.positions.pop(tp.partition, None)
            else:
                self.w.fail(h, describe(error_of(exc) or exc))
            return False
        self.w.ok(h, {"positions": positions})
        self.positions.update({tp.partition: tp.offset for tp in offsets})
        return True

    def resolve(self, to: str, back: int = 0,
                timeout: float = FETCH_TIMEOUT) -> list[TopicPartition] | None:
        try:
            if to == "committed":
                committed = self.consumer.committed(self.tps, timeout=min(5.0, timeout))
                if any(tp.error is not None for tp in committed):
                    return None
                return [TopicPartition(tp.topic, tp.partition,
                                       tp.offset if tp.offset >= 0 else self._low(tp, timeout))
                        for tp in committed]
            if to == "beginning":
                return [TopicPartition(tp.topic, tp.partition, self._low(tp, timeout))
                        for tp in self.tps]
            return self.at(self.positions, back)
        except KafkaException:
            return None

    def at(self, positions: dict[int, int], back: int = 0) -> list[TopicPartition]:
        """Offsets for every assigned partition: `back` before the position given, or
        its low watermark when none is given (or that would be below it)."""
        return [TopicPartition(tp.topic, tp.partition,
                               max(self._low(tp), positions.get(tp.partition, 0) - back))
                for tp in self.tps]

    def op_seek(self, op):
        offsets = self.resolve(op["to"], op.get("back", 1))
        if offsets is not None:
            self.seek_to(offsets)

    def commit_positions(self, op=None) -> None:
        positions = self.known_positions()
        if not positions:
            return
        sizes = (op or {}).get("metadata")
        if sizes:
            # Metadata the application attaches to each offset (its i-th size for the
            # i-th partition, cycling): the broker refuses what is over its limit.
            positions = [TopicPartition(tp.topic, tp.partition, tp.offset,
                                        metadata="m" * sizes[i % len(sizes)])
                         if sizes[i % len(sizes)] else tp for i, tp in enumerate(positions)]
        offsets = [dict(self._tp(tp), offset=tp.offset) for tp in positions]
        h = self.w.invoke(self.process, COMMIT_OFFSETS, {"group": self.group, "offsets": offsets})

        def commit(timeout: float):
            # librdkafka's synchronous commit takes no timeout: it waits for the group
            # coordinator as long as it takes (over 5 minutes seen under bandwidth and
            # slicer faults), which would hold the round with it.
            return self.consumer.commit(offsets=positions, asynchronous=False)

        try:
            result = bounded(commit)
            errs = [tp.error for tp in result or [] if tp.error is not None]
            if errs:
                self.w.info(h, describe(errs[0]))
            else:
                self.w.ok(h, {"group": self.group, "offsets": offsets})
        except Hung as exc:
            self.w.info(h, describe(exc))
        except KafkaException as exc:
            self.w.info(h, describe(error_of(exc) or exc))

    op_commit_offsets = commit_positions

    def op_fetch_offsets(self, op):
        parts = [self._tp(tp) for tp in self.tps]
        h = self.w.invoke(self.process, FETCH_OFFSETS,
                          timed({"group": self.group, "partitions": parts}, FETCH_TIMEOUT))
        try:
            committed = self.consumer.committed(self.tps, timeout=FETCH_TIMEOUT)
        except KafkaException as exc:
            self.w.fail(h, describe(error_of(exc) or exc))
            return
        self.w.ok(h, {"group": self.group, "offsets": [
            dict(self._tp(tp), offset=tp.offset if tp.offset >= 0 else None) for tp in committed]})

    def close(self):
        self.consumer.close()

    def crash(self):
        # Auto-commit is off and partitions are assigned, not subscribed: closing
        # commits nothing and leaves no group, just as a killed process would.
        self.consumer.close()


class Pipeline(TxnProducer):
    """Consume-transform-produce: read input, write one output record per input record
    (its `source`), and commit the input offsets in the same transaction.

    Plan config flips the two things a correct application must do, so known-bad
    applications can be tested: `offsets_in_txn` (else offsets are committed by the
    consumer after the transaction commits) and `rewind_on_abort` (else the consumer
    keeps its position after an abort and the aborted input is never processed again).
    An op may ask for `abort` (the application aborts) or `crash` (the process dies at
    its most harmful point and restarts with new clients).

    With `subscribe` the group assigns the input partitions (the rebalance protocol is
    the consumer config's `group.protocol`). A partition can then be taken away while a
    transaction holds input from it; the application aborts that transaction, as
    Kafka's guidance for transactional consumers says to, rather than commit offsets
    for a partition another member now reads."""
    role = PIPELINE

    def __init__(self, *a):
        super().__init__(*a)
        from onceproof.workloads.plan import DEFAULT_PIPELINE
        self.config = {**DEFAULT_PIPELINE, **self.spec.get("pipeline", {})}
        self.input, self.output = self.spec["input"], self.spec["output"]
        self._new_consumer()

    def _new_consumer(self):
        spec = dict(self.spec, group=self.spec.get("group", self.cid),
                    config={"isolation.level": "read_committed"})
        self.reader = TopicConsumer(self.cid, spec, self.plan, self.ctx, self.process,
                                    topic=self.input, subscribe=self.config["subscribe"])

    def crash(self):
        self.reader.crash()
        self.producer, self.txn, self.must_abort = None, None, False

    def _crash(self):
        # Come back the way a restarted process would: a new consumer in the same group
        # starts from the committed offsets; a new producer with the same id fences the
        # old one.
        self.crash()
        self._new_consumer()

    def op_process(self, op):
        """One transaction: `rounds` (default 1) of poll, transform and send, a batch of
        input; then its offsets and the commit. A `pause_ms` waits before round
        `pause_before` (its rounds plus one, the default: before the offsets and the
        commit), the transaction open."""
        self.op_begin(op)
        if self.txn is None:
            return
        txn = self.txn
        self.reader.revoked.clear()
        rounds = op.get(ROUNDS, 1)
        for k in range(1, rounds + 1):
            self._pause(op, k)
            inputs = self.reader.op_poll({"n": op.get("n", 5), "timeout": op.get("timeout", 1.0)},
                                         txn=txn)
            if self.reader.revoked & {r["partition"] for r in inputs}:
                self.must_abort = True
            out_parts = self.ctx.partitions[self.output]
            outputs = [{"topic": self.output, "partition": r["partition"] % out_parts,
                        "key": r["key"], "value": self.ctx.value(), "source": r["value"]}
                       for r in inputs]
            for r in outputs:
                if (size := self.shape.size(r["value"])) is not None:
                    r["size"] = size
            if outputs and self.producer is not None:
                _, errors = _send(self.w, self.producer, self.process, outputs, self.ctx, txn=txn,
                                  shape=self.shape)
                for err in errors:
                    self._on_error(err)
            if self.producer is None or self.must_abort:
                break
        self._pause(op, rounds + 1)
        positions = self.reader.known_positions()
        if self.config["offsets_in_txn"] and positions and not self.must_abort and self.producer:
            self.send_offsets(self.reader, txn, positions)
        if op.get("crash") and self.config["offsets_in_txn"]:
            return self._crash()
        if op.get("abort") or self.must_abort or self.producer is None:
            self.op_abort(op)
            committed = False
        else:
            committed = self.op_commit(op)
        if committed and not self.config["offsets_in_txn"]:
            if op.get("crash"):
                return self._crash()
            self.reader.commit_positions()
        if not committed and self.config["rewind_on_abort"]:
            self._rewind()

    @staticmethod
    def _pause(op: dict, before: int) -> None:
        if op.get(PAUSE_MS) and op.get(PAUSE_BEFORE, op.get(ROUNDS, 1) + 1) == before and before > 1:
            time.sleep(op[PAUSE_MS] / 1000)

    def _rewind(self) -> None:
        """Go back to the committed offsets, so aborted input is processed again. Right
        after an abort the group may still hold pending transactional offsets, which a
        read_committed fetch refuses until the abort markers land: retry for a while,
        and if that fails, restart the consumer, which starts from the committed offsets."""
        deadline = time.monotonic() + OP_TIMEOUT
        while time.monotonic() < deadline:
            offsets = self.reader.resolve("committed")
            if offsets is not None and self.reader.seek_to(offsets):
                return
            time.sleep(0.2)
        self.reader.close()
        self._new_consumer()

    def close(self):
        self.reader.close()
        self.producer = None


class ReadWriteTxn(TxnProducer):
    """Transactions that poll and send on one topic (Jepsen's micro-op transactions), so
    transactions read what others wrote: the wr and rw edges of checkers/cycles.py.

    Its reader is in a group of its own (its `group`, else its id). With `offsets_in_txn`
    each transaction that read sends that group's offsets before it commits, as a
    read-process-write application does, so its successor after a crash starts where
    the last committed transaction stopped reading; the send says `pipeline: false`,
    since its input does not each become one output (checkers/pipeline.py holds only
    pipelines' groups to that). Without it the group commits nothing and a successor
    reads from the beginning. Like any exactly-once application it rewinds after a
    transaction that did not commit, to where that transaction began reading, so what
    it read there counts for nothing (the consumption checkers retract such reads)."""
    role = RW_TXN

    def __init__(self, *a):
        super().__init__(*a)
        self._new_reader()
        self.start: dict[int, int] | None = None  # positions before this txn's reads

    def op_poll(self, op):
        if self.txn is None or self.must_abort:
            return
        if self.start is None:
            self.start = dict(self.reader.positions)
        self.reader.op_poll(op, txn=self.txn)

    def op_commit(self, op) -> bool:
        if (self.spec.get("offsets_in_txn") and self.txn is not None and self.start is not None
                and not self.must_abort and self.producer is not None
                and (positions := self.reader.known_positions())):
            self.send_offsets(self.reader, self.txn, positions, pipeline=False)
        committed = super().op_commit(op)
        if committed:
            self.start = None
        else:
            self._rewind()
        return committed

    def op_abort(self, op):
        opened = self.txn is not None
        super().op_abort(op)
        if opened:
            self._rewind()

    def _rewind(self) -> None:
        """Back to where this transaction began reading (where its group's committed
        offsets stand, when it sends them); a partition it had not read before starts
        where the reader started. If the
        watermarks cannot be had, a new reader starts there, as a restart would."""
        if self.start is not None:
            try:
                self.reader.seek_to(self.reader.at(self.start))
            except KafkaException:
                self.reader.close()
                self._new_reader()
        self.start = None

    def _new_reader(self) -> None:
        spec = dict(self.spec, config={"isolation.level": "read_committed"})
        self.reader = TopicConsumer(self.cid, spec, self.plan, self.ctx, self.process)

    def close(self):
        self.reader.close()
        self.producer = None

    def crash(self):
        self.reader.crash()
        super().crash()


CLIENTS = {cls.role: cls for cls in (PlainProducer, TxnProducer, TopicConsumer, Pipeline,
                                     ReadWriteTxn)}
