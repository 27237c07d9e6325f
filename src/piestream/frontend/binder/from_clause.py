"""Binding FROM: tables, MVs, views, CTEs, subqueries, joins and the TUMBLE / HOP window functions."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

from piestream.common.errors import (
    DatatypeMismatch,
    FeatureNotSupported,
    PiestreamError,
    SyntaxError_,
    UndefinedColumn,
    UndefinedTable,
)
from piestream.common.interval import Interval
from piestream.common.schema import Schema
from piestream.common.types import Field, TypeKind
from piestream.expr.bind import bind_call, coerce_to, common_type, literal
from piestream.expr.expr import Expr, InputRef, Literal
from piestream.frontend.binder.asof import bind_asof_join
from piestream.frontend.binder.expr_binder import ExprBinder, position
from piestream.frontend.binder.scope import AmbiguousColumn, Scope, ScopeColumn
from piestream.frontend.binder.table_functions import bind_function_item, function_of, reads_columns
from piestream.frontend.catalog import (
    DEFAULT_SCHEMA,
    SYSTEM_SCHEMA,
    VIEW_SEARCH_PATH,
    CatalogSnapshot,
    Relation,
    RelationKind,
    parse_search_path,
)
from piestream.frontend.logical import Filter, HopWindow, Join, JoinKind, PlanNode, Project, Scan, Values
from piestream.frontend.parser.names import ObjectName, object_name, schema_of, table_name

if TYPE_CHECKING:
    from piestream.frontend.binder.query import QueryBinder

_JOIN_SIDES = {"": JoinKind.INNER, "LEFT": JoinKind.LEFT, "RIGHT": JoinKind.RIGHT, "FULL": JoinKind.FULL}
#: join kind words with the side's meaning (OUTER only ever follows a side)
_PLAIN_KINDS = ("", "INNER", "OUTER", "CROSS")


def empty_relation() -> tuple[PlanNode, Scope]:
    """SELECT without FROM: one row, no columns."""
    return Values(Schema(()), rows=[[]]), Scope()


def bind_from(qb: QueryBinder, node: exp.Select) -> tuple[PlanNode, Scope]:
    from_ = node.args.get("from_") or node.args.get("from")
    if from_ is None:
        return empty_relation()
    plan, scope = bind_from_item(qb, from_.this)
    for j in node.args.get("joins") or []:
        plan, scope = bind_join(qb, plan, scope, j)
    return plan, scope


def bind_from_item(qb: QueryBinder, node: exp.Expression) -> tuple[PlanNode, Scope]:
    """A FROM item; a parenthesized join parses as a table that carries its joins."""
    plan, scope = bind_table_expr(qb, node)
    if isinstance(node, exp.Table):
        for j in node.args.get("joins") or []:
            plan, scope = bind_join(qb, plan, scope, j)
    return plan, scope


def _aliased_join(scope: Scope, alias: str, names: list[str] | None) -> Scope:
    """`(a JOIN b ...) AS j (c1, ...)`: the join's output columns (what `*` lists) become j's, and
    the tables inside are no longer visible by their own names."""
    out_cols = scope.visible()
    renamed = dict(zip(out_cols, names or [], strict=False))
    return Scope(
        [
            ScopeColumn(alias, renamed.get(i, c.name), c.data_type, c.hidden)
            if i in out_cols or c.hidden
            else ScopeColumn(None, c.name, c.data_type, True, True)
            for i, c in enumerate(scope.columns)
        ],
        scope.parent,
    )


def bind_join(qb: QueryBinder, left: PlanNode, lscope: Scope, j: exp.Join) -> tuple[PlanNode, Scope]:
    side = str(j.args.get("side") or "").upper()
    kind_word = str(j.args.get("kind") or "").upper()
    method = str(j.args.get("method") or "").upper()
    if method == "ASOF":
        return _bind_asof(qb, left, lscope, j, side, kind_word)
    if kind_word not in _PLAIN_KINDS or side not in _JOIN_SIDES or method not in ("", "NATURAL"):
        words = " ".join(w for w in (method, side, kind_word) if w)
        raise FeatureNotSupported(f"{words} JOIN is not supported", position=position(j))
    kind = _JOIN_SIDES[side]
    on, using = j.args.get("on"), j.args.get("using")
    natural = method == "NATURAL"
    if kind_word == "CROSS" and (natural or on is not None or using):
        raise SyntaxError_("CROSS JOIN takes no join condition", position=position(j))
    if side and not (natural or on is not None or using):
        raise SyntaxError_(f"{side} JOIN needs ON, USING or NATURAL", position=position(j))
    if function_of(j.this) is not None:
        if kind is JoinKind.INNER and not (natural or using):
            return _lateral_function(qb, left, lscope, j)
        if reads_columns(qb, j.this, lscope):
            raise FeatureNotSupported(
                f"{side or 'NATURAL'} JOIN of a function reading columns of the FROM items before it "
                "(LATERAL) is not supported",
                position=position(j),
            )
    elif isinstance(j.this, exp.Lateral):
        raise FeatureNotSupported("LATERAL subqueries are not supported", position=position(j))
    if isinstance(j.this, exp.Table) and temporal_version(j.this):
        if kind not in (JoinKind.INNER, JoinKind.LEFT) or natural or using or on is None:
            raise FeatureNotSupported(
                "a temporal join (FOR SYSTEM_TIME AS OF PROCTIME()) must be an INNER or LEFT JOIN ... ON",
                position=position(j),
            )
        right, rscope = _bind_lookup_table(qb, j.this)
    else:
        right, rscope = bind_from_item(qb, j.this)
    if natural or using:
        names = natural_join_columns(lscope, rscope) if natural else [i.name for i in using or []]
        return _bind_using_join(left, lscope, right, rscope, kind, names, j)
    scope = lscope.concat(rscope)
    cond: Expr | None = None
    if on is not None:
        # in a subquery the ON may reference the enclosing query (a correlated reference, an
        # OuterRef the subquery rewrite removes or rejects with 0A000)
        on_scope = Scope(scope.columns, scope.parent or qb.parent_scope)
        eb = ExprBinder(on_scope, params=qb.params, context="JOIN conditions")
        cond = eb.bind(on)
        if cond.return_type.kind is not TypeKind.BOOLEAN:
            raise DatatypeMismatch("argument of JOIN/ON must be type boolean", position=position(on))
    return Join(_schema_of(scope), left, right, kind, cond), scope


def _bind_asof(
    qb: QueryBinder, left: PlanNode, lscope: Scope, j: exp.Join, side: str, kind_word: str
) -> tuple[PlanNode, Scope]:
    """``ASOF [LEFT] JOIN ... ON`` (binder/asof); RIGHT / FULL / USING are refused."""
    on = j.args.get("on")
    if (
        side not in ("", "LEFT")
        or kind_word not in ("", "INNER", "OUTER")
        or j.args.get("using")
        or on is None
    ):
        raise FeatureNotSupported(
            "only ASOF JOIN ... ON and ASOF LEFT JOIN ... ON are supported", position=position(j)
        )
    right, rscope = bind_from_item(qb, j.this)
    scope = lscope.concat(rscope)
    cond = ExprBinder(scope, params=qb.params, context="JOIN conditions").bind(on)
    if cond.return_type.kind is not TypeKind.BOOLEAN:
        raise DatatypeMismatch("argument of JOIN/ON must be type boolean", position=position(on))
    return bind_asof_join(_schema_of(scope), left, right, side == "LEFT", cond, position(j)), scope


def temporal_version(node: exp.Table) -> bool:
    """Whether `node` carries ``FOR SYSTEM_TIME AS OF PROCTIME()`` (0A000 for any other
    FOR SYSTEM_TIME / VERSION AS OF: piestream keeps no older versions to read)."""
    v = node.args.get("version")
    if v is None:
        return False
    e = v.args.get("expression")
    proctime = isinstance(e, exp.Anonymous) and str(e.this).lower() == "proctime" and not e.expressions
    if str(v.this).upper() != "TIMESTAMP" or str(v.args.get("kind")).upper() != "AS OF" or not proctime:
        raise FeatureNotSupported(
            f"{v.sql('postgres')} is not supported (only FOR SYSTEM_TIME AS OF PROCTIME(), a temporal join)",
            position=position(node),
        )
    return True


def _bind_lookup_table(qb: QueryBinder, node: exp.Table) -> tuple[PlanNode, Scope]:
    """The right side of a temporal join: a table or materialized view, looked up (a Scan
    marked `as_of_proctime`; the stream planner makes it a TemporalJoin)."""
    plain = node.copy()
    plain.set("version", None)
    plan, scope = bind_table_expr(qb, plain)
    ok = (RelationKind.TABLE, RelationKind.MATERIALIZED_VIEW)
    if not isinstance(plan, Scan) or plan.relation.kind not in ok:
        raise FeatureNotSupported(
            "the right side of a temporal join (FOR SYSTEM_TIME AS OF PROCTIME()) must be a table "
            "or materialized view",
            position=position(node),
        )
    return Scan(plan.schema, plan.relation, plan.column_indices, as_of_proctime=True), scope


def _lateral_function(qb: QueryBinder, left: PlanNode, lscope: Scope, j: exp.Join) -> tuple[PlanNode, Scope]:
    """`left, f(...)` / `left CROSS JOIN f(...)` / `left JOIN f(...) ON cond`: the function per row
    of `left`, then the ON condition as a filter."""
    plan, scope = bind_function_item(qb, j.this, (left, lscope))
    on = j.args.get("on")
    if on is None:
        return plan, scope
    cond = ExprBinder(scope, params=qb.params, context="JOIN conditions").bind(on)
    if cond.return_type.kind is not TypeKind.BOOLEAN:
        raise DatatypeMismatch("argument of JOIN/ON must be type boolean", position=position(on))
    return Filter(plan.schema, plan, cond), scope


def natural_join_columns(lscope: Scope, rscope: Scope) -> list[str]:
    """NATURAL JOIN's USING list: each left column name that the right side also has, in left order
    (an empty list makes it a cross join, as in PostgreSQL)."""
    right_names = {rscope.columns[i].name for i in rscope.visible()}
    return [lscope.columns[i].name for i in lscope.visible() if lscope.columns[i].name in right_names]


def _using_column(scope: Scope, name: str, side: str, node: exp.Expression) -> int:
    hits = [i for i in scope.visible() if scope.columns[i].name == name]
    if not hits:
        raise UndefinedColumn(
            f'column "{name}" specified in USING clause does not exist in {side} table',
            position=position(node),
        )
    if len(hits) > 1:
        raise AmbiguousColumn(
            f'common column name "{name}" appears more than once in {side} table', position=position(node)
        )
    return hits[0]


def _bind_using_join(
    left: PlanNode,
    lscope: Scope,
    right: PlanNode,
    rscope: Scope,
    kind: JoinKind,
    names: list[str],
    j: exp.Join,
) -> tuple[PlanNode, Scope]:
    """JOIN ... USING (names) / NATURAL JOIN, as PostgreSQL binds it: the join condition equates
    each pair of columns, and one merged column per name stands for the pair unqualified and in
    `*` (listed first): the left column for INNER / LEFT, the right one for RIGHT, and
    COALESCE(left, right) for FULL, in the pair's common type. `alias.name` still reaches either
    input column."""
    n_left = len(lscope.columns)
    pairs: list[tuple[int, int]] = []
    for n, name in enumerate(names):
        if name in names[:n]:
            raise PiestreamError(
                f'column name "{name}" appears more than once in USING clause',
                sqlstate="42701",
                position=position(j),
            )
        pairs.append((_using_column(lscope, name, "left", j), _using_column(rscope, name, "right", j)))
    joined = lscope.concat(rscope)
    conds = []
    merged: list[Expr] = []
    for li, ri in pairs:
        lref = InputRef(li, lscope.columns[li].data_type)
        rref = InputRef(n_left + ri, rscope.columns[ri].data_type)
        t = common_type([lref.return_type, rref.return_type], "JOIN/USING", position=position(j))
        conds.append(bind_call("=", [lref, rref], position=position(j)))
        lval, rval = coerce_to(lref, t), coerce_to(rref, t)
        if kind is JoinKind.FULL:
            merged.append(bind_call("coalesce", [lval, rval]))
        else:
            merged.append(rval if kind is JoinKind.RIGHT else lval)
    cond = None if not conds else conds[0] if len(conds) == 1 else bind_call("and", conds)
    join = Join(_schema_of(joined), left, right, kind, cond)
    if not pairs:
        return join, joined
    inputs = {li for li, _ in pairs} | {n_left + ri for _, ri in pairs}
    cols = [ScopeColumn(None, names[k], e.return_type) for k, e in enumerate(merged)] + [
        replace(c, merged=True) if i in inputs else c for i, c in enumerate(joined.columns)
    ]
    exprs = merged + [InputRef(i, c.data_type) for i, c in enumerate(joined.columns)]
    scope = Scope(cols, joined.parent)
    return Project(_schema_of(scope), join, exprs), scope


def _schema_of(scope: Scope) -> Schema:
    return Schema(tuple(Field(c.name, c.data_type) for c in scope.columns))


def bind_table_expr(qb: QueryBinder, node: exp.Expression) -> tuple[PlanNode, Scope]:
    if function_of(node) is not None:
        plan, scope = bind_function_item(qb, node, None)
        _check_not_lateral(plan, node)
        return plan, scope
    if isinstance(node, exp.Table) and node.args.get("ordinality"):
        raise SyntaxError_("WITH ORDINALITY takes a function", position=position(node))
    if isinstance(node, exp.Table) and temporal_version(node):
        raise FeatureNotSupported(
            "FOR SYSTEM_TIME AS OF PROCTIME() is supported only on the right side of a JOIN "
            "(a temporal join)",
            position=position(node),
        )
    alias_node = node.args.get("alias")
    alias = alias_node.name if alias_node is not None and alias_node.name else None
    col_aliases = [c.name for c in alias_node.args.get("columns") or []] if alias_node is not None else None
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
        # TUMBLE / HOP keep their relation's name as the qualifier unless aliased (RisingWave)
        plan, scope = bind_window_function(qb, node.this)
        return plan, scope.requalified(alias or _window_relation_name(node.this), col_aliases)
    if isinstance(node, exp.Table):
        name = table_name(node)
        if name.schema == SYSTEM_SCHEMA:
            plan, scope = bind_system_relation(qb, name, node)
            return plan, scope.requalified(alias or name, col_aliases)
        plan, scope = bind_named_relation(qb, name, node)
        return plan, scope.requalified(alias or str(name), col_aliases)
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Table):
        plan, scope = bind_from_item(qb, node.this)  # a parenthesized join
        return plan, scope if alias is None else _aliased_join(scope, alias, col_aliases)
    if isinstance(node, exp.Subquery):
        sub = qb.child().bind_query(node.this)
        _check_not_lateral(sub.plan, node)
        scope = Scope.of([ScopeColumn(alias, n, t) for n, t in zip(sub.names, sub.plan.types, strict=False)])
        return sub.plan, scope.requalified(alias, col_aliases)
    if isinstance(node, exp.Values):
        sub = qb.child().bind_query(node)
        scope = Scope.of([ScopeColumn(alias, n, t) for n, t in zip(sub.names, sub.plan.types, strict=False)])
        return sub.plan, scope.requalified(alias, col_aliases)
    raise FeatureNotSupported(f"FROM item {node.sql('postgres')!r} is not supported", position=position(node))


def _check_not_lateral(plan: PlanNode, node: exp.Expression) -> None:
    """A subquery in FROM that reads a column of an enclosing query (a correlated derived table,
    PostgreSQL's implicit LATERAL across levels) has no decorrelation here: 0A000."""
    from piestream.frontend.binder.subquery import has_outer

    if has_outer(plan):
        raise FeatureNotSupported(
            "a subquery in FROM that references columns of an outer query is not supported",
            position=position(node),
        )


def bind_named_relation(qb: QueryBinder, name: str, node: exp.Expression) -> tuple[PlanNode, Scope]:
    """A CTE, view, table, MV, index or source by name."""
    cte = qb.lookup_cte(name) if schema_of(name) is None else None
    if cte is not None:
        sub = qb.child(include_ctes_after=name).bind_query(cte[0])
        names = cte[1] or sub.names
        scope = Scope.of([ScopeColumn(name, n, t) for n, t in zip(names, sub.plan.types, strict=False)])
        return sub.plan, scope
    rel = qb.catalog.get_relation(name)
    if rel is None:
        shown = object_name(name).qualified
        raise UndefinedTable(f'relation "{shown}" does not exist', position=position(node))
    qb.dependencies.add(rel.id)
    if rel.kind is RelationKind.VIEW:
        from piestream.frontend.parser import parse_one

        stmt = parse_one(rel.definition)
        query = getattr(stmt, "query", stmt)
        assert isinstance(query, exp.Expression)
        body = qb.root_child()
        if isinstance(body.catalog, CatalogSnapshot):  # bound with the names it was created with
            path = rel.properties.get(VIEW_SEARCH_PATH)
            body.catalog = body.catalog.for_view(
                rel, parse_search_path(path) if path is not None else (DEFAULT_SCHEMA,)
            )
        sub = body.bind_query(query)
        names = [c.name for c in rel.columns]
        scope = Scope.of([ScopeColumn(name, n, t) for n, t in zip(names, sub.plan.types, strict=False)])
        return sub.plan, scope
    if rel.kind in (RelationKind.SINK, RelationKind.SUBSCRIPTION):
        what = rel.kind.value
        hint = (
            " (read its changes with DECLARE ... SUBSCRIPTION CURSOR and FETCH)" if rel.subscription else ""
        )
        raise FeatureNotSupported(f'cannot read from {what} "{name}"{hint}', position=position(node))
    return scan_relation(rel, name, getattr(qb.catalog, "as_of", None))


def bind_system_relation(qb: QueryBinder, name: str, node: exp.Expression) -> tuple[PlanNode, Scope]:
    """``rw_catalog.<name>``: its rows now, as constants (system relations are small)."""
    system = getattr(qb.catalog, "system_tables", None)
    found = system.rows(name) if system is not None else None
    if found is None:
        raise UndefinedTable(f'relation "{SYSTEM_SCHEMA}.{name}" does not exist', position=position(node))
    schema, rows = found
    types = schema.types
    values: list[list[Expr]] = [[Literal(v, t) for v, t in zip(r, types, strict=True)] for r in rows]
    plan = Values(schema, values, system_table=name)
    return plan, Scope.of([ScopeColumn(name, f.name, f.data_type) for f in schema.fields])


def scan_relation(rel: Relation, qualifier: str, as_of: int | None = None) -> tuple[PlanNode, Scope]:
    """Scan every column (hidden ones too: the stream planner needs the pk); only visible ones
    are found by `*` — for a view's query (`as_of`), only those the table had when the view was
    created."""
    idx = list(range(len(rel.columns)))
    plan = Scan(Schema(tuple(Field(c.name, c.data_type) for c in rel.columns)), rel, idx)
    scope = Scope.of(
        [
            ScopeColumn(qualifier, c.name, c.data_type, c.hidden or (as_of is not None and c.since > as_of))
            for c in rel.columns
        ]
    )
    return plan, scope


def _interval_usecs(e: Expr, what: str, node: exp.Expression) -> int:
    if not isinstance(e, Literal) or not isinstance(e.value, Interval):
        raise FeatureNotSupported(f"{what} must be a constant interval", position=position(node))
    iv = e.value
    if iv.months:
        raise FeatureNotSupported(f"{what} must not contain months or years", position=position(node))
    return iv.days * 86_400_000_000 + iv.usecs


def _window_relation_name(fn: exp.Anonymous) -> str:
    args = fn.expressions
    if args and isinstance(args[0], exp.Column | exp.Table):
        return args[0].name
    return str(fn.this).lower()


def bind_window_function(qb: QueryBinder, fn: exp.Anonymous) -> tuple[PlanNode, Scope]:
    """TUMBLE(t, col, size [, offset]) and HOP(t, col, slide, size [, offset])."""
    name = str(fn.this).lower()
    args = fn.expressions
    if name not in ("tumble", "hop"):
        raise FeatureNotSupported(f"table function {name} is not supported", position=position(fn))
    need = 3 if name == "tumble" else 4
    if len(args) not in (need, need + 1):
        raise PiestreamError(
            f"{name.upper()} takes {need} or {need + 1} arguments", sqlstate="42883", position=position(fn)
        )
    rel_node = args[0]
    if not isinstance(rel_node, exp.Column | exp.Table) or (
        isinstance(rel_node, exp.Column) and rel_node.args.get("catalog") is not None
    ):
        raise UndefinedTable(
            f"the first argument of {name.upper()} must name a relation", position=position(rel_node)
        )
    if isinstance(rel_node, exp.Column):  # TUMBLE(s.t, ...): sqlglot reads s.t as a column
        parts = [rel_node.text(k) for k in ("db", "table") if rel_node.args.get(k) is not None]
        rel_name = ObjectName.of([*parts, rel_node.name])
    else:
        rel_name = table_name(rel_node)
    plan, scope = bind_named_relation(qb, rel_name, rel_node)
    scope = scope.requalified(str(rel_name))
    eb = ExprBinder(scope, params=qb.params, context="window functions")
    time_col = eb.bind(args[1])
    if not isinstance(time_col, InputRef) or time_col.return_type.kind not in (
        TypeKind.TIMESTAMP,
        TypeKind.TIMESTAMPTZ,
    ):
        raise DatatypeMismatch(
            f"the time column of {name.upper()} must be a timestamp column", position=position(args[1])
        )
    consts = [eb.bind(a) for a in args[2:]]
    t = time_col.return_type
    cols = list(scope.columns)
    if name == "tumble":
        size = _interval_usecs(consts[0], "TUMBLE size", args[2])
        offset = _interval_usecs(consts[1], "TUMBLE offset", args[3]) if len(consts) > 1 else 0
        if size <= 0:
            raise FeatureNotSupported("TUMBLE size must be positive", position=position(args[2]))
        start = bind_call("tumble_start", [time_col, consts[0]] + ([consts[1]] if len(consts) > 1 else []))
        end = bind_call("+", [start, literal(Interval(0, 0, size))])
        exprs = [InputRef(i, c.data_type) for i, c in enumerate(cols)] + [start, end]
        out_cols = [*cols, ScopeColumn(None, "window_start", t), ScopeColumn(None, "window_end", t)]
        proj = Project(Schema(tuple(Field(c.name, c.data_type) for c in out_cols)), plan, exprs)
        del offset
        return proj, Scope.of(out_cols)
    slide = _interval_usecs(consts[0], "HOP slide", args[2])
    size = _interval_usecs(consts[1], "HOP size", args[3])
    offset = _interval_usecs(consts[2], "HOP offset", args[4]) if len(consts) > 2 else 0
    if slide <= 0 or size <= 0 or size % slide:
        raise FeatureNotSupported("HOP size must be a positive multiple of the slide", position=position(fn))
    out_cols = [*cols, ScopeColumn(None, "window_start", t), ScopeColumn(None, "window_end", t)]
    hop = HopWindow(
        Schema(tuple(Field(c.name, c.data_type) for c in out_cols)), plan, time_col.index, slide, size, offset
    )
    return hop, Scope.of(out_cols)
