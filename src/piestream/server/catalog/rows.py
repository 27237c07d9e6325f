"""The rows of every emulated catalog table, built from the piestream catalog.

Tables are ``r``, materialized views ``m``, views ``v``, indexes ``i``, sources ``f`` (foreign
tables: their rows live outside); sinks store no rows and do not appear. A table's user-declared
primary key is a ``p`` constraint with its index ``<table>_pkey``. Besides the relations, the
rows show who is asking (`CatalogContext`): the user, the database, the session's settings
(``pg_settings``) and the server's connections (``pg_stat_activity``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from piestream.common.composite_text import format_list
from piestream.common.types import VARCHAR, DataType, TypeKind, list_of
from piestream.frontend.catalog import DEFAULT_SCHEMA, FunctionCatalog, Relation, RelationKind
from piestream.frontend.column_default import default_text
from piestream.frontend.parser.ast import RELATION_PRIVILEGES, SCHEMA_PRIVILEGES
from piestream.meta.roles import Role
from piestream.server.catalog.objects import (
    BTREE_AM,
    DATABASE_OID,
    FOREIGN_SERVER_OID,
    HEAP_AM,
    INFORMATION_SCHEMA_NS,
    KIND_CHAR,
    OID_OFFSET,
    PG_CATALOG_NS,
    PG_TOAST_NS,
    PUBLIC_NS,
    PYTHON_LANG,
    SUPERUSER_OID,
    function_oid,
    has_user_pk,
    index_keys,
    index_stored_columns,
    indexdef,
    pk_names,
    pkey_indexdef,
    rel_oid,
    rule_oid,
    source_options,
    view_query,
)
from piestream.server.catalog.pg_types import TypeRegistry
from piestream.server.catalog.tables import CATALOG_OIDS, TABLES


@dataclass
class CatalogContext:
    """Who is asking: the connection's user and database, its settings and the live sessions."""

    user: str = "root"
    database: str = "dev"
    settings: dict[str, str] = field(default_factory=dict)
    pid: int = 0
    activity: list[tuple[Any, ...]] = field(default_factory=list)  # pg_stat_activity rows
    #: the database's user schemas (name -> pg_namespace oid) and the session's search_path
    schemas: dict[str, int] = field(default_factory=lambda: {DEFAULT_SCHEMA: PUBLIC_NS})
    search_path: tuple[str, ...] = (DEFAULT_SCHEMA,)
    roles: list[Role] = field(default_factory=list)  # pg_roles / pg_user (empty: just `user`)
    owners: dict[int, int] = field(default_factory=dict)  # relation id -> owner's role oid
    acls: dict[int, dict[int, frozenset[str]]] = field(default_factory=dict)  # rel -> grantee -> privs
    schema_owners: dict[str, int] = field(default_factory=dict)  # schema -> owner's oid (none: 10)
    schema_acls: dict[str, dict[int, frozenset[str]]] = field(default_factory=dict)  # schema -> grants
    #: set_config(name, value, false): the session's setting changes (pgwire sets it; None: not kept)
    set_setting: Callable[[str, str], None] | None = field(default=None, compare=False)
    functions: list[FunctionCatalog] = field(default_factory=list)  # CREATE FUNCTION's (pg_proc)

    def user_name(self, oid: int) -> str:
        """pg_get_userbyid: a role's name (PostgreSQL shows 'unknown (OID=n)' for none)."""
        for r in self.roles:
            if r.oid == oid:
                return r.name
        return self.user if not self.roles else f"unknown (OID={oid})"

    def has_any(self, rel: Relation, privileges: frozenset[str]) -> bool:
        """Whether the user owns `rel` or holds one of `privileges` on it (itself or through
        PUBLIC): what information_schema shows a relation's rows for (a superuser: all)."""
        me = next((r for r in self.roles if r.name == self.user), None)
        if me is None or me.superuser or self.owners.get(rel.id, SUPERUSER_OID) == me.oid:
            return True
        grants = self.acls.get(rel.id, {})
        return bool((grants.get(me.oid, frozenset()) | grants.get(0, frozenset())) & privileges)

    def visible(self, rel: Relation, rels: list[Relation]) -> bool:
        """PostgreSQL's pg_table_is_visible: `rel` is what its unqualified name resolves to."""
        for sch in self.search_path:
            if sch == rel.schema_name:
                return True
            if any(r.schema_name == sch and r.name == rel.name for r in rels):
                return False
        return False


#: pg_class's own oid: the classoid of a relation's pg_description rows
PG_CLASS_OID = 1259
#: pg_attrdef oids: made from the relation's oid and the column's number
ATTRDEF_OID_BASE = 1 << 40


