"""Subscriptions and their cursors (RisingWave's changefeeds) for SQL sessions.

    CREATE SUBSCRIPTION s FROM mv WITH (retention = '1h');
    DECLARE c SUBSCRIPTION CURSOR FOR s [SINCE <rw_timestamp | epoch> | SINCE now() | SINCE begin() | FULL];
    FETCH 100 FROM c [WITH (timeout = '5s')];   -- mv's columns, op, epoch; in commit order
    CLOSE c;

A subscription is a streaming job writing the upstream's changes into a log table
(`piestream.plan.subscription`); a cursor is a session's position in that log
(`piestream.connectors.changefeed.Position`). A reconnecting client resumes exactly by declaring
a new cursor ``SINCE`` the last ``epoch`` it consumed in full.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.interval_text import parse_interval
from piestream.common.scalar import columns_to_rows
from piestream.common.types import BIGINT, VARCHAR, DataType
from piestream.connectors.changefeed import (
    Changes,
    Position,
    change_schema,
    read_changes,
    retained_start,
    since_position,
)
from piestream.connectors.options import InvalidOption, lower_keys
from piestream.frontend.catalog import DEFAULT_SCHEMA, Relation
from piestream.frontend.parser import ast
from piestream.frontend.parser.names import schema_of
from piestream.frontend.planner import plan_subscription
from piestream.server.ddl_handlers import check_new_name, check_not_temporary, creation_schema, in_schema
from piestream.server.query import check_created
from piestream.server.results import QueryResult, command
from piestream.storage.table.storage_table import StorageTable

if TYPE_CHECKING:
    from piestream.server.database import Database
    from piestream.server.session import Session

DEFAULT_RETENTION = "1 day"


class UndefinedObject(PiestreamError):
    sqlstate = "42704"


#: How often a FETCH ... WITH (timeout) looks for a newly committed epoch.
POLL_INTERVAL_SEC = 0.02


def parse_duration_ms(name: str, text: str) -> int:
    """An interval option ('1h', '7 days', '30s') in milliseconds."""
    try:
        usecs = parse_interval(text).total_usecs
    except PiestreamError:
        raise InvalidOption(f"{name} must be an interval such as '1h' or '7 days', got '{text}'") from None
    if usecs < 0:
        raise InvalidOption(f"{name} must not be negative, got '{text}'")
    return usecs // 1000


def create_subscription(s: Session, stmt: ast.CreateSubscription, params: Sequence[Any] = ()) -> QueryResult:
    db = s.db
    with db.ddl.lock:
        skipped = check_new_name(s, stmt)
        if skipped is not None:
            return skipped
        opts = lower_keys(stmt.with_options)
        unknown = sorted(set(opts) - {"retention"})
        if unknown:
            raise InvalidOption(f'unknown subscription option "{unknown[0]}" (only retention)')
        retention_ms = parse_duration_ms("retention", opts.get("retention", DEFAULT_RETENTION))
        schema = creation_schema(s, stmt.name)
        upstream = s.committed_catalog().require(stmt.from_relation)
        check_not_temporary(s, [upstream.id], "subscriptions")
        check_created(db, upstream)  # its log would start with a partial MV
        with db.barriers.paused():  # no epoch between reading the start and the job's first one
            start = db.hummock.max_committed_epoch
            ids = db.ddl.ids()
            planned = plan_subscription(
                upstream,
                name=stmt.name,
                definition=stmt.text,
                job_id=db.ddl.next_job_id(),
                ids=ids,
                retention_ms=retention_ms,
                start_epoch=start,
                properties=opts,
            )
            planned.relation = in_schema(planned.relation, schema)
            db.ddl.create_job(planned, backfill=True)
    return command("CREATE SUBSCRIPTION")


# -- cursors --------------------------------------------------------------------------------------


@dataclass
class SubscriptionCursor:
    """A session's position in a subscription's log (and a FULL cursor's unread snapshot)."""

    subscription: str
    position: Position
    snapshot: pa.Table | None = None


def resolve(db: Database, name: str) -> tuple[Relation, Relation]:
    """(subscription, upstream) by the subscription's name."""
    sub = db.catalog.get(name, schema_of(name) or DEFAULT_SCHEMA)
    if sub is None:
        raise UndefinedObject(f'subscription "{name}" does not exist')
    if sub.subscription is None:
        raise PiestreamError(f'"{name}" is not a subscription', sqlstate="42809")
    upstream = next((r for r in db.catalog.snapshot().relations() if r.id == sub.subscription.of), None)
    if upstream is None:
        raise UndefinedObject(f'the relation subscription "{name}" follows no longer exists')
    return sub, upstream.as_seen_by(sub.id)  # its log holds the columns of its creation


def snapshot_changes(storage: Any, epoch: int, upstream: Relation) -> pa.Table:
    """The upstream's rows at `epoch` as inserts of that epoch (a FULL cursor's start)."""
    assert upstream.table is not None
    visible = [i for i, c in enumerate(upstream.columns) if not c.hidden]
    chunks = [c.compact() for c in StorageTable(upstream.table, storage, epoch, visible).scan()]
    schema = change_schema(upstream)
    n = sum(c.capacity for c in chunks)
    cols = [
        pa.concat_arrays([c.columns[i] for c in chunks]) if chunks else pa.nulls(0, t.arrow)
        for i, (_, t) in enumerate(schema[: len(visible)])
    ]
    cols += [pa.array(np.full(n, "insert", object), pa.string()), pa.array(np.full(n, epoch, np.int64))]
    return pa.Table.from_arrays(cols, names=[name for name, _ in schema])


def declare_cursor(
    s: Session, stmt: ast.DeclareSubscriptionCursor, params: Sequence[Any] = ()
) -> QueryResult:
    if stmt.name in s.cursors:
        raise PiestreamError(f'cursor "{stmt.name}" already exists', sqlstate="42P03")
    sub, upstream = resolve(s.db, stmt.subscription)
    if stmt.since == "full":  # the snapshot part would be a partial MV
        check_created(s.db, upstream)
    storage, epoch, vpin, spin = s.db.snapshot_storage()
    try:
        pos = retained_start(storage.version, sub, since_position(stmt.since, sub, epoch))
        snap = snapshot_changes(storage, epoch, upstream) if stmt.since == "full" else None
    finally:
        s.db.release_snapshot(vpin, spin)
    s.cursors[stmt.name] = SubscriptionCursor(sub.name, pos, snap)
    return command("DECLARE_CURSOR")


def read_cursor(db: Database, cursor: SubscriptionCursor, count: int) -> pa.Table:
    """Up to `count` changes after the cursor's position (advancing it)."""
    out: list[pa.Table] = []
    if cursor.snapshot is not None:
        head = cursor.snapshot.slice(0, count)
        cursor.snapshot = cursor.snapshot.slice(count) if cursor.snapshot.num_rows > count else None
        out.append(head)
        count -= head.num_rows
    if count > 0:
        sub, upstream = resolve(db, cursor.subscription)
        storage, epoch, vpin, spin = db.snapshot_storage()
        try:
            changes: Changes = read_changes(storage, epoch, sub, upstream, cursor.position, limit=count)
        finally:
            db.release_snapshot(vpin, spin)
        cursor.position = changes.position
        out.append(changes.table)
    return pa.concat_tables(out) if len(out) > 1 else out[0]


def _cursor(s: Session, name: str) -> SubscriptionCursor:
    cursor = s.cursors.get(name)
    if cursor is None:
        raise PiestreamError(f'cursor "{name}" does not exist', sqlstate="34000")
    if not isinstance(cursor, SubscriptionCursor):
        raise PiestreamError(f'cursor "{name}" is not a subscription cursor', sqlstate="42809")
    return cursor


def fetch_columns(s: Session, stmt: ast.Fetch) -> list[tuple[str, DataType]]:
    """What FETCH from a cursor returns, without fetching (pgwire's Describe)."""
    return change_schema(resolve(s.db, _cursor(s, stmt.cursor).subscription)[1])


def fetch(s: Session, stmt: ast.Fetch, params: Sequence[Any] = ()) -> QueryResult:
    cursor = _cursor(s, stmt.cursor)
    if stmt.count < 0:
        raise FeatureNotSupported("FETCH BACKWARD is not supported")
    opts = lower_keys(stmt.with_options)
    timeout = parse_duration_ms("timeout", opts.pop("timeout", "0")) / 1000
    if opts:
        raise InvalidOption(f'unknown FETCH option "{sorted(opts)[0]}" (only timeout)')
    deadline = time.monotonic() + timeout
    seen = s.db.hummock.max_committed_epoch
    table = read_cursor(s.db, cursor, stmt.count)
    while table.num_rows == 0 and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_SEC)
        if s.db.hummock.max_committed_epoch != seen:
            seen = s.db.hummock.max_committed_epoch
            table = read_cursor(s.db, cursor, stmt.count)
    schema = change_schema(resolve(s.db, cursor.subscription)[1])
    assert schema[-2:] == [("op", VARCHAR), ("epoch", BIGINT)]
    cols = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    rows = columns_to_rows(cols, [t for _, t in schema])
    return QueryResult(f"FETCH {table.num_rows}", schema, rows, table)


