"""Handlers of DDL statements: CREATE TABLE / MATERIALIZED VIEW / VIEW / INDEX and DROP.

A statement either fully happens or changes nothing: the handler checks names and builds the
plan (any error leaves everything untouched), then hands it to meta's `DdlController`, which
stores and starts the job atomically — and removes it again if its first epoch fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from piestream.common.errors import (
    DuplicateObject,
    FeatureNotSupported,
    PiestreamError,
    UndefinedTable,
)
from piestream.frontend.binder import QueryBinder
from piestream.frontend.catalog import ColumnCatalog, IndexInfo, Relation, RelationKind
from piestream.frontend.parser import ast
from piestream.frontend.planner import PlannedJob, plan_materialized_view, plan_table, table_conflict
from piestream.frontend.watermark_derive import bind_watermark
from piestream.server.cdc_handlers import drop_cdc_slots
from piestream.server.results import QueryResult, command
from piestream.server.sink_publisher import discard_staging

if TYPE_CHECKING:
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


def check_new_name(s: Session, name: str, if_not_exists: bool) -> QueryResult | None:
    """None if `name` is free (for this session: tables its transaction created count);
    a notice result for IF NOT EXISTS; else 42P07."""
    if s.catalog().get_relation(name) is not None:
        if if_not_exists:
            r = command("CREATE")
            r.notices.append(f'relation "{name}" already exists, skipping')
            return r
        raise DuplicateObject(f'relation "{name}" already exists')
    return None


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
        skipped = check_new_name(s, stmt.name, stmt.if_not_exists)
        if skipped is not None:
            return skipped
        if stmt.as_query is not None:
            raise FeatureNotSupported("CREATE TABLE AS is not supported; use CREATE MATERIALIZED VIEW")
        cols = []
        for c in stmt.columns:
            if c.type is None or c.generated is not None:
                raise FeatureNotSupported(f'generated column "{c.name}" is not supported')
            if c.default is not None:
                raise FeatureNotSupported(f'DEFAULT for column "{c.name}" is not supported')
            cols.append((c.name, c.type))
        names = [n for n, _ in cols]
        check_unique_columns(names)
        for k in stmt.primary_key:
            if k not in names:
                raise PiestreamError(f'column "{k}" named in key does not exist', sqlstate="42703")
        conflict = table_conflict(stmt)
        watermark = bind_watermark(stmt.watermarks, cols, append_only=stmt.append_only, what="table")
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
        if s.txn is not None:
            s.txn.create_table(planned)  # created by COMMIT, in the epoch holding its rows
        else:
            s.db.ddl.create_job(planned, backfill=False)
        return command("CREATE_TABLE")


# -- CREATE MATERIALIZED VIEW / VIEW / INDEX -----------------------------------------------------


def create_materialized_view(
    s: Session, stmt: ast.CreateMaterializedView, params: Sequence[Any] = ()
) -> QueryResult:
    with s.db.ddl.lock:
        skipped = check_new_name(s, stmt.name, stmt.if_not_exists)
        if skipped is not None:
            return skipped
        planned = _plan_mv(s, stmt, s.parallelism)
        check_upstreams_created(s, planned.relation.depends_on)
        s.db.ddl.create_job(planned, backfill=True, notice=s.notice)
        return command("CREATE_MATERIALIZED_VIEW")


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


def _plan_mv(s: Session, stmt: ast.CreateMaterializedView, parallelism: int) -> PlannedJob:
    binder = QueryBinder(s.db.catalog.snapshot())
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
        rel = db.catalog.get(stmt.name)
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
            r = db.catalog.get(r.name) or r
            definition = parse_one(r.definition)
            assert isinstance(definition, ast.CreateMaterializedView)
            planned = _plan_mv(s, definition, r.parallelism or s.parallelism)
            planned.relation = replace(planned.relation, id=r.id)  # views and indexes name it by id
            db.ddl.rebuild_job(r, planned)
        return command("ALTER_MATERIALIZED_VIEW")


def create_view(s: Session, stmt: ast.CreateView, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        existing = s.db.catalog.get(stmt.name)
        if existing is not None and not (stmt.or_replace and existing.kind is RelationKind.VIEW):
            skipped = check_new_name(s, stmt.name, stmt.if_not_exists)
            if skipped is not None:
                return skipped
        binder = QueryBinder(s.db.catalog.snapshot())
        bound = binder.bind_query(stmt.query)
        if len(stmt.columns or []) > len(bound.names):
            raise PiestreamError("CREATE VIEW specifies more column names than columns", sqlstate="42601")
        names = list(stmt.columns or []) + bound.names[len(stmt.columns or []) :]
        check_unique_columns(names)
        cols = tuple(ColumnCatalog(n, t) for n, t in zip(names, bound.plan.types, strict=True))
        rel = Relation(
            id=s.db.ddl.next_object_id(),
            name=stmt.name,
            kind=RelationKind.VIEW,
            columns=cols,
            definition=stmt.sql_text,
            depends_on=tuple(sorted(binder.dependencies)),
        )
        if existing is not None:
            s.db.ddl.replace_view(existing, rel)
        else:
            s.db.ddl.create_relations(rel)
        return command("CREATE_VIEW")


def create_index(s: Session, stmt: ast.CreateIndex, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        skipped = check_new_name(s, stmt.name, stmt.if_not_exists)
        if skipped is not None:
            return skipped
        table = s.db.catalog.get(stmt.table)
        if table is None:
            raise UndefinedTable(f'relation "{stmt.table}" does not exist')
        if table.kind not in (RelationKind.TABLE, RelationKind.MATERIALIZED_VIEW):
            raise WrongObjectType(f'"{stmt.table}" is not a table or materialized view')
        key_cols = [c.name for c in stmt.columns]
        for n in key_cols + list(stmt.include) + list(stmt.distributed_by):
            if table.column_index(n) is None:
                raise PiestreamError(f'column "{n}" does not exist', sqlstate="42703")
        include = list(stmt.include) or [c.name for c in table.visible_columns if c.name not in key_cols]
        pk_names = [table.columns[i].name for i in (table.table.pk if table.table else ())]
        select_names = list(dict.fromkeys([*key_cols, *include, *pk_names]))
        query = exp.select(*[exp.column(n) for n in select_names]).from_(stmt.table)
        binder = QueryBinder(s.db.catalog.snapshot())
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
        check_upstreams_created(s, [table.id])
        s.db.ddl.create_job(planned, backfill=True, notice=s.notice)
        return command("CREATE_INDEX")


# -- DROP ---------------------------------------------------------------------------------------


def drop(s: Session, stmt: ast.Drop, params: Sequence[Any] = ()) -> QueryResult:
    db = s.db
    kind = _KIND[stmt.kind]
    tag = "DROP_" + stmt.kind.upper().replace(" ", "_")
    with db.ddl.lock:
        targets: list[Relation] = []
        notices = []
        for name in stmt.names:
            rel = db.catalog.get(name)
            if rel is None:
                if stmt.if_exists:
                    notices.append(f'{stmt.kind} "{name}" does not exist, skipping')
                    continue
                raise UndefinedTable(f'{stmt.kind} "{name}" does not exist')
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
