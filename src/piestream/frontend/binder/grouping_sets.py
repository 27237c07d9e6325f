"""GROUPING SETS, ROLLUP, CUBE and GROUPING(...) (PostgreSQL's semantics, RisingWave's plan).

A GROUP BY list is a cross product of its items: a plain expression is one set of itself, ROLLUP
its prefixes, CUBE its power set, GROUPING SETS the concatenation of its elements' sets (nested
ROLLUP / CUBE / GROUPING SETS included); ``()`` is the empty set. Duplicated sets are kept, each
gives its own rows, as in PostgreSQL.

The plan: an `Expand` copies each row of the Agg's pre-projection once per non-empty set (the
group columns outside the set NULLed, the set's index as a flag column) under an ordinary Agg
grouped by (group columns, flag), so a streaming job retracts like any grouped aggregation. An
empty set is the aggregation over all rows, which has a row even over no input: each gets a
global Agg of its own, united with the grouped one. GROUPING(a, b) reads the flag.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from sqlglot import exp

from piestream.common.schema import Schema
from piestream.common.types import BIGINT, INT, Field
from piestream.expr.bind import bind_call
from piestream.expr.expr import Expr, InputRef, Literal
from piestream.frontend.binder.scope import GroupingError
from piestream.frontend.logical import Agg, AggCall, Expand, PlanNode, Project, Union

#: Name of the flag column (the grouping set's index) in the Agg's output.
FLAG_NAME = "_grouping_set"

_SET_KINDS = (exp.GroupingSets, exp.Rollup, exp.Cube)


def has_grouping_sets(items: Sequence[exp.Expression]) -> bool:
    """Whether a GROUP BY list needs the grouping-sets plan (not plain grouping)."""
    return any(isinstance(g, _SET_KINDS) or (isinstance(g, exp.Tuple) and not g.expressions) for g in items)


def expand_group_by(
    items: Sequence[exp.Expression], bind: Callable[[exp.Expression], Expr]
) -> tuple[list[Expr], list[tuple[int, ...]]]:
    """The distinct group expressions of a GROUP BY list and its grouping sets (indices into them)."""
    exprs: list[Expr] = []

    def index(node: exp.Expression) -> int:
        e = bind(node)
        if e not in exprs:
            exprs.append(e)
        return exprs.index(e)

    def columns(node: exp.Expression) -> tuple[int, ...]:
        """A set element: ``(a, b)``, ``()``, or one expression."""
        if isinstance(node, exp.Tuple):
            return tuple(index(x) for x in node.expressions)
        if isinstance(node, exp.Paren):
            return columns(node.this)
        return (index(node),)

    def sets_of(node: exp.Expression) -> list[tuple[int, ...]]:
        if isinstance(node, exp.Rollup):
            parts = [columns(x) for x in node.expressions]
            return [tuple(itertools.chain(*parts[:k])) for k in range(len(parts), -1, -1)]
        if isinstance(node, exp.Cube):
            parts = [columns(x) for x in node.expressions]
            n = len(parts)
            combos = (c for k in range(n, -1, -1) for c in itertools.combinations(range(n), k))
            return [tuple(itertools.chain(*(parts[i] for i in c))) for c in combos]
        if isinstance(node, exp.GroupingSets):
            out = []
            for x in node.expressions:
                out += sets_of(x) if isinstance(x, _SET_KINDS) else [columns(x)]
            return out
        return [columns(node)]

    sets: list[tuple[int, ...]] = [()]
    for item in items:
        sets = [a + b for a in sets for b in sets_of(item)]
    # a set's columns, each once, in group-expression order
    return exprs, [tuple(sorted(set(s))) for s in sets]


def order_sets(sets: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The non-empty sets first (they are the Expand's flags 0..k-1), then the empty ones."""
    return [s for s in sets if s] + [s for s in sets if not s]


def grouping_mask(args: Sequence[int], subset: tuple[int, ...]) -> int:
    """GROUPING(args) in one set: bit (n-1-k) is 1 where argument k is not grouped in it."""
    n = len(args)
    return sum(1 << (n - 1 - k) for k, a in enumerate(args) if a not in subset)


def grouping_value(args: Sequence[int], sets: list[tuple[int, ...]] | None, flag: Expr | None) -> Expr:
    """GROUPING(args) over the Agg output: a constant, or a CASE over the flag column."""
    if sets is None or flag is None:
        return Literal(0, INT)
    masks = [grouping_mask(args, s) for s in sets]
    if len(set(masks)) == 1:
        return Literal(masks[0], INT)
    case_args: list[Expr] = []
    for i, m in enumerate(masks[:-1]):
        case_args += [bind_call("=", [flag, Literal(i, BIGINT)]), Literal(m, INT)]
    return bind_call("case", [*case_args, Literal(masks[-1], INT)])


def check_grouping_args(args: Sequence[Expr], group_exprs: list[Expr], node: exp.Expression) -> list[int]:
    """Each GROUPING argument must be a group expression of this query level (42803)."""
    out = []
    for a in args:
        if a not in group_exprs:
            raise GroupingError(
                "arguments to GROUPING must be grouping expressions of the associated query level"
            )
        out.append(group_exprs.index(a))
    return out


def plan_grouping_sets(
    pre: PlanNode, g: int, sets: list[tuple[int, ...]], calls: list[AggCall], out_fields: list[Field]
) -> PlanNode:
    """The Agg of a grouping-sets query over its pre-projection `pre` (g group columns first):
    output = the g group columns, the flag, then one column per call (see the module doc).
    `sets` must be in `order_sets` order; `out_fields` are the group and call fields."""
    group_fields, call_fields = out_fields[:g], out_fields[g:]
    flag_field = Field(FLAG_NAME, BIGINT)
    schema = Schema((*group_fields, flag_field, *call_fields))
    w = len(pre.schema)
    branches: list[PlanNode] = []
    grouped = [s for s in sets if s]
    if grouped:
        expand = Expand(Schema((*pre.schema.fields, flag_field)), pre, grouped, tuple(range(g)))
        branches.append(Agg(schema, expand, [*range(g), w], calls))
    for i in range(len(grouped), len(sets)):
        total = Agg(Schema(tuple(call_fields)), pre, [], calls)
        exprs: list[Expr] = [Literal(None, f.data_type) for f in group_fields]
        exprs.append(Literal(i, BIGINT))
        exprs += [InputRef(k, f.data_type) for k, f in enumerate(call_fields)]
        branches.append(Project(schema, total, exprs))
    return branches[0] if len(branches) == 1 else Union(schema, branches)
