"""Subqueries rewritten into joins while binding (so the planner never sees a correlated plan).

- ``EXISTS (...)`` / ``NOT EXISTS`` as a WHERE conjunct: a left semi / anti join whose condition
  is the subquery's correlated predicates (outer columns on the left, inner on the right).
- ``x IN (subquery)`` / ``NOT IN``: a semi / anti join on ``x = column``; NOT IN adds
  PostgreSQL's NULL semantics with a one-row count of the inner side (a null-aware anti join,
  see `_not_in_nulls`), so the join stays a hash join on x.
- A scalar subquery: uncorrelated -> a left join against its (single-row) result; correlated by
  equalities with an aggregate in the select list -> grouped by the inner correlated columns and
  left-joined on them (count is coalesced to 0: the "count bug").
Other shapes fail at CREATE time with 0A000.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, INT, TypeKind
from piestream.expr.bind import bind_call, coerce_to, common_type
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.frontend.binder.expr_binder import ExprBinder, position
from piestream.frontend.binder.rewrite import shift_refs
from piestream.frontend.binder.scope import OuterRef, Scope, ScopeColumn
from piestream.frontend.logical import Agg, AggCall, Filter, Join, JoinKind, PlanNode, Project, schema_of

if TYPE_CHECKING:
    from piestream.frontend.binder.query import QueryBinder


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    return [node]


def and_all(exprs: list[Expr]) -> Expr | None:
    if not exprs:
        return None
    return exprs[0] if len(exprs) == 1 else bind_call("and", exprs)


def _join_schema(left: PlanNode, right: PlanNode, kind: JoinKind) -> Schema:
    if kind.keeps_left_only:
        return left.schema
    return Schema(left.schema.fields + right.schema.fields)


def quantified_as_in(tree: exp.Expression) -> exp.Expression:
    """``x = ANY (subquery)`` -> ``x IN (subquery)`` and ``x <> ALL (subquery)`` -> ``x NOT IN
    (subquery)``, in place: the SQL standard defines them as the same predicates, NULLs
    included, so they plan as the same (null-aware) semi / anti joins. Other quantified
    comparisons stay as they are (and are rejected with 0A000)."""

    def fn(node: exp.Expression) -> exp.Expression:
        pairs = ((exp.EQ, exp.Any, False), (exp.NEQ, exp.All, True))
        for cmp, quant, negate in pairs:
            q = node.args.get("expression") if isinstance(node, cmp) else None
            if isinstance(q, quant) and isinstance(q.this, (exp.Subquery, exp.Select, exp.Union)):
                sub = q.this if isinstance(q.this, exp.Subquery) else exp.Subquery(this=q.this)
                out: exp.Expression = exp.In(this=node.this, query=sub)
                if negate:
                    out = exp.Not(this=out)
                out.meta.update(node.meta)
                return out
        return node

    return tree.transform(fn, copy=False)


class SubqueryRewriter:
    """Rewrites subqueries of one query level into joins on `qb.plan`."""

    def __init__(self, qb: QueryBinder) -> None:
        self.qb = qb

    # -- WHERE ----------------------------------------------------------------------------------
    def bind_where(self, node: exp.Expression) -> None:
        for c in conjuncts(node):
            if self._semi_anti(c):
                continue
            eb = ExprBinder(self.qb.scope, on_subquery=self.hook, params=self.qb.params, context="WHERE")
            e = eb.bind(c)
            if e.return_type.kind is not TypeKind.BOOLEAN:
                from piestream.common.errors import DatatypeMismatch

                raise DatatypeMismatch(
                    f"argument of WHERE must be type boolean, not type {e.return_type}", position=position(c)
                )
            assert self.qb.plan is not None
            self.qb.plan = Filter(self.qb.plan.schema, self.qb.plan, e)

    def _semi_anti(self, c: exp.Expression) -> bool:
        negate = False
        node = c
        if isinstance(node, exp.Not):
            negate, node = True, node.this
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Exists):
            self._exists(node.this, anti=negate, where=c)
            return True
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            q = node.args["query"]
            self._in(node.this, q.this if isinstance(q, exp.Subquery) else q, anti=negate, where=c)
            return True
        return False

    def _exists(self, sub: exp.Expression, anti: bool, where: exp.Expression) -> None:
        # rewritten from its FROM and WHERE alone: anything else that can change which rows
        # exist goes the general way (select list, DISTINCT and ORDER BY cannot)
        if not isinstance(sub, exp.Select) or _has_any(sub, "group", "having", "limit", "offset", "with_"):
            bq = self.qb.correlated_child().bind_query(sub)
            if has_outer(bq.plan):
                raise FeatureNotSupported(
                    "this correlated EXISTS subquery is not supported", position=position(where)
                )
            self._add_join(bq.plan, JoinKind.LEFT_ANTI if anti else JoinKind.LEFT_SEMI, None)
            return
        inner, cond = self._split_correlated(sub)
        self._add_join(inner, JoinKind.LEFT_ANTI if anti else JoinKind.LEFT_SEMI, cond)

    def _in(self, lhs_node: exp.Expression, sub: exp.Expression, anti: bool, where: exp.Expression) -> None:
        qb = self.qb
        row = lhs_node.expressions if isinstance(lhs_node, exp.Tuple) else [lhs_node]
        if anti and len(row) > 1:
            # a row comparison is unknown when a NULL meets a column the other columns do not
            # already tell apart: that needs one match per pattern of NULLs, not one count
            raise FeatureNotSupported(
                "NOT IN with a row of several columns is not supported", position=position(where)
            )
        eb = ExprBinder(qb.scope, params=qb.params, context="WHERE")
        lhs_items = [eb.bind(x) for x in row]
        bq = qb.correlated_child().bind_query(sub)
        if has_outer(bq.plan):
            raise FeatureNotSupported("correlated IN subqueries are not supported", position=position(where))
        if len(bq.names) != len(row):
            few = len(bq.names) < len(row)
            raise PiestreamError(
                f"subquery has too {'few' if few else 'many'} columns",
                sqlstate="42601",
                position=position(where),
            )
        n_left = len(qb.scope.columns)
        eqs = []
        for i, lhs in enumerate(lhs_items):  # IN over a row: every column equal (a NULL never is)
            t = common_type([lhs, bq.plan.types[i]], "IN", position=position(where))
            r = InputRef(n_left + i, bq.plan.types[i])
            eqs.append(bind_call("=", [coerce_to(lhs, t), coerce_to(r, t)]))
        eq = and_all(eqs)
        assert eq is not None
        lhs = lhs_items[0]
        self._add_join(bq.plan, JoinKind.LEFT_ANTI if anti else JoinKind.LEFT_SEMI, eq)
        if anti:
            self._not_in_nulls(lhs, sub)

    def _not_in_nulls(self, lhs: Expr, sub: exp.Expression) -> None:
        """The NULL half of a null-aware anti join, after the anti join on ``x = column``.

        PostgreSQL's NOT IN keeps a row with x NOT NULL iff no inner row equals x and the inner
        side holds no NULL, and a row with x NULL iff the inner side is empty. The equality anti
        join (a hash join on x) does the first part; the rest depends on the inner side only
        through one value, computed by a one-row aggregate over a second copy of the subquery:
        1 when it is empty (every row passes), -1 when it holds a NULL (none passes), else 0
        (rows with x NOT NULL pass). Each left row passes iff ``(x IS NULL ? 1 : 0) <= value``,
        which the stream planner turns into a DynamicFilter: left rows stay hash-distributed,
        and only a change of the value (a NULL appearing, the side emptying) touches them.
        """
        qb = self.qb
        inner = qb.correlated_child().bind_query(sub).plan
        n, n_values = InputRef(0, BIGINT), InputRef(1, BIGINT)
        counts = Agg(
            schema_of(["_n", "_n_values"], [BIGINT, BIGINT]),
            inner,
            [],
            [AggCall("count_star", (), BIGINT), AggCall("count", (0,), BIGINT)],
        )
        value = bind_call(
            "case",
            [
                bind_call("=", [n, Literal(0, BIGINT)]),
                Literal(1, INT),
                bind_call(">", [n, n_values]),
                Literal(-1, INT),
                Literal(0, INT),
            ],
        )
        col = self._attach(Project(schema_of(["_not_in"], [INT]), counts, [value]), None, 0, scalar=True)
        flag = bind_call("case", [bind_call("is_null", [lhs]), Literal(1, INT), Literal(0, INT)])
        assert qb.plan is not None
        qb.plan = Filter(qb.plan.schema, qb.plan, bind_call("<=", [flag, col]))

    def _add_join(self, right: PlanNode, kind: JoinKind, cond: Expr | None) -> None:
        qb = self.qb
        assert qb.plan is not None
        qb.plan = Join(_join_schema(qb.plan, right, kind), qb.plan, right, kind, cond)

    def _split_correlated(self, sub: exp.Select) -> tuple[PlanNode, Expr | None]:
        """The subquery's FROM filtered by its uncorrelated conjuncts, and its correlated conjuncts
        as a join condition over (outer columns ++ inner columns)."""
        from piestream.frontend.binder.from_clause import bind_from

        child = self.qb.correlated_child()
        plan, scope = bind_from(child, sub)
        n_left = len(self.qb.scope.columns)
        used = _outer_columns(plan, position(sub))  # read by the FROM (a JOIN's ON)
        plan, moved = _lift_inner_correlation(plan)
        correlated = [_to_join_condition(e, n_left) for e in moved]
        if has_outer(plan):  # what an INNER join's ON does not say alone: the general way
            plan, scope, correlated = self._magic_from(sub, used)
        scope.parent = self.qb.scope
        filters: list[Expr] = []
        where = sub.args.get("where")
        for c in conjuncts(where.this) if where is not None else []:
            eb = ExprBinder(scope, params=self.qb.params, context="WHERE")
            e = eb.bind(c)
            if any(isinstance(x, OuterRef) for x in e.walk()):
                if any(isinstance(x, OuterRef) and x.depth != 1 for x in e.walk()):
                    raise FeatureNotSupported(
                        "subqueries correlated across two levels are not supported", position=position(c)
                    )
                correlated.append(_to_join_condition(e, n_left))
            else:
                filters.append(e)
        f = and_all(filters)
        if f is not None:
            plan = Filter(plan.schema, plan, f)
        return plan, and_all(correlated)

    def _magic_from(self, sub: exp.Select, used: list[int]) -> tuple[PlanNode, Scope, list[Expr]]:
        """The subquery's FROM when a JOIN's ON references the outer query (domain / magic-set
        decorrelation): D, the distinct values of the outer columns `used`, cross-joined in as the
        leftmost FROM item, so each ON reads them as plain columns and the FROM is evaluated once
        per outer value; returns (plan, scope, the conditions ``outer.c IS NOT DISTINCT FROM
        D.c`` matching each outer row with its own copy, over outer ++ plan columns).

        Exact for INNER / LEFT / CROSS joins of the top-level join chain (D sits on the preserved
        side of each); anything else that reads the outer query stays 0A000."""
        from piestream.frontend.binder.from_clause import bind_from_item, bind_join

        qb = self.qb
        assert qb.plan is not None
        pos = position(sub)
        outer = qb.scope.columns
        k = len(used)
        d_schema = schema_of([f"?corr{i}" for i in range(k)], [outer[c].data_type for c in used])
        picked = Project(d_schema, qb.plan, [InputRef(c, outer[c].data_type) for c in used])
        domain: PlanNode = Agg(d_schema, picked, list(range(k)), [])
        d_cols = [ScopeColumn(None, f"?corr{i}", outer[c].data_type, True) for i, c in enumerate(used)]
        to_d = {c: i for i, c in enumerate(used)}

        def d_at(scope: Scope) -> list[int]:
            """Where D's columns are in `scope` (a USING join puts its merged columns first)."""
            names = [c.name if c.hidden and c.qualifier is None else None for c in scope.columns]
            return [names.index(f"?corr{i}") for i in range(k)]

        def resolver(at: list[int]) -> Callable[[Expr], Expr | None]:
            def resolve(x: Expr) -> Expr | None:
                if isinstance(x, OuterRef) and x.depth == 1 and x.index in to_d:
                    return InputRef(at[to_d[x.index]], x.return_type)
                return None

            return resolve

        child = qb.correlated_child()
        from_ = sub.args.get("from_") or sub.args.get("from")
        assert from_ is not None
        first, fscope = bind_from_item(child, from_.this)
        plan: PlanNode = Join(
            _join_schema(domain, first, JoinKind.INNER), domain, first, JoinKind.INNER, None
        )
        scope = Scope(d_cols + fscope.columns)
        for j in sub.args.get("joins") or []:
            if str(j.args.get("side") or "").upper() in ("RIGHT", "FULL"):
                # its padded rows would carry no outer value: D would be needed on both sides
                raise FeatureNotSupported(
                    "a RIGHT or FULL join in a subquery whose JOIN ... ON references the outer "
                    "query is not supported",
                    position=position(j),
                )
            at = d_at(scope)  # the ON's columns are the left side's, then the right side's
            plan, scope = bind_join(child, plan, scope, j)
            cond = plan.condition if isinstance(plan, Join) else None
            if (
                isinstance(plan, Join)
                and cond is not None
                and any(isinstance(x, OuterRef) for x in cond.walk())
            ):
                plan = replace(plan, condition=cond.transform_down(resolver(at)))
        if has_outer(plan, skip=domain):
            raise FeatureNotSupported(
                "this correlated reference inside a subquery's FROM is not supported", position=pos
            )
        n_left = len(outer)
        at = d_at(scope)
        matches = [
            bind_call(
                "is_not_distinct_from",
                [InputRef(c, outer[c].data_type), InputRef(n_left + at[i], outer[c].data_type)],
            )
            for i, c in enumerate(used)
        ]
        return plan, scope, matches

    # -- scalar subqueries (the ExprBinder hook) ------------------------------------------------
    def hook(self, kind: str, sub: exp.Expression, lhs: Expr | None, eb: ExprBinder) -> Expr:
        if kind != "scalar":
            raise FeatureNotSupported(
                f"{kind.replace('_', ' ').upper()} subqueries are only supported as WHERE conditions",
                position=position(sub),
            )
        qb = self.qb
        child = qb.correlated_child()
        bq = child.bind_query(sub)
        if len(bq.names) != 1:
            raise PiestreamError(
                "subquery must return only one column", sqlstate="42601", position=position(sub)
            )
        if not has_outer(bq.plan):
            return self._attach(bq.plan, None, 0, scalar=True)
        if (
            not isinstance(sub, exp.Select)
            or len(sub.expressions) != 1
            or _has_any(sub, "group", "having", "limit", "offset", "with_", "distinct", "order")
        ):
            raise FeatureNotSupported(
                "this correlated scalar subquery is not supported", position=position(sub)
            )
        return self._decorrelate_agg(sub)

    def _attach(self, right: PlanNode, cond: Expr | None, result_col: int, *, scalar: bool = False) -> Expr:
        """Left-join `right` onto the current relation; return a reference to its `result_col`."""
        qb = self.qb
        assert qb.plan is not None
        n_left = len(qb.scope.columns)
        qb.plan = Join(
            _join_schema(qb.plan, right, JoinKind.LEFT), qb.plan, right, JoinKind.LEFT, cond, scalar
        )
        new_cols = [ScopeColumn(None, f"_sub{i}", t, True) for i, t in enumerate(right.types)]
        qb.scope = Scope.of(qb.scope.columns + new_cols, qb.scope.parent)
        return InputRef(n_left + result_col, right.types[result_col])

    def _decorrelate_agg(self, sub: exp.Select) -> Expr:
        """``(SELECT agg(..) FROM t WHERE t.k = outer.k AND ...)`` -> group by t.k, left join on k."""
        from piestream.frontend.binder.aggregation import AggBinding, coalesce_zero, contains_agg
        from piestream.frontend.binder.from_clause import bind_from

        qb = self.qb
        item = sub.expressions[0]
        if not contains_agg(item):
            raise FeatureNotSupported(
                "correlated scalar subqueries need an aggregate", position=position(sub)
            )
        child = qb.correlated_child()
        plan, scope = bind_from(child, sub)
        if has_outer(plan):
            raise FeatureNotSupported(
                "a correlated reference inside the FROM of a scalar subquery is not supported",
                position=position(sub),
            )
        scope.parent = qb.scope
        keys_inner: list[Expr] = []
        keys_outer: list[Expr] = []
        null_safe: list[bool] = []
        filters: list[Expr] = []
        outer_only: list[Expr] = []
        where = sub.args.get("where")
        for c in conjuncts(where.this) if where is not None else []:
            e = ExprBinder(scope, params=qb.params, context="WHERE").bind(c)
            if not any(isinstance(x, OuterRef) for x in e.walk()):
                filters.append(e)
                continue
            if not any(isinstance(x, InputRef) and not isinstance(x, OuterRef) for x in e.walk()):
                outer_only.append(_outer_to_input(e, position(c)))  # a condition on the outer row
                continue
            pair = _correlated_equality(e)
            if pair is None:
                raise FeatureNotSupported(
                    "only equality correlation is supported in scalar subqueries", position=position(c)
                )
            keys_inner.append(pair[0])
            keys_outer.append(pair[1])
            null_safe.append(pair[2])
        f = and_all(filters)
        if f is not None:
            plan = Filter(plan.schema, plan, f)
        child.plan, child.scope = plan, scope
        # SELECT <inner keys>, <item> ... GROUP BY <inner keys>
        synthetic = exp.select(item.copy())
        synthetic.set("group", exp.Group(expressions=[]))
        binding = AggBinding(child, synthetic)
        select, _, _ = binding.bind([(item, "result")], SubqueryRewriter(child), group_exprs=keys_inner)
        agg_plan = child.plan
        assert agg_plan is not None
        if has_outer(agg_plan):
            raise FeatureNotSupported(
                "outer columns inside the aggregates of a correlated subquery are not supported",
                position=position(sub),
            )
        n_keys = len(keys_inner)
        n_left = len(qb.scope.columns)
        # a NULL-safe correlation matches an outer NULL with the group of inner NULLs
        conds = [
            bind_call("is_not_distinct_from" if safe else "=", [o, InputRef(n_left + i, k.return_type)])
            for i, (o, k, safe) in enumerate(zip(keys_outer, keys_inner, null_safe, strict=True))
        ]
        self._attach(agg_plan, and_all(conds), 0)
        calls = binding.calls

        # the item is evaluated on the joined row: group keys are the outer keys they equal, and
        # an outer row without a matching group sees count = 0 and other aggregates NULL (the
        # "count bug" of this decorrelation)
        def on_join(x: Expr) -> Expr | None:
            if isinstance(x, OuterRef):
                if x.depth != 1:
                    raise FeatureNotSupported(
                        "subqueries correlated across two levels are not supported", position=position(sub)
                    )
                return InputRef(x.index, x.return_type)
            if not isinstance(x, InputRef):
                return None
            if x.index < n_keys:
                return keys_outer[x.index]
            r = InputRef(n_left + x.index, x.return_type)
            return coalesce_zero(r) if calls[x.index - n_keys].kind in ("count", "count_star") else r

        value = select[0].transform_down(on_join)
        if not outer_only:
            return value

        # conditions on the outer row alone: where they fail, the subquery sees no rows
        def on_empty(x: Expr) -> Expr | None:
            if isinstance(x, OuterRef):
                return on_join(x)
            if not isinstance(x, InputRef):
                return None
            if x.index < n_keys:
                return keys_outer[x.index]
            kind = calls[x.index - n_keys].kind
            return Literal(0 if kind in ("count", "count_star") else None, x.return_type)

        empty = select[0].transform_down(on_empty)
        return bind_call("case", [and_all(outer_only), value, empty])  # type: ignore[list-item]


