"""Comparison operators with PostgreSQL's orderings.

* floats: NaN equals NaN and sorts above every other value (float8_cmp);
* strings: by UTF-8 bytes (C collation), which is what Arrow's kernels do;
* intervals: by the justified total, 1 month = 30 days (interval_cmp);
* lists and structs: element by element, a NULL element above any value (per row in Python:
  composite comparisons are rare);
* everything else: Arrow's kernels directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.scalar import from_arrow
from piestream.common.types import DataType, TypeKind
from piestream.expr.coercion import normalize
from piestream.expr.expr import FuncCall, Literal
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import (
    and_valid,
    bool_values,
    from_numpy,
    interval_key,
    valid_mask,
    view,
)

COMPARISONS = (
    "equal",
    "not_equal",
    "less_than",
    "less_than_or_equal",
    "greater_than",
    "greater_than_or_equal",
)
_ARROW = {
    "equal": "equal",
    "not_equal": "not_equal",
    "less_than": "less",
    "less_than_or_equal": "less_equal",
    "greater_than": "greater",
    "greater_than_or_equal": "greater_equal",
}
_SWAP = {"greater_than": "less_than", "greater_than_or_equal": "less_than_or_equal"}


def compare(op: str, t: DataType, x: pa.Array, y: pa.Array) -> pa.Array:
    """`op` over two arrays of SQL type `t` (NULL in, NULL out)."""
    kind = normalize(t).kind
    if kind in (TypeKind.REAL, TypeKind.DOUBLE):
        if x.type != y.type:
            x, y = x.cast(pa.float64()), y.cast(pa.float64())
        if _has_nan(x) or _has_nan(y):
            return _float_compare(op, x, y)
    elif kind is TypeKind.INTERVAL:
        return _interval_compare(op, x, y)
    elif kind in (TypeKind.LIST, TypeKind.STRUCT):
        return _composite_compare(op, t, x, y)
    elif kind is TypeKind.NUMERIC and nm.is_numeric_array(x):
        return numeric_compare(op, x, y)
    return pc.call_function(_ARROW[op], [x, y])


def numeric_compare(op: str, x: pa.Array, y: pa.Array | Decimal) -> pa.Array:
    """`op` over NUMERIC values of the per-value-scale layout (1.5 = 1.50, NaN = NaN and above
    every number); `y` may be one value, unpacked once and broadcast."""
    a = na.unpack(x)
    if isinstance(y, Decimal):
        fast = _compare_with_constant(a, y)
        if fast is not None:
            return from_numpy(_from_lt_eq(op, fast < 0, fast == 0, fast > 0), a.valid, pa.bool_())
        one = na.unpack(nm.to_arrow([y]))
        n = len(a)
        b = na.Num(
            np.broadcast_to(one.hi, n), np.broadcast_to(one.lo, n), np.broadcast_to(one.scale, n), None
        )
        valid = a.valid
    else:
        b = na.unpack(y)
        valid = and_valid(x, y)
    c = na.compare(a, b)
    return from_numpy(_from_lt_eq(op, c < 0, c == 0, c > 0), valid, pa.bool_())


def _compare_with_constant(a: na.Num, y: Decimal) -> np.ndarray | None:
    """-1 / 0 / 1 of every value against one finite constant, in int64 per distinct scale of the
    column (one or a few): the constant is aligned to the column's scale instead of the column
    to the constant's. None when a value does not fit 63 bits (the general path then)."""
    if not y.is_finite() or not na.fits_int64(a.hi, a.lo).all():
        return None
    u, t = nm.parts_of(nm.check(y))
    out = np.zeros(len(a), np.int8)
    special = a.special
    any_special = bool(special.any())
    if any_special:
        cls = na.value_class(a.scale)
        out[special] = np.where(cls[special] > 1, 1, -1)  # +Infinity and NaN above, -Infinity below
    x_all = a.lo.view(np.int64)
    finite_scales = a.scale[~special] if any_special else a.scale
    present: list[int] = np.flatnonzero(np.bincount(finite_scales, minlength=1)).tolist()
    for s in present if len(finite_scales) else []:
        whole = len(present) == 1 and not any_special
        rows = slice(None) if whole else np.flatnonzero(~special & (a.scale == s))
        x = x_all[rows]
        if t <= s:  # the constant at the column's scale, exact
            c = u * 10 ** (s - t)
            if abs(c) >= 2**63:
                out[rows] = -1 if c > 0 else 1
                continue
            out[rows] = (x > c).astype(np.int8) - (x < c).astype(np.int8)
        else:  # x vs u / 10**k: floor division decides, equality only when it divides exactly
            q, r = divmod(u, 10 ** (t - s))
            if abs(q) >= 2**62:
                out[rows] = -1 if q > 0 else 1
                continue
            gt = x > q
            lt = (x < q) | ((x == q) & (r != 0))
            out[rows] = gt.astype(np.int8) - lt.astype(np.int8)
    return out


