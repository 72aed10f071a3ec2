"""Known upstream issues, as data, and which of a verdict's anomalies each one explains.

A nightly run should fail on a new problem, not on a client bug everyone already knows
about. CATALOGUE holds one `KnownIssue` per bug that docs/findings.md traced: the issue
and where it is filed, whether it is open or fixed (and in which release), the client
or broker releases it affects, and the signature it leaves in a verdict, in words beside
the function that matches it. `match(verdict)` names, per anomaly type, the known issue
its anomalies match and how many of them; `annotate` stores that in the verdict
(`Verdict.known`). A match is shown beside the anomaly, never in its place: only the exit
code may change, and only under `--known-issues report` (MODES), when every anomaly that
fails the verdict matches a known issue (`Verdict.fails`). A type with even one anomaly
no issue explains still fails.

What a signature can see is what a verdict carries: the anomaly's type, and for every
anomaly of a failing type its witnesses' shape (`Verdict.shapes`: each witness's role,
op kind, process and whether it was in a transaction), and what the run tested
(`Verdict.tested`: the client libraries and their releases, the Kafka release, and when
the harness ran the plan, each plan client's library and whether its producer is
idempotent). A signature that needs more than that (a leader change before a
duplicate, say) says so in its words and matches without it: a match is a pointer to
read, not a proof. Where the verdict lacks what a signature needs (a verdict older than
`shapes`, a client whose library is not known), nothing matches.

`python docs/known_issues.py` writes docs/known-issues.md from CATALOGUE.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

from onceproof.history.format import SEND, SEND_OFFSETS

# --known-issues: fail (every failing anomaly fails the run, known or not) or report
# (a run whose every failing anomaly matches a known issue passes; it is still shown).
FAIL, REPORT = "fail", "report"
MODES = (FAIL, REPORT)
OPEN = "open"

LIBRDKAFKA, JAVA, KAFKA = "librdkafka", "java", "kafka"


def release(text: str | None) -> tuple[int, ...] | None:
    """A release's numbers, `2.16.0` -> (2, 16, 0) (a suffix such as `-RC1` ignored);
    None when the text names none."""
    m = re.match(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(x) for x in m.group(0).split(".")) if m else None


@dataclass(frozen=True)
class Releases:
    """The releases of one library an issue affects: from `first` (None: every earlier
    one too) up to, not including, `fixed` (None: no release fixes it yet)."""
    library: str  # LIBRDKAFKA, JAVA (the Java client) or KAFKA (the broker)
    first: str | None = None
    fixed: str | None = None

    def covers(self, version: str | None) -> bool:
        v = release(version)
        if v is None:
            return False
        return ((self.first is None or v >= (release(self.first) or ()))
                and (self.fixed is None or v < (release(self.fixed) or ())))

    @property
    def text(self) -> str:
        lo = f"{self.first} and later" if self.first else "every release"
        return f"{self.library} {lo}" + (f", before {self.fixed}" if self.fixed else
                                          ", no fixed release yet")


@dataclass(frozen=True)
class Client:
    """What a verdict says of the client process behind a witness."""
    library: str | None
    version: str | None
    idempotent: bool | None  # its producer's enable.idempotence, when known


# One anomaly's witnesses, from Verdict.shapes: [{role, f, process, txn}], and a way to
# learn each process's client.
Witnesses = list[dict]
Signature = Callable[[Witnesses, Callable[[str], Client]], bool]


@dataclass(frozen=True)
class KnownIssue:
    id: str  # "librdkafka #5511": the tracker and the issue's number there
    title: str
    links: tuple[str, ...]  # the issue first, then related issues and fix PRs
    state: str  # OPEN, or "fixed in <library> <release>"
    affects: tuple[Releases, ...]  # every one must cover the run for a match
    anomaly: str | None  # the anomaly type it leaves; None: none a verdict can hold
    op_kind: str | None  # the op kind of the witness the signature is about
    signature: str  # the anomaly signature, in words: what `matches` checks, and what not
    documented: str  # where docs/findings.md traced it (a path with its heading's anchor)
    matches: Signature | None = None  # None: it leaves no anomaly, so matches nothing

    @property
    def text(self) -> str:
        return f"{self.id}, {self.state}"


def _librdkafka_send_offsets_stall(ws: Witnesses, client: Callable[[str], Client]) -> bool:
    return any(w["role"] == "call" and w["f"] == SEND_OFFSETS
               and client(w["process"]).library == LIBRDKAFKA for w in ws)


def _librdkafka_idempotent_duplicate(ws: Witnesses, client: Callable[[str], Client]) -> bool:
    writers = [w for w in ws if w["role"] == "writer"]
    return bool(writers) and all(
        w["f"] == SEND and not w["txn"] and client(w["process"]).library == LIBRDKAFKA
        and client(w["process"]).idempotent is True for w in writers)


CATALOGUE: tuple[KnownIssue, ...] = (
    KnownIssue(
        id="librdkafka #5511",
        title="rd_kafka_send_offsets_to_transaction() hangs past its timeout when the group "
              "coordinator goes away (also librdkafka #5456: the coordinator request's "
              "timeout is never checked)",
        links=("https://github.com/confluentinc/librdkafka/issues/5511",
               "https://github.com/confluentinc/librdkafka/issues/5456",
               "https://github.com/confluentinc/librdkafka/pull/5457"),
        state=OPEN,
        # #5456 dates the unchecked timeout to 1.4.0; reproduced here on 2.16.0.
        affects=(Releases(LIBRDKAFKA, first="1.4.0"),),
        anomaly="late_return", op_kind=SEND_OFFSETS,
        signature="a late_return whose call is a send_offsets (send_offsets_to_transaction) "
                  "of a client on librdkafka, on any Kafka release: the call outlived its "
                  "timeout by more than the grace, or never returned. It follows a broken "
                  "connection to the group coordinator (the coordinator killed, restarted or "
                  "only its connections reset), which the verdict does not hold; a "
                  "send_offsets stall of the Java client, or a stall of any other call, "
                  "does not match.",
        documented="docs/findings.md#finding-send_offsets_to_transaction-stalls-past-its-"
                   "timeout-after-the-group-coordinator-restarts-kafka-392",
        matches=_librdkafka_send_offsets_stall),
    KnownIssue(
        id="librdkafka #4953",
        title="the idempotent producer writes a record twice after an OUT_OF_ORDER_SEQUENCE "
              "during a leader change (it bumps its epoch and resends batches that may be "
              "in the log)",
        links=("https://github.com/confluentinc/librdkafka/issues/4953",
               "https://github.com/confluentinc/librdkafka/pull/4972"),
        state=OPEN,
        affects=(Releases(LIBRDKAFKA),),
        anomaly="duplicate", op_kind=SEND,
        signature="a duplicate whose every writer is a send outside a transaction by a "
                  "client on librdkafka whose producer is idempotent "
                  "(enable.idempotence=true in the plan), on any Kafka release. The "
                  "leader change it needs is not in the verdict and is not checked. A "
                  "duplicate of a transactional send, of a producer without idempotence "
                  "(the application's settings, not this bug), of the Java client, or of a "
                  "run whose plan is not known, does not match.",
        documented="docs/findings.md#finding-the-idempotent-producer-writes-a-record-twice-"
                   "after-a-leader-dies-kafka-431",
        matches=_librdkafka_idempotent_duplicate),
    KnownIssue(
        id="librdkafka #5040",
        title="the admin client crashes (SIGSEGV in rd_kafka_cgrp_op) on "
              "ListConsumerGroupOffsets when the group coordinator is loading or moved",
        links=("https://github.com/confluentinc/librdkafka/issues/5040",
               "https://github.com/confluentinc/confluent-kafka-python/issues/1982"),
        state=OPEN,
        # Reported on 2.4.0; seen here on 2.16.0.
        affects=(Releases(LIBRDKAFKA, first="2.4.0"),),
        anomaly=None, op_kind=None,
        signature="none a verdict can hold: the process that calls the admin client's "
                  "list_consumer_group_offsets dies with SIGSEGV. No op of a history makes "
                  "that call (the harness's readiness probe asks a consumer's committed() "
                  "instead), so no anomaly matches it; it is listed so that the crash is "
                  "recognised when it is seen.",
        documented="docs/findings.md#seen-on-the-way-librdkafka-crashes-on-"
                   "listconsumergroupoffsets-of-a-coordinator-that-is-loading"),
)
BY_ID = {issue.id: issue for issue in CATALOGUE}


@dataclass(frozen=True)
class KnownMatch:
    """`count` of the `of` anomalies of type `type` match `issue`."""
    issue: str
    state: str
    type: str
    count: int
    of: int
    link: str
    documented: str

    @property
    def text(self) -> str:
        return f"matches {self.issue}, {self.state}"


def match_text(m: dict) -> str:
    """A stored match (Verdict.known) in words: "matches librdkafka #5511, open", with
    how many of the type's anomalies when not all."""
    part = "" if m["count"] >= m["of"] else f" ({m['count']} of {m['of']})"
    return f"matches {m['issue']}, {m['state']}{part}"


