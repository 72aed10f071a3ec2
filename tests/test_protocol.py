"""The harness <-> client-process protocol is one table (run/protocol.py), and both sides
follow it: the Python host builds and reads its messages in the table's order, the Java
agent carries the table as constants and says no message kind, outcome or field position
of its own, and docs/protocol.md shows the table as it is. No cluster, no JVM."""
from __future__ import annotations

import queue
import re
import threading
import time
from pathlib import Path

from onceproof.history.read import read_events
from onceproof.history.writer import HistoryWriter
from onceproof.run import clients, host, protocol
from onceproof.run.clients import RunContext
from onceproof.run.protocol import (
    CLIENT,
    COMPLETE,
    DONE,
    HARNESS,
    INVOKE,
    MESSAGES,
    OUTCOMES,
    RUN,
    START_REQUEST,
    VALUES,
    WRITTEN,
    message,
)

ROOT = Path(__file__).resolve().parent.parent
AGENT = ROOT / "harness" / "run" / "java" / "OnceproofAgent.java"
BEGIN = "// ---- the protocol:"
END = "// ---- end of the protocol"


def _agent() -> tuple[str, str]:
    """The agent's protocol block, and its code without the block or comments."""
    source = AGENT.read_text()
    start, end = source.index(BEGIN), source.index(END)
    block = source[source.index("\n", start) + 1:end]
    block = "\n".join(line for line in block.splitlines() if not line.strip().startswith("//"))
    code = source[:start] + source[source.index("\n", end):]
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", code, flags=re.S)
    return block.rstrip(), code


def _calls(code: str, name: str) -> list[list[str]]:
    """The arguments of every call `name(...)` in `code`, split at top-level commas."""
    calls = []
    for m in re.finditer(rf"\b{name}\(", code):
        depth, args, arg = 1, [], ""
        for ch in code[m.end():]:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth == 0:
                    break
            if ch == "," and depth == 1:
                args.append(arg.strip())
                arg = ""
            else:
                arg += ch
        calls.append([*args, arg.strip()])
    return calls


def test_the_agent_carries_the_table_as_it_is():
    block, _ = _agent()
    assert block == protocol.java_block(), "paste `python -m onceproof.run.protocol` into the agent"


def test_the_agent_says_no_kind_outcome_or_position_of_its_own():
    _, code = _agent()
    words = {m.kind for m in MESSAGES} | set(OUTCOMES)
    literals = set(re.findall(r'(?:send|ask|equals)\(\s*"(\w+)"', code))
    literals |= set(re.findall(r'new Object\[\]\{\s*"(\w+)"', code))
    assert not literals & words, literals & words
    # A message's fields by the table's names, not by number (its kind is at 0).
    assert not re.findall(r"\b(?:message|start)\.get\([1-9]", code)


def test_the_agent_sends_every_client_message_with_the_tables_fields():
    _, code = _agent()
    sent: dict[str, set[int]] = {}
    for call in _calls(code, "send") + _calls(code, "ask"):
        if call and call[0] in {m.kind.upper() for m in MESSAGES}:
            sent.setdefault(call[0].lower(), set()).add(len(call) - 1)
    assert sent == {m.kind: {len(m.fields)} for m in MESSAGES if m.sender == CLIENT}, sent
    # What a done may say: each outcome, from the agent's constants.
    assert set(re.findall(r"\b(KAFKA|STUCK|BUG)\b", code)) == {o.upper() for o in OUTCOMES}


def test_the_agent_reads_every_field_the_harness_sends():
    _, code = _agent()
    both = {m.kind for m in MESSAGES if m.sender == CLIENT} & {m.kind for m in MESSAGES
                                                              if m.sender == HARNESS}
    wanted = {f"{'TO_CLIENT_' if m.kind in both else ''}{m.kind}_{f}".upper()
              for m in MESSAGES if m.sender == HARNESS for f in m.fields}
    unread = {name for name in wanted | {"START_REQUEST"} if not re.search(rf"\b{name}\b", code)}
    assert not unread, unread


def test_docs_protocol_shows_the_table():
    assert protocol.reference() in (ROOT / "docs" / "protocol.md").read_text(), \
        "paste onceproof.run.protocol.reference() into docs/protocol.md"


