"""Table locks: PostgreSQL's eight table-lock modes, held by sessions, with its conflict matrix.

``LOCK TABLE t IN <mode> MODE`` (pg_dump takes ACCESS SHARE on every table it dumps, inside its
REPEATABLE READ block) and the locks statements take implicitly — ACCESS SHARE for a SELECT,
ROW EXCLUSIVE for INSERT / UPDATE / DELETE / COPY FROM, SHARE for CREATE INDEX, SHARE UPDATE
EXCLUSIVE for COMMENT ON and ALTER ... SET PARALLELISM, EXCLUSIVE for ALTER MATERIALIZED VIEW ...
REBUILD, ACCESS EXCLUSIVE for DROP / ALTER / TRUNCATE — are recorded here per
relation id. A session's own locks never conflict with each other. LOCK TABLE (only inside a
transaction block, as in PostgreSQL) holds its lock until COMMIT / ROLLBACK or the client leaves.
The implicit locks are held while their statement runs — PostgreSQL holds them to the end of the
transaction too; piestream does not, because a block's SELECT reads one snapshot and its writes
land at COMMIT, so a DROP after the statement cannot change what the block sees or writes — and
an idle block would otherwise stall every other session's DDL on what it read.

A request that conflicts with another session's lock waits, as PostgreSQL does: until it is
granted, until ``lock_timeout`` passes (55P03), at once with NOWAIT (55P03), until the client
cancels or ``statement_timeout`` passes (the connection's interrupt, 57014), or until a wait-for
cycle is found (40P01 for the session that closes the cycle; PostgreSQL finds it after
``deadlock_timeout``, here at once). The registry is per `Database` (one server process); it is
in memory only, as PostgreSQL's lock table is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlglot import exp

from piestream.common.errors import DeadlockDetected, LockNotAvailable, PiestreamError
from piestream.frontend.parser import ast
from piestream.frontend.parser.names import table_name
from piestream.server.settings import duration_seconds

if TYPE_CHECKING:
    from piestream.server.session import Session

MODES = ast.LOCK_MODES

#: PostgreSQL's conflict table (explicit-locking.html, "Conflicting Lock Modes")
CONFLICTS: dict[str, frozenset[str]] = {
    "ACCESS SHARE": frozenset({"ACCESS EXCLUSIVE"}),
    "ROW SHARE": frozenset({"EXCLUSIVE", "ACCESS EXCLUSIVE"}),
    "ROW EXCLUSIVE": frozenset({"SHARE", "SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE"}),
    "SHARE UPDATE EXCLUSIVE": frozenset(
        {"SHARE UPDATE EXCLUSIVE", "SHARE", "SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE"}
    ),
    "SHARE": frozenset(
        {"ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE"}
    ),
    "SHARE ROW EXCLUSIVE": frozenset(MODES[2:]),
    "EXCLUSIVE": frozenset(MODES[1:]),
    "ACCESS EXCLUSIVE": frozenset(MODES),
}


@dataclass
class _Waiting:
    owner: int
    rel_id: int
    mode: str


@dataclass
class LockManager:
    """Every session's table locks in one server: relation id → {owner: [(mode, to block end)]}."""

    held: dict[int, dict[int, list[tuple[str, bool]]]] = field(default_factory=dict)
    _waiting: dict[int, _Waiting] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def acquire(
        self,
        owner: int,
        rel_id: int,
        mode: str,
        *,
        name: str,
        block: bool = False,
        nowait: bool = False,
        timeout: float = 0.0,
        interrupted: Callable[[], PiestreamError | None] | None = None,
    ) -> None:
        """Grant `owner` the lock or wait for it (see the module doc); `timeout` 0: no limit.
        `block`: held until `release(owner)`, else until `release(owner, statement_only=True)`."""
        deadline = time.monotonic() + timeout if timeout > 0 else None
        with self._cond:
            while self._blockers(owner, rel_id, mode):
                if nowait:
                    raise LockNotAvailable(f'could not obtain lock on relation "{name}"')
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockNotAvailable(
                        f'canceling statement due to lock timeout: could not obtain lock on relation "{name}"'
                    )
                self._waiting[owner] = _Waiting(owner, rel_id, mode)
                try:
                    if self._in_cycle(owner):
                        raise DeadlockDetected(
                            "deadlock detected",
                            hint=f'waiting for {mode} lock on relation "{name}" held by a session '
                            "that waits for this one",
                        )
                    wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
                    self._cond.wait(wait)
                finally:
                    del self._waiting[owner]
                err = interrupted() if interrupted is not None else None
                if err is not None:
                    raise err
            self.held.setdefault(rel_id, {}).setdefault(owner, []).append((mode, block))

    def release(self, owner: int, *, statement_only: bool = False) -> None:
        """The owner's statement (`statement_only`) or transaction block ended: its locks go."""
        with self._cond:
            for rel_id in [r for r, owners in self.held.items() if owner in owners]:
                kept = [h for h in self.held[rel_id][owner] if statement_only and h[1]]
                if kept:
                    self.held[rel_id][owner] = kept
                    continue
                del self.held[rel_id][owner]
                if not self.held[rel_id]:
                    del self.held[rel_id]
            self._cond.notify_all()

    def holds(self, owner: int) -> dict[int, set[str]]:
        """The modes `owner` holds, by relation id."""
        with self._cond:
            return {r: {m for m, _ in o[owner]} for r, o in self.held.items() if owner in o}

    def _blockers(self, owner: int, rel_id: int, mode: str) -> set[int]:
        conflicts = CONFLICTS[mode]
        return {
            other
            for other, modes in self.held.get(rel_id, {}).items()
            if other != owner and any(m in conflicts for m, _ in modes)
        }

    def _in_cycle(self, start: int) -> bool:
        """Whether `start` waits, through other waiting sessions, for itself."""
        seen: set[int] = set()
        todo = [start]
        while todo:
            w = self._waiting.get(todo.pop())
            if w is None:
                continue
            for other in self._blockers(w.owner, w.rel_id, w.mode):
                if other == start:
                    return True
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return False


