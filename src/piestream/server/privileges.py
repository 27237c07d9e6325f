"""Users and privileges: CREATE / ALTER / DROP USER | ROLE, GRANT / REVOKE, and the checks every
statement passes before it runs (PostgreSQL's rules and messages, 42501).

A relation's owner (its creator) and superusers may do everything with it; others need the
privilege granted to them or to PUBLIC: SELECT to read it (in a query, a view, an MV, a sink, COPY
TO), INSERT / UPDATE / DELETE to change a table. DROP, CREATE INDEX, ALTER ... REBUILD and GRANT
need ownership (DROP: of the relation or of its schema). TRUNCATE needs the TRUNCATE privilege.
A view or MV reads its inputs with its owner's rights: a reader needs SELECT on
the view or MV only. The embedded Python API (a session with no user) is the data directory's
owner and passes every check.

Schemas (PostgreSQL's rules): the owner (the creator; public's is the bootstrap superuser) may do
everything; others need USAGE to name what a schema holds (a qualified name in a schema without it
is 42501 ``permission denied for schema s``; search_path skips such schemas, as PostgreSQL's does)
and CREATE to create in it (or rename in it). CREATE SCHEMA needs CREATE on the database, which
only superusers have (its owner is the bootstrap superuser). PUBLIC has USAGE on public, not CREATE
(PostgreSQL 15), so a new user creates in public only once granted CREATE ON SCHEMA public.

Relations a statement reads are taken from its parsed tree (every table reference not naming a
CTE): names only, one walk per statement, no binder involvement.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from piestream.common.errors import (
    DependentObjectsStillExist,
    DuplicateObject,
    FeatureNotSupported,
    PiestreamError,
    UndefinedTable,
)
from piestream.frontend.catalog import DEFAULT_SCHEMA, TEMP_SCHEMA, Relation, RelationKind
from piestream.frontend.parser import ast
from piestream.frontend.parser.ast import RELATION_PRIVILEGES, SCHEMA_PRIVILEGES
from piestream.frontend.parser.names import object_name, table_name
from piestream.meta.roles import BOOTSTRAP_SUPERUSER, PUBLIC, Role
from piestream.server.results import QueryResult, command

if TYPE_CHECKING:
    from piestream.server.session import Session

log = logging.getLogger(__name__)

_SYSTEM_SCHEMAS = frozenset({"pg_catalog", "information_schema", "rw_catalog"})
#: relation kinds GRANT takes, by the keyword written after ON
_GRANT_KINDS: dict[str, tuple[RelationKind, ...]] = {
    "table": (RelationKind.TABLE, RelationKind.MATERIALIZED_VIEW, RelationKind.VIEW, RelationKind.SOURCE),
    "materialized view": (RelationKind.MATERIALIZED_VIEW,),
    "view": (RelationKind.VIEW,),
    "source": (RelationKind.SOURCE,),
}


class InsufficientPrivilege(PiestreamError):
    sqlstate = "42501"


class UndefinedObject(PiestreamError):
    sqlstate = "42704"


def permission_denied(rel: Relation) -> InsufficientPrivilege:
    return InsufficientPrivilege(f"permission denied for {rel.kind.value} {rel.name}")


def must_own(rel: Relation) -> InsufficientPrivilege:
    return InsufficientPrivilege(f"must be owner of {rel.kind.value} {rel.name}")


class InvalidGrantOperation(PiestreamError):
    sqlstate = "0LP01"


# -- whose session ----------------------------------------------------------------------------
def current_role(s: Session) -> Role | None:
    """The session's role; None for the embedded owner (no checks). A role dropped while its
    session lives is a role with no rights."""
    if s.user is None:
        return None
    r = s.db.roles.get(s.user)
    return r if r is not None else Role(-1, s.user, login=False)


def _owns(s: Session, role: Role, rel: Relation) -> bool:
    return role.superuser or s.db.roles.owner(rel.id) == role.oid


def has_privilege(s: Session, role: Role | None, rel: Relation, privilege: str) -> bool:
    if role is None or _owns(s, role, rel):
        return True
    return privilege in s.db.roles.privileges(rel.id, role.oid)


def require(s: Session, rel: Relation, privilege: str) -> None:
    if not has_privilege(s, current_role(s), rel, privilege):
        raise permission_denied(rel)


def require_owner(s: Session, rel: Relation, *, or_schema_owner: bool = False) -> None:
    """Ownership of `rel` (with `or_schema_owner`, ownership of its schema does too: DROP)."""
    role = current_role(s)
    if role is None or _owns(s, role, rel):
        return
    if or_schema_owner and _owns_schema(s, role, rel.schema_name):
        return
    raise must_own(rel)


# -- schemas ----------------------------------------------------------------------------------
def _owns_schema(s: Session, role: Role, schema: str) -> bool:
    return role.superuser or s.db.roles.schema_owner(schema) == role.oid


def _user_schemas(s: Session) -> set[str]:
    return {DEFAULT_SCHEMA, *(c.name for c in s.db.catalog.schemas())}


def has_schema_privilege(s: Session, role: Role | None, schema: str, privilege: str) -> bool:
    """USAGE / CREATE on `schema`. Built-in schemas: USAGE for all; temporary ones: their
    session's; a schema that does not exist passes (the statement reports it)."""
    if role is None or role.superuser:
        return True
    if schema in _SYSTEM_SCHEMAS:
        return privilege == "USAGE"
    if schema == TEMP_SCHEMA or schema.startswith(TEMP_SCHEMA) or schema not in _user_schemas(s):
        return True
    return _owns_schema(s, role, schema) or privilege in s.db.roles.schema_privileges(schema, role.oid)


