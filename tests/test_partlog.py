"""The ordering keys a partition's checks sort and merge its steps by."""
from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from onceproof.checkers.partlog import _keys, sort_order

SMALL = st.integers(-1, 50)
# Spans whose product passes 2**62: the keys are then ranks, not folded values.
HUGE = st.integers(-1, 2 ** 40)
ROWS = st.lists(st.tuples(SMALL, HUGE, HUGE) | st.tuples(SMALL, SMALL, SMALL), max_size=30)


def _columns(rows):
    return tuple(np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))


@given(ROWS, ROWS)
@example([(0, 0, 0), (1, 2 ** 40, -1)], [(0, 2 ** 40, 0), (1, 2 ** 40, -1)])  # ranks
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
