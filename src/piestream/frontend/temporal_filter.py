"""Temporal filters: ``WHERE ts > now() - INTERVAL '1 hour'`` in a materialized view.

RisingWave plans a comparison with ``now()`` as a DynamicFilter whose right side is the one-row
`Now` stream: the bound moves every epoch, rows enter or leave the view as it passes them. Here
each such conjunct of a Filter becomes the shape `dynamic_filter_rule` already recognises, the
Filter over a scalar-subquery join with a `Now` leaf, under a Project that drops the ``now``
column::

    Filter(p AND ts > now() - i)  =>  Project(Filter(ts > $n - i, Join(Filter(p, input), Now)))

Several conjuncts (``BETWEEN now() - i AND now()``) stack one DynamicFilter per bound. The side
compared with the row must be ``now()`` or ``now() ± constant interval``: a non-decreasing
function of the epoch, which lets the DynamicFilter drop rows that can never pass again. Any
other use of ``now()`` keeps its 0A000 (`optimizer.check_no_volatile`).

An OR with one temporal disjunct keeps one DynamicFilter (`_or_to_key`). An OR of several
(``ts > now() - i OR ts < now() - j``, or of conjunctions of such) becomes a UNION ALL of
disjoint branches, each a stack of DynamicFilters: branch i holds the rows for which disjunct i
is true and every earlier one is not (``D_i AND D_1 IS NOT TRUE AND ...``), so a row is in
exactly one branch at every epoch, as it is in the OR; the Union's branch index keeps a row that
moves between branches apart in the stream key.
"""

from __future__ import annotations

import datetime as dt

from piestream.common.errors import FeatureNotSupported
from piestream.common.schema import Field, Schema
from piestream.common.types import TIMESTAMPTZ, TypeKind
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.expr.signatures import VOLATILE
from piestream.frontend.logical import Filter, Join, JoinKind, Now, PlanNode, Project, Union

_COMPARISONS = ("less_than", "less_than_or_equal", "greater_than", "greater_than_or_equal")

_REFUSED = (
    "now() in a materialized view is supported only in a temporal filter: a WHERE conjunct "
    "`expr <op> now() [± interval]` with <op> one of < <= > >= (or BETWEEN)"
)


def has_now(e: Expr) -> bool:
    return any(isinstance(x, FuncCall) and x.name in VOLATILE for x in e.walk())


def rewrite_temporal_filters(plan: PlanNode) -> PlanNode:
    """Every Filter with ``now()`` conjuncts becomes a stack of Now-fed dynamic filters."""
    node = plan.with_children([rewrite_temporal_filters(c) for c in plan.children()])
    if not isinstance(node, Filter) or not has_now(node.predicate):
        return node
    from piestream.frontend.optimizer import and_all, conjuncts

    parts = conjuncts(node.predicate)
    temporal = [c for c in parts if has_now(c)]
    rest = and_all([c for c in parts if not has_now(c)])
    cur: PlanNode = node.input if rest is None else Filter(node.input.schema, node.input, rest)
    several = [c for c in temporal if sum(has_now(d) for d in _disjuncts(c)) > 1]
    for c in temporal:
        if c not in several:
            cur = _temporal_conjunct(cur, c)
    for c in several:  # after the single-bound filters, so each branch reads fewer rows
        cur = _disjoint_branches(cur, _disjuncts(c))
    return cur


def _disjoint_branches(input: PlanNode, parts: list[Expr]) -> PlanNode:
    """``D_1 OR ... OR D_n`` over `input` as the UNION ALL of ``D_i AND NOT-TRUE(D_j), j < i``."""
    from piestream.frontend.optimizer import and_all

    branches: list[PlanNode] = []
    for i, d in enumerate(parts):
        pred = and_all([d, *(_not_true(p) for p in parts[:i])])
        assert pred is not None
        branches.append(rewrite_temporal_filters(Filter(input.schema, input, pred)))
    return Union(input.schema, branches)


_FLIPPED = {
    "less_than": "greater_than_or_equal",
    "less_than_or_equal": "greater_than",
    "greater_than": "less_than_or_equal",
    "greater_than_or_equal": "less_than",
}


