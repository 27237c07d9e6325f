"""server.locks without a server: PostgreSQL's conflict matrix, NOWAIT, timeouts, statement vs
block locks, deadlock detection."""

from __future__ import annotations

import threading

import pytest

from piestream.common.errors import DeadlockDetected, LockNotAvailable, QueryCanceled
from piestream.server.locks import CONFLICTS, MODES, LockManager

#: PostgreSQL 15's table (explicit-locking.html), rows in MODES' order: X = conflicts
_PG_TABLE = [
    ".......X",
    "......XX",
    "....XXXX",
    "...XXXXX",
    "..XX.XXX",
    "..XXXXXX",
    ".XXXXXXX",
    "XXXXXXXX",
]


def test_the_conflict_matrix_is_postgresqls() -> None:
    for mode, row in zip(MODES, _PG_TABLE, strict=True):
        assert CONFLICTS[mode] == {m for m, c in zip(MODES, row, strict=True) if c == "X"}, mode
        for other in MODES:  # symmetric
            assert (other in CONFLICTS[mode]) == (mode in CONFLICTS[other])


def test_grants_waits_and_releases() -> None:
    locks = LockManager()
    locks.acquire(1, 7, "ACCESS SHARE", name="t", block=True)
    locks.acquire(1, 7, "ACCESS EXCLUSIVE", name="t")  # a session's own locks never conflict
    with pytest.raises(LockNotAvailable, match='could not obtain lock on relation "t"'):
        locks.acquire(3, 7, "ACCESS SHARE", name="t", nowait=True)
    with pytest.raises(LockNotAvailable, match="lock timeout"):
        locks.acquire(3, 7, "ACCESS SHARE", name="t", timeout=0.1)
    locks.release(1, statement_only=True)  # the ACCESS EXCLUSIVE goes, the block's ACCESS SHARE stays
    assert locks.holds(1) == {7: {"ACCESS SHARE"}}
    locks.acquire(3, 7, "ACCESS SHARE", name="t", nowait=True)
    locks.acquire(2, 7, "ROW EXCLUSIVE", name="t")
    with pytest.raises(LockNotAvailable):
        locks.acquire(3, 7, "EXCLUSIVE", name="t", nowait=True)  # 2's ROW EXCLUSIVE
    locks.release(2)
    locks.release(1)
    locks.acquire(3, 7, "EXCLUSIVE", name="t", nowait=True)
    with pytest.raises(QueryCanceled):
        locks.acquire(4, 7, "ROW SHARE", name="t", interrupted=lambda: QueryCanceled("cancelled"))


def test_a_wait_cycle_fails_the_session_that_closes_it() -> None:
    locks = LockManager()
    locks.acquire(1, 1, "ACCESS EXCLUSIVE", name="a", block=True)
    locks.acquire(2, 2, "ACCESS EXCLUSIVE", name="b", block=True)
    got: list[str] = []
    waiter = threading.Thread(target=lambda: (locks.acquire(1, 2, "ACCESS SHARE", name="b"), got.append("1")))
    waiter.start()
    while not locks._waiting:
        threading.Event().wait(0.01)
    with pytest.raises(DeadlockDetected):
        locks.acquire(2, 1, "ACCESS SHARE", name="a")
    locks.release(2)
    waiter.join(10)
    assert got == ["1"]
