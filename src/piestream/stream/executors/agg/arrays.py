"""Arrow helpers of the aggregation executors: checked arithmetic, NULL-aware equality,
order-preserving keys for min/max, and turning old and new keyed rows into change rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.chunk import Op
from piestream.common.errors import NumericOutOfRange
from piestream.common.order import ASC
from piestream.common.types import BIGINT, NUMERIC_SCALE, DataType
from piestream.encoding import memcomparable
from piestream.encoding.ragged import Ragged
from piestream.expr.functions import numeric_scaled

NUMERIC_ARROW = pa.decimal128(38, NUMERIC_SCALE)
#: Wide enough to add two NUMERIC states without Arrow's precision-overflow error.
_WIDE_NUMERIC = pa.decimal256(60, NUMERIC_SCALE)
#: avg(numeric) divides at 40 fraction digits, then rounds half away from zero to NUMERIC_SCALE.
_DIVIDEND = pa.decimal256(48, 20)
_DIVISOR = pa.decimal256(19, 0)


def np_bool(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array (NULL = false) as a numpy mask."""
    return np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), np.bool_)


def np_int(a: pa.Array) -> np.ndarray:
    """An integer Arrow array (NULL = 0) as int64 numpy."""
    return np.asarray(pc.fill_null(a, 0).to_numpy(zero_copy_only=False), np.int64)


def np_float(a: pa.Array) -> np.ndarray:
    """A numeric Arrow array (NULL = 0) as float64 numpy."""
    return np.asarray(pc.fill_null(a.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False), np.float64)


def zeros(n: int, t: pa.DataType) -> pa.Array:
    """`n` zeros of a numeric Arrow type (the identity of summed deltas)."""
    return pa.array(np.zeros(n, np.int64)).cast(t)


def add_bigint(a: pa.Array, b: pa.Array) -> pa.Array:
    """BIGINT addition (NULL = 0) that fails like PostgreSQL instead of wrapping around."""
    try:
        return pc.add_checked(pc.fill_null(a.cast(pa.int64()), 0), pc.fill_null(b.cast(pa.int64()), 0))
    except (pa.ArrowInvalid, OverflowError) as e:
        raise NumericOutOfRange("bigint out of range") from e


def decimal_as_int64(a: pa.Array) -> np.ndarray | None:
    """The unscaled values of a decimal128 array as int64 (NULL = 0), or None if one does not
    fit. Decimal arithmetic in Arrow goes through 128/256-bit kernels; sums of counts and of
    integer columns fit in 64 bits nearly always, so the aggregation states add them in numpy."""
    if not pa.types.is_decimal128(a.type):
        return None
    n = len(a)
    if not n:
        return np.zeros(0, np.int64)
    halves = np.frombuffer(a.buffers()[1], np.int64, count=2 * (a.offset + n))[2 * a.offset :]
    lo, hi = halves[0::2], halves[1::2]  # little-endian 128-bit two's complement
    if a.null_count:
        valid = np_bool(a.is_valid())
        lo, hi = np.where(valid, lo, 0), np.where(valid, hi, 0)
    if not np.array_equal(hi, lo >> 63):
        return None
    return np.ascontiguousarray(lo)


def int64_as_decimal(values: np.ndarray, t: pa.Decimal128Type) -> pa.Array:
    """Unscaled int64 values as a decimal128 array of type `t` (no NULLs)."""
    v = np.asarray(values, np.int64)
    halves = np.empty(2 * len(v), np.int64)
    halves[0::2], halves[1::2] = v, v >> 63
    return pa.Array.from_buffers(t, len(v), [None, pa.py_buffer(halves)])


def _scaled_int64(x: pa.Array) -> np.ndarray | None:
    """A decimal128 array (scale 0..NUMERIC_SCALE) as int64 at NUMERIC_SCALE, if every value is
    below 2^62 there (two such add up without overflow); None otherwise."""
    if not pa.types.is_decimal128(x.type) or not 0 <= x.type.scale <= NUMERIC_SCALE:
        return None
    v = decimal_as_int64(x)
    if v is None:
        return None
    factor = 10 ** (NUMERIC_SCALE - x.type.scale)
    limit = (1 << 62) // factor
    if len(v) and (int(v.max()) >= limit or int(v.min()) <= -limit):
        return None
    return v * factor


def _add_numeric_int64(a: pa.Array, b: pa.Array) -> pa.Array | None:
    """`add_numeric` in int64 when both sides fit (None otherwise)."""
    va = _scaled_int64(a)
    vb = _scaled_int64(b) if va is not None else None
    if va is None or vb is None:
        return None
    return int64_as_decimal(va + vb, NUMERIC_ARROW)


def add_numeric(a: pa.Array, b: pa.Array) -> pa.Array:
    """NUMERIC addition (NULL = 0) of decimal arrays, as NUMERIC's decimal128(38, 10)."""
    fast = _add_numeric_int64(a, b)
    if fast is not None:
        return fast
    zero = pa.scalar(0, pa.int64()).cast(_WIDE_NUMERIC)
    wa = pc.fill_null(a.cast(_WIDE_NUMERIC), zero)
    wb = pc.fill_null(b.cast(_WIDE_NUMERIC), zero)
    try:
        return pc.add(wa, wb).cast(NUMERIC_ARROW)
    except pa.ArrowInvalid as e:
        raise NumericOutOfRange("numeric field overflow") from e