def _has_any(node: exp.Expression, *args: str) -> bool:
    return any(node.args.get(a) for a in args)


def _outer_to_input(e: Expr, pos: int | None) -> Expr:
    """An expression over the outer row only, with its outer references as plain columns."""

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, OuterRef):
            if x.depth != 1:
                raise FeatureNotSupported(
                    "subqueries correlated across two levels are not supported", position=pos
                )
            return InputRef(x.index, x.return_type)
        return None

    return e.transform_down(fn)


def _lift_inner_correlation(plan: PlanNode) -> tuple[PlanNode, list[Expr]]:
    """`plan` (a subquery's FROM) without the correlated conjuncts of its INNER joins' ON, and
    those conjuncts: when every join down the left spine to the deepest correlated INNER join is
    a plain Join, its columns keep their positions in the FROM's output, and a conjunct on the
    left side of a later LEFT join filters the same rows before it as after it (the left side is
    preserved), so each conjunct is a condition on the FROM's rows, fit for the semi / anti join.
    The spine is left alone otherwise, and a correlated LEFT join's ON is never split."""
    spine: list[Join] = []  # top-down, while each join above keeps its left side's rows
    node = plan
    while isinstance(node, Join):
        spine.append(node)
        if node.kind not in (JoinKind.INNER, JoinKind.LEFT):
            break  # below a RIGHT / FULL join a filter decides which right rows are padded
        node = node.left
    if not spine:
        return plan, []
    moved: list[Expr] = []
    rebuilt: PlanNode | None = None
    for j in reversed(spine):  # bottom-up
        cond = j.condition
        if j.kind is JoinKind.INNER and cond is not None:
            parts = _expr_conjuncts(cond)
            outer = [c for c in parts if any(isinstance(x, OuterRef) for x in c.walk())]
            if outer:
                moved += outer
                cond = and_all([c for c in parts if c not in outer])
        left = rebuilt if rebuilt is not None else j.left
        rebuilt = replace(j, left=left, condition=cond)
    assert rebuilt is not None
    return rebuilt, moved


