"""Helpers for kernels that drop to numpy: validity masks, zero-copy views, scatter/gather.

Arrow keeps arbitrary bytes under NULL slots, so a kernel that computes on a raw view must mask
its checks with the validity (a garbage divisor under a NULL must not raise division by zero).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from piestream.common.types import DataType

#: Interval values as numpy records (Arrow's month_day_nano layout).
MDN = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])
USECS_PER_DAY = 86_400_000_000


def valid_mask(arr: pa.Array) -> np.ndarray | None:
    """Boolean validity, or None when the array has no NULLs."""
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_)


def and_valid(*arrs: pa.Array) -> np.ndarray | None:
    """Rows where every array is non-NULL (None: all rows)."""
    out: np.ndarray | None = None
    for a in arrs:
        m = valid_mask(a)
        if m is not None:
            out = m if out is None else out & m
    return out


def full_valid(mask: np.ndarray | None, n: int) -> np.ndarray:
    return np.ones(n, np.bool_) if mask is None else mask


def view(arr: pa.Array, dtype: Any) -> np.ndarray:
    """Zero-copy numpy view of a fixed-width array's values (garbage under NULLs)."""
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dt)
    return np.frombuffer(buf, dt, count=arr.offset + len(arr))[arr.offset :]


def bool_values(arr: pa.Array) -> np.ndarray:
    """Values of a boolean array with NULL read as False."""
    return np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), np.bool_)


def from_numpy(values: np.ndarray, valid: np.ndarray | None, t: pa.DataType) -> pa.Array:
    """An Arrow array of fixed-width type `t` over `values`, NULL where `valid` is False."""
    values = np.ascontiguousarray(values)
    n = len(values)
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if pa.types.is_boolean(t):
        data = pa.py_buffer(np.packbits(values.astype(np.bool_), bitorder="little"))
    else:
        data = pa.py_buffer(values)
    return pa.Array.from_buffers(t, n, [validity, data])


def with_nulls(arr: pa.Array, valid: np.ndarray | None) -> pa.Array:
    """`arr` with extra NULLs where `valid` is False."""
    if valid is None or valid.all():
        return arr
    return pa.compute.if_else(pa.array(valid), arr, pa.nulls(len(arr), arr.type))


def scatter(n: int, parts: Sequence[tuple[np.ndarray, pa.Array]], t: pa.DataType) -> pa.Array:
    """An array of `n` rows where each (row indices, values) part fills its rows; others NULL."""
    parts = [(idx, vals) for idx, vals in parts if len(idx)]
    if len(parts) == 1 and len(parts[0][0]) == n:
        idx, vals = parts[0]
        if np.array_equal(idx, np.arange(n)):
            return vals
    covered = np.zeros(n, np.bool_)
    for idx, _ in parts:
        covered[idx] = True
    rest = np.flatnonzero(~covered)
    pieces = [vals.cast(t) if vals.type != t else vals for _, vals in parts]
    positions = [idx for idx, _ in parts]
    if len(rest):
        pieces.append(pa.nulls(len(rest), t))
        positions.append(rest)
    if not pieces:
        return pa.nulls(n, t)
    allv = pa.concat_arrays(pieces)
    order = np.empty(n, np.int64)
    order[np.concatenate(positions)] = np.arange(n)
    return allv.take(pa.array(order))


def interval_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(months int64, days int64, usecs int64) of an interval array (garbage under NULLs)."""
    rec = view(arr, MDN)
    return rec["months"].astype(np.int64), rec["days"].astype(np.int64), rec["nanos"] // 1000


def make_intervals(
    months: np.ndarray, days: np.ndarray, usecs: np.ndarray, valid: np.ndarray | None
) -> pa.Array:
    """An interval array; out-of-range fields raise 22008 like PostgreSQL's interval arithmetic."""
    from piestream.common.errors import DatetimeOutOfRange

    v = full_valid(valid, len(months))
    i32 = (-(2**31), 2**31 - 1)
    bad = ((months < i32[0]) | (months > i32[1]) | (days < i32[0]) | (days > i32[1])) & v
    bad |= ((usecs > (2**63 - 1) // 1000) | (usecs < -(2**63) // 1000)) & v
    if bad.any():
        raise DatetimeOutOfRange("interval out of range")
    rec = np.zeros(len(months), MDN)
    rec["months"] = np.where(v, months, 0)
    rec["days"] = np.where(v, days, 0)
    rec["nanos"] = np.where(v, usecs, 0) * 1000
    return _mdn(rec, valid)


def _mdn(rec: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.month_day_nano_interval(), len(rec), [validity, pa.py_buffer(rec)])


def interval_key(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(whole days, usecs within day) of the justified total: compares like PostgreSQL's interval_cmp."""
    months, days, usecs = interval_parts(arr)
    d = months * 30 + days + np.floor_divide(usecs, USECS_PER_DAY)
    return d, np.mod(usecs, USECS_PER_DAY)


def temporal_us(arr: pa.Array) -> np.ndarray:
    """Microseconds of a timestamp / timestamptz / time array, or days*86400e6 for dates."""
    if pa.types.is_date32(arr.type):
        return view(arr, np.int32).astype(np.int64) * USECS_PER_DAY
    return view(arr, np.int64)


def per_row(
    fn: Callable[..., Any], arrays: Sequence[pa.Array], t: DataType, *, strict: bool = True
) -> pa.Array:
    """Apply a Python function row by row (for the few kernels numpy/Arrow cannot express).

    With `strict`, rows with any NULL argument give NULL without calling `fn`.
    """
    from piestream.common.scalar import to_arrow

    cols = [a.to_pylist() for a in arrays]
    n = len(arrays[0]) if arrays else 0
    out: list[Any] = []
    for i in range(n):
        row = [c[i] for c in cols]
        if strict and any(v is None for v in row):
            out.append(None)
        else:
            out.append(fn(*row))
    return to_arrow(out, t)


def unique_apply(fn: Callable[[Any], Any], arr: pa.Array, t: DataType) -> pa.Array:
    """Apply a Python function once per distinct non-NULL value (dictionary-encode, then take)."""
    from piestream.common.scalar import to_arrow

    enc = arr.dictionary_encode()
    values = to_arrow([fn(v) for v in enc.dictionary.to_pylist()], t)
    return values.take(enc.indices)


_NOT_CONSTANT = object()


def constant_arg(call: object, i: int) -> Any:
    """The value of argument `i` if it is a literal (a constant known before evaluation), else
    `NOT_CONSTANT`. Kernels use it to pick a vectorized path with a scalar pattern / length."""
    from piestream.expr.expr import Literal

    arg = call.args[i]  # type: ignore[attr-defined]
    return arg.value if isinstance(arg, Literal) else _NOT_CONSTANT


NOT_CONSTANT = _NOT_CONSTANT
