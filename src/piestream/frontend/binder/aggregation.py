"""Binding aggregation: GROUP BY, aggregate calls, HAVING, and ORDER BY over the groups.

Select items, HAVING and ORDER BY are first bound over the FROM relation with a hook that turns
each aggregate call into a placeholder; the group expressions and aggregate arguments become a
projection under an `Agg` node; then every bound expression is rewritten over the Agg's output
(group-expression subtrees -> group columns, placeholders -> aggregate columns). A column left
over that is neither grouped nor aggregated is PostgreSQL's error 42803.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.types import INT, Field, TypeKind
from piestream.expr.bind import agg_signature, bind_call, coerce_to, fold_constants
from piestream.expr.expr import Expr, InputRef, Literal, UnknownLiteral
from piestream.frontend.binder.expr_binder import AGG_FUNCS, AGG_NAMES, ExprBinder, position
from piestream.frontend.binder.grouping_sets import (
    check_grouping_args,
    expand_group_by,
    grouping_value,
    has_grouping_sets,
    order_sets,
    plan_grouping_sets,
)
from piestream.frontend.binder.scope import GroupingError, Scope, ScopeColumn
from piestream.frontend.binder.windows import WindowBinding
from piestream.frontend.logical import Agg, AggCall, Filter, PlanNode, Project
from piestream.plan.agg_call import ORDERED_INPUT

if TYPE_CHECKING:
    from piestream.frontend.binder.query import QueryBinder
    from piestream.frontend.binder.subquery import SubqueryRewriter


@dataclass(frozen=True)
class AggRef(Expr):
    """Placeholder for the result of aggregate call `slot` (before the Agg node exists)."""

    slot: int
    return_type: Any

    def eval(self, chunk: Any) -> Any:
        raise GroupingError("aggregate placeholder left in a plan")


@dataclass(frozen=True)
class GroupingRef(Expr):
    """Placeholder for GROUPING(args) (`args` index the group expressions) until the Agg exists."""

    args: tuple[int, ...]
    return_type: Any

    def eval(self, chunk: Any) -> Any:
        raise GroupingError("GROUPING placeholder left in a plan")


@dataclass(frozen=True)
class DeferredSubquery(Expr):
    """A subquery in HAVING, bound once the Agg output exists."""

    slot: int
    return_type: Any

    def eval(self, chunk: Any) -> Any:
        raise GroupingError("subquery placeholder left in a plan")


def contains_agg(node: exp.Expression | int) -> bool:
    """Whether `node` calls an aggregate of this query level: aggregates inside subqueries
    belong to the subquery, and an aggregate directly under a window (sum(x) OVER ...) is a window
    function, not a grouping aggregate."""
    if isinstance(node, int):
        return False

    stack = [node]
    while stack:
        n = stack.pop()
        if n is not node and isinstance(n, exp.Subquery | exp.Select):
            continue
        is_agg = (
            type(n) in AGG_FUNCS
            or (isinstance(n, exp.Anonymous) and str(n.this).lower() in AGG_NAMES)
            # RisingWave's aggregate first_value(x ORDER BY ...); first_value(x) OVER is a window
            or (isinstance(n, exp.FirstValue | exp.LastValue) and isinstance(n.this, exp.Order))
        )
        if (is_agg and not isinstance(n.parent, exp.Window)) or isinstance(n, exp.Grouping):
            return True
        stack.extend(n.iter_expressions())
    return False


class AggBinding:
    def __init__(self, qb: QueryBinder, node: exp.Select) -> None:
        self.qb = qb
        self.node = node
        self.pre: list[Expr] = []  # projection under the Agg: group exprs, then agg inputs
        self.calls: list[AggCall] = []
        self.deferred: list[exp.Expression] = []
        self.group_exprs: list[Expr] = []
        self.sets: list[tuple[int, ...]] | None = None  # GROUPING SETS / ROLLUP / CUBE

    @classmethod
    def detect(
        cls, qb: QueryBinder, node: exp.Select, items: list[tuple[exp.Expression | int, str]]
    ) -> AggBinding | None:
        order = node.args.get("order")
        has_agg = any(contains_agg(e) for e, _ in items) or (
            order is not None and any(contains_agg(o.this) for o in order.expressions)
        )
        if node.args.get("group") or node.args.get("having") or has_agg:
            return cls(qb, node)
        return None

    def _add_pre(self, e: Expr) -> int:
        if e in self.pre:
            return self.pre.index(e)
        self.pre.append(e)
        return len(self.pre) - 1

    # -- the agg hook ---------------------------------------------------------------------------
    def _on_agg(self, node: exp.Expression, eb: ExprBinder) -> Expr:
        if isinstance(node, exp.Grouping):
            inner = ExprBinder(self.qb.scope, params=self.qb.params, context="GROUPING")
            args = [inner.bind(a) for a in node.expressions]
            return GroupingRef(tuple(check_grouping_args(args, self.group_exprs, node)), INT)
        filt = None
        if isinstance(node, exp.Filter):
            filt = node.expression.this
            node = node.this
        kind = AGG_FUNCS.get(type(node)) or str(getattr(node, "this", "")).lower()
        if kind == "every":
            kind = "bool_and"
        distinct = False
        order_by: list[exp.Ordered] = []
        delimiter: exp.Expression | None = None
        arg = node.this
        if isinstance(arg, exp.Order):
            order_by = list(arg.expressions)
            arg = arg.this
        if isinstance(arg, exp.Distinct):
            distinct = True
            args_nodes = list(arg.expressions)
        elif isinstance(arg, exp.Star) or (kind == "count" and arg is None):
            kind, args_nodes = "count_star", []
        elif isinstance(node, exp.Anonymous):
            args_nodes = list(node.expressions)
        else:
            args_nodes = [arg] if arg is not None else []
        if isinstance(node, exp.GroupConcat):
            delimiter = node.args.get("separator")
        for key in ("order",):
            o = node.args.get(key)
            if isinstance(o, exp.Order):
                order_by = list(o.expressions)
        inner = ExprBinder(self.qb.scope, params=self.qb.params, context="aggregate function calls")
        args = [inner.bind(a) for a in args_nodes]
        if delimiter is not None:
            args.append(inner.bind(delimiter))
        if kind == "string_agg" and len(args) != 2:
            raise FeatureNotSupported("string_agg needs a value and a delimiter", position=position(node))
        ret, arg_types = agg_signature(kind, [a.return_type for a in args], distinct=distinct)
        args = [coerce_to(a, t) for a, t in zip(args, arg_types, strict=True)]
        filter_expr = None
        if filt is not None:
            f = inner.bind(filt)
            if f.return_type.kind is not TypeKind.BOOLEAN:
                raise GroupingError(
                    "argument of FILTER must be type boolean", sqlstate="42804", position=position(filt)
                )
            filter_expr = InputRef(self._add_pre(f), f.return_type)
        constant_delimiter = None
        if kind == "string_agg":
            d = fold_constants(args[1])
            if isinstance(d, Literal) and isinstance(d.value, str):  # kept in the call, not a column
                constant_delimiter = d.value
                args = args[:1]
        orders = []
        for o in order_by:
            from piestream.frontend.binder.query import nulls_first_of

            oe = inner.bind(o.this)
            if distinct and isinstance(oe, UnknownLiteral):  # 'a' takes its argument twin's type
                oe = next((a for a in args if coerce_to(oe, a.return_type) == a), oe)
            if distinct and oe not in args:
                raise PiestreamError(
                    "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list",
                    sqlstate="42P10",
                    position=position(o),
                )
            orders.append((self._add_pre(oe), OrderType.of(bool(o.args.get("desc")), nulls_first_of(o))))
        if kind not in ORDERED_INPUT:
            # count(v ORDER BY v), sum(v ORDER BY v): the input's order cannot change the result
            # (PostgreSQL sorts, then computes the same value), so the ordering is not planned
            orders = []
        idx = tuple(self._add_pre(a) for a in args)
        call = AggCall(kind, idx, ret, distinct, filter_expr, tuple(orders), constant_delimiter)
        if call in self.calls:  # e.g. count(*) in both SELECT and HAVING: computed once
            return AggRef(self.calls.index(call), ret)
        self.calls.append(call)
        return AggRef(len(self.calls) - 1, ret)

    def _defer_subquery(self, kind: str, sub: exp.Expression, lhs: Expr | None, eb: ExprBinder) -> Expr:
        if kind != "scalar":
            raise FeatureNotSupported(
                f"{kind.upper()} subqueries are not supported here", position=position(sub)
            )
        # its type now, so the expression around it binds (operators resolve by argument types);
        # the subquery itself is bound again over the Agg's output once that exists
        typed = self.qb.correlated_child().bind_query(sub)
        if len(typed.names) != 1:
            raise PiestreamError(
                "subquery must return only one column", sqlstate="42601", position=position(sub)
            )
        self.deferred.append(sub)
        return DeferredSubquery(len(self.deferred) - 1, typed.plan.types[0])

    # -- main -----------------------------------------------------------------------------------
    def bind(
        self,
        items: list[tuple[exp.Expression | int, str]],
        subq: SubqueryRewriter,
        group_exprs: list[Expr] | None = None,
    ) -> tuple[list[Expr], list[str], list[tuple[Expr | int, OrderType]]]:
        """Bind the select items (and HAVING / ORDER BY of `node`) grouped by the GROUP BY clause,
        or by `group_exprs` when given (a decorrelated subquery groups by its correlated keys)."""
        from piestream.frontend.binder.query import bind_item, nulls_first_of

        qb = self.qb
        scope = qb.scope
        names = [n for _, n in items]
        # GROUP BY (ordinals and select aliases allowed, as in PostgreSQL)
        explicit = group_exprs is not None
        group_exprs = list(group_exprs or [])
        gb = ExprBinder(scope, params=qb.params, context="GROUP BY")
        group = self.node.args.get("group")

        def bind_group_item(g: exp.Expression) -> Expr:
            if isinstance(g, exp.Literal) and not g.is_string:
                k = int(str(g.this))
                if not 1 <= k <= len(items):
                    raise GroupingError(
                        f"GROUP BY position {k} is not in select list", sqlstate="42P10", position=position(g)
                    )
                return bind_item(gb, items[k - 1][0])
            if (
                isinstance(g, exp.Column)
                and not g.table
                and scope.find(None, g.name) is None
                and g.name in names
            ):
                return bind_item(gb, items[names.index(g.name)][0])
            return gb.bind(g)

        group_items = list(group.expressions) if group is not None and not explicit else []
        if has_grouping_sets(group_items):
            group_exprs, sets = expand_group_by(group_items, bind_group_item)
            self.sets = order_sets(sets)
        for g_node in [] if self.sets is not None else group_items:
            e = bind_group_item(g_node)
            if e not in group_exprs:
                group_exprs.append(e)
        self.group_exprs = group_exprs
        for e in group_exprs:
            self._add_pre(e)
        windows = WindowBinding(qb, self.node, on_agg=self._on_agg)
        eb = ExprBinder(
            scope,
            on_agg=self._on_agg,
            on_subquery=self._defer_subquery,
            on_window=windows.hook,
            params=qb.params,
            context="SELECT",
        )
        # set-returning functions of the select list run over the groups (the query binder
        # adds their ProjectSet above the Agg)
        select = [bind_item(replace(eb, allow_srf=True), e) for e, _ in items]
        having_node = self.node.args.get("having")
        having_eb = replace(eb, context="HAVING", on_window=None)
        having = having_eb.bind(having_node.this) if having_node is not None else None
        order_items: list[tuple[Expr | int, OrderType]] = []
        order = self.node.args.get("order")
        for o in order.expressions if order is not None else []:
            ot = OrderType.of(bool(o.args.get("desc")), nulls_first_of(o))
            e_node = o.this
            if isinstance(e_node, exp.Literal) and not e_node.is_string:
                order_items.append((int(str(e_node.this)) - 1, ot))
            elif isinstance(e_node, exp.Column) and not e_node.table and e_node.name in names:
                order_items.append((names.index(e_node.name), ot))
            else:
                order_items.append((eb.bind(e_node), ot))
        windows.bind_definitions()  # their aggregates join the Agg's calls
        # the Agg node over the pre-projection
        assert qb.plan is not None
        g = len(group_exprs)
        pre_names = [f"_g{i}" for i in range(g)] + [f"_a{i}" for i in range(len(self.pre) - g)]
        pre_plan = Project(
            Schema(tuple(Field(n, e.return_type) for n, e in zip(pre_names, self.pre, strict=True))),
            qb.plan,
            list(self.pre),
        )
        out_fields = [Field(_group_name(e, scope, i), e.return_type) for i, e in enumerate(group_exprs)]
        out_fields += [Field(f"{c.kind}", c.return_type) for c in self.calls]
        agg: PlanNode
        flag: Expr | None = None
        first_call = g
        if self.sets is not None:  # the flag column follows the group columns
            agg = plan_grouping_sets(pre_plan, g, self.sets, self.calls, out_fields)
            out_fields.insert(g, agg.schema[g])
            flag, first_call = InputRef(g, agg.schema[g].data_type), g + 1
        else:
            agg = Agg(Schema(tuple(out_fields)), pre_plan, list(range(g)), self.calls)
        mapping: dict[Any, Expr] = {e: InputRef(i, e.return_type) for i, e in enumerate(group_exprs)}

        def rewrite(e: Expr) -> Expr:
            def fn(x: Expr) -> Expr | None:
                if isinstance(x, AggRef):
                    return InputRef(first_call + x.slot, x.return_type)
                if isinstance(x, GroupingRef):
                    return grouping_value(x.args, self.sets, flag)
                if isinstance(x, DeferredSubquery):
                    return x
                try:
                    hit = mapping.get(x)
                except TypeError:
                    hit = None
                return hit

            _check_grouped(e, mapping, scope)
            return e.transform_down(fn)

        qb.plan = agg
        qb.scope = Scope.of([ScopeColumn(None, f.name, f.data_type) for f in out_fields], scope.parent)
        select = [rewrite(e) for e in select]
        order_out = [(rewrite(e) if isinstance(e, Expr) else e, o) for e, o in order_items]
        windows.rewrite(rewrite)
        if having is not None:
            having = rewrite(having)
            if self.deferred:
                subs = [
                    subq.hook("scalar", d, None, ExprBinder(qb.scope, params=qb.params))
                    for d in self.deferred
                ]
                having = having.transform_down(
                    lambda x: subs[x.slot] if isinstance(x, DeferredSubquery) else None
                )
            if having.return_type.kind is not TypeKind.BOOLEAN:
                raise GroupingError(
                    "argument of HAVING must be type boolean",
                    sqlstate="42804",
                    position=position(having_node),
                )
            qb.plan = Filter(qb.plan.schema, qb.plan, having)
        elif self.deferred:
            raise FeatureNotSupported(
                "subqueries in a grouped SELECT list are not supported", position=position(self.node)
            )
        # window functions run over the groups that HAVING kept
        n_order = [i for i, (e, _) in enumerate(order_out) if isinstance(e, Expr)]
        mapped = windows.apply(select + [cast(Expr, order_out[i][0]) for i in n_order])
        select = mapped[: len(select)]
        for i, e in zip(n_order, mapped[len(select) :], strict=True):
            order_out[i] = (e, order_out[i][1])
        return select, names, order_out


def _check_grouped(e: Expr, mapping: dict[Any, Expr], scope: Scope) -> None:
    """Raise 42803 for a column of the FROM relation used outside the group key and aggregates."""

    def visit(x: Expr) -> None:
        try:
            if x in mapping:
                return
        except TypeError:
            pass
        if isinstance(x, AggRef | DeferredSubquery | GroupingRef):
            return
        if isinstance(x, InputRef):
            c = scope.columns[x.index]
            shown = f"{c.qualifier}.{c.name}" if c.qualifier else c.name
            raise GroupingError(
                f'column "{shown}" must appear in the GROUP BY clause or be used in an aggregate function'
            )
        for ch in x.children():
            visit(ch)

    visit(e)


def _group_name(e: Expr, scope: Scope, i: int) -> str:
    if isinstance(e, InputRef):
        return scope.columns[e.index].name
    return f"_group{i}"


def coalesce_zero(e: Expr) -> Expr:
    """count over no rows is 0, not NULL (the "count bug" of decorrelated subqueries)."""
    return bind_call("coalesce", [e, Literal(0, e.return_type)])


def is_literal_null(e: Expr) -> bool:
    return isinstance(e, Literal) and e.value is None
