"""CAST between all types, with PostgreSQL's rounding, range checks and text forms.

* numeric/float -> integer: NUMERIC rounds half away from zero, floats round half to even
  (PostgreSQL's rint); out of range is 22003 "integer out of range";
* float -> numeric: the float's shortest 15 (6 for real) significant digits, as float8_numeric
  does, then NUMERIC's scale (per row in Python: a rare conversion);
* anything -> text: PostgreSQL's output functions (`format_datum`), vectorized for numbers and
  date/times, per row for intervals, bytea and composites; booleans become 'true' / 'false';
* text -> anything: PostgreSQL's input functions (`parse_datum`), once per distinct value;
* date/time conversions use UTC as the session time zone.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common import numeric_arrays
from piestream.common.errors import DatatypeMismatch, InvalidInput, NumericOutOfRange
from piestream.common.scalar import normalize_numeric
from piestream.common.text import format_datum, parse_datum
from piestream.common.types import NUMERIC, DataType, TypeKind
from piestream.expr.coercion import normalize, type_name
from piestream.expr.expr import FuncCall
from piestream.expr.functions import decimal as dec
from piestream.expr.functions import numeric_scaled
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import (
    USECS_PER_DAY,
    and_valid,
    from_numpy,
    full_valid,
    interval_parts,
    make_intervals,
    per_row,
    unique_apply,
    view,
)

_INT_BOUNDS = {
    TypeKind.SMALLINT: (-(2**15), 2**15 - 1),
    TypeKind.INT: (-(2**31), 2**31 - 1),
    TypeKind.BIGINT: (-(2**63), 2**63 - 1),
}
_INTS = tuple(_INT_BOUNDS)
_FLOATS = (TypeKind.REAL, TypeKind.DOUBLE)
_TS = (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ)


@register("cast")
def _cast(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return cast_array(a[0], call.args[0].return_type, call.return_type)


def cast_array(x: pa.Array, src: DataType, dst: DataType) -> pa.Array:
    """Convert an array of SQL type `src` to `dst`."""
    if dst.typmod is not None:  # NUMERIC(p, s): convert, then round and check the digits
        return dec.apply_typmod(cast_array(x, src, NUMERIC), *dst.typmod)
    s, d = normalize(src), normalize(dst)
    if d.kind is TypeKind.NUMERIC and pa.types.is_decimal128(x.type) and nm.is_numeric_type(d.arrow):
        x = numeric_arrays.from_decimal(x)  # an outside decimal (Spark, Parquet): its column's scale
    if s == d and not d.has_typmod:
        return x if x.type == dst.arrow else x.cast(dst.arrow)
    sk, dk = s.kind, d.kind
    if dk is TypeKind.VARCHAR:
        return to_text(x, s)
    if sk is TypeKind.VARCHAR:
        return from_text(x, d)
    if s.is_numeric and d.is_numeric:
        return _numeric_cast(x, sk, dk)
    if (sk, dk) == (TypeKind.INT, TypeKind.BOOLEAN):
        return pc.not_equal(x, pa.scalar(0, pa.int32()))
    if (sk, dk) == (TypeKind.BOOLEAN, TypeKind.INT):
        return x.cast(pa.int32())
    if sk is TypeKind.JSONB:
        return per_row(lambda v: _from_json(v, d), [x], d)
    if sk is TypeKind.LIST and dk is TypeKind.LIST:
        return _cast_list(x, s, d)
    if sk is TypeKind.STRUCT and dk is TypeKind.STRUCT:
        return _cast_struct(x, s, d)
    return _datetime_cast(x, sk, dk, d)


def _out_of_range(kind: TypeKind) -> NumericOutOfRange:
    return NumericOutOfRange(f"{type_name(DataType(kind))} out of range")


# -- numbers --------------------------------------------------------------------------------------


def _numeric_cast(x: pa.Array, sk: TypeKind, dk: TypeKind) -> pa.Array:
    valid = and_valid(x)
    if sk in _INTS and dk in _INTS:
        lo, hi = _INT_BOUNDS[dk]
        v = view(x, x.type.to_pandas_dtype()).astype(np.int64)
        if (((v < lo) | (v > hi)) & full_valid(valid, len(v))).any():
            raise _out_of_range(dk)
        return from_numpy(v.astype(DataType(dk).arrow.to_pandas_dtype()), valid, DataType(dk).arrow)
    if sk in _INTS and dk is TypeKind.NUMERIC:
        return dec.from_integer(view(x, x.type.to_pandas_dtype()).astype(np.int64), valid)
    if sk in _INTS and dk in _FLOATS:
        return x.cast(DataType(dk).arrow, safe=False)
    if sk is TypeKind.NUMERIC and dk in _INTS:
        lo, hi = _INT_BOUNDS[dk]
        vals, valid = dec.to_integer(x, lo, hi, type_name(DataType(dk)))
        return from_numpy(vals.astype(DataType(dk).arrow.to_pandas_dtype()), valid, DataType(dk).arrow)
    if sk is TypeKind.NUMERIC and dk in _FLOATS:
        out = dec.to_float(x)
        return out if dk is TypeKind.DOUBLE else _to_real(out)
    if sk in _FLOATS and dk in _INTS:
        return _float_to_int(x, dk)
    if sk in _FLOATS and dk is TypeKind.NUMERIC:
        digits = 15 if sk is TypeKind.DOUBLE else 6
        return numeric_scaled.from_float(x, digits)
    if sk is TypeKind.REAL and dk is TypeKind.DOUBLE:
        return x.cast(pa.float64())
    return _to_real(x)


def _to_real(x: pa.Array) -> pa.Array:
    """float8 -> float4 with float8_to_float4's overflow / underflow errors."""
    a = view(x, np.float64)
    with np.errstate(all="ignore"):
        r = a.astype(np.float32)
    v = full_valid(and_valid(x), len(a))
    if (np.isinf(r) & ~np.isinf(a) & v).any():
        raise NumericOutOfRange("value out of range: overflow")
    if ((r == 0) & (a != 0) & v).any():
        raise NumericOutOfRange("value out of range: underflow")
    return from_numpy(r, and_valid(x), pa.float32())


