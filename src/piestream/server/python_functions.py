"""Registering a Python function for SQL from the Python API (``@conn.function(...)``).

The decorator stores the function's *source text* (as CREATE FUNCTION ... LANGUAGE python
does), never a pickle: the source is read with `inspect`, the decorator lines are dropped, and
the catalog entry is the same one CREATE FUNCTION writes. So the function must be
self-contained — it runs in Spark workers where the notebook's globals do not exist: import
what it needs inside its body.

    @conn.function(returns="int")
    def count_char(s: str, c: str) -> int:
        return None if s is None else s.count(c)

SQL types come from `args` / `returns` (SQL type names) or else from the annotations
(str, int, float, bool, bytes, Decimal, date, datetime, and pyarrow.Array for vectorized
functions, which need explicit SQL types).
"""

from __future__ import annotations

import ast
import datetime as dt
import decimal
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from piestream.common.types import DataType, parse_type
from piestream.expr.coercion import type_name
from piestream.frontend.parser import ast as sql_ast

if TYPE_CHECKING:
    from piestream.server.session import Session

F = TypeVar("F", bound=Callable[..., Any])

_ANNOTATION_TYPES: dict[Any, str] = {
    str: "varchar",
    int: "bigint",
    float: "double precision",
    bool: "boolean",
    bytes: "bytea",
    decimal.Decimal: "numeric",
    dt.date: "date",
    dt.datetime: "timestamp",
}


def _sql_type(annotation: Any, what: str, fn_name: str) -> DataType:
    if isinstance(annotation, str):
        name = {t.__name__: v for t, v in _ANNOTATION_TYPES.items()}.get(annotation, annotation)
        return parse_type(name)
    if annotation in _ANNOTATION_TYPES:
        return parse_type(_ANNOTATION_TYPES[annotation])
    raise TypeError(
        f"give the SQL type of {what} of {fn_name}: its annotation {annotation!r} has no SQL type"
    )


def function_source(fn: Callable[..., Any]) -> str:
    """The source of `fn` without its decorators."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise TypeError(f"the source of {fn.__name__} is not available ({e}); use CREATE FUNCTION") from None
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise TypeError(f"{fn.__name__} is not a plain function definition")
    lines = source.splitlines()
    return "\n".join(lines[node.lineno - 1 :]) + "\n"  # from the ``def`` line: decorators sit above it


def create_statement(
    fn: Callable[..., Any],
    *,
    name: str | None,
    args: Sequence[str] | None,
    returns: str | None,
    vectorized: bool,
    strict: bool,
    replace: bool,
) -> sql_ast.CreateFunction:
    """The CREATE FUNCTION statement registering `fn`."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise TypeError(f"{fn.__name__}: only positional parameters can be SQL arguments")
    if args is not None and len(args) != len(params):
        raise TypeError(f"{fn.__name__} takes {len(params)} arguments, args gives {len(args)} types")
    arg_types = [
        parse_type(args[i])
        if args is not None
        else _sql_type(p.annotation, f"argument {p.name}", fn.__name__)
        for i, p in enumerate(params)
    ]
    ret = (
        parse_type(returns)
        if returns is not None
        else _sql_type(sig.return_annotation, "the result", fn.__name__)
    )
    source = function_source(fn)
    sql_name = (name or fn.__name__).lower()
    arg_list = ", ".join(f"{p.name} {type_name(t)}" for p, t in zip(params, arg_types, strict=True))
    text = (
        f"CREATE {'OR REPLACE ' if replace else ''}FUNCTION {sql_name}({arg_list}) RETURNS {type_name(ret)} "
        f"LANGUAGE python{' WITH (vectorized = true)' if vectorized else ''} AS $$\n{source}$$"
    )
    return sql_ast.CreateFunction(
        name=sql_name,
        args=[sql_ast.FunctionArg(p.name.lower(), t) for p, t in zip(params, arg_types, strict=True)],
        return_type=ret,
        language="python",
        body=source,
        or_replace=replace,
        strict=strict,
        with_options={"vectorized": "true"} if vectorized else {},
        text=text,
    )


def register(session: Session, fn: F, **options: Any) -> F:
    """Run the CREATE FUNCTION for `fn` in `session`; returns `fn` unchanged."""
    session.execute_statement(create_statement(fn, **options))
    return fn
