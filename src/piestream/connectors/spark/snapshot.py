"""Read-only access to a data directory's catalog and Hummock version from another process.

Spark plans reads and writes in its own Python processes, so they cannot ask the running
`Database`; they open the meta store read-only and read a catalog entry and the latest committed
version in one read transaction, i.e. a consistent pair, through meta's own readers
(`read_relation`, `load_version`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from piestream.common.errors import PiestreamError, UndefinedTable
from piestream.encoding.keys import TABLE_ID_LEN, VNODE_LEN
from piestream.frontend.catalog import DEFAULT_SCHEMA, Relation, RelationKind
from piestream.meta.catalog_store import read_job_fragments, read_relation, read_relations
from piestream.meta.hummock_manager import load_version
from piestream.meta.store import MetaStore
from piestream.plan.fragment import Fragment
from piestream.storage.hummock.version import HummockVersion, Level


@dataclass(frozen=True)
class MetaSnapshot:
    relation: Relation
    version: HummockVersion
    fragments: tuple[Fragment, ...] = ()  # the relation's streaming job (read with the version)


def _open_meta(data_dir: str | Path) -> MetaStore:
    try:
        return MetaStore(Path(data_dir) / "meta.db", read_only=True)
    except FileNotFoundError:
        raise PiestreamError(
            f"no piestream database at {Path(data_dir).resolve()} (meta.db is missing)"
        ) from None


def read_snapshot(data_dir: str | Path, table: str, *, with_version: bool = True) -> MetaSnapshot:
    """The relation `table` and (optionally) the latest committed version, read together."""
    meta = _open_meta(data_dir)
    try:
        with meta.transaction():  # one read transaction: checkpoint, deltas and catalog agree
            rel = read_relation(meta, table)
            if rel is None:
                raise UndefinedTable(f'relation "{table}" does not exist')
            version = load_version(meta) if with_version else HummockVersion(id=0)
            jobs = read_job_fragments(meta, rel.job_id) if with_version and rel.job_id is not None else []
    finally:
        meta.close()
    return MetaSnapshot(rel, version, tuple(jobs))


@dataclass(frozen=True)
class ChangefeedSnapshot:
    """A subscription, the relation it follows, and the latest committed version."""

    subscription: Relation
    upstream: Relation
    version: HummockVersion


def read_changefeed(data_dir: str | Path, table: str, subscription: str | None = None) -> ChangefeedSnapshot:
    """The subscription to read `table`'s changes from: `subscription` if given, `table` itself
    if it is one, else the subscription on `table` that keeps changes longest."""
    meta = _open_meta(data_dir)
    try:
        with meta.transaction():
            rels = read_relations(meta)
            version = load_version(meta)
    finally:
        meta.close()
    by_name = {r.name: r for r in rels if r.schema_name == DEFAULT_SCHEMA}  # Spark names public's
    rel = by_name.get(subscription or table)
    if rel is None:
        raise UndefinedTable(f'relation "{subscription or table}" does not exist')
    if rel.kind is not RelationKind.SUBSCRIPTION:
        subs = [r for r in rels if r.subscription is not None and r.subscription.of == rel.id]
        if not subs:
            raise PiestreamError(
                f'"{rel.name}" has no subscription to read its changes from; create one first: '
                f"CREATE SUBSCRIPTION {rel.name}_changes FROM {rel.name} WITH (retention = '1h')",
                sqlstate="42704",
            )
        rel = max(subs, key=lambda r: (r.subscription.retention_ms if r.subscription else 0, r.name))
    assert rel.subscription is not None
    upstream = next((r for r in rels if r.id == rel.subscription.of), None)
    if upstream is None:
        raise UndefinedTable(f'the relation subscription "{rel.name}" follows does not exist')
    return ChangefeedSnapshot(rel, upstream, version)


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
