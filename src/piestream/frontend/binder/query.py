"""Binding queries: SELECT (with WHERE, GROUP BY, HAVING, windows, DISTINCT, ORDER BY, LIMIT),
set operations, VALUES and CTEs, into a logical plan (seed 003: SQL as relational algebra).
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from piestream.common.errors import (
    DatatypeMismatch,
    FeatureNotSupported,
    InvalidInput,
    NumericOutOfRange,
    PiestreamError,
    SyntaxError_,
    UndefinedColumn,
)
from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, INT, DataType, Field, TypeKind
from piestream.expr.bind import bind_call, cast, coerce_to, common_type, fold_constants
from piestream.expr.expr import Expr, InputRef, Literal, UnknownLiteral
from piestream.expr.table_function import bind_table_function, contains_table_function
from piestream.frontend.binder.aggregation import AggBinding
from piestream.frontend.binder.clauses import check_supported
from piestream.frontend.binder.column_names import output_name
from piestream.frontend.binder.expr_binder import ExprBinder, position
from piestream.frontend.binder.from_clause import bind_from
from piestream.frontend.binder.jsonb_aggs import jsonb_aggs_as_array_aggs
from piestream.frontend.binder.ordered_set_aggs import ordered_set_aggs_as_array_aggs
from piestream.frontend.binder.scope import Scope, ScopeColumn
from piestream.frontend.binder.subquery import SubqueryRewriter, quantified_as_in
from piestream.frontend.binder.table_functions import apply_select_srfs
from piestream.frontend.binder.user_functions import functions_of
from piestream.frontend.binder.windows import WindowBinding
from piestream.frontend.catalog import CatalogReader
from piestream.frontend.logical import (
    Agg,
    AggCall,
    Filter,
    PlanNode,
    Project,
    ProjectSet,
    Sort,
    TopN,
    Union,
    Values,
)


@dataclass
class BoundQuery:
    plan: PlanNode
    names: list[str]
    order: list[tuple[int, OrderType]] = field(default_factory=list)  # ORDER BY without LIMIT

    @property
    def types(self) -> list:
        return self.plan.types


def project_schema(names: Sequence[str], exprs: Sequence[Expr]) -> Schema:
    return Schema(tuple(Field(n, e.return_type) for n, e in zip(names, exprs, strict=True)))


class QueryBinder:
    """Binds one query level; subqueries get a child binder whose scope sees this one's."""

    def __init__(
        self,
        catalog: CatalogReader,
        params: Sequence[Any] = (),
        parent_scope: Scope | None = None,
        ctes: dict[str, tuple[exp.Expression, list[str] | None]] | None = None,
        dependencies: set[int] | None = None,
        checked: bool = False,
    ) -> None:
        self.catalog = catalog
        self.params = params
        self.parent_scope = parent_scope
        self.ctes: dict[str, tuple[exp.Expression, list[str] | None]] = dict(ctes or {})
        self.dependencies: set[int] = dependencies if dependencies is not None else set()
        # the tree being bound was checked for clauses the binder does not honour (a subquery's
        # binder is handed a part of its parent's tree; a view's definition is checked anew)
        self.checked = checked
        # INSERT ... SELECT: the target column types, which the select list's untyped literals
        # take (PostgreSQL assigns them, so '{}' goes into an int[] column)
        self.assign_types: Sequence[DataType] | None = None
        # the relation being built at this level (subquery rewrites extend it)
        self.plan: PlanNode | None = None
        self.scope: Scope = Scope(parent=parent_scope)

    # -- children -------------------------------------------------------------------------------
    def child(self, include_ctes_after: str | None = None) -> QueryBinder:
        """A binder for a subquery in FROM (not correlated)."""
        ctes = self.ctes
        if include_ctes_after is not None:  # a CTE sees only the CTEs defined before it
            names = list(ctes)
            ctes = {k: ctes[k] for k in names[: names.index(include_ctes_after)]}
        return QueryBinder(self.catalog, self.params, self.parent_scope, ctes, self.dependencies, True)

    def root_child(self) -> QueryBinder:
        """A binder for a view's definition: no CTEs, no outer scope."""
        return QueryBinder(self.catalog, self.params, None, None, self.dependencies)

    def correlated_child(self) -> QueryBinder:
        """A binder for a subquery in an expression: it may reference this level's columns."""
        return QueryBinder(self.catalog, self.params, self.scope, self.ctes, self.dependencies, True)

    def lookup_cte(self, name: str) -> tuple[exp.Expression, list[str] | None] | None:
        return self.ctes.get(name)

    # -- entry ----------------------------------------------------------------------------------
    def bind_query(self, node: exp.Expression) -> BoundQuery:
        with functions_of(self.catalog, self.dependencies):
            return self._bind_query(node)

    def _bind_query(self, node: exp.Expression) -> BoundQuery:
        if not self.checked:
            node = ordered_set_aggs_as_array_aggs(jsonb_aggs_as_array_aggs(quantified_as_in(node)))
            check_supported(node)
            self.checked = True
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is not None:
            if with_.args.get("recursive"):
                raise FeatureNotSupported("WITH RECURSIVE is not supported", position=position(node))
            for cte in with_.expressions:
                cols = [c.name for c in cte.args["alias"].args.get("columns") or []] or None
                self.ctes[cte.alias] = (cte.this, cols)
        if isinstance(node, exp.Select):
            return self._bind_select(node)
        if isinstance(node, exp.Union | exp.Except | exp.Intersect):
            return self._bind_set_op(node)
        if isinstance(node, exp.Values):
            return self._with_order_limit(node, self._bind_values(node))
        if isinstance(node, exp.Subquery):
            return self._with_order_limit(node, self.child().bind_query(node.this))
        raise FeatureNotSupported(
            f"query {node.sql('postgres')[:60]!r} is not supported", position=position(node)
        )

    def bind_insert_source(self, node: exp.Expression, target_types: Sequence[DataType]) -> BoundQuery:
        """The rows of an INSERT: a plain VALUES list binds against the target column types."""
        if isinstance(node, exp.Values) and not any(
            node.args.get(k) for k in ("with_", "order", "limit", "offset")
        ):
            if not self.checked:
                check_supported(node)
                self.checked = True
            with functions_of(self.catalog, self.dependencies):
                return self._bind_values(node, target_types)
        if isinstance(node, exp.Select):
            self.assign_types = target_types
        return self.bind_query(node)

    # -- VALUES ---------------------------------------------------------------------------------
    def _bind_values(self, node: exp.Values, target_types: Sequence[DataType] | None = None) -> BoundQuery:
        eb = ExprBinder(Scope(parent=self.parent_scope), params=self.params, context="VALUES")
        rows = [[eb.bind(e) for e in t.expressions] for t in node.expressions]
        width = len(rows[0]) if rows else 0
        if any(len(r) != width for r in rows):
            raise SyntaxError_("VALUES lists must all be the same length", position=position(node))
        if target_types is not None and len(target_types) == width:
            # INSERT ... VALUES: every entry is assigned to its column's type (PostgreSQL resolves
            # untyped literals against the target columns, not against each other)
            types = list(target_types)
            rows = [
                [fold_constants(cast(r[i], types[i], explicit=False)) for i in range(width)] for r in rows
            ]
        else:
            types = [common_type([r[i] for r in rows], "VALUES") for i in range(width)]
            rows = [[fold_constants(coerce_to(r[i], types[i])) for i in range(width)] for r in rows]
        names = [f"column{i + 1}" for i in range(width)]
        alias = node.args.get("alias")
        if alias is not None and alias.args.get("columns"):
            names = [c.name for c in alias.args["columns"]] + names[len(alias.args["columns"]) :]
        schema = Schema(tuple(Field(n, t) for n, t in zip(names, types, strict=True)))
        return BoundQuery(Values(schema, rows), names)

    # -- set operations -------------------------------------------------------------------------
    def _bind_set_op(self, node: exp.Expression) -> BoundQuery:
        op = type(node).__name__.upper()
        left = self.child().bind_query(node.this)
        right = self.child().bind_query(node.expression)
        if any(node.args.get(k) for k in ("by_name", "side", "kind", "on")):
            left, right = corresponding(node, left, right)
        if len(left.names) != len(right.names):
            raise SyntaxError_(
                f"each {op} query must have the same number of columns", position=position(node)
            )
        types = [
            common_type([a, b], op, position=position(node))
            for a, b in zip(left.plan.types, right.plan.types, strict=True)
        ]
        distinct = bool(node.args.get("distinct", True))
        inputs: list[PlanNode] = []
        for side, q in enumerate((left, right)):
            refs: list[Expr] = [coerce_to(InputRef(i, t), types[i]) for i, t in enumerate(q.plan.types)]
            names = list(left.names)
            if op != "UNION":  # a count column per side: 1 in its own rows, 0 in the other's
                refs += [Literal(int(side == 0), INT), Literal(int(side == 1), INT)]
                names += ["_left", "_right"]
            inputs.append(Project(project_schema(names, refs), q.plan, refs))
        # The common types, not the left input's: PostgreSQL's select_common_typmod gives -1 when
        # the inputs' typmods differ (numeric(6,2) UNION ALL numeric is plain numeric).
        union_refs = [InputRef(i, types[i] if i < len(types) else t) for i, t in enumerate(inputs[0].types)]
        plan: PlanNode = Union(project_schema(inputs[0].schema.names, union_refs), inputs)
        if op == "UNION":
            if distinct:
                plan = Agg(plan.schema, plan, list(range(len(types))), [])
        else:
            plan = set_op_counts(plan, op, distinct, left.names, types)
        return self._order_limit(
            node,
            BoundQuery(plan, left.names),
            Scope.of([ScopeColumn(None, n, t) for n, t in zip(left.names, types, strict=True)]),
        )

    # -- SELECT ---------------------------------------------------------------------------------
    def _bind_select(self, node: exp.Select) -> BoundQuery:
        plan, scope = bind_from(self, node)
        scope.parent = self.parent_scope
        self.plan, self.scope = plan, scope
        subq = SubqueryRewriter(self)
        where = node.args.get("where")
        if where is not None:
            subq.bind_where(where.this)
        items = self._expand_stars(node)
        agg = AggBinding.detect(self, node, items)
        order_items: list[tuple[Expr | int, OrderType]]
        if agg is not None:
            exprs, names, order_items = agg.bind(items, subq)
            if any(contains_table_function(e) for e, _ in order_items if isinstance(e, Expr)):
                raise FeatureNotSupported(
                    "set-returning functions are not allowed in ORDER BY", position=position(node)
                )
            exprs = apply_select_srfs(self, exprs, node)
        else:
            windows = WindowBinding(self, node)
            eb = ExprBinder(
                self.scope,
                on_subquery=subq.hook,
                on_window=windows.hook,
                params=self.params,
                context="SELECT",
                allow_srf=True,
            )
            exprs = [bind_item(eb, e) for e, _ in items]
            names = [n for _, n in items]
            exprs = windows.apply(exprs)
            # set-returning functions run after window functions, as in PostgreSQL
            exprs = apply_select_srfs(self, exprs, node)
            # ORDER BY may use select aliases, ordinals or input expressions not selected (hidden)
            order_items = self._order_items(node, exprs, names, self.scope)
        assert self.plan is not None
        if self.assign_types is not None and len(self.assign_types) == len(exprs):
            exprs = [
                cast(e, t, explicit=False) if isinstance(e, UnknownLiteral) else e
                for e, t in zip(exprs, self.assign_types, strict=True)
            ]
        distinct = node.args.get("distinct")
        on_nodes = distinct.args.get("on") if distinct is not None else None
        on_items: list[Expr | int] = []
        if on_nodes is not None:
            nodes = on_nodes.expressions if isinstance(on_nodes, exp.Tuple) else [on_nodes]
            on_items = self._output_items(nodes, exprs, names, self.scope, "DISTINCT ON")
        hidden: list[Expr] = []
        for e in [e for e, _ in order_items] + on_items:
            if isinstance(e, Expr) and e not in exprs and e not in hidden:
                hidden.append(e)
        all_exprs = exprs + hidden
        proj = Project(
            project_schema(names + [f"_order{i}" for i in range(len(hidden))], all_exprs),
            self.plan,
            all_exprs,
        )
        plan = proj
        order = [(all_exprs.index(e) if isinstance(e, Expr) else e, o) for e, o in order_items]
        if on_nodes is not None:
            on = [all_exprs.index(e) if isinstance(e, Expr) else e for e in on_items]
            plan = distinct_on(plan, on, order, node)
        elif distinct is not None:
            if hidden:
                raise PiestreamError(
                    "for SELECT DISTINCT, ORDER BY expressions must appear in select list",
                    sqlstate="42P10",
                    position=position(node),
                )
            plan = Agg(plan.schema, plan, list(range(len(exprs))), [])
        bq = BoundQuery(plan, names)
        return self._finish_order(node, bq, order, len(exprs))

    def _expand_stars(self, node: exp.Select) -> list[tuple[exp.Expression | int, str]]:
        """Select items; a `*` becomes the scope indices of the visible columns it stands for."""
        out: list[tuple[exp.Expression | int, str]] = []
        for e in node.expressions:
            if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
                qual = e.table if isinstance(e, exp.Column) else None
                if qual and not self.scope.has_qualifier(qual):
                    raise PiestreamError(
                        f'missing FROM-clause entry for table "{qual}"',
                        sqlstate="42P01",
                        position=position(e),
                    )
                cols = [(idx, self.scope.columns[idx].name) for idx in self.scope.visible(qual or None)]
                star = e if isinstance(e, exp.Star) else e.this
                out += _star_except(cols, star)
                continue
            out.append((e, output_name(e)))
        return out

    # -- ORDER BY / LIMIT -----------------------------------------------------------------------
    def _order_items(
        self, node: exp.Expression, exprs: list[Expr], names: list[str], scope: Scope
    ) -> list[tuple[Expr | int, OrderType]]:
        order = node.args.get("order")
        if order is None:
            return []
        targets = self._output_items([o.this for o in order.expressions], exprs, names, scope, "ORDER BY")
        return [
            (t, OrderType.of(bool(o.args.get("desc")), nulls_first_of(o)))
            for t, o in zip(targets, order.expressions, strict=True)
        ]

    def _output_items(
        self, nodes: list[exp.Expression], exprs: list[Expr], names: list[str], scope: Scope, what: str
    ) -> list[Expr | int]:
        """ORDER BY / DISTINCT ON items: a select-list ordinal or output name (an int), or an
        expression over the input (PostgreSQL's rules for both clauses)."""
        out: list[Expr | int] = []
        eb = ExprBinder(scope, params=self.params, context=what)
        for e in nodes:
            if isinstance(e, exp.Literal) and not e.is_string:
                k = int(str(e.this))
                if not 1 <= k <= len(exprs):
                    raise PiestreamError(
                        f"{what} position {k} is not in select list", sqlstate="42P10", position=position(e)
                    )
                out.append(k - 1)
                continue
            if isinstance(e, exp.Column) and not e.table and e.name in names:
                out.append(names.index(e.name))
                continue
            out.append(eb.bind(e))
        return out

    def _with_order_limit(self, node: exp.Expression, bq: BoundQuery) -> BoundQuery:
        """ORDER BY / LIMIT / OFFSET after VALUES or a parenthesized query, over its output columns;
        a LIMIT without ORDER BY keeps the inner query's order: `(... ORDER BY a) LIMIT 1`."""
        if not any(node.args.get(k) for k in ("order", "limit", "offset")):
            return bq
        scope = Scope.of([ScopeColumn(None, n, t) for n, t in zip(bq.names, bq.plan.types, strict=True)])
        if node.args.get("order") is None and bq.order:
            return self._finish_order(node, BoundQuery(bq.plan, bq.names), bq.order, len(bq.names))
        return self._order_limit(node, BoundQuery(bq.plan, bq.names), scope)

    def _order_limit(self, node: exp.Expression, bq: BoundQuery, scope: Scope) -> BoundQuery:
        exprs = [InputRef(i, t) for i, t in enumerate(bq.plan.types)]
        items = self._order_items(node, list(exprs), bq.names, scope)
        order = [(exprs.index(e) if isinstance(e, Expr) else e, o) for e, o in items]  # type: ignore[arg-type]
        return self._finish_order(node, bq, order, len(bq.names))

    def _finish_order(
        self, node: exp.Expression, bq: BoundQuery, order: list[tuple[int, OrderType]], visible: int
    ) -> BoundQuery:
        limit = _const_int(node.args.get("limit"), "LIMIT")
        offset = _const_int(node.args.get("offset"), "OFFSET") or 0
        with_ties = _with_ties(node.args.get("limit"))
        if with_ties and not order:  # PostgreSQL's rule and text
            raise PiestreamError(
                "WITH TIES cannot be specified without ORDER BY clause",
                sqlstate="42601",
                position=position(node.args["limit"]),
            )
        plan = bq.plan
        if limit is not None or offset:
            plan = TopN(plan.schema, plan, order, limit, offset, with_ties=with_ties and limit is not None)
            order_out: list[tuple[int, OrderType]] = list(order)
        else:
            order_out = list(order)
            if order:
                plan = Sort(plan.schema, plan, order)
        if len(plan.types) > visible:
            refs: list[Expr] = [InputRef(i, t) for i, t in enumerate(plan.types[:visible])]
            plan = Project(project_schema(bq.names, refs), plan, refs)
            order_out = [(c, o) for c, o in order_out if c < visible]
        return BoundQuery(plan, bq.names, order_out)


