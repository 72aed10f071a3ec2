"""checkers/arrow.py's lookups, on the edges the converter's tables meet."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from onceproof.checkers.arrow import (
    CODED,
    KeyIndex,
    as_types,
    coded,
    compacted,
    invoke_order,
    positions_of_strings,
)


def test_strings_are_found_by_row_null_and_absent_at_minus_one():
    index = pd.Index(["T1", "T2", "T3"], dtype=object)
    col = pa.chunked_array([["T3", None, "T9"], [], ["T1", "T3", ""]])
    assert positions_of_strings(index, col).tolist() == [2, -1, -1, 0, 2, -1]


def test_no_strings_at_all():
    index = pd.Index(["T1"], dtype=object)
    assert positions_of_strings(index, pa.array([None, None], pa.string())).tolist() == [-1, -1]
    assert positions_of_strings(index, pa.array([], pa.string())).dtype == np.int64
    assert positions_of_strings(pd.Index([], dtype=object), pa.array(["T1"])).tolist() == [-1]


def test_rows_are_put_in_invoke_order_as_lexsort_puts_them():
    """invoke_order is np.lexsort((rec, inv)), stable on ties, by whichever sort it
    takes; None only for rows already in that order."""
    rng = np.random.default_rng(7)
    cases = [
        (rng.integers(0, 50, 2000), rng.integers(0, 4, 2000)),  # many ties
        (np.r_[np.arange(1000), 400, np.arange(1000, 2000)], rng.integers(0, 3, 2001)),  # nearly
        (rng.integers(-5, 5, 500), rng.integers(-3, 3, 500)),  # negative: lexsort
        (rng.integers(0, 2**40, 500), rng.integers(0, 2**30, 500)),  # a key too wide
    ]
    for inv, rec in cases:
        order = invoke_order(inv, rec)
        assert order is not None
        assert order.tolist() == np.lexsort((rec, inv)).tolist()
    inv, rec = np.array([1, 1, 2, 5, 5]), np.array([0, 3, 0, 1, 1])
    assert invoke_order(inv, rec) is None
    assert invoke_order(np.array([7]), np.array([9])) is None
    assert invoke_order(np.array([1, 1]), np.array([1, 0])).tolist() == [1, 0]


_LEAST, _MOST = np.iinfo(np.int64).min, np.iinfo(np.int64).max


@pytest.mark.parametrize("keys", [
    np.array([5, 3, 9, 4]),  # near each other: read from an array over their span
    np.array([7, 2**40, -2**40]),  # spread wide: hashed
    np.array([_LEAST, 0, _MOST]),  # a span that does not fit in an int64
    np.array([0, 1, 2, 1]),  # a key twice: hashed, and found as pandas finds it
    np.arange(-3, 3000),
    np.array([], dtype=np.int64),
])
def test_keys_are_found_as_a_pandas_index_finds_them(keys):
    """KeyIndex gives pd.Index's rows, whichever way it holds the keys: absent keys
    (below, above, between and at the int64 edges, where a difference overflows) -1."""
    queries = np.r_[keys, keys - 1, keys + 1, 6, -4, 3001, 2**40 + 1, _LEAST, _MOST,
                    _LEAST + 1, _MOST - 1].astype(np.int64)
    index = pd.Index(keys.astype(np.int64))
    if not index.is_unique:
        with pytest.raises(pd.errors.InvalidIndexError):
            index.get_indexer(queries)
        with pytest.raises(pd.errors.InvalidIndexError):
            KeyIndex(keys).get_indexer(queries)
        return
    assert len(KeyIndex(keys)) == len(keys)
    assert KeyIndex(keys).get_indexer(queries).tolist() == index.get_indexer(queries).tolist()


def test_a_taken_coded_column_keeps_only_the_strings_its_rows_use():
    """What the reads take of coded ops: the same strings, row by row, from a
    dictionary of only those (nulls stay null)."""
    words = [f"T{i}" for i in range(1000)]
    whole = coded(pa.table({"txn": pa.array(words)})).column("txn")
    taken = whole.take(pa.array([999, None, 3, 999, 500], pa.int64()))
    small = compacted(taken)
    assert small.type == CODED
    assert small.to_pylist() == ["T999", None, "T3", "T999", "T500"]
    assert sorted(small.chunk(0).dictionary.to_pylist()) == ["T3", "T500", "T999"]
    # A few strings, or plain ones, are left as they are.
    few = coded(pa.table({"f": ["poll", "send"]})).column("f")
    assert compacted(few) is few
    plain = pa.chunked_array([["a"]])
    assert compacted(plain) is plain


def test_coded_strings_stay_coded_where_a_schema_would_decode_them():
    table = coded(pa.table({"process": ["p1", None], "none": pa.nulls(2, pa.string()),
                            "n": [1, 2]}))
    assert [table.schema.field(c).type for c in ("process", "none")] == [CODED, CODED]
    assert table.column("none").to_pylist() == [None, None]
    assert table.column("process").to_pylist() == ["p1", None]
    schema = pa.schema([("process", pa.string()), ("n", pa.int64()), ("other", pa.string())])
    kept = as_types(schema, {c: table.column(c) for c in table.column_names})
    assert [f.type for f in kept] == [CODED, pa.int64(), pa.string()]