def _expr_conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, FuncCall) and e.name == "and":
        return [c for a in e.args for c in _expr_conjuncts(a)]
    return [e]


def _outer_columns(plan: PlanNode, pos: int | None) -> list[int]:
    """The outer columns (depth 1) `plan` references, sorted; 0A000 for deeper references."""
    found: set[int] = set()
    for e in _plan_exprs(plan):
        for x in e.walk():
            if isinstance(x, OuterRef):
                if x.depth != 1:
                    raise FeatureNotSupported(
                        "subqueries correlated across two levels are not supported", position=pos
                    )
                found.add(x.index)
    return sorted(found)


def _plan_exprs(plan: PlanNode) -> list[Expr]:
    """Every expression held by a node of `plan`."""
    from dataclasses import fields, is_dataclass

    out: list[Expr] = []
    for p in plan.walk():
        if not is_dataclass(p):
            continue
        for f in fields(p):
            v = getattr(p, f.name)
            vals = v if isinstance(v, list) else [v]
            for x in vals:
                items = x if isinstance(x, list) else [x]
                out.extend(y for y in items if isinstance(y, Expr))
    return out


def has_outer(plan: PlanNode, skip: PlanNode | None = None) -> bool:
    """Whether `plan` (but for the subtree `skip`) still holds a correlated reference."""
    from dataclasses import fields, is_dataclass

    skipped = {id(p) for p in skip.walk()} if skip is not None else set()
    for p in plan.walk():
        if not is_dataclass(p) or id(p) in skipped:
            continue
        for f in fields(p):
            v = getattr(p, f.name)
            vals = v if isinstance(v, list) else [v]
            for x in vals:
                items = x if isinstance(x, list) else [x]
                for y in items:
                    if isinstance(y, Expr) and any(isinstance(z, OuterRef) for z in y.walk()):
                        return True
    return False