# ---------------------------------------------------------------------------------------------


def _star_except(cols: list[tuple[int, str]], star: exp.Expression) -> list[tuple[int, str]]:
    """RisingWave's `SELECT * EXCEPT (a, b)`: the star's columns without the named ones."""
    excluded = star.args.get("except_") or []
    names = [name for _, name in cols]
    for c in excluded:
        if not isinstance(c, exp.Column) or c.table or c.name not in names:
            raise UndefinedColumn(f'column "{c.sql("postgres")}" does not exist', position=position(c))
    drop = {c.name for c in excluded}
    return [(i, name) for i, name in cols if name not in drop]


def distinct_on(
    plan: PlanNode, on: list[int], order: list[tuple[int, OrderType]], node: exp.Expression
) -> PlanNode:
    """SELECT DISTINCT ON (on) ... ORDER BY order: the first row of each group of `on` in the
    ORDER BY order, a group top-1 (RisingWave plans it the same way). ORDER BY must start with
    the DISTINCT ON expressions (42P10); rows tied in the rest of ORDER BY are PostgreSQL's "first
    row" in scan order, here the one with the smallest stream key."""
    on = list(dict.fromkeys(on))
    k = min(len(order), len(on))
    if any(c not in on for c, _ in order[:k]):
        raise PiestreamError(
            "SELECT DISTINCT ON expressions must match initial ORDER BY expressions",
            sqlstate="42P10",
            position=position(node),
        )
    rest = [(c, o) for c, o in order if c not in on]
    return TopN(plan.schema, plan, rest, 1, 0, on)