def require_schema(s: Session, schema: str, privilege: str) -> None:
    if not has_schema_privilege(s, current_role(s), schema, privilege):
        raise InsufficientPrivilege(f"permission denied for schema {schema}")


def usable_search_path(s: Session, path: tuple[str, ...]) -> tuple[str, ...]:
    """search_path without the schemas the session's role has no USAGE on (PostgreSQL skips
    them: unqualified names never resolve there, nothing is created there)."""
    role = current_role(s)
    if role is None or role.superuser:
        return path
    return tuple(p for p in path if has_schema_privilege(s, role, p, "USAGE"))


def _require_create_in(s: Session, name: str) -> None:
    """CREATE on the schema a CREATE of `name` puts it in (errors of the name: the handler's)."""
    try:
        schema = s.catalog().creation_schema(name)
    except PiestreamError:
        return
    require_schema(s, schema, "CREATE")


# -- what a statement reads -------------------------------------------------------------------
def _lookup(s: Session, name: str, *, usage: bool = True) -> Relation | None:
    """The relation `name` (an `ObjectName`, maybe qualified) resolves to as the session resolves
    it (its search_path and database); None where it names none (the statement reports that).
    A qualified name needs USAGE on its schema (42501 even when it names nothing, as PostgreSQL);
    not `usage`: the bookkeeping around a CREATE (CREATE alone lets a role create there)."""
    schema = object_name(name).schema
    if schema is not None and usage:
        require_schema(s, schema, "USAGE")
    try:
        return s.committed_catalog().get_relation(name)
    except PiestreamError:  # another database: the statement's own binding refuses it
        return None


def read_relations(s: Session, tree: exp.Expression | None) -> list[Relation]:
    """The catalog relations a query tree names (CTE names and system catalogs left out)."""
    if tree is None:
        return []
    out: dict[int, Relation] = {}
    for t in tree.find_all(exp.Table):
        if not isinstance(t.this, exp.Identifier):
            continue  # a table function
        schema = t.db
        if schema in _SYSTEM_SCHEMAS or (not schema and _names_cte(t)):
            continue
        rel = _lookup(s, table_name(t))
        if rel is not None:
            out[rel.id] = rel
    return list(out.values())


def _names_cte(t: exp.Table) -> bool:
    """Whether the table reference names a CTE visible where it stands (SQL scoping: the WITH of
    an enclosing query; inside a CTE's body only the CTEs before it, or all with RECURSIVE)."""
    path: list[exp.Expr] = [t]
    node = t.parent
    while node is not None:
        w = node.args.get("with_") or node.args.get("with")
        if isinstance(w, exp.With):
            ctes = list(w.expressions)
            if path[-1] is w:  # t is inside one of the CTE bodies
                body = path[-2] if len(path) >= 2 else None
                idx = next((i for i, c in enumerate(ctes) if c is body), len(ctes))
                visible = ctes if w.args.get("recursive") else ctes[:idx]
            else:
                visible = ctes
            if any(c.alias_or_name == t.name for c in visible):
                return True
        path.append(node)
        node = node.parent
    return False


