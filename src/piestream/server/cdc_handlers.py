"""DDL of CDC tables (RisingWave's syntax): a shared source ``CREATE SOURCE pg WITH (connector =
'postgres-cdc', ...)`` and tables from it, ``CREATE TABLE t (...) FROM pg TABLE 'schema.t'``, or
the single-table form ``CREATE TABLE t (...) WITH (connector = 'postgres-cdc', ...,
table.name = '...')``; the same with ``connector = 'mysql-cdc'`` (MySQL / MariaDB binlog).

A CDC table is a connector table whose source emits changes (FORMAT DEBEZIUM semantics: the
table keeps its upstream's primary key, upserts and deletes by it). Each table follows its
upstream table through a replication slot of its own (``slot.name``; from a shared source
``<slot.name>_<table>``), made by its first epoch; CREATE checks the upstream first (credentials,
publication, table, key, types) so a refused statement leaves nothing behind, and DROP TABLE /
DROP SOURCE drops the slots piestream made.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from piestream.common.errors import FeatureNotSupported, PiestreamError, UndefinedTable
from piestream.connectors.cdc import mysql, postgres
from piestream.connectors.cdc.common import CdcConnector
from piestream.connectors.cdc.offset import CdcOffset
from piestream.connectors.options import lower_keys
from piestream.frontend.catalog import Relation, RelationKind
from piestream.frontend.parser import ast
from piestream.plan.source import SourceNode, SourceSpec
from piestream.storage.table.storage_table import StorageTable

if TYPE_CHECKING:
    from piestream.server.database import Database
    from piestream.server.session import Session

log = logging.getLogger(__name__)


def _connectors() -> dict[str, CdcConnector]:
    return {"postgres-cdc": postgres.CONNECTOR, "mysql-cdc": mysql.CONNECTOR}


CDC_CONNECTORS = frozenset({"postgres-cdc", "mysql-cdc"})


def _connector_name(options: Mapping[str, str]) -> str:
    return lower_keys(options).get("connector", "").strip().lower()


def is_cdc(options: Mapping[str, str]) -> bool:
    return _connector_name(options) in CDC_CONNECTORS


def cdc_connector(options: Mapping[str, str]) -> CdcConnector:
    return _connectors()[_connector_name(options)]


def table_from_source(s: Session, stmt: ast.CreateTable) -> ast.CreateTable:
    """``CREATE TABLE t (...) FROM src TABLE 'schema.t'`` as the single-table form: the source's
    options, the upstream table, and a slot (binlog client) of the table's own."""
    assert stmt.from_source is not None
    rel = s.catalog().get_relation(stmt.from_source)
    if rel is None:
        raise UndefinedTable(f'source "{stmt.from_source}" does not exist')
    if rel.kind is not RelationKind.SOURCE or not is_cdc(rel.properties):
        raise FeatureNotSupported(
            f'CREATE TABLE ... FROM "{stmt.from_source}": only a CDC source can feed tables'
        )
    opts = dict(rel.properties)
    opts["table.name"] = stmt.from_table or ""
    opts = cdc_connector(opts).table_options(opts, stmt.name)
    return replace(stmt, with_options=opts, from_source=None, from_table=None)


def check_cdc_source(spec: SourceSpec) -> None:
    """CREATE SOURCE of a CDC connector: a reachable upstream set up for CDC."""
    cdc_connector(spec.options).check_source(spec)


def check_cdc_table(spec: SourceSpec, primary_key: list[str]) -> None:
    """CREATE TABLE of a CDC connector: everything checked upstream before the table exists."""
    cdc_connector(spec.options).check_table(spec, primary_key)


def drop_cdc_slots(dropped: Iterable[Relation]) -> None:
    """After DROP TABLE / SOURCE: drop what the dropped CDC tables made upstream (their
    replication slots; the statement has succeeded: what cannot be dropped now is logged)."""
    for rel in dropped:
        if rel.kind is not RelationKind.TABLE or not is_cdc(rel.properties):
            continue
        opts = lower_keys(rel.properties)
        try:
            cdc_connector(opts).drop(opts, rel.name)
        except PiestreamError as e:
            log.warning("DROP %s: could not drop its replication slot: %s", rel.name, e.message)