def set_op_counts(
    union: PlanNode, op: str, distinct: bool, names: list[str], types: list[DataType]
) -> PlanNode:
    """INTERSECT / EXCEPT [ALL] over the union of both sides tagged with count columns: per
    distinct row (NULLs equal, as in a GROUP BY) the number of copies on each side, then the rows
    that survive (DISTINCT), or as many copies as survive (ALL: min(l, r) for INTERSECT,
    l - r for EXCEPT, expanded by generate_series). Incremental as an aggregation (per-row counts
    in its state) and a ProjectSet, so an MV keeps it up to date."""
    width = len(types)
    calls = [AggCall("sum", (width,), BIGINT), AggCall("sum", (width + 1,), BIGINT)]
    fields = [*union.schema.fields[:width], Field("_left", BIGINT), Field("_right", BIGINT)]
    plan: PlanNode = Agg(Schema(tuple(fields)), union, list(range(width)), calls)
    lc, rc = InputRef(width, BIGINT), InputRef(width + 1, BIGINT)
    zero = Literal(0, BIGINT)
    if op == "INTERSECT":
        copies = bind_call("least", [lc, rc])
        keep = bind_call(">", [copies, zero])
    elif distinct:  # a row of the left side that the right side does not have at all
        copies = lc
        keep = bind_call("and", [bind_call(">", [lc, zero]), bind_call("=", [rc, zero])])
    else:
        copies = bind_call("-", [lc, rc])
        keep = bind_call(">", [copies, zero])
    plan = Filter(plan.schema, plan, keep)
    cols: list[Expr] = [InputRef(i, t) for i, t in enumerate(types)]
    if not distinct:
        series = bind_table_function("generate_series", [Literal(1, BIGINT), copies])
        items = [*cols, series]
        schema = Schema(
            (*plan.schema.fields[:width], Field("_copy", BIGINT), Field("projected_row_id", BIGINT))
        )
        plan = ProjectSet(schema, plan, items)
    return Project(project_schema(names, cols), plan, cols)