def _require_select(s: Session, trees: Iterable[exp.Expression | None]) -> None:
    for tree in trees:
        for rel in read_relations(s, tree):
            require(s, rel, "SELECT")


def _target(s: Session, name: str, privilege: str) -> Relation | None:
    rel = _lookup(s, name)
    if rel is not None:
        require(s, rel, privilege)
    return rel


def _reads_columns(trees: Iterable[exp.Expression | None]) -> bool:
    return any(t is not None and t.find(exp.Column) is not None for t in trees)


def check_statement(s: Session, stmt: ast.Statement) -> None:
    """Raise 42501 when the session's role may not run `stmt` (before it runs)."""
    role = current_role(s)
    if role is None or role.superuser:
        return
    if isinstance(stmt, ast.Query):
        _require_select(s, [stmt.query])
    elif isinstance(stmt, ast.Insert):
        _target(s, stmt.table, "INSERT")
        if stmt.returning:
            _target(s, stmt.table, "SELECT")
        _require_select(s, [stmt.source])
    elif isinstance(stmt, ast.Update):
        _target(s, stmt.table, "UPDATE")
        reads = [stmt.where, *(a.value for a in stmt.assignments), *stmt.returning]
        if _reads_columns(reads):  # PostgreSQL: reading the table's columns needs SELECT
            _target(s, stmt.table, "SELECT")
        _require_select(s, reads)
    elif isinstance(stmt, ast.Delete):
        _target(s, stmt.table, "DELETE")
        reads = [stmt.where, *stmt.returning]
        if _reads_columns(reads):
            _target(s, stmt.table, "SELECT")
        _require_select(s, reads)
    elif isinstance(stmt, ast.Copy):
        if stmt.table is not None:
            _target(s, stmt.table, "SELECT" if stmt.to_client else "INSERT")
        _require_select(s, [stmt.query])
    elif isinstance(stmt, ast.CreateSchema):
        raise InsufficientPrivilege(f"permission denied for database {s.database}")
    elif isinstance(stmt, ast.DropSchema):
        for name in stmt.names:
            if name in _user_schemas(s) and not _owns_schema(s, role, name):
                raise InsufficientPrivilege(f"must be owner of schema {name}")
    elif isinstance(stmt, ast.CreateMaterializedView):  # (PostgreSQL checks the query's reads first)
        _require_select(s, [stmt.query])
        _require_create_in(s, stmt.name)
    elif isinstance(stmt, ast.CreateView):
        if not stmt.temporary:
            _require_create_in(s, stmt.name)
        if stmt.or_replace and (old := _lookup(s, stmt.name)) is not None:
            require_owner(s, old)
        _require_select(s, [stmt.query])
    elif isinstance(stmt, ast.CreateTable):
        _require_select(s, [stmt.as_query])
        if not stmt.temporary:
            _require_create_in(s, stmt.name)
    elif isinstance(stmt, ast.CreateSource):
        _require_create_in(s, stmt.name)
    elif isinstance(stmt, ast.CreateSink):
        _require_create_in(s, stmt.name)
        if stmt.from_relation is not None:
            _target(s, stmt.from_relation, "SELECT")
        _require_select(s, [stmt.query])
        if stmt.into_table is not None:
            _target(s, stmt.into_table, "INSERT")
    elif isinstance(stmt, ast.CreateSubscription):
        _require_create_in(s, stmt.name)
        _target(s, stmt.from_relation, "SELECT")
    elif isinstance(stmt, ast.CreateIndex):
        rel = _lookup(s, stmt.table)
        if rel is not None:
            require_owner(s, rel)
            require_schema(s, rel.schema_name, "CREATE")  # an index goes to its table's schema
    elif isinstance(stmt, ast.Drop):
        for name in stmt.names:
            rel = _lookup(s, name)
            if rel is not None and rel.kind.value == stmt.kind:
                require_owner(s, rel, or_schema_owner=True)
    elif isinstance(
        stmt,
        ast.RebuildJob
        | ast.AlterAddColumn
        | ast.AlterDropColumn
        | ast.AlterRename
        | ast.AlterParallelism
        | ast.CommentOn,
    ):
        rel = _lookup(s, stmt.name)
        if rel is not None:
            require_owner(s, rel)
            if isinstance(stmt, ast.AlterRename) and stmt.column is None:
                require_schema(s, rel.schema_name, "CREATE")  # PostgreSQL: a new name in the schema
    elif isinstance(stmt, ast.Truncate):
        for name in stmt.names:
            rel = _lookup(s, name)
            if rel is not None:
                require(s, rel, "TRUNCATE")
    elif isinstance(stmt, ast.AlterSystem):
        raise InsufficientPrivilege("must be superuser to execute ALTER SYSTEM command")
    elif isinstance(stmt, ast.DeclareCursor):  # its query runs at DECLARE
        _require_select(s, [stmt.query])
    elif isinstance(stmt, ast.DeclareSubscriptionCursor):
        sub = _lookup(s, stmt.subscription)
        if sub is not None and sub.subscription is not None:
            of = next((r for r in s.db.catalog.snapshot().relations() if r.id == sub.subscription.of), None)
            if of is not None:
                require(s, of, "SELECT")
    elif isinstance(stmt, ast.Explain):
        check_statement(s, stmt.statement)
    elif isinstance(stmt, ast.Describe | ast.ShowCreate):  # a relation's columns: its schema's USAGE
        _lookup(s, stmt.name)
    elif isinstance(stmt, ast.ShowObjects) and stmt.from_ is not None:
        if stmt.kind in ("columns", "indexes"):
            _lookup(s, stmt.from_)
        else:  # SHOW TABLES FROM s
            require_schema(s, stmt.from_, "USAGE")


