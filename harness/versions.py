"""The Kafka version matrix: one short correct run under faults on each release, and
on each upgrade path.

Each release gets its own fresh cluster and the same generated plan (the same seed), so
the rows differ by release alone. An upgrade row starts its cluster on one release and,
during the run, moves every node to another, one after another, then finalizes
transaction.version=2 (docs/plans.md, "Upgrades"). A release that cannot start is a row
too, with the one line that says why; it never stops the matrix.
"""
from __future__ import annotations

import io
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from onceproof.errors import SetupError
from onceproof.run_job import JobOptions, run_job

# run_job's exit codes (onceproof/run_job.py).
_OUTCOMES = {0: "valid", 1: "anomalies", 2: "unknown"}

# The upgrade rows: from the newest 3.x and the release before the newest, to the newest.
UPGRADES = (("3.9.2", "4.4.0"), ("4.3.1", "4.4.0"))
UPGRADE_FINALIZE = {"transaction.version": 2}
# An upgrade row's run lasts at least this long: three nodes move one after another,
# each waiting for its ISR (about 25 s each on 2 cores), then the finalize, at 24, 48,
# 72 and 96 s (run --upgrade-to spreads them evenly); what the run has not reached by
# its end does not happen.
UPGRADE_SECONDS = 120


@dataclass
class Row:
    version: str
    outcome: str  # valid, anomalies, unknown, or "did not start"
    seconds: float
    detail: str  # the verdict line of the run, or why the release did not start
    folder: str


def matrix(versions: tuple[str, ...], opts: JobOptions, console: Console,
           upgrades: tuple[tuple[str, str], ...] = ()) -> list[Row]:
    """A row per release, then a row per upgrade (from, to)."""
    rows = [_row(version, Path(opts.out) / f"kafka-{version}",
                 JobOptions(**{**asdict(opts), "kafka_version": version}), console)
            for version in versions]
    for start, to in upgrades:
        rows.append(_row(f"{start} -> {to}", Path(opts.out) / f"kafka-{start}-to-{to}",
                         JobOptions(**{**asdict(opts), "kafka_version": start, "upgrade_to": to,
                                       "finalize": dict(UPGRADE_FINALIZE),
                                       "duration": max(opts.duration or 0, UPGRADE_SECONDS)}),
                         console))
    return rows


def _row(label: str, out: Path, job: JobOptions, console: Console) -> Row:
    started = time.monotonic()
    job.out = str(out)
    # The run's own progress and summary go to a buffer: the matrix prints one line
    # per release, and the run folders keep the rest.
    sink = io.StringIO()
    console.print(f"Kafka {label}: running ...")
    try:
        code = run_job(job, Console(file=sink, width=200))
        outcome, detail = _OUTCOMES.get(code, f"exit {code}"), _headline(sink.getvalue())
    except SetupError as exc:
        outcome, detail = "did not start", str(exc)
    folders = sorted(out.glob("*/"))
    row = Row(label, outcome, round(time.monotonic() - started, 1), detail,
              str(folders[-1]) if folders else str(out))
    console.print(f"Kafka {label}: {outcome} ({row.seconds:.0f} s) {detail}")
    return row


def _headline(output: str) -> str:
    """The verdict line run_job ends with, without the report paths after it."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1].split(": reports:")[0] if lines else ""


def table(rows: list[Row]) -> Table:
    t = Table("Kafka", "correct run under faults", "seconds", "detail", title="Version matrix")
    for r in rows:
        t.add_row(r.version, r.outcome, f"{r.seconds:.0f}", r.detail)
    return t


def markdown(rows: list[Row]) -> str:
    lines = ["| Kafka | correct run under faults | seconds |", "|---|---|---|"]
    lines += [f"| {r.version} | {r.outcome} | {r.seconds:.0f} |" for r in rows]
    return "\n".join(lines) + "\n"


def write(rows: list[Row], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "versions.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    (out / "versions.md").write_text(markdown(rows))