def corresponding(node: exp.Expression, left: BoundQuery, right: BoundQuery) -> tuple[BoundQuery, BoundQuery]:
    """`a UNION CORRESPONDING [BY (cols)] b` (SQL standard, RisingWave): both sides narrowed to the
    columns they share by name, in the left side's order, or to the BY list in its order; the set
    operation then matches them by position."""
    op = type(node).__name__.upper()
    words = [str(node.args.get(k) or "").upper() for k in ("side", "kind")]
    if not node.args.get("by_name") or words != ["", "INNER"]:
        shown = " ".join(w for w in words if w)
        raise FeatureNotSupported(
            f"{shown + ' ' if shown else ''}{op} BY NAME / STRICT CORRESPONDING is not supported"
            if node.args.get("by_name")
            else f"{shown} {op} is not supported",
            position=position(node),
        )
    by = node.args.get("on")
    if by:
        names = []
        for c in by:
            if not isinstance(c, exp.Column) or c.table:
                raise SyntaxError_("CORRESPONDING BY takes column names", position=position(c))
            if c.name in names:
                raise PiestreamError(
                    f'column name "{c.name}" appears more than once in CORRESPONDING BY list',
                    sqlstate="42701",
                    position=position(c),
                )
            names.append(c.name)
    else:
        names = [n for n in left.names if n in right.names]
        if not names:
            raise PiestreamError(
                f"{op} CORRESPONDING: the two queries have no column name in common "
                f"(left: {', '.join(left.names)}; right: {', '.join(right.names)})",
                sqlstate="42601",
                position=position(node),
            )
    return _narrow(left, names, "left", node), _narrow(right, names, "right", node)