def _not_true(e: Expr) -> Expr:
    """``e IS NOT TRUE`` written with temporal comparisons kept as comparisons, so the branches'
    guards are temporal filters again: ``row > b`` is not true when ``row <= b OR row IS NULL``
    (the bound, ``now() ± i``, is never NULL)."""
    from piestream.expr.bind import bind_call

    if isinstance(e, FuncCall) and e.name == "and":
        return bind_call("or", [_not_true(a) for a in e.args])
    if isinstance(e, FuncCall) and e.name == "or":
        return bind_call("and", [_not_true(a) for a in e.args])
    if isinstance(e, FuncCall) and e.name in _FLIPPED and len(e.args) == 2 and has_now(e):
        a, b = e.args
        row = b if has_now(a) else a
        flipped = FuncCall(_FLIPPED[e.name], (a, b), e.return_type, e.options)
        return bind_call("or", [flipped, bind_call("is_null", [row])])
    if has_now(e):
        raise FeatureNotSupported(_REFUSED)
    return bind_call("is_not_true", [e])


def _is_now_bound(e: Expr) -> bool:
    """``now()`` or ``now() ± constant interval``: non-decreasing as epochs advance."""
    if isinstance(e, FuncCall) and e.name in VOLATILE:
        return not e.args
    if isinstance(e, FuncCall) and e.name in ("add", "subtract") and len(e.args) == 2:
        a, b = e.args
        const = isinstance(b, Literal) and b.return_type.kind is TypeKind.INTERVAL
        return const and _is_now_bound(a)
    return False


def _disjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, FuncCall) and e.name == "or":
        return [d for a in e.args for d in _disjuncts(a)]
    return [e]


#: Keys that pass every bound ``now()`` can reach: a row whose other disjunct holds gets one.
_ALWAYS_ABOVE = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
_ALWAYS_BELOW = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
#: The comparisons whose left argument passes by being large.
_LEFT_LARGE = ("greater_than", "greater_than_or_equal")


def _or_to_key(c: Expr) -> Expr:
    """``p OR row <op> bound`` (one temporal disjunct) as ``CASE WHEN p THEN k ELSE row END <op>
    bound``, k a key passing every bound: a NULL or false `p` leaves the comparison to decide, as
    OR does. Any other OR with now() is refused."""
    parts = _disjuncts(c)
    temporal = [d for d in parts if has_now(d)]
    if len(parts) < 2 or len(temporal) != 1:
        return c
    t = temporal[0]
    if not (isinstance(t, FuncCall) and t.name in _COMPARISONS and len(t.args) == 2):
        raise FeatureNotSupported(_REFUSED)
    from piestream.expr.bind import bind_call

    row_first = not has_now(t.args[0])
    row = t.args[0] if row_first else t.args[1]
    if row.return_type != TIMESTAMPTZ or has_now(row):
        raise FeatureNotSupported(_REFUSED)
    above = (t.name in _LEFT_LARGE) == row_first  # the row passes by being large
    key = Literal(_ALWAYS_ABOVE if above else _ALWAYS_BELOW, TIMESTAMPTZ)
    rest = [d for d in parts if d is not t]
    other = rest[0] if len(rest) == 1 else bind_call("or", rest)
    keyed = bind_call("case", [other, key, row])
    args = (keyed, t.args[1]) if row_first else (t.args[0], keyed)
    return FuncCall(t.name, args, t.return_type, t.options)


def _temporal_conjunct(input: PlanNode, c: Expr) -> PlanNode:
    c = _or_to_key(c)
    if not (isinstance(c, FuncCall) and c.name in _COMPARISONS and len(c.args) == 2):
        raise FeatureNotSupported(_REFUSED)
    a, b = c.args
    row_side = b if has_now(a) else a
    now_side = a if has_now(a) else b
    if has_now(row_side) or not row_side.input_refs() or not _is_now_bound(now_side):
        raise FeatureNotSupported(_REFUSED)
    n = len(input.schema)
    now_ref = InputRef(n, TIMESTAMPTZ)
    bound = now_side.transform_down(
        lambda x: now_ref if isinstance(x, FuncCall) and x.name in VOLATILE else None
    )
    pred = FuncCall(c.name, (a, bound) if now_side is b else (bound, b), c.return_type, c.options)
    now = Now(Schema((Field("now", TIMESTAMPTZ),)))
    schema = Schema((*input.schema.fields, *now.schema.fields))
    join = Join(schema, input, now, JoinKind.INNER, None, scalar_subquery=True)
    keep: list[Expr] = [InputRef(i, f.data_type) for i, f in enumerate(input.schema.fields)]
    return Project(input.schema, Filter(schema, join, pred), keep)
