"""Transaction blocks: BEGIN … COMMIT lands in one epoch, ROLLBACK discards.

Inside a block (BEGIN, or the one a driver opens when autocommit is off) the session's writes are
buffered, not sent: each INSERT / UPDATE / DELETE is bound, checked and run against what the
transaction sees, and its effect folds into the table's `TableOverlay` (columnar, one entry per
primary key). CREATE TABLE is held back the same way. COMMIT hands everything — every table's
changes and the tables created — to one epoch (`DdlController.commit_transaction`) and returns
once that epoch is committed and durable; ROLLBACK, a disconnect or a failed COMMIT drop it.

Isolation is PostgreSQL's REPEATABLE READ (snapshot isolation):

* the transaction reads one snapshot, the epoch committed when its first statement ran, pinned
  until it ends; tables it changed are read with its changes merged over that snapshot;
* a materialized view or index over a table it changed cannot show those changes (they are not
  in any epoch yet), so reading one is refused (0A000) rather than answered inconsistently;
* the first committer wins: COMMIT fails with 40001 when a row it changed (same table and
  primary key, or ``_row_id``) was changed by a commit after its snapshot. SERIALIZABLE is not
  offered: write skew between transactions that change different rows is possible.

Savepoints (SAVEPOINT / RELEASE / ROLLBACK TO) are real: overlays are immutable values, so a
savepoint is the block's state at that point.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from piestream.batch.overlay import TableOverlay
from piestream.common.errors import (
    InvalidSavepoint,
    PiestreamError,
    ProgramLimitExceeded,
    ReadOnlySqlTransaction,
)
from piestream.frontend.catalog import Relation
from piestream.frontend.planner import PlannedJob
from piestream.meta.barrier_manager import TransactionCommit
from piestream.plan.materialize import ConflictBehavior
from piestream.storage.hummock.store import HummockStorage

if TYPE_CHECKING:
    from piestream.server.database import Database
    from piestream.server.session import Session


@dataclass(frozen=True)
class Snapshot:
    """The committed epoch a transaction reads, pinned (version and snapshot) until it ends."""

    storage: HummockStorage
    epoch: int


@dataclass(frozen=True)
class _State:
    """What a savepoint restores: the buffered changes and the tables created so far."""

    overlays: dict[int, TableOverlay] = field(default_factory=dict)
    created: tuple[PlannedJob, ...] = ()


class Transaction:
    """One transaction block of a session."""

    def __init__(self, db: Database, *, read_only: bool = False) -> None:
        self.db = db
        self.read_only = read_only
        self.failed = False  # an error happened: only ROLLBACK (TO SAVEPOINT) is accepted
        self._state = _State()
        self._savepoints: list[tuple[str, _State]] = []
        self._snapshot: Snapshot | None = None
        self._release: weakref.finalize | None = None

    # -- the snapshot -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The snapshot the transaction reads, taken by its first statement that needs one."""
        if self._snapshot is None:
            writes = self.db.barriers.writes
            with writes.lock:  # no epoch commits between pinning and registering
                storage, epoch, vpin, spin = self.db.snapshot_storage()
                token = None if self.read_only else writes.begin(epoch)
            self._snapshot = Snapshot(storage, epoch)
            # released at the end, or when an abandoned session is collected
            self._release = weakref.finalize(self, _release, self.db, vpin, spin, token)
            self._release.atexit = False
        return self._snapshot

    def close(self) -> None:
        """End the transaction (after COMMIT or ROLLBACK): release the snapshot."""
        if self._release is not None:
            self._release()

    # -- what it changed ----------------------------------------------------------------------------
    @property
    def overlays(self) -> dict[int, TableOverlay]:
        """Buffered changes by table id (tables the transaction changed)."""
        return self._state.overlays

    @property
    def created(self) -> list[Relation]:
        """Tables created in the transaction (visible only to it until COMMIT)."""
        return [p.relation for p in self._state.created]

    @property
    def buffered_bytes(self) -> int:
        return sum(o.nbytes for o in self._state.overlays.values())

    @property
    def has_changes(self) -> bool:
        """Whether COMMIT would change anything (buffered rows or created tables)."""
        return bool(self._state.created) or any(len(o) for o in self._state.overlays.values())

    def check_writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlySqlTransaction(f"cannot execute {what} in a read-only transaction")

    def write(
        self,
        rel: Relation,
        deletes: list[pa.Array] | None,
        inserts: list[pa.Array] | None,
        limit: int,
    ) -> None:
        """Fold one statement's changes to `rel` (rows it removed, then rows it added) into the
        buffer; over `limit` bytes in all, the statement fails (and with it the transaction)."""
        assert rel.table is not None
        if not (deletes and len(deletes[0])) and not (inserts and len(inserts[0])):
            return
        snap = self.snapshot()
        table_id = rel.table.table_id
        overlay = self._state.overlays.get(table_id) or TableOverlay.empty(
            rel.table, rel.conflict or ConflictBehavior.NO_CHECK, rel.row_id_index
        )
        overlay = overlay.apply(deletes, inserts, snap.storage, snap.epoch)
        overlays = {**self._state.overlays, table_id: overlay}
        total = sum(o.nbytes for o in overlays.values())
        if limit and total > limit:
            raise ProgramLimitExceeded(
                f"transaction buffer limit exceeded: the changes of this transaction would take "
                f"{total} bytes, over transaction_buffer_limit ({limit} bytes)",
                hint="Commit in smaller transactions, or SET transaction_buffer_limit higher; "
                "a transaction always commits in one epoch, so it is never split.",
            )
        self._state = _State(overlays, self._state.created)

    def create_table(self, planned: PlannedJob) -> None:
        self.check_writable("CREATE TABLE")
        self.snapshot()
        self._state = _State(self._state.overlays, (*self._state.created, planned))

    # -- savepoints ---------------------------------------------------------------------------------
    def savepoint(self, name: str) -> None:
        self._savepoints.append((name, self._state))

    def _find(self, name: str) -> int:
        for i in range(len(self._savepoints) - 1, -1, -1):
            if self._savepoints[i][0] == name:
                return i
        raise InvalidSavepoint(f'savepoint "{name}" does not exist')

    def release(self, name: str) -> None:
        """Forget the savepoint and every later one; the changes since stay."""
        del self._savepoints[self._find(name) :]

    def rollback_to(self, name: str) -> None:
        """Undo what happened after the savepoint (which stays), and leave the failed state."""
        i = self._find(name)
        self._state = self._savepoints[i][1]
        del self._savepoints[i + 1 :]
        self.failed = False

    # -- commit ---------------------------------------------------------------------------------------
    def commit(self) -> int | None:
        """Hand every buffered change to one epoch and wait until it is committed; returns the
        epoch (None when there was nothing to write)."""
        overlays = {t: o for t, o in self._state.overlays.items() if len(o)}
        created = list(self._state.created)
        if not overlays and not created:
            return None
        dml = {t: chunks for t, o in overlays.items() if (chunks := o.changes())}
        t = TransactionCommit(
            dml=dml,
            keys={t: o.write_keys() for t, o in overlays.items()},
            snapshot_epoch=self.snapshot().epoch,
            names={t: o.desc.name or str(t) for t, o in overlays.items()},
        )
        return self.db.ddl.commit_transaction(t, created)


def _release(db: Database, vpin: int, spin: int, token: int | None) -> None:
    db.release_snapshot(vpin, spin)
    if token is not None:
        db.barriers.writes.end(token)


# -- settings ---------------------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}


def parse_bytes(value: str, setting: str) -> int:
    """A memory setting as PostgreSQL writes them: ``256MB``, ``64kB``, ``1048576`` (bytes)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?b?)\s*", value.strip("'"), re.IGNORECASE)
    if m is None or m.group(2).lower() not in _UNITS:
        raise PiestreamError(
            f'invalid value for parameter "{setting}": "{value}"',
            sqlstate="22023",
            hint='Valid units for this parameter are "B", "kB", "MB", "GB", and "TB".',
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


@contextmanager
def in_block(s: Session) -> Iterator[None]:
    """Run a statement made of several changes (CREATE TABLE AS, TRUNCATE of many tables) in the
    session's transaction block, or in a block of its own committed at the end (one epoch: a
    failure or crash leaves none of it)."""
    own = s.txn is None
    txn = s.txn if s.txn is not None else Transaction(s.db)
    s.txn = txn
    try:
        yield
        if own:
            txn.commit()
    finally:
        if own:
            s.txn = None
            txn.close()
