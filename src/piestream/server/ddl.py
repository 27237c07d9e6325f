"""DDL: CREATE TABLE / MATERIALIZED VIEW / VIEW / INDEX and DROP.

A statement either fully happens or changes nothing: the plan is built first (any planning error
leaves everything untouched); then the catalog entry and the new fragments are stored in one
meta-store transaction and added to the stream graph; a new MV's first epoch (its backfill) runs
before the statement returns, and if that epoch fails the job is removed again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from piestream.common.errors import (
    DependentObjectsStillExist,
    DuplicateObject,
    FeatureNotSupported,
    PiestreamError,
    UndefinedTable,
)
from piestream.frontend.binder import QueryBinder
from piestream.frontend.catalog import ColumnCatalog, IndexInfo, Relation, RelationKind
from piestream.frontend.parser import ast
from piestream.frontend.planner import Ids, PlannedJob, plan_materialized_view, plan_table
from piestream.plan.fragment import Fragment
from piestream.plan.materialize import ConflictBehavior
from piestream.server.results import QueryResult, command

if TYPE_CHECKING:
    from piestream.server.session import Session

_KIND = {
    "table": RelationKind.TABLE,
    "materialized view": RelationKind.MATERIALIZED_VIEW,
    "view": RelationKind.VIEW,
    "index": RelationKind.INDEX,
    "source": RelationKind.SOURCE,
    "sink": RelationKind.SINK,
}


class WrongObjectType(PiestreamError):
    sqlstate = "42809"


def ids_for(s: Session) -> Ids:
    cat = s.db.catalog

    def upstream_parallelism(fid: int) -> int:
        f = s.db.barriers.graph.fragments.get(fid) or cat.fragment(fid)
        if f is None:
            raise PiestreamError(f"fragment {fid} is not running", sqlstate="XX000")
        return f.parallelism

    return Ids(lambda: cat.next_id("object"), lambda: cat.next_id("fragment"), upstream_parallelism)


def _check_new_name(s: Session, name: str, if_not_exists: bool) -> QueryResult | None:
    if s.db.catalog.get(name) is not None:
        if if_not_exists:
            r = command("CREATE")
            r.notices.append(f'relation "{name}" already exists, skipping')
            return r
        raise DuplicateObject(f'relation "{name}" already exists')
    return None


def _install(s: Session, planned: PlannedJob, *, backfill: bool) -> None:
    """Store a new job and start running it; on a failed first epoch, undo everything."""
    db = s.db
    replaced: list[Fragment] = []
    for up, edge in planned.job.upstream_edges:
        f = db.barriers.graph.fragments.get(up) or db.catalog.fragment(up)
        assert f is not None
        f = next((r for r in replaced if r.fragment_id == up), f)
        replaced = [r for r in replaced if r.fragment_id != up] + [f.with_outputs((*f.outputs, edge))]
    originals = [
        db.barriers.graph.fragments[r.fragment_id]
        for r in replaced
        if r.fragment_id in db.barriers.graph.fragments
    ]
    with db.barriers._lock:  # no epoch runs between the catalog write and the graph change
        db.catalog.create(planned.relation, planned.job.fragments, replaced)
        db.barriers.add_fragments([*planned.job.fragments, *replaced])
    if not backfill:
        return
    try:
        db.barriers.flush()
    except PiestreamError:
        with db.barriers._lock:
            db.barriers.remove_job(planned.relation.job_id)  # type: ignore[arg-type]
            db.barriers.add_fragments(originals)
            db.catalog.drop([planned.relation.name], originals)
        db.hummock.drop_tables(_job_table_ids(planned.job.fragments, planned.relation))
        raise


def _job_table_ids(fragments: list[Fragment], rel: Relation) -> list[int]:
    ids = {t.table_id for f in fragments for t in f.tables()}
    if rel.table is not None:
        ids.add(rel.table.table_id)
    return sorted(ids)


# -- CREATE TABLE -------------------------------------------------------------------------------


def create_table(s: Session, stmt: ast.CreateTable) -> QueryResult:
    with s.db.ddl_lock:
        skipped = _check_new_name(s, stmt.name, stmt.if_not_exists)
        if skipped is not None:
            return skipped
        if stmt.as_query is not None:
            raise FeatureNotSupported("CREATE TABLE AS is not supported; use CREATE MATERIALIZED VIEW")
        if stmt.with_options.get("connector"):
            from piestream.server.connectors import create_connector_table

            return create_connector_table(s, stmt)
        cols = []
        for c in stmt.columns:
            if c.type is None or c.generated is not None:
                raise FeatureNotSupported(f'generated column "{c.name}" is not supported')
            if c.default is not None:
                raise FeatureNotSupported(f'DEFAULT for column "{c.name}" is not supported')
            cols.append((c.name, c.type))
        names = [n for n, _ in cols]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise PiestreamError(f'column "{dup}" specified more than once', sqlstate="42701")
        for k in stmt.primary_key:
            if k not in names:
                raise PiestreamError(f'column "{k}" named in key does not exist', sqlstate="42703")
        conflict = None
        if stmt.on_conflict == "do_nothing":
            conflict = ConflictBehavior.IGNORE_CONFLICT
        elif stmt.on_conflict == "do_update_full":
            conflict = ConflictBehavior.OVERWRITE
        elif stmt.on_conflict is not None:
            raise FeatureNotSupported(
                f"ON CONFLICT {stmt.on_conflict.replace('_', ' ').upper()} is not supported"
            )
        if stmt.append_only and stmt.on_conflict == "do_update_full":
            raise FeatureNotSupported("an APPEND ONLY table cannot have ON CONFLICT DO UPDATE FULL")
        job_id = s.db.catalog.next_id("job")
        planned = plan_table(
            name=stmt.name,
            columns=cols,
            pk_names=stmt.primary_key,
            append_only=stmt.append_only,
            conflict=conflict,
            definition=stmt.text,
            job_id=job_id,
            parallelism=s.parallelism,
            ids=ids_for(s),
        )
        _install(s, planned, backfill=False)
        return command("CREATE_TABLE")


# -- CREATE MATERIALIZED VIEW / VIEW / INDEX -----------------------------------------------------


def create_materialized_view(s: Session, stmt: ast.CreateMaterializedView) -> QueryResult:
    with s.db.ddl_lock:
        skipped = _check_new_name(s, stmt.name, stmt.if_not_exists)
        if skipped is not None:
            return skipped
        binder = QueryBinder(s.db.catalog.snapshot())
        bound = binder.bind_query(stmt.query)
        if stmt.columns:
            if len(stmt.columns) > len(bound.names):
                raise PiestreamError("too many column names were specified", sqlstate="42601")
            bound.names = list(stmt.columns) + bound.names[len(stmt.columns) :]
        planned = plan_materialized_view(
            bound,
            name=stmt.name,
            definition=stmt.text,
            kind=RelationKind.MATERIALIZED_VIEW,
            job_id=s.db.catalog.next_id("job"),
            parallelism=s.parallelism,
            ids=ids_for(s),
            depends_on=sorted(binder.dependencies),
        )
        _install(s, planned, backfill=True)
        return command("CREATE_MATERIALIZED_VIEW")


def create_view(s: Session, stmt: ast.CreateView) -> QueryResult:
    with s.db.ddl_lock:
        existing = s.db.catalog.get(stmt.name)
        if existing is not None and not (stmt.or_replace and existing.kind is RelationKind.VIEW):
            skipped = _check_new_name(s, stmt.name, stmt.if_not_exists)
            if skipped is not None:
                return skipped
        binder = QueryBinder(s.db.catalog.snapshot())
        bound = binder.bind_query(stmt.query)
        names = list(stmt.columns or []) + bound.names[len(stmt.columns or []) :]
        cols = tuple(ColumnCatalog(n, t) for n, t in zip(names, bound.plan.types, strict=True))
        rel = Relation(
            id=s.db.catalog.next_id("object"),
            name=stmt.name,
            kind=RelationKind.VIEW,
            columns=cols,
            definition=stmt.sql_text,
            depends_on=tuple(sorted(binder.dependencies)),
        )
        if existing is not None:
            if s.db.catalog.dependents(existing.id):
                raise DependentObjectsStillExist(
                    f'cannot replace view "{stmt.name}": other objects depend on it'
                )
            s.db.catalog.drop([stmt.name])
        s.db.catalog.create(rel)
        return command("CREATE_VIEW")


def create_index(s: Session, stmt: ast.CreateIndex) -> QueryResult:
    with s.db.ddl_lock:
        skipped = _check_new_name(s, stmt.name, stmt.if_not_exists)
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
            job_id=s.db.catalog.next_id("job"),
            parallelism=s.parallelism,
            ids=ids_for(s),
            depends_on=[table.id],
            distributed_by=dist,
            index=IndexInfo(table.id, tuple(key_cols)),
        )
        _install(s, planned, backfill=True)
        return command("CREATE_INDEX")


# -- DROP ---------------------------------------------------------------------------------------


def drop(s: Session, stmt: ast.Drop) -> QueryResult:
    db = s.db
    kind = _KIND[stmt.kind]
    tag = "DROP_" + stmt.kind.upper().replace(" ", "_")
    with db.ddl_lock:
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
        for t in targets:
            owner = t.owned_by
            if owner is not None and owner not in {x.id for x in targets}:
                raise DependentObjectsStillExist(
                    f'cannot drop {t.kind.value} "{t.name}": it belongs to another object',
                    hint="It is dropped together with its owner (e.g. DROP SOURCE).",
                )
        # everything that depends on the targets, dependents first
        order: list[Relation] = []

        def visit(r: Relation) -> None:
            for d in db.catalog.dependents(r.id):
                owned = d.owned_by == r.id  # e.g. a source's dead-letter table
                if not stmt.cascade and d not in targets and not owned:
                    raise DependentObjectsStillExist(
                        f"cannot drop {r.kind.value} {r.name} because other objects depend on it",
                        detail=f"{d.kind.value} {d.name} depends on {r.kind.value} {r.name}",
                        hint="Use DROP ... CASCADE to drop the dependent objects too.",
                    )
                visit(d)
            if r not in order:
                order.append(r)

        for r in targets:
            visit(r)
        if not order:
            res = command(tag)
            res.notices += notices
            return res
        table_ids: list[int] = []
        with db.barriers._lock:
            removed: list[Fragment] = []
            for r in order:
                if r.job_id is not None:
                    removed += db.barriers.remove_job(r.job_id)
            removed_ids = {f.fragment_id for f in removed}
            # upstream fragments that lost outputs into the dropped jobs
            replaced = [f for f in db.barriers.graph.fragments.values() if _had_edge_into(db, f, removed_ids)]
            db.catalog.drop([r.name for r in order], replaced)
            for r in order:
                table_ids += _job_table_ids([f for f in removed if f.job_id == r.job_id], r)
        if table_ids:
            db.hummock.drop_tables(table_ids)
        res = command(tag)
        res.notices += notices
        return res


def _had_edge_into(db: object, f: Fragment, removed: set[int]) -> bool:
    stored = db.catalog.fragment(f.fragment_id)  # type: ignore[attr-defined]
    return stored is not None and any(e.downstream_fragment_id in removed for e in stored.outputs)


def create_connector_object(s: Session, stmt: ast.Statement) -> QueryResult:
    from piestream.server.connectors import create_connector_object as create

    return create(s, stmt)
