"""What an anomaly type is, and the one shape every checker reports in.

A row is one concrete anomaly: its `type`, its `severity`, and the fields a person needs
to find it in the history (the process and op that saw or did it, the partition and
offset, the value, the transaction) plus a `detail` sentence, and `witnesses`: every op
the checker knows shows the anomaly, each with its role in it (the writer, the reader,
the source of a cycle's first edge...), as a list of {op, role}. `op` is always one of
them. The report links witnesses from this list, never from the detail's words.

An `Anomaly` is one type: the family (the checkers module that finds it, whose
docstrings give the full reasoning), its severity, its definition (the one text the
report and docs/checkers.md show), and its witnesses: which of COLUMNS its rows fill
and what each holds (`fills`), the roles its `witnesses` lists use (`roles`; N in "edge
N source" stands for the edge's number), and the other types one anomaly of it may also
be (`implies`). Each family module defines its types with `define`, in its `ANOMALIES`,
beside the code that finds them. The registry is checkers/registry.py: REGISTRY,
BY_NAME, TYPES, IMPLIES and `of_family`, gathered from the family modules in the order
a verdict lists types in. This module imports none of them, so each can import it.

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
    # Judged on the driver, from facts or ops after the per-partition pass (cycles,
    # pipelines, calls against their timeouts...), rather than in a partition's pass.
    on_driver: bool = False

    def has_role(self, role: str) -> bool:
        return re.sub(r"^edge \d+ ", "edge N ", role) in self.roles

    def allows(self, severity: str) -> bool:
        return severity == self.severity or (self.severity == EITHER
                                             and severity in (NOTE, VIOLATION))


def fills(**fields: str) -> MappingProxyType:
    """What a type's rows fill: each column (of COLUMNS) -> what it holds for the type
    ("" when it needs no words), in COLUMNS' order."""
    unknown = set(fields) - set(COLUMNS)
    if unknown:
        raise ValueError(f"not anomaly columns: {', '.join(sorted(unknown))}")
    return MappingProxyType({c: fields[c] for c in COLUMNS if c in fields})


def define(name: str, family: str, definition: str, witnesses: MappingProxyType,
           roles: dict[str, str], severity: str = VIOLATION,
           implies: tuple[str, ...] = (), on_driver: bool = False) -> Anomaly:
    """One type, as its family module defines it (its ANOMALIES): the definition's and
    the roles' whitespace made single spaces, the roles named in its `witnesses` entry."""
    if not roles:
        raise ValueError(f"{name}: every type names the roles of its witnesses")
    text = "; ".join(f"{role}: {' '.join(what.split())}" for role, what in roles.items())
    return Anomaly(name, family, severity, " ".join(definition.split()),
                   MappingProxyType({**witnesses, "witnesses": text}), MappingProxyType(roles),
                   frozenset(implies), on_driver)


# Where most rows point: the op that did or saw it, in its partition.
AT = MappingProxyType({"process": "", "topic": "", "partition": ""})


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
