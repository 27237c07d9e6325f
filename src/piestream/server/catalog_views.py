"""pg_catalog and information_schema, emulated so that PostgreSQL clients can look around.

psql's ``\\dt`` / ``\\d name`` / ``\\l``, SQLAlchemy's inspector and pandas ask the server about
itself with SQL over PostgreSQL's system catalogs. piestream answers those queries with real SQL,
executed by SQLite (stdlib) over an in-memory copy of the catalogs built from the piestream
catalog:

* ``pg_catalog`` (an attached SQLite database) holds ``pg_namespace``, ``pg_class``,
  ``pg_attribute``, ``pg_type``, ``pg_database``, ``pg_index``, ``pg_constraint``,
  ``pg_description``, ``pg_am``, ``pg_roles``/``pg_user``, ``pg_settings``, ``pg_tables``,
  ``pg_views``, ``pg_matviews``, ``pg_indexes``, ``pg_stat_activity`` and empty versions of the
  catalogs psql probes for features piestream does not have (triggers, policies, publications,
  inheritance, ...). ``information_schema`` holds ``tables``, ``columns``, ``schemata``, ``views``.
* The PostgreSQL query is parsed by sqlglot and rewritten for SQLite: ``OPERATOR(pg_catalog.~)`` and
  ``~`` become a regex function, ``COLLATE`` goes, ``x::regclass`` / ``::regtype`` / ``::oid`` casts
  become lookups, ``= ANY(ARRAY[...])`` becomes ``IN``, ``$n`` becomes ``?n``, and system functions
  (``version()``, ``current_database()``, ``format_type``, ``pg_get_expr``, ``pg_table_is_visible``,
  ``obj_description``, ``has_table_privilege``, ``pg_encoding_to_char``, ``pg_get_viewdef`` ...) are
  SQLite functions.
* Result column types come from the catalog column types and the functions' return types, so
  booleans arrive as ``t``/``f`` and oids as integers, as clients expect.

Relations piestream stores: tables are ``r``, materialized views ``m``, views ``v``, indexes ``i``,
sources ``f`` (foreign tables: their rows live outside). A table's user-declared primary key is a
``p`` constraint with its index ``<table>_pkey``. OIDs are piestream object ids + 16384.

A catalog query that SQLite cannot run (set-returning functions such as ``unnest`` over arrays,
PostgreSQL features with no counterpart here) and that reads only system catalogs answers with
no rows: every such query asks about something piestream does not have (publications, policies,
extended statistics, array-valued keys), so "none" is the true answer for all of them. A query
that also reads user relations never goes here: the engine runs it.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from piestream.common.errors import SyntaxError_
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INT,
    REAL,
    SCALAR_TYPES,
    SMALLINT,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
)
from piestream.frontend.catalog import Relation, RelationKind
from piestream.server.results import QueryResult

log = logging.getLogger(__name__)

OID_OFFSET = 16384
PG_CATALOG_NS = 11
PUBLIC_NS = 2200
INFORMATION_SCHEMA_NS = 13183
PG_TOAST_NS = 99
SUPERUSER_OID = 10
DATABASE_OID = 16384 - 1
HEAP_AM, BTREE_AM = 2, 403
FOREIGN_SERVER_OID = 16383 - 100  # the one "server" every source reads through
SERVER_VERSION = "13.14.0"
VERSION_STRING = (
    f"PostgreSQL {SERVER_VERSION}-piestream on x86_64-pc-linux-gnu, compiled by piestream (Python)"
)

_KIND_CHAR = {
    RelationKind.TABLE: "r",
    RelationKind.MATERIALIZED_VIEW: "m",
    RelationKind.VIEW: "v",
    RelationKind.INDEX: "i",
    RelationKind.SOURCE: "f",
}


def rel_oid(rel: Relation) -> int:
    return rel.id + OID_OFFSET


# -- types -------------------------------------------------------------------------------------

#: PostgreSQL types that are not piestream types but appear in the catalogs: (oid, name, len, category)
_EXTRA_TYPES: list[tuple[int, str, int, str, str]] = [
    (19, "name", 64, "S", "name"),
    (25, "text", -1, "S", "text"),
    (18, "char", 1, "S", '"char"'),
    (26, "oid", 4, "N", "oid"),
    (22, "int2vector", -1, "A", "int2vector"),
    (30, "oidvector", -1, "A", "oidvector"),
    (114, "json", -1, "U", "json"),
    (705, "unknown", -2, "X", "unknown"),
    (1042, "bpchar", -1, "S", "character"),
    (2205, "regclass", 4, "N", "regclass"),
    (2206, "regtype", 4, "N", "regtype"),
    (24, "regproc", 4, "N", "regproc"),
    (2950, "uuid", 16, "U", "uuid"),
    (2277, "anyarray", -1, "P", "anyarray"),
    (2249, "record", -1, "P", "record"),
    (1009, "_text", -1, "A", "text[]"),
    (1003, "_name", -1, "A", "name[]"),
]
_CATEGORY = {
    TypeKind.BOOLEAN: "B",
    TypeKind.VARCHAR: "S",
    TypeKind.BYTEA: "U",
    TypeKind.DATE: "D",
    TypeKind.TIME: "D",
    TypeKind.TIMESTAMP: "D",
    TypeKind.TIMESTAMPTZ: "D",
    TypeKind.INTERVAL: "T",
    TypeKind.JSONB: "U",
}


def _display_name(t: DataType) -> str:
    """format_type's spelling of a piestream type."""
    return str(t)


