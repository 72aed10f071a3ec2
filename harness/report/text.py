"""Words for the report: what each anomaly type means, and one-line summaries of values.

Definitions are short on purpose (the checkers' module docstrings hold the full rules);
they are keyed and ordered as checkers.anomaly.TYPES, which a test keeps in step.
"""
from __future__ import annotations

import json

from markupsafe import Markup, escape

DEFINITIONS = {
    "duplicate": "One written value appears at two offsets of a partition: it was appended twice.",
    "inconsistent_offset": "One offset of a partition was seen holding two different values.",
    "unattributed_read": "A read returned a value that no send in the history wrote.",
    "lost_write": "An acknowledged write (or a committed transaction's write) is missing "
                  "below offsets that readers reached.",
    "unseen": "An acknowledged write was never seen by the final reads, after every fault healed.",
    "hanging_txn": "At the end the last stable offset stayed below the high watermark: a "
                   "transaction never finished.",
    "aborted_read": "G1a: a read_committed consumer saw a value of a transaction that failed "
                    "or aborted.",
    "precommitted_read": "A read_committed consumer saw a value before its transaction's "
                         "commit was invoked.",
    "torn_txn": "Some but not all writes of one committed transaction are visible.",
    "poll_skip": "A consumer's reads jumped over committed records, with no seek, rewind or "
                 "reassignment to explain it.",
    "nonmonotonic_poll": "A consumer read an offset at or before one it had already read, "
                         "with no seek to explain it.",
    "rewind_mismatch": "After seeking to offset o, the consumer did not read what the log "
                       "holds from o.",
    "nonmonotonic_send": "A producer's send was acknowledged at an offset not after its "
                         "previous send's on that partition.",
    "commit_order": "Transactions appear in an order that contradicts real time or another "
                    "partition's order (T1 committed before T2 began, yet T2 comes first).",
    "g0": "Write cycle: committed transactions appended in opposite orders on different "
          "partitions (Kafka allows it for concurrent transactions).",
    "g1c": "Circular information flow: a cycle of write and read dependencies between "
           "committed transactions.",
    "g_single": "Read skew: a cycle with exactly one anti-dependency (a transaction read a "
                "partition before another's records were in it, yet follows it).",
    "offset_regression": "A group's committed offset went backwards with no rewind asked for.",
    "stale_offset_fetch": "A fetch of a group's committed offsets did not see the latest "
                          "commit that had completed.",
    "duplicate_output": "A pipeline's input record has more than one committed output.",
    "lost_input": "A pipeline committed past an input record that has no committed output.",
}

_MAX_ITEMS = 8


def _more(items: list, n: int) -> list:
    return items[:n] + ([f"… +{len(items) - n} more"] if len(items) > n else [])


def _num(x) -> str:
    return "none" if x is None else str(x)


def _tp(item: dict) -> str:
    return f"{item.get('topic')}/{item.get('partition')}"


def _record(r: dict, mark: set) -> Markup:
    text = escape(str(r.get("value")))
    if r.get("value") in mark:
        text = Markup("<mark>") + text + Markup("</mark>")
    at = "" if r.get("offset") is None else f"@{r['offset']}"
    src = "" if r.get("source") is None else f" ←{r['source']}"
    return escape(f"{_tp(r)} ") + text + escape(at + src)


def summary(value: dict | None, mark: set = frozenset()) -> Markup:
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
