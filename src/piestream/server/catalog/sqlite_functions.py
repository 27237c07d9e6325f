"""PostgreSQL's system functions as SQLite functions, with their result types.

``version()``, ``current_database()``, ``format_type``, ``pg_get_expr``, ``pg_table_is_visible``,
``obj_description``, ``has_table_privilege``, ``pg_encoding_to_char``, ``pg_get_viewdef`` ...
answer from one built catalog (its relations, types and session context); the rest are
constants or work on PostgreSQL's text form of arrays (``{a,b}``), which is how arrays are stored
in the emulated catalogs.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp

from piestream.common.composite_text import format_list, parse_list
from piestream.common.errors import InvalidInput, PiestreamError, UndefinedFunction
from piestream.common.types import VARCHAR, list_of
from piestream.frontend.catalog import FunctionCatalog, Relation, RelationKind
from piestream.meta.roles import Role
from piestream.server.catalog.objects import (
    INFORMATION_SCHEMA_NS,
    PG_CATALOG_NS,
    PUBLIC_NS,
    SUPERUSER_OID,
    VERSION_STRING,
    function_oid,
    index_stored_columns,
    indexdef,
    pk_names,
    pkey_indexdef,
    pkey_oid,
    rel_oid,
    view_query,
)
from piestream.server.catalog.pg_types import TypeRegistry, with_typmod
from piestream.server.catalog.rows import CatalogContext
from piestream.server.catalog.tables import CATALOG_BY_OID, CATALOG_OIDS

#: system functions and their result types (None: from the argument / the values)
FUNCTION_TYPES: dict[str, str] = {
    "version": "text",
    "current_database": "name",
    "current_schema": "name",
    "current_user": "name",
    "session_user": "name",
    "current_schemas": "text",
    "format_type": "text",
    "pg_get_expr": "text",
    "pg_table_is_visible": "bool",
    "pg_type_is_visible": "bool",
    "pg_function_is_visible": "bool",
    "obj_description": "text",
    "col_description": "text",
    "shobj_description": "text",
    "has_table_privilege": "bool",
    "has_schema_privilege": "bool",
    "has_database_privilege": "bool",
    "has_column_privilege": "bool",
    "pg_has_role": "bool",
    "pg_encoding_to_char": "name",
    "pg_get_userbyid": "name",
    "pg_get_viewdef": "text",
    "pg_get_indexdef": "text",
    "pg_get_constraintdef": "text",
    "pg_get_partkeydef": "text",
    "pg_relation_size": "int8",
    "pg_total_relation_size": "int8",
    "pg_table_size": "int8",
    "pg_indexes_size": "int8",
    "pg_database_size": "int8",
    "pg_size_pretty": "text",
    "array_to_string": "text",
    "pg_get_serial_sequence": "text",
    "to_regtype": "regtype",
    "to_regclass": "regclass",
    "current_setting": "text",
    "set_config": "text",
    "pg_backend_pid": "int4",
    "pg_is_in_recovery": "bool",
    "quote_ident": "text",
    "quote_literal": "text",
    "pg_relation_is_publishable": "bool",
    "pg_get_function_result": "text",
    "pg_get_function_arguments": "text",
    "pg_get_function_identity_arguments": "text",
    "pg_postmaster_start_time": "text",
    "txid_current": "int8",
    "pg_get_statisticsobjdef_columns": "text",
    "array_length": "int4",
    "array_upper": "int4",
    "array_lower": "int4",
    "cardinality": "int4",
    "json_build_object": "text",
    "pg_tablespace_location": "text",
    "regexp_i_like": "bool",
    "regexp_like": "bool",
    "array_contains_pg": "bool",
    "array_remove": "text",
    "array_pg": "text",
    "options_pg": "text",
    "regtype_array_pg": "_text",
    "regclass_array_pg": "_text",
    "array_positions_pg": "text",
    "array_item_pg": "text",
    "array_subscript_pg": "int4",
    "regclass_name": "text",
    "regproc_name": "text",
    "to_regproc_oid": "oid",
    "regtype_name": "text",
    "to_regclass_oid": "regclass",
    "to_regtype_oid": "regtype",
    "array_agg_pg": "text",
    "inet_server_addr": "text",
    "inet_server_port": "int4",
    "pg_get_keywords": "text",
    "pg_char_to_encoding": "int4",
    "pg_my_temp_schema": "oid",
    "pg_is_other_temp_schema": "bool",
    "pg_collation_is_visible": "bool",
    "pg_conversion_is_visible": "bool",
    "pg_get_triggerdef": "text",
    "pg_get_ruledef": "text",
    "pg_get_functiondef": "text",
    "acldefault": "text",
}


_TEXT_ARRAY = list_of(VARCHAR)


def _privilege_words(text: Any) -> frozenset[str]:
    """``'USAGE, CREATE'`` / ``'select with grant option'``: the privileges asked (any suffices)."""
    words = (w.strip().upper().removesuffix(" WITH GRANT OPTION") for w in str(text).split(","))
    return frozenset(w.strip() for w in words)


class SystemFunctions:
    """The system functions over one built catalog: its relations, types and session context."""

    def __init__(self, rels: list[Relation], types: TypeRegistry, ctx: CatalogContext) -> None:
        self._rels = rels
        self.types = types
        self.ctx = ctx
        #: an error a function raised that the client gets as it is (not as "not supported")
        self.error: PiestreamError | None = None

    def register(self, conn: sqlite3.Connection) -> None:
        """Make the system functions (and ``array_agg_pg``) callable in `conn`'s SQL."""
        ctx = self.ctx

        def const(value: Any) -> Callable[..., Any]:
            return lambda *args: value

        fns: dict[str, Callable[..., Any]] = {
            "version": const(VERSION_STRING),
            "current_database": const(ctx.database),
            "current_schema": const(next((n for n in ctx.search_path if n in ctx.schemas), None)),
            "current_user": const(ctx.user),
            "session_user": const(ctx.user),
            "current_schemas": lambda implicit=0: (
                "{"
                + ",".join(
                    [*(["pg_catalog"] if implicit else []), *(n for n in ctx.search_path if n in ctx.schemas)]
                )
                + "}"
            ),
            "format_type": self._format_type,
            "pg_get_expr": lambda e, *a: e,
            "pg_table_is_visible": self._table_is_visible,
            "pg_type_is_visible": const(1),
            "pg_function_is_visible": const(1),
            "pg_collation_is_visible": const(1),
            "pg_conversion_is_visible": const(1),
            "obj_description": self._obj_description,
            "col_description": self._col_description,
            "shobj_description": const(None),
            "has_table_privilege": self._has_table_privilege,
            "has_schema_privilege": self._has_schema_privilege,
            "has_database_privilege": const(1),
            "has_column_privilege": const(1),
            "pg_has_role": const(1),
            "pg_encoding_to_char": lambda n: "UTF8" if n == 6 else "SQL_ASCII",
            "pg_char_to_encoding": lambda s: 6,
            "pg_get_userbyid": lambda oid: ctx.user_name(int(oid)) if oid is not None else None,
            "pg_get_viewdef": self._viewdef,
            "pg_get_indexdef": self._indexdef,
            "pg_get_constraintdef": self._constraintdef,
            "pg_get_partkeydef": const(None),
            "pg_get_triggerdef": const(None),
            "pg_get_ruledef": const(None),
            "pg_get_functiondef": self._functiondef,
            # privileges are not kept as ACLs here: NULL acl columns mean "the default", so pg_dump
            # (which dumps the difference from acldefault) writes no GRANT / REVOKE
            "acldefault": const(None),
            "pg_relation_size": const(0),
            "pg_total_relation_size": const(0),
            "pg_table_size": const(0),
            "pg_indexes_size": const(0),
            "pg_database_size": const(0),
            "pg_size_pretty": _size_pretty,
            "pg_tablespace_location": const(""),
            "array_to_string": _array_to_string,
            "pg_get_serial_sequence": const(None),
            "to_regtype": self._to_regtype,
            "to_regclass": self._to_regclass,
            "to_regtype_oid": self._to_regtype,
            "to_regclass_oid": self._to_regclass,
            "regclass_name": self.regclass_name,
            "regproc_name": self._regproc_name,
            "to_regproc_oid": self._to_regproc_oid,
            "regtype_name": lambda oid: self.types.names.get(as_int(oid), None if oid is None else str(oid)),
            "current_setting": lambda name, *a: ctx.settings.get(str(name).lower()),
            "set_config": self._set_config,
            "pg_backend_pid": const(ctx.pid),
            "pg_is_in_recovery": const(0),
            "pg_my_temp_schema": const(0),
            "pg_is_other_temp_schema": const(0),
            "quote_ident": _quote_ident,
            "quote_literal": _quote_literal,
            "pg_relation_is_publishable": const(0),
            "pg_get_function_result": self._function_result,
            "pg_get_function_arguments": self._function_arguments,
            "pg_get_function_identity_arguments": self._function_arguments,
            "pg_get_statisticsobjdef_columns": const(None),
            "pg_postmaster_start_time": const(None),
            "txid_current": const(1),
            "inet_server_addr": const(None),
            "inet_server_port": const(None),
            "array_length": lambda a, d=1: _array_len(a),
            "array_upper": lambda a, d=1: _array_len(a),
            "array_lower": lambda a, d=1: 1 if _array_len(a) else None,
            "cardinality": lambda a: _array_len(a) or 0,
            "array_contains_pg": lambda arr, x: None if arr is None else int(str(x) in array_items(arr)),
            "array_remove": _array_remove,
            "array_pg": lambda *items: array_text(list(items)),
            "options_pg": _options,
            "regtype_array_pg": lambda arr: (
                None
                if arr is None
                else array_text([self.types.names.get(as_int(x), x) for x in array_items(arr)])
            ),
            "regclass_array_pg": lambda arr: (
                None if arr is None else array_text([self.regclass_name(x) for x in array_items(arr)])
            ),
            "array_positions_pg": _array_positions,
            "array_item_pg": _array_item,
            "array_subscript_pg": lambda arr, i: None if arr is None or i >= len(array_items(arr)) else i + 1,
            "json_build_object": lambda *a: json.dumps(dict(zip(a[::2], a[1::2], strict=False))),
            "regexp": lambda pattern, value: _regex(pattern, value, 0),
            "regexp_i_like": lambda value, pattern: _regex(pattern, value, re.IGNORECASE),
            "regexp_like": lambda value, pattern, *f: _regex(pattern, value, 0),
        }
        for name, fn in fns.items():
            conn.create_function(name, -1, fn, deterministic=False)
        conn.create_aggregate("array_agg_pg", -1, _ArrayAgg)  # type: ignore[arg-type]
        conn.create_aggregate("string_agg", 2, _StringAgg)  # type: ignore[arg-type]

    # -- system functions -------------------------------------------------------------------------
    def _rel(self, oid: Any) -> Relation | None:
        o = as_int(oid)
        return next((r for r in self._rels if rel_oid(r) == o), None)

    def _current_schemas(self, implicit: Any = 0) -> str:
        found = [n for n in self.ctx.search_path if n in self.ctx.schemas]
        return "{" + ",".join(["pg_catalog", *found] if implicit else found) + "}"

    # -- has_*_privilege: (object, privilege) or (role, object, privilege), as PostgreSQL ------------
    def _asker(self, args: tuple[Any, ...]) -> tuple[Role | None, tuple[Any, ...]]:
        """The role asked about (the current user's when not given) and the other arguments."""
        ctx = self.ctx
        who: Any = args[0] if len(args) == 3 else ctx.user
        rest = args[1:] if len(args) == 3 else args
        for r in ctx.roles:
            if r.name == who or (isinstance(who, int) and r.oid == who):
                return r, rest
        return None, rest

    def _has_schema_privilege(self, *args: Any) -> int | None:
        ctx = self.ctx
        role, (schema, privilege) = self._asker(args)
        if isinstance(schema, int):
            builtin = {PG_CATALOG_NS: "pg_catalog", INFORMATION_SCHEMA_NS: "information_schema"}
            schema = builtin.get(schema) or next((n for n, oid in ctx.schemas.items() if oid == schema), None)
        if schema is None:
            return None
        wanted = _privilege_words(privilege)
        if schema in ("pg_catalog", "information_schema"):
            return int("USAGE" in wanted)
        if schema not in ctx.schemas:
            return None
        if role is None:
            return 0 if ctx.roles else 1
        owner = ctx.schema_owners.get(schema, SUPERUSER_OID)
        acl = ctx.schema_acls.get(schema, {})
        held = acl.get(role.oid, frozenset()) | acl.get(0, frozenset())
        return int(role.superuser or role.oid == owner or bool(wanted & held))

    def _has_table_privilege(self, *args: Any) -> int | None:
        ctx = self.ctx
        role, (table, privilege) = self._asker(args)
        rel = self._rel(table) if isinstance(table, int) else self._rel_named(str(table))
        if rel is None:
            return None
        if role is None:
            return 0 if ctx.roles else 1
        acl = ctx.acls.get(rel.id, {})
        held = acl.get(role.oid, frozenset()) | acl.get(0, frozenset())
        owner = ctx.owners.get(rel.id, SUPERUSER_OID)
        return int(role.superuser or role.oid == owner or bool(_privilege_words(privilege) & held))

    def _rel_named(self, name: str) -> Relation | None:
        """A relation as a (maybe schema-qualified) name names it, through search_path."""
        schema, _, rel = name.rpartition(".")
        for r in self._rels:
            if r.name == rel and (
                r.schema_name == schema or (not schema and self.ctx.visible(r, self._rels))
            ):
                return r
        return None

    def _table_is_visible(self, oid: Any) -> int:
        rel = self._rel(oid)  # a catalog table's (or a primary key index's) oid: visible
        return 1 if rel is None or self.ctx.visible(rel, self._rels) else 0

    def _format_type(self, oid: Any, typmod: Any = None) -> str | None:
        if oid is None:
            return None
        name = self.types.names.get(as_int(oid), "???")
        return name if typmod is None else with_typmod(name, as_int(typmod))

    def _function(self, oid: Any) -> FunctionCatalog | None:
        o = as_int(oid)
        return next((f for f in self.ctx.functions if function_oid(f) == o), None)

    def _regproc_name(self, oid: Any) -> str | None:
        if oid is None:
            return None
        f = self._function(oid)
        return f.name if f is not None else ("-" if as_int(oid) == 0 else str(oid))

    def _to_regproc_oid(self, name: Any) -> int | None:
        """``'f'::regproc`` / ``'s.f(int)'::regprocedure``: the function's oid (42883 if none)."""
        text = str(name).split("(", 1)[0].strip()
        schema, _, fname = text.rpartition(".")
        found = [
            f
            for f in self.ctx.functions
            if f.name == fname.strip('"') and (not schema or f.schema_name == schema.strip('"'))
        ]
        if len(found) != 1:
            self.error = (
                UndefinedFunction(f'function "{text}" does not exist')
                if not found
                else PiestreamError(f'more than one function named "{text}"', sqlstate="42725")
            )
            raise self.error
        return function_oid(found[0])

    def _functiondef(self, oid: Any) -> str | None:
        r"""PostgreSQL's pg_get_functiondef layout (psql \sf)."""
        f = self._function(oid)
        if f is None:
            return None
        strict = " STRICT\n" if f.strict else ""
        schema = _quote_ident(f.schema_name)
        return (
            f"CREATE OR REPLACE FUNCTION {schema}.{_quote_ident(f.name)}({self._function_arguments(oid)})\n"
            f" RETURNS {self._function_result(oid)}\n LANGUAGE {f.language}\n{strict}"
            f"AS $function${f.body}$function$\n"
        )

    def _function_result(self, oid: Any) -> str | None:
        f = self._function(oid)
        return None if f is None else self._format_type(self.types.oid_of(f.return_type))

    def _function_arguments(self, oid: Any) -> str | None:
        """``a integer, b character varying`` (an unnamed argument: its type alone)."""
        f = self._function(oid)
        if f is None:
            return None
        types = [self._format_type(self.types.oid_of(t)) or "" for t in f.arg_types]
        names = list(f.arg_names) + [""] * len(types)
        return ", ".join(f"{_quote_ident(n)} {t}" if n else t for n, t in zip(names, types, strict=False))

    def _set_config(self, name: Any, value: Any, is_local: Any = 0) -> Any:
        """set_config(name, value, false) changes the session's setting, as SET does (pg_dump's
        ``set_config('search_path', '', false)``); a transaction-local one is refused."""
        if is_local:
            raise ValueError("set_config(..., true) is not supported")
        if self.ctx.set_setting is None:
            raise ValueError("set_config is not supported here")
        self.ctx.set_setting(str(name), "" if value is None else str(value))
        return value

    def _obj_description(self, oid: Any, catalog: Any = None) -> str | None:
        if as_int(oid) == PUBLIC_NS and str(catalog) == "pg_namespace":
            return "standard public schema"  # initdb's (catalog.rows' pg_description row)
        rel = self._rel(oid) if oid is not None else None
        return None if rel is None else rel.comment

    def _col_description(self, oid: Any, attnum: Any) -> str | None:
        rel = self._rel(oid) if oid is not None else None
        if rel is None or attnum is None:
            return None
        cols = rel.visible_columns  # attnums number the visible columns (`catalog.rows`)
        n = as_int(attnum)
        return cols[n - 1].comment if 1 <= n <= len(cols) else None

    def _viewdef(self, oid: Any, pretty: Any = None) -> str | None:
        rel = self._rel(oid)
        if rel is None:
            return None
        return self._qualified(rel, view_query(rel))

    def _qualified(self, rel: Relation, text: str) -> str:
        """A view's / MV's query with the relations it reads schema-qualified where their schema
        is not on the search_path (PostgreSQL's pg_get_viewdef does so; pg_dump sets an empty
        search_path, so its dump restores whatever search_path the restore runs with). Names are
        resolved through what the relation depends on; the rest of the text stays as written."""
        deps = [r for r in self._rels if r.id in rel.depends_on]
        try:
            tree = sqlglot.parse_one(text.rstrip().rstrip(";"), read="postgres")
        except sqlglot.errors.SqlglotError:
            return text
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        inserts: list[tuple[int, str]] = []
        for t in tree.find_all(exp.Table):
            ident = t.this
            if t.db or not isinstance(ident, exp.Identifier) or t.name.lower() in ctes:
                continue
            start = ident.meta.get("start")
            found = {r.schema_name for r in deps if r.name == t.name}
            if start is None or len(found) != 1:
                continue
            schema = found.pop()
            if schema not in self.ctx.search_path:
                inserts.append((int(start), _quote_ident(schema) or schema))
        for f in tree.find_all(exp.Anonymous):  # TUMBLE(t, ...) / HOP(t, ...): its relation argument
            arg = f.expressions[0] if f.name.lower() in ("tumble", "hop") and f.expressions else None
            if not isinstance(arg, exp.Column) or arg.table or arg.name.lower() in ctes:
                continue
            start = arg.this.meta.get("start")
            found = {r.schema_name for r in deps if r.name == arg.name}
            if start is not None and len(found) == 1 and (schema := found.pop()) not in self.ctx.search_path:
                inserts.append((int(start), _quote_ident(schema) or schema))
        for at, schema in sorted(inserts, reverse=True):
            text = text[:at] + schema + "." + text[at:]
        return text

    def _indexdef(self, oid: Any, column: Any = 0, pretty: Any = None) -> str | None:
        o, k = as_int(oid), as_int(column or 0)
        for r in self._rels:
            if rel_oid(r) == o and r.kind is RelationKind.INDEX:
                if k > 0:  # the k-th indexed column's definition: its name
                    stored = index_stored_columns(r)
                    return _quote_ident(stored[k - 1]) if k <= len(stored) else None
                base = next((b for b in self._rels if r.index is not None and b.id == r.index.index_of), None)
                return r.definition if base is None else indexdef(r, base)
            if pkey_oid(r) == o:
                if k > 0:
                    names = pk_names(r).split(", ")
                    return _quote_ident(names[k - 1]) if k <= len(names) else None
                return pkey_indexdef(r)
        return None

    def _constraintdef(self, oid: Any, pretty: Any = None) -> str | None:
        o = as_int(oid)
        r = next((r for r in self._rels if pkey_oid(r) == o), None)
        return None if r is None else f"PRIMARY KEY ({pk_names(r)})"

    def _to_regclass(self, name: Any) -> int | None:
        if name is None:
            return None
        if isinstance(name, int):
            return name
        text = str(name).strip()
        if text.isdigit():
            return int(text)
        parts = [p.strip().strip('"') for p in text.split(".")]
        name, schema = parts[-1], (parts[-2] if len(parts) > 1 else None)
        if schema in ("pg_catalog", "information_schema") or (schema is None and name in CATALOG_OIDS):
            return CATALOG_OIDS.get(name)
        for r in self._rels:  # a relation, or a table's primary key index (``t_pkey``)
            schema_ok = r.schema_name == schema if schema is not None else self.ctx.visible(r, self._rels)
            if not schema_ok:
                continue
            if r.name == name:
                return rel_oid(r)
            if name == f"{r.name}_pkey" and pkey_oid(r) is not None:
                return pkey_oid(r)
        return None

    def regclass_name(self, oid: Any) -> str | None:
        if oid is None:
            return None
        rel = self._rel(oid)
        if rel is not None:  # as regclass_out prints it: qualified when not on the search_path
            return rel.name if self.ctx.visible(rel, self._rels) else f"{rel.schema_name}.{rel.name}"
        pk = next((r for r in self._rels if pkey_oid(r) == as_int(oid)), None)
        if pk is not None:
            return f"{pk.name}_pkey"
        return CATALOG_BY_OID.get(as_int(oid), str(oid))

    def _to_regtype(self, name: Any) -> int | None:
        if name is None:
            return None
        if isinstance(name, int):
            return name
        text = str(name).strip().lower()
        if text.isdigit():
            return int(text)
        text = text.removeprefix("pg_catalog.").strip('"')
        return self.types.by_name.get(text)


