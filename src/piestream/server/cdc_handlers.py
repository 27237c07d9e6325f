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

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from piestream.common.errors import FeatureNotSupported, PiestreamError, UndefinedTable
from piestream.connectors.cdc import postgres
from piestream.connectors.options import lower_keys
from piestream.frontend.catalog import Relation, RelationKind
from piestream.frontend.parser import ast
from piestream.plan.source import SourceSpec

if TYPE_CHECKING:
    from piestream.server.session import Session

log = logging.getLogger(__name__)

CDC_CONNECTORS = frozenset({"postgres-cdc"})


def is_cdc(options: Mapping[str, str]) -> bool:
    return lower_keys(options).get("connector", "").strip().lower() in CDC_CONNECTORS


def table_from_source(s: Session, stmt: ast.CreateTable) -> ast.CreateTable:
    """``CREATE TABLE t (...) FROM src TABLE 'schema.t'`` as the single-table form: the source's
    options, the upstream table, and a slot of the table's own."""
    assert stmt.from_source is not None
    rel = s.db.catalog.get(stmt.from_source)
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