class CdcStatusRow(NamedTuple):
    """One row of ``rw_catalog.rw_cdc_sources`` (the fields are the view's columns, in order:
    the view, the dashboard and ``/metrics`` read them by name)."""

    table_name: str
    upstream_table: str
    slot_name: str
    phase: str  # "starting" (no offset committed yet) | "snapshot" | "stream"
    rows_copied: int
    committed_lsn: str | None
    confirmed_lsn: str | None
    lag_bytes: int | None
    lag_seconds: float | None
    last_error: str | None
    last_error_at: dt.datetime | None
    rows_per_second: float | None


def cdc_status_rows(db: Database) -> list[CdcStatusRow]:
    """``rw_catalog.rw_cdc_sources``: per CDC table its upstream, slot, phase and rows copied,
    the committed position (state) and what the upstream has (confirmed, lag), the last error."""
    rows = []
    for rel in sorted(db.catalog.snapshot().relations(), key=lambda r: r.id):
        if rel.kind is not RelationKind.TABLE or rel.job_id is None or not is_cdc(rel.properties):
            continue
        opts = lower_keys(rel.properties)
        off = _committed_offset(db, rel.job_id)
        errors = [e for e in db.barriers.errors.entries() if e.job_id == rel.job_id and e.kind == "source"]
        last = max(errors, key=lambda e: e.last_seen) if errors else None
        st = cdc_connector(opts).status(opts, rel.name, off)
        rows.append(
            CdcStatusRow(
                table_name=rel.name,
                upstream_table=st.upstream_table,
                slot_name=st.slot_name,
                phase=off.phase if off is not None else "starting",
                rows_copied=off.snapshot_rows if off is not None else 0,
                committed_lsn=st.committed,
                confirmed_lsn=st.confirmed,
                lag_bytes=st.lag_bytes,
                lag_seconds=st.lag_seconds,
                last_error=last.message if last is not None else None,
                last_error_at=last.last_seen if last is not None else None,
                rows_per_second=_rows_per_second(db, rel.job_id),
            )
        )
    return rows


def _rows_per_second(db: Database, job_id: int) -> float | None:
    """The rows the job's source emitted per second in the last committed epochs (the actors'
    reports, summed on the driver)."""
    for fid, f in db.barriers.graph.fragments.items():
        if f.job_id == job_id and any(isinstance(n, SourceNode) for n in f.root.walk()):
            rate = db.barriers.metrics.fragments.rate(fid, "rows.source")
            return None if rate is None else round(rate, 1)
    return None


def cdc_snapshot_progress(db: Database) -> list[tuple[int, Relation, int, int]]:
    """``rw_ddl_progress`` of the CDC tables still copying their upstream table: (job id, table,
    rows copied, rows in all) at the committed epoch; the total is the upstream's estimate, at
    least what is copied (the copy ends when a chunk comes back short, not at the estimate)."""
    out = []
    for rel in sorted(db.catalog.snapshot().relations(), key=lambda r: r.id):
        if rel.kind is not RelationKind.TABLE or rel.job_id is None or not is_cdc(rel.properties):
            continue
        if db.catalog.job_status(rel.job_id) is not None:
            continue  # failed: rw_streaming_jobs says why
        off = _committed_offset(db, rel.job_id)
        if off is not None and off.phase != "snapshot":
            continue
        done = off.snapshot_rows if off is not None else 0
        opts = lower_keys(rel.properties)
        try:
            estimate = cdc_connector(opts).estimate_rows(opts, rel.name)
        except PiestreamError:
            estimate = None  # unreachable: rw_cdc_sources says so
        out.append((rel.job_id, rel, done, max(done, estimate or 0)))
    return out


def _committed_offset(db: Database, job_id: int) -> CdcOffset | None:
    storage, committed, vpin, spin = db.snapshot_storage()
    try:
        for f in db.catalog.job_fragments(job_id):
            for n in f.root.walk():
                if isinstance(n, SourceNode):
                    for _, info in StorageTable(n.state_table, storage, committed).iter_rows():
                        o = json.loads(info).get("o")
                        return CdcOffset.from_json(o) if o else None
    finally:
        db.release_snapshot(vpin, spin)
    return None
