"""Each client process of a run in an operating-system process of its own.

Why: a client library call can block for good (librdkafka 5456 and 5511:
send_offsets_to_transaction after its group coordinator moved). Inside the harness's own
process such a call can only be abandoned, and its thread keeps the client instance, its
threads and buffers until the run ends: a 30-minute soak grew by about 4 MiB per hung
call. In a process of its own, a stuck client goes with its process: the harness kills it
and starts the next incarnation, as a supervisor restarts a stuck application. A crash
that a plan schedules is then what it claims to be, a kill -9 of the client's process,
with whatever its library had buffered lost.

The client classes (run/clients.py) run unchanged in the host. They record through a
Forwarder, which sends each event to the harness (the messages of run/protocol.py),
where one HistoryWriter writes the history. An invoke waits until the harness has
written it, so the history's order (its index, which the checkers read as real time)
never puts an invoke after what its call did; a completion is sent without waiting,
which can only widen its op's window.

Hosts come from a fork server started once per harness process, whose memory holds the
client code already imported: a new host costs a fork, not an interpreter. A host dies
with the fork server (PR_SET_PDEATHSIG), and the fork server with the harness, so a crash
of the harness leaves no client process behind.
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
import time
import traceback
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing import spawn
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from onceproof.cluster.procs import die_with_parent, name_process
from onceproof.history.writer import Recorder
from onceproof.memory import for_running, trim
from onceproof.run import clients
from onceproof.run.clients import CLIENTS, HANG_GRACE, OP_TIMEOUT, PROCESSES, RunContext
from onceproof.run.protocol import (
    BUG,
    CLOSE,
    COMPLETE,
    DONE,
    INVOKE,
    KAFKA,
    RUN,
    START_REQUEST,
    STUCK,
    VALUES,
    WRITTEN,
)

PROCESSES.set_forkserver_preload(["onceproof.run.host"])
# One start at a time: multiprocessing's bookkeeping of its children is not thread-safe.
_starting = threading.Lock()
# How often a host gives back what malloc keeps freed (see harness/memory.py).
TRIM_EVERY = 30.0
# How long a new host may take to make its client (a consumer waits for its positions).
START_TIMEOUT = 60.0
# What the harness makes of a request whose process ended, besides run/protocol.py's
# outcomes.
GONE = "gone"


def _start(proc) -> None:
    """Start `proc` without having it run the harness's main script again.

    multiprocessing has every process it starts import its parent's `__main__` (the
    `onceproof` script, a bench, pytest), which loads the checkers, pandas and Arrow: a
    host then took about 85 MiB (PSS, nine hosts of a load_bench.py run), and 19 MiB
    without it. A host has what it needs from the fork server's preload, so the main
    script is left out of what the new process is told to prepare."""
    def without_main(name: str) -> dict:
        data = prepare(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    with _starting:
        prepare = spawn.get_preparation_data
        spawn.get_preparation_data = without_main
        try:
            proc.start()
        finally:
            spawn.get_preparation_data = prepare


class Stuck(KafkaException):
    """A client process holds a library call that did not return long after its
    timeout: the process is of no more use, and the harness replaces it."""


class Gone(KafkaException):
    """A client process that ended while the harness was waiting on it: killed by the
    harness (a crash, a replacement) or dead on its own."""


class HostedClient:
    """The harness's handle on one client process: the same calls as a Client (run,
    close, crash), each carried out in the host."""

    def __init__(self, cid: str, spec: dict, plan: dict, ctx: RunContext, process: str):
        self.cid, self.process = cid, process
        self._writer = ctx.writer
        self._lock = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._gone: str | None = None
        self._ids: dict[int, int] = {}  # the host's op ids -> the history's
        self._requests = itertools.count()
        self._values, self._protocols = ctx.values, ctx.txn_protocols
        started = self._expect(START_REQUEST)
        self._conn = self._launch(cid, spec, plan, ctx, process)
        threading.Thread(target=self._read, daemon=True,
                         name=f"onceproof-host-{process}").start()
        self._started = started

    def _launch(self, cid: str, spec: dict, plan: dict, ctx: RunContext, process: str):
        """Start the client's process; returns the harness's end of the connection to it
        (send, recv, close)."""
        context = {"connection": ctx.connection, "run_id": ctx.run_id,
                   "partitions": ctx.partitions, "clients": ctx.clients, "logs": ctx.logs,
                   "identities": dict(ctx.identities)}
        ours, theirs = PROCESSES.Pipe()
        self._proc = PROCESSES.Process(target=serve, name=f"onceproof-client-{process}", daemon=True,
                                       args=(theirs, cid, spec, plan, context, process, ctx.values))
        _start(self._proc)
        theirs.close()
        return ours

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def alive(self) -> bool:
        """Whether its process is still running (or stopped), not ended."""
        return self._proc.exitcode is None

    def signal(self, sig: int) -> bool:
        """Send its process a signal (SIGSTOP, SIGCONT: a client-side fault); whether
        it was there to get it."""
        if self.pid is None or not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def wait_started(self) -> None:
        """Returns once the host has made its client; raises what making it raised."""
        try:
            self._outcome(self._started.result(START_TIMEOUT))
        except FutureTimeout:
            self.crash()
            raise Gone(f"client {self.process} did not start in {START_TIMEOUT:.0f} s") from None
        except KafkaException:
            self.crash()
            raise

    def run(self, op: dict, lane: int = 0) -> None:
        req = next(self._requests)
        self._outcome(self._call(req, (RUN, req, op, lane)).result())

    def close(self) -> None:
        """Close the client as an application shutting down would, then end its process."""
        req = next(self._requests)
        try:
            self._outcome(self._call(req, (CLOSE, req)).result(OP_TIMEOUT + HANG_GRACE))
        except (FutureTimeout, KafkaException):
            pass  # closing records nothing: a client that cannot close is ended below
        finally:
            self.crash()

    def crash(self) -> None:
        """Kill the process as kill -9 would: nothing flushed, committed or aborted."""
        self._proc.kill()
        self._proc.join(10)

    def _exit_code(self) -> int | None:
        """The process's exit code, once it has ended (waiting a second for it)."""
        self._proc.join(1)
        return self._proc.exitcode

    # ---- the harness's side of the pipe ----------------------------------------------

    def _expect(self, req: int) -> Future:
        fut: Future = Future()
        with self._lock:
            if self._gone is not None:
                fut.set_result((GONE, self._gone))
            else:
                self._waiting[req] = fut
        return fut

    def _call(self, req: int, message: tuple) -> Future:
        fut = self._expect(req)
        if not fut.done():
            try:
                self._send(message)
            except OSError:
                pass  # the process is gone: the reader answers every request so
        return fut

    def _send(self, message: tuple) -> None:
        with self._lock:
            self._conn.send(message)

    def _read(self) -> None:
        why, kind = "it ended", GONE
        try:
            while True:
                message = self._conn.recv()
                kind = message[0]
                if kind == INVOKE:
                    _, local, process, f, value, txn, final = message
                    self._ids[local] = self._writer.invoke(process, f, value, txn, final)
                    self._send((WRITTEN, local))
                elif kind == COMPLETE:
                    _, local, type_, value, error = message
                    self._writer.complete(self._ids.pop(local), type_, value, error)
                    if value and "txn_protocol" in value:
                        self._protocols[value["txn_protocol"]] += 1
                elif kind == VALUES:  # a block of the run's values, for a Java client
                    _, local, count = message
                    with self._values.get_lock():
                        first = self._values.value + 1
                        self._values.value += count
                    self._send((VALUES, local, first))
                else:  # done
                    with self._lock:
                        fut = self._waiting.pop(message[1], None)
                    if fut is not None:
                        fut.set_result(message[2:])
        except (EOFError, OSError):
            if (code := self._exit_code()) is not None:
                why = f"its process ended (exit code {code})"
            kind = GONE
        except BaseException:  # a bug of the harness: every waiting call raises it
            why, kind = traceback.format_exc(), BUG
            self.crash()
        finally:
            with self._lock:
                self._gone = why
                waiting, self._waiting = self._waiting, {}
            for fut in waiting.values():
                fut.set_result((kind, why))
            self._conn.close()

    def _outcome(self, outcome: tuple) -> None:
        kind, detail = outcome
        if kind is None:
            return
        if kind == KAFKA:
            raise KafkaException(detail)
        if kind == STUCK:
            raise Stuck(detail)
        if kind == GONE:
            raise Gone(f"client {self.process}: {detail}")
        raise RuntimeError(f"client {self.process} failed in its process:\n{detail}")