@dataclass
class TypeRegistry:
    """pg_type rows: PostgreSQL's built-in oids for scalar types and their arrays, and made-up
    oids for each distinct STRUCT / nested type so format_type can spell them."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # oid -> format_type text
    by_type: dict[DataType, int] = field(default_factory=dict)
    by_name: dict[str, int] = field(default_factory=dict)
    _next: int = 900_000

    @classmethod
    def builtin(cls) -> TypeRegistry:
        r = cls()
        for t in SCALAR_TYPES:
            if t.kind is TypeKind.SERIAL:
                continue
            arr = list_of(t)
            r._add(
                t.pg_oid,
                t.pg_typname,
                t.pg_typlen,
                _CATEGORY.get(t.kind, "N"),
                _display_name(t),
                arr.pg_oid,
                0,
            )
            r._add(arr.pg_oid, arr.pg_typname, -1, "A", _display_name(arr), 0, t.pg_oid)
            r.by_type[t] = t.pg_oid
            r.by_type[arr] = arr.pg_oid
        for oid, name, length, cat, display in _EXTRA_TYPES:
            r._add(oid, name, length, cat, display, 0, 0)
        for alias, oid in {
            "int": 23,
            "integer": 23,
            "smallint": 21,
            "bigint": 20,
            "real": 700,
            "float": 701,
            "double precision": 701,
            "boolean": 16,
            "varchar": 1043,
            "character varying": 1043,
            "timestamp": 1114,
            "timestamptz": 1184,
            "decimal": 1700,
            "character": 1042,
            "timestamp without time zone": 1114,
            "timestamp with time zone": 1184,
            "time": 1083,
            "time without time zone": 1083,
            "string": 1043,
        }.items():
            r.by_name.setdefault(alias, oid)
        return r

    def _add(self, oid: int, name: str, length: int, cat: str, display: str, array: int, elem: int) -> None:
        if oid in self.names:
            return
        self.names[oid] = display
        self.by_name.setdefault(name, oid)
        self.by_name.setdefault(display, oid)
        typtype = "p" if cat == "P" else "b"
        self.rows.append(
            (
                oid,
                name,
                PG_CATALOG_NS,
                SUPERUSER_OID,
                length,
                1 if 0 < length <= 8 else 0,
                typtype,
                cat,
                0,
                1,
                ",",
                0,
                elem,
                array,
                f"{name}in",
                f"{name}out",
                f"{name}recv",
                f"{name}send",
                0,
                -1,
                0,
                100 if cat == "S" else 0,
                0,
                None,
                "i",
                "p",
            )
        )

    def oid_of(self, t: DataType) -> int:
        oid = self.by_type.get(t)
        if oid is None:
            oid = self._next
            self._next += 1
            self._add(oid, str(t), -1, "C" if t.kind is TypeKind.STRUCT else "A", _display_name(t), 0, 0)
            self.by_type[t] = oid
        return oid


# -- the catalog tables --------------------------------------------------------------------------

#: table -> [(column, pg type)]. Types: bool int2 int4 int8 oid float4 float8 text name char regclass.
_TABLES_TEXT: dict[str, str] = {
    "pg_namespace": "oid oid, nspname name, nspowner oid, nspacl text",
    "pg_class": (
        "oid oid, relname name, relnamespace oid, reltype oid, reloftype oid, relowner oid, relam oid, "
        "relfilenode oid, reltablespace oid, relpages int4, reltuples float4, relallvisible int4, "
        "reltoastrelid oid, relhasindex bool, relisshared bool, relpersistence char, relkind char, "
        "relnatts int2, relchecks int2, relhasrules bool, relhastriggers bool, relhassubclass bool, "
        "relrowsecurity bool, relforcerowsecurity bool, relispopulated bool, relreplident char, "
        "relispartition bool, relrewrite oid, relfrozenxid int8, relminmxid int8, relacl text, reloptions"
        " text, relpartbound text, relhasoids bool"
    ),
    "pg_attribute": (
        "attrelid oid, attname name, atttypid oid, attstattarget int4, attlen int2, attnum int2, attndims"
        " int4, attcacheoff int4, atttypmod int4, attbyval bool, attstorage char, attalign char, "
        "attnotnull bool, atthasdef bool, atthasmissing bool, attidentity char, attgenerated char, "
        "attisdropped bool, attislocal bool, attinhcount int4, attcollation oid, attacl text, attoptions "
        "text, attfdwoptions text, attmissingval text, attcompression char"
    ),
    "pg_type": (
        "oid oid, typname name, typnamespace oid, typowner oid, typlen int2, typbyval bool, typtype char,"
        " typcategory char, typispreferred bool, typisdefined bool, typdelim char, typrelid oid, typelem "
        "oid, typarray oid, typinput text, typoutput text, typreceive text, typsend text, typbasetype "
        "oid, typtypmod int4, typndims int4, typcollation oid, typnotnull bool, typdefault text, typalign"
        " char, typstorage char"
    ),
    "pg_database": (
        "oid oid, datname name, datdba oid, encoding int4, datlocprovider char, datistemplate bool, "
        "datallowconn bool, datconnlimit int4, datcollate name, datctype name, daticulocale text, datacl "
        "text, dattablespace oid"
    ),
    "pg_index": (
        "indexrelid oid, indrelid oid, indnatts int2, indnkeyatts int2, indisunique bool, indisprimary "
        "bool, indisexclusion bool, indimmediate bool, indisclustered bool, indisvalid bool, indcheckxmin"
        " bool, indisready bool, indislive bool, indisreplident bool, indkey int2vector, indcollation "
        "text, indclass text, indoption text, indexprs text, indpred text, indnullsnotdistinct bool"
    ),
    "pg_constraint": (
        "oid oid, conname name, connamespace oid, contype char, condeferrable bool, condeferred bool, "
        "convalidated bool, conrelid oid, contypid oid, conindid oid, conparentid oid, confrelid oid, "
        "confupdtype char, confdeltype char, confmatchtype char, conislocal bool, coninhcount int4, "
        "connoinherit bool, conkey text, confkey text, conbin text"
    ),
    "pg_description": "objoid oid, classoid oid, objsubid int4, description text",
    "pg_shdescription": "objoid oid, classoid oid, description text",
    "pg_am": "oid oid, amname name, amhandler text, amtype char",
    "pg_attrdef": "oid oid, adrelid oid, adnum int2, adbin text",
    "pg_roles": (
        "oid oid, rolname name, rolsuper bool, rolinherit bool, rolcreaterole bool, rolcreatedb bool, "
        "rolcanlogin bool, rolreplication bool, rolconnlimit int4, rolpassword text, rolvaliduntil text, "
        "rolbypassrls bool, rolconfig text"
    ),
    "pg_user": (
        "usename name, usesysid oid, usecreatedb bool, usesuper bool, userepl bool, usebypassrls bool, "
        "passwd text, valuntil text, useconfig text"
    ),
    "pg_settings": (
        "name text, setting text, unit text, category text, short_desc text, extra_desc text, context "
        "text, vartype text, source text, min_val text, max_val text, enumvals text, boot_val text, "
        "reset_val text, sourcefile text, sourceline int4, pending_restart bool"
    ),
    "pg_tablespace": "oid oid, spcname name, spcowner oid, spcacl text, spcoptions text",
    "pg_collation": (
        "oid oid, collname name, collnamespace oid, collowner oid, collprovider char, collisdeterministic"
        " bool, collencoding int4, collcollate name, collctype name"
    ),
    "pg_tables": (
        "schemaname name, tablename name, tableowner name, tablespace name, hasindexes bool, hasrules "
        "bool, hastriggers bool, rowsecurity bool"
    ),
    "pg_views": "schemaname name, viewname name, viewowner name, definition text",
    "pg_matviews": (
        "schemaname name, matviewname name, matviewowner name, tablespace name, hasindexes bool, "
        "ispopulated bool, definition text"
    ),
    "pg_indexes": "schemaname name, tablename name, indexname name, tablespace name, indexdef text",
    "pg_stat_activity": (
        "datid oid, datname name, pid int4, usesysid oid, usename name, application_name text, "
        "client_addr text, client_port int4, backend_start text, query_start text, state text, query "
        "text, backend_type text"
    ),
    "pg_proc": (
        "oid oid, proname name, pronamespace oid, proowner oid, prolang oid, prokind char, prorettype "
        "oid, proargtypes text, proretset bool, proargnames text, prosrc text"
    ),
    "pg_extension": "oid oid, extname name, extowner oid, extnamespace oid, extversion text",
    "pg_enum": "oid oid, enumtypid oid, enumsortorder float4, enumlabel name",
    "pg_sequence": (
        "seqrelid oid, seqtypid oid, seqstart int8, seqincrement int8, seqmax int8, seqmin int8, seqcache"
        " int8, seqcycle bool"
    ),
    "pg_inherits": "inhrelid oid, inhparent oid, inhseqno int4, inhdetachpending bool",
    "pg_trigger": "oid oid, tgrelid oid, tgname name, tgenabled char, tgisinternal bool",
    "pg_rewrite": "oid oid, rulename name, ev_class oid, ev_type char",
    "pg_policy": "oid oid, polname name, polrelid oid, polcmd char, polpermissive bool",
    "pg_statistic_ext": "oid oid, stxrelid oid, stxname name, stxnamespace oid",
    "pg_publication": "oid oid, pubname name, puballtables bool",
    "pg_publication_rel": "oid oid, prpubid oid, prrelid oid",
    "pg_publication_namespace": "oid oid, pnpubid oid, pnnspid oid",
    "pg_partitioned_table": "partrelid oid, partstrat char, partnatts int2",
    "pg_foreign_table": "ftrelid oid, ftserver oid, ftoptions text",
    "pg_foreign_server": "oid oid, srvname name",
    "pg_depend": (
        "classid oid, objid oid, objsubid int4, refclassid oid, refobjid oid, refobjsubid int4, deptype char"
    ),
    "pg_event_trigger": "oid oid, evtname name",
    "pg_range": "rngtypid oid, rngsubtype oid",
    "pg_opclass": "oid oid, opcname name, opcmethod oid, opcdefault bool",
    "pg_auth_members": "roleid oid, member oid, grantor oid, admin_option bool",
}
TABLES: dict[str, list[tuple[str, str]]] = {
    name: [tuple(c.split()) for c in cols.split(", ")]  # type: ignore[misc]
    for name, cols in _TABLES_TEXT.items()
}

_INFO_TABLES_TEXT: dict[str, str] = {
    "tables": (
        "table_catalog name, table_schema name, table_name name, table_type text, "
        "self_referencing_column_name name, reference_generation text, user_defined_type_catalog name, "
        "user_defined_type_schema name, user_defined_type_name name, is_insertable_into text, is_typed "
        "text, commit_action text"
    ),
    "columns": (
        "table_catalog name, table_schema name, table_name name, column_name name, ordinal_position int4,"
        " column_default text, is_nullable text, data_type text, character_maximum_length int4, "
        "character_octet_length int4, numeric_precision int4, numeric_precision_radix int4, numeric_scale"
        " int4, datetime_precision int4, interval_type text, udt_catalog name, udt_schema name, udt_name "
        "name, is_identity text, is_generated text, is_updatable text"
    ),
    "schemata": "catalog_name name, schema_name name, schema_owner name",
    "views": "table_catalog name, table_schema name, table_name name, view_definition text",
    "table_constraints": (
        "constraint_catalog name, constraint_schema name, constraint_name name, table_schema name, "
        "table_name name, constraint_type text"
    ),
    "key_column_usage": (
        "constraint_schema name, constraint_name name, table_schema name, table_name name, column_name "
        "name, ordinal_position int4"
    ),
}
INFO_TABLES: dict[str, list[tuple[str, str]]] = {
    name: [tuple(c.split()) for c in cols.split(", ")]  # type: ignore[misc]
    for name, cols in _INFO_TABLES_TEXT.items()
}

CATALOG_TABLE_NAMES = frozenset(TABLES)
_SQLITE_TYPE = {
    "bool": "INTEGER",
    "int2": "INTEGER",
    "int4": "INTEGER",
    "int8": "INTEGER",
    "oid": "INTEGER",
    "float4": "REAL",
    "float8": "REAL",
}

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
    "regclass_name": "text",
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
}

#: typed sqlglot nodes that are system functions, by the name they get here
_TYPED_FUNCS: dict[type[exp.Expr], str] = {
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
        _TYPED_FUNCS[getattr(exp, _name)] = "current_database"

#: functions in FUNCTION_TYPES that ordinary queries use too: they do not make a query a catalog query
_GENERIC_FUNCS = frozenset(
    {
        "array_to_string",
        "array_length",
        "array_upper",
        "array_lower",
        "cardinality",
        "quote_ident",
        "json_build_object",
        "regexp_like",
    }
)
#: casts to these types only make sense against the catalogs
_OID_TYPES = frozenset({"oid", "regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole"})
_CATALOG_WORDS = re.compile(
    r"\b(pg_catalog|information_schema|pg_[a-z_]+|version\s*\(|current_database|current_schemas?|format_type"
    r"|obj_description|col_description|has_[a-z_]+_privilege)\b",
    re.IGNORECASE,
)


# -- which queries are catalog queries ---------------------------------------------------------


def looks_like_catalog(sql: str) -> bool:
    """A cheap textual test for SQL the engine could not parse (psql's OPERATOR(pg_catalog.~) ...)."""
    return bool(_CATALOG_WORDS.search(sql))


def _func_name(node: exp.Expr) -> str | None:
    if type(node) in _TYPED_FUNCS:
        return _TYPED_FUNCS[type(node)]
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
        fname = _func_name(node)
        if fname is not None and fname in FUNCTION_TYPES and fname not in _GENERIC_FUNCS:
            return True
        if isinstance(node, exp.Cast) and _type_name(node.args["to"]) in _OID_TYPES:
            return True
    return False


# -- the session's view of the world ------------------------------------------------------------


@dataclass
class CatalogContext:
    """Who is asking: the connection's user and database, its settings and the live sessions."""

    user: str = "root"
    database: str = "dev"
    settings: dict[str, str] = field(default_factory=dict)
    pid: int = 0
    activity: list[tuple[Any, ...]] = field(default_factory=list)  # pg_stat_activity rows


class CatalogViews:
    """Runs catalog queries for one connection (its own SQLite connection, rebuilt on DDL)."""

    def __init__(self, relations: Callable[[], Iterable[Relation]]) -> None:
        self._relations = relations
        self._conn: sqlite3.Connection | None = None
        self._key: tuple[Any, ...] | None = None
        self.ctx = CatalogContext()
        self.types = TypeRegistry.builtin()
        self._rels: list[Relation] = []

    # -- public ---------------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = (), ctx: CatalogContext | None = None) -> QueryResult:
        """Run one catalog query (PostgreSQL SQL text); `params` bind ``$1`` ... as text or values."""
        if ctx is not None:
            self.ctx = ctx
        try:
            tree = sqlglot.parse_one(sql, read="postgres")
        except sqlglot.errors.ParseError as e:
            raise SyntaxError_(f"syntax error in catalog query: {str(e).splitlines()[0]}") from None
        if tree is None:
            return QueryResult("SELECT 0")
        if isinstance(tree, exp.Command) or not isinstance(tree, exp.Query):
            raise SyntaxError_("only SELECT is supported over pg_catalog")
        conn = self._connection()
        names, types = self._describe(tree)
        rewritten = tree.transform(self._rewrite)
        try:
            text = rewritten.sql(dialect="sqlite")
            cur = conn.execute(text, _sqlite_params(params))
            raw_rows = cur.fetchall()
            if cur.description is not None:
                names = [
                    _column_name(d[0], n)
                    for d, n in zip(cur.description, [*names, *[None] * 99], strict=False)
                ]
        except (sqlite3.Error, sqlglot.errors.SqlglotError, ValueError, OverflowError) as e:
            log.debug("catalog query answered with no rows (%s): %s", e, sql)
            raw_rows = []
        width = len(names)
        types = (types + [None] * width)[:width]
        columns, rows = self._convert(names, types, raw_rows)
        return QueryResult(f"SELECT {len(rows)}", columns, rows)

    # -- building the catalog -------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        rels = sorted(self._relations(), key=lambda r: r.id)
        key = (
            tuple((r.id, r.name) for r in rels),
            self.ctx.user,
            self.ctx.database,
            tuple(sorted(self.ctx.settings.items())),
            tuple(self.ctx.activity),
        )
        if self._conn is not None and key == self._key:
            return self._conn
        if self._conn is not None:
            self._conn.close()
        self._rels = rels
        self._conn = self._build(rels)
        self._key = key
        return self._conn

    def _build(self, rels: list[Relation]) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute("ATTACH DATABASE ':memory:' AS pg_catalog")
        conn.execute("ATTACH DATABASE ':memory:' AS information_schema")
        conn.execute("PRAGMA case_sensitive_like = ON")
        for schema, tables in (("pg_catalog", TABLES), ("information_schema", INFO_TABLES)):
            for name, cols in tables.items():
                decl = ", ".join(f'"{c}" {_SQLITE_TYPE.get(t, "TEXT")}' for c, t in cols)
                conn.execute(f"CREATE TABLE {schema}.{name} ({decl})")
        self._register_functions(conn)
        rows = CatalogRows(rels, self.types, self.ctx)
        for table, data in rows.all().items():
            schema = "information_schema" if table in INFO_TABLES and table not in TABLES else "pg_catalog"
            if data:
                marks = ",".join("?" * len(data[0]))
                conn.executemany(f"INSERT INTO {schema}.{table} VALUES ({marks})", data)
        self.types = rows.types
        return conn

    def _register_functions(self, conn: sqlite3.Connection) -> None:
        ctx = self.ctx

        def const(value: Any) -> Callable[..., Any]:
            return lambda *args: value

        fns: dict[str, Callable[..., Any]] = {
            "version": const(VERSION_STRING),
            "current_database": const(ctx.database),
            "current_schema": const("public"),
            "current_user": const(ctx.user),
            "session_user": const(ctx.user),
            "current_schemas": const("{public}"),
            "format_type": self._format_type,
            "pg_get_expr": lambda e, *a: e,
            "pg_table_is_visible": const(1),
            "pg_type_is_visible": const(1),
            "pg_function_is_visible": const(1),
            "pg_collation_is_visible": const(1),
            "pg_conversion_is_visible": const(1),
            "obj_description": self._obj_description,
            "col_description": const(None),
            "shobj_description": const(None),
            "has_table_privilege": const(1),
            "has_schema_privilege": const(1),
            "has_database_privilege": const(1),
            "has_column_privilege": const(1),
            "pg_has_role": const(1),
            "pg_encoding_to_char": lambda n: "UTF8" if n == 6 else "SQL_ASCII",
            "pg_char_to_encoding": lambda s: 6,
            "pg_get_userbyid": lambda oid: ctx.user,
            "pg_get_viewdef": self._viewdef,
            "pg_get_indexdef": self._indexdef,
            "pg_get_constraintdef": self._constraintdef,
            "pg_get_partkeydef": const(None),
            "pg_get_triggerdef": const(None),
            "pg_get_ruledef": const(None),
            "pg_get_functiondef": const(None),
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
            "regclass_name": self._regclass_name,
            "regtype_name": lambda oid: self.types.names.get(_int(oid), None if oid is None else str(oid)),
            "current_setting": lambda name, *a: ctx.settings.get(str(name).lower()),
            "set_config": lambda name, value, *a: value,
            "pg_backend_pid": const(ctx.pid),
            "pg_is_in_recovery": const(0),
            "pg_my_temp_schema": const(0),
            "pg_is_other_temp_schema": const(0),
            "quote_ident": _quote_ident,
            "pg_relation_is_publishable": const(0),
            "pg_get_function_result": const(None),
            "pg_get_function_arguments": const(None),
            "pg_get_function_identity_arguments": const(None),
            "pg_get_statisticsobjdef_columns": const(None),
            "pg_postmaster_start_time": const(None),
            "txid_current": const(1),
            "inet_server_addr": const(None),
            "inet_server_port": const(None),
            "array_length": lambda a, d=1: _array_len(a),
            "array_upper": lambda a, d=1: _array_len(a),
            "array_lower": lambda a, d=1: 1 if _array_len(a) else None,
            "cardinality": lambda a: _array_len(a) or 0,
            "array_contains_pg": lambda arr, x: None if arr is None else int(str(x) in _array_items(arr)),
            "json_build_object": lambda *a: json.dumps(dict(zip(a[::2], a[1::2], strict=False))),
            "regexp": lambda pattern, value: _regex(pattern, value, 0),
            "regexp_i_like": lambda value, pattern: _regex(pattern, value, re.IGNORECASE),
            "regexp_like": lambda value, pattern, *f: _regex(pattern, value, 0),
        }
        for name, fn in fns.items():
            conn.create_function(name, -1, fn, deterministic=False)
        conn.create_aggregate("array_agg_pg", 1, _ArrayAgg)  # type: ignore[arg-type]

    # -- system functions -------------------------------------------------------------------------
    def _rel(self, oid: Any) -> Relation | None:
        o = _int(oid)
        return next((r for r in self._rels if rel_oid(r) == o), None)

    def _format_type(self, oid: Any, typmod: Any = None) -> str | None:
        if oid is None:
            return None
        return self.types.names.get(_int(oid), "???")

    def _obj_description(self, oid: Any, catalog: Any = None) -> str | None:
        return None

    def _viewdef(self, oid: Any, pretty: Any = None) -> str | None:
        rel = self._rel(oid)
        if rel is None:
            return None
        return _query_part(rel.definition)

    def _indexdef(self, oid: Any, column: Any = 0, pretty: Any = None) -> str | None:
        o = _int(oid)
        for r in self._rels:
            if rel_oid(r) == o and r.kind is RelationKind.INDEX:
                return r.definition
            if _pkey_oid(r) == o:
                return f"CREATE UNIQUE INDEX {r.name}_pkey ON public.{r.name} USING btree ({_pk_names(r)})"
        return None

    def _constraintdef(self, oid: Any, pretty: Any = None) -> str | None:
        o = _int(oid)
        r = next((r for r in self._rels if _pkey_oid(r) == o), None)
        return None if r is None else f"PRIMARY KEY ({_pk_names(r)})"

    def _to_regclass(self, name: Any) -> int | None:
        if name is None:
            return None
        if isinstance(name, int):
            return name
        text = str(name).strip()
        if text.isdigit():
            return int(text)
        text = text.split(".")[-1].strip('"')
        for r in self._rels:
            if r.name == text:
                return rel_oid(r)
        if text in TABLES:
            return 1000 + sorted(TABLES).index(text)
        return None

    def _regclass_name(self, oid: Any) -> str | None:
        if oid is None:
            return None
        rel = self._rel(oid)
        if rel is not None:
            return rel.name
        o = _int(oid)
        if 1000 <= o < 1000 + len(TABLES):
            return sorted(TABLES)[o - 1000]
        return str(oid)

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

    # -- rewriting for SQLite -------------------------------------------------------------------
    def _sub(self, node: exp.Expression) -> exp.Expression:
        """Rewrite a subtree (sqlglot's transform does not descend into replacements)."""
        return node.transform(self._rewrite)

    def _rewrite(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Collate):
            return self._sub(node.this)
        if (
            isinstance(node, exp.Dot)
            and isinstance(node.this, exp.Identifier)
            and node.this.name.lower() == "pg_catalog"
        ):
            return self._sub(node.expression)
        if type(node) in _TYPED_FUNCS:
            args = [self._sub(a) for a in node.args.values() if isinstance(a, exp.Expression)]
            return exp.Anonymous(this=_TYPED_FUNCS[type(node)], expressions=args)
        if isinstance(node, exp.Operator):
            op = str(node.args.get("operator", "")).removeprefix("pg_catalog.")
            lhs, rhs = self._sub(node.this), self._sub(node.expression)
            if op == "~":
                return exp.Anonymous(this="regexp_like", expressions=[lhs, rhs])
            if op == "~*":
                return exp.Anonymous(this="regexp_i_like", expressions=[lhs, rhs])
            if op == "!~":
                return exp.Not(this=exp.Anonymous(this="regexp_like", expressions=[lhs, rhs]))
            if op in ("=", "<>", "<", ">", "<=", ">="):
                return exp.Anonymous(this="__op__", expressions=[lhs, rhs])  # never seen in practice
            return node
        if isinstance(node, exp.RegexpLike):
            return exp.Anonymous(
                this="regexp_like", expressions=[self._sub(node.this), self._sub(node.expression)]
            )
        if isinstance(node, exp.RegexpILike):
            args = [self._sub(node.this), self._sub(node.expression)]
            return exp.Anonymous(this="regexp_i_like", expressions=args)
        if isinstance(node, exp.ByteString):
            return exp.Literal.string(_unescape(str(node.this)))
        if isinstance(node, exp.Parameter | exp.Placeholder):
            n = str(node.this.name if isinstance(node.this, exp.Expression) else node.this or node.name or "")
            if n.lstrip("$").isdigit():
                return exp.Var(this=f"?{n.lstrip('$')}")
            return node
        if isinstance(node, exp.Cast):
            return self._rewrite_cast(node)
        if isinstance(node, exp.EQ | exp.NEQ) and isinstance(node.expression, exp.Any | exp.All):
            inner = node.expression.this
            if isinstance(inner, exp.Paren):
                inner = inner.this
            lhs = self._sub(node.this)
            if isinstance(inner, exp.Array):
                into = exp.In(this=lhs, expressions=[self._sub(e) for e in inner.expressions])
                return exp.Not(this=into) if isinstance(node, exp.NEQ) else into
            contains = exp.Anonymous(this="array_contains_pg", expressions=[self._sub(inner), lhs])
            return exp.Not(this=contains) if isinstance(node, exp.NEQ) else contains
        if (
            isinstance(node, exp.Array)
            and len(node.expressions) == 1
            and isinstance(node.expressions[0], exp.Select)
        ):
            inner = node.expressions[0]
            if any(not isinstance(t.this, exp.Identifier) for t in inner.find_all(exp.Table)):
                return exp.Null()  # ARRAY(SELECT ... FROM unnest(options) / pg_options_to_table(...))
            inner = self._sub(inner)
            assert isinstance(inner, exp.Select)
            first = inner.expressions[0]
            inner.set(
                "expressions", [exp.alias_(first.this if isinstance(first, exp.Alias) else first, "_v")]
            )
            agg = exp.Anonymous(this="array_agg_pg", expressions=[exp.column("_v")])
            return exp.Subquery(
                this=exp.select(agg).from_(
                    exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("_a")))
                )
            )
        if isinstance(node, exp.ArrayAgg):
            arg = node.this.this if isinstance(node.this, exp.Order) else node.this
            return exp.Anonymous(this="array_agg_pg", expressions=[self._sub(arg)])
        if (
            isinstance(node, exp.Column)
            and not node.table
            and node.name.lower() in ("user", "current_user", "session_user")
        ):
            return exp.Anonymous(this="current_user", expressions=[])
        return node

    def _rewrite_cast(self, node: exp.Cast) -> exp.Expression:
        target = _type_name(node.args["to"])
        original = node.this
        inner = self._sub(original)
        if target == "regclass":
            return exp.Anonymous(this="to_regclass_oid", expressions=[inner])
        if target == "regtype":
            return exp.Anonymous(this="to_regtype_oid", expressions=[inner])
        if target in ("text", "name", "varchar", "character varying", "char", "bpchar", '"char"'):
            src = _type_name(original.args["to"]) if isinstance(original, exp.Cast) else None
            if src == "regclass":
                return exp.Anonymous(this="regclass_name", expressions=[inner])
            if src == "regtype":
                return exp.Anonymous(this="regtype_name", expressions=[inner])
            return exp.Cast(this=inner, to=exp.DataType.build("TEXT"))
        if target in (
            "oid",
            "int2",
            "int4",
            "int8",
            "smallint",
            "integer",
            "int",
            "bigint",
            "regproc",
            "regnamespace",
        ):
            return exp.Cast(this=inner, to=exp.DataType.build("INTEGER"))
        if target in ("float4", "float8", "real", "double precision", "numeric", "decimal"):
            return exp.Cast(this=inner, to=exp.DataType.build("REAL"))
        return inner  # bool, arrays, pg_node_tree, ...: SQLite keeps the value as it is

    # -- result typing ----------------------------------------------------------------------------
    def _describe(self, tree: exp.Expr) -> tuple[list[str], list[str | None]]:
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
                    for c, t in _table_columns(table):
                        names.append(c)
                        types.append(t)
                continue
            names.append(_output_name(e))
            types.append(self._expr_type(e, tables))
        return names, types

    def _expr_type(self, e: exp.Expression, tables: dict[str, str]) -> str | None:
        if isinstance(e, exp.Alias | exp.Paren | exp.Collate):
            return self._expr_type(e.this, tables)
        if isinstance(e, exp.Column):
            return _column_type(e, tables)
        if isinstance(e, exp.Cast):
            target = _type_name(e.args["to"])
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
                t = self._expr_type(branch.args["true"], tables)
                if t is not None and not (isinstance(branch.args["true"], exp.Null)):
                    return t
            default = e.args.get("default")
            return self._expr_type(default, tables) if default is not None else "text"
        if isinstance(e, exp.Coalesce):
            return self._expr_type(e.this, tables)
        if isinstance(e, exp.Count):
            return "int8"
        if isinstance(e, exp.Sum | exp.Min | exp.Max):
            return self._expr_type(e.this, tables)
        if isinstance(e, exp.DPipe | exp.Concat | exp.GroupConcat | exp.Upper | exp.Lower | exp.Substring):
            return "text"
        if isinstance(e, exp.Subquery):
            inner = e.this
            if isinstance(inner, exp.Select) and inner.expressions:
                return self._expr_type(inner.expressions[0], {**tables, **_scope_tables(inner)})
            return None
        if isinstance(e, exp.Dot):
            return self._expr_type(e.expression, tables)
        name = _func_name(e)
        if name is not None:
            return FUNCTION_TYPES.get(name)
        return None

    def _convert(
        self, names: list[str], types: list[str | None], raw: list[tuple[Any, ...]]
    ) -> tuple[list[tuple[str, DataType]], list[tuple[Any, ...]]]:
        columns: list[tuple[str, DataType]] = []
        converters: list[Callable[[Any], Any]] = []
        for i, (name, t) in enumerate(zip(names, types, strict=True)):
            values = [r[i] for r in raw if i < len(r)]
            pg = t or _guess(values)
            dtype, conv = self._converter(pg)
            try:
                for v in values:
                    conv(v)
            except (TypeError, ValueError):
                dtype, conv = VARCHAR, _to_text
            columns.append((name, dtype))
            converters.append(conv)
        rows = [tuple(c(v) for c, v in zip(converters, r, strict=False)) for r in raw]
        return columns, rows

    def _converter(self, pg: str) -> tuple[DataType, Callable[[Any], Any]]:
        if pg == "bool":
            return BOOLEAN, _to_bool
        if pg in ("int2", "int4", "int8", "oid"):
            return _RESULT_TYPE[pg], _to_int
        if pg in ("float4", "float8"):
            return _RESULT_TYPE[pg], lambda v: None if v is None else float(v)
        if pg == "regclass":
            return VARCHAR, self._regclass_name
        if pg == "regtype":
            return VARCHAR, lambda v: None if v is None else self.types.names.get(_int(v), str(v))
        return VARCHAR, _to_text


