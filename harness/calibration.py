"""Calibration against history: each historical suite (workloads/suites.py HISTORICAL) is
searched on every one of its legs, each leg on a fresh cluster of its own release with its
own broker settings, and the legs are reported side by side. A leg whose release had the
bug must find it; a leg whose release fixed it must pass. A hit is evidence that the load
and faults reach a real broker bug only when its controls pass, so neither is reported
without the other.

Every leg runs the same search (the same number of plans, the same seed), so where no
failure cuts a search short, the controls run exactly the plans the buggy release ran.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from onceproof.cluster.cluster import Cluster
from onceproof.cluster.provision import ensure_kafka
from onceproof.errors import SetupError
from onceproof.search import HuntResult, hunt
from onceproof.workloads.suites import Historical, Leg


@dataclass
class LegResult:
    suite: str
    bug: str
    leg: str  # the release, and the broker settings the leg adds
    has_bug: bool  # the bug must show on this leg (else the leg must pass)
    result: HuntResult | None  # None: the leg's cluster did not start
    why_not: str = ""  # why the leg's cluster did not start

    @property
    def held(self) -> bool:
        """Whether the leg did what it must: found the bug, or passed with plans run."""
        return self.result is not None and self.result.caught and not self.result.idle

    @property
    def outcome(self) -> str:
        r = self.result
        if r is None:
            return "did not start"
        if r.error:
            return "HARNESS ERROR"
        if r.examples == 0:
            return "not run (time limit)"
        if r.idle:
            return "NOTHING EXERCISED"
        if self.has_bug:
            return "found" if r.caught else ("not found (time limit)" if r.cut else "NOT FOUND")
        return "passed" if r.caught else "FAILED"


def fetch_all(chosen: list[Historical]) -> None:
    """Every release the chosen suites pin, fetched before anything starts: one that is
    malformed or not served stops here, in one line."""
    for release in sorted({leg.kafka for h in chosen for leg in h.legs}):
        ensure_kafka(release)


def search_legs(h: Historical, artifacts: str | Path, nodes: int = 3,
                spark_master: str | None = None, examples: int = 8, budget: float = 300.0,
                replays: int = 2, seed: int | None = None, deadline: float | None = None,
                on_leg=None) -> list[LegResult]:
    """Search every leg of h, each on its own fresh cluster; on_leg(row) after each."""
    rows = []
    for leg in h.legs:
        rows.append(_leg(h, leg, Path(artifacts), nodes, spark_master, examples, budget,
                         replays, seed, deadline))
        if on_leg is not None:
            on_leg(rows[-1])
    return rows


def _leg(h: Historical, leg: Leg, artifacts: Path, nodes: int, spark_master: str | None,
         examples: int, budget: float, replays: int, seed: int | None,
         deadline: float | None) -> LegResult:
    suite = h.leg(leg)
    folder = artifacts / h.name / suite.name
    try:
        with Cluster(folder / "cluster", nodes, leg.kafka) as cluster:
            result = hunt(suite, cluster, folder, spark_master, examples, budget, replays,
                          seed, deadline, suite.shapes[0], leg.client or None)
    except SetupError as exc:
        return LegResult(h.name, h.bug, leg.label, leg.has_bug, None, str(exc))
    return LegResult(h.name, h.bug, leg.label, leg.has_bug, result)


COLUMNS = ("suite", "bug", "Kafka (broker settings)", "must", "outcome", "plans",
           "time to first failure", "shrunk plan size", "reproduced")


def cells(row: LegResult) -> list[str]:
    """One leg as the table's cells, in COLUMNS order."""
    r = row.result
    if r is None:
        return [row.suite, row.bug, row.leg, "find it" if row.has_bug else "pass",
                f"did not start: {row.why_not}", "-", "-", "-", "-"]
    first = f"{r.seconds_to_first:.0f} s" if r.seconds_to_first is not None else "-"
    return [row.suite, row.bug, row.leg, "find it" if row.has_bug else "pass", row.outcome,
            str(r.examples), first, str(r.shrunk_size or "-"), r.reproduced]


def table(rows: list[LegResult]) -> Table:
    t = Table(title="Calibration: documented Kafka bugs, on releases that had them and "
                    "releases that fixed them")
    for name in COLUMNS:
        t.add_column(name, no_wrap=name in ("suite", "outcome"))
    for row in rows:
        t.add_row(*cells(row))
    return t


def markdown(rows: list[LegResult]) -> str:
    """The same table as Markdown."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def as_row(row: LegResult) -> dict:
    return {**asdict(row), "outcome": row.outcome, "held": row.held}
