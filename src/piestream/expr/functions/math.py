"""Mathematical functions: round / trunc / floor / ceil, sign, sqrt, cbrt, exp, ln, log10,
trigonometry. Float versions use numpy with PostgreSQL's domain errors (2201E / 2201F) and
range checks; NUMERIC rounding is exact (`decimal.rescale`), NUMERIC transcendental functions
run per row with Python's decimal (rarely used; results rounded to NUMERIC's scale)."""

from __future__ import annotations

import decimal as pydec
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from piestream.common.errors import InvalidInput, NumericOutOfRange
from piestream.common.types import TypeKind
from piestream.expr.expr import FuncCall
from piestream.expr.functions import decimal as dec
from piestream.expr.functions import numeric_scaled as ns
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import NOT_CONSTANT, and_valid, constant_arg, from_numpy, full_valid, view

_LOG_ERROR = "2201E"  # invalid_argument_for_logarithm
_POWER_ERROR = "2201F"  # invalid_argument_for_power_function


def _is_numeric(call: FuncCall) -> bool:
    return call.args[0].return_type.kind is TypeKind.NUMERIC


def _float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[pa.Array], pa.Array]:
    def run(x: pa.Array) -> pa.Array:
        with np.errstate(all="ignore"):
            return from_numpy(fn(view(x, np.float64)).astype(np.float64), and_valid(x), pa.float64())

    return run


def _rounding(mode: str, float_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    @register(mode)
    def impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
        if not _is_numeric(call):
            return _float_unary(float_fn)(a[0])
        if len(a) == 1:
            return dec.rescale(a[0], 0, mode)
        digits = constant_arg(call, 1)
        if digits is NOT_CONSTANT:
            return dec.per_row_decimal(lambda x, d: _py_rescale(x, int(d), mode), a)
        if digits is None:
            return pa.nulls(n, a[0].type)
        return dec.rescale(a[0], int(digits), mode)


_PY_MODES = {
    "round": pydec.ROUND_HALF_UP,
    "trunc": pydec.ROUND_DOWN,
    "floor": pydec.ROUND_FLOOR,
    "ceil": pydec.ROUND_CEILING,
}


def _py_rescale(x: pydec.Decimal, digits: int, mode: str) -> pydec.Decimal:
    return x.scaleb(digits).quantize(pydec.Decimal(1), rounding=_PY_MODES[mode]).scaleb(-digits)


_rounding("round", np.rint)  # float round is rint: half to even, like PostgreSQL's dround
_rounding("trunc", np.trunc)
_rounding("floor", np.floor)
_rounding("ceil", np.ceil)


@register("sign")
def _sign(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    if _is_numeric(call):
        return dec.per_row_decimal(lambda x: pydec.Decimal((x > 0) - (x < 0)), a)
    return _float_unary(lambda x: np.where(x > 0, 1.0, np.where(x < 0, -1.0, 0.0)))(a[0])


def _checked_float(
    name: str,
    fn: Callable[[np.ndarray], np.ndarray],
    domain: Callable[[np.ndarray], list[tuple[np.ndarray, str, str]]] | None = None,
    numeric: Callable[[pydec.Decimal], pydec.Decimal] | None = None,
) -> None:
    @register(name)
    def impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
        if numeric is not None and _is_numeric(call):
            return dec.per_row_decimal(numeric, a)
        x = view(a[0], np.float64)
        valid = and_valid(a[0])
        v = full_valid(valid, n)
        if domain is not None:
            for bad, message, state in domain(x):
                if (bad & v).any():
                    raise InvalidInput(message, sqlstate=state)
        with np.errstate(all="ignore"):
            r = fn(x)
        if (np.isinf(r) & np.isfinite(x) & v).any():
            raise NumericOutOfRange("value out of range: overflow")
        return from_numpy(r, valid, pa.float64())


def _log_domain(x: np.ndarray) -> list[tuple[np.ndarray, str, str]]:
    with np.errstate(invalid="ignore"):
        return [
            (x == 0, "cannot take logarithm of zero", _LOG_ERROR),
            (x < 0, "cannot take logarithm of a negative number", _LOG_ERROR),
        ]


def _numeric_log(fn: Callable[[pydec.Decimal], pydec.Decimal]) -> Callable[[pydec.Decimal], pydec.Decimal]:
    def run(x: pydec.Decimal) -> pydec.Decimal:
        if x.is_nan():
            return x
        if x == 0:
            raise InvalidInput("cannot take logarithm of zero", sqlstate=_LOG_ERROR)
        if x < 0:
            raise InvalidInput("cannot take logarithm of a negative number", sqlstate=_LOG_ERROR)
        return fn(x)

    return run


def _numeric_sqrt(x: pydec.Decimal) -> pydec.Decimal:
    if x.is_nan():
        return x
    if x < 0:
        raise InvalidInput("cannot take square root of a negative number", sqlstate=_POWER_ERROR)
    return ns.pg_sqrt(x)


def _sqrt_domain(x: np.ndarray) -> list[tuple[np.ndarray, str, str]]:
    with np.errstate(invalid="ignore"):
        return [(x < 0, "cannot take square root of a negative number", _POWER_ERROR)]


_checked_float("sqrt", np.sqrt, _sqrt_domain, _numeric_sqrt)
_checked_float("cbrt", np.cbrt)
_checked_float("exp", np.exp, None, ns.pg_exp)
_checked_float("ln", np.log, _log_domain, _numeric_log(ns.pg_ln))
_checked_float("log10", np.log10, _log_domain, _numeric_log(lambda x: ns.pg_log(pydec.Decimal(10), x)))
for _name, _fn in {
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "degrees": np.degrees,
    "radians": np.radians,
}.items():
    _checked_float(_name, _fn)


@register("pi")
def _pi(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pa.array(np.full(n, np.pi))


@register("atan2")
def _atan2(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return from_numpy(np.arctan2(view(a[0], np.float64), view(a[1], np.float64)), and_valid(*a), pa.float64())


@register("random")
def _random(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """PostgreSQL's random(): a float8 in [0, 1), a new value per row, drawn for the whole batch
    at once from an OS-seeded generator."""
    return pa.array(np.random.default_rng().random(n), pa.float64())
