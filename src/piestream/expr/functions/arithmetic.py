"""Arithmetic operators: + - * / % unary minus, abs, power.

Integers use Arrow's checked kernels (overflow is 22003 "integer out of range", division
truncates toward zero, x / 0 is 22012). Floats follow PostgreSQL's float.h: IEEE results, except
that division by zero, overflow to infinity from finite inputs and underflow to zero from
non-zero inputs raise. NUMERIC is exact (see `decimal`). Date/time operand pairs are handled in
`datetime_arith`.
"""

from __future__ import annotations

import decimal as _pydecimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import DivisionByZero, InvalidInput, NumericOutOfRange
from piestream.common.types import DataType, TypeKind
from piestream.expr.coercion import normalize
from piestream.expr.expr import FuncCall
from piestream.expr.functions import datetime_arith
from piestream.expr.functions import decimal as dec
from piestream.expr.functions import numeric_scaled as ns
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import and_valid, from_numpy, full_valid, view

_FLOATS = (TypeKind.REAL, TypeKind.DOUBLE)
_INTS = (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT)
_FLOAT_NP = {TypeKind.REAL: np.float32, TypeKind.DOUBLE: np.float64}
_POWER_ERROR = "2201F"  # invalid_argument_for_power_function


def arg_types(call: FuncCall) -> list[DataType]:
    return [normalize(a.return_type) for a in call.args]


def _same_numeric(call: FuncCall, a: list[pa.Array]) -> tuple[TypeKind, pa.Array, pa.Array] | None:
    """(kind, x, y) when both operands are numbers (REAL mixed with DOUBLE computes in DOUBLE)."""
    ta, tb = arg_types(call)
    if not (ta.is_numeric and tb.is_numeric):
        return None
    x, y = a
    if ta.kind != tb.kind:
        if {ta.kind, tb.kind} <= set(_FLOATS):
            return TypeKind.DOUBLE, x.cast(pa.float64()), y.cast(pa.float64())
        raise InvalidInput(f"{call.name} needs operands of one type, got {ta} and {tb}")
    return ta.kind, x, y


def float_op(op: str, x: pa.Array, y: pa.Array, kind: TypeKind) -> pa.Array:
    """One float operator with PostgreSQL's checks (float8_pl / _mi / _mul / _div)."""
    dtype = _FLOAT_NP[kind]
    valid = and_valid(x, y)
    v = full_valid(valid, len(x))
    a, b = view(x, dtype), view(y, dtype)
    under = zero = None
    with np.errstate(all="ignore"):
        if op == "add":
            r = a + b
            over = np.isinf(r) & ~np.isinf(a) & ~np.isinf(b)
        elif op == "subtract":
            r = a - b
            over = np.isinf(r) & ~np.isinf(a) & ~np.isinf(b)
        elif op == "multiply":
            r = a * b
            over = np.isinf(r) & ~np.isinf(a) & ~np.isinf(b)
            under = (r == 0) & (a != 0) & (b != 0)
        else:
            zero = (b == 0) & ~np.isnan(a)
            r = a / b
            over = np.isinf(r) & ~np.isinf(a)
            under = (r == 0) & (a != 0) & ~np.isinf(b)
    if zero is not None and (zero & v).any():
        raise DivisionByZero("division by zero")
    if (over & v).any():
        raise NumericOutOfRange("value out of range: overflow")
    if under is not None and (under & v).any():
        raise NumericOutOfRange("value out of range: underflow")
    return from_numpy(r.astype(dtype, copy=False), valid, x.type)


_INT_KERNEL = {
    "add": "add_checked",
    "subtract": "subtract_checked",
    "multiply": "multiply_checked",
    "divide": "divide_checked",
}
_DEC_OP = {
    "add": dec.add,
    "subtract": dec.subtract,
    "multiply": dec.multiply,
    "divide": dec.divide,
    "modulus": dec.modulus,
}


def numeric_op(op: str, kind: TypeKind, x: pa.Array, y: pa.Array) -> pa.Array:
    if kind in _INTS or kind is TypeKind.SERIAL:
        if op == "modulus":
            return int_modulus(x, y)
        return pc.call_function(_INT_KERNEL[op], [x, y])
    if kind is TypeKind.NUMERIC:
        return _DEC_OP[op](x, y)
    if op == "modulus":
        raise InvalidInput("operator does not exist: double precision % double precision")
    return float_op(op, x, y, kind)