def check_names(s: Session, stmt: ast.Statement) -> None:
    """What PostgreSQL checks at parse analysis, before a statement runs (extended protocol's
    Parse and Describe): a qualified name needs USAGE on its schema, so describing a query's
    result cannot show the columns of a relation the role may not even name (42501)."""
    role = current_role(s)
    if role is None or role.superuser:
        return
    if isinstance(stmt, ast.Query):
        read_relations(s, stmt.query)


# -- owners of what a statement created -------------------------------------------------------
_CREATES = (
    ast.CreateTable,
    ast.CreateMaterializedView,
    ast.CreateView,
    ast.CreateIndex,
    ast.CreateSource,
    ast.CreateSink,
    ast.CreateSubscription,
)


def existing(s: Session, stmt: ast.Statement) -> int | None:
    """Before a CREATE: the id of a relation of that name already there (CREATE ... IF NOT EXISTS
    then creates nothing, and nobody's relation changes hands)."""
    if isinstance(stmt, _CREATES):
        rel = _lookup(s, stmt.name, usage=False)
        return rel.id if rel is not None else None
    if isinstance(stmt, ast.CreateSchema):
        return 0 if stmt.name in _user_schemas(s) else None
    return None


def after_statement(s: Session, stmt: ast.Statement, existed: int | None = None) -> None:
    """After a statement succeeded: its creator owns what it created (a CREATE TABLE in a
    transaction block once COMMIT made it), a DROP's relations take their grants along."""
    role = current_role(s)
    if isinstance(stmt, ast.CreateSchema):
        if existed is None and role is not None and role.oid >= 0:
            s.db.roles.set_schema_owner(stmt.name, role.oid)
    elif isinstance(stmt, ast.DropSchema):
        live = _user_schemas(s)
        for name in stmt.names:
            if name not in live:
                s.db.roles.forget_schema(name)
        _forget_dropped(s)
    elif isinstance(stmt, _CREATES):
        name = stmt.name
        rel = _lookup(s, name, usage=False)
        if rel is not None and rel.id == existed:
            return
        if rel is None:
            s.pending_owned.append(name)  # in a transaction block: at COMMIT
        elif role is not None and role.oid >= 0:
            s.db.roles.set_owner(rel.id, role.oid)
    elif isinstance(stmt, ast.Commit | ast.Rollback):
        names, s.pending_owned = s.pending_owned, []
        if isinstance(stmt, ast.Commit) and role is not None and role.oid >= 0:
            for name in names:
                rel = _lookup(s, name, usage=False)
                if rel is not None:
                    s.db.roles.set_owner(rel.id, role.oid)
    elif isinstance(stmt, ast.Drop):
        _forget_dropped(s)


