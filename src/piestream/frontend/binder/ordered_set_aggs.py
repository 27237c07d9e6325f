"""Ordered-set aggregates (PostgreSQL's percentile_cont, percentile_disc, mode), bound as an
array_agg of the group's non-NULL inputs in the WITHIN GROUP order plus a finishing scalar.

``percentile_cont(f) WITHIN GROUP (ORDER BY x)`` is ``percentile_cont_of(array_agg(x ORDER BY x)
FILTER (WHERE x IS NOT NULL), f)`` (the finishing call takes numbers as float8, as PostgreSQL's
percentile_cont does); percentile_disc and mode keep x's type. In MVs the state
is array_agg's, the group's materialized input, so deletes and updates retract as PostgreSQL's
semantics require (these aggregates are not incrementally computable). A FILTER of the call is
ANDed with the NOT NULL one. Forms not rewritten here stay WITHIN GROUP nodes, which the clause
check refuses with 0A000: an array of fractions, several ORDER BY items, other functions, OVER.

RisingWave's ``approx_percentile(q [, relative_error]) WITHIN GROUP (ORDER BY x)`` is bound the same
way and answers exactly (see `_rewrite_approx_percentile`).
"""

from __future__ import annotations

from sqlglot import exp

from piestream.frontend.parser.base import WRITTEN_NAME

_FINISH = {exp.PercentileCont: "percentile_cont", exp.PercentileDisc: "percentile_disc", exp.Mode: "mode"}


def _finish_call(
    name: str,
    written: str,
    agg: exp.Expression,
    x: exp.Expression,
    wrapper: exp.Expression,
    rest: list[exp.Expression],
) -> exp.Expression:
    """``name(agg FILTER (WHERE x IS NOT NULL [AND the call's FILTER]), *rest)``."""
    cond: exp.Expression = exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null()))
    parent = wrapper.parent
    if isinstance(parent, exp.Filter) and parent.this is wrapper:
        cond = exp.And(this=exp.Paren(this=parent.expression.this.copy()), expression=cond)
    filtered = exp.Filter(this=agg, expression=exp.Where(this=cond))
    call = exp.Anonymous(this=name, expressions=[filtered, *rest])
    call.meta[WRITTEN_NAME] = written
    return call


def _rewrite(wg: exp.WithinGroup) -> exp.Expression | None:
    """The replacement of `wg` (and of its FILTER parent), or None to leave it refused."""
    fn, order = wg.this, wg.expression
    if isinstance(fn, exp.Anonymous) and str(fn.this).lower() == "approx_percentile":
        return _rewrite_approx_percentile(wg, fn, order)
    name = _FINISH.get(type(fn))
    if name is None or not isinstance(order, exp.Order) or len(order.expressions) != 1:
        return None
    fraction = fn.args.get("this")
    if (name == "mode") != (fraction is None) or isinstance(fraction, exp.Array):
        return None
    ordered = order.expressions[0]
    x = ordered.this
    agg = exp.ArrayAgg(this=exp.Order(this=x.copy(), expressions=[ordered.copy()]))
    return _finish_call(f"{name}_of", name, agg, x, wg, [fraction.copy()] if fraction else [])


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


def _rewrite_approx_percentile(
    wg: exp.WithinGroup, fn: exp.Anonymous, order: exp.Expression
) -> exp.Expression | None:
    """RisingWave's ``approx_percentile(q [, relative_error]) WITHIN GROUP (ORDER BY x)`` as
    ``approx_percentile_of(array_agg(x ORDER BY x) FILTER (...), q, relative_error)``: the exact
    value at RisingWave's rank, which is within any relative error (float8, as RisingWave's)."""
    args = fn.expressions
    if not isinstance(order, exp.Order) or len(order.expressions) != 1 or not 1 <= len(args) <= 2:
        return None
    if any(isinstance(a, exp.Array) for a in args):
        return None
    ordered = order.expressions[0]
    x = ordered.this
    agg = exp.ArrayAgg(this=exp.Order(this=x.copy(), expressions=[ordered.copy()]))
    error = args[1].copy() if len(args) > 1 else exp.Literal.number("0.01")
    return _finish_call("approx_percentile_of", "approx_percentile", agg, x, wg, [args[0].copy(), error])