def _has_nan(a: pa.Array) -> bool:
    return bool(pc.any(pc.is_nan(a)).as_py())


def _from_lt_eq(op: str, lt: np.ndarray, eq: np.ndarray, gt: np.ndarray) -> np.ndarray:
    return {
        "equal": eq,
        "not_equal": ~eq,
        "less_than": lt,
        "less_than_or_equal": lt | eq,
        "greater_than": gt,
        "greater_than_or_equal": gt | eq,
    }[op]


def _float_compare(op: str, x: pa.Array, y: pa.Array) -> pa.Array:
    dtype = np.float32 if pa.types.is_float32(x.type) else np.float64
    a, b = view(x, dtype), view(y, dtype)
    an, bn = np.isnan(a), np.isnan(b)
    with np.errstate(invalid="ignore"):
        eq = (a == b) | (an & bn)
        lt = (a < b) | (~an & bn)
        gt = (a > b) | (an & ~bn)
    return from_numpy(_from_lt_eq(op, lt, eq, gt), and_valid(x, y), pa.bool_())


def _interval_compare(op: str, x: pa.Array, y: pa.Array) -> pa.Array:
    d1, u1 = interval_key(x)
    d2, u2 = interval_key(y)
    eq = (d1 == d2) & (u1 == u2)
    lt = (d1 < d2) | ((d1 == d2) & (u1 < u2))
    gt = ~(lt | eq)
    return from_numpy(_from_lt_eq(op, lt, eq, gt), and_valid(x, y), pa.bool_())


# -- composites (per row) -------------------------------------------------------------------------


def sort_key(v: Any, t: DataType) -> Any:
    """A Python key ordering datums of `t` as PostgreSQL does (NULL last, NaN above numbers)."""
    if v is None:
        return (1,)
    k = t.kind
    if k is TypeKind.LIST:
        assert t.elem is not None
        elem = t.elem
        return (0, tuple(sort_key(e, elem) for e in v))
    if k is TypeKind.STRUCT:
        return (0, tuple(sort_key(v.get(f.name), f.data_type) for f in t.fields))
    if (isinstance(v, float) and math.isnan(v)) or (isinstance(v, Decimal) and v.is_nan()):
        return (0, 1)
    if k is TypeKind.INTERVAL:
        return (0, 0, v.total_usecs)
    return (0, 0, v)


_PY_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "equal": lambda a, b: a == b,
    "not_equal": lambda a, b: a != b,
    "less_than": lambda a, b: a < b,
    "less_than_or_equal": lambda a, b: a <= b,
    "greater_than": lambda a, b: a > b,
    "greater_than_or_equal": lambda a, b: a >= b,
}


def _composite_compare(op: str, t: DataType, x: pa.Array, y: pa.Array) -> pa.Array:
    fn = _PY_OPS[op]
    xs, ys = from_arrow(x, t), from_arrow(y, t)
    out = [
        None if a is None or b is None else fn(sort_key(a, t), sort_key(b, t))
        for a, b in zip(xs, ys, strict=True)
    ]
    return pa.array(out, pa.bool_())