def _forget_dropped(s: Session) -> None:
    live = {r.id for r in s.db.catalog.snapshot().relations()}
    for rel_id in s.db.roles.known_relations() - live:
        s.db.roles.forget_relation(rel_id)


# -- CREATE / ALTER / DROP USER | ROLE -------------------------------------------------------------
def _verifier(password: str | None) -> str | None:
    """What the meta store keeps for a password: a SCRAM verifier (one given as such is kept)."""
    from piestream.server.pgwire.auth import ScramVerifier  # (pgwire imports this module)

    if password is None or password == "":
        return None
    if ScramVerifier.parse(password) is not None:
        return password
    if password.startswith("md5") and len(password) == 35:
        raise FeatureNotSupported(
            "md5 password hashes are not supported: give the password or a SCRAM verifier"
        )
    return ScramVerifier.from_password(password).text()


def _check_name(name: str) -> None:
    if name == PUBLIC or name in ("none", "current_user", "session_user", "current_role"):
        raise PiestreamError(f'role name "{name}" is reserved', sqlstate="42939")
    if name.startswith("pg_"):
        raise PiestreamError(
            f'role name "{name}" is reserved',
            sqlstate="42939",
            detail='Role names starting with "pg_" are reserved.',
        )


def _admin(s: Session, action: str) -> Role | None:
    role = current_role(s)
    if role is not None and not (role.superuser or role.createrole):
        raise InsufficientPrivilege(f"permission denied to {action} role")
    return role


def create_role(s: Session, stmt: ast.CreateRole, params: Sequence[Any] = ()) -> QueryResult:
    _check_name(stmt.name)
    actor = _admin(s, "create")
    o = stmt.options
    if o.superuser and actor is not None and not actor.superuser:
        raise InsufficientPrivilege("must be superuser to create superusers")
    roles = s.db.roles
    if roles.get(stmt.name) is not None:
        raise DuplicateObject(f'role "{stmt.name}" already exists', sqlstate="42710")
    roles.create(
        Role(
            0,
            stmt.name,
            superuser=bool(o.superuser),
            login=o.login if o.login is not None else stmt.is_user,
            createdb=bool(o.createdb),
            createrole=bool(o.createrole),
            password=_verifier(o.password),
        )
    )
    log.info("role %s created by %s", stmt.name, s.user or "the embedded API")
    return command("CREATE ROLE")


def alter_role(s: Session, stmt: ast.AlterRole, params: Sequence[Any] = ()) -> QueryResult:
    roles = s.db.roles
    target = roles.get(stmt.name)
    if target is None:
        raise UndefinedObject(f'role "{stmt.name}" does not exist')
    actor = current_role(s)
    o = stmt.options
    own_password_only = (
        stmt.rename_to is None and o == ast.RoleOptions(password=o.password) and o.password is not None
    )
    if actor is not None and not actor.superuser:
        if target.name == actor.name and own_password_only:
            pass  # anyone may change their own password
        elif not actor.createrole:
            raise InsufficientPrivilege("permission denied to alter role")
        elif target.superuser or o.superuser is not None:
            raise InsufficientPrivilege(
                "must be superuser to alter superuser roles or change superuser attribute"
            )
    if stmt.rename_to is not None:
        _check_name(stmt.rename_to)
        if s.user is not None and target.name == s.user:
            raise FeatureNotSupported("session user cannot be renamed")
        if target.name == BOOTSTRAP_SUPERUSER:
            raise FeatureNotSupported(
                f'role "{target.name}" cannot be renamed: it is the bootstrap superuser'
            )
        if roles.get(stmt.rename_to) is not None:
            raise DuplicateObject(f'role "{stmt.rename_to}" already exists', sqlstate="42710")
        roles.update(target.name, _with(target, name=stmt.rename_to))
        return command("ALTER ROLE")
    if target.name == BOOTSTRAP_SUPERUSER and o.superuser is False:
        raise FeatureNotSupported(
            f'role "{target.name}" must stay a superuser: it is the bootstrap superuser'
        )
    changed = _with(
        target,
        superuser=target.superuser if o.superuser is None else o.superuser,
        login=target.login if o.login is None else o.login,
        createdb=target.createdb if o.createdb is None else o.createdb,
        createrole=target.createrole if o.createrole is None else o.createrole,
        password=target.password if o.password is None else _verifier(o.password),
    )
    roles.update(target.name, changed)
    return command("ALTER ROLE")