def _clients(tested: dict) -> Callable[[str], Client]:
    """process -> its Client, from what a verdict says the run tested: each plan
    client's library (`plan_clients`, when the harness ran the plan), else the one
    library of the run when it had one."""
    versions = tested.get("clients") or {}
    plan = tested.get("plan_clients") or {}
    only = next(iter(versions)) if len(versions) == 1 else None

    def client(process: str) -> Client:
        # A process is its plan client's id, then `.N` for the Nth replacement and
        # `~N` for a thread (run/fleet.py, run/clients.py).
        cid = (process or "").split("~")[0]
        if cid not in plan and "." in cid:
            cid = cid.rsplit(".", 1)[0]
        spec = plan.get(cid)
        library = spec.get("library") if spec else (None if plan else only)
        idempotent = spec.get("idempotent") if spec else None
        return Client(library, versions.get(library) if library else None, idempotent)
    return client


def _affected(issue: KnownIssue, tested: dict) -> bool:
    versions = {**(tested.get("clients") or {}), KAFKA: tested.get("kafka_version")}
    return all(r.covers(versions.get(r.library)) for r in issue.affects)


def match(verdict) -> list[KnownMatch]:
    """The known issues the verdict's failing anomalies match: per type, each issue
    with how many of its anomalies (Verdict.shapes) it explains; an anomaly counts for
    the first issue that matches it. Pure: reads the verdict, changes nothing."""
    client = _clients(verdict.tested or {})
    out = []
    for t in verdict.failing:
        issues = [i for i in CATALOGUE if i.anomaly == t and i.matches is not None
                  and _affected(i, verdict.tested or {})]
        counted: dict[str, int] = {}
        for shape in verdict.shapes.get(t) or []:
            ws = shape.get("witnesses")
            if ws is None:
                continue  # the rest, beyond what the verdict kept: matches nothing
            for issue in issues:
                assert issue.matches is not None
                if issue.matches(ws, client):
                    counted[issue.id] = counted.get(issue.id, 0) + int(shape["n"])
                    break
        for iid, n in counted.items():
            issue = BY_ID[iid]
            out.append(KnownMatch(iid, issue.state, t, n, int(verdict.counts.get(t, n)),
                                  issue.links[0], issue.documented))
    return sorted(out, key=lambda m: (m.type, m.issue))


def annotate(verdict) -> None:
    """Store in the verdict the known issues its anomalies match (Verdict.known)."""
    verdict.known = [asdict(m) for m in match(verdict)]