def test_a_message_is_built_in_the_tables_order():
    assert message(CLIENT, DONE, detail="d", req=4, kind="kafka") == (DONE, 4, "kafka", "d")
    try:
        message(CLIENT, DONE, req=4)
    except ValueError as exc:
        assert "req, kind, detail" in str(exc)
    else:
        raise AssertionError("a message missing fields was built")


class _Pipe:
    """One end of a connection: what was sent, and what the other end will send."""

    def __init__(self, incoming=()):
        self.sent: list = []
        self.incoming: queue.SimpleQueue = queue.SimpleQueue()
        for m in incoming:
            self.incoming.put(m)

    def send(self, m) -> None:
        self.sent.append(m)

    def recv(self):
        m = self.incoming.get(timeout=10)
        if m is EOFError:
            raise EOFError
        return m

    def close(self) -> None:
        pass


def test_the_python_host_reads_and_answers_the_tables_messages(tmp_path):
    pipe = _Pipe()

    class Scripted(host.HostedClient):
        def _launch(self, *args):
            return pipe

        def crash(self) -> None:
            pass

        def _exit_code(self):
            return 0

    value = {"records": [{"topic": "t", "partition": 0, "value": 1}]}
    for m in (message(CLIENT, INVOKE, local=0, process="p0", f="send", value=value,
                      txn="p0/1", final=False),
              message(CLIENT, VALUES, local=1, count=5),
              message(CLIENT, COMPLETE, local=0, type="ok", value={**value, "txn_protocol": 2},
                      error=None),
              message(CLIENT, DONE, req=START_REQUEST, kind=None, detail=None)):
        pipe.incoming.put(m)
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        ctx = RunContext(writer, {}, "r", {"t": 1})
        client = Scripted("p0", {"role": "producer"}, {}, ctx, "p0")
        client.wait_started()
        assert pipe.sent == [message(HARNESS, WRITTEN, local=0),
                             message(HARNESS, VALUES, local=1, first=1)]
        pipe.incoming.put(EOFError)
        assert ctx.values.value == 5 and ctx.txn_protocols == {2: 1}
    events = read_events(tmp_path / "history.jsonl")
    assert [(e["process"], e["f"], e["type"], e.get("txn")) for e in events] == [
        ("p0", "send", "invoke", "p0/1"), ("p0", "send", "ok", "p0/1")]
    assert events[1]["value"]["records"] == value["records"]


def test_the_python_client_side_sends_the_tables_messages(monkeypatch):
    # A client process's note of a call it abandoned (clients.bounded) makes its next
    # DONE say "stuck"; this test's process starts with none.
    monkeypatch.setattr(clients, "abandoned", [])
    conn = _Pipe()
    forward = host.Forwarder(conn)
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(
        forward.invoke("p0", "poll", {"n": 1}, None, True)))
    t.start()
    while not conn.sent:
        t.join(0.01)
    forward.written(0)  # what the harness's written does
    t.join(5)
    forward.complete(0, "info", None, "timed out")
    assert conn.sent == [
        message(CLIENT, INVOKE, local=0, process="p0", f="poll", value={"n": 1}, txn=None,
                final=True),
        message(CLIENT, COMPLETE, local=0, type="info", value=None, error="timed out")]

    class Client:
        def run(self, op, lane):
            ran.append((op, lane))

    ran: list = []
    requests: queue.SimpleQueue = queue.SimpleQueue()
    requests.put(message(HARNESS, RUN, req=7, op={"f": "send"}, lane=2))
    threading.Thread(target=host._lane, args=(Client(), forward, requests), daemon=True).start()
    deadline = time.monotonic() + 5
    while len(conn.sent) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == [({"f": "send"}, 2)]
    assert conn.sent[2] == message(CLIENT, DONE, req=7, kind=None, detail=None)

    clients.abandoned.append("commit_transaction did not return")
    requests.put(message(HARNESS, RUN, req=8, op={"f": "send"}, lane=2))
    deadline = time.monotonic() + 5
    while len(conn.sent) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert conn.sent[3] == message(CLIENT, DONE, req=8, kind=host.STUCK,
                                   detail="commit_transaction did not return")