# ---- the host's side ---------------------------------------------------------------


class Forwarder(Recorder):
    """What a client in a host records through: the HistoryWriter calls the clients
    make, sent to the harness. An invoke returns once the harness has written it."""

    def __init__(self, conn):
        self._conn = conn
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._written: dict[int, threading.Event] = {}

    def send(self, message: tuple) -> None:
        with self._lock:
            self._conn.send(message)

    def written(self, local: int) -> None:
        self._written.pop(local).set()

    def invoke(self, process: str, f: str, value: dict | None, txn: str | None = None,
               final: bool = False) -> int:
        done = threading.Event()
        with self._lock:
            local = next(self._ids)
            self._written[local] = done
            self._conn.send((INVOKE, local, process, f, value, txn, final))
        done.wait()  # a harness that is gone ends this process (serve)
        return local

    def complete(self, op: int, type: str, value: dict | None = None,
                 error: str | None = None) -> None:
        self.send((COMPLETE, op, type, value, error))


def serve(conn, cid: str, spec: dict, plan: dict, context: dict, process: str,
          values: Any) -> None:
    """A host's life: make the client, then carry out the harness's requests, each
    lane's in a thread of its own, until the harness ends the process."""
    die_with_parent()
    name_process(f"onceproof {process}")
    for_running()  # before the client's threads: see harness/memory.py
    forward = Forwarder(conn)
    made: dict[str, Any] = {}
    if context.get("logs") and clients.asks_for_debug_log(plan, spec):
        _stderr_to(Path(context["logs"]), process)

    def make() -> None:
        # In a thread of its own: making a client records ops (a consumer's assign),
        # and their invokes wait for the harness's answers, which this loop reads.
        try:
            made["client"] = CLIENTS[spec["role"]](
                cid, spec, plan, RunContext(forward, values=values, **context), process)
        except KafkaException as exc:
            forward.send((DONE, START_REQUEST, KAFKA, str(exc)))
        except BaseException:
            forward.send((DONE, START_REQUEST, BUG, traceback.format_exc()))
        else:
            forward.send((DONE, START_REQUEST, None, None))

    threading.Thread(target=make, daemon=True, name="onceproof-make").start()
    lanes: dict[Any, queue.SimpleQueue] = {}
    trimmed = time.monotonic()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)  # the harness is gone, and so is every reason to run
        if message[0] == WRITTEN:
            forward.written(message[1])
        elif "client" in made:  # the harness asks for nothing before the client is made
            lane = message[3] if message[0] == RUN else CLOSE
            if lane not in lanes:
                lanes[lane] = queue.SimpleQueue()
                threading.Thread(target=_lane, args=(made["client"], forward, lanes[lane]),
                                 daemon=True, name=f"onceproof-lane-{lane}").start()
            lanes[lane].put(message)
        if time.monotonic() - trimmed > TRIM_EVERY:
            trim()
            trimmed = time.monotonic()


def _stderr_to(folder: Path, process: str) -> None:
    """Send this process's stderr, where librdkafka prints its debug log (run/clients.py
    log_settings), to folder/<process>.librdkafka.log. librdkafka stamps each line with
    the wall clock, the history with the monotonic one: the first line gives both at one
    instant."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{process}.librdkafka.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, (f"# librdkafka's debug log of {process}: wall clock "
                  f"{time.time():.6f} s = the history's time {time.monotonic_ns()} ns\n").encode())
    os.dup2(fd, 2)
    os.close(fd)


def _lane(client, forward: Forwarder, requests: queue.SimpleQueue) -> None:
    while True:
        message = requests.get()
        req = message[1]
        try:
            if message[0] == RUN:
                client.run(message[2], message[3])
            else:
                client.close()
        except KafkaException as exc:
            forward.send((DONE, req, KAFKA, str(exc)))
        except BaseException:
            forward.send((DONE, req, BUG, traceback.format_exc()))
        else:
            stuck = clients.abandoned[:1]
            forward.send((DONE, req, STUCK, stuck[0]) if stuck else (DONE, req, None, None))
