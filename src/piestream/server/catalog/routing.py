"""Which queries are catalog queries: the ones that read system catalogs or call system
functions, and read no user relation.

Such queries run over the emulated catalogs (``CatalogViews``); every other query goes to the
engine. The same names decide how a query is rewritten and typed, so the sqlglot spellings of
system functions and cast targets live here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from piestream.server.catalog.sqlite_functions import FUNCTION_TYPES
from piestream.server.catalog.tables import CATALOG_TABLE_NAMES

#: typed sqlglot nodes that are system functions, by the name they get here
TYPED_FUNCS: dict[type[exp.Expr], str] = {
    exp.CurrentVersion: "version",
    exp.CurrentDatabase: "current_database",
    exp.CurrentSchema: "current_schema",
    exp.CurrentUser: "current_user",
    exp.SessionUser: "session_user",
    exp.CurrentSchemas: "current_schemas",
    exp.ArrayToString: "array_to_string",
}
for _name in ("CurrentCatalog",):
    if hasattr(exp, _name):
        TYPED_FUNCS[getattr(exp, _name)] = "current_database"

#: functions in FUNCTION_TYPES that ordinary queries use too: they do not make a query a catalog query
_GENERIC_FUNCS = frozenset(
    {
        "array_to_string",
        "array_remove",
        "array_length",
        "array_upper",
        "array_lower",
        "cardinality",
        "quote_ident",
        "quote_literal",
        "json_build_object",
        "regexp_like",
    }
)
#: casts to these types only make sense against the catalogs
_OID_TYPES = frozenset({"oid", "regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole"})
_CATALOG_WORDS = re.compile(
    r"\b(pg_catalog|information_schema|pg_[a-z_]+|version\s*\(|current_database|current_schemas?|format_type"
    r"|obj_description|col_description|has_[a-z_]+_privilege)\b|::\s*reg(?:type|class|proc|namespace|role)\b",
    re.IGNORECASE,
)


# -- which queries are catalog queries ---------------------------------------------------------


def looks_like_catalog(sql: str) -> bool:
    """A cheap textual test for SQL the engine could not parse (psql's OPERATOR(pg_catalog.~) ...)."""
    return bool(_CATALOG_WORDS.search(sql))


def func_name(node: exp.Expr) -> str | None:
    if type(node) in TYPED_FUNCS:
        return TYPED_FUNCS[type(node)]
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return None


def is_catalog_query(tree: exp.Expression, user_relations: Callable[[str], bool]) -> bool:
    """Whether a parsed query reads system catalogs or calls system functions, and no user relation.

    `user_relations(name)` says whether a (CTE-less) table name is a piestream relation.
    """
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    system = False
    for t in tree.find_all(exp.Table):
        name = t.name.lower()
        schema = t.db.lower() if t.db else ""
        if schema in ("pg_catalog", "information_schema"):
            system = True
        elif not schema and name in ctes:
            continue
        elif not schema and name in CATALOG_TABLE_NAMES and not user_relations(name):
            system = True
        elif not isinstance(t.this, exp.Identifier):
            continue  # a table function
        else:
            return False  # a user relation: the engine answers
    if system:
        return True
    for node in tree.walk():
        if (
            isinstance(node, exp.Dot)
            and isinstance(node.this, exp.Identifier)
            and node.this.name.lower() == "pg_catalog"
        ):
            return True
        fname = func_name(node)
        if fname is not None and fname in FUNCTION_TYPES and fname not in _GENERIC_FUNCS:
            return True
        if isinstance(node, exp.Cast) and type_name(node.args["to"]) in _OID_TYPES:
            return True
    return False


def type_name(node: exp.Expression) -> str:
    """A cast target's PostgreSQL type name, lower case, without ``pg_catalog.``."""
    if isinstance(node, exp.DataType):
        kind = node.args.get("kind")
        if isinstance(kind, exp.Dot):
            return str(kind.expression.name).lower()
        if node.this == exp.DataType.Type.USERDEFINED and kind is not None:
            return (
                str(kind.name if isinstance(kind, exp.Expression) else kind)
                .lower()
                .removeprefix("pg_catalog.")
            )
        text = node.sql("postgres").lower()
    else:
        text = node.sql("postgres").lower()
    text = text.removeprefix("pg_catalog.").strip('"')
    return {
        "int": "integer",
        "int2": "smallint",
        "int8": "bigint",
        "int4": "integer",
        "bool": "boolean",
        "float8": "double precision",
        "float4": "real",
    }.get(text, text)
