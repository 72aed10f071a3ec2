"""The ordering keys a partition's checks sort, merge and deduplicate its steps by."""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
from hypothesis import example, given
from hypothesis import strategies as st

from onceproof.checkers import engine, log_values
from onceproof.checkers.partlog import (
    PartitionLog,
    _keys,
    first_of_each,
    name_ranks,
    sort_order,
)
from onceproof.checkers.registry import REGISTRY, TYPES
from onceproof.checkers.store import convert
from onceproof.checkers.verdict import FAMILIES
from tests.support.synth.clients import synthesize, write_history
from tests.support.synth.scenarios import inject

SMALL = st.integers(-1, 50)
# Spans whose product passes 2**62: the keys are then ranks, not folded values.
HUGE = st.integers(-1, 2 ** 40)
ROWS = st.lists(st.tuples(SMALL, HUGE, HUGE) | st.tuples(SMALL, SMALL, SMALL), max_size=30)


def _columns(rows):
    return tuple(np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))


@given(ROWS, ROWS)
@example([(0, 0, 0), (1, 2 ** 40, -1)], [(0, 2 ** 40, 0), (1, 2 ** 40, -1)])  # ranks
@example([(2, 2 ** 63 - 9, 2 ** 63 - 1), (1, 2 ** 63 - 1, 2 ** 63 - 2)],
         [(2, 2 ** 63 - 1, 2 ** 63 - 4)])  # a folded sum past int64 before its low is off
def test_keys_order_the_rows_of_both_sets_as_their_columns_do(a, b):
    ka, kb = _keys(_columns(a), _columns(b))
    rows, keys = a + b, list(ka) + list(kb)
    assert len(ka) == len(a) and len(kb) == len(b)
    for x in range(len(rows)):
        for y in range(len(rows)):
            assert (keys[x] < keys[y]) == (rows[x] < rows[y])


@given(ROWS)
def test_sort_order_is_lexsort(rows):
    cols = _columns(rows)
    assert (sort_order(*cols) == np.lexsort(cols)).all()


@given(ROWS)
@example([(0, 0, 0), (1, 2 ** 40, -1), (1, 2 ** 40, -1)])  # ranks
@example([(3, 1, 1), (2, 5, 0), (3, 2, 1), (3, 1, 1), (2, 5, 1), (3, 2, 1), (2, 5, 1)])  # dense
def test_first_of_each_keeps_the_rows_drop_duplicates_keeps(rows):
    cols = _columns(rows)
    frame = pd.DataFrame(dict(enumerate(cols)))
    assert np.flatnonzero(first_of_each(*cols)).tolist() == frame.drop_duplicates().index.tolist()


NAMES = st.lists(st.sampled_from(["", "a", "b", "ab", "B", "t-10", "t-9"]) | st.none(),
                 max_size=20)


@given(NAMES, st.lists(st.integers(0, 19), max_size=20), st.booleans())
def test_name_ranks_are_factorize_sort_true_codes_whatever_the_categories_order(
        names, picks, reverse):
    cat = pd.Series(names, dtype="category")
    if reverse:  # categories in an order other than their names'
        cat = cat.cat.reorder_categories(cat.cat.categories[::-1])
    rows = np.array([p for p in picks if p < len(names)], dtype=np.int64)
    values = np.array(names, dtype=object)[rows]
    want = pd.factorize(values, sort=True)[0]
    assert name_ranks(cat, rows).tolist() == want.tolist()
    empty_as_none = np.array([None if v == "" else v for v in values], dtype=object)
    assert name_ranks(cat, rows, empty_is_missing=True).tolist() == \
        pd.factorize(empty_as_none, sort=True)[0].tolist()


def test_an_offset_read_with_a_value_and_without_one_is_not_in_the_read_log():
    """The read log keeps offsets always seen holding one value; a record read without
    a value at an offset another read saw holding 0 (what a missing value is filled
    with where the checks fold columns into keys) makes that offset ambiguous, in
    either order."""
    for values in ([0, None], [None, 0]):
        pl = PartitionLog(pd.DataFrame({
            "topic": ["t"] * 4, "partition": [0] * 4, "kind": ["r"] * 4, "rec": [0] * 4,
            "invoke_index": [1, 2, 3, 4], "offset": [5, 5, 6, 6], "value": [*values, 7, 7],
            "vis": [2] * 4}))
        assert pl.read_log[["offset", "value"]].values.tolist() == [[6, 7]]


# The types judged on the driver, from facts or ops, as their definitions say.
_ON_THE_DRIVER = {a.name for a in REGISTRY if a.on_driver}


def test_no_check_depends_on_the_order_of_a_columns_categories(tmp_path):
    """The steps' strings are Categoricals whose categories come in the order the
    file's dictionaries met them (engine.steps_frame); pandas orders a Categorical by
    that order when it sorts, factorizes with sort=True or groups it. Every check must
    judge by the strings: with every column's categories reversed, each bucket of a
    history holding each anomaly gives the same rows."""
    judged: set[str] = set()
    for kind in TYPES:
        events = inject(synthesize(11, ops=60, partitions=2), kind, random.Random(11))
        out = convert(write_history(events, tmp_path / f"{kind}.jsonl"), tmp_path / kind)
        for f in engine._bucket_files(out):
            steps = engine.read_steps(f)
            flipped = steps.copy()
            for name in steps.columns:
                if isinstance(steps[name].dtype, pd.CategoricalDtype):
                    cats = steps[name].cat.categories
                    flipped[name] = steps[name].cat.reorder_categories(cats[::-1])
            assert (flipped["kind"].array.codes != steps["kind"].array.codes).any()
            rows = engine.run_all(steps, FAMILIES)
            assert engine.run_all(flipped, FAMILIES).equals(rows)
            # Duplicates and unattributed reads come as rows held for the finisher, which
            # drops those of an application's outputs (log_values.finish).
            judged |= {t for r, t in zip(rows["row"].to_pylist(), rows["type"].to_pylist())
                       if r in (engine.ANOMALY, log_values.HELD)}
    # Evidence the rows held anomalies: every type but those judged on the driver from
    # facts or ops (cycles, torn transactions, pipelines, late calls, fetches, hanging
    # transactions, judged against time; Streams applications, from their topics).
    assert judged == set(TYPES) - _ON_THE_DRIVER