# -- rows of the catalog tables -------------------------------------------------------------------


def _pk_names(r: Relation) -> str:
    assert r.table is not None
    return ", ".join(r.columns[i].name for i in r.table.pk)


def _has_user_pk(r: Relation) -> bool:
    return (
        r.kind is RelationKind.TABLE
        and r.table is not None
        and bool(r.table.pk)
        and r.extra.get("row_id") is None
    )


def _pkey_oid(r: Relation) -> int | None:
    return rel_oid(r) + 1_000_000 if _has_user_pk(r) else None


def _query_part(definition: str) -> str:
    """``SELECT ...`` of ``CREATE [MATERIALIZED] VIEW name AS SELECT ...`` (psql shows only that)."""
    m = re.search(r"\bAS\s+(.*)$", definition, re.IGNORECASE | re.DOTALL)
    body = m.group(1) if m else definition
    return " " + body.strip().rstrip(";") + ";"


class CatalogRows:
    """Every catalog table's rows for one set of relations."""

    def __init__(self, rels: list[Relation], types: TypeRegistry, ctx: CatalogContext) -> None:
        self.rels = rels
        self.types = types
        self.ctx = ctx

    def all(self) -> dict[str, list[tuple[Any, ...]]]:
        ctx = self.ctx
        user = ctx.user
        out: dict[str, list[tuple[Any, ...]]] = {name: [] for name in TABLES}
        out["pg_namespace"] = [
            (PG_CATALOG_NS, "pg_catalog", SUPERUSER_OID, None),
            (PUBLIC_NS, "public", SUPERUSER_OID, None),
            (INFORMATION_SCHEMA_NS, "information_schema", SUPERUSER_OID, None),
            (PG_TOAST_NS, "pg_toast", SUPERUSER_OID, None),
        ]
        out["pg_am"] = [(HEAP_AM, "heap", "heap_tableam_handler", "t"), (BTREE_AM, "btree", "bthandler", "i")]
        out["pg_tablespace"] = [
            (1663, "pg_default", SUPERUSER_OID, None, None),
            (1664, "pg_global", SUPERUSER_OID, None, None),
        ]
        out["pg_collation"] = [
            (100, "default", PG_CATALOG_NS, SUPERUSER_OID, "d", 1, -1, "", ""),
            (950, "C", PG_CATALOG_NS, SUPERUSER_OID, "c", 1, -1, "C", "C"),
        ]
        databases = ["dev"] + ([ctx.database] if ctx.database != "dev" else [])
        out["pg_database"] = [
            (DATABASE_OID - i, name, SUPERUSER_OID, 6, "c", 0, 1, -1, "C", "C", None, None, 1663)
            for i, name in enumerate(databases)
        ]
        out["pg_roles"] = [(SUPERUSER_OID, user, 1, 1, 1, 1, 1, 1, -1, "********", None, 1, None)]
        out["pg_user"] = [(user, SUPERUSER_OID, 1, 1, 1, 1, "********", None, None)]
        out["pg_settings"] = [
            (
                k,
                v,
                None,
                "piestream",
                "",
                None,
                "user",
                "string",
                "session",
                None,
                None,
                None,
                v,
                v,
                None,
                None,
                0,
            )
            for k, v in sorted(ctx.settings.items())
        ]
        out["pg_stat_activity"] = list(ctx.activity)
        info_tables: list[tuple[Any, ...]] = []
        info_columns: list[tuple[Any, ...]] = []
        info_views: list[tuple[Any, ...]] = []
        for r in self.rels:
            kind = _KIND_CHAR.get(r.kind)
            if kind is None:
                continue  # sinks store no rows and have no columns to show
            oid = rel_oid(r)
            cols = r.visible_columns
            indexes = [
                i for i in self.rels if i.kind is RelationKind.INDEX and i.extra.get("index_of") == r.id
            ]
            has_index = bool(indexes) or _has_user_pk(r)
            out["pg_class"].append(
                (
                    oid,
                    r.name,
                    PUBLIC_NS,
                    0,
                    0,
                    SUPERUSER_OID,
                    BTREE_AM if kind == "i" else (HEAP_AM if kind in "rm" else 0),
                    oid,
                    0,
                    0,
                    -1.0,
                    0,
                    0,
                    int(has_index),
                    0,
                    "p",
                    kind,
                    len(cols),
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    1,
                    "d",
                    0,
                    0,
                    0,
                    0,
                    None,
                    None,
                    None,
                    0,
                )
            )
            for n, c in enumerate(cols, 1):
                t = c.data_type
                toid = self.types.oid_of(t)
                notnull = _has_user_pk(r) and r.table is not None and c.name in _pk_names(r).split(", ")
                out["pg_attribute"].append(
                    (
                        oid,
                        c.name,
                        toid,
                        -1,
                        t.pg_typlen if t.kind in _PG_LEN_KINDS else -1,
                        n,
                        1 if t.kind is TypeKind.LIST else 0,
                        -1,
                        -1,
                        0,
                        "p",
                        "i",
                        int(notnull),
                        0,
                        0,
                        "",
                        "",
                        0,
                        1,
                        0,
                        100 if t.kind is TypeKind.VARCHAR else 0,
                        None,
                        None,
                        None,
                        None,
                        "",
                    )
                )
                if kind != "i":
                    info_columns.append(
                        (
                            ctx.database,
                            "public",
                            r.name,
                            c.name,
                            n,
                            None,
                            "NO" if notnull else "YES",
                            _info_data_type(t),
                            None,
                            None,
                            None,
                            None,
                            None,
                            None,
                            None,
                            ctx.database,
                            "pg_catalog",
                            self.types.names.get(toid, str(t))
                            if t.kind is not TypeKind.LIST
                            else "_" + str(t.elem),
                            "NO",
                            "NEVER",
                            "YES" if r.kind is RelationKind.TABLE else "NO",
                        )
                    )
            if r.kind is RelationKind.INDEX:
                base = next((b for b in self.rels if b.id == r.extra.get("index_of")), None)
                if base is not None:
                    keys = [n for n in r.extra.get("index_columns", [])]
                    nums = [str(i + 1) for i, c in enumerate(base.visible_columns) if c.name in keys]
                    out["pg_index"].append(
                        (
                            oid,
                            rel_oid(base),
                            len(cols),
                            len(keys),
                            0,
                            0,
                            0,
                            1,
                            0,
                            1,
                            0,
                            1,
                            1,
                            0,
                            " ".join(nums),
                            None,
                            None,
                            None,
                            None,
                            None,
                            0,
                        )
                    )
                    out["pg_indexes"].append(("public", base.name, r.name, None, r.definition))
            if _has_user_pk(r):
                pk_oid = rel_oid(r) + 1_000_000
                assert r.table is not None
                nums = [str(i + 1) for i in r.table.pk]
                out["pg_class"].append(
                    (
                        pk_oid,
                        f"{r.name}_pkey",
                        PUBLIC_NS,
                        0,
                        0,
                        SUPERUSER_OID,
                        BTREE_AM,
                        pk_oid,
                        0,
                        0,
                        -1.0,
                        0,
                        0,
                        0,
                        0,
                        "p",
                        "i",
                        len(nums),
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        1,
                        "n",
                        0,
                        0,
                        0,
                        0,
                        None,
                        None,
                        None,
                        0,
                    )
                )
                out["pg_index"].append(
                    (
                        pk_oid,
                        oid,
                        len(nums),
                        len(nums),
                        1,
                        1,
                        0,
                        1,
                        0,
                        1,
                        0,
                        1,
                        1,
                        0,
                        " ".join(nums),
                        None,
                        None,
                        None,
                        None,
                        None,
                        0,
                    )
                )
                out["pg_constraint"].append(
                    (
                        pk_oid + 1,
                        f"{r.name}_pkey",
                        PUBLIC_NS,
                        "p",
                        0,
                        0,
                        1,
                        oid,
                        0,
                        pk_oid,
                        0,
                        0,
                        " ",
                        " ",
                        " ",
                        1,
                        0,
                        1,
                        "{" + ",".join(nums) + "}",
                        None,
                        None,
                    )
                )
                out["pg_indexes"].append(
                    (
                        "public",
                        r.name,
                        f"{r.name}_pkey",
                        None,
                        f"CREATE UNIQUE INDEX {r.name}_pkey ON public.{r.name} USING btree ({_pk_names(r)})",
                    )
                )
            if r.kind is RelationKind.TABLE:
                out["pg_tables"].append(("public", r.name, user, None, int(has_index), 0, 0, 0))
                info_tables.append(
                    (
                        ctx.database,
                        "public",
                        r.name,
                        "BASE TABLE",
                        None,
                        None,
                        None,
                        None,
                        None,
                        "YES",
                        "NO",
                        None,
                    )
                )
            elif r.kind is RelationKind.SOURCE:
                out["pg_foreign_table"].append((oid, FOREIGN_SERVER_OID, None))
                info_tables.append(
                    (
                        ctx.database,
                        "public",
                        r.name,
                        "FOREIGN",
                        None,
                        None,
                        None,
                        None,
                        None,
                        "NO",
                        "NO",
                        None,
                    )
                )
            elif r.kind is RelationKind.VIEW:
                out["pg_views"].append(("public", r.name, user, _query_part(r.definition)))
                info_tables.append(
                    (ctx.database, "public", r.name, "VIEW", None, None, None, None, None, "NO", "NO", None)
                )
                info_views.append((ctx.database, "public", r.name, _query_part(r.definition)))
            elif r.kind is RelationKind.MATERIALIZED_VIEW:
                out["pg_matviews"].append(
                    ("public", r.name, user, None, int(has_index), 1, _query_part(r.definition))
                )
        out["pg_foreign_server"] = [(FOREIGN_SERVER_OID, "piestream_connectors")]
        out["pg_type"] = list(self.types.rows)
        out["tables"] = info_tables
        out["columns"] = info_columns
        out["views"] = info_views
        out["schemata"] = [(ctx.database, s, user) for s in ("pg_catalog", "public", "information_schema")]
        out["table_constraints"] = []
        out["key_column_usage"] = []
        return out


