"""Every anomaly type, defined once, and the one shape every checker reports in.

A row is one concrete anomaly: its `type`, its `severity`, and the fields a person needs
to find it in the history (the process and op that saw or did it, the partition and
offset, the value, the transaction) plus a `detail` sentence, and `witnesses`: every op
the checker knows shows the anomaly, each with its role in it (the writer, the reader,
the source of a cycle's first edge...), as a list of {op, role}. `op` is always one of
them. The report links witnesses from this list, never from the detail's words.

REGISTRY holds, for each type: the family (the checkers module that finds it, whose
docstrings give the full reasoning), its severity, its definition (the one text the
report and docs/checkers.md show), and its witnesses: which of COLUMNS its rows fill
and what each holds, the roles its `witnesses` lists use (`roles`; N in "edge N
source" stands for the edge's number), and the other types one anomaly of it may also
be (`implies`, IMPLIES). Its order is the order a verdict lists types in.

Severity: a `violation` contradicts what Kafka claims and makes the history invalid; a
`note` is reported but does not, because Kafka does not claim to prevent it; `liveness`
is a stall (a call that overstayed its own timeout), not a wrong result: it leaves the
history valid and makes it not live. The cycle
types can be either: their checker decides each cycle from real time
(checkers/cycles.py).

This module imports no Spark: the report and the docs read the registry without a JVM.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType

import pandas as pd
import pyarrow as pa

VIOLATION, NOTE, LIVENESS = "violation", "note", "liveness"
# Decided per anomaly by its checker: a note, or a violation when the checker proves it.
EITHER = "note or violation"

COLUMNS = ("type", "severity", "process", "op", "topic", "partition", "offset", "value",
           "txn", "detail", "witnesses")
LONGS = frozenset({"op", "partition", "offset", "value"})
# One witness: an op id and its role in the anomaly.
WITNESS = pa.struct([("op", pa.int64()), ("role", pa.string())])
WITNESSES = pa.list_(WITNESS)
SCHEMA = pa.schema([(c, pa.int64() if c in LONGS else WITNESSES if c == "witnesses"
                     else pa.string()) for c in COLUMNS])


@dataclass(frozen=True)
class Anomaly:
    """One anomaly type. `witnesses` maps each column its rows fill, besides type and
    severity, to what that column holds for this type ("" when it needs no words); its
    entry for the `witnesses` column names every role, from `roles` (role -> which op
    has it). Every row's `witnesses` lists its `op` and uses only these roles."""

    name: str
    family: str
    severity: str
    definition: str
    witnesses: MappingProxyType
    roles: MappingProxyType
    # The other types that one anomaly of this type may also be, under their
    # definitions: where a check finds this, these may stand beside it for the same
    # misbehaviour (IMPLIES).
    implies: frozenset[str] = frozenset()

    def has_role(self, role: str) -> bool:
        return re.sub(r"^edge \d+ ", "edge N ", role) in self.roles

    def allows(self, severity: str) -> bool:
        return severity == self.severity or (self.severity == EITHER
                                             and severity in (NOTE, VIOLATION))


def _w(**fields: str) -> MappingProxyType:
    unknown = set(fields) - set(COLUMNS)
    if unknown:
        raise ValueError(f"not anomaly columns: {', '.join(sorted(unknown))}")
    return MappingProxyType({c: fields[c] for c in COLUMNS if c in fields})


def _a(name: str, family: str, definition: str, witnesses: MappingProxyType,
       roles: dict[str, str], severity: str = VIOLATION, implies: tuple[str, ...] = ()) -> Anomaly:
    if not roles:
        raise ValueError(f"{name}: every type names the roles of its witnesses")
    text = "; ".join(f"{role}: {' '.join(what.split())}" for role, what in roles.items())
    return Anomaly(name, family, severity, " ".join(definition.split()),
                   MappingProxyType({**witnesses, "witnesses": text}), MappingProxyType(roles),
                   frozenset(implies))


# The role of the op that committed a write's transaction, where a type's definition
# rests on the write being committed.
_COMMIT_OF_TXN = ("the commit_txn of the write's transaction, for a write in one (the one "
                  "that completed ok, else those that may have committed it)")

# Where most rows point: the op that did or saw it, in its partition.
_AT = {"process": "", "topic": "", "partition": ""}