def _info_table(database: str, r: Relation, table_type: str, insertable: str) -> tuple[Any, ...]:
    """A row of information_schema.tables."""
    return (database, r.schema_name, r.name, table_type, None, None, None, None, None, insertable, "NO", None)


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
            (PUBLIC_NS, "public", *self._schema_owner_acl("public")),
            (INFORMATION_SCHEMA_NS, "information_schema", SUPERUSER_OID, None),
            (PG_TOAST_NS, "pg_toast", SUPERUSER_OID, None),
            *(
                (oid, name, *self._schema_owner_acl(name))
                for name, oid in ctx.schemas.items()
                if oid != PUBLIC_NS
            ),
        ]
        # initdb's comment on public: pg_dump then writes no COMMENT ON SCHEMA public (a fresh database)
        out["pg_description"] = [(PUBLIC_NS, CATALOG_OIDS["pg_namespace"], 0, "standard public schema")]
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
        roles = ctx.roles or [Role(SUPERUSER_OID, user, superuser=True, createdb=True, createrole=True)]
        out["pg_roles"] = [
            (r.oid, r.name, int(r.superuser), 1, int(r.createrole), int(r.createdb), int(r.login), 0, -1,
             "********", None, int(r.superuser), None)
            for r in roles
        ]  # fmt: skip
        out["pg_user"] = [
            (r.name, r.oid, int(r.createdb), int(r.superuser), 0, int(r.superuser), "********", None, None)
            for r in roles
            if r.login
        ]
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
        rel_ids = {r.id for r in self.rels}
        for r in self.rels:
            ns = ctx.schemas.get(r.schema_name, PUBLIC_NS)
            kind = KIND_CHAR.get(r.kind)
            if kind is None:
                continue  # sinks store no rows and have no columns to show
            oid = rel_oid(r)
            cols = r.visible_columns
            # PostgreSQL's information_schema.columns: relations the user owns or may read or
            # write a column of; .tables: any privilege (pg_class / pg_attribute show all)
            column_rows = ctx.has_any(r, _COLUMN_PRIVILEGES)
            table_rows = ctx.has_any(r, _ANY_PRIVILEGE)
            indexes = [
                i
                for i in self.rels
                if i.kind is RelationKind.INDEX and i.index is not None and i.index.index_of == r.id
            ]
            has_index = bool(indexes) or has_user_pk(r)
            out["pg_class"].append(
                (
                    oid,
                    r.name,
                    ns,
                    0,
                    0,
                    ctx.owners.get(r.id, SUPERUSER_OID),
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
            if r.comment is not None:
                out["pg_description"].append((oid, PG_CLASS_OID, 0, r.comment))
            for n, c in enumerate(cols, 1):
                t = c.data_type
                toid = self.types.oid_of(t)
                default = default_text(c)
                if default is not None:
                    out["pg_attrdef"].append((ATTRDEF_OID_BASE + oid * 1000 + n, oid, n, default))
                if c.comment is not None:
                    out["pg_description"].append((oid, PG_CLASS_OID, n, c.comment))
                notnull = has_user_pk(r) and r.table is not None and c.name in pk_names(r).split(", ")
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
                        t.pg_typmod,
                        0,
                        "p",
                        "i",
                        int(notnull),
                        int(default is not None),
                        int(c.since != 0 and c.default is not None),  # atthasmissing: rows before it
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
                if kind != "i" and column_rows:
                    info_columns.append(
                        (
                            ctx.database,
                            r.schema_name,
                            r.name,
                            c.name,
                            n,
                            default,
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
                base = next((b for b in self.rels if r.index is not None and b.id == r.index.index_of), None)
                if base is not None:
                    keys = list(r.index.columns) if r.index is not None else []
                    # indkey: the key columns in key order, then the columns the index also stores
                    # (INCLUDE), as attribute numbers of the base relation
                    position = {c.name: str(i + 1) for i, c in enumerate(base.visible_columns)}
                    stored = index_stored_columns(r)
                    nums = [position[n] for n in stored if n in position]
                    out["pg_index"].append(
                        (
                            oid,
                            rel_oid(base),
                            len(nums),
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
                            " ".join("0" * len(keys)),
                            # indoption: DESC is 1, and DESC's default NULLS FIRST adds 2
                            " ".join("3" if desc else "0" for _, desc in index_keys(r)),
                            None,
                            None,
                            0,
                        )
                    )
                    out["pg_indexes"].append((base.schema_name, base.name, r.name, None, indexdef(r, base)))
            if has_user_pk(r):
                pk_oid = rel_oid(r) + 1_000_000
                assert r.table is not None
                nums = [str(i + 1) for i in r.table.pk]
                out["pg_class"].append(
                    (
                        pk_oid,
                        f"{r.name}_pkey",
                        ns,
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
                        " ".join("0" * len(nums)),
                        " ".join("0" * len(nums)),
                        None,
                        None,
                        0,
                    )
                )
                out["pg_constraint"].append(
                    (
                        pk_oid + 1,
                        f"{r.name}_pkey",
                        ns,
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
                        r.schema_name,
                        r.name,
                        f"{r.name}_pkey",
                        None,
                        pkey_indexdef(r),
                    )
                )
            if r.kind is RelationKind.TABLE:
                out["pg_tables"].append((r.schema_name, r.name, user, None, int(has_index), 0, 0, 0))
                if table_rows:
                    info_tables.append(_info_table(ctx.database, r, "BASE TABLE", "YES"))
            elif r.kind is RelationKind.SOURCE:
                options = format_list(source_options(r), list_of(VARCHAR), lambda v, t: str(v))
                out["pg_foreign_table"].append((oid, FOREIGN_SERVER_OID, options))
                if table_rows:
                    info_tables.append(_info_table(ctx.database, r, "FOREIGN", "NO"))
            if r.kind in (RelationKind.VIEW, RelationKind.MATERIALIZED_VIEW):
                # its _RETURN rule, and what the rule depends on: pg_dump orders its output by them
                rule = rule_oid(r)
                out["pg_rewrite"].append((rule, "_RETURN", oid, "1", "O", 1, None, None))
                pg_rewrite, pg_class = CATALOG_OIDS["pg_rewrite"], CATALOG_OIDS["pg_class"]
                out["pg_depend"].append((pg_rewrite, rule, 0, pg_class, oid, 0, "i"))
                out["pg_depend"].extend(
                    (pg_rewrite, rule, 0, pg_class, dep + OID_OFFSET, 0, "n")
                    for dep in sorted(set(r.depends_on))
                    if dep in rel_ids
                )
            if r.kind is RelationKind.VIEW:
                out["pg_views"].append((r.schema_name, r.name, user, view_query(r)))
                if table_rows:
                    info_tables.append(_info_table(ctx.database, r, "VIEW", "NO"))
                    info_views.append((ctx.database, r.schema_name, r.name, view_query(r)))
            elif r.kind is RelationKind.MATERIALIZED_VIEW:
                out["pg_matviews"].append(
                    (r.schema_name, r.name, user, None, int(has_index), 1, view_query(r))
                )
        out[
            "pg_language"
        ] = [  # PostgreSQL's built-in languages, and python (CREATE FUNCTION ... LANGUAGE python)
            (oid, name, SUPERUSER_OID, int(oid == PYTHON_LANG), int(name != "c"), 0, 0, 0, None)
            for oid, name in ((12, "internal"), (13, "c"), (14, "sql"), (PYTHON_LANG, "python"))
        ]
        out["pg_proc"] = [self._proc_row(f) for f in ctx.functions]
        if out["pg_foreign_table"]:  # the sources' server and its wrapper (pg_dump writes both)
            fdw = FOREIGN_SERVER_OID - 1
            out["pg_foreign_server"] = [
                (FOREIGN_SERVER_OID, "piestream_connectors", SUPERUSER_OID, fdw, None, None, None, None)
            ]
            out["pg_foreign_data_wrapper"] = [(fdw, "piestream", SUPERUSER_OID, 0, 0, None, None)]
        out["pg_type"] = list(self.types.rows)
        out["tables"] = info_tables
        out["columns"] = info_columns
        out["views"] = info_views
        out["schemata"] = [
            (ctx.database, s, user) for s in ("pg_catalog", "information_schema", *ctx.schemas)
        ]
        out["table_constraints"] = []
        out["key_column_usage"] = []
        out["table_privileges"] = self._table_privileges()
        self._relacl(out["pg_class"])
        return out

    def _proc_row(self, f: FunctionCatalog) -> tuple[Any, ...]:
        """A user function's pg_proc row (volatile, parallel unsafe, as CREATE FUNCTION's defaults)."""
        args = [self.types.oid_of(t) for t in f.arg_types]
        names = "{" + ",".join(n or '""' for n in f.arg_names) + "}" if any(f.arg_names) else None
        return (
            function_oid(f), f.name, self.ctx.schemas.get(f.schema_name, PUBLIC_NS), SUPERUSER_OID,
            14 if f.language == "sql" else PYTHON_LANG, 100.0, 0.0, 0, "-", "f", 0, 0, int(f.strict), 0,
            "v", "u", len(args), 0, self.types.oid_of(f.return_type), " ".join(map(str, args)), None,
            None, names, None, None, f.body, None, None, None, None,
        )  # fmt: skip

    def _schema_owner_acl(self, schema: str) -> tuple[int, str | None]:
        """pg_namespace.nspowner and nspacl (aclitem text; NULL: the owner's default, no grants)."""
        ctx = self.ctx
        owner_oid = ctx.schema_owners.get(schema, SUPERUSER_OID)
        grants = ctx.schema_acls.get(schema)
        if grants is None:
            return owner_oid, None
        owner = ctx.user_name(owner_oid)
        items = [f"{owner}=UC/{owner}"]
        for oid, privs in sorted(grants.items(), key=lambda g: (g[0] == 0, g[0])):
            letters = "".join(_ACL_LETTERS[p] for p in SCHEMA_PRIVILEGES if p in privs)
            items.append(f"{'' if oid == 0 else ctx.user_name(oid)}={letters}/{owner}")
        return owner_oid, "{" + ",".join(items) + "}"

    def _granted(self, r: Relation) -> list[tuple[str, str, str]]:
        """(grantor, grantee, privilege) of a relation: its owner's own, then the grants."""
        ctx = self.ctx
        owner = ctx.user_name(ctx.owners.get(r.id, SUPERUSER_OID))
        out = [(owner, owner, p) for p in RELATION_PRIVILEGES]
        for oid, privs in sorted(ctx.acls.get(r.id, {}).items()):
            who = "PUBLIC" if oid == 0 else ctx.user_name(oid)
            out += [(owner, who, p) for p in RELATION_PRIVILEGES if p in privs]
        return out

    def _table_privileges(self) -> list[tuple[Any, ...]]:
        """information_schema.table_privileges: what the current user was granted or granted
        (everything for a superuser), as PostgreSQL shows it."""
        ctx = self.ctx
        me = next((r for r in ctx.roles if r.name == ctx.user), None)
        see_all = me is None or me.superuser
        rows = []
        for r in self.rels:
            if r.kind not in _PRIVILEGED_KINDS:
                continue
            for grantor, grantee, p in self._granted(r):
                if see_all or ctx.user in (grantor, grantee) or grantee == "PUBLIC":
                    grantable = "YES" if grantee == grantor else "NO"
                    rows.append((grantor, grantee, ctx.database, r.schema_name, r.name, p, grantable, "YES"))
        return rows

    def _relacl(self, pg_class: list[tuple[Any, ...]]) -> None:
        """pg_class.relacl (psql's \\dp): PostgreSQL's aclitem text for relations with grants."""
        at = [c for c, _ in TABLES["pg_class"]].index("relacl")
        by_oid = {rel_oid(r): r for r in self.rels if r.id in self.ctx.acls}
        for i, row in enumerate(pg_class):
            r = by_oid.get(row[0])
            if r is None:
                continue
            items: dict[tuple[str, str], str] = {}
            for grantor, grantee, p in self._granted(r):
                key = ("" if grantee == "PUBLIC" else grantee, grantor)
                items[key] = items.get(key, "") + _ACL_LETTERS[p]
            acl = "{" + ",".join(f"{g}={letters}/{by}" for (g, by), letters in items.items()) + "}"
            pg_class[i] = (*row[:at], acl, *row[at + 1 :])


#: relations GRANT applies to, and PostgreSQL's ACL letters
_PRIVILEGED_KINDS = frozenset(
    {RelationKind.TABLE, RelationKind.MATERIALIZED_VIEW, RelationKind.VIEW, RelationKind.SOURCE}
)
_COLUMN_PRIVILEGES = frozenset({"SELECT", "INSERT", "UPDATE"})
_ANY_PRIVILEGE = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"})
_ACL_LETTERS = {
    "INSERT": "a", "SELECT": "r", "UPDATE": "w", "DELETE": "d", "TRUNCATE": "D", "USAGE": "U", "CREATE": "C",
}  # fmt: skip

_PG_LEN_KINDS = frozenset(k for k in TypeKind if k not in (TypeKind.LIST, TypeKind.STRUCT))


def _info_data_type(t: DataType) -> str:
    if t.kind is TypeKind.LIST:
        return "ARRAY"
    if t.kind is TypeKind.STRUCT:
        return "USER-DEFINED"
    return str(t)
