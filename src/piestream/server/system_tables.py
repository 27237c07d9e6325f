"""The ``rw_catalog`` relations: what the streaming side of a database is doing (RisingWave's
system catalog names), readable with any SELECT (the binder turns their rows into constants).

* ``rw_catalog.rw_streaming_errors``: the errors streaming jobs survived (data errors that
  became NULLs, inconsistent ops) and the failures that stopped a job: the job's name and
  kind, the fragment, the error type (``expression`` / ``consistency`` / ``job failed``), the
  executor, SQLSTATE, message, count, a sample row, first and last time.
* ``rw_catalog.rw_streaming_jobs``: every streaming job (tables, MVs, indexes, sinks) with its
  status (``running`` / ``failed``), for a failed one its error and since when, and its
  parallelism policy: ``ADAPTIVE`` (follows the cluster's task slots) or ``FIXED(n)``.
* ``rw_catalog.rw_materialized_views``: the MVs with their definition and that status.
* ``rw_catalog.rw_ddl_progress``: the jobs still backfilling (a CREATE MATERIALIZED VIEW /
  INDEX / SINK running, or one resumed after a restart): rows done and total (an estimate from
  storage statistics until done), as a percentage too, vnodes done, and when the statement began;
  also the CDC tables still copying their upstream table (rows copied of the upstream's
  estimate; no vnodes: one copy per table).
* ``rw_catalog.rw_source_splits``: every split of every running source with its committed
  offset; for Kafka also the next offset to read, the broker's end offset and the lag.
* ``rw_catalog.rw_fragments``: every running fragment: its job, parallelism, vnode count, the
  vnode ranges of its actors and its upstream fragments (ALTER ... SET PARALLELISM changes them).
* ``rw_catalog.rw_cdc_sources``: per CDC table its upstream table, replication slot, phase
  (snapshot / stream) and rows copied, the committed and the upstream-confirmed LSN (MySQL: the
  binlog client's server id and ``file:position``), the lag in bytes of WAL / binlog and in
  seconds (since the last applied upstream commit, while log is pending), the last error its
  source survived, and the rows (changes) per second its source emitted over the last ~10 s.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from piestream.common.schema import Schema
from piestream.common.types import BIGINT, DOUBLE, INT, TIMESTAMPTZ, VARCHAR, DataType, Field
from piestream.frontend.catalog import Relation, RelationKind
from piestream.meta.rescale import actor_vnode_ranges

if TYPE_CHECKING:
    from piestream.server.database import Database


def _schema(*cols: tuple[str, DataType]) -> Schema:
    return Schema(tuple(Field(n, t) for n, t in cols))


ERRORS = _schema(
    ("job_name", VARCHAR),
    ("job_kind", VARCHAR),
    ("job_id", INT),
    ("fragment_id", INT),
    ("error_type", VARCHAR),
    ("executor", VARCHAR),
    ("sqlstate", VARCHAR),
    ("error_message", VARCHAR),
    ("error_count", BIGINT),
    ("sample_row", VARCHAR),
    ("first_seen", TIMESTAMPTZ),
    ("last_seen", TIMESTAMPTZ),
)
JOBS = _schema(
    ("job_id", INT),
    ("name", VARCHAR),
    ("kind", VARCHAR),
    ("status", VARCHAR),
    ("error_sqlstate", VARCHAR),
    ("error_message", VARCHAR),
    ("failed_since", TIMESTAMPTZ),
    ("parallelism", VARCHAR),  # ADAPTIVE (follows the cluster's task slots) or FIXED(n)
)
DDL_PROGRESS = _schema(
    ("ddl_id", INT),
    ("name", VARCHAR),
    ("ddl_statement", VARCHAR),
    ("progress", VARCHAR),
    ("rows_done", BIGINT),
    ("rows_total", BIGINT),
    ("vnodes_done", INT),
    ("vnodes_total", INT),
    ("initialized_at", TIMESTAMPTZ),
)
SOURCE_SPLITS = _schema(
    ("job_id", INT),
    ("job_name", VARCHAR),
    ("source_name", VARCHAR),
    ("connector", VARCHAR),
    ("split_id", VARCHAR),
    ("offset", VARCHAR),  # the committed reader offset, as the source state holds it
    ("committed_offset", BIGINT),  # next message to read (message connectors)
    ("end_offset", BIGINT),  # the broker's end as far as known (message connectors)
    ("lag", BIGINT),
)
CDC_SOURCES = _schema(
    ("table_name", VARCHAR),
    ("upstream_table", VARCHAR),
    ("slot_name", VARCHAR),
    ("phase", VARCHAR),
    ("rows_copied", BIGINT),
    ("committed_lsn", VARCHAR),
    ("confirmed_lsn", VARCHAR),
    ("lag_bytes", BIGINT),
    ("lag_seconds", DOUBLE),
    ("last_error", VARCHAR),
    ("last_error_at", TIMESTAMPTZ),
    ("rows_per_second", DOUBLE),
)
FRAGMENTS = _schema(
    ("fragment_id", INT),
    ("job_id", INT),
    ("job_name", VARCHAR),
    ("parallelism", INT),
    ("vnode_count", INT),
    ("actor_vnodes", VARCHAR),  # "actor index: first-last" vnode ranges per actor
    ("upstream_fragment_ids", VARCHAR),
)
MVS = _schema(
    ("id", INT),
    ("name", VARCHAR),
    ("definition", VARCHAR),
    ("status", VARCHAR),
    ("error_message", VARCHAR),
)


class RwCatalog:
    """`SystemTables` of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def rows(self, name: str) -> tuple[Schema, list[tuple[Any, ...]]] | None:
        fn = {
            "rw_streaming_errors": self._errors,
            "rw_streaming_jobs": self._jobs,
            "rw_materialized_views": self._mvs,
            "rw_ddl_progress": self._ddl_progress,
            "rw_source_splits": self._source_splits,
            "rw_cdc_sources": self._cdc_sources,
            "rw_fragments": self._fragments,
        }.get(name)
        return None if fn is None else fn()

    def _fragments(self) -> tuple[Schema, list[tuple[Any, ...]]]:
        """Every running fragment with its parallelism and its actors' vnode ranges."""
        jobs = self._job_relations()
        rows = []
        for fid, f in sorted(self.db.barriers.graph.fragments.items()):
            rel = jobs.get(f.job_id)
            ups = ", ".join(map(str, f.upstream_fragment_ids()))
            rows.append(
                (
                    fid,
                    f.job_id,
                    rel.name if rel else None,
                    f.parallelism,
                    f.vnode_count,
                    actor_vnode_ranges(f),
                    ups,
                )
            )
        return FRAGMENTS, rows

    def _cdc_sources(self) -> tuple[Schema, list[tuple[Any, ...]]]:
        from piestream.server.cdc_handlers import cdc_status_rows

        rows: list[tuple[Any, ...]] = list(cdc_status_rows(self.db))  # named rows, the view's columns
        return CDC_SOURCES, rows

    def _job_relations(self) -> dict[int, Relation]:
        rels = self.db.catalog.snapshot().relations()
        return {r.job_id: r for r in rels if r.job_id is not None}

    def _errors(self) -> tuple[Schema, list[tuple[Any, ...]]]:
        jobs = self._job_relations()
        rows = []
        for e in self.db.barriers.errors.entries():
            rel = jobs.get(e.job_id)
            rows.append(
                (
                    rel.name if rel is not None else None,
                    rel.kind.value if rel is not None else None,
                    e.job_id,
                    e.fragment_id if e.fragment_id >= 0 else None,
                    e.kind,
                    e.executor or None,
                    e.sqlstate,
                    e.message,
                    e.count,
                    e.sample or None,
                    e.first_seen,
                    e.last_seen,
                )
            )
        return ERRORS, rows

    def _status(self, rel: Relation) -> tuple[str, str | None, str | None, dt.datetime | None]:
        st = self.db.catalog.job_status(rel.job_id)
        if st is None:
            return "running", None, None, None
        return st.status, st.sqlstate, st.message, dt.datetime.fromisoformat(st.since)

    def _jobs(self) -> tuple[Schema, list[tuple[Any, ...]]]:
        rows = []
        for job_id, rel in sorted(self._job_relations().items()):
            status, sqlstate, message, since = self._status(rel)
            policy = "ADAPTIVE" if rel.adaptive else f"FIXED({rel.parallelism or ''})"
            rows.append((job_id, rel.name, rel.kind.value, status, sqlstate, message, since, policy))
        return JOBS, rows

    def _source_splits(self) -> tuple[Schema, list[tuple[Any, ...]]]:
        """Per split of every running source: its committed offset and, for readers with
        ``split_position`` (Kafka), the next offset, the broker's end and the lag."""
        from piestream.server.source_acker import committed_offsets, source_nodes
        from piestream.stream.connector import source_connector

        jobs = self._job_relations()
        found = source_nodes(self.db)
        offsets = committed_offsets(self.db, [n for _, n in found])
        rows = []
        for (job, node), splits in zip(found, offsets, strict=True):
            rel = jobs.get(job)
            try:
                reader, _ = source_connector(node.spec.connector)(node.spec)
                position = getattr(reader, "split_position", None)
            except Exception:  # the job's own errors say why its source cannot be built
                position = None
            for split, offset in sorted(splits):
                nxt = end = None
                if position is not None and offset is not None:
                    try:
                        nxt, end = position(split, offset)
                    except Exception:  # an unreachable broker: the offsets still show
                        nxt, end = position(split, offset, remote=False)
                lag = None if nxt is None or end is None else max(0, end - nxt)
                rows.append(
                    (
                        job,
                        rel.name if rel else None,
                        node.source_name,
                        node.connector,
                        split,
                        offset,
                        nxt,
                        end,
                        lag,
                    )
                )
        return SOURCE_SPLITS, rows

    def _mvs(self) -> tuple[Schema, list[tuple[Any, ...]]]:
        rows = []
        for rel in sorted(self.db.catalog.snapshot().relations(), key=lambda r: r.id):
            if rel.kind is RelationKind.MATERIALIZED_VIEW:
                status, _, message, _ = self._status(rel)
                rows.append((rel.id, rel.name, rel.definition, status, message))
        return MVS, rows

    def _ddl_progress(self) -> tuple[Schema, list[tuple[Any, ...]]]:
        jobs = self._job_relations()
        tracker = self.db.ddl.progress
        rows: list[tuple[Any, ...]] = []
        if tracker is None:
            return DDL_PROGRESS, rows
        progress = tracker.read([(j, self.db.catalog.job_fragments(j)) for j in sorted(jobs)])
        started = dict(tracker.started)
        for job_id, p in sorted(progress.items()):
            if p.done or job_id not in jobs or self.db.catalog.job_status(job_id) is not None:
                continue  # finished, or failed (rw_streaming_jobs says why)
            rel = jobs[job_id]
            began = started.get(job_id)
            rows.append(
                (
                    job_id,
                    rel.name,
                    rel.definition,
                    f"{p.percent:.2f}%",
                    p.rows_done,
                    p.rows_total,
                    p.vnodes_done,
                    p.vnodes_total,
                    began.started_at if began is not None else None,
                )
            )
        from piestream.server.cdc_handlers import cdc_snapshot_progress

        for job_id, rel, done, total in cdc_snapshot_progress(self.db):  # a CDC table's copy
            percent = min(99.99, 100.0 * done / total) if total else 0.0
            rows.append((job_id, rel.name, rel.definition, f"{percent:.2f}%", done, total, None, None, None))
        return DDL_PROGRESS, rows