def _float_to_int(x: pa.Array, dk: TypeKind) -> pa.Array:
    lo, _ = _INT_BOUNDS[dk]
    a = view(x, np.float32 if pa.types.is_float32(x.type) else np.float64).astype(np.float64)
    valid = and_valid(x)
    v = full_valid(valid, len(a))
    r = np.rint(a)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(r) | (r < lo) | (r >= -float(lo))
    if (bad & v).any():
        raise _out_of_range(dk)
    t = DataType(dk).arrow
    return from_numpy(np.where(v, r, 0).astype(t.to_pandas_dtype()), valid, t)


# -- text -----------------------------------------------------------------------------------------

_TRAILING_FRACTION_ZEROS = r"(\.[0-9]*[1-9])0+$"


def _strip_fraction(s: pa.Array) -> pa.Array:
    """ "12.500" -> "12.5", "12.000" -> "12"."""
    s = pc.replace_substring_regex(s, pattern=_TRAILING_FRACTION_ZEROS, replacement=r"\1")
    return pc.replace_substring_regex(s, pattern=r"\.0+$", replacement="")


def to_text(x: pa.Array, t: DataType) -> pa.Array:
    """PostgreSQL's text form of each value."""
    k = t.kind
    if k in (TypeKind.VARCHAR, TypeKind.JSONB):
        return x
    if k is TypeKind.BOOLEAN:
        return pc.if_else(x, "true", "false")
    if k in _INTS:
        return x.cast(pa.string())
    if k is TypeKind.NUMERIC:
        return _numeric_text(x, t)
    if k in _FLOATS:
        return _float_text(x, t)
    if k is TypeKind.DATE:
        return x.cast(pa.string())
    if k in (TypeKind.TIMESTAMP, TypeKind.TIME):
        return _strip_fraction(x.cast(pa.string()))
    if k is TypeKind.TIMESTAMPTZ:
        naive = x.cast(pa.int64()).cast(pa.timestamp("us"))
        return pc.binary_join_element_wise(_strip_fraction(naive.cast(pa.string())), "+00", "")
    from piestream.common.scalar import from_arrow

    vals = from_arrow(x, t)
    return pa.array([None if v is None else format_datum(v, t) for v in vals], pa.string())


def _numeric_text(x: pa.Array, t: DataType = NUMERIC) -> pa.Array:
    """numeric_out of a column (each value's display scale; a type's pads)."""
    return _scaled_numeric_text(x, t)


def _scaled_numeric_text(x: pa.Array, t: DataType) -> pa.Array:
    """numeric_out under the per-value-scale layout; a type's display scale (numeric(p, s), or
    one PostgreSQL's rules fix) pads values with fewer digits (exact: zeros are only added)."""
    if t.display_scale is not None:
        num = numeric_arrays.unpack(x)
        pad = np.where(num.special, num.scale, np.maximum(num.scale, t.display_scale))
        x = numeric_scaled.rescale_to(x, pad, "round")
    return numeric_scaled.to_text(x)


