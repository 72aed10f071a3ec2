"""Arrow and pandas helpers for building the checkers' tables (checkers/tables.py):
exploding list fields of events into rows, exact integer columns, joins by position
(KeyIndex, and WriteIndex: the write of each value), and frames or tables in a table's
schema."""
from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .tables import SCHEMAS


def explode(events: pa.Table, mask: np.ndarray, key: str) -> pa.Table:
    item = events.schema.field("value").type.field(key).type.value_type
    sel = pa.array(np.flatnonzero(mask), type=pa.int64())
    # The one field, then the rows: the other fields of value are never copied.
    lists = pc.struct_field(events.column("value"), key).take(sel).combine_chunks()
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy()
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    op = events.column("op").take(sel).to_numpy()
    cols = {"op": pa.array(op[parents], type=pa.int64()),
            "rec": pa.array(np.arange(len(flat), dtype=np.int64) - starts, type=pa.int64())}
    for i in range(item.num_fields):
        cols[item.field(i).name] = flat.field(i) if len(flat) else pa.array([], item.field(i).type)
    return pa.table(cols)


def ints(col) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of an Arrow int64 column, exactly (no trip through float)."""
    col = pa.chunked_array([col]) if isinstance(col, pa.Array) else col
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return pc.fill_null(col, 0).to_numpy(), valid


class KeyIndex:
    """The row of each of some unique int64 keys (op ids, written values), as a
    pd.Index's get_indexer gives it (-1 where a key is absent).

    A history's op ids, and its written values as our clients make them, are nearly
    consecutive: then a key's row is read from an array over their span, where
    pandas hashes each key (at 10M events, each of 42M reads looks up its op and its
    value, in indexes of 5M and 4M keys; 4M lookups took 0.20 s hashed, 0.04 s read
    from the array). Keys spread wider, or not unique, are a pd.Index, which behaves
    as it always did."""

    # How many slots per key the array may have before a hash table is smaller.
    SPREAD = 4

    def __init__(self, keys: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=np.int64)
        self._n = len(keys)
        self._table: np.ndarray | None = None
        if self._n:
            lo, hi = int(keys.min()), int(keys.max())
            if hi - lo < self.SPREAD * self._n + 1024:
                table = np.full(hi - lo + 1, -1, dtype=np.int64)
                rows = np.arange(self._n, dtype=np.int64)
                table[keys - lo] = rows
                if (table[keys - lo] == rows).all():  # else some key came twice
                    self._lo, self._hi, self._table = lo, hi, table
        self._index = None if self._table is not None else hashed(pd.Index(keys))

    def __len__(self) -> int:
        return self._n

    def get_indexer(self, keys: np.ndarray) -> np.ndarray:
        if self._index is not None:
            return self._index.get_indexer(keys)
        keys = np.asarray(keys, dtype=np.int64)
        inside = (keys >= self._lo) & (keys <= self._hi)
        # Keys outside the span are never subtracted from: they could overflow.
        assert self._table is not None
        return np.where(inside, self._table[np.where(inside, keys, self._lo) - self._lo], -1)


def positions_in(index: pd.Index | KeyIndex, keys: np.ndarray,
                 valid: np.ndarray | None = None) -> np.ndarray:
    """Row of each key in `index` (unique), -1 when absent or not valid."""
    idx = index.get_indexer(keys) if len(keys) else np.empty(0, dtype=np.int64)
    if valid is not None:
        idx = np.where(valid, idx, -1)
    return idx


class WriteIndex:
    """Which row of the writes table wrote each value (values are unique)."""

    def __init__(self, writes: pa.Table) -> None:
        self.writes = writes
        values, valid = ints(writes.column("value"))
        self.values = KeyIndex(values[valid])
        self.rows = np.flatnonzero(valid)

    def rows_of(self, values: np.ndarray, valid: np.ndarray) -> np.ndarray:
        at = positions_in(self.values, values, valid)
        return np.where(at >= 0, self.rows[np.maximum(at, 0)] if len(self.rows) else 0, -1)

    def keeping(self, columns: list[str],
                then: Callable[[pa.Table], pa.Table] = lambda t: t) -> WriteIndex:
        """The same index, holding only `columns` of the writes (made `then`)."""
        narrow = copy.copy(self)
        narrow.writes = then(self.writes.select(columns))
        return narrow


def null_ints(n: int) -> pd.arrays.IntegerArray:
    """n nulls of pandas' Int64 (without a list of n pd.NA to read)."""
    return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))