def _to_join_condition(e: Expr, n_left: int) -> Expr:
    """Outer references -> left columns, inner columns -> right columns (offset by n_left)."""
    shifted = shift_refs(e, n_left)
    return shifted.transform_down(
        lambda x: InputRef(x.index, x.return_type) if isinstance(x, OuterRef) else None
    )


def _correlated_equality(e: Expr) -> tuple[Expr, Expr, bool] | None:
    """(inner side, outer side as InputRefs over the outer scope, NULL-safe) of `inner = outer`
    or `inner IS NOT DISTINCT FROM outer`."""
    if not (
        isinstance(e, FuncCall) and e.name in ("equal", "=", "is_not_distinct_from") and len(e.args) == 2
    ):
        return None
    a, b = e.args
    a_outer = any(isinstance(x, OuterRef) for x in a.walk())
    b_outer = any(isinstance(x, OuterRef) for x in b.walk())
    a_inner = any(isinstance(x, InputRef) for x in a.walk())
    b_inner = any(isinstance(x, InputRef) for x in b.walk())
    if a_outer and not a_inner and b_inner and not b_outer:
        a, b = b, a
    elif not (b_outer and not b_inner and a_inner and not a_outer):
        return None
    outer = b.transform_down(lambda x: InputRef(x.index, x.return_type) if isinstance(x, OuterRef) else None)
    return a, outer, e.name == "is_not_distinct_from"


def _is_count(item: exp.Expression) -> bool:
    node = item.this if isinstance(item, exp.Alias) else item
    if isinstance(node, exp.Filter):
        node = node.this
    return isinstance(node, exp.Count)
