"""Set-returning functions, bound into ProjectSet nodes (PostgreSQL 10+ semantics).

- In the select list (`apply_select_srfs`): the innermost set-returning calls of the items become
  a ProjectSet over the query's relation (its columns pass through), and the items read the
  expansions as columns; calls nested in another call's arguments get a ProjectSet of their own
  above (PostgreSQL's layering). A set-returning call under CASE / COALESCE / AND / OR would run
  for rows that branch never reaches: PostgreSQL refuses it, so does piestream (0A000).
- In FROM (`bind_function_item`): ``unnest(a [, b ...]) [WITH ORDINALITY]``, ``generate_series``,
  ``range``, ``regexp_matches`` and any scalar function (one row) are a relation. After another
  FROM item, joined by a comma, CROSS JOIN or an inner JOIN, the function is evaluated per row
  of the items before it (a lateral ProjectSet, or a Project for a scalar function), so its
  arguments may read their columns (``FROM t CROSS JOIN unnest(t.arr)``); the ON condition filters
  after. Under an outer join a function that reads no earlier column is a relation of its own
  joined normally; one that does (an outer LATERAL) is 0A000.

Column names follow PostgreSQL: the function's name, or the table alias for a one-column function
without column aliases, then ``ordinality`` for WITH ORDINALITY (1-based: projected row id + 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, Field
from piestream.expr.bind import bind_call, literal
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.expr.table_function import (
    TABLE_FUNCTIONS,
    TableFunction,
    bind_table_function,
    contains_table_function,
)
from piestream.frontend.binder.expr_binder import ExprBinder, position
from piestream.frontend.binder.rewrite import replace_exprs
from piestream.frontend.binder.scope import Scope, ScopeColumn
from piestream.frontend.logical import PlanNode, Project, ProjectSet, Values

if TYPE_CHECKING:
    from piestream.frontend.binder.query import QueryBinder

#: calls that evaluate an argument only on the rows that reach it
_LAZY = {"case": "CASE", "coalesce": "COALESCE", "and": "AND", "or": "OR", "nullif": "NULLIF"}
_WINDOW_FUNCTIONS = ("tumble", "hop")


def _schema(scope: Scope) -> Schema:
    return Schema(tuple(Field(c.name, c.data_type) for c in scope.columns))


def _check_placement(e: Expr, node: exp.Expression | None) -> None:
    for x in e.walk():
        if isinstance(x, FuncCall) and x.name in _LAZY and any(contains_table_function(a) for a in x.args):
            raise FeatureNotSupported(
                f"set-returning functions are not allowed in {_LAZY[x.name]}",
                hint="You might be able to move the set-returning function into a LATERAL FROM item.",
                position=position(node),
            )


def project_set_over(
    plan: PlanNode, scope: Scope, calls: list[TableFunction], names: list[str], hidden: bool
) -> tuple[PlanNode, Scope]:
    """A ProjectSet passing `scope`'s columns through and appending one column per call, then
    the hidden projected row id."""
    base: list[Expr] = [InputRef(i, c.data_type) for i, c in enumerate(scope.columns)]
    items = base + list(calls)
    cols = [
        *scope.columns,
        *(ScopeColumn(None, n, c.return_type, hidden) for n, c in zip(names, calls, strict=True)),
        ScopeColumn(None, "projected_row_id", BIGINT, True),
    ]
    out = Scope(cols, scope.parent)
    return ProjectSet(_schema(out), plan, items), out


def apply_select_srfs(qb: QueryBinder, exprs: list[Expr], node: exp.Expression) -> list[Expr]:
    """Select items with set-returning calls -> ProjectSet(s) under them (see the module doc)."""
    if not any(contains_table_function(e) for e in exprs):
        return exprs
    for e in exprs:
        _check_placement(e, node)
    assert qb.plan is not None
    level = 0
    while True:
        innermost: list[TableFunction] = []
        for e in exprs:
            for x in e.walk():
                if (
                    isinstance(x, TableFunction)
                    and not any(contains_table_function(a) for a in x.args)
                    and x not in innermost
                ):
                    innermost.append(x)
        if not innermost:
            return exprs
        n_before = len(qb.scope.columns)
        names = [f"_srf{level}_{i}" for i in range(len(innermost))]
        qb.plan, qb.scope = project_set_over(qb.plan, qb.scope, innermost, names, hidden=True)
        mapping: dict[object, Expr] = {
            tf: InputRef(n_before + i, tf.return_type) for i, tf in enumerate(innermost)
        }
        exprs = [replace_exprs(e, mapping) for e in exprs]
        level += 1


# -- FROM -----------------------------------------------------------------------------------------


def function_of(node: exp.Expression) -> exp.Expression | None:
    """The function call a FROM item is (None for tables, subqueries and TUMBLE / HOP)."""
    if isinstance(node, exp.Lateral):
        node = node.this
    if isinstance(node, exp.Unnest):
        return node
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
        if isinstance(node.this, exp.Anonymous) and str(node.this.this).lower() in _WINDOW_FUNCTIONS:
            return None
        return cast(exp.Expression, node.this)
    return None


def _alias_of(node: exp.Expression) -> tuple[str | None, list[str], bool, str | None]:
    """(table alias, column aliases, WITH ORDINALITY, the ordinality column's alias)."""
    alias = node.args.get("alias")
    inner = node.this if isinstance(node, exp.Lateral) else node
    if alias is None and isinstance(node, exp.Lateral):
        alias = inner.args.get("alias")
    name = alias.name if alias is not None and alias.name else None
    cols = [c.name for c in (alias.args.get("columns") or [])] if alias is not None else []
    if isinstance(inner, exp.Unnest):
        offset = inner.args.get("offset")
        # sqlglot moves the last column alias of `unnest(...) WITH ORDINALITY AS t(x, n)` here
        if isinstance(offset, exp.Expression):
            return name, cols, True, offset.name
        return name, cols, bool(offset), None
    ordinality = bool(inner.args.get("ordinality") or node.args.get("ordinality"))
    return name, cols, ordinality, None


def _function_name(fn: exp.Expression) -> str:
    if isinstance(fn, exp.Unnest | exp.Explode):
        return "unnest"
    if isinstance(fn, exp.Anonymous):
        return str(fn.this).lower()
    return fn.sql_name().lower() if isinstance(fn, exp.Func) else "?column?"


def _bind_calls(fn: exp.Expression, eb: ExprBinder) -> tuple[list[Expr], str]:
    """The function item's calls: one per array of a multi-array unnest, else one."""
    name = _function_name(fn)
    pos = position(fn)
    if isinstance(fn, exp.Unnest):
        return [bind_table_function("unnest", [eb.bind(a)]) for a in fn.expressions], name
    if name in TABLE_FUNCTIONS and isinstance(fn, exp.Anonymous):
        args = [eb.bind(a) for a in fn.expressions]
        try:
            return [bind_table_function(name, args)], name
        except FeatureNotSupported as err:
            err.position = err.position or pos
            raise
    scalar = eb.bind(fn)  # a scalar function: one row
    if contains_table_function(scalar):
        raise FeatureNotSupported("set-returning functions nested in a FROM function", position=pos)
    return [scalar], name


def bind_function_item(
    qb: QueryBinder, node: exp.Expression, left: tuple[PlanNode, Scope] | None
) -> tuple[PlanNode, Scope]:
    """A function in FROM, evaluated per row of `left` (lateral) or of one empty row."""
    fn = function_of(node)
    assert fn is not None
    if left is None:
        left = (Values(Schema(()), rows=[[]]), Scope(parent=qb.parent_scope))
    plan, lscope = left
    eb = ExprBinder(lscope, params=qb.params, context="functions in FROM")
    calls, name = _bind_calls(fn, eb)
    alias, col_aliases, ordinality, ord_alias = _alias_of(node)
    qualifier = alias or name
    if any(isinstance(c, TableFunction) and c.name in RECORD_FUNCTIONS for c in calls):
        return _record_function_item(calls, [name], plan, lscope, qualifier, col_aliases, ordinality, node)
    available = len(calls) + ordinality
    given = len(col_aliases) + (ord_alias is not None)
    _check_aliases(qualifier, available, given, node)
    defaults = [alias if alias and len(calls) == 1 and not col_aliases else name for _ in calls]
    names = col_aliases[: len(calls)] + defaults[len(col_aliases) :]
    if ordinality:
        ord_name = ord_alias or (col_aliases[len(calls)] if len(col_aliases) > len(calls) else "ordinality")
    if all(isinstance(c, TableFunction) for c in calls):
        tfs = [c for c in calls if isinstance(c, TableFunction)]
        plan, scope = project_set_over(plan, lscope, tfs, names, hidden=False)
        new_cols = [ScopeColumn(qualifier, n, c.return_type) for n, c in zip(names, calls, strict=True)]
        prid = len(scope.columns) - 1
        cols = [*lscope.columns, *new_cols, scope.columns[prid]]
        exprs: list[Expr] = [InputRef(i, c.data_type) for i, c in enumerate(scope.columns)]
        if ordinality:
            exprs.append(bind_call("+", [InputRef(prid, BIGINT), literal(1)]))
            cols.append(ScopeColumn(qualifier, ord_name, BIGINT))
        out = Scope(cols, lscope.parent)
        return Project(_schema(out), plan, exprs), out
    if any(isinstance(c, TableFunction) for c in calls):
        raise FeatureNotSupported(
            "ROWS FROM mixing set-returning and scalar functions", position=position(fn)
        )
    exprs = [InputRef(i, c.data_type) for i, c in enumerate(lscope.columns)] + calls
    cols = [
        *lscope.columns,
        *(ScopeColumn(qualifier, n, c.return_type) for n, c in zip(names, calls, strict=True)),
    ]
    if ordinality:
        exprs.append(Literal(1, BIGINT))
        cols.append(ScopeColumn(qualifier, ord_name, BIGINT))
    out = Scope(cols, lscope.parent)
    return Project(_schema(out), plan, exprs), out


def _check_aliases(qualifier: str, available: int, given: int, node: exp.Expression) -> None:
    if given > available:
        raise PiestreamError(
            f'table "{qualifier}" has {available} columns available but {given} columns specified',
            sqlstate="42P10",
            position=position(node),
        )


#: set-returning functions whose values are records: in FROM, the record's fields are the columns
RECORD_FUNCTIONS = frozenset({"jsonb_each", "jsonb_each_text"})


def _record_function_item(
    calls: list[Expr],
    names: list[str],
    plan: PlanNode,
    lscope: Scope,
    qualifier: str,
    col_aliases: list[str],
    ordinality: bool,
    node: exp.Expression,
) -> tuple[PlanNode, Scope]:
    """``jsonb_each(j) [AS x (k, v)]``: a ProjectSet of the record, then a Project of its fields."""
    if len(calls) != 1 or ordinality:
        raise FeatureNotSupported(
            "a record-returning function with other functions or WITH ORDINALITY", position=position(node)
        )
    tf = calls[0]
    assert isinstance(tf, TableFunction)
    fields = tf.return_type.fields
    _check_aliases(qualifier, len(fields), len(col_aliases), node)
    plan, _ = project_set_over(plan, lscope, [tf], names, hidden=True)
    rec = InputRef(len(lscope.columns), tf.return_type)
    col_names = col_aliases + [f.name for f in fields[len(col_aliases) :]]
    exprs: list[Expr] = [InputRef(i, c.data_type) for i, c in enumerate(lscope.columns)]
    exprs += [bind_call("field", [rec, literal(f.name)]) for f in fields]
    cols = [
        *lscope.columns,
        *(ScopeColumn(qualifier, n, f.data_type) for n, f in zip(col_names, fields, strict=True)),
    ]
    out = Scope(cols, lscope.parent)
    return Project(_schema(out), plan, exprs), out


def reads_columns(qb: QueryBinder, node: exp.Expression, scope: Scope) -> bool:
    """Whether a FROM function's arguments read columns of `scope` (the items before it)."""
    fn = function_of(node)
    assert fn is not None
    calls, _ = _bind_calls(fn, ExprBinder(scope, params=qb.params, context="functions in FROM"))
    return any(isinstance(x, InputRef) for c in calls for x in c.walk())