def close_cursor(s: Session, stmt: ast.CloseCursor, params: Sequence[Any] = ()) -> QueryResult:
    if stmt.name is None:
        s.cursors.clear()
    elif s.cursors.pop(stmt.name, None) is None:
        raise PiestreamError(f'cursor "{stmt.name}" does not exist', sqlstate="34000")
    return command("CLOSE_CURSOR")


# -- the Python API's changefeed ------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeBatch:
    """The changes one committed epoch made: the upstream's visible columns, ``op``, ``epoch``."""

    epoch: int
    table: pa.Table

    def to_pandas(self) -> Any:
        return self.table.to_pandas()

    def __len__(self) -> int:
        return self.table.num_rows


def subscription_for(s: Session, name: str, retention: str) -> str:
    """`name` if it is a subscription; else the one on table/MV `name` (created if none)."""
    rel = s.committed_catalog().require(name)
    if rel.subscription is not None:
        return rel.name
    subs = [r for r in s.db.catalog.snapshot().relations() if r.subscription and r.subscription.of == rel.id]
    if subs:
        return max(subs, key=lambda r: (r.subscription.retention_ms if r.subscription else 0, r.name)).name
    sub = f"{name}_changes"
    s.execute(f"CREATE SUBSCRIPTION IF NOT EXISTS {sub} FROM {name} WITH (retention = '{retention}')")
    return sub


