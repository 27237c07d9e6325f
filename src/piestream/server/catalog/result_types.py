"""The names and types of a catalog query's result columns, and its rows in the engine's types.

SQLite's rows carry no column types, so the types come from the query: the catalog column a
result column reads, the return type of the system function it calls, or the type it is cast to
(`describe`); values the query does not type are guessed from the rows. Booleans then arrive as
``t``/``f``, oids as integers and regclass / regtype values as names, as clients expect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlglot import exp

from piestream.common.types import BIGINT, BOOLEAN, DOUBLE, INT, REAL, SMALLINT, VARCHAR, DataType, list_of
from piestream.server.catalog.routing import func_name, type_name
from piestream.server.catalog.sqlite_functions import FUNCTION_TYPES, SystemFunctions, array_items, as_int
from piestream.server.catalog.tables import INFO_TABLES, TABLES, table_columns

#: pg type name -> the engine type a result column of it is sent as
_RESULT_TYPE: dict[str, DataType] = {
    "bool": BOOLEAN,
    "int2": SMALLINT,
    "int4": INT,
    "int8": BIGINT,
    "oid": BIGINT,
    "float4": REAL,
    "float8": DOUBLE,
    "regclass": VARCHAR,
    "regtype": VARCHAR,
}


#: what a FROM item's alias names: a catalog table, or a derived table's (column, type) list
Scope = str | list[tuple[str, str | None]]

#: element types an emulated array result column can have
_ARRAY_ELEMS = frozenset({"bool", "int2", "int4", "int8", "oid", "float4", "float8", "text", "name"})


def describe(tree: exp.Expr) -> tuple[list[str], list[str | None]]:
    """The result column names of a query and their PostgreSQL type names (None: not known)."""
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if isinstance(select, exp.Subquery):
        select = select.this
    if not isinstance(select, exp.Select):
        return [], []
    tables = _scope_tables(select)
    names: list[str] = []
    types: list[str | None] = []
    for e in select.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            qual = e.table if isinstance(e, exp.Column) else ""
            for alias, table in tables.items():
                if qual and alias != qual.lower():
                    continue
                for c, t in _columns_of(table):
                    names.append(c)
                    types.append(t)
            continue
        names.append(_output_name(e))
        types.append(_expr_type(e, tables))
    return names, types


def _expr_type(e: exp.Expression, tables: dict[str, Scope]) -> str | None:
    if isinstance(e, exp.Alias | exp.Paren | exp.Collate):
        return _expr_type(e.this, tables)
    if isinstance(e, exp.Column):
        return _column_type(e, tables)
    if isinstance(e, exp.Cast):
        target = type_name(e.args["to"])
        return {
            "integer": "int4",
            "int": "int4",
            "smallint": "int2",
            "bigint": "int8",
            "boolean": "bool",
            "real": "float4",
            "double precision": "float8",
            "character varying": "text",
            "varchar": "text",
            "name": "name",
            "text": "text",
            "oid": "oid",
            "regclass": "regclass",
            "regtype": "regtype",
            "int2": "int2",
            "int4": "int4",
            "int8": "int8",
            "bool": "bool",
            "char": "char",
            "float4": "float4",
            "float8": "float8",
            "regtype[]": "_text",
            "regclass[]": "_text",
        }.get(target, "text")
    if isinstance(
        e,
        exp.EQ
        | exp.NEQ
        | exp.GT
        | exp.GTE
        | exp.LT
        | exp.LTE
        | exp.And
        | exp.Or
        | exp.Not
        | exp.Is
        | exp.In
        | exp.Like
        | exp.ILike
        | exp.Exists
        | exp.Boolean
        | exp.RegexpLike
        | exp.RegexpILike
        | exp.Between,
    ):
        return "bool"
    if isinstance(e, exp.Operator):
        return "bool"
    if isinstance(e, exp.Literal):
        return "text" if e.is_string else ("int4" if e.is_int else "float8")
    if isinstance(e, exp.Null):
        return "text"
    if isinstance(e, exp.Case):
        for branch in e.args.get("ifs") or []:
            t = _expr_type(branch.args["true"], tables)
            if t is not None and not (isinstance(branch.args["true"], exp.Null)):
                return t
        default = e.args.get("default")
        return _expr_type(default, tables) if default is not None else "text"
    if isinstance(e, exp.Coalesce):
        return _expr_type(e.this, tables)
    if isinstance(e, exp.Count):
        return "int8"
    if isinstance(e, exp.Anonymous) and str(e.name).lower() == "array_agg" and len(e.expressions) == 1:
        e = exp.ArrayAgg(this=e.expressions[0])  # pg_catalog.array_agg(...) parses as a call
    if isinstance(e, exp.ArrayAgg):  # an array of its argument's type
        arg = e.this.this if isinstance(e.this, exp.Order) else e.this
        elem = _expr_type(arg, tables) or "text"
        return "_" + (elem if elem in _ARRAY_ELEMS else "text")
    if isinstance(e, exp.Explode | exp.Unnest):  # an element of the array it reads
        array = e.this if isinstance(e, exp.Explode) else (e.expressions or [None])[0]
        t = _expr_type(array, tables) if array is not None else None
        return {"int2vector": "int2", "oidvector": "oid"}.get(t or "", t[1:] if t and t[0] == "_" else None)
    if isinstance(e, exp.Anonymous) and str(e.name).lower() == "generate_subscripts":
        return "int4"
    if isinstance(e, exp.Sum | exp.Min | exp.Max):
        return _expr_type(e.this, tables)
    if isinstance(e, exp.DPipe | exp.Concat | exp.GroupConcat | exp.Upper | exp.Lower | exp.Substring):
        return "text"
    if isinstance(e, exp.Subquery):
        inner = e.this
        if isinstance(inner, exp.Select) and inner.expressions:
            return _expr_type(inner.expressions[0], {**tables, **_scope_tables(inner)})
        return None
    if isinstance(e, exp.Dot):
        return _expr_type(e.expression, tables)
    name = func_name(e)
    if name is not None:
        return FUNCTION_TYPES.get(name)
    return None


def convert(
    names: list[str],
    types: list[str | None],
    raw: list[tuple[Any, ...]],
    functions: SystemFunctions,
) -> tuple[list[tuple[str, DataType]], list[tuple[Any, ...]]]:
    """The result columns in engine types and SQLite's rows converted to them; a column whose
    values do not convert is sent as text."""
    columns: list[tuple[str, DataType]] = []
    converters: list[Callable[[Any], Any]] = []
    for i, (name, t) in enumerate(zip(names, types, strict=True)):
        values = [r[i] for r in raw if i < len(r)]
        pg = t or _guess(values)
        dtype, conv = _converter(pg, functions)
        try:
            for v in values:
                conv(v)
        except (TypeError, ValueError):
            dtype, conv = VARCHAR, _to_text
        columns.append((name, dtype))
        converters.append(conv)
    rows = [tuple(c(v) for c, v in zip(converters, r, strict=False)) for r in raw]
    return columns, rows


def _converter(pg: str, functions: SystemFunctions) -> tuple[DataType, Callable[[Any], Any]]:
    if pg[:1] == "_" and pg[1:] in _ARRAY_ELEMS:  # an array, from its text ``{a,b}``
        elem, conv = _converter(pg[1:], functions)

        def to_list(v: Any) -> list[Any] | None:
            return None if v is None else [None if x == "NULL" else conv(x) for x in array_items(v)]

        return list_of(elem), to_list
    if pg == "bool":
        return BOOLEAN, _to_bool
    if pg in ("int2", "int4", "int8", "oid"):
        return _RESULT_TYPE[pg], _to_int
    if pg in ("float4", "float8"):
        return _RESULT_TYPE[pg], lambda v: None if v is None else float(v)
    if pg == "regclass":
        return VARCHAR, functions.regclass_name
    if pg == "regtype":
        return VARCHAR, lambda v: None if v is None else functions.types.names.get(as_int(v), str(v))
    return VARCHAR, _to_text


def _scope_tables(select: exp.Select) -> dict[str, Scope]:
    """alias (lower case) -> catalog table name (or a derived table's typed columns), for the FROM
    and JOINs of one SELECT level."""
    out: dict[str, Scope] = {}
    sources: list[exp.Expression] = []
    from_ = select.args.get("from") or select.args.get("from_")
    if from_ is not None:
        sources.append(from_.this)
        sources.extend(from_.expressions or [])
    sources.extend(j.this for j in select.args.get("joins") or [])
    for s in sources:
        if isinstance(s, exp.Table) and isinstance(s.this, exp.Identifier):
            out[(s.alias or s.name).lower()] = s.name.lower()
        elif isinstance(s, exp.Subquery) and s.alias:  # a derived table: its columns' types
            names, types = describe(s.this)
            out[s.alias.lower()] = list(zip(names, types, strict=True))
    return out


def _columns_of(table: Scope) -> list[tuple[str, str | None]]:
    return list(table_columns(table)) if isinstance(table, str) else table


def _column_type(col: exp.Column, tables: dict[str, Scope]) -> str | None:
    name = col.name.lower()
    qual = col.table.lower() if col.table else ""
    candidates = (
        [tables[qual]]
        if qual in tables
        else ([qual] if qual in TABLES or qual in INFO_TABLES else list(tables.values()))
    )
    for table in candidates:
        for c, t in _columns_of(table):
            if c.lower() == name:
                return t
    return None


def _output_name(e: exp.Expression) -> str:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Dot):
        return _output_name(e.expression)
    if isinstance(e, exp.Cast):
        inner = _output_name(e.this)
        return inner if inner != "?column?" else type_name(e.args["to"])
    if isinstance(e, exp.Explode | exp.Unnest):
        return "unnest"
    name = func_name(e)
    if name is not None:
        return name
    return "?column?"


def _to_int(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return int(v)


def _to_bool(v: Any) -> bool | None:
    if v is None:
        return None
    if isinstance(v, str):
        if v.lower() in ("t", "true", "1", "on", "yes"):
            return True
        if v.lower() in ("f", "false", "0", "off", "no", ""):
            return False
        raise ValueError(v)
    return bool(v)


def _to_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _guess(values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) for v in present):
        return "int8"
    if present and all(isinstance(v, int | float) for v in present):
        return "float8"
    return "text"
