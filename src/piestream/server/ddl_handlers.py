"""Handlers of DDL statements: CREATE TABLE / MATERIALIZED VIEW / VIEW / INDEX and DROP.

A statement either fully happens or changes nothing: the handler checks names and builds the
plan (any error leaves everything untouched), then hands it to meta's `DdlController`, which
stores and starts the job atomically — and removes it again if its first epoch fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from piestream.common.errors import (
    DependentObjectsStillExist,
    DuplicateObject,
    FeatureNotSupported,
    PiestreamError,
    UndefinedTable,
)
from piestream.common.types import VARCHAR
from piestream.frontend.binder import QueryBinder
from piestream.frontend.catalog import (
    BUILTIN_SCHEMAS,
    DEFAULT_SCHEMA,
    TEMP_SCHEMA,
    VIEW_COLUMN_LIST,
    VIEW_SEARCH_PATH,
    ColumnCatalog,
    IndexInfo,
    InvalidSchemaName,
    Relation,
    RelationKind,
    format_search_path,
)
from piestream.frontend.column_default import ColumnDefault, bind_column_default
from piestream.frontend.parser import ast
from piestream.frontend.parser.names import ObjectName, object_name, schema_of
from piestream.frontend.planner import PlannedJob, plan_materialized_view, plan_table, table_conflict
from piestream.frontend.watermark_derive import bind_watermark
from piestream.meta.catalog_store import SchemaCatalog
from piestream.server.cdc_handlers import drop_cdc_slots
from piestream.server.results import QueryResult, command
from piestream.server.settings import parallelism_setting
from piestream.server.sink_publisher import discard_staging

if TYPE_CHECKING:
    from piestream.server.database import Database
    from piestream.server.session import Session

_KIND = {
    "table": RelationKind.TABLE,
    "materialized view": RelationKind.MATERIALIZED_VIEW,
    "view": RelationKind.VIEW,
    "index": RelationKind.INDEX,
    "source": RelationKind.SOURCE,
    "sink": RelationKind.SINK,
    "subscription": RelationKind.SUBSCRIPTION,
}


class WrongObjectType(PiestreamError):
    sqlstate = "42809"


def creation_schema(s: Session, name: str) -> str:
    """The schema a new relation `name` goes to (the one written, else search_path's first)."""
    return s.catalog().creation_schema(name)


class InvalidTableDefinition(PiestreamError):
    sqlstate = "42P16"


def new_schema(s: Session, stmt: Any) -> str:
    """The schema the relation `stmt` creates goes to: the session's temporary one for CREATE
    TEMP TABLE / VIEW (or a name qualified by pg_temp), else `creation_schema`."""
    schema = creation_schema(s, stmt.name)
    if getattr(stmt, "temporary", False) and schema != s.temp_schema:
        if schema_of(stmt.name) is not None:
            raise InvalidTableDefinition("cannot create temporary relation in non-temporary schema")
        return s.temp_schema
    return schema


def in_schema(rel: Relation, schema: str) -> Relation:
    """`rel` placed in `schema` (planners build relations by name; the handler knows where)."""
    return rel if rel.schema_name == schema else replace(rel, schema_name=schema)


#: The command tag of each CREATE statement (PostgreSQL's spelling; RisingWave's for its own).
CREATE_TAGS: dict[type[ast.Statement], str] = {
    ast.CreateTable: "CREATE TABLE",
    ast.CreateMaterializedView: "CREATE MATERIALIZED VIEW",
    ast.CreateView: "CREATE VIEW",
    ast.CreateIndex: "CREATE INDEX",
    ast.CreateSource: "CREATE SOURCE",
    ast.CreateSink: "CREATE SINK",
    ast.CreateSubscription: "CREATE SUBSCRIPTION",
}


def check_new_name(s: Session, stmt: Any, schema: str | None = None) -> QueryResult | None:
    """None if the name `stmt` creates is free in the schema it goes to (for this session:
    tables its transaction created count); a notice result for IF NOT EXISTS; else 42P07."""
    name = stmt.name
    cat = s.catalog()
    schema = schema or new_schema(s, stmt)
    if (schema, str(name)) in cat.by_name:
        if stmt.if_not_exists:
            ctas = isinstance(stmt, ast.CreateTable) and stmt.as_query is not None
            r = command("CREATE TABLE AS" if ctas else CREATE_TAGS[type(stmt)])  # PostgreSQL's
            r.notices.append(f'relation "{name}" already exists, skipping')
            return r
        raise DuplicateObject(f'relation "{name}" already exists')
    return None


def with_defaults(rel: Relation, defaults: dict[str, ColumnDefault]) -> Relation:
    """`rel` with its columns' DEFAULTs (CREATE TABLE ... DEFAULT): what INSERT and COPY write
    for an omitted column. Stored rows never lack them (unlike ADD COLUMN's `missing`)."""
    cols = tuple(
        replace(c, default=defaults[c.name].value, default_expr=defaults[c.name].expr)
        if c.name in defaults
        else c
        for c in rel.columns
    )
    return replace(rel, columns=cols)


def check_unique_columns(names: Sequence[str]) -> None:
    """A relation's columns need distinct names (a plain SELECT may repeat one; a view, table or
    MV may not: PostgreSQL's 42701)."""
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise PiestreamError(f'column "{n}" specified more than once', sqlstate="42701")
        seen.add(n)


# -- CREATE TABLE -------------------------------------------------------------------------------


def create_table(s: Session, stmt: ast.CreateTable, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        skipped = check_new_name(s, stmt)
        if skipped is not None:
            return skipped
        if stmt.as_query is not None:
            return _create_table_as(s, stmt, params)
        cols = []
        defaults: dict[str, ColumnDefault] = {}
        for c in stmt.columns:
            if c.type is None or c.generated is not None:
                raise FeatureNotSupported(f'generated column "{c.name}" is not supported')
            if c.default is not None:
                defaults[c.name] = bind_column_default(c.default, c.type, c.name)
            cols.append((c.name, c.type))
        names = [n for n, _ in cols]
        check_unique_columns(names)
        for k in stmt.primary_key:
            if k not in names:
                raise PiestreamError(f'column "{k}" named in key does not exist', sqlstate="42703")
        conflict = table_conflict(stmt)
        watermark = bind_watermark(stmt.watermarks, cols, append_only=stmt.append_only, what="table")
        schema = new_schema(s, stmt)
        job_id = s.db.ddl.next_job_id()
        planned = plan_table(
            name=stmt.name,
            columns=cols,
            pk_names=stmt.primary_key,
            append_only=stmt.append_only,
            watermark=watermark,
            conflict=conflict,
            definition=stmt.text,
            job_id=job_id,
            parallelism=s.parallelism,
            ids=s.db.ddl.ids(),
        )
        planned.relation = in_schema(s.with_policy(planned).relation, schema)
        if defaults:
            planned.relation = with_defaults(planned.relation, defaults)
        if s.txn is not None:
            s.txn.create_table(planned)  # created by COMMIT, in the epoch holding its rows
        else:
            s.db.ddl.create_job(planned, backfill=False)
        return command("CREATE TABLE")


def _create_table_as(s: Session, stmt: ast.CreateTable, params: Sequence[Any]) -> QueryResult:
    """CREATE TABLE ... AS query: a table (not a materialized view: later changes upstream do not
    reach it) filled once with the query's rows at one snapshot, as PostgreSQL does (dbt's table
    materialization). The table and its rows commit in one epoch: inside a block with it, else
    in a block of its own, so a failure or crash leaves neither."""
    from piestream.server import dml
    from piestream.server.transaction import in_block

    assert stmt.as_query is not None
    if stmt.columns or stmt.primary_key or stmt.with_options or stmt.append_only or stmt.watermarks:
        raise FeatureNotSupported("column definitions, keys or options in CREATE TABLE ... AS")
    bound = QueryBinder(s.catalog(), params).bind_query(stmt.as_query)
    check_unique_columns(bound.names)
    columns = [
        ast.ColumnDef(n, t if t is not None else VARCHAR)
        for n, t in zip(bound.names, bound.plan.types, strict=True)
    ]
    table = replace(stmt, columns=columns, as_query=None, as_query_text=None)
    with in_block(s):
        create_table(s, table, params)
        inserted = dml.insert(s, ast.Insert(table=stmt.name, columns=None, source=stmt.as_query), params)
    return command("SELECT " + inserted.tag.rsplit(" ", 1)[-1])


# -- CREATE MATERIALIZED VIEW / VIEW / INDEX -----------------------------------------------------


def create_materialized_view(
    s: Session, stmt: ast.CreateMaterializedView, params: Sequence[Any] = ()
) -> QueryResult:
    with s.db.ddl.lock:
        skipped = check_new_name(s, stmt)
        if skipped is not None:
            return skipped
        schema = creation_schema(s, stmt.name)
        given = _mv_parallelism(stmt)
        if given is None:  # the session's
            adaptive, parallelism = s.adaptive, s.parallelism
        else:
            adaptive = given.fixed is None
            parallelism = s.db.cluster_slots() if given.fixed is None else given.fixed
        planned = _plan_mv(s, stmt, parallelism)
        check_not_temporary(s, planned.relation.depends_on, "materialized views")
        planned.relation = in_schema(s.with_policy(planned, adaptive).relation, schema)
        check_upstreams_created(s, planned.relation.depends_on)
        s.db.ddl.create_job(planned, backfill=True, notice=s.notice)
        return command("CREATE MATERIALIZED VIEW")


def check_upstreams_created(s: Session, depends_on: Sequence[int]) -> None:
    """55000 if a new job would read an MV (directly or through views) whose backfill is still
    running (one resumed after a restart: a running CREATE holds the DDL lock). Its backfill
    would read a partial snapshot and could finish before the upstream does, so its rows would
    be readable while wrong; RisingWave does not let a job see a creating MV either."""
    from piestream.server.query import check_created

    by_id = {r.id: r for r in s.db.catalog.snapshot().relations()}
    todo, seen = list(depends_on), set()
    while todo:
        rel = by_id.get(todo.pop())
        if rel is None or rel.id in seen:
            continue
        seen.add(rel.id)
        if rel.kind is RelationKind.VIEW:
            todo.extend(rel.depends_on)
        else:
            check_created(s.db, rel)


@dataclass(frozen=True)
class _Parallelism:
    fixed: int | None  # None: ADAPTIVE


def _mv_parallelism(stmt: ast.CreateMaterializedView) -> _Parallelism | None:
    """``WITH (streaming_parallelism = n | adaptive)`` of a CREATE MATERIALIZED VIEW (None: not
    given, the session's applies); any other option is refused, never ignored."""
    opts = {k.lower(): v for k, v in stmt.with_options.items()}
    unknown = sorted(set(opts) - {"streaming_parallelism"})
    if unknown:
        raise FeatureNotSupported(
            f"CREATE MATERIALIZED VIEW ... WITH ({', '.join(unknown)}) is not supported"
        )
    if "streaming_parallelism" not in opts:
        return None
    return _Parallelism(parallelism_setting(opts["streaming_parallelism"]))


def _plan_mv(
    s: Session, stmt: ast.CreateMaterializedView, parallelism: int, as_of: int | None = None
) -> PlannedJob:
    """`as_of` (REBUILD): the MV's id — columns added to its inputs after it are not in its ``*``."""
    cat = s.committed_catalog()
    binder = QueryBinder(cat if as_of is None else replace(cat, as_of=as_of))
    bound = binder.bind_query(stmt.query)
    if stmt.columns:
        if len(stmt.columns) > len(bound.names):
            raise PiestreamError("too many column names were specified", sqlstate="42601")
        bound.names = list(stmt.columns) + bound.names[len(stmt.columns) :]
    check_unique_columns(bound.names)
    return plan_materialized_view(
        bound,
        name=stmt.name,
        definition=stmt.text,
        kind=RelationKind.MATERIALIZED_VIEW,
        job_id=s.db.ddl.next_job_id(),
        parallelism=parallelism,
        ids=s.db.ddl.ids(),
        depends_on=sorted(binder.dependencies),
        emit_on_window_close=stmt.emit_on_window_close,
    )


class JobNotFailed(PiestreamError):
    sqlstate = "55000"  # object_not_in_prerequisite_state


def rebuild(s: Session, stmt: ast.RebuildJob, params: Sequence[Any] = ()) -> QueryResult:
    """ALTER MATERIALIZED VIEW m REBUILD: a failed MV gets a new streaming job, planned from its
    definition and backfilled from its upstream's current snapshot like a new MV; then the
    failed MVs downstream of it (failed with it) are rebuilt the same way, upstream first."""
    from piestream.frontend.parser import parse_one

    db = s.db
    with db.ddl.lock:
        rel = s.committed_catalog().get_relation(stmt.name)
        if rel is None:
            raise UndefinedTable(f'{stmt.kind} "{stmt.name}" does not exist')
        if rel.kind is not RelationKind.MATERIALIZED_VIEW:
            raise WrongObjectType(f'"{stmt.name}" is not a {stmt.kind}')
        if db.catalog.job_status(rel.job_id) is None:
            raise JobNotFailed(
                f'materialized view "{rel.name}" has not failed',
                hint="Only a failed materialized view is rebuilt; see rw_catalog.rw_streaming_jobs.",
            )
        order: list[Relation] = []

        def visit(r: Relation) -> None:
            if r in order or db.catalog.job_status(r.job_id) is None:
                return
            if r.kind is RelationKind.MATERIALIZED_VIEW:
                order.append(r)
            for d in db.catalog.dependents(r.id):
                visit(d)

        visit(rel)
        for r in order:
            r = db.catalog.get(r.name, r.schema_name) or r
            definition = parse_one(r.definition)
            assert isinstance(definition, ast.CreateMaterializedView)
            parallelism = db.cluster_slots() if r.adaptive else (r.parallelism or s.parallelism)
            planned = _plan_mv(s, definition, parallelism, as_of=r.id)
            # views and indexes name it by id; it stays in its schema and keeps its policy
            planned.relation = replace(
                planned.relation, id=r.id, schema_name=r.schema_name, adaptive=r.adaptive
            )
            db.ddl.rebuild_job(r, planned)
        return command("ALTER MATERIALIZED VIEW")


def create_view(s: Session, stmt: ast.CreateView, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        cat = s.committed_catalog()
        schema = new_schema(s, stmt)
        existing = cat.by_name.get((schema, str(stmt.name)))
        if existing is not None and not (stmt.or_replace and existing.kind is RelationKind.VIEW):
            skipped = check_new_name(s, stmt, schema)
            if skipped is not None:
                return skipped
        binder = QueryBinder(cat)
        bound = binder.bind_query(stmt.query)
        if len(stmt.columns or []) > len(bound.names):
            raise PiestreamError("CREATE VIEW specifies more column names than columns", sqlstate="42601")
        names = list(stmt.columns or []) + bound.names[len(stmt.columns or []) :]
        check_unique_columns(names)
        notices = []
        temp = {r.id for r in cat.relations_in(s.temp_schema)}
        if schema != s.temp_schema and temp & binder.dependencies and schema_of(stmt.name) is None:
            schema = s.temp_schema  # PostgreSQL: a view over a temporary relation is temporary
            notices.append(f'view "{stmt.name}" will be a temporary view')
            existing = cat.by_name.get((schema, str(stmt.name)))
            if existing is not None and not (stmt.or_replace and existing.kind is RelationKind.VIEW):
                raise DuplicateObject(f'relation "{stmt.name}" already exists')
        elif schema != s.temp_schema and temp & binder.dependencies:
            raise FeatureNotSupported("a view in a permanent schema must not use temporary tables or views")
        cols = tuple(ColumnCatalog(n, t) for n, t in zip(names, bound.plan.types, strict=True))
        rel = Relation(
            id=s.db.ddl.next_object_id(),
            name=stmt.name,
            kind=RelationKind.VIEW,
            columns=cols,
            definition=stmt.sql_text,
            depends_on=tuple(sorted(binder.dependencies)),
            schema_name=schema,
            # its query is bound again on every read: with the names it was created with
            properties=(
                {}
                if cat.search_path == (DEFAULT_SCHEMA,)
                else {VIEW_SEARCH_PATH: format_search_path(cat.search_path)}
            )
            | ({VIEW_COLUMN_LIST: "true"} if stmt.columns else {}),
        )
        if existing is not None:
            s.db.ddl.replace_view(existing, rel)
        else:
            s.db.ddl.create_relations(rel)
        res = command("CREATE VIEW")
        res.notices += notices
        return res


def create_index(s: Session, stmt: ast.CreateIndex, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        cat = s.committed_catalog()
        table = cat.require(stmt.table)
        if schema_of(stmt.name) not in (None, table.schema_name):
            raise PiestreamError("an index is created in the schema of its table", sqlstate="42601")
        skipped = check_new_name(s, stmt, table.schema_name)
        if skipped is not None:
            return skipped
        if table.kind not in (RelationKind.TABLE, RelationKind.MATERIALIZED_VIEW):
            raise WrongObjectType(f'"{stmt.table}" is not a table or materialized view')
        key_cols = [c.name for c in stmt.columns]
        for n in key_cols + list(stmt.include) + list(stmt.distributed_by):
            if table.column_index(n) is None:
                raise PiestreamError(f'column "{n}" does not exist', sqlstate="42703")
        include = list(stmt.include) or [c.name for c in table.visible_columns if c.name not in key_cols]
        pk_names = [table.columns[i].name for i in (table.table.pk if table.table else ())]
        select_names = list(dict.fromkeys([*key_cols, *include, *pk_names]))
        query = exp.select(*[exp.column(n) for n in select_names]).from_(
            ObjectName(table.name, table.schema_name).to_table()
        )
        binder = QueryBinder(cat)
        bound = binder.bind_query(query)
        from piestream.common.order import OrderType

        bound.order = [(select_names.index(c.name), OrderType.of(c.desc)) for c in stmt.columns]
        dist = [select_names.index(n) for n in (stmt.distributed_by or key_cols[:1])]
        planned = plan_materialized_view(
            bound,
            name=stmt.name,
            definition=stmt.text,
            kind=RelationKind.INDEX,
            job_id=s.db.ddl.next_job_id(),
            parallelism=s.parallelism,
            ids=s.db.ddl.ids(),
            depends_on=[table.id],
            distributed_by=dist,
            index=IndexInfo(table.id, tuple(key_cols)),
        )
        planned.relation = in_schema(s.with_policy(planned).relation, table.schema_name)
        check_upstreams_created(s, [table.id])
        s.db.ddl.create_job(planned, backfill=True, notice=s.notice)
        return command("CREATE INDEX")


# -- DROP ---------------------------------------------------------------------------------------


def drop(s: Session, stmt: ast.Drop, params: Sequence[Any] = ()) -> QueryResult:
    db = s.db
    kind = _KIND[stmt.kind]
    tag = "DROP " + stmt.kind.upper()
    with db.ddl.lock:
        targets: list[Relation] = []
        notices = []
        cat = s.committed_catalog()
        for name in stmt.names:
            schema = schema_of(name)
            if schema is not None and schema not in cat.schemas:
                if stmt.if_exists:
                    notices.append(f'schema "{schema}" does not exist, skipping')
                    continue
                raise InvalidSchemaName(f'schema "{schema}" does not exist')
            rel = cat.get_relation(name)
            if rel is None:
                shown = object_name(name).qualified
                if stmt.if_exists:
                    notices.append(f'{stmt.kind} "{shown}" does not exist, skipping')
                    continue
                raise UndefinedTable(f'{stmt.kind} "{shown}" does not exist')
            if rel.kind is not kind:
                raise WrongObjectType(
                    f'"{name}" is not a {stmt.kind}',
                    hint=f"Use DROP {rel.kind.value.upper()} to remove a {rel.kind.value}.",
                )
            targets.append(rel)
        dropped = list(db.ddl.drop(targets, cascade=stmt.cascade))
        discard_staging(db.data_dir, dropped)
        drop_cdc_slots(dropped)
        res = command(tag)
        res.notices += notices
        return res


# -- CREATE / DROP SCHEMA -----------------------------------------------------------------------


class DuplicateSchema(PiestreamError):
    sqlstate = "42P06"


class ReservedName(PiestreamError):
    sqlstate = "42939"


def create_schema(s: Session, stmt: ast.CreateSchema, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        exists = stmt.name in s.committed_catalog().schemas or stmt.name in BUILTIN_SCHEMAS
        if exists and stmt.if_not_exists:
            r = command("CREATE SCHEMA")
            r.notices.append(f'schema "{stmt.name}" already exists, skipping')
            return r
        if exists:
            raise DuplicateSchema(f'schema "{stmt.name}" already exists')
        if stmt.name.startswith("pg_"):
            raise ReservedName(
                f'unacceptable schema name "{stmt.name}"',
                detail='The prefix "pg_" is reserved for system schemas.',
            )
        s.db.catalog.create_schema(SchemaCatalog(s.db.ddl.next_object_id(), stmt.name))
        return command("CREATE SCHEMA")


def drop_schema(s: Session, stmt: ast.DropSchema, params: Sequence[Any] = ()) -> QueryResult:
    """DROP SCHEMA: an empty schema goes; one holding relations only with CASCADE (which drops
    them, and what depends on them elsewhere, as DROP ... CASCADE does), else 2BP01."""
    db = s.db
    res = command("DROP SCHEMA")
    with db.ddl.lock:
        cat = s.committed_catalog()
        names = []
        for name in stmt.names:
            if name in BUILTIN_SCHEMAS:
                raise DependentObjectsStillExist(
                    f"cannot drop schema {name} because it is required by the database system"
                )
            if name == DEFAULT_SCHEMA or name.startswith(TEMP_SCHEMA):
                raise FeatureNotSupported(f'dropping schema "{name}" is not supported')
            if name not in cat.schemas:
                if stmt.if_exists:
                    res.notices.append(f'schema "{name}" does not exist, skipping')
                    continue
                raise InvalidSchemaName(f'schema "{name}" does not exist')
            names.append(name)
        held = [r for n in names for r in cat.relations_in(n) if r.owned_by is None]
        if held and not stmt.cascade:
            r = held[0]
            raise DependentObjectsStillExist(
                f"cannot drop schema {r.schema_name} because other objects depend on it",
                detail="\n".join(
                    f"{o.kind.value} {o.qualified_name} depends on schema {o.schema_name}" for o in held
                ),
                hint="Use DROP ... CASCADE to drop the dependent objects too.",
            )
        if held:
            discard_staging(db.data_dir, db.ddl.drop(held, cascade=True))
            res.notices.append(f"drop cascades to {len(held)} other object{'s' if len(held) > 1 else ''}")
        for n in names:
            db.catalog.drop_schema(n)
        return res


# -- temporary relations ------------------------------------------------------------------------


def drop_temporary(db: Database, temp_schema: str | None = None) -> None:
    """Drop the relations of a session's temporary schema (its end), or with None every
    session's (a restart: sessions of the last run are gone)."""

    def temporary(rels: Iterable[Relation]) -> list[Relation]:
        return [
            r
            for r in rels
            if r.owned_by is None
            and (r.schema_name == temp_schema if temp_schema else r.schema_name.startswith(TEMP_SCHEMA + "_"))
        ]

    # only the session itself creates relations in its temporary schema, so when it holds none
    # there is nothing to wait for: a session's end (each Python API statement's) must not wait
    # behind a long DDL (a backfilling CREATE or REBUILD holds the DDL lock)
    if temp_schema is not None and not temporary(db.catalog.snapshot().relations()):
        return
    with db.ddl.lock:
        gone = temporary(db.catalog.snapshot().relations())
        if gone:
            discard_staging(db.data_dir, db.ddl.drop(gone, cascade=True))


def check_not_temporary(s: Session, depends_on: Sequence[int], what: str) -> None:
    """A persistent object cannot read a temporary relation (it would outlive it)."""
    by_id = {r.id: r for r in s.catalog().relations()}
    if any(by_id[i].schema_name == s.temp_schema for i in depends_on if i in by_id):
        raise FeatureNotSupported(f"{what} must not use temporary tables or views")