def as_int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def _regex(pattern: Any, value: Any, flags: int) -> int | None:
    if pattern is None or value is None:
        return None
    try:
        return int(re.search(str(pattern), str(value), flags) is not None)
    except re.error:
        raise ValueError(f"invalid regular expression: {pattern}") from None


def array_items(arr: Any) -> list[str]:
    """The elements of an array's text: ``{a,"b c",NULL}`` (array_out's form) or an int2vector's /
    oidvector's ``1 2``; a NULL element is the text ``NULL``."""
    text = str(arr).strip()
    if text.startswith("{") and text.endswith("}"):
        try:
            items = parse_list(text, _TEXT_ARRAY, lambda s, t: s)
        except InvalidInput:
            return [x.strip().strip('"') for x in text[1:-1].split(",")] if text[1:-1] else []
        return ["NULL" if x is None else str(x) for x in items]
    return text.split()


def array_text(items: list[Any]) -> str:
    """array_out's text of a 1-D array of `items` (None: NULL), quoting what needs quotes."""
    return format_list(items, _TEXT_ARRAY, lambda v, t: str(v))


def _array_len(arr: Any) -> int | None:
    if arr is None:
        return None
    n = len(array_items(arr))
    return n or None


def _array_positions(*arrays: Any) -> str:
    """The 0-based positions a select list's set-returning calls run over, as JSON for json_each:
    as many as the longest array has elements (a NULL array has none)."""
    return json.dumps(list(range(max((len(array_items(a)) for a in arrays if a is not None), default=0))))


