"""The verdict as a person reads it at a terminal (`onceproof check`)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .verdict import Verdict, describe, unjudged_lines


def table(verdict: Verdict) -> Table:
    t = Table()
    t.add_column("anomaly")
    t.add_column("count", justify="right")
    t.add_column("severity")
    t.add_column("example")
    for name, n in verdict.counts.items():
        examples = verdict.examples.get(name) or [{}]
        t.add_row(name, str(n), verdict.severity(name),
                  escape(describe(examples[0])))
    if not verdict.counts:
        t.add_row("none", "0", "", "")
    return t


def show(verdict: Verdict, console: Console | None = None) -> None:
    console = console or Console()
    s = verdict.stats
    console.print(f"{s.get('events', 0)} events, {s.get('ops', 0)} ops, {s.get('writes', 0)} "
                  f"writes, {s.get('reads', 0)} reads, {s.get('partitions', 0)} partitions, "
                  f"checked in {s.get('check_seconds', 0)}s")
    # The verdict on a line of its own, never wrapped: what a script greps for.
    console.print(escape(verdict.headline), soft_wrap=True)
    console.print(table(verdict))
    for line in witness_lines(verdict) + unjudged_lines(verdict.unjudged):
        console.print(escape(line), soft_wrap=True)


def witness_lines(verdict: Verdict) -> list[str]:
    """For each type found, its first example's witnesses: each op's process, op id and
    role (docs/checkers.md, "Witnesses")."""
    lines = []
    for name in verdict.counts:
        examples = verdict.examples.get(name) or [{}]
        ws = examples[0].get("witnesses") or []
        if not ws:
            continue
        named = "; ".join(f"{w['role']}: {verdict.processes.get(str(w['op']), '?')} op {w['op']}"
                          for w in ws)
        lines.append(f"{name} witnesses: {named}")
    if lines:
        lines.insert(0, "First example's witnesses (role: process op):")
    return lines


def run_check(history: str, spark_master: str | None = None, json_out: str | None = None,
              console: Console | None = None) -> int:
    """Check `history`, print the verdict, optionally save it; the exit code: 0 valid
    and live, 1 violations or stalls, 2 no verdict for want of evidence. (HistoryError,
    for what could not be checked, propagates.)"""
    from .verdict import check
    verdict = check(history, spark_master=spark_master)
    show(verdict, console)
    if json_out:
        Path(json_out).write_text(verdict.to_json())
    if verdict.unknown is not None:
        return 2
    return 0 if verdict.fine else 1
