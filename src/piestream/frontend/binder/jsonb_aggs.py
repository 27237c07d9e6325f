"""jsonb_agg and jsonb_object_agg, bound as array_agg plus a conversion of its result.

``jsonb_agg(x [ORDER BY ...])`` is ``to_jsonb(array_agg(x [ORDER BY ...]))`` and
``jsonb_object_agg(k, v [ORDER BY ...])`` is ``jsonb_object_of_pairs(array_agg(ROW(k::text, v)
[ORDER BY ...]))``: the same NULL rules (no rows: NULL; NULL values kept as JSON null), and in MVs
array_agg's state, the group's materialized input, which retracts as PostgreSQL's semantics
require. FILTER and DISTINCT stay on the array_agg (the conversion wraps the FILTER as well).
"""

from __future__ import annotations

from typing import cast

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported
from piestream.frontend.binder.expr_binder import position
from piestream.frontend.parser.base import WRITTEN_NAME

#: the scalar that turns array_agg's pairs into an object (expr/functions/jsonb.py)
OBJECT_OF_PAIRS = "jsonb_object_of_pairs"


def _is_jsonb_agg(node: exp.Expression) -> bool:
    return isinstance(node, exp.JSONBObjectAgg) or (
        isinstance(node, exp.Anonymous) and str(node.this).lower() == "jsonb_agg"
    )


def _as_array_agg(node: exp.Expression) -> tuple[exp.Expression, str]:
    """The array_agg call standing for `node`, and the function that converts its result."""
    if isinstance(node, exp.JSONBObjectAgg):
        key, value = node.this, node.expression
        order = value if isinstance(value, exp.Order) else None
        if order is not None:
            value = order.this
        pair: exp.Expression = exp.Tuple(
            expressions=[exp.Cast(this=key, to=exp.DataType.build("text")), value]
        )
        if order is not None:
            pair = exp.Order(this=pair, expressions=order.expressions)
        return exp.ArrayAgg(this=pair), OBJECT_OF_PAIRS
    args = node.expressions
    if len(args) != 1:
        raise FeatureNotSupported("jsonb_agg takes one argument", position=position(node))
    return exp.ArrayAgg(this=args[0]), "to_jsonb"


def jsonb_aggs_as_array_aggs(tree: exp.Expression) -> exp.Expression:
    """Rewrites the jsonb aggregates of `tree` in place (see the module doc)."""
    for found in list(tree.find_all(exp.Anonymous, exp.JSONBObjectAgg)):
        node = cast(exp.Expression, found)
        if not _is_jsonb_agg(node):
            continue
        agg, finish = _as_array_agg(node)
        agg.meta.update(node.meta)
        outer: exp.Expression = node
        while isinstance(outer.parent, exp.Filter | exp.Window) and outer.parent.this is outer:
            outer = outer.parent
        # the output column keeps the name written (jsonb_agg, jsonb_object_agg), as PostgreSQL's
        written = node.meta.get(WRITTEN_NAME) or (
            "jsonb_object_agg" if isinstance(node, exp.JSONBObjectAgg) else "jsonb_agg"
        )
        if outer is node:
            wrapped = exp.Anonymous(this=finish, expressions=[agg])
            wrapped.meta[WRITTEN_NAME] = written
            node.replace(wrapped)
            continue
        node.replace(agg)
        wrapped = exp.Anonymous(this=finish, expressions=[outer.copy()])
        wrapped.meta[WRITTEN_NAME] = written
        outer.replace(wrapped)
    return tree