def _with(r: Role, **changes: Any) -> Role:
    from dataclasses import replace

    return replace(r, **changes)


def drop_role(s: Session, stmt: ast.DropRole, params: Sequence[Any] = ()) -> QueryResult:
    actor = _admin(s, "drop")
    roles = s.db.roles
    res = command("DROP ROLE")
    names = {r.id: r for r in s.db.catalog.snapshot().relations()}
    for name in stmt.names:
        target = roles.get(name)
        if target is None:
            if stmt.if_exists:
                res.notices.append(f'role "{name}" does not exist, skipping')
                continue
            raise UndefinedObject(f'role "{name}" does not exist')
        if s.user is not None and name == s.user:
            raise PiestreamError("current user cannot be dropped", sqlstate="55006")
        if name == BOOTSTRAP_SUPERUSER:
            raise DependentObjectsStillExist(
                f"cannot drop role {name} because it is required by the database system"
            )
        if target.superuser and actor is not None and not actor.superuser:
            raise InsufficientPrivilege("must be superuser to drop superusers")
        deps = [
            f"owner of {names[r].kind.value} {names[r].name}"
            for r in roles.owned_by(target.oid)
            if r in names
        ]
        deps += [
            f"privileges for {names[r].kind.value} {names[r].name}"
            for r in roles.granted_to(target.oid)
            if r in names
        ]
        deps += [f"owner of schema {n}" for n in roles.schemas_owned_by(target.oid)]
        deps += [f"privileges for schema {n}" for n in roles.schemas_granted_to(target.oid)]
        if deps:
            raise DependentObjectsStillExist(
                f'role "{name}" cannot be dropped because some objects depend on it', detail="\n".join(deps)
            )
        roles.drop(name)
    return res


# -- GRANT / REVOKE ---------------------------------------------------------------------------
def _grantee_oids(s: Session, names: Sequence[str]) -> list[int]:
    out: list[int] = []
    for g in names:
        if g == PUBLIC:
            out.append(0)
            continue
        r = s.db.roles.get(g)
        if r is None:
            raise UndefinedObject(f'role "{g}" does not exist')
        out.append(r.oid)
    return out


def _check_privilege_types(privileges: Sequence[str], allowed: Sequence[str], kind: str) -> None:
    for p in privileges:
        if p not in allowed:
            raise InvalidGrantOperation(f"invalid privilege type {p} for {kind}")


def _existing_schema(s: Session, name: str) -> str:
    if name in _SYSTEM_SCHEMAS or name.startswith(TEMP_SCHEMA):
        raise FeatureNotSupported(f'privileges on schema "{name}" are not supported (a built-in schema)')
    if name not in _user_schemas(s):
        raise PiestreamError(f'schema "{name}" does not exist', sqlstate="3F000")
    return name


def _grant_schemas(s: Session, stmt: ast.Grant) -> QueryResult:
    _check_privilege_types(stmt.privileges, SCHEMA_PRIVILEGES, "schema")
    role = current_role(s)
    schemas = [_existing_schema(s, n) for n in stmt.relations]
    for n in schemas:
        if role is not None and not _owns_schema(s, role, n):
            raise InsufficientPrivilege(f"permission denied for schema {n}")
    grantees = _grantee_oids(s, stmt.grantees)
    for n in schemas:
        s.db.roles.change_schema_grants(n, grantees, frozenset(stmt.privileges), revoke=stmt.revoke)
    return command("REVOKE" if stmt.revoke else "GRANT")


