"""PostgreSQL's display scale of NUMERIC results, where its rules fix it for every value.

PostgreSQL keeps a display scale (dscale) per NUMERIC value: ``1940 * 0.908`` prints ``1761.520``
because an integer has dscale 0, the literal ``0.908`` dscale 3 and a product the sum of its
factors' (numeric.c mul_var). piestream stores NUMERIC as decimal128(38, 10) columns, which hold
no per-value scale; instead the binder works out the scale an expression's values all have when
PostgreSQL's rule for it depends only on its inputs' scales, and keeps it in the result type
(`DataType.dscale`, shown by the text and binary output). Where the scale depends on each value
(division and avg: select_div_scale; sqrt, exp, ln, power; a plain ``numeric`` column, whose
values keep the scale they were written with) the type has no display scale and values print
without trailing zeros, as before. Scales are capped at the NUMERIC_SCALE fraction digits kept.

Rules (numeric.c): ``+ - %`` the larger of the two; ``*`` the sum; unary minus, abs: the
argument's; ``round(x, n)`` / ``trunc(x, n)`` with a constant n: max(n, 0); ``round(x)``,
``trunc(x)``, ``ceil``, ``floor``, ``sign``: 0; an integer converted to numeric: 0; a literal:
its written fraction digits; sum, min, max: the argument's.
"""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Callable, Sequence

from piestream.common.types import DataType, TypeKind, with_dscale
from piestream.expr.expr import Expr, FuncCall, Literal

#: FuncCall kernel name -> display scale from the arguments' display scales (None: unknown).
_RULES: dict[str, Callable[[Sequence[int], Sequence[Expr]], int | None]] = {
    "add": lambda s, a: max(s),
    "subtract": lambda s, a: max(s),
    "modulus": lambda s, a: max(s),
    "multiply": lambda s, a: sum(s),
    "neg": lambda s, a: s[0],
    "abs": lambda s, a: s[0],
}

#: Kernels whose result has dscale 0 or a constant second argument's (PostgreSQL's round_var /
#: trunc_var set dscale to the rounding scale; ceil, floor and sign make integers).
_ROUNDING = frozenset({"round", "trunc"})
_INTEGRAL = frozenset({"ceil", "floor", "sign"})


def type_dscale(t: DataType) -> int | None:
    """The display scale every value of `t` has: an integer's 0, a NUMERIC's own or None."""
    if t.is_integer:
        return 0
    if t.kind is TypeKind.NUMERIC:
        return t.display_scale
    return None


def decimal_dscale(d: decimal.Decimal) -> int | None:
    """PostgreSQL's dscale of a literal written as `d` (``1.50`` -> 2, ``1e3`` -> 0)."""
    if not d.is_finite():
        return None
    exp = d.as_tuple().exponent
    assert isinstance(exp, int)
    return max(0, -exp)


def text_dscale(text: str) -> int | None:
    """The dscale of NUMERIC input text (``'1.50'::numeric`` -> 2), None if it is not a number."""
    try:
        return decimal_dscale(decimal.Decimal(text.strip()))
    except (decimal.InvalidOperation, ValueError):
        return None


def with_call_dscale(call: Expr) -> Expr:
    """`call` with its NUMERIC result's display scale, when PostgreSQL's rule fixes it."""
    if not isinstance(call, FuncCall) or call.return_type.kind is not TypeKind.NUMERIC:
        return call
    if call.return_type.typmod is not None:
        return call
    scale = _call_dscale(call)
    if scale == call.return_type.dscale:
        return call
    return dataclasses.replace(call, return_type=with_dscale(call.return_type, scale))


def _call_dscale(call: FuncCall) -> int | None:
    name, args = call.name, call.args
    if name in _INTEGRAL or (name in _ROUNDING and len(args) == 1):
        return 0
    if name in _ROUNDING and len(args) == 2:
        n = args[1]
        if isinstance(n, Literal) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return max(n.value, 0)
        return None  # round(x, col): each row's own scale
    rule = _RULES.get(name)
    if rule is None:
        return None
    scales = [type_dscale(a.return_type) for a in args]
    if any(s is None for s in scales):
        return None
    return rule([s for s in scales if s is not None], args)
