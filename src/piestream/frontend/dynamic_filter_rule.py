"""Recognise ``WHERE left_expr <op> (uncorrelated scalar subquery)`` for a DynamicFilter.

The binder turns a scalar subquery into a LEFT join with the one-row subquery (`Join.
scalar_subquery`); a comparison against its column then sits in a Filter above that join. Planned
as written, the join has no equi-key: every left row moves into one actor and a change of the
subquery's value re-checks all of them. A DynamicFilter (reference §6.7) keeps the left input
where it is, stores it ordered by the compared value, broadcasts the one-row right side to every
actor, and turns a change of the value into a range scan. That is what RisingWave plans too.

The rule applies when the filter's only use of the subquery column is one comparison
``a <op> b`` with `a` over left columns and `b` over the subquery column (either order; the
operator is flipped to put the left side first), and nothing above reads the subquery column.
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.expr.expr import Expr, FuncCall
from piestream.frontend.logical import Filter, Join, JoinKind

_OPS = {"less_than": "<", "less_than_or_equal": "<=", "greater_than": ">", "greater_than_or_equal": ">="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class DynamicFilterMatch:
    join: Join
    left_expr: Expr  # over the join's left columns
    comparator: str  # "<", "<=", ">", ">="
    right_expr: Expr  # over the subquery's column (index = number of left columns)
    rest: tuple[Expr, ...]  # the filter's other conjuncts, over left columns only


def match_dynamic_filter(node: Filter, needed_above: set[int]) -> DynamicFilterMatch | None:
    """The DynamicFilter this Filter (whose parent reads `needed_above`) can become, if any."""
    join = node.input
    if not (isinstance(join, Join) and join.scalar_subquery and join.condition is None):
        return None
    if join.kind not in (JoinKind.LEFT, JoinKind.INNER) or len(join.right.schema) != 1:
        return None
    nl = len(join.left.schema)
    if nl in needed_above:
        return None
    found: DynamicFilterMatch | None = None
    rest = []
    for c in _conjuncts(node.predicate):
        refs = c.input_refs()
        if nl not in refs:
            rest.append(c)
            continue
        if found is not None:
            return None  # a second use of the subquery column
        found = _comparison(join, c, nl)
        if found is None:
            return None
    if found is None:
        return None
    return DynamicFilterMatch(join, found.left_expr, found.comparator, found.right_expr, tuple(rest))


def _comparison(join: Join, c: Expr, nl: int) -> DynamicFilterMatch | None:
    if not (isinstance(c, FuncCall) and c.name in _OPS and len(c.args) == 2):
        return None
    a, b = c.args
    op = _OPS[c.name]
    if a.input_refs() == {nl}:
        a, b, op = b, a, _FLIP[op]
    if b.input_refs() != {nl} or nl in a.input_refs() or a.return_type != b.return_type:
        return None
    if not a.input_refs():
        return None  # a constant compared with the subquery: nothing to store per left row
    return DynamicFilterMatch(join, a, op, b, ())


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, FuncCall) and e.name == "and":
        return [c for a in e.args for c in _conjuncts(a)]
    return [e]
