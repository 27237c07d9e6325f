"""Binding ``ASOF [LEFT] JOIN ... ON``: the bound condition split into the equalities (the join
key, at least one) and exactly one inequality between a column of each side, RisingWave's rule
and texts. Anything else in ON is refused (0A000), never dropped."""

from __future__ import annotations

from piestream.common.errors import FeatureNotSupported
from piestream.common.schema import Schema
from piestream.expr.expr import Expr, FuncCall, InputRef
from piestream.frontend.logical import AsOfJoin, PlanNode
from piestream.plan.asof_join import FLIPPED

_INEQUALITIES = {
    "less_than": "<",
    "less_than_or_equal": "<=",
    "greater_than": ">",
    "greater_than_or_equal": ">=",
}


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, FuncCall) and e.name == "and":
        return [c for a in e.args for c in _conjuncts(a)]
    return [e]


def _sides(c: FuncCall, nl: int) -> tuple[InputRef, InputRef, bool] | None:
    """(left column, right column, flipped) of a comparison between a column of each side."""
    if len(c.args) != 2 or not all(isinstance(a, InputRef) for a in c.args):
        return None
    a, b = c.args
    assert isinstance(a, InputRef) and isinstance(b, InputRef)
    if a.index < nl <= b.index:
        return a, b, False
    if b.index < nl <= a.index:
        return b, a, True
    return None


def bind_asof_join(
    schema: Schema, left: PlanNode, right: PlanNode, outer: bool, condition: Expr | None, position: int | None
) -> AsOfJoin:
    nl = len(left.schema)
    lk: list[int] = []
    rk: list[int] = []
    ineq: list[tuple[int, int, str]] = []
    for c in _conjuncts(condition) if condition is not None else []:
        if isinstance(c, FuncCall) and c.name in ("equal", "="):
            pair = _sides(c, nl)
            if pair is None or pair[0].return_type != pair[1].return_type:
                raise FeatureNotSupported(
                    "an ASOF JOIN equality must compare a column of each side, of the same type",
                    position=position,
                )
            lk.append(pair[0].index)
            rk.append(pair[1].index - nl)
        elif isinstance(c, FuncCall) and c.name in _INEQUALITIES:
            pair = _sides(c, nl)
            if pair is None or pair[0].return_type != pair[1].return_type:
                raise FeatureNotSupported(
                    "an ASOF JOIN inequality must compare a column of each side, of the same type",
                    position=position,
                )
            op = _INEQUALITIES[c.name]
            ineq.append((pair[0].index, pair[1].index - nl, FLIPPED[op] if pair[2] else op))
        else:
            raise FeatureNotSupported(
                f"ASOF JOIN condition {c} is not supported: only equalities and one inequality (< <= > >=)",
                position=position,
            )
    if not lk:  # RisingWave's text
        raise FeatureNotSupported("AsOf join requires at least 1 equal condition", position=position)
    if len(ineq) != 1:
        raise FeatureNotSupported("AsOf join requires exactly 1 inequality condition", position=position)
    ((lc, rc, op),) = ineq
    return AsOfJoin(schema, left, right, outer, tuple(lk), tuple(rk), lc, rc, op)