REGISTRY: tuple[Anomaly, ...] = (
    # What each offset holds (log_values)
    _a("duplicate", "log_values", """
       One written value observed (by a read or a send's ack) at two or more distinct
       offsets of a partition. Each write appends its value once. Not judged in an output
       topic of an application the history declares (streams), whose writes it does not
       hold.""",
       _w(**_AT, op="the observation at the second offset", offset="the second offset",
          value="", txn="the observing op's transaction", detail="every offset"),
       roles={"writer": "the send of the value",
              "observer": "an op that observed the value (the send's ack or a poll), one per offset; "
                          "`op` is the one at the second offset"}),
    _a("inconsistent_offset", "log_values", """
       One offset of a partition observed holding two different values: the log was
       rewritten under a reader (a truncated and refilled leader).""",
       _w(**_AT, op="an observation of the second value", offset="", value="the second value",
          txn="the observing op's transaction", detail="every value observed there"),
       roles={"observer": "an op that observed a value at the offset (a send's ack or a poll), one "
                          "per value",
              "writer": "the send of each value observed there, when one wrote it"}),
    _a("unattributed_read", "log_values", """
       A poll returned a value that no send in the history wrote to that partition: no
       send wrote it, or one wrote it to another partition. Not judged in an output topic
       of an application the history declares (streams), whose writes it does not hold.""",
       _w(**_AT, op="the poll", offset="", value="", txn="the poll's transaction", detail=""),
       roles={"reader": "the poll",
              "writer": "the send that wrote the value to another partition, when one did"}),
    _a("corrupt_value", "log_values", """
       A poll returned a record whose value is not byte for byte the value its identity
       makes: a sized value (a plan's mix.value_bytes) is its identity, its size and
       padding derived from the identity alone (run/values.py), so a reader can verify
       every byte; this one differs from it (a changed byte, a truncated or extended
       value, a header that names no identity or size). The record is judged by the
       identity it names, which may itself be wrong: then it may also be another value's
       duplicate or be unattributed.""",
       _w(**_AT, op="the poll", offset="", value="the identity the value names (-1 when it "
          "names none)", txn="the poll's transaction",
          detail="where the value first differs from the one its identity makes"),
       roles={"reader": "the poll",
              "writer": "the send of the value its identity names, when one wrote it"},
       implies=("unattributed_read", "duplicate", "inconsistent_offset")),
    # Writes missing from the log (loss)
    _a("lost_write", "loss", """
       An acknowledged write (a send ok outside a transaction, or in a committed one)
       whose value no read ever returned, although some reader's scan surely went over
       its offset.""",
       _w(**_AT, op="the send", offset="null when only bounded", value="", txn="",
          detail="the bound, and the scan that covered it"),
       roles={"writer": "the send",
              "reader": "the last poll of a scan that went over it, one per reader process",
              "scan start": "where that scan began: the seek (or assign) whose position "
                            "began it, else the poll of its first read",
              "commit": _COMMIT_OF_TXN},
       # The reader whose scan went over it skipped the value its ack placed there.
       implies=("poll_skip",)),
    _a("unseen", "loss", """
       An acknowledged write that the final reads (polls marked final) did not return
       although they went over it: it was acknowledged before the final watermarks were read, so it lies below
       the final high watermark, and a final reader's scan covered every offset from at
       or below it up to where it must be. A write whose known offset is at or past the
       final high watermark is unseen too, with or without final reads: the log ends
       before it (a truncated acks=1 leader can leave the partition empty).""",
       _w(**_AT, op="the send", offset="null when only bounded", value="", txn="",
          detail="why it must have been seen"),
       roles={"writer": "the send",
              "final reader": "the last poll of a final scan that went over it, one per final "
                              "reader process",
              "scan start": "where that scan began: the seek (or assign) whose position "
                            "began it, else the poll of its first read",
              "watermarks": "the final watermarks op, when the write's offset is at or past their "
                            "high watermark",
              "commit": _COMMIT_OF_TXN}),
    _a("hanging_txn", "loss", """
       The last watermarks read show a partition's last stable offset below its high
       watermark, and no transaction that may hold it there can still be open as Kafka
       allows: they were read more than its transaction timeout plus 30 s after its
       last op (the timeout its begin_txn names, else Kafka's default, 60 s; the
       coordinator aborts a transaction that long after it began). A transaction never
       finished. Read sooner, the partition is not judged; held by a record written
       outside any transaction, or by none the history knows of, at once.""",
       _w(**_AT, op="the watermarks op", offset="the last stable offset",
          txn="the open transaction, when a write known at that offset names it",
          detail="the high watermark, and the open transaction and its producer (or the "
                 "transactions that may have written there)"),
       roles={"watermarks": "the last watermarks op",
              "writer": "the send of the record at the last stable offset, when known",
              "candidate writer": "else a send of each transaction (the first three) that did not "
                                  "commit and may have a record there"}),
    # Transactions and readers (isolation)
    _a("aborted_read", "isolation", """
       G1a: a poll (any isolation) returned a value written by a transaction that
       aborted or by a send that failed. A read_uncommitted consumer that sees aborted
       data is reported too: it is the known-bad configuration to catch.""",
       _w(**_AT, op="the poll", offset="", value="", txn="the writer's transaction",
          detail=""),
       roles={"reader": "the poll",
              "writer": "the send of the value (the failed send, or the aborted transaction's)",
              "abort": "what ended the writer's transaction aborted: its abort_txn, or its "
                       "commit_txn that failed (when the history has one)"}),
    _a("precommitted_read", "isolation", """
       A read_committed poll returned a value of a transaction and completed before that
       transaction's first commit_txn was invoked.""",
       _w(**_AT, op="the poll", offset="", value="", txn="the writer's transaction",
          detail="both event indexes"),
       roles={"reader": "the poll",
              "writer": "the send of the value",
              "commit": "the transaction's first commit_txn"}),
    _a("torn_txn", "isolation", """
       A committed transaction (a visible write proves an unknown one committed) some of
       whose appended writes read_committed polls returned while others are missing: no
       read_committed poll returned them although a read_committed reader's scan went
       over them.""",
       _w(**_AT, op="a missing write's send", offset="", value="", txn="",
          detail="a write that was seen"),
       roles={"missing writer": "the send of a write that read_committed readers went over without "
                                "returning (`op`)",
              "missing reader": "the last poll of a read_committed scan that went over it",
              "scan start": "where that scan began: the seek (or assign) whose position began it, "
                            "else the poll of its first read",
              "seen writer": "the send of a write they returned",
              "reader": "a read_committed poll that returned it",
              "commit": "the commit_txn of the transaction (the one that completed ok, else "
                        "those that may have committed it)"},
       # The missing write, acknowledged in a transaction that committed and gone over by
       # a reader, is lost, and that reader skipped it.
       implies=("lost_write", "poll_skip")),
    # Where consumers read (consumption)
    _a("poll_skip", "consumption", """
       Within one consumer's run, a read at offset b while the consumer stood just past
       offset a < b (after its previous read, or, across an aborted transaction, where it
       stood outside it: below), and an offset strictly between them holds a value the
       consumer must return: one visible to it in the read log, or the value of an
       acknowledged committed write whose ack put it there and that no poll returned (nor
       anything at that offset): the consumer skipped it, beside the lost_write. Within
       one poll and across polls. The first read of a run that began at a known position
       o (a seek, or an assign that named it) skips too when it passes over such a value
       known only from its ack in [o, b). Across an aborted transaction (an exactly-once
       consumer rewinds after one, recorded as a seek or not), the first read after the
       aborted transaction's reads is judged from where the consumer stood outside it:
       the later of its last read of the run outside any aborted transaction and its last
       successful commit of its offset since (commit_offsets ok, or send_offsets in a
       committed transaction), else the run's seek position; going back to it is
       allowed, skipping past it is poll_skip. Reads inside one aborted transaction are
       judged against each other, and its first read against where the consumer stood.
       This is what a pipeline that does not rewind after an abort does.""",
       _w(**_AT, op="the poll that read b", offset="b", value="", txn="the poll's transaction",
          detail="the skipped offset and value"),
       roles={"reader": "the poll that read b",
              "previous read": "the poll that read a",
              "seek": "the seek (or the assign that said where reading starts), when the "
                      "consumer stood at its position",
              "committed offset": "the consumer's commit of its offset that said where it "
                                  "stood after an aborted transaction",
              "skipped writer": "the send of the skipped value"},
       # A skip over a value known only from its ack, which no poll returned: the log
       # lost that write.
       implies=("lost_write",)),
    _a("nonmonotonic_poll", "consumption", """
       Within one consumer's run, a read at offset b <= a while the consumer stood just
       past offset a: back, or the same offset again, with no seek or assign between. a
       is the consumer's previous read, or, across an aborted transaction, where it stood
       outside it (as for poll_skip: its last read outside aborted transactions or its
       last commit of its offset since, else the run's seek position): a consumer that
       rewinds after an abort without a recorded seek goes back to there, which is
       allowed, and no further. Reads inside one aborted transaction are judged against
       each other.""",
       _w(**_AT, op="the poll that read b", offset="b", value="", txn="the poll's transaction",
          detail=""),
       roles={"reader": "the poll that read b",
              "previous read": "the poll that read a",
              "seek": "the seek whose position said where the consumer stood after an "
                      "aborted transaction",
              "committed offset": "the consumer's commit of its offset that said where it "
                                  "stood after an aborted transaction"}),
    _a("rewind_mismatch", "consumption", """
       After a seek to offset o (or an assign whose ok says the consumer starts at o),
       the consumer's next read of the partition is not the first value visible to it
       at an offset >= o.""",
       _w(**_AT, op="the poll of that read", offset="", value="", txn="the poll's transaction",
          detail="what was expected"),
       roles={"reader": "the poll",
              "seek": "the seek (or the assign)",
              "expected writer": "the send of the value it should have read, when known"}),
    # Order of appends (ordering)
    _a("nonmonotonic_send", "ordering", """
       One process's sends to one partition (outside transactions, or within one
       transaction), in the order it sent them, got offsets that do not increase
       (within one send, too). An offset is the ack's, or else the one a read returned
       for the record's value: a send that ended in info counts once a read found it.""",
       _w(**_AT, op="the later send", offset="", value="", txn="",
          detail="the previous send and its offset"),
       roles={"later send": "the send whose offset did not increase (`op`)",
              "earlier send": "the process's previous send",
              "offset reader": "the first poll that read a send's value, for each of the two "
                               "whose ack did not say its offset"}),
    _a("commit_order", "ordering", """
       Committed writes W1 and W2 to one partition, each a committed transaction or an
       acknowledged send outside any transaction: W1 completed (its commit surely done,
       or its send acknowledged) before W2 was invoked (its first op, or its send), yet a
       record of W2 precedes a record of W1 there. W2 may also be a send outside any
       transaction that ended in info (or never completed) whose record a read found: it
       was appended, after its invoke. Two sends of one process are left to
       nonmonotonic_send. A record counts only where the log still holds it: no read
       returned another value at its offset, and no reader went over it without
       returning it (for a send outside transactions, at an offset known from its ack or
       a read). A transaction proven committed only by reads made before its first
       commit_txn was invoked has no known time of commit, so it is no W1.""",
       _w(**_AT, op="W2's first send", offset="W2's record", txn="W2's transaction",
          detail="names W1"),
       roles={"W2 send": "W2's send of its record below W1's (`op`)",
              "W1 send": "W1's send of its record above it",
              "W1 end": "the op that completed W1: its commit_txn, or its send",
              "W2 start": "the op that began W2: its transaction's first op, or its send"}),
    # Dependency cycles (cycles)
    _a("g0", "cycles", """
       Write cycle: a cycle of ww edges between committed transactions. A note, since
       concurrent transactions may append to two partitions in opposite orders; a
       violation when no real-time execution could produce it.""",
       _w(**_AT, op="the first edge's source op", offset="the first edge's source offset",
          txn="the first edge's source transaction", detail="the cycle, edge by edge"),
       roles={"edge N source": "edge N's source op, the send of the source transaction's last record "
                               "below the target's (edge 1 is the detail's first)",
              "edge N target": "its target op, the send of the target's first record there"},
       severity=EITHER),
    _a("g1c", "cycles", """
       Circular information flow: a cycle of ww and wr edges with at least one wr. A note
       when real time allows it; a violation when no real-time execution could produce
       it.""",
       _w(**_AT, op="the first edge's source op", offset="the first edge's source offset",
          value="the value read, on a wr edge", txn="the first edge's source transaction",
          detail="the cycle, edge by edge"),
       roles={"edge N source": "edge N's source op (edge 1 is the detail's first): on a ww edge the "
                               "send of the source's last record below the target's; on a wr edge the "
                               "send of the value read, unless the read was read_committed (the "
                               "commit orders it then, and no op is named)",
              "edge N target": "its target op: on a ww edge the send of the target's first record "
                               "there, on a wr edge the poll that read the value"},
       severity=EITHER),
    _a("g_single", "cycles", """
       Read skew: a cycle with exactly one rw edge, the rest ww or wr. A note when real
       time allows it; a violation when no real-time execution could produce it.""",
       _w(**_AT, op="the first edge's source op", offset="the first edge's source offset",
          value="the value read, on a wr edge", txn="the first edge's source transaction",
          detail="the cycle, edge by edge"),
       roles={"edge N source": "edge N's source op, as for g1c; on the rw edge the source's poll of "
                               "the highest offset it read",
              "edge N target": "its target op, as for g1c; on the rw edge the send of the target's "
                               "first record there"},
       severity=EITHER),
    # Consumer-group offsets (groups)
    _a("offset_regression", "groups", """
       A successful commit of a group's offset for a partition is lower than one the
       same process made that completed before it was invoked, and that process did not
       seek that partition below the earlier offset in between. Commits by different
       processes are not compared: any member of a group may commit, in any order.""",
       _w(**_AT, op="the lower commit", offset="", txn="", detail="the earlier commit"),
       roles={"lower commit": "the commit of the lower offset",
              "earlier commit": "the same process's earlier commit of the higher one"}),
    _a("stale_offset_fetch", "groups", """
       A fetch_offsets returned an offset no commit it could observe wrote: it may return
       the latest successful commit that completed before it was invoked (or any of
       several that raced each other), any commit in flight while it ran, or any commit
       of uncertain outcome invoked before it completed. Before any successful commit
       completed, it may return only nothing or such a racing or uncertain commit. Of a
       transaction's send_offsets for one partition, a later ok one replaces the earlier
       (the coordinator keeps the last).""",
       _w(**_AT, op="the fetch", offset="what it returned, null for none", txn="",
          detail="what it was allowed to return"),
       roles={"fetch": "the fetch_offsets",
              "latest commit": "each commit of what it should have returned, when a commit had "
                               "completed before it began"}),
    # Consume-transform-produce (pipeline)
    _a("duplicate_output", "pipeline", """
       One input value is the source of two or more definitely committed outputs in one
       output topic, of one consumer group: an output is of the groups its transaction
       sent offsets for, and one whose transaction sent none counts with every group.""",
       _w(**_AT, op="the second output's send", offset="", value="", txn="",
          detail="every output of that input"),
       roles={"output": "the send of each definitely committed output of the input (`op` is the "
                        "second)",
              "commit": "the commit_txn of each output's transaction (the one that completed ok, "
                        "else those that may have committed it)",
              "input poll": "each poll in an output's transaction that returned the input",
              "input writer": "the send of the input, when a committed send_offsets went past it"}),
    _a("lost_input", "pipeline", """
       An input record, visible to read_committed readers, at an offset a group committed
       past with send_offsets in a committed transaction (and at or after the lowest
       offset that group's pipelines read in that partition in a transaction, or any
       pipeline's when no poll names the group), that no output of that group (or of a
       transaction that sent no offsets) which may be committed names as its source.
       Assumes each input yields an output.""",
       _w(**_AT, op="the send_offsets", offset="the input's", value="the input's",
          txn="the send_offsets' transaction", detail=""),
       roles={"send_offsets": "the send_offsets that committed past the input",
              "commit": "the commit_txn of the send_offsets' transaction (the one that completed "
                        "ok, else those that may have committed it)",
              "input writer": "the send of the input"}),
    # A Kafka Streams application, judged from its topics alone (streams)
    _a("streams_duplicate_output", "streams", """
       One input value is the source of two or more outputs, visible to read_committed
       readers, in the output topic of an application the history declares (a streams
       op) and whose own reads and writes it does not hold: the application processed
       the input twice, and both results were committed.""",
       _w(**_AT, op="the final poll that read the second output", offset="the second output's",
          value="the input's", txn="", detail="every output of that input"),
       roles={"output reader": "the final poll that read each output (`op` reads the second)",
              "application": "the application's first streams op"}),
    _a("streams_lost_input", "streams", """
       An input record, visible to read_committed readers, below the offset that an
       application's group had committed in its partition at the end (as the final
       streams op fetched them), that no visible output of that application names as its
       source. Assumes each input yields an output.""",
       _w(**_AT, op="the final streams op, which fetched the group's offsets",
          offset="the input's",
          value="the input's", txn="", detail="the offset committed past it"),
       roles={"fetch": "the final streams op, which fetched the offsets of the application's "
                       "group",
              "input reader": "the final poll that read the input",
              "application": "the application's first streams op"}),
    _a("streams_uncommitted_input", "streams", """
       An output, visible to read_committed readers in an application's output topic,
       whose source is no record visible to read_committed readers of its input topic:
       the application processed a record of an aborted transaction, or one no log
       holds.""",
       _w(**_AT, op="the final poll that read the output", offset="the output's",
          value="the input it names", txn="", detail=""),
       roles={"output reader": "the final poll that read the output",
              "application": "the application's first streams op"}),
    _a("wrong_fold", "streams", """
       An output of an application with the fold topology whose count and sum (both mod
       2^16) are not those of exactly the records visible to read_committed readers in
       its source's input partition up to and including its source, each once: the
       state it folded into lost an input, counted one twice, or was rolled back without
       its outputs.""",
       _w(**_AT, op="the final poll that read the output", offset="the output's",
          value="the input it names", txn="", detail="the count and sum it has and should have"),
       roles={"output reader": "the final poll that read the output",
              "input reader": "the final poll that read its input",
              "application": "the application's first streams op"}),
    # Stalls (liveness)
    _a("late_return", "liveness", """
       A client call given a timeout returned more than 5 s after that timeout, or had not
       returned that long after it when the harness gave up on it or the history ended.
       The client library bounds such calls by their timeout; an application relies on
       that bound to stay live. Time its process was stopped by the nemesis
       (pause_client, until the resume that continued it) does not count.""",
       _w(process="", op="the call", txn="the call's transaction",
          detail="the call, its timeout and how long it took"),
       roles={"call": "the call"},
       severity=LIVENESS),
    _a("unrecovered_partition", "liveness", """
       The last watermarks read name no high watermark for a partition: no leader
       answered for it through the final reads, after every fault was undone and every
       node started. The cluster kept it offline (a safe choice when no replica it may
       elect has every acknowledged write), so its writes could not be read at the end
       and whether any was lost is not known.""",
       _w(**_AT, op="the watermarks op",
          detail="how many of its surely written values the final phase did not read"),
       roles={"watermarks": "the last watermarks op"},
       severity=LIVENESS),
    _a("unreadable_offsets", "liveness", """
       The final phase could not read a consumer group's committed offsets the way a
       read_committed consumer asks for them (stable offsets only, KIP-447) within its
       bound: 60 s plus the plan's longest transaction timeout, after every fault was
       undone and every node started. The group coordinator holds an offset commit it
       never finished, so an application of that group cannot learn where to resume.""",
       _w(process="", op="the final fetch of the group's committed offsets",
          detail="the group, and the error the fetch ended with"),
       roles={"fetch": "the final fetch of the group's committed offsets"},
       severity=LIVENESS),
)