def equal_to(column, value: str):
    """Where an Arrow column equals `value`, nulls not (an Arrow boolean column)."""
    return pc.fill_null(pc.equal(column, value), False)


def positions_of_strings(index: pd.Index, col) -> np.ndarray:
    """Row of each string of Arrow column `col` in `index` (unique), -1 when absent or
    null. Each distinct string is looked up once (a dictionary encoding): millions of
    rows never become millions of Python strings."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    coded = pc.dictionary_encode(col)
    if not len(coded.dictionary):  # no rows, or only nulls
        return np.full(len(col), -1, dtype=np.int64)
    at = positions_in(index, coded.dictionary.to_numpy(zero_copy_only=False))
    codes = coded.indices
    return np.where(codes.is_valid().to_numpy(zero_copy_only=False),
                    at[pc.fill_null(codes, 0).to_numpy()], -1)


CODED = pa.dictionary(pa.int32(), pa.string())


def coded(table: pa.Table) -> pa.Table:
    """The table with its string columns dictionary-encoded (each distinct string once,
    its rows as codes); columns coded already stay as they are."""
    return pa.table([_code(col) for col in table.columns], names=table.column_names)


def _code(col: pa.ChunkedArray) -> pa.ChunkedArray:
    if col.type != pa.string():
        return col
    if col.null_count == len(col):
        # A steps column of another kind of step: most of a step's strings (hashing
        # nulls takes a third of the time of hashing strings).
        return pa.chunked_array([pa.nulls(len(c), CODED) for c in col.chunks], type=CODED)
    return pc.dictionary_encode(col)


# A dictionary of more strings than this is cut down to the ones its rows use.
_FEW = 256


def compacted(col):
    """A dictionary-encoded column whose dictionary holds only the strings its rows
    use, in their order there; any other column as it is.

    What is taken from a coded column keeps the whole dictionary (every transaction
    id of the history): joined into every slice of reads, each slice's strings would
    be all of them, hashed again wherever the slices meet."""
    if not pa.types.is_dictionary(col.type):
        return col
    if isinstance(col, pa.ChunkedArray):
        if all(len(chunk.dictionary) <= _FEW for chunk in col.chunks):
            return col
        return pa.chunked_array([compacted(chunk) for chunk in col.chunks], type=col.type)
    if len(col.dictionary) <= _FEW:
        return col
    indices = col.indices
    valid = indices.is_valid().to_numpy(zero_copy_only=False)
    codes = pc.fill_null(indices, 0).to_numpy()
    used = np.zeros(len(col.dictionary), dtype=bool)
    used[codes[valid]] = True
    new_code = (np.cumsum(used) - 1).astype(codes.dtype)
    new = pa.array(new_code[codes], type=indices.type, mask=None if valid.all() else ~valid)
    return pa.DictionaryArray.from_arrays(
        new, col.dictionary.take(pa.array(np.flatnonzero(used), type=pa.int64())))


def as_types(schema: pa.Schema, columns: dict) -> pa.Schema:
    """`schema`, but a string field whose column (in `columns`, by name) is coded keeps
    that column's dictionary type: a cast to the schema would decode it."""
    def kept(field: pa.Field) -> pa.Field:
        col = columns.get(field.name)
        if (col is not None and pa.types.is_dictionary(col.type)
                and col.type.value_type == field.type):
            return field.with_type(col.type)
        return field
    return pa.schema([kept(f) for f in schema])


