"""The protocol between the harness and a client process, defined once: every message
the harness sends a client process, every message a client process sends back, and
their fields. The Python host (run/host.py) builds and reads its messages in this order,
and the Java agent (run/java/OnceproofAgent.java) carries `java_block()` pasted in and
uses its names; tests/test_protocol.py checks both against this table, and checks the
table of docs/protocol.md against `reference()`.

Why one definition: a message is a list whose first item is its kind and whose other
items are its fields, by position, so a field added on one side only shifts every
field after it on the other, silently. Positions rather than named fields because an
invoke is on the path of every op, and a librdkafka host pickles it through a pipe.
"""
from __future__ import annotations

from dataclasses import dataclass

HARNESS, CLIENT = "harness", "client"  # who sends a message

# The kinds of message.
START, RUN, CLOSE, WRITTEN, VALUES = "start", "run", "close", "written", "values"
INVOKE, COMPLETE, DONE = "invoke", "complete", "done"
# What a done says its request ended with, besides success (null): a client library error
# that escaped the op (the process is replaced), a call the process gave up on (it is
# stuck, and replaced), or a bug of the client process (its stack trace).
KAFKA, STUCK, BUG = "kafka", "stuck", "bug"
OUTCOMES = (KAFKA, STUCK, BUG)
# The request id a done of the client's making answers.
START_REQUEST = -1


@dataclass(frozen=True)
class Message:
    kind: str
    sender: str
    fields: tuple[str, ...]
    meaning: str

    def at(self, field: str) -> int:
        """Where `field` is in the message (the kind is at 0)."""
        return 1 + self.fields.index(field)


MESSAGES = (
    Message(START, HARNESS, ("cid", "spec", "context", "process"),
            "make the client: plan client `cid` as process `process`, from its plan `spec` and "
            "the run's `context`; answered by a done of request -1. Only a JVM gets it as a "
            "message: a librdkafka host gets the same as the arguments of its process"),
    Message(RUN, HARNESS, ("req", "op", "lane"),
            "run plan op `op` in lane `lane` (a thread of a multi-threaded producer; ops of "
            "one lane run one at a time); answered by a done of `req`"),
    Message(CLOSE, HARNESS, ("req",),
            "close the client as an application shutting down would; answered by a done of `req`"),
    Message(WRITTEN, HARNESS, ("local",),
            "the invoke `local` is in the history: the call it announced may start"),
    Message(VALUES, HARNESS, ("local", "first"),
            "the block of write values asked for by `local` starts at `first`"),
    Message(INVOKE, CLIENT, ("local", "process", "f", "value", "txn", "final"),
            "an op starts: record an invoke (docs/history.md) and answer with a written of "
            "`local`, the op's id in this process"),
    Message(COMPLETE, CLIENT, ("local", "type", "value", "error"),
            "op `local` ended: record its completion, `type` ok, fail or info; not answered"),
    Message(VALUES, CLIENT, ("local", "count"),
            "take `count` write values from the run's counter, unique across its processes; "
            "answered by a values of `local` (a librdkafka host shares the counter instead)"),
    Message(DONE, CLIENT, ("req", "kind", "detail"),
            "request `req` ended: `kind` null for success, else kafka, stuck or bug, with "
            "`detail` saying what"),
)
BY_KIND = {(m.sender, m.kind): m for m in MESSAGES}


def message(sender: str, kind: str, /, **fields) -> tuple:
    """A message of `kind` from `sender`, its fields put in their order."""
    spec = BY_KIND[sender, kind]
    if set(fields) != set(spec.fields):
        raise ValueError(f"a {kind} from the {sender} has the fields {', '.join(spec.fields)}")
    return (kind, *(fields[f] for f in spec.fields))


def java_block() -> str:
    """The protocol as Java constants, as OnceproofAgent.java carries them: the kinds, the
    outcomes, and each field's position as KIND_FIELD (for a kind both sides send, the
    sender's side: TO_CLIENT_ or TO_HARNESS_ first)."""
    def const(name: str) -> str:
        return name.upper()

    def strings(names) -> str:
        return "    static final String " + ", ".join(f'{const(n)} = "{n}"' for n in names) + ";"

    def ints(pairs) -> str:
        return "    static final int " + ", ".join(f"{name} = {at}" for name, at in pairs) + ";"

    lines = [strings(dict.fromkeys(m.kind for m in MESSAGES)), strings(OUTCOMES),
             ints([("START_REQUEST", START_REQUEST)])]
    both = {m.kind for m in MESSAGES
            if (HARNESS if m.sender == CLIENT else CLIENT, m.kind) in BY_KIND}
    for m in MESSAGES:
        prefix = ("TO_CLIENT_" if m.sender == HARNESS else "TO_HARNESS_") if m.kind in both else ""
        lines.append(ints([(f"{prefix}{const(m.kind)}_{const(f)}", m.at(f)) for f in m.fields]))
    return "\n".join(lines)


def reference() -> str:
    """The table of docs/protocol.md."""
    rows = ["| from | message | meaning |", "| --- | --- | --- |"]
    for m in MESSAGES:
        shape = ", ".join([f'"{m.kind}"', *m.fields])
        rows.append(f"| {m.sender} | `[{shape}]` | {m.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":  # the block to paste into OnceproofAgent.java
    print(java_block())