def follow(
    db: Database,
    sub_name: str,
    since: str,
    *,
    poll_interval: float = POLL_INTERVAL_SEC,
    idle_timeout: float | None,
) -> Iterator[ChangeBatch]:
    """Each committed epoch's changes as they commit (epochs without changes are skipped); ends
    after `idle_timeout` seconds without a new commit (None: never). The start is fixed now,
    not when the iterator is first advanced."""
    sub, upstream = resolve(db, sub_name)
    if since == "full":
        check_created(db, upstream)
    storage, epoch, vpin, spin = db.snapshot_storage()
    try:
        pos = retained_start(storage.version, sub, since_position(since, sub, epoch))
        first = ChangeBatch(epoch, snapshot_changes(storage, epoch, upstream)) if since == "full" else None
    finally:
        db.release_snapshot(vpin, spin)
    return _follow(db, sub, upstream, pos, first, poll_interval, idle_timeout)


def _follow(
    db: Database,
    sub: Relation,
    upstream: Relation,
    pos: Position,
    first: ChangeBatch | None,
    poll_interval: float,
    idle_timeout: float | None,
) -> Iterator[ChangeBatch]:
    if first is not None:
        yield first
    idle_since = time.monotonic()
    seen = -1
    while True:
        committed = db.hummock.max_committed_epoch
        if committed == seen:
            if idle_timeout is not None and time.monotonic() - idle_since > idle_timeout:
                return
            time.sleep(poll_interval)
            continue
        seen, idle_since = committed, time.monotonic()
        storage, epoch, vpin, spin = db.snapshot_storage()
        try:
            changes = read_changes(storage, epoch, sub, upstream, pos)
        finally:
            db.release_snapshot(vpin, spin)
        pos = changes.position
        yield from split_epochs(changes.table)


def split_epochs(table: pa.Table) -> Iterator[ChangeBatch]:
    """A commit-ordered change table cut into one batch per epoch."""
    if not table.num_rows:
        return
    epochs = table.column("epoch").to_numpy()
    cuts = [0, *(np.flatnonzero(np.diff(epochs)) + 1).tolist(), len(epochs)]
    for lo, hi in itertools.pairwise(cuts):  # one slice per epoch, not per row
        yield ChangeBatch(int(epochs[lo]), table.slice(lo, hi - lo))
