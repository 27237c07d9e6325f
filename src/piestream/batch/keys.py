"""Row keys shared by the executors: sort order, grouping and equality, all exact SQL semantics.

Ordering and equality go through the memcomparable encoding (`piestream.encoding.memcomparable`):
its byte order is PostgreSQL's ORDER BY order for every type (NULLS FIRST/LAST, DESC, NaN largest,
strings by bytes, intervals by their justified total), and equal bytes mean SQL-equal values
(NaN = NaN, -0.0 = 0.0, '1 mon' = '30 days'). So one Arrow binary column sorts, groups and joins
any combination of key columns, with no Python per row. Key columns whose Arrow values already
compare like SQL values skip the encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.order import ASC, OrderType
from piestream.common.types import DataType, TypeKind
from piestream.encoding.memcomparable import encode_columns_arrow

#: Types whose Arrow equality (and hashing) is SQL equality: they group and join as they are.
_EXACT_EQ = frozenset(
    {
        TypeKind.BOOLEAN,
        TypeKind.SMALLINT,
        TypeKind.INT,
        TypeKind.BIGINT,
        TypeKind.SERIAL,
        TypeKind.VARCHAR,
        TypeKind.BYTEA,
        TypeKind.DATE,
        TypeKind.TIME,
        TypeKind.TIMESTAMP,
        TypeKind.TIMESTAMPTZ,
    }
)


def as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def sort_key(cols: Sequence[pa.Array], types: Sequence[DataType], orders: Sequence[OrderType]) -> pa.Array:
    """One binary column whose byte order is the SQL order of the rows."""
    return encode_columns_arrow(list(cols), list(types), list(orders))


def sort_order(
    cols: Sequence[pa.Array], types: Sequence[DataType], orders: Sequence[OrderType], n: int
) -> np.ndarray:
    """Row indices in ORDER BY order; stable, so ties keep their input order."""
    if not cols or n <= 1:
        return np.arange(n, dtype=np.int64)
    if all(_native_sort_ok(t, o) for t, o in zip(types, orders, strict=True)):
        # Arrow's own multi-key sort (stable) agrees with SQL here and skips building keys
        names = [f"k{i}" for i in range(len(cols))]
        keys = [
            (
                name,
                "descending" if o.descending else "ascending",
                "at_end" if o.nulls_largest != o.descending else "at_start",
            )
            for name, o in zip(names, orders, strict=True)
        ]
        table = pa.Table.from_arrays([as_array(c) for c in cols], names=names)
        return np.asarray(pc.sort_indices(table, sort_keys=keys).to_numpy(), np.int64)
    key = sort_key(cols, types, orders)
    return np.asarray(pc.sort_indices(key).to_numpy(), np.int64)


#: Types Arrow's sort orders like PostgreSQL (integers, exact decimals, strings by bytes, times).
_NATIVE_SORT = _EXACT_EQ


def _native_sort_ok(t: DataType, o: OrderType) -> bool:
    if t.kind in _NATIVE_SORT:
        return True
    # Arrow puts NaN next to the NULLs; that is PostgreSQL's "NaN is largest" only when NULLs
    # are the largest too (the default ASC NULLS LAST / DESC NULLS FIRST)
    return t.kind in (TypeKind.REAL, TypeKind.DOUBLE) and o.nulls_largest


def peer_starts_of(cols: Sequence[pa.Array], types: Sequence[DataType], order: np.ndarray) -> np.ndarray:
    """For rows taken in `order`: True where the values of `cols` differ from the previous row's
    (SQL equality: NULL peers NULL, NaN peers NaN); position 0 always starts."""
    n = len(order)
    out = np.ones(n, np.bool_)
    if cols and n > 1:
        codes = codes_of(eq_key(cols, types))[0][order]
        out[1:] = codes[1:] != codes[:-1]
    elif n > 1:
        out[1:] = False
    return out


def eq_key(cols: Sequence[pa.Array], types: Sequence[DataType]) -> pa.Array:
    """A column whose value equality is the rows' SQL equality (NULL equal to NULL)."""
    if len(cols) == 1 and types[0].kind in _EXACT_EQ:
        return as_array(cols[0])
    return sort_key(cols, types, [ASC] * len(cols))


@dataclass(frozen=True)
class Grouping:
    """Rows split into groups numbered in first-appearance order.

    ``order`` lists the rows group by group (input order inside a group); the rows of group g
    are ``order[starts[g]:starts[g + 1]]``.
    """

    ids: np.ndarray  # int64 group of each row
    count: int
    order: np.ndarray
    starts: np.ndarray  # count + 1 offsets into `order`

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)

    @property
    def first_rows(self) -> np.ndarray:
        """One representative (the first) input row per group."""
        return self.order[self.starts[:-1]]


def codes_of(key: pa.Array) -> tuple[np.ndarray, int]:
    """Dense codes 0..k-1 of a key column in first-appearance order (NULL is one more value)."""
    enc = pc.dictionary_encode(key, null_encoding="encode")
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
    return codes, len(enc.dictionary)


def group_rows(cols: Sequence[pa.Array], types: Sequence[DataType], n: int) -> Grouping:
    """Group `n` rows by the SQL equality of `cols` (no columns: one group of everything)."""
    if not cols:
        ids = np.zeros(n, np.int64)
        count = 1
    else:
        ids, count = codes_of(eq_key(cols, types))
    return grouping_of(ids, count)


def grouping_of(ids: np.ndarray, count: int) -> Grouping:
    order = np.argsort(ids, kind="stable").astype(np.int64, copy=False)
    starts = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(ids, minlength=count), out=starts[1:])
    return Grouping(ids, count, order, starts)


def join_key_codes(
    left: Sequence[pa.Array],
    right: Sequence[pa.Array],
    types: Sequence[DataType],
    null_safe: Sequence[bool],
) -> tuple[np.ndarray, np.ndarray, int]:
    """Codes of the join keys of both sides in one numbering; -1 where a key column that is not
    null-safe is NULL (such a row matches nothing)."""
    nl = len(left[0])
    lk = eq_key(left, types)
    rk = eq_key(right, types)
    codes, count = codes_of(pa.concat_arrays([lk, rk.cast(lk.type)]))
    for cols, part in ((left, slice(0, nl)), (right, slice(nl, None))):
        dead = np.zeros(len(cols[0]), np.bool_)
        for c, safe in zip(cols, null_safe, strict=True):
            if not safe and c.null_count:
                dead |= np.asarray(c.is_null().to_numpy(zero_copy_only=False), np.bool_)
        codes[part][dead] = -1
    return codes[:nl], codes[nl:], count
