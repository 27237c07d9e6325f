"""Query cursors: DECLARE ... CURSOR FOR query, FETCH, MOVE, CLOSE (PostgreSQL's portals in SQL).

A cursor reads one snapshot: its query runs once, at DECLARE, at the snapshot the statement would
read (the transaction block's, with its own writes), and FETCH hands out that result in order.
Without HOLD a cursor exists only inside a transaction block (25P01 elsewhere) and is closed at
COMMIT or ROLLBACK; WITH HOLD it survives the COMMIT of its block (and is dropped by a ROLLBACK of
the block that declared it, as PostgreSQL does). The result is kept in memory as Arrow batches.

Subscription cursors (`subscriptions`) share the session's cursor names, FETCH and CLOSE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from piestream.common.errors import FeatureNotSupported, NoActiveSqlTransaction, PiestreamError
from piestream.common.scalar import columns_to_rows
from piestream.common.types import DataType
from piestream.frontend.parser import ast
from piestream.server import subscriptions
from piestream.server.results import QueryResult, command

if TYPE_CHECKING:
    from piestream.server.session import Session


@dataclass
class QueryCursor:
    """A declared query's whole result and how far FETCH / MOVE got."""

    columns: list[tuple[str, DataType]]
    table: pa.Table
    binary: bool
    hold: bool
    pending: bool  # declared in the open transaction block (a ROLLBACK of it drops the cursor)
    position: int = 0


Cursor = QueryCursor | subscriptions.SubscriptionCursor


def declare(s: Session, stmt: ast.DeclareCursor, params: Sequence[Any] = ()) -> QueryResult:
    from piestream.server.query import bind, run_bound

    if stmt.name in s.cursors:
        raise PiestreamError(f'cursor "{stmt.name}" already exists', sqlstate="42P03")
    if s.txn is None and not stmt.hold:
        raise NoActiveSqlTransaction("DECLARE CURSOR can only be used in transaction blocks")
    bound = bind(s, stmt.query, params)
    table = run_bound(s, bound)
    columns = list(zip(bound.names, bound.types, strict=True))
    s.cursors[stmt.name] = QueryCursor(columns, table, stmt.binary, stmt.hold, pending=s.txn is not None)
    return command("DECLARE CURSOR")


def end_of_block(cursors: dict[str, Cursor], committed: bool) -> None:
    """COMMIT / ROLLBACK: cursors without HOLD close; WITH HOLD ones survive a COMMIT."""
    for name, c in list(cursors.items()):
        if not isinstance(c, QueryCursor):
            continue
        if not c.hold or (c.pending and not committed):
            del cursors[name]
        else:
            c.pending = False


def _cursor(s: Session, name: str) -> Cursor:
    cursor = s.cursors.get(name)
    if cursor is None:
        raise PiestreamError(f'cursor "{name}" does not exist', sqlstate="34000")
    return cursor


def fetch_columns(s: Session, stmt: ast.Fetch) -> list[tuple[str, DataType]]:
    """What FETCH returns, without fetching (pgwire's Describe)."""
    cursor = _cursor(s, stmt.cursor)
    if isinstance(cursor, QueryCursor):
        return [] if stmt.move else cursor.columns
    return subscriptions.fetch_columns(s, stmt)


def portal_columns(s: Session, name: str) -> list[tuple[str, DataType]] | None:
    """A query cursor's columns by its name (a cursor is a portal: clients Describe it)."""
    cursor = s.cursors.get(name)
    return cursor.columns if isinstance(cursor, QueryCursor) else None


def fetch(s: Session, stmt: ast.Fetch, params: Sequence[Any] = ()) -> QueryResult:
    cursor = _cursor(s, stmt.cursor)
    if not isinstance(cursor, QueryCursor):
        if stmt.all or stmt.move:
            raise FeatureNotSupported(f"{'MOVE' if stmt.move else 'FETCH ALL'} on a subscription cursor")
        return subscriptions.fetch(s, stmt, params)
    if stmt.count < 0:
        raise FeatureNotSupported("FETCH BACKWARD is not supported (cursors are NO SCROLL)")
    if stmt.with_options:
        raise FeatureNotSupported("FETCH ... WITH options apply to subscription cursors only")
    start = cursor.position
    end = cursor.table.num_rows if stmt.all else min(cursor.table.num_rows, start + stmt.count)
    cursor.position = end
    if stmt.move:
        return command(f"MOVE {end - start}")
    part = cursor.table.slice(start, end - start)
    cols = [part.column(i).combine_chunks() for i in range(part.num_columns)]
    rows = columns_to_rows(cols, [t for _, t in cursor.columns])
    result = QueryResult(f"FETCH {end - start}", cursor.columns, rows, part)
    if cursor.binary:
        result.formats = (1,)
    return result