_PG_LEN_KINDS = frozenset(k for k in TypeKind if k not in (TypeKind.LIST, TypeKind.STRUCT))


def _info_data_type(t: DataType) -> str:
    if t.kind is TypeKind.LIST:
        return "ARRAY"
    if t.kind is TypeKind.STRUCT:
        return "USER-DEFINED"
    return str(t)


# -- helpers --------------------------------------------------------------------------------------


def _type_name(node: exp.Expression) -> str:
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


def _scope_tables(select: exp.Select) -> dict[str, str]:
    """alias (lower case) -> catalog table name, for the FROM and JOINs of one SELECT level."""
    out: dict[str, str] = {}
    sources: list[exp.Expression] = []
    from_ = select.args.get("from") or select.args.get("from_")
    if from_ is not None:
        sources.append(from_.this)
        sources.extend(from_.expressions or [])
    sources.extend(j.this for j in select.args.get("joins") or [])
    for s in sources:
        if isinstance(s, exp.Table) and isinstance(s.this, exp.Identifier):
            out[(s.alias or s.name).lower()] = s.name.lower()
    return out


def _table_columns(table: str) -> list[tuple[str, str]]:
    return TABLES.get(table) or INFO_TABLES.get(table) or []


def _column_type(col: exp.Column, tables: dict[str, str]) -> str | None:
    name = col.name.lower()
    qual = col.table.lower() if col.table else ""
    candidates = (
        [tables[qual]]
        if qual in tables
        else ([qual] if qual in TABLES or qual in INFO_TABLES else list(tables.values()))
    )
    for table in candidates:
        for c, t in _table_columns(table):
            if c == name:
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
        return inner if inner != "?column?" else _type_name(e.args["to"])
    name = _func_name(e)
    if name is not None:
        return name
    return "?column?"