def int_modulus(x: pa.Array, y: pa.Array) -> pa.Array:
    """C-style remainder (sign of the dividend); x % -1 is 0 even for the minimum integer."""
    valid = and_valid(x, y)
    v = full_valid(valid, len(x))
    dtype = x.type.to_pandas_dtype()
    a, b = view(x, dtype), view(y, dtype)
    if ((b == 0) & v).any():
        raise DivisionByZero("division by zero")
    safe = np.where((b == 0) | (b == -1), 1, b).astype(dtype)
    return from_numpy(np.fmod(a, safe).astype(dtype), valid, x.type)


def _binary(op: str) -> None:
    @register(op)
    def impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
        same = _same_numeric(call, a)
        if same is not None:
            return numeric_op(op, *same)
        ta, tb = arg_types(call)
        return datetime_arith.binary(op, ta, tb, a[0], a[1], call.return_type)


for _op in ("add", "subtract", "multiply", "divide", "modulus"):
    _binary(_op)


@register("neg")
def _neg(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    kind = normalize(call.args[0].return_type).kind
    x = a[0]
    if kind is TypeKind.NUMERIC:
        return dec.negate(x)
    if kind in _FLOATS:
        return pc.negate(x)
    if kind is TypeKind.INTERVAL:
        return datetime_arith.negate_interval(x)
    return pc.negate_checked(x)


@register("abs")
def _abs(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    kind = normalize(call.args[0].return_type).kind
    if kind is TypeKind.NUMERIC:
        return dec.absolute(a[0])
    if kind in _FLOATS:
        return pc.abs(a[0])
    return pc.abs_checked(a[0])


@register("power")
def _power(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """PostgreSQL's pow: 0 ^ negative and negative ^ fraction are errors, overflow is 22003."""
    if call.return_type.kind is TypeKind.NUMERIC:
        return dec.per_row_decimal(_numeric_power, a)
    valid = and_valid(*a)
    v = full_valid(valid, n)
    x, y = view(a[0], np.float64), view(a[1], np.float64)
    with np.errstate(all="ignore"):
        if ((x == 0) & (y < 0) & v).any():
            raise InvalidInput("zero raised to a negative power is undefined", sqlstate=_POWER_ERROR)
        if ((x < 0) & (np.floor(y) != y) & np.isfinite(y) & v).any():
            raise InvalidInput(
                "a negative number raised to a non-integer power yields a complex result",
                sqlstate=_POWER_ERROR,
            )
        r = np.power(x, y)
    finite_in = np.isfinite(x) & np.isfinite(y)
    if (np.isinf(r) & finite_in & v).any():
        raise NumericOutOfRange("value out of range: overflow")
    if ((r == 0) & (x != 0) & finite_in & v).any():
        raise NumericOutOfRange("value out of range: underflow")
    return from_numpy(r, valid, pa.float64())


def _numeric_power(x: _pydecimal.Decimal, y: _pydecimal.Decimal) -> _pydecimal.Decimal:
    if x.is_nan() or y.is_nan():  # PostgreSQL: NaN ^ 0 = 1 ^ NaN = 1, else NaN
        return _pydecimal.Decimal(1) if (y == 0 or x == 1) else _pydecimal.Decimal("NaN")
    if not (x.is_finite() and y.is_finite()):
        if y == 0 or x == 1:
            return _pydecimal.Decimal(1)
        try:
            return x**y
        except _pydecimal.InvalidOperation:  # -Infinity ^ non-integer: PostgreSQL's +-Infinity / 0
            return _pydecimal.Decimal("Infinity") if y > 0 else _pydecimal.Decimal(0)
    if x == 0 and y < 0:
        raise InvalidInput("zero raised to a negative power is undefined", sqlstate=_POWER_ERROR)
    if x < 0 and y != y.to_integral_value():
        raise InvalidInput(
            "a negative number raised to a non-integer power yields a complex result", sqlstate=_POWER_ERROR
        )
    return ns.pg_power(x, y)
