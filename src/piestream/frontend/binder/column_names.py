"""Output column names of select items, as PostgreSQL figures them (FigureColname).

A name comes from the user's SQL, never from sqlglot's transpiled form: a function is named as
written (`string_agg`, not sqlglot's GroupConcat; `ceiling`, not `ceil`), which the parser keeps
in the node's meta (`WRITTEN_NAME`). PostgreSQL's rules, with their strengths (a strong name
beats a cast's or CASE's weak one):

- column `t.x`, field `s.f`, subscript `a[1]` -> `x` / `f` / `a` (strong);
- function call, COALESCE / GREATEST / LEAST / NULLIF, ARRAY[...], ROW(...) -> its name (strong);
- `expr::type` -> the expression's name if strong, else the type's internal name (`int4`);
- CASE -> the ELSE result's name if strong, else `case`;
- anything else (operators, constants) -> `?column?`.
"""

from __future__ import annotations

from sqlglot import exp

from piestream.common.errors import PiestreamError
from piestream.frontend.parser.base import WRITTEN_NAME

UNNAMED = "?column?"

#: Internal names PostgreSQL shows for type names sqlglot keeps apart but piestream merges.
_TYPE_NAMES = {
    exp.DataType.Type.TEXT: "text",
    exp.DataType.Type.CHAR: "bpchar",
    exp.DataType.Type.NCHAR: "bpchar",
    exp.DataType.Type.JSON: "json",
}

_TRIM_NAMES = {"LEADING": "ltrim", "TRAILING": "rtrim"}


def output_name(e: exp.Expression) -> str:
    """The name of a select item's output column."""
    if isinstance(e, exp.Alias):
        return e.alias
    return _figure(e)[0]


def _figure(e: exp.Expression) -> tuple[str, int]:
    """(name, strength): 2 for a real name, 1 for a fallback (type name, `case`), 0 for none."""
    if isinstance(e, exp.Paren):
        return _figure(e.this)
    if isinstance(e, exp.Column):
        return e.name, 2
    if isinstance(e, exp.Dot):
        return e.expression.name, 2
    if isinstance(e, exp.Bracket):
        return _figure(e.this)
    if isinstance(e, exp.Window | exp.Filter):
        return _figure(e.this)
    if isinstance(e, exp.Cast):
        name, strength = _figure(e.this)
        return (name, strength) if strength > 1 else (_type_name(e.args["to"]), 1)
    if isinstance(e, exp.Interval):
        return "interval", 1
    if isinstance(e, exp.Case):
        default = e.args.get("default")
        name, strength = _figure(default) if default is not None else (UNNAMED, 0)
        return (name, strength) if strength > 1 else ("case", 1)
    if isinstance(e, exp.Tuple):
        return "row", 2
    if isinstance(e, exp.Trim):
        return _TRIM_NAMES.get(str(e.args.get("position") or "").upper(), "btrim"), 2
    written = e.meta.get(WRITTEN_NAME)
    if written:  # a call, also one sqlglot turns into an operator (mod(a, b) is a % b)
        return str(written), 2
    if isinstance(e, exp.Func):
        if isinstance(e, exp.Binary):  # an operator sqlglot spells as a function (~, ->, &&)
            return UNNAMED, 0
        return e.sql_name().lower(), 2
    return UNNAMED, 0


def _type_name(t: exp.DataType) -> str:
    """PostgreSQL's internal name of a written type (`int` is int4, `int[]` int4 too)."""
    while t.this == exp.DataType.Type.ARRAY and t.expressions and isinstance(t.expressions[0], exp.DataType):
        t = t.expressions[0]
    if t.this in _TYPE_NAMES:
        return _TYPE_NAMES[t.this]
    from piestream.frontend.binder.expr_binder import convert_type

    try:
        dt = convert_type(t)
    except PiestreamError:
        return t.sql("postgres").lower().split("(")[0]
    return dt.pg_typname.lstrip("_") if dt.kind.value != "struct" else "struct"