def _float_text(x: pa.Array, t: DataType) -> pa.Array:
    """Arrow's shortest digits; rows where PostgreSQL's layout differs (exponent form, NaN,
    infinities, tiny values) are formatted per row by `format_datum`."""
    text = x.cast(pa.string())
    a = view(x, np.float32 if t.kind is TypeKind.REAL else np.float64).astype(np.float64)
    big = 1e6 if t.kind is TypeKind.REAL else 1e15
    with np.errstate(invalid="ignore"):
        fix = ~np.isfinite(a) | (np.abs(a) >= big) | ((np.abs(a) < 1e-4) & (a != 0))
    fix |= np.asarray(pc.match_substring(text, "e").fill_null(False).to_numpy(zero_copy_only=False), np.bool_)
    fix &= full_valid(and_valid(x), len(a))
    if not fix.any():
        return text
    rows = np.flatnonzero(fix)
    fixed = pa.array([format_datum(float(a[i]), t) for i in rows], pa.string())
    from piestream.expr.functions.vec import scatter

    keep = np.flatnonzero(~fix)
    return scatter(len(a), [(keep, text.take(pa.array(keep))), (rows, fixed)], pa.string())


def from_text(x: pa.Array, t: DataType) -> pa.Array:
    """PostgreSQL's input function for `t` on each distinct string."""
    if t.kind in _INTS:
        try:
            return x.cast(t.arrow)  # Arrow accepts a subset of what PostgreSQL does
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return unique_apply(lambda s: parse_datum(s, t), x, t)


def _from_json(text: str, t: DataType) -> Any:
    """jsonb -> boolean / number: the JSON scalar must have that kind (22023 otherwise)."""
    v = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    if t.kind is TypeKind.BOOLEAN:
        if not isinstance(v, bool):
            raise _json_kind_error(v, t)
        return v
    if isinstance(v, bool) or not isinstance(v, Decimal):
        raise _json_kind_error(v, t)
    if t.kind is TypeKind.NUMERIC:
        return normalize_numeric(v)
    if t.kind in _FLOATS:
        return float(v)
    lo, hi = _INT_BOUNDS[t.kind]
    r = int(v.quantize(Decimal(1), rounding="ROUND_HALF_UP"))
    if not lo <= r <= hi:
        raise _out_of_range(t.kind)
    return r


def _json_kind_error(v: Any, t: DataType) -> InvalidInput:
    kind = (
        "null"
        if v is None
        else "boolean"
        if isinstance(v, bool)
        else "string"
        if isinstance(v, str)
        else "array"
        if isinstance(v, list)
        else "object"
        if isinstance(v, dict)
        else "numeric"
    )
    return InvalidInput(f"cannot cast jsonb {kind} to type {type_name(t)}", sqlstate="22023")


# -- date / time ----------------------------------------------------------------------------------


def _datetime_cast(x: pa.Array, sk: TypeKind, dk: TypeKind, d: DataType) -> pa.Array:
    valid = and_valid(x)
    if sk is TypeKind.DATE and dk in _TS:
        return from_numpy(view(x, np.int32).astype(np.int64) * USECS_PER_DAY, valid, d.arrow)
    if sk in _TS and dk in _TS:
        return from_numpy(view(x, np.int64), valid, d.arrow)
    if sk in _TS and dk is TypeKind.DATE:
        return from_numpy(np.floor_divide(view(x, np.int64), USECS_PER_DAY).astype(np.int32), valid, d.arrow)
    if sk in _TS and dk is TypeKind.TIME:
        return from_numpy(np.mod(view(x, np.int64), USECS_PER_DAY), valid, d.arrow)
    if sk is TypeKind.TIME and dk is TypeKind.INTERVAL:
        zero = np.zeros(len(x), np.int64)
        return make_intervals(zero, zero, view(x, np.int64), valid)
    if sk is TypeKind.INTERVAL and dk is TypeKind.TIME:
        _, _, usecs = interval_parts(x)
        return from_numpy(np.mod(usecs, USECS_PER_DAY), valid, d.arrow)
    raise DatatypeMismatch(f"cannot cast type {type_name(DataType(sk))} to {type_name(d)}", sqlstate="42846")


# -- composites -----------------------------------------------------------------------------------


def _cast_list(x: pa.Array, s: DataType, d: DataType) -> pa.Array:
    assert s.elem is not None and d.elem is not None
    values = cast_array(x.flatten(), s.elem, d.elem)
    offsets = pc.subtract(x.offsets, x.offsets[0])
    mask = x.is_null() if x.null_count else None
    return pa.ListArray.from_arrays(offsets, values, type=d.arrow, mask=mask)


def _cast_struct(x: pa.Array, s: DataType, d: DataType) -> pa.Array:
    children = [
        cast_array(x.field(i), sf.data_type, df.data_type)
        for i, (sf, df) in enumerate(zip(s.fields, d.fields, strict=True))
    ]
    mask = x.is_null() if x.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(d.arrow), mask=mask)