def _array_item(arr: Any, i: int) -> Any:
    """`arr`'s element at 0-based `i`, NULL past its end; integers as integers (int2vector, oid[])."""
    items = [] if arr is None else array_items(arr)
    if i >= len(items):
        return None
    item = items[i]
    if item == "NULL":
        return None
    return (
        int(item)
        if (item.lstrip("-").isdigit() and not item.lstrip("-").startswith("0")) or item == "0"
        else item
    )


def _array_remove(arr: Any, x: Any) -> str | None:
    """PostgreSQL's ``array_remove``: NULL stays NULL, every element equal to `x` goes."""
    if arr is None:
        return None
    return array_text([i for i in array_items(arr) if x is None or i != str(x)])


def _array_to_string(arr: Any, sep: Any, null: Any = None) -> str | None:
    if arr is None:
        return None
    return str(sep).join(array_items(arr))


def _quote_literal(s: Any) -> str | None:
    """PostgreSQL's quote_literal: quotes doubled, and E'' with doubled backslashes if any."""
    if s is None:
        return None
    text = str(s).replace("'", "''")
    if "\\" in text:
        return "E'" + text.replace("\\", "\\\\") + "'"
    return "'" + text + "'"


def _options(arr: Any) -> str | None:
    """``ARRAY(SELECT quote_ident(option_name) || ' ' || quote_literal(option_value) FROM
    pg_options_to_table(arr) ORDER BY option_name)`` for an options array (``{name=value,...}``)."""
    if arr is None:
        return None
    pairs = sorted(item.partition("=")[::2] for item in array_items(arr))
    return array_text([f"{_quote_ident(k)} {_quote_literal(v)}" for k, v in pairs])