def hashed(index: pd.Index) -> pd.Index:
    """`index` with its hash table built: pandas builds it on the first lookup, and two
    threads making that first lookup together can each see a half-built table (a
    unique index then claims to have duplicates)."""
    if len(index):
        index.get_indexer(index[:1])
    return index


def take_rows(table: pa.Table, idx: np.ndarray, cols: list[str], prefix: str = "") -> dict:
    """Columns of `table` at rows idx (null where idx is -1), named prefix + column."""
    missing = idx < 0
    rows = pa.array(np.where(missing, 0, idx), type=pa.int64(), mask=missing)
    picked = table.select(cols).take(rows) if table.num_rows else \
        pa.table({c: pa.nulls(len(idx), table.schema.field(c).type) for c in cols})
    return {prefix + c: picked.column(c) for c in cols}


def strings(col) -> np.ndarray:
    return col.to_numpy(zero_copy_only=False) if not isinstance(col, np.ndarray) else col


def concat_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate, leaving out empty frames (pandas warns about their dtypes) but
    keeping the columns when all are empty."""
    full = [f for f in frames if len(f)]
    return pd.concat(full, ignore_index=True) if full else frames[0].iloc[:0]


def nullable(t):
    # Strings stay Python objects: pandas' StringDtype is several times slower to
    # compare, join and hand back to Arrow at millions of rows.
    if pa.types.is_integer(t):
        return pd.Int64Dtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    return None


def ordered(cols: dict, name: str) -> pa.Table:
    """cols as table `name`, in (invoke_index, rec) order, with its schema (its coded
    strings left coded, as_types)."""
    schema = SCHEMAS[name]
    n = len(next(iter(cols.values())))
    table = pa.table({f.name: cols[f.name] if f.name in cols else pa.nulls(n, f.type)
                      for f in schema}).cast(as_types(schema, cols))
    order = invoke_order(ints(table.column("invoke_index"))[0], ints(table.column("rec"))[0])
    if order is not None:  # else already in order: no copy of every column
        table = table.take(pa.array(order, type=pa.int64()))
    return table


def invoke_order(inv: np.ndarray, rec: np.ndarray) -> np.ndarray | None:
    """The stable order of rows by (inv, rec), as np.lexsort((rec, inv)) gives it; None
    when they are in that order already.

    Rows come nearly in order (a history's events are written as they happen), which
    one sort of a single key finds in a pass or two, where lexsort sorts each key: at
    3M rows 0.03-0.1 s instead of 0.11-0.17 s, and a check for rows already in order,
    5 ms."""
    if len(inv) < 2:
        return None
    after = inv[1:] > inv[:-1]
    if (after | ((inv[1:] == inv[:-1]) & (rec[1:] >= rec[:-1]))).all():
        return None
    lo_i, hi_i, lo_r, hi_r = int(inv.min()), int(inv.max()), int(rec.min()), int(rec.max())
    if lo_i >= 0 and lo_r >= 0 and (hi_i + 1) * (hi_r + 1) < 2**62:
        return np.argsort(inv * (hi_r + 1) + rec, kind="stable")
    return np.lexsort((rec, inv))


def empty_frame(name: str) -> pd.DataFrame:
    return SCHEMAS[name].empty_table().to_pandas(types_mapper=nullable)


def to_arrow(name: str, df: pd.DataFrame) -> pa.Table:
    schema = SCHEMAS[name]
    cols = {}
    for fld in schema:
        if fld.name not in df:
            cols[fld.name] = pa.nulls(len(df), type=fld.type)
            continue
        col = df[fld.name]
        if pa.types.is_integer(fld.type) and col.dtype == object:
            col = pd.array(col.to_numpy(dtype=object), dtype="Int64")
        elif pa.types.is_boolean(fld.type) and col.dtype == object:
            col = pd.array(col.to_numpy(dtype=object), dtype="boolean")
        cols[fld.name] = pa.array(col, type=fld.type, from_pandas=True)
    return pa.table(cols, schema=schema)