def _narrow(q: BoundQuery, names: list[str], side: str, node: exp.Expression) -> BoundQuery:
    idx = []
    for n in names:
        hits = [i for i, m in enumerate(q.names) if m == n]
        if not hits:
            raise PiestreamError(
                f'column "{n}" of CORRESPONDING BY does not exist in the {side} query',
                sqlstate="42703",
                position=position(node),
            )
        if len(hits) > 1:
            raise PiestreamError(
                f'column name "{n}" appears more than once in the {side} query of CORRESPONDING',
                sqlstate="42702",
                position=position(node),
            )
        idx.append(hits[0])
    refs: list[Expr] = [InputRef(i, q.plan.types[i]) for i in idx]
    return BoundQuery(Project(project_schema(names, refs), q.plan, refs), list(names))


def bind_item(eb: ExprBinder, item: exp.Expression | int) -> Expr:
    """Bind a select item (an int is a `*`-expanded scope column)."""
    if isinstance(item, int):
        return InputRef(item, eb.scope.columns[item].data_type)
    return eb.bind(item)


def nulls_first_of(o: exp.Ordered) -> bool | None:
    nf = o.args.get("nulls_first")
    desc = bool(o.args.get("desc"))
    if nf is None:
        return None
    # sqlglot fills nulls_first with the dialect default; keep it only when it differs
    return bool(nf) if bool(nf) != desc else None


