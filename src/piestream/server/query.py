"""SELECT: bind, optimize, plan for batch, and run at one pinned committed snapshot.

Outside a transaction block a statement reads the latest committed epoch. Inside one it reads the
transaction's snapshot, with the tables it changed merged with its buffered changes (and no index
of those tables used); a materialized view or index that depends on a table the transaction
changed is refused, as its rows cannot reflect uncommitted changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from piestream.batch.execute import BatchContext, execute
from piestream.batch.plan import BatchPlanNode, BatchScan
from piestream.common.errors import FeatureNotSupported
from piestream.common.scalar import columns_to_rows
from piestream.common.types import DataType
from piestream.frontend.batch_planner import to_batch
from piestream.frontend.binder import BoundQuery, QueryBinder
from piestream.frontend.catalog import CatalogSnapshot, Relation, RelationKind
from piestream.frontend.optimizer import optimize
from piestream.frontend.parser import ast
from piestream.meta.ddl_progress import still_creating
from piestream.server.results import QueryResult

if TYPE_CHECKING:
    from sqlglot import exp

    from piestream.server.database import Database
    from piestream.server.session import Session


def bind(s: Session, query: exp.Expression, params: Sequence[Any] = ()) -> BoundQuery:
    return QueryBinder(s.catalog(), params).bind_query(query)


def run_bound(s: Session, bound: BoundQuery) -> pa.Table:
    """Execute a bound query at the latest committed snapshot (pinned while it runs), or at the
    snapshot of the session's transaction, merged with its changes."""
    catalog = s.catalog()
    logical = optimize(bound.plan, streaming=False)
    now = dt.datetime.now(dt.UTC)
    txn = s.txn
    if txn is None:
        plan = to_batch(logical, lambda rel_id: created_indexes(s, catalog, rel_id))
        _check_created(s, plan, catalog)
        storage, epoch, vpin, spin = s.db.snapshot_storage()
        try:
            return execute(plan, BatchContext(storage=storage, epoch=epoch, now=now))
        finally:
            s.db.release_snapshot(vpin, spin)
    changed = {t for t, o in txn.overlays.items() if len(o)}
    plan = to_batch(logical, lambda rel_id: [] if rel_id in changed else created_indexes(s, catalog, rel_id))
    _check_readable(plan, catalog, changed)
    _check_created(s, plan, catalog)
    snap = txn.snapshot()
    overlays = {t: txn.overlays[t] for t in changed}
    return execute(plan, BatchContext(storage=snap.storage, epoch=snap.epoch, now=now, overlays=overlays))


def _check_created(s: Session, plan: BatchPlanNode, catalog: CatalogSnapshot) -> None:
    """Refuse reading a materialized view (or index) whose backfill is still running."""
    by_table = {r.table.table_id: r for r in catalog.relations() if r.table is not None}
    for node in plan.walk():
        if isinstance(node, BatchScan) and (rel := by_table.get(node.table.table_id)) is not None:
            check_created(s.db, rel)


def created_indexes(s: Session, catalog: CatalogSnapshot, rel_id: int) -> list[Relation]:
    """The indexes a scan of `rel_id` may read: not one still being created (a SELECT of the
    table must not fail, or read a partial index, while CREATE INDEX runs)."""
    tracker = s.db.ddl.progress
    return [
        i
        for i in catalog.indexes_of(rel_id)
        if tracker is None or i.job_id is None or not tracker.backfilling(i.job_id)
    ]


def check_created(db: Database, rel: Relation) -> None:
    """55000 if `rel` is a materialized view or index whose backfill is still running: its
    committed rows are only part of its query's (batch reads, FULL cursors, new subscriptions
    and MVs on it all refuse it)."""
    tracker = db.ddl.progress
    if tracker is not None and rel.job_id is not None and tracker.backfilling(rel.job_id):
        raise still_creating(rel.kind.value, rel.name)


def _check_readable(plan: BatchPlanNode, catalog: CatalogSnapshot, changed: set[int]) -> None:
    """Refuse reading an MV (or index) that depends on a table the transaction changed."""
    if not changed:
        return
    by_table = {r.table.table_id: r for r in catalog.relations() if r.table is not None}
    by_id = {r.id: r for r in catalog.relations()}

    def changed_upstream(rel: Relation, seen: set[int]) -> Relation | None:
        for dep in rel.depends_on:
            up = by_id.get(dep)
            if up is None or dep in seen:
                continue
            seen.add(dep)
            if up.kind is RelationKind.TABLE and up.table is not None and up.table.table_id in changed:
                return up
            found = changed_upstream(up, seen)
            if found is not None:
                return found
        return None

    for node in plan.walk():
        if not isinstance(node, BatchScan):
            continue
        rel = by_table.get(node.table.table_id)
        if rel is None or rel.kind is RelationKind.TABLE:
            continue
        table = changed_upstream(rel, set())
        if table is not None:
            raise FeatureNotSupported(
                f'cannot read {rel.kind.value} "{rel.name}" in a transaction that changed table '
                f'"{table.name}": its rows do not include uncommitted changes',
                hint=f'Read "{table.name}" itself, or COMMIT first.',
            )


def result_of(bound: BoundQuery, table: pa.Table, tag: str = "SELECT") -> QueryResult:
    types: list[DataType] = bound.plan.types
    cols = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    rows = columns_to_rows(cols, types) if cols else [()] * table.num_rows
    return QueryResult(f"{tag} {table.num_rows}", list(zip(bound.names, types, strict=True)), rows, table)


def run_select(s: Session, stmt: ast.Query, params: Sequence[Any] = ()) -> QueryResult:
    bound = bind(s, stmt.query, params)
    return result_of(bound, run_bound(s, bound))
