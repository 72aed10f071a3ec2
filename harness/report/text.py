"""Words for the report: one-line summaries of what an op's value says.

What each anomaly type means is the checkers' registry (checkers/registry.py), not here.
"""
from __future__ import annotations

import json
from collections.abc import Container

from markupsafe import Markup, escape

_MAX_ITEMS = 8


def _more(items: list, n: int) -> list:
    return items[:n] + ([f"… +{len(items) - n} more"] if len(items) > n else [])


def _num(x) -> str:
    return "none" if x is None else str(x)


def _tp(item: dict) -> str:
    return f"{item.get('topic')}/{item.get('partition')}"


def _record(r: dict, mark: Container) -> Markup:
    text = escape(str(r.get("value")))
    if r.get("value") in mark:
        text = Markup("<mark>") + text + Markup("</mark>")
    at = "" if r.get("offset") is None else f"@{r['offset']}"
    src = "" if r.get("source") is None else f" ←{r['source']}"
    return escape(f"{_tp(r)} ") + text + escape(at + src)


def summary(value: dict | None, mark: Container = frozenset()) -> Markup:
    """What an op's value says, in one line; values in `mark` are highlighted."""
    if not value:
        return Markup("")
    parts: list = []
    if value.get("isolation"):
        parts.append({"read_committed": "rc", "read_uncommitted": "ru"}.get(
            value["isolation"], value["isolation"]))
    for k in ("group", "tid"):
        if value.get(k):
            parts.append(f"{k} {value[k]}")
    if isinstance(value.get("records"), list):
        recs = value["records"]
        shown = [_record(r, mark) for r in recs[:_MAX_ITEMS] if isinstance(r, dict)]
        if len(recs) > _MAX_ITEMS:
            shown.append(escape(f"… +{len(recs) - _MAX_ITEMS} more"))
        parts.append(Markup(", ").join(shown) if recs else "no records")
    for k in ("positions", "offsets"):
        if isinstance(value.get(k), list):
            parts.append(", ".join(_more([f"{_tp(p)}→{_num(p.get('offset'))}" for p in value[k]],
                                         _MAX_ITEMS)))
    if isinstance(value.get("partitions"), list):
        ps = value["partitions"]
        if ps and isinstance(ps[0], dict) and "high" in ps[0]:
            items = [f"{_tp(p)} [{p.get('low')},{p.get('high')}) lso {p.get('lso')}" for p in ps]
        else:
            items = [_tp(p) for p in ps]
        parts.append(", ".join(_more(items, _MAX_ITEMS)))
    if not parts:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
        parts.append(text if len(text) < 160 else text[:157] + "…")
    return Markup("; ").join(escape(p) if not isinstance(p, Markup) else p for p in parts)


def client_libraries(clients: dict) -> str:
    """The client libraries a run drove, with their releases: `{library: version}`."""
    return ", ".join(f"{lib} {v}" for lib, v in sorted(clients.items()))


def txn_protocols(protocols: dict) -> str:
    """Transactions begun per transaction protocol, as the clients that report it say."""
    return ", ".join(f"{v} in {n} transactions begun" for v, n in protocols.items())
