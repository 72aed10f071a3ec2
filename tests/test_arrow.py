"""checkers/arrow.py's lookups, on the edges the converter's tables meet."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from onceproof.checkers.arrow import positions_of_strings


def test_strings_are_found_by_row_null_and_absent_at_minus_one():
    index = pd.Index(["T1", "T2", "T3"], dtype=object)
    col = pa.chunked_array([["T3", None, "T9"], [], ["T1", "T3", ""]])
    assert positions_of_strings(index, col).tolist() == [2, -1, -1, 0, 2, -1]


def test_no_strings_at_all():
    index = pd.Index(["T1"], dtype=object)
    assert positions_of_strings(index, pa.array([None, None], pa.string())).tolist() == [-1, -1]
    assert positions_of_strings(index, pa.array([], pa.string())).dtype == np.int64
    assert positions_of_strings(pd.Index([], dtype=object), pa.array(["T1"])).tolist() == [-1]