def _with_ties(node: exp.Expression | None) -> bool:
    """``FETCH FIRST n ROWS WITH TIES``: also every row tied with the last one by ORDER BY."""
    opts = node.args.get("limit_options") if isinstance(node, exp.Fetch) else None
    return bool(opts is not None and opts.args.get("with_ties"))


def _const_int(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    if isinstance(node, exp.Fetch):  # FETCH { FIRST | NEXT } [n] { ROW | ROWS } ONLY
        e = node.args.get("count") or exp.Literal.number(1)
    else:
        e = node.args.get("expression") or node.this
    if isinstance(e, exp.Literal) and not e.is_string:
        try:  # a numeric literal rounds to the nearest bigint, as PostgreSQL casts it
            v = int(decimal.Decimal(str(e.this)).to_integral_value(decimal.ROUND_HALF_UP))
        except (decimal.InvalidOperation, ValueError, OverflowError):
            raise InvalidInput(f"invalid {what}: {e.this}", position=position(node)) from None
        if v > 2**63 - 1:
            raise NumericOutOfRange("bigint out of range", position=position(node))
        if v < 0:
            raise PiestreamError(f"{what} must not be negative", sqlstate="2201W", position=position(node))
        return v
    if isinstance(e, exp.Null) or (what == "LIMIT" and isinstance(e, exp.Var) and e.name.upper() == "ALL"):
        return None
    raise FeatureNotSupported(f"{what} must be a constant integer", position=position(node))


def literal_true(e: Expr) -> bool:
    return isinstance(e, Literal) and e.value is True and e.return_type.kind is TypeKind.BOOLEAN


def check_boolean(e: Expr, what: str, node: exp.Expression) -> None:
    if e.return_type.kind is not TypeKind.BOOLEAN:
        raise DatatypeMismatch(
            f"argument of {what} must be type boolean, not type {e.return_type}", position=position(node)
        )
