"""A history's verdict: valid or not, how many anomalies of each type, a few examples.

`check` converts the history once into its tables (checkers/store.py) and runs every
family of checkers in one pass (checkers/engine.py): every per-partition check in one
pandas pass over each partition's steps (in this machine's processes, or, when a
Spark master is named, in one Spark job with no shuffle), then the
cross-partition checks. Spark starts only for a check on Spark.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from onceproof.history.format import CLUSTER

from . import anomaly, engine, registry
from . import known as _known
from .store import Tables, convert, convert_each, is_converted, read_parquet

# `valid` in a verdict's JSON when the history held nothing to judge.
UNKNOWN = "unknown"
# Every family of checks, in the order of their types (checkers/registry.py).
FAMILIES = registry.FAMILIES


@dataclass
class Verdict:
    """Safety and liveness, apart. valid: no violation-severity anomaly. live: no
    liveness anomaly (a call that overstayed its timeout). counts: anomalies per type.
    examples: a few anomalies per type, as plain dicts of anomaly.COLUMNS (witnesses: a
    list of {op, role}, the ops that show it; docs/checkers.md). notes: the
    types found whose anomalies are notes; stalls: those that are liveness anomalies.
    stats: about the history. unknown: why there is no verdict at all, when the history
    holds nothing the claims can be judged on (docs/checkers.md, "Evidence"); then
    valid and live say only that nothing was found, and the JSON's valid is "unknown".
    tested: what the run tested, when the harness ran it (the cluster as it described
    itself, and `faults_injected`); on a cluster the harness did not start, also which
    faults could not be injected. processes: the process of each op the first example
    of each type names as a witness (op id, as a string, -> process). unjudged: what
    a rule could not be applied to for lack of information, per rule and reason, as
    [{rule, count, why}] (docs/checkers.md, "What was not judged"): what a VALID rests
    on."""
    valid: bool
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    stalls: list[str] = field(default_factory=list)
    unknown: str | None = None
    tested: dict = field(default_factory=dict)
    # The process of each op the first example of a type names as a witness (op id as
    # a string -> process), for the terminal summary.
    processes: dict[str, str] = field(default_factory=dict)
    # What the rules could not judge for lack of information: [{rule, count, why}].
    unjudged: list[dict] = field(default_factory=list)
    # Per failing type, what its anomalies' witnesses were, every anomaly counted: [{n,
    # witnesses: [{role, f, process, txn}]}] (`txn`: whether the op was in a
    # transaction), the most common SHAPES shapes, then one {n, witnesses: None} for
    # the rest. What checkers/known.py matches known issues on.
    shapes: dict[str, list[dict]] = field(default_factory=dict)
    # The known upstream issues its anomalies match (checkers/known.py, KnownMatch as
    # dicts): shown beside them, never in their place.
    known: list[dict] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return not self.stalls

    @property
    def failing(self) -> set[str]:
        """The types that make this verdict fail: its violations and its stalls. Notes
        are not among them: a history with concurrent transactions shows g0 cycles as
        notes in almost every run, so counting them would make every run "show" them."""
        return {t for t, n in self.violations.items() if n} | set(self.stalls)

    @property
    def unexplained(self) -> set[str]:
        """The failing types with an anomaly no known issue matches (Verdict.known,
        checkers/known.py): what is new in this verdict."""
        explained: dict[str, int] = {}
        for m in self.known:
            explained[m["type"]] = explained.get(m["type"], 0) + int(m["count"])
        return {t for t in self.failing if explained.get(t, 0) < self.counts.get(t, 0)}

    def fails(self, known_issues: str = _known.FAIL) -> bool:
        """Whether this verdict fails a run: any violation or stall (`fail`), or under
        `report` only one no known issue matches. A verdict without evidence (unknown)
        does not fail by this; the callers give it exit code 2."""
        return bool(self.failing if known_issues == _known.FAIL else self.unexplained)

    @property
    def known_only(self) -> bool:
        """Something fails the verdict, and a known issue matches every anomaly of it."""
        return bool(self.failing) and not self.unexplained

    @property
    def fine(self) -> bool:
        """Nothing to report but notes, on evidence: decided, valid and live."""
        return self.unknown is None and self.valid and self.live

    def severity(self, t: str) -> str:
        """How a type found in this history counts: violation, note or liveness."""
        return (anomaly.NOTE if t in self.notes else anomaly.LIVENESS if t in self.stalls
                else anomaly.VIOLATION)

    def to_dict(self) -> dict:
        """Plain JSON. Without a verdict, `valid` is "unknown" (Elle's `:valid?
        :unknown`), so that no reader of the JSON takes nothing for valid."""
        d = {**asdict(self), "live": self.live}
        if self.unknown is not None:
            d["valid"] = UNKNOWN
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        # "unknown" (no verdict): nothing was found, which `unknown` says is no verdict.
        return cls(valid=d["valid"] in (True, UNKNOWN), counts=dict(d.get("counts", {})),
                   examples={k: list(v) for k, v in d.get("examples", {}).items()},
                   notes=list(d.get("notes", [])), stats=dict(d.get("stats", {})),
                   stalls=list(d.get("stalls", [])), unknown=d.get("unknown"),
                   tested=dict(d.get("tested") or {}),
                   processes=dict(d.get("processes") or {}),
                   unjudged=[dict(u) for u in d.get("unjudged") or []],
                   shapes={k: list(v) for k, v in (d.get("shapes") or {}).items()},
                   known=[dict(m) for m in d.get("known") or []])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @property
    def violations(self) -> dict[str, int]:
        return {t: n for t, n in self.counts.items()
                if self.severity(t) == anomaly.VIOLATION}

    @property
    def headline(self) -> str:
        """The verdict in a few words: safety first, then liveness when it failed."""
        if self.unknown is not None:
            return f"UNKNOWN: {self.unknown}"
        # On a cluster the harness did not start, a run with no fault says so: it tested
        # the claims without the failures they are about.
        fault_free = self.tested.get("external") and not self.tested.get("faults_injected")
        return (("VALID" if self.valid else "INVALID") + ("" if self.live else ", NOT LIVE")
                + (" (fault-free: no fault was injected)" if fault_free else "")
                + (f" ({known_issues_only(self.known)})" if self.known_only else ""))

    def summary(self) -> str:
        lines = [self.headline]
        if self.tested.get("external"):
            lines.append(describe_tested(self.tested))
        s = self.stats
        if s:
            lines.append(f"{s.get('events', 0)} events, {s.get('ops', 0)} ops, "
                         f"{s.get('writes', 0)} writes, {s.get('reads', 0)} reads, "
                         f"{s.get('partitions', 0)} partitions")
        for t in sorted(self.counts, key=_order):
            lines.append(f"  {t}: {self.counts[t]} ({self.severity(t)})"
                         + "".join(f"; {_known.match_text(m)}" for m in self.known
                                   if m["type"] == t))
            for ex in self.examples.get(t, []):
                lines.append(f"    - {describe(ex)}")
        if not self.counts:
            lines.append("  no anomalies")
        lines += unjudged_lines(self.unjudged)
        return "\n".join(lines)


def known_issues_only(matches: list[dict]) -> str:
    """The words a headline gets when every failing anomaly matches a known issue."""
    issues = sorted({m["issue"] for m in matches})
    return f"known issue{'s' if len(issues) > 1 else ''} only: {', '.join(issues)}"


def unjudged_lines(unjudged: list[dict]) -> list[str]:
    """What was not judged, for people: one line per rule and reason."""
    if not unjudged:
        return []
    return ["Not judged, for lack of information:"] + [
        f"  {u['rule']}: {u['count']} {u['why']}" for u in unjudged]


def describe_tested(tested: dict) -> str:
    """What a run on a cluster the harness did not start tested, in one line."""
    brokers = tested.get("brokers") or []
    not_injected = tested.get("not_injected") or []
    return (f"tested: Kafka {tested.get('kafka_version')} at {tested.get('bootstrap')}, "
            f"{len(brokers)} brokers ({', '.join(brokers)}); "
            f"{tested.get('faults_injected', 0)} faults injected"
            + (f"; not injected: {'; '.join(not_injected)}" if not_injected else ""))


def missing_evidence(stats: dict) -> str | None:
    """What the history lacks for a verdict, or None when it has evidence: a write
    acknowledged, a record read, or an offset committed or fetched."""
    # Tables converted before their stats held it are refused (store.read_manifest).
    if any((stats.get("evidence") or {}).values()):
        return None
    return ("no write acknowledged, no record read and no offset committed or fetched "
            "(an op that ended in info may or may not have happened): nothing to judge "
            "Kafka's claims on")


def _order(t: str) -> int:
    return registry.TYPES.index(t) if t in registry.TYPES else len(registry.TYPES)


def describe(ex: dict) -> str:
    where = []
    if ex.get("process"):
        where.append(ex["process"])
    if ex.get("op") is not None:
        where.append(f"op {ex['op']}")
    if ex.get("topic") is not None:
        where.append(f"{ex['topic']}/{ex.get('partition')}"
                     + (f"@{ex['offset']}" if ex.get("offset") is not None else ""))
    if ex.get("txn"):
        where.append(f"txn {ex['txn']}")
    return f"[{', '.join(where)}] {ex.get('detail') or ''}".strip()


def anomalies(tables) -> pd.DataFrame:
    """Every anomaly of the history (anomaly.COLUMNS), from every family."""
    return engine.collect(tables, FAMILIES)


def _plain(row: dict) -> dict:
    return {k: (anomaly.plain_witnesses(v) if k == "witnesses"
                else None if v is None or v is pd.NA or (isinstance(v, float) and v != v)
                else int(v) if k in ("op", "partition", "offset", "value") else v)
            for k, v in row.items()}


def check(path, spark=None, examples: int = 3, spark_master: str | None = None,
          local: bool | None = None) -> Verdict:
    """Check a history (JSONL file, or a directory of its Parquet tables).

    local: run the per-partition pass in pandas in this machine's processes (one per
    core) instead of on Spark. By default (None) a check runs on Spark only when
    `spark_master` (or ONCEPROOF_SPARK_MASTER) names a Spark master: on one machine, Spark
    would run the same pandas on the same cores, after starting a JVM. Same checks
    either way. Only a check on Spark uses `spark` (a session) or, when none is
    given, starts one on `spark_master` (checkers/spark.py); a local check never
    imports pyspark. A local check of a JSONL history checks each bucket of steps as
    the converter makes it, without writing the steps (store.convert_each).
    Raises HistoryError when the history cannot be read; that happens before Spark
    starts, so a bad path costs nothing."""
    started = time.perf_counter()
    path = Path(path)
    if local is None:
        local = not (spark_master or os.environ.get("ONCEPROOF_SPARK_MASTER"))
    with tempfile.TemporaryDirectory(prefix="onceproof-") as work:
        rows, removal = None, None
        if is_converted(path):
            tables = read_parquet(path)
        elif local:
            folder = Path(work) / "tables"
            stats, rows, removal = convert_each(path, folder, engine.bucket_rows(FAMILIES))
            tables = Tables(folder, None, stats)
        else:
            tables = read_parquet(convert(path, Path(work) / "tables"))
        if not local:
            from .spark import session
            tables.spark = spark or session(spark_master)
        try:
            found = engine.collect(tables, FAMILIES, local=local, rows=rows,
                                   history=path if rows is not None else None)
        finally:
            if removal is not None:
                removal.join()  # before `work` is removed, which holds the spool
        unjudged = list(found.attrs.get("unjudged") or [])
        found = found.sort_values(["type", "op", "offset", "value"], na_position="last",
                                  kind="stable")
        per_type: dict[str, int] = {}
        ex: dict[str, list[dict]] = {}
        violating: set[str] = set()
        stalling: set[str] = set()
        for t, g in found.groupby("type", sort=False):
            per_type[t] = len(g)
            if (g["severity"] == anomaly.VIOLATION).any():
                violating.add(t)
            elif (g["severity"] == anomaly.LIVENESS).any():
                stalling.add(t)
            # Violations first: they are what makes the history invalid.
            g = g.sort_values("severity", key=lambda s: s != anomaly.VIOLATION, kind="stable")
            ex[t] = [_plain(r) for r in g.head(examples).to_dict("records")]
        processes = _witness_processes(Path(tables.dir), ex)
        shapes = _shapes(Path(tables.dir), found[found["type"].isin(violating | stalling)])
        ran_on = _cluster(path, Path(tables.dir))
    order = sorted(per_type, key=_order)
    stats = dict(tables.stats)
    stats["check_seconds"] = round(time.perf_counter() - started, 3)
    stats["anomalies"] = len(found)
    stats["engine"] = "local" if local else "spark"
    # What was found is reported whatever else is missing (a stall needs no record).
    verdict = Verdict(unknown=None if per_type else missing_evidence(stats),
                   valid=not violating, counts={t: per_type[t] for t in order},
                   examples={t: ex[t] for t in order},
                   notes=[t for t in order if t not in violating | stalling], stats=stats,
                   stalls=[t for t in order if t in stalling], processes=processes,
                   unjudged=unjudged, shapes=shapes, tested=ran_on)
    _known.annotate(verdict)
    return verdict


# The most witness shapes a verdict keeps per type (Verdict.shapes); the rest are counted
# together, and no known issue matches them.
SHAPES = 50


def _shapes(folder: Path, found: pd.DataFrame) -> dict[str, list[dict]]:
    """Per type, its anomalies grouped by what their witnesses were: each witness's
    role, the op's kind (`f`), its process and whether it was in a transaction, from
    the ops table; every anomaly counted (Verdict.shapes)."""
    if found.empty:
        return {}
    rows = [(t, anomaly.plain_witnesses(w) or []) for t, w in zip(found["type"], found["witnesses"])]
    wanted = sorted({w["op"] for _, ws in rows for w in ws})
    path = folder / "ops.parquet"
    of: dict[int, tuple] = {}
    if wanted and path.exists():
        import pyarrow.parquet as pq
        t = pq.read_table(path, columns=["op", "f", "process", "txn"],
                          filters=[("op", "in", wanted)])
        of = {op: (f, p, txn is not None) for op, f, p, txn in zip(
            *(t.column(c).to_pylist() for c in ("op", "f", "process", "txn")))}
    counted: dict[str, dict[tuple, int]] = {}
    for t, ws in rows:
        key = tuple(sorted({(w["role"], *of.get(w["op"], (None, None, None))) for w in ws},
                           key=str))
        per = counted.setdefault(t, {})
        per[key] = per.get(key, 0) + 1
    out: dict[str, list[dict]] = {}
    for t, per in counted.items():
        common = sorted(per.items(), key=lambda kv: (-kv[1], str(kv[0])))
        out[t] = [{"n": n, "witnesses": [{"role": r, "f": f, "process": p, "txn": x}
                                         for r, f, p, x in key]}
                  for key, n in common[:SHAPES]]
        if (rest := sum(n for _, n in common[SHAPES:])):
            out[t].append({"n": rest, "witnesses": None})
    return out


def _cluster(history: Path, folder: Path) -> dict:
    """What the history's cluster op says it ran on: the Kafka release and the client
    libraries with their releases (docs/history.md), or {} when it has none. From the
    faults table (a check writes it, flatten.CHECK_READS); else from the JSONL's first
    line, where the harness writes it."""
    values: list = []
    if (folder / "faults.parquet").exists():
        import pyarrow.parquet as pq
        t = pq.read_table(folder / "faults.parquet", columns=["f", "value"],
                          filters=[("f", "==", CLUSTER)])
        values = [json.loads(v) for v in t.column("value").to_pylist() if v]
    elif history.is_file():
        with open(history, "rb") as fh:
            try:
                first = json.loads(fh.readline(1 << 20) or b"{}")
            except ValueError:
                first = {}
        if isinstance(first, dict) and first.get("f") == CLUSTER:
            values = [first.get("value")]
    for said in values:
        if isinstance(said, dict):
            return {k: said[k] for k in ("kafka_version", "clients") if k in said}
    return {}


def _witness_processes(folder: Path, examples: dict[str, list[dict]]) -> dict[str, str]:
    """The process of each op that the first example of each type names as a witness,
    op id (as a string, for JSON) -> process, from the ops table: what the terminal
    summary prints beside each witness's op and role."""
    wanted = sorted({w["op"] for exs in examples.values() if exs
                     for w in exs[0].get("witnesses") or ()})
    path = folder / "ops.parquet"
    if not wanted or not path.exists():
        return {}
    import pyarrow.parquet as pq
    t = pq.read_table(path, columns=["op", "process"], filters=[("op", "in", wanted)])
    return {str(op): str(p) for op, p in zip(t.column("op").to_pylist(),
                                             t.column("process").to_pylist()) if p is not None}