def grant(s: Session, stmt: ast.Grant, params: Sequence[Any] = ()) -> QueryResult:
    if stmt.kind == "schema":
        return _grant_schemas(s, stmt)
    _check_privilege_types(stmt.privileges, RELATION_PRIVILEGES, "table" if stmt.kind is None else stmt.kind)
    roles = s.db.roles
    role = current_role(s)
    targets: list[Relation] = []
    if stmt.kind == "all tables in schema":
        for name in stmt.relations:
            require_schema(s, _existing_schema(s, name), "USAGE")
            rels = s.committed_catalog().relations_in(name)
            targets += sorted((r for r in rels if r.kind in _GRANT_KINDS["table"]), key=lambda r: r.id)
        for t in targets:
            if role is not None and not _owns(s, role, t):
                raise permission_denied(t)
    for name in stmt.relations if stmt.kind != "all tables in schema" else ():
        rel = _lookup(s, name)
        if rel is None:
            raise UndefinedTable(f'relation "{name}" does not exist')
        allowed = _GRANT_KINDS[stmt.kind or "table"]
        if rel.kind not in allowed:
            if rel.kind is RelationKind.INDEX:  # PostgreSQL's: an index is read through its table
                raise PiestreamError(f'"{rel.name}" is an index', sqlstate="42809")
            if rel.kind in (RelationKind.SINK, RelationKind.SUBSCRIPTION):
                raise FeatureNotSupported(
                    f"privileges on a {rel.kind.value} are not supported ({rel.name}): it has no rows "
                    "to read or write; its owner alone may drop or alter it"
                )
            raise PiestreamError(f'"{rel.name}" is not a {stmt.kind}', sqlstate="42809")
        if role is not None and not _owns(s, role, rel):
            raise permission_denied(rel)
        targets.append(rel)
    grantees = _grantee_oids(s, stmt.grantees)
    for rel in targets:
        roles.change_grants(rel.id, grantees, frozenset(stmt.privileges), revoke=stmt.revoke)
    return command("REVOKE" if stmt.revoke else "GRANT")


# -- ALTER ... OWNER TO -----------------------------------------------------------------------
#: relation kinds each ALTER keyword takes for OWNER TO (ALTER TABLE takes any, as PostgreSQL)
_ALTER_KINDS: dict[str, tuple[RelationKind, ...]] = {
    **_GRANT_KINDS,
    "table": (*_GRANT_KINDS["table"], RelationKind.SINK),
    "sink": (RelationKind.SINK,),
}


def alter_owner(s: Session, stmt: ast.AlterOwner, params: Sequence[Any] = ()) -> QueryResult:
    """ALTER SCHEMA | TABLE | ... name OWNER TO role: the owner (or a superuser) hands it over;
    a non-superuser only to a role it is (no role membership), which needs CREATE where the
    object lives (PostgreSQL's checks and messages)."""
    roles = s.db.roles
    actor = current_role(s)
    name = stmt.owner
    if name in ("current_user", "session_user"):
        name = s.user or BOOTSTRAP_SUPERUSER
    new = roles.get(name)
    if new is None:
        raise UndefinedObject(f'role "{name}" does not exist')
    if stmt.kind == "schema":
        schema = _existing_schema(s, stmt.name)
        if actor is not None and not actor.superuser:
            if not _owns_schema(s, actor, schema):
                raise InsufficientPrivilege(f"must be owner of schema {schema}")
            if new.oid != actor.oid:  # (and only superusers have CREATE on the database)
                raise InsufficientPrivilege(f'must be member of role "{new.name}"')
        roles.set_schema_owner(schema, new.oid)
        return command("ALTER SCHEMA")
    rel = _lookup(s, stmt.name)
    if rel is None:
        raise UndefinedTable(f'relation "{stmt.name}" does not exist')
    if rel.kind not in _ALTER_KINDS[stmt.kind]:
        raise PiestreamError(f'"{rel.name}" is not a {stmt.kind}', sqlstate="42809")
    if actor is not None and not actor.superuser:
        require_owner(s, rel)
        if new.oid != actor.oid:
            raise InsufficientPrivilege(f'must be member of role "{new.name}"')
        require_schema(s, rel.schema_name, "CREATE")
    roles.set_owner(rel.id, new.oid)
    return command(f"ALTER {stmt.kind.upper()}")
