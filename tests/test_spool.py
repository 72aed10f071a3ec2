"""checkers/spool.py: the steps' sources, spooled to disk by partition as they are
made (from two threads, in either order), give each partition's steps in one order."""
from __future__ import annotations

import pyarrow as pa
import pytest

from onceproof.checkers import spool
from onceproof.checkers.spool import Partitions, Steps


def _source(kind: str, rows: list[tuple[str, int]]) -> pa.Table:
    return pa.table({"topic": [t for t, _ in rows], "partition": [p for _, p in rows],
                     "kind": [kind] * len(rows), "n": list(range(len(rows)))})


def test_each_partition_has_its_steps_in_the_sources_order_whatever_came_first(
        tmp_path, monkeypatch):
    monkeypatch.setattr(spool, "SOURCE_SLICE", 2)  # several blocks per source
    steps = Steps(Partitions(), tmp_path, ("w", "p"))
    steps.add("p", _source("p", [("t", 1), ("t", 0), ("t", 1), ("t", 1), ("t", 0)]),
              lambda t: t)
    steps.add("w", _source("w", [("t", 0), ("t", 1), ("t", 0)]), lambda t: t)
    n, buckets = steps.each(lambda t: t.select(["partition", "kind", "n"]).to_pylist())
    assert n == 8
    by_partition: dict[int, list[tuple[str, int]]] = {}
    for rows in buckets:
        for r in rows:
            by_partition.setdefault(r["partition"], []).append((r["kind"], r["n"]))
    # The writes first, then the positions; each source's rows in the order given.
    assert by_partition == {0: [("w", 0), ("w", 2), ("p", 1), ("p", 4)],
                            1: [("w", 1), ("p", 0), ("p", 2), ("p", 3)]}


def test_a_source_is_added_once_and_each_named_one_is_needed(tmp_path):
    steps = Steps(Partitions(), tmp_path, ("w", "p"))
    with pytest.raises(ValueError, match="none of"):
        steps.add("x", _source("x", [("t", 0)]), lambda t: t)
    steps.add("w", _source("w", [("t", 0)]), lambda t: t)
    with pytest.raises(ValueError, match="added already"):
        steps.add("w", _source("w", [("t", 0)]), lambda t: t)
    with pytest.raises(ValueError, match=r"\['p'\] were never added"):
        steps.each(lambda t: t.num_rows)
