"""checkers/arrow.py's lookups, on the edges the converter's tables meet."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from onceproof.checkers.arrow import invoke_order, positions_of_strings


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
