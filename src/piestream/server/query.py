"""SELECT: bind, optimize, plan for batch, and run at one pinned committed snapshot."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from piestream.batch.execute import BatchContext, execute
from piestream.common.scalar import columns_to_rows
from piestream.common.types import DataType
from piestream.frontend.batch_planner import to_batch
from piestream.frontend.binder import BoundQuery, QueryBinder
from piestream.frontend.optimizer import optimize
from piestream.frontend.parser import ast
from piestream.server.results import QueryResult

if TYPE_CHECKING:
    from sqlglot import exp

    from piestream.server.session import Session


def bind(s: Session, query: exp.Expression, params: Sequence[Any] = ()) -> BoundQuery:
    return QueryBinder(s.db.catalog.snapshot(), params).bind_query(query)


def run_bound(s: Session, bound: BoundQuery) -> pa.Table:
    """Execute a bound query at the latest committed snapshot (pinned while it runs)."""
    plan = to_batch(optimize(bound.plan, streaming=False), s.db.catalog.snapshot().indexes_of)
    storage, epoch, vpin, spin = s.db.snapshot_storage()
    try:
        return execute(plan, BatchContext(storage=storage, epoch=epoch, now=dt.datetime.now(dt.UTC)))
    finally:
        s.db.release_snapshot(vpin, spin)


def result_of(bound: BoundQuery, table: pa.Table, tag: str = "SELECT") -> QueryResult:
    types: list[DataType] = bound.plan.types
    cols = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    rows = columns_to_rows(cols, types) if cols else [()] * table.num_rows
    return QueryResult(f"{tag} {table.num_rows}", list(zip(bound.names, types, strict=True)), rows, table)


def run_select(s: Session, stmt: ast.Query, params: Sequence[Any] = ()) -> QueryResult:
    bound = bind(s, stmt.query, params)
    return result_of(bound, run_bound(s, bound))
