"""Which vnode a row belongs to (reference §3.3): a stable hash of its distribution key.

vnode = XXH64(value encoding of the distribution-key datums) mod vnode_count. The value encoding
fixes the bytes (the same in every process, on every machine), XXH64 runs vectorized over the
whole chunk (`hashing.xxh64_ragged`). A distribution key of exactly one SERIAL column (a
generated `_row_id`) is not hashed: the row id carries its vnode (`common.row_id`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa
import xxhash

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.row_id import vnode_of_row_ids
from piestream.common.scalar import Datum
from piestream.common.types import DataType, TypeKind
from piestream.common.vnode import SINGLETON_VNODE
from piestream.encoding import value
from piestream.encoding.hashing import xxh64_ragged


def compute_vnodes(columns: Sequence[pa.Array], types: Sequence[DataType], vnode_count: int) -> np.ndarray:
    """The vnode (int64) of every row, given its distribution-key columns (none = singleton)."""
    if not columns:
        raise ValueError("compute_vnodes needs the distribution-key columns (singleton tables use vnode 0)")
    if len(columns) == 1 and types[0].kind is TypeKind.SERIAL:
        ids = columns[0]
        if ids.null_count:
            raise ValueError("a generated row id is never NULL")
        return vnode_of_row_ids(ids.to_numpy(), vnode_count)
    encoded = value.encode_columns(
        [_canonical_numeric(_canonical_float(c, t)) for c, t in zip(columns, types, strict=True)], list(types)
    )
    return (xxh64_ragged(encoded) % np.uint64(vnode_count)).astype(np.int64)


def compute_vnode(datums: Sequence[Datum], types: Sequence[DataType], vnode_count: int) -> int:
    """The vnode of one row's distribution-key datums (same result as `compute_vnodes`)."""
    if len(datums) == 1 and types[0].kind is TypeKind.SERIAL:
        return int(vnode_of_row_ids(np.array([datums[0]], np.int64), vnode_count)[0])
    canon = [
        _canonical_numeric_datum(_canonical_float_datum(d, t)) for d, t in zip(datums, types, strict=True)
    ]
    return xxhash.xxh64_intdigest(value.encode_row(canon, list(types))) % vnode_count


_FLOATS = (TypeKind.REAL, TypeKind.DOUBLE)


def _canonical_float(col: pa.Array, t: DataType) -> pa.Array:
    """-0.0 -> 0.0 and every NaN -> one NaN: keys that compare equal must hash equal."""
    if t.kind not in _FLOATS:
        return col
    v = col.to_numpy(zero_copy_only=False).astype(np.float64)
    v = np.where(v == 0.0, 0.0, v)
    v = np.where(np.isnan(v), np.nan, v)
    return pa.array(v, mask=col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None).cast(
        t.arrow
    )


def _canonical_numeric(col: pa.Array) -> pa.Array:
    """1.50 -> 1.5: NUMERIC keys that compare equal must hash equal, whatever their display
    scales (the per-value-scale layout of issue 14; the normalized form's bytes are the bytes
    decimal128 columns always had, so vnodes do not move)."""
    return na.pack(na.normalize(na.unpack(col))) if nm.is_numeric_array(col) else col


def _canonical_numeric_datum(d: Datum) -> Datum:
    if not isinstance(d, Decimal) or not d.is_finite():
        return d
    return nm.value_of(*_normal_parts(d))


def _normal_parts(d: Decimal) -> tuple[int, int]:
    """(unscaled, scale) of `d` without trailing fraction zeros."""
    unscaled, scale = nm.parts_of(d)
    while scale > 0 and unscaled % 10 == 0:
        unscaled //= 10
        scale -= 1
    return (0, 0) if unscaled == 0 else (unscaled, scale)


def _canonical_float_datum(d: Datum, t: DataType) -> Datum:
    if t.kind not in _FLOATS or d is None:
        return d
    if math.isnan(d):
        return float("nan")
    return 0.0 if d == 0.0 else d


def singleton_vnodes(n: int) -> np.ndarray:
    return np.full(n, SINGLETON_VNODE, np.int64)