def divide_numeric(total: pa.Array, count: np.ndarray) -> pa.Array:
    """total / count rounded half away from zero to NUMERIC's scale (count > 0 where used)."""
    safe = pa.array(np.where(count > 0, count, 1)).cast(_DIVISOR)
    q = pc.divide(total.cast(_DIVIDEND), safe)
    return pc.round(q, ndigits=NUMERIC_SCALE, round_mode="half_towards_infinity").cast(NUMERIC_ARROW)


def null_where(a: pa.Array, mask: np.ndarray) -> pa.Array:
    """`a` with NULL where `mask` is true."""
    if not mask.any():
        return a
    return nm.on_storage(pc.if_else, pa.array(mask), pa.nulls(len(a), a.type), a)


def same_values(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Row-wise "not distinct from" (NULL equals NULL; NaN equals NaN)."""
    if len(a) == 0:
        return np.zeros(0, np.bool_)
    t = a.type
    if pa.types.is_nested(t) or pa.types.is_interval(t):
        # per-row Python: Arrow has no equality kernel for lists / intervals (array_agg outputs)
        pairs = zip(a.to_pylist(), b.to_pylist(), strict=True)
        return np.fromiter((x == y for x, y in pairs), np.bool_, len(a))
    both_null = np_bool(pc.and_(a.is_null(), b.is_null()))
    if nm.is_numeric_array(a):  # the same value and display scale: 1.5 -> 1.50 is a change to emit
        x, y = na.unpack(a), na.unpack(b.cast(a.type))
        same = (x.hi == y.hi) & (x.lo == y.lo) & (x.scale == y.scale) & x.vmask() & y.vmask()
        return same | both_null
    eq = np_bool(pc.equal(a, b))
    if pa.types.is_floating(t):
        eq |= np_bool(pc.is_nan(a)) & np_bool(pc.is_nan(b))
    return eq | both_null


def encode_key(a: pa.Array, t: DataType) -> pa.Array:
    """Memcomparable bytes of `a` (NULL stays NULL): their byte order is SQL's order of `t`, so
    min/max of any type (NaN largest, intervals by length, ...) are Arrow min/max over binary."""
    enc = memcomparable.encode_columns_arrow([a], [t], [ASC])
    if nm.is_numeric_array(a):  # the display scale rides after the key (equal values: any scale wins)
        scale = np.maximum(na.unpack(a).scale, 0).astype(np.uint8)
        offsets = pa.py_buffer(np.arange(len(scale) + 1, dtype=np.int32))
        suffix = pa.Array.from_buffers(pa.binary(), len(scale), [None, offsets, pa.py_buffer(scale)])
        enc = pc.binary_join_element_wise(enc, suffix, b"")
    return null_where(enc, ~np_bool(a.is_valid()))


_NULL_KEY = memcomparable.encode_datum(None, BIGINT, ASC)  # the NULL tag alone, whatever the type


def decode_key(a: pa.Array, t: DataType) -> pa.Array:
    """Inverse of `encode_key`."""
    if nm.is_numeric_type(t.arrow):  # strip and apply the display scale `encode_key` appended
        filled = pc.fill_null(a, pa.scalar(_NULL_KEY + b"\x00", pa.binary()))
        raw = Ragged.from_arrow(filled)
        scale = raw.data[raw.offsets[1:] - 1].astype(np.int64)
        keys = pc.binary_slice(filled, 0, -1)
        cols, _ = memcomparable.decode_keys(keys, [t], [ASC])
        return numeric_scaled.rescale_to(cols[0], scale, "round")
    filled = pc.fill_null(a, pa.scalar(_NULL_KEY, pa.binary()))
    cols, _ = memcomparable.decode_keys(filled, [t], [ASC])
    return cols[0].cast(t.arrow)


def take_merged(base: pa.Array, rows: np.ndarray, replacements: pa.Array) -> pa.Array:
    """`base` with rows `rows` replaced by `replacements` (in order)."""
    if not len(rows):
        return base
    idx = np.arange(len(base), dtype=np.int64)
    idx[rows] = len(base) + np.arange(len(rows), dtype=np.int64)
    return pa.concat_arrays([base, replacements.cast(base.type)]).take(pa.array(idx))


def rows_differ(old: Sequence[pa.Array], new: Sequence[pa.Array], n: int) -> np.ndarray:
    """Rows where any column of `old` is distinct from the same column of `new`."""
    differ = np.zeros(n, np.bool_)
    for o, c in zip(old, new, strict=True):
        differ |= ~same_values(o, c)
    return differ


def change_rows(
    old: Sequence[pa.Array],
    new: Sequence[pa.Array],
    found: np.ndarray,
    alive: np.ndarray,
    changed: np.ndarray,
) -> tuple[np.ndarray, list[pa.Array]]:
    """The changes that take keyed rows from `old` (where `found`) to `new` (where `alive`), keys
    in order: Insert(new), Delete(old), or U-(old) U+(new) where both exist and `changed`."""
    delete, insert, update = found & ~alive, ~found & alive, found & alive & changed
    g = len(found)
    counts = delete.astype(np.int64) + insert + 2 * update.astype(np.int64)
    group = np.repeat(np.arange(g, dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    pos = np.arange(len(group), dtype=np.int64) - np.repeat(starts, counts)
    upd = update[group]
    from_new = np.where(upd, pos == 1, insert[group])
    pair = np.where(pos == 0, Op.UPDATE_DELETE, Op.UPDATE_INSERT)
    ops = np.where(upd, pair, np.where(from_new, Op.INSERT, Op.DELETE))
    take = pa.array(group + from_new * g)
    cols = [pa.concat_arrays([o, n.cast(o.type)]).take(take) for o, n in zip(old, new, strict=True)]
    return ops.astype(np.int8), cols