#: Kinds whose comparison with a literal can use Arrow's kernel with a scalar operand.
_SCALAR_OK = frozenset(
    {
        TypeKind.BOOLEAN,
        TypeKind.SMALLINT,
        TypeKind.INT,
        TypeKind.BIGINT,
        TypeKind.SERIAL,
        TypeKind.NUMERIC,
        TypeKind.VARCHAR,
        TypeKind.BYTEA,
        TypeKind.DATE,
        TypeKind.TIME,
        TypeKind.TIMESTAMP,
        TypeKind.TIMESTAMPTZ,
    }
)


def _register_comparison(op: str) -> None:
    @register(op)
    def impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
        t = call.args[0].return_type
        rhs = call.args[1]
        if (
            isinstance(rhs, Literal)
            and isinstance(rhs.value, Decimal)
            and normalize(t).kind is TypeKind.NUMERIC
            and nm.is_numeric_array(a[0])
        ):
            return numeric_compare(op, a[0], rhs.value)
        if isinstance(rhs, Literal) and normalize(t).kind in _SCALAR_OK and rhs.value is not None:
            # compare against a scalar: the literal is never copied into an n-row array
            return pc.call_function(_ARROW[op], [a[0], pa.scalar(rhs.value, t.arrow)])
        return compare(op, t, a[0], a[1])


for _op in COMPARISONS:
    _register_comparison(_op)


# -- null-safe comparison and IN --------------------------------------------------------------------


def is_distinct(t: DataType, x: pa.Array, y: pa.Array) -> np.ndarray:
    """IS DISTINCT FROM as a plain boolean mask: NULLs compare equal to each other."""
    n = len(x)
    vx, vy = valid_mask(x), valid_mask(y)
    ne = bool_values(compare("not_equal", t, x, y))
    if vx is None and vy is None:
        return ne
    vx = np.ones(n, np.bool_) if vx is None else vx
    vy = np.ones(n, np.bool_) if vy is None else vy
    return np.where(vx & vy, ne, vx != vy)


@register("is_distinct_from")
def _is_distinct_from(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pa.array(is_distinct(call.args[0].return_type, a[0], a[1]), pa.bool_())


@register("is_not_distinct_from")
def _is_not_distinct_from(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pa.array(~is_distinct(call.args[0].return_type, a[0], a[1]), pa.bool_())


#: Kinds whose Arrow hashing agrees with SQL equality (not floats: -0.0 / NaN; not intervals).
_HASHABLE = _SCALAR_OK


@register("in")
def _in(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """x IN (v1, ...): true on a match, else NULL if x or any v is NULL, else false."""
    t = call.args[0].return_type
    x = a[0]
    consts = call.args[1:]
    if (
        normalize(t).kind in _HASHABLE
        and not nm.is_numeric_array(x)
        and all(isinstance(c, Literal) for c in consts)
    ):
        lits = [c.value for c in consts if isinstance(c, Literal)]
        non_null = [v for v in lits if v is not None]
        if non_null and None not in lits:
            hit = pc.is_in(x, value_set=pa.array(non_null, t.arrow))
            return hit if x.null_count == 0 else pc.if_else(pc.is_valid(x), hit, pa.scalar(None, pa.bool_()))
        found = (
            bool_values(pc.is_in(x, value_set=pa.array(non_null, t.arrow)))
            if non_null
            else np.zeros(n, np.bool_)
        )
        unknown = ~found & (None in lits)
        vx = valid_mask(x)
        valid = ~unknown if vx is None else (vx & ~unknown)
        return from_numpy(found, valid, pa.bool_())
    values = a[1:]
    out = compare("equal", t, x, values[0])
    for v in values[1:]:
        out = pc.or_kleene(out, compare("equal", t, x, v))
    return out
