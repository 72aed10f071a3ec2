"""The verdict as a person reads it at a terminal (`onceproof check`)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .known import FAIL, annotate, match_text
from .verdict import Verdict, describe, unjudged_lines


def table(verdict: Verdict) -> Table:
    t = Table()
    t.add_column("anomaly")
    t.add_column("count", justify="right")
    t.add_column("severity")
    t.add_column("example")
    known = bool(verdict.known)
    if known:
        t.add_column("known issue")
    for name, n in verdict.counts.items():
        examples = verdict.examples.get(name) or [{}]
        t.add_row(name, str(n), verdict.severity(name),
                  escape(describe(examples[0])),
                  *([escape("; ".join(match_text(m) for m in verdict.known if m["type"] == name))]
                    if known else []))
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
    for line in (witness_lines(verdict) + known_lines(verdict)
                 + unjudged_lines(verdict.unjudged)):
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


def known_lines(verdict: Verdict) -> list[str]:
    """The known upstream issues the anomalies match (checkers/known.py), one a line,
    with the link to the issue; and, when they are all that fails the verdict, so."""
    lines = [f"{m['type']}: {match_text(m)} ({m['link']})" for m in verdict.known]
    if lines:
        lines.insert(0, "Known issues (docs/known-issues.md):")
        if verdict.known_only:
            lines.append("Every anomaly that fails this verdict matches a known issue: "
                         "--known-issues report passes it.")
    return lines


def run_check(history: str, spark_master: str | None = None, json_out: str | None = None,
              console: Console | None = None, known_issues: str = FAIL,
              plan_clients: dict | None = None) -> int:
    """Check `history`, print the verdict, optionally save it; the exit code: 0 valid
    and live, 1 violations or stalls, 2 no verdict for want of evidence. Under
    known_issues="report", 0 also when a known issue matches every anomaly that fails
    it (checkers/known.py). plan_clients: each plan client's library and idempotence
    (trial.plan_clients), when the caller knows the plan. (HistoryError, for what
    could not be checked, propagates.)"""
    from .verdict import check
    verdict = check(history, spark_master=spark_master)
    if plan_clients:
        verdict.tested = {**verdict.tested, "plan_clients": plan_clients}
        annotate(verdict)
    show(verdict, console)
    if json_out:
        Path(json_out).write_text(verdict.to_json())
    return exit_code(verdict, known_issues)


def exit_code(verdict: Verdict, known_issues: str = FAIL) -> int:
    """A verdict's exit code: 2 without evidence, 1 when it fails (Verdict.fails, under
    --known-issues), else 0."""
    if verdict.unknown is not None:
        return 2
    return 1 if verdict.fails(known_issues) else 0
