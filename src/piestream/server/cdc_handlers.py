"""DDL of CDC tables (RisingWave's syntax): a shared source ``CREATE SOURCE pg WITH (connector =
'postgres-cdc', ...)`` and tables from it, ``CREATE TABLE t (...) FROM pg TABLE 'schema.t'``, or
the single-table form ``CREATE TABLE t (...) WITH (connector = 'postgres-cdc', ...,
table.name = '...')``.

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
from typing import TYPE_CHECKING, Any

from piestream.common.errors import FeatureNotSupported, PiestreamError, UndefinedTable
from piestream.connectors.cdc import postgres
from piestream.connectors.cdc.offset import CdcOffset, lsn_text
from piestream.connectors.options import lower_keys
from piestream.frontend.catalog import Relation, RelationKind
from piestream.frontend.parser import ast
from piestream.plan.source import SourceNode, SourceSpec
from piestream.storage.table.storage_table import StorageTable

if TYPE_CHECKING:
    from piestream.server.database import Database
    from piestream.server.session import Session

log = logging.getLogger(__name__)

CDC_CONNECTORS = frozenset({"postgres-cdc"})


def is_cdc(options: Mapping[str, str]) -> bool:
    return lower_keys(options).get("connector", "").strip().lower() in CDC_CONNECTORS


def table_from_source(s: Session, stmt: ast.CreateTable) -> ast.CreateTable:
    """``CREATE TABLE t (...) FROM src TABLE 'schema.t'`` as the single-table form: the source's
    options, the upstream table, and a slot of the table's own."""
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
    opts["slot.name"] = f"{opts.get('slot.name') or 'piestream'}_{stmt.name}".lower()[:63]
    return replace(stmt, with_options=opts, from_source=None, from_table=None)


def check_cdc_source(spec: SourceSpec) -> None:
    """CREATE SOURCE of a CDC connector: reachable upstream, publication there (or made)."""
    postgres.check_source(spec)


def check_cdc_table(spec: SourceSpec, primary_key: list[str]) -> None:
    """CREATE TABLE of a CDC connector: everything checked upstream before the table exists."""
    postgres.check_upstream(spec, primary_key)


def drop_cdc_slots(dropped: Iterable[Relation]) -> None:
    """After DROP TABLE / SOURCE: drop the replication slots of the dropped CDC tables (the
    statement has succeeded: a slot that cannot be dropped now is logged, not raised)."""
    for rel in dropped:
        if rel.kind is not RelationKind.TABLE or not is_cdc(rel.properties):
            continue
        opts = lower_keys(rel.properties)
        try:
            cfg = postgres.pg_config(SourceSpec(rel.name, "postgres-cdc", (), opts))
            postgres.forget(cfg)
            postgres.drop_slot(cfg)
        except PiestreamError as e:
            log.warning("DROP %s: could not drop its replication slot: %s", rel.name, e.message)


def cdc_status_rows(db: Database) -> list[tuple[Any, ...]]:
    """``rw_catalog.rw_cdc_sources``: per CDC table its upstream, slot, phase and rows copied,
    the committed position (state) and what the upstream has (confirmed, lag), the last error."""
    rows = []
    for rel in sorted(db.catalog.snapshot().relations(), key=lambda r: r.id):
        if rel.kind is not RelationKind.TABLE or rel.job_id is None or not is_cdc(rel.properties):
            continue
        cfg = postgres.pg_config(SourceSpec(rel.name, "postgres-cdc", (), lower_keys(rel.properties)))
        off = _committed_offset(db, rel.job_id)
        errors = [e for e in db.barriers.errors.entries() if e.job_id == rel.job_id and e.kind == "source"]
        last = max(errors, key=lambda e: e.last_seen) if errors else None
        confirmed = lag = None
        seconds = None
        try:
            st = postgres.slot_status(cfg)
        except PiestreamError:
            st = None  # unreachable: the error column says so
        if st is not None:
            confirmed = st.confirmed_lsn
            if off is not None and off.phase == "stream":
                lag = max(0, st.current_lsn - off.lsn)
                if lag and off.commit_ts_us is not None:
                    now_us = dt.datetime.now(dt.UTC).timestamp() * 1e6
                    seconds = max(0.0, (now_us - off.commit_ts_us) / 1e6)
                elif not lag:
                    seconds = 0.0
        rows.append(
            (
                rel.name,
                cfg.qualified,
                cfg.slot,
                off.phase if off is not None else "starting",
                off.snapshot_rows if off is not None else 0,
                lsn_text(off.lsn) if off is not None else None,
                lsn_text(confirmed) if confirmed is not None else None,
                lag,
                seconds,
                last.message if last is not None else None,
                last.last_seen if last is not None else None,
            )
        )
    return rows


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
