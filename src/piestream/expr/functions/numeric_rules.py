"""NUMERIC under the rules of views created before per-value scales (plan format <= 2).

Such a view stored every NUMERIC it computed at 10 fraction digits (rounded half away from
zero) without trailing zeros. So that it stays consistent with its own rows, its stored plan is
rewritten on load (`piestream.plan.numeric_rules`): each NUMERIC-valued call is wrapped in
`numeric_decimal_rules`, and NUMERIC division becomes `divide_decimal_rules` (the quotient
rounded once, at 10 digits, instead of at select_div_scale and then again at 10). Not
callable from SQL: no binder signature names them.
"""

from __future__ import annotations

import pyarrow as pa

from piestream.common import numeric_arrays as na
from piestream.expr.expr import FuncCall
from piestream.expr.functions import numeric_scaled as ns
from piestream.expr.functions.registry import register

#: the fixed scale of the decimal128(38, 10) layout those views were computed in
DECIMAL_RULES_SCALE = 10
DECIMAL_RULES = "numeric_decimal_rules"
DIVIDE_DECIMAL_RULES = "divide_decimal_rules"


def decimal_rules(x: pa.Array) -> pa.Array:
    """`x` at most 10 fraction digits (half away from zero), without trailing zeros."""
    return na.pack(na.normalize(na.unpack(ns.rescale_to(x, DECIMAL_RULES_SCALE, "round"))))


@register(DECIMAL_RULES)
def _decimal_rules(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return decimal_rules(a[0])


@register(DIVIDE_DECIMAL_RULES)
def _divide_decimal_rules(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    q = ns.divide_at(a[0], a[1], DECIMAL_RULES_SCALE)
    return na.pack(na.normalize(na.unpack(q)))