BY_NAME = MappingProxyType({a.name: a for a in REGISTRY})
# Every anomaly type, in the order a verdict lists them.
TYPES = tuple(BY_NAME)


def _implications(registry: tuple[Anomaly, ...]) -> MappingProxyType:
    names = {a.name for a in registry}
    for a in registry:
        if not a.implies <= names - {a.name}:
            raise ValueError(f"{a.name} implies {', '.join(sorted(a.implies))}: a type may "
                             "imply only other types of the registry")
    return MappingProxyType({a.name: a.implies for a in registry})


# type -> the other types one anomaly of it may also be (Anomaly.implies).
IMPLIES = _implications(REGISTRY)


def of_family(family: str) -> tuple[str, ...]:
    """The types a family (a checkers module's short name) finds, in registry order."""
    found = tuple(a.name for a in REGISTRY if a.family == family)
    if not found:
        raise ValueError(f"no anomaly type belongs to family {family!r}")
    return found


def empty(spark):
    """No anomalies, as a Spark DataFrame."""
    from .spark import struct_type
    return spark.createDataFrame([], struct_type(SCHEMA))


def num(x) -> int | None:
    """A pandas/numpy integer (or NA) as a plain int for an anomaly record."""
    return None if x is None or pd.isna(x) else int(x)


def witnesses(*pairs) -> list[dict]:
    """A row's `witnesses`: {op, role} of each (op, role) pair whose op is known, in
    order, each pair once."""
    out, seen = [], set()
    for op, role in pairs:
        op = num(op)
        if op is None or (op, role) in seen:
            continue
        seen.add((op, role))
        out.append({"op": op, "role": role})
    return out


def plain_witnesses(v) -> list[dict] | None:
    """A `witnesses` cell as plain {op: int, role: str} dicts, from a list, an Arrow
    array's to_pandas (a numpy array of dicts) or a Spark Row; None when missing."""
    if v is None or isinstance(v, float) or v is pd.NA:
        return None
    return [{"op": int(w["op"]), "role": str(w["role"])} for w in v]