def _quote_ident(s: Any) -> str | None:
    if s is None:
        return None
    text = str(s)
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", text):
        return text
    return '"' + text.replace('"', '""') + '"'


def _size_pretty(n: Any) -> str | None:
    if n is None:
        return None
    size = float(n)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if abs(size) < 10 * 1024 or unit == "TB":
            return f"{int(size)} {unit}"
        size /= 1024
    return f"{int(size)} TB"


class _ArrayAgg:
    """array_agg as PostgreSQL's text form of the array (``{a,b}``); arguments after the value are
    its ORDER BY keys (ascending, NULLs last, as PostgreSQL's default)."""

    def __init__(self) -> None:
        self.items: list[tuple[tuple[Any, ...], Any]] = []

    def step(self, value: Any, *keys: Any) -> None:
        self.items.append((tuple((k is None, k) for k in keys), value))

    def finalize(self) -> str:
        ordered = sorted(self.items, key=lambda kv: kv[0])
        return array_text([v for _, v in ordered])


class _StringAgg:
    """string_agg(value, delimiter): SQLite 3.40 has only group_concat; NULL values are skipped."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.sep = ""

    def step(self, value: Any, sep: Any) -> None:
        if value is not None:
            self.items.append(str(value))
            self.sep = "" if sep is None else str(sep)

    def finalize(self) -> str | None:
        return self.sep.join(self.items) if self.items else None
