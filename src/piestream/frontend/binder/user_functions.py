"""Binding calls of user-defined functions (CREATE FUNCTION).

A call resolves among the functions of that name with PostgreSQL's overload rules, and its
arguments are coerced to the declared types. Then:
- a SQL function is *inlined*: its body (``SELECT expr`` over the parameters) is bound with the
  parameters as columns and each parameter reference replaced by the bound argument, so the
  call costs what the expression costs, vectorized, in MVs and in batch alike;
- a Python function becomes a `PythonUdfCall` carrying its source text.

The catalog is reached through a context variable that `QueryBinder` sets while it binds (the
expression binder is created in many places and has no catalog of its own). Every function a
statement uses is added to the statement's dependencies, so DROP FUNCTION sees the MVs and views
that use it. The functions a SQL function's body calls are found by binding that body again
(`callers_of`), so DROP FUNCTION also sees the functions that call it, in catalogs of any age.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError, UndefinedFunction
from piestream.expr.bind import arg_type, cast, coerce_to, no_such
from piestream.expr.coercion import CastContext
from piestream.expr.expr import Expr, InputRef
from piestream.expr.resolve import Ambiguous, resolve
from piestream.expr.signatures import Signature
from piestream.expr.udf import PythonUdfCall
from piestream.frontend.catalog import DEFAULT_DATABASE, CatalogReader, FunctionCatalog


@dataclass
class _Active:
    catalog: CatalogReader
    dependencies: set[int]
    inlining: tuple[int, ...] = ()  # SQL functions being inlined (a body calling itself is refused)


_ACTIVE: contextvars.ContextVar[_Active | None] = contextvars.ContextVar("user_functions", default=None)


@contextlib.contextmanager
def functions_of(catalog: CatalogReader, dependencies: set[int]) -> Iterator[None]:
    """Make `catalog`'s functions callable while binding (nested binders keep the outer one)."""
    if _ACTIVE.get() is not None:
        yield
        return
    token = _ACTIVE.set(_Active(catalog, dependencies))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def binding_database() -> str:
    """The database of the catalog being bound against (a four-part column reference names it)."""
    active = _ACTIVE.get()
    return str(getattr(active.catalog, "database", DEFAULT_DATABASE)) if active else DEFAULT_DATABASE


def bind_user_call(name: str, args: Sequence[Expr], position: int | None) -> Expr | None:
    """The bound call of user function `name`, or None when no user function has that name."""
    active = _ACTIVE.get()
    if active is None:
        return None
    functions = active.catalog.functions_named(name)
    if not functions:
        return None
    try:
        fn = _resolve(name, functions, args)
        call_args = tuple(coerce_to(a, t) for a, t in zip(args, fn.arg_types, strict=True))
        active.dependencies.add(fn.id)
        if fn.language == "python":
            return PythonUdfCall(
                fn.name, call_args, fn.return_type, fn.body, vectorized=fn.vectorized, strict=fn.strict
            )
        return _inline(active, fn, call_args)
    except PiestreamError as err:
        if err.position is None:
            err.position = position
        raise


def _resolve(name: str, functions: list[FunctionCatalog], args: Sequence[Expr]) -> FunctionCatalog:
    by_sig = {str(f.id): f for f in functions}
    cands = [Signature(f.arg_types, f.return_type, str(f.id)) for f in functions]
    try:
        sig = resolve(cands, [arg_type(a) for a in args], operator=False)
    except Ambiguous:
        raise UndefinedFunction(
            f"function {name} is not unique",
            sqlstate="42725",
            hint="You might need to add explicit type casts.",
        ) from None
    if sig is None:
        raise no_such(name, args)
    return by_sig[sig.impl]


