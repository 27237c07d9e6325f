"""The meta store: one SQLite file in the data directory (the embedded default).

Everything meta persists — Hummock version deltas and checkpoints, the catalog, streaming jobs —
goes through `transaction()`, so one epoch's commit (and the metadata that must move with it) is
one SQLite transaction: after a crash the file holds either all of it or none of it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    ns TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS hummock_version_delta (id INTEGER PRIMARY KEY, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hummock_version_checkpoint (id INTEGER PRIMARY KEY, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hummock_stale_object (
    object_id INTEGER PRIMARY KEY, removed_in_version INTEGER NOT NULL);
"""


class MetaStore:
    """A thread-safe SQLite connection with explicit transactions.

    `read_only` opens an existing store for reading from another process (the Spark data source
    reads the catalog and the committed version while the server writes: SQLite's WAL lets
    readers in); its `transaction()` is a read transaction, a consistent view of everything."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._depth = 0
        if read_only:
            if not Path(self.path).exists():
                raise FileNotFoundError(self.path)
            uri = f"file:{self.path}?mode=ro"
            self._conn = sqlite3.connect(
                uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30
            )
            return
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")  # durability: a commit survives power loss
        with self.transaction() as c:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A transaction (re-entrant: nested calls join the outer one)."""
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._conn.execute("BEGIN" if self.read_only else "BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self._conn
            except BaseException:
                self._depth -= 1
                if outer:
                    self._conn.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                self._conn.execute("COMMIT")

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    # -- a small namespaced key/value table for meta components ---------------------------------
    def put(self, ns: str, key: str, value: bytes | str) -> None:
        with self.transaction() as c:
            c.execute("INSERT OR REPLACE INTO kv (ns, key, value) VALUES (?, ?, ?)", (ns, key, value))

    def get(self, ns: str, key: str) -> bytes | str | None:
        rows = self.query("SELECT value FROM kv WHERE ns = ? AND key = ?", (ns, key))
        return rows[0][0] if rows else None  # type: ignore[return-value]

    def delete(self, ns: str, key: str) -> None:
        with self.transaction() as c:
            c.execute("DELETE FROM kv WHERE ns = ? AND key = ?", (ns, key))

    def scan(self, ns: str) -> list[tuple[str, bytes | str]]:
        rows = self.query("SELECT key, value FROM kv WHERE ns = ? ORDER BY key", (ns,))
        return [(str(k), v) for k, v in rows]  # type: ignore[misc]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
