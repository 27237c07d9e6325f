"""Read-only access to a data directory's catalog and Hummock version from another process.

Spark plans reads and writes in its own Python processes, so they cannot ask the running
`Database`; they open ``meta.db`` read-only (SQLite WAL lets readers in while the server
writes) and read the catalog and the latest committed version in one read transaction, i.e. a
consistent pair.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path

from piestream.common.errors import PiestreamError, UndefinedTable
from piestream.encoding.keys import TABLE_ID_LEN, VNODE_LEN
from piestream.frontend.catalog import Relation
from piestream.storage.hummock.version import HummockVersion, Level, VersionDelta

_NS_REL = "catalog.relation"  # CatalogStore's namespace


@dataclass(frozen=True)
class MetaSnapshot:
    relation: Relation
    version: HummockVersion


def _connect(data_dir: str | Path) -> sqlite3.Connection:
    path = Path(data_dir) / "meta.db"
    if not path.exists():
        raise PiestreamError(f"no piestream database at {Path(data_dir).resolve()} (meta.db is missing)")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, isolation_level=None)


def read_snapshot(data_dir: str | Path, table: str, *, with_version: bool = True) -> MetaSnapshot:
    """The relation `table` and (optionally) the latest committed version, read together."""
    conn = _connect(data_dir)
    try:
        conn.execute("BEGIN")  # one read transaction: checkpoint, deltas and catalog agree
        rows = conn.execute("SELECT value FROM kv WHERE ns = ? AND key = ?", (_NS_REL, table)).fetchall()
        if not rows:
            raise UndefinedTable(f'relation "{table}" does not exist')
        raw = rows[0][0]
        rel = Relation.from_json(json.loads(raw if isinstance(raw, str) else raw.decode()))
        version = _load_version(conn) if with_version else HummockVersion(id=0)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return MetaSnapshot(rel, version)


def _load_version(conn: sqlite3.Connection) -> HummockVersion:
    """As `HummockManager._load`: the newest checkpoint plus the deltas after it."""
    rows = conn.execute(
        "SELECT id, payload FROM hummock_version_checkpoint ORDER BY id DESC LIMIT 1"
    ).fetchall()
    version = HummockVersion.from_json(json.loads(rows[0][1])) if rows else HummockVersion(id=0)
    for _, payload in conn.execute(
        "SELECT id, payload FROM hummock_version_delta WHERE id > ? ORDER BY id", (version.id,)
    ).fetchall():
        version = version.apply(VersionDelta.from_json(json.loads(payload)))
    return version


def table_version(version: HummockVersion, table_id: int, vnode_lo: int, vnode_hi: int) -> HummockVersion:
    """`version` cut down to the SSTs that may hold rows of `table_id` in vnodes [lo, hi): what a
    read of that range needs, small enough to ship to a Spark task."""
    prefix = table_id.to_bytes(TABLE_ID_LEN, "big")
    start = prefix + vnode_lo.to_bytes(VNODE_LEN, "big")
    end = prefix + vnode_hi.to_bytes(VNODE_LEN, "big") if vnode_hi < 1 << (8 * VNODE_LEN) else None
    if end is None:
        end = (table_id + 1).to_bytes(TABLE_ID_LEN, "big")

    def keep(level: Level) -> Level:
        ssts = tuple(s for s in level.ssts if table_id in s.table_ids and s.overlaps_user_range(start, end))
        return replace(level, ssts=ssts)

    return replace(
        version,
        l0=tuple(lv for lv in (keep(x) for x in version.l0) if lv.ssts),
        levels=tuple(keep(x) for x in version.levels),
        table_committed_epoch={t: e for t, e in version.table_committed_epoch.items() if t == table_id},
        table_watermarks={t: w for t, w in version.table_watermarks.items() if t == table_id},
    )
