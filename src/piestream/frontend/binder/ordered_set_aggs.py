"""Ordered-set aggregates (PostgreSQL's percentile_cont, percentile_disc, mode), bound as an
array_agg of the group's non-NULL inputs in the WITHIN GROUP order plus a finishing scalar.

``percentile_cont(f) WITHIN GROUP (ORDER BY x)`` is ``percentile_cont_of(array_agg(x ORDER BY x)
FILTER (WHERE x IS NOT NULL), f)`` (the finishing call takes numbers as float8, as PostgreSQL's
percentile_cont does); percentile_disc and mode keep x's type. In MVs the state
is array_agg's, the group's materialized input, so deletes and updates retract as PostgreSQL's
semantics require (these aggregates are not incrementally computable). A FILTER of the call is
ANDed with the NOT NULL one. Forms not rewritten here stay WITHIN GROUP nodes, which the clause
check refuses with 0A000: an array of fractions, several ORDER BY items, other functions, OVER.
"""

from __future__ import annotations

from sqlglot import exp

from piestream.frontend.parser.base import WRITTEN_NAME

_FINISH = {exp.PercentileCont: "percentile_cont", exp.PercentileDisc: "percentile_disc", exp.Mode: "mode"}


def _rewrite(wg: exp.WithinGroup) -> exp.Expression | None:
    """The replacement of `wg` (and of its FILTER parent), or None to leave it refused."""
    fn, order = wg.this, wg.expression
    name = _FINISH.get(type(fn))
    if name is None or not isinstance(order, exp.Order) or len(order.expressions) != 1:
        return None
    fraction = fn.args.get("this")
    if (name == "mode") != (fraction is None) or isinstance(fraction, exp.Array):
        return None
    ordered = order.expressions[0]
    x = ordered.this
    agg = exp.ArrayAgg(this=exp.Order(this=x.copy(), expressions=[ordered.copy()]))
    cond: exp.Expression = exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null()))
    parent = wg.parent
    if isinstance(parent, exp.Filter) and parent.this is wg:
        cond = exp.And(this=exp.Paren(this=parent.expression.this.copy()), expression=cond)
    filtered = exp.Filter(this=agg, expression=exp.Where(this=cond))
    call = exp.Anonymous(this=f"{name}_of", expressions=[filtered] + ([fraction.copy()] if fraction else []))
    call.meta[WRITTEN_NAME] = name
    return call


def ordered_set_aggs_as_array_aggs(tree: exp.Expression) -> exp.Expression:
    """Rewrites the ordered-set aggregates of `tree` in place (see the module doc)."""
    for wg in list(tree.find_all(exp.WithinGroup)):
        if isinstance(wg.parent, exp.Window):
            continue  # not a window function in PostgreSQL either: refused
        new = _rewrite(wg)
        if new is None:
            continue
        parent = wg.parent
        if isinstance(parent, exp.Filter) and parent.this is wg:
            parent.replace(new)
        else:
            wg.replace(new)
    return tree