def body_expression(fn: FunctionCatalog) -> exp.Expression:
    """The expression of a SQL function's ``SELECT expr`` body, parameters as column names
    (``$n`` rewritten to the n-th parameter's name); 0A000 for any other body."""
    from piestream.frontend.parser import Query, parse

    statements = parse(fn.body)
    query = statements[0].query if len(statements) == 1 and isinstance(statements[0], Query) else None
    if (
        not isinstance(query, exp.Select)
        or len(query.expressions) != 1
        or any(
            query.args.get(k)
            for k in (
                "from",
                "from_",
                "joins",
                "where",
                "group",
                "having",
                "order",
                "limit",
                "with",
                "with_",
                "distinct",
            )
        )
    ):
        raise FeatureNotSupported(
            f"the body of SQL function {fn.name} must be SELECT followed by one expression",
            hint="Functions reading tables, returning sets or running several statements are not supported.",
        )
    names = param_names(fn)
    body = query.expressions[0]
    if isinstance(body, exp.Alias):
        body = body.this

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter | exp.Placeholder):
            text = str(node.name or node.this or "").lstrip("$")
            if text.isdigit() and 1 <= int(text) <= len(names):
                return exp.column(exp.to_identifier(names[int(text) - 1], quoted=True))
        return node

    body = body.transform(rename)
    if fn.strict and names:
        is_null = [
            exp.Is(this=exp.column(exp.to_identifier(n, quoted=True)), expression=exp.Null()) for n in names
        ]
        cond: exp.Expression = is_null[0]
        for c in is_null[1:]:
            cond = exp.Or(this=cond, expression=c)
        body = exp.Case(ifs=[exp.If(this=cond, true=exp.Null())], default=body)
    return body


def param_names(fn: FunctionCatalog) -> list[str]:
    return [n or f"${i + 1}" for i, n in enumerate(fn.arg_names)]


def bind_body(fn: FunctionCatalog) -> Expr:
    """A SQL function's body bound over its parameters (InputRef i = parameter i), cast to the
    declared return type (PostgreSQL allows an assignment cast here)."""
    from piestream.frontend.binder.expr_binder import ExprBinder
    from piestream.frontend.binder.scope import Scope, ScopeColumn

    scope = Scope.of([ScopeColumn(None, n, t) for n, t in zip(param_names(fn), fn.arg_types, strict=True)])
    bound = ExprBinder(scope, context="SQL function bodies").bind(body_expression(fn))
    try:
        return cast(bound, fn.return_type, context=CastContext.ASSIGNMENT)
    except PiestreamError:
        from piestream.expr.coercion import type_name

        raise PiestreamError(
            f"return type mismatch in function declared to return {type_name(fn.return_type)}",
            sqlstate="42P13",
            detail=f"Actual return type is {type_name(bound.return_type)}.",
        ) from None


def _inline(active: _Active, fn: FunctionCatalog, args: tuple[Expr, ...]) -> Expr:
    if fn.id in active.inlining:
        raise FeatureNotSupported(f"recursive SQL function {fn.name} is not supported")
    active.inlining = (*active.inlining, fn.id)
    try:
        body = bind_body(fn)
    finally:
        active.inlining = active.inlining[:-1]

    def substitute(e: Expr) -> Expr | None:
        return args[e.index] if isinstance(e, InputRef) else None

    return body.transform_down(substitute)


def calls_of(catalog: CatalogReader, fn: FunctionCatalog) -> set[int]:
    """Ids of the user functions a SQL function's body calls, directly or through others
    (the body is bound as CREATE FUNCTION bound it; a body that no longer binds calls nothing)."""
    if fn.language != "sql":
        return set()
    calls: set[int] = set()
    token = _ACTIVE.set(_Active(catalog, calls, inlining=(fn.id,)))
    try:
        bind_body(fn)
    except PiestreamError:
        return set()
    finally:
        _ACTIVE.reset(token)
    return calls


def callers_of(
    catalog: CatalogReader, functions: Sequence[FunctionCatalog], ids: set[int]
) -> list[FunctionCatalog]:
    """The functions among `functions` (not in `ids`) whose bodies call one of `ids`."""
    return [f for f in functions if f.id not in ids and calls_of(catalog, f) & ids]