# -- the locks statements take ----------------------------------------------------------------

#: statement kinds that take ACCESS EXCLUSIVE on the relation they name (`name` / `names`)
_ACCESS_EXCLUSIVE = (
    ast.Drop,
    ast.Truncate,
    ast.AlterAddColumn,
    ast.AlterDropColumn,
    ast.AlterRename,
    ast.AlterOwner,
)


def implicit_locks(stmt: ast.Statement) -> tuple[str, list[str]] | None:
    """The lock mode a statement takes on its own, and the relation names it takes it on."""
    if isinstance(stmt, _ACCESS_EXCLUSIVE):
        if isinstance(stmt, ast.AlterOwner) and stmt.kind == "schema":
            return None
        if isinstance(stmt, ast.Drop | ast.Truncate):
            return "ACCESS EXCLUSIVE", list(stmt.names)
        return "ACCESS EXCLUSIVE", [stmt.name]
    if isinstance(stmt, ast.Insert | ast.Update | ast.Delete):
        return "ROW EXCLUSIVE", [stmt.table]
    if isinstance(stmt, ast.Copy):
        if not stmt.to_client:
            return "ROW EXCLUSIVE", [stmt.table] if stmt.table else []
        return "ACCESS SHARE", [stmt.table] if stmt.table else _query_tables(stmt.query)
    if isinstance(stmt, ast.RebuildJob):
        # as REFRESH MATERIALIZED VIEW CONCURRENTLY: reads go on (and are refused with 55000 while
        # the backfill runs, by the MV itself), LOCK ... ACCESS SHARE (pg_dump) does not wait
        return "EXCLUSIVE", [stmt.name]
    if isinstance(stmt, ast.AlterParallelism):
        return "SHARE UPDATE EXCLUSIVE", [stmt.name]  # an online rescale: reads and writes go on
    if isinstance(stmt, ast.CreateIndex):
        return "SHARE", [stmt.table]
    if isinstance(stmt, ast.CommentOn):
        return "SHARE UPDATE EXCLUSIVE", [stmt.name]
    if isinstance(stmt, ast.Query):
        return "ACCESS SHARE", _query_tables(stmt.query)
    return None


def _query_tables(query: exp.Expression | None) -> list[str]:
    """The relations a query names (not its CTEs, not table functions)."""
    if query is None:
        return []
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    out: list[str] = []
    for t in query.find_all(exp.Table):
        if not isinstance(t.this, exp.Identifier) or (not t.db and t.name.lower() in ctes):
            continue
        out.append(table_name(t))
    return out


def take(
    s: Session,
    mode: str,
    names: list[str],
    *,
    block: bool = False,
    nowait: bool = False,
    missing_ok: bool = True,
) -> None:
    """Lock each named relation of the session's catalog in `mode` (`block`: to the block's end,
    else to the statement's end). A name that resolves to nothing is skipped when `missing_ok`
    (the statement itself reports it), else 42P01."""
    if not names:
        return
    catalog = s.catalog()
    timeout = duration_seconds(s.setting("lock_timeout"))
    for name in names:
        try:
            rel = catalog.require(name)
        except PiestreamError:
            if missing_ok:
                continue
            raise
        if rel.schema_name in (s.temp_schema,):
            continue  # only this session sees its temporary relations
        s.db.locks.acquire(
            id(s),
            rel.id,
            mode,
            name=rel.name,
            block=block,
            nowait=nowait,
            timeout=timeout,
            interrupted=s.interrupted,
        )