def _column_name(sqlite_name: str, parsed: str | None) -> str:
    return parsed if parsed is not None else sqlite_name


def _sqlite_params(params: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for p in params:
        if isinstance(p, bool):
            out.append(int(p))
        elif isinstance(p, int | float | str | bytes) or p is None:
            out.append(p)
        elif isinstance(p, list | tuple):
            out.append("{" + ",".join(str(x) for x in p) + "}")
        else:
            out.append(str(p))
    return out


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


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


def _regex(pattern: Any, value: Any, flags: int) -> int | None:
    if pattern is None or value is None:
        return None
    try:
        return int(re.search(str(pattern), str(value), flags) is not None)
    except re.error:
        raise ValueError(f"invalid regular expression: {pattern}") from None


def _unescape(s: str) -> str:
    try:
        return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return s


def _array_items(arr: Any) -> list[str]:
    text = str(arr).strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
        return [x.strip().strip('"') for x in text.split(",")] if text else []
    return text.split()


def _array_len(arr: Any) -> int | None:
    if arr is None:
        return None
    n = len(_array_items(arr))
    return n or None


def _array_to_string(arr: Any, sep: Any, null: Any = None) -> str | None:
    if arr is None:
        return None
    return str(sep).join(_array_items(arr))


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
    """array_agg as PostgreSQL's text form of the array (``{a,b}``)."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def step(self, value: Any) -> None:
        self.items.append("NULL" if value is None else str(value))

    def finalize(self) -> str:
        return "{" + ",".join(self.items) + "}"
