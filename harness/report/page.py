"""One self-contained HTML page per run: verdict, timeline, latencies, anomalies, ops.

`write_report(folder)` reads what a run left in its folder (the tables of its history in
history.parquet/, converted from history.jsonl if the folder has none; verdict.json and
plan.json when they are there; docs/history.md describes the history)
and writes folder/report.html: a page a person opens in a browser to see whether the run
was valid, what the clients did while which fault was in force, and, from each anomaly's
examples, one click to the operations that show it.

The page stays small whatever the history's size: figures are PNGs drawn at a fixed
width, and the operations table holds only the ops the anomalies point at (with their
neighbours, for context), the faults, and the first few hundred ops.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import jinja2
import pandas as pd

from onceproof.checkers import Verdict, anomaly, registry
from onceproof.checkers.known import match_text
from onceproof.history.format import CLUSTER, NEMESIS, SEND
from onceproof.report import changes as report_changes
from onceproof.report import faults as report_faults
from onceproof.report import plots as report_plots
from onceproof.report.history import History, load
from onceproof.report.text import client_libraries, summary, txn_protocols
from onceproof.workloads.plan import Plan

FIRST_OPS = 300
CONTEXT = 2  # neighbours of a linked op shown on each side, per process and overall
MAX_LINKED = 2000
PER_TXN = 12
PER_VALUE = 8
MAX_FAULT_ROWS = 500
MAX_WINDOW_ROWS = 200


@dataclass
class Example:
    fields: dict
    links: list[tuple[str, list[int]]] = field(default_factory=list)  # (what, op ids)


def write_report(folder, *, first_ops: int = FIRST_OPS, context: int = CONTEXT,
                 max_linked: int = MAX_LINKED) -> Path:
    """Write folder/report.html from folder's history (and verdict.json, plan.json if
    present); returns its path."""
    folder = Path(folder)
    history = load(folder)
    verdict = _read_verdict(folder / "verdict.json")
    plan = _read_plan(folder / "plan.json")
    faults = history.fault_ops[history.fault_ops["f"] != CLUSTER]
    windows = report_faults.windows(faults, history.duration)
    changes = report_changes.build(history.client_ops, history.fault_ops, history.values,
                                   history.duration)
    examples = _examples(history, verdict, max_linked)
    linked: dict[int, set[str]] = {}
    for kind, exs in examples.items():
        for ex in exs:
            for _, ops in ex.links:
                for op in ops:
                    linked.setdefault(op, set()).add(kind)
    shown = _table_ops(history, set(linked), first_ops, context)
    values = history.values(_indexes(shown))
    marked = {ex.fields.get("value") for exs in examples.values() for ex in exs
              if ex.fields.get("value") is not None}
    page = _template().render(
        folder=folder, verdict=verdict, facts=_facts(folder, plan, history, verdict),
        outcomes=_outcomes(history), kinds=_kinds(history.client_ops),
        faults=_kinds(faults), windows=windows,
        max_windows=MAX_WINDOW_ROWS,
        timeline=_timeline(history, windows), latency=_latency(history),
        changes=changes, tracks=report_plots.tracks(changes.tracks, windows, history.duration)
        if changes else None,
        dense=len(history.client_ops) > report_plots.DENSE,
        throughput=report_plots.throughput(history.client_ops, windows, history.duration),
        anomalies=_anomaly_rows(verdict, examples), shown_ids=set(shown["op"]),
        rows=_op_rows(shown, values, linked, marked, len(history.ops)),
        n_ops=len(history.ops))
    out = folder / "report.html"
    out.write_text(page, encoding="utf-8")
    return out


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_plan(path: Path) -> Plan | None:
    """plan.json, parsed as it is (a report shows what ran, checked or not), or None."""
    raw = _read_json(path)
    try:
        return Plan.of(raw) if isinstance(raw, dict) else None
    except (TypeError, AttributeError, ValueError):
        return None


def _read_verdict(path: Path) -> dict | None:
    """verdict.json as Verdict.to_dict() writes it, with any missing field defaulted so
    a hand-written or older verdict still renders."""
    d = _read_json(path)
    if not isinstance(d, dict):
        return None
    examples = {t: [{**{c: None for c in anomaly.COLUMNS}, **ex} for ex in exs]
                for t, exs in (d.get("examples") or {}).items()}
    return {"valid": bool(d.get("valid")), "counts": dict(d.get("counts") or {}),
            "examples": examples, "notes": list(d.get("notes") or []),
            "stalls": list(d.get("stalls") or []), "stats": dict(d.get("stats") or {}),
            "unknown": d.get("unknown"), "tested": dict(d.get("tested") or {}),
            "unjudged": [{"rule": u.get("rule"), "count": u.get("count"), "why": u.get("why")}
                         for u in d.get("unjudged") or [] if isinstance(u, dict)],
            **_known(d)}


def _known(d: dict) -> dict:
    """The known issues the verdict's anomalies match (checkers/known.py), and whether
    they are all that fails it (the banner's colour)."""
    try:
        v = Verdict.from_dict(d)
    except (KeyError, TypeError, ValueError, AttributeError):
        return {"known": [], "known_only": False}
    return {"known": v.known, "known_only": v.known_only,
            "known_issues": sorted({f"{m['issue']}, {m['state']}" for m in v.known})}


def _template() -> jinja2.Template:
    text = resources.files("onceproof.report").joinpath("templates/report.html").read_text("utf-8")
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    return env.from_string(text)


def _indexes(ops: pd.DataFrame) -> list[int]:
    """The event indexes of the ops' invokes and completions."""
    return [int(i) for i in pd.concat([ops["invoke_index"], ops["complete_index"]]).dropna()]


# ----------------------------------------------------------------------------- facts

def _outcomes(h: History) -> dict[str, int]:
    counts = h.client_ops["outcome"].value_counts()
    return {k: int(counts.get(k, 0)) for k in ("ok", "fail", "info")}


def _kinds(ops: pd.DataFrame) -> list[dict]:
    """Ops per kind and outcome, most frequent kinds first."""
    if ops.empty:
        return []
    t = pd.crosstab(ops["f"], ops["outcome"])
    return [{"f": f, **{k: int(t.loc[f, k]) if k in t.columns else 0
                       for k in ("ok", "fail", "info")}, "total": int(t.loc[f].sum())}
            for f in t.sort_values(by=list(t.columns), ascending=False).index]


def _facts(folder: Path, plan: Plan | None, h: History, verdict) -> list[tuple[str, str]]:
    """What is known about the run, from whichever files the folder holds."""
    size = f" ({_size(h.jsonl.stat().st_size)})" if h.jsonl.is_file() else ""
    facts = [("history", f"{h.n_events:,} events, {len(h.ops):,} ops by "
                         f"{h.client_ops['process'].nunique()} clients over {h.duration:.3f} s"
                         + size)]
    if (rates := _throughput(h)):
        facts.append(("throughput", rates))
    state: dict = next((s for s in (_read_json(folder / "cluster" / "state.json"),
                              _read_json(folder.parent / "cluster" / "state.json")) if s), {})
    had = h.fault_ops.loc[h.fault_ops["f"] == CLUSTER, "value"]
    had = had.iloc[0] if len(had) and isinstance(had.iloc[0], dict) else {}
    version = (had.get("kafka_version") or state.get("kafka_version")
               or _version_from_logs(folder / "logs"))
    if version:
        facts.append(("Kafka version", version))
    if had.get("clients"):
        facts.append(("client libraries", client_libraries(had["clients"])))
    for kind, settings in (had.get("client_settings") or {}).items():
        if kind in ("producer", "consumer"):
            facts.append((f"{kind} settings in force", ", ".join(
                f"{k}={v}" for k, v in settings.items())))
    for cid, own in ((had.get("client_settings") or {}).get("clients") or {}).items():
        facts.append((f"client {cid}'s own settings", ", ".join(f"{k}={v}" for k, v in own.items())))
    if (protocols := (verdict or {}).get("tested", {}).get("txn_protocols")):
        facts.append(("transaction protocol", txn_protocols(protocols)))
    if had.get("external"):
        # A cluster the harness did not start: where it was, and what could not be done.
        facts.append(("cluster", f"brought by the user, at {had.get('bootstrap')}: "
                                 + ", ".join(had.get("brokers") or [])))
        if had.get("client_config"):
            facts.append(("client settings", ", ".join(f"{k}={v}" for k, v in
                                                       had["client_config"].items())))
        facts.append(("fault commands", ", ".join(had.get("fault_commands") or []) or "none"))
        facts.append(("not injected", "; ".join(had.get("not_injected") or []) or "nothing"))
    if "broker" in had and not had.get("external"):
        facts.append(("broker settings", ", ".join(f"{k}={v}" for k, v in sorted(
            had["broker"].items())) or "the harness's defaults (docs/plans.md)"))
    nodes = state.get("nodes") or sorted(p.stem for p in (folder / "logs").glob("node*.log"))
    if nodes:
        facts.append(("nodes", ", ".join(map(str, nodes))))
    for key in ("cluster_id", "bootstrap"):
        if state.get(key):
            facts.append((key.replace("_", " "), str(state[key])))
    if plan is not None:
        facts.append(("topics", ", ".join(f"{name} ({t.partitions} partitions)"
                                          for name, t in plan.topics.items())))
        for cid, c in plan.clients.items():
            where = ", ".join(f"{k} {v}" for k, v in (("topic", c.topic), ("input", c.input),
                                                      ("output", c.output)) if v is not None)
            config = ", ".join(f"{k}={v}" for k, v in (c.config or {}).items())
            facts.append((f"client {cid}", " · ".join(x for x in (c.role, where, config) if x)))
        n_faults = sum(s.fault is not None for s in plan.steps)
        facts.append(("plan", f"{_n(len(plan.steps) - n_faults, 'round')}, "
                              f"{_n(n_faults, 'fault step')}"))
    if verdict and verdict.get("stats"):
        facts.extend(_stats(verdict["stats"]))
    if (folder / "logs").is_dir():
        facts.append(("logs", ", ".join(sorted(p.name for p in (folder / "logs").iterdir()))))
    return facts


def _throughput(h: History) -> str | None:
    """Client ops/s over the run, and beside them the records and bytes acknowledged
    per second (the sizes the history records; run/values.py)."""
    if h.duration <= 0:
        return None
    from onceproof.checkers.store import read_table
    ops = len(h.client_ops) / h.duration
    text = f"{ops:,.0f} client ops/s"
    try:
        writes = read_table(h.tables, "writes", ["type", "size"]).to_pandas()
    except (KeyError, ValueError):  # tables of an older converter: no sizes
        return text
    acked = writes[writes["type"] == "ok"]
    text += f"; {len(acked) / h.duration:,.0f} records/s acknowledged"
    if acked["size"].notna().any():
        text += f", {acked['size'].sum() / h.duration / 1e6:,.2f} MB/s of values"
    return text


def _n(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def _stats(stats: dict) -> list[tuple[str, str]]:
    # Ops per kind and outcome are in the page's own tables already.
    nested = {k: v for k, v in stats.items() if isinstance(v, dict) and k not in
              ("ops_by_f", "ops_by_type")}
    flat = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in stats.items()
                     if not isinstance(v, (dict, list)))
    return [("checker stats", flat)] + [
        (k.replace("_", " "), ", ".join(f"{a} {b}" for a, b in v.items()))
        for k, v in nested.items()]


def _version_from_logs(logs: Path) -> str | None:
    # The broker prints its version at startup; a bounded read keeps huge logs cheap.
    for log in sorted(logs.glob("node*.log")) if logs.is_dir() else ():
        with open(log, "rb") as fh:
            m = re.search(rb"Kafka version: (\S+)", fh.read(16 << 20))
        if m:
            return m.group(1).decode(errors="replace")
    return None


def _timeline(h: History, windows) -> str:
    procs = h.client_ops.groupby("process")["start"].min().sort_values().index.tolist()
    final = h.client_ops.loc[h.client_ops["final"], "start"]
    return report_plots.timeline(h.client_ops, windows, procs, h.duration,
                                 final_at=float(final.min()) if len(final) else None)


def _latency(h: History) -> list[dict]:
    done = h.client_ops[~h.client_ops["pending"]]
    rows = []
    for f, g in [*done.groupby("f"), ("all ops", done)]:
        if g.empty:
            continue
        q = g["latency_ms"].quantile([0.5, 0.95, 0.99])
        rows.append({"f": f, "n": len(g), "p50": q[0.5], "p95": q[0.95], "p99": q[0.99],
                     "max": g["latency_ms"].max()})
    return rows


# ------------------------------------------------------------------------- anomalies

def _examples(h: History, verdict, max_linked: int) -> dict[str, list[Example]]:
    """Each example of the verdict, with the ops that show it: its witnesses, by role (its
    own op among them; an example of a verdict without witnesses links its op), the ops
    of its transaction, and the sends and first reads of its value. From the example's
    fields alone: the detail is text for people, never parsed."""
    if not verdict:
        return {}
    ops = h.ops
    known = set(ops["op"])
    txns = set(ops["txn"].dropna())
    values = {ex.get("value") for exs in verdict.get("examples", {}).values() for ex in exs
              if isinstance(ex.get("value"), int)}
    value_ops = h.ops_with_values(values)
    out: dict[str, list[Example]] = {}
    budget = max_linked
    for kind, exs in verdict.get("examples", {}).items():
        for fields in exs:
            ex = Example(fields)
            by_role: dict[str, list] = {}
            for w in fields.get("witnesses") or ():
                if isinstance(w, dict) and isinstance(w.get("op"), int) and w["op"] in known:
                    by_role.setdefault(str(w.get("role") or "witness"), []).append(w["op"])
            op = fields.get("op")
            if isinstance(op, int) and op in known and not any(op in v for v in by_role.values()):
                ex.links.append(("op", [op]))
            ex.links.extend(by_role.items())
            txn = fields.get("txn")
            if txn in txns:
                t_ops = ops.loc[ops["txn"] == txn, "op"].tolist()
                ex.links.append((f"txn {txn}", t_ops[:PER_TXN // 2] + t_ops[-(PER_TXN // 2):]
                                 if len(t_ops) > PER_TXN else t_ops))
            value = fields.get("value")
            if value in value_ops:
                v_ops = value_ops[value]
                sends = set(ops.loc[ops["op"].isin(v_ops) & (ops["f"] == SEND), "op"])
                ranked = [o for o in v_ops if o in sends] + [o for o in v_ops if o not in sends]
                ex.links.append((f"value {value}", ranked[:PER_VALUE]))
            ex.links = [(what, _unique(ids)) for what, ids in ex.links if ids]
            # Past the budget, examples keep their text but lose their links.
            n = sum(len(ids) for _, ids in ex.links)
            if n > budget:
                ex.links = []
            budget -= n
            out.setdefault(kind, []).append(ex)
    return out


def _unique(xs) -> list:
    seen, out = set(), []
    for x in xs:
        if x is not None and x not in seen:
            seen.add(x)
            out.append(int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else x)
    return out


def _anomaly_rows(verdict, examples: dict[str, list[Example]]) -> list[dict]:
    if not verdict:
        return []
    order = registry.TYPES
    counts = verdict.get("counts", {})
    kinds = sorted(set(counts) | set(examples),
                   key=lambda t: (order.index(t) if t in order else len(order), t))
    notes, stalls = set(verdict.get("notes", [])), set(verdict.get("stalls", []))
    # A verdict written by another version may name a type this registry does not know.
    known = registry.BY_NAME
    return [{"type": t, "count": counts.get(t, 0),
             "severity": anomaly.NOTE if t in notes else anomaly.LIVENESS if t in stalls
             else anomaly.VIOLATION,
             "definition": known[t].definition if t in known else "",
             "examples": examples.get(t, []),
             "known": [{"text": match_text(m), "link": m.get("link"),
                        "documented": m.get("documented")}
                       for m in verdict.get("known", []) if m.get("type") == t]}
            for t in kinds]


# ---------------------------------------------------------------------------- op table

def _table_ops(h: History, linked: set[int], first_ops: int, context: int) -> pd.DataFrame:
    """The ops the table shows: the first few hundred, every fault, each linked op and
    its `context` neighbours both in its own process and in the whole history."""
    ops = h.ops
    pos = pd.Series(ops.index, index=ops.index)  # ops are in history order, 0..n-1
    keep = pos < first_ops
    keep |= (ops["process"] == NEMESIS) & (ops.groupby("process").cumcount() < MAX_FAULT_ROWS)
    hit = ops["op"].isin(linked)
    if hit.any():
        ppos = ops.groupby("process").cumcount()
        near = pd.concat([pd.DataFrame({"process": ops.loc[hit, "process"], "n": ppos[hit] + k})
                          for k in range(-context, context + 1)])
        mine = pd.MultiIndex.from_arrays([ops["process"], ppos])
        keep |= pd.Series(mine.isin(pd.MultiIndex.from_frame(near)), index=ops.index)
        span = {int(i + k) for i in pos[hit] for k in range(-context, context + 1)}
        keep |= pos.isin(span)
    return ops[keep]


def _op_rows(shown: pd.DataFrame, values: dict, linked: dict[int, set[str]], marked: set,
             n_ops: int) -> list[dict]:
    """Table rows in history order, with a gap row wherever ops were left out."""
    rows, last = [], -1
    for i, op in zip(shown.index, shown.itertuples(index=False)):
        if i > last + 1:
            rows.append({"gap": i - last - 1})
        last = i
        done = values.get(int(op.complete_index)) if not op.pending else None
        rows.append({
            "gap": 0, "op": op.op, "process": op.process, "f": op.f, "outcome": op.outcome,
            "pending": op.pending, "txn": op.txn if isinstance(op.txn, str) else "",
            "start": op.start, "latency": None if pd.isna(op.latency_ms) else op.latency_ms,
            "invoke": summary(values.get(op.invoke_index), marked),
            "done": summary(done, marked) if done is not None else "",
            "error": op.error if isinstance(op.error, str) else "", "final": op.final,
            "anomalies": sorted(linked.get(op.op, ())),
        })
    if last < n_ops - 1:
        rows.append({"gap": n_ops - 1 - last})
    return rows
