"""Lakehouse sinks: Delta Lake (``connector = 'delta'``) and Iceberg (``connector = 'iceberg'``),
exactly once per epoch.

Actors stage each epoch's output as Parquet files exactly as the parquet sink does (under
``staging.path``, a directory in piestream's data directory by default), and name them in the
sink's state table, which commits with the epoch. After the epoch commits, the driver
(`publish_lake`) writes the staged rows of every committed epoch the lake table does not have
yet, one lake commit per epoch, in epoch order, and records the epoch in that commit's metadata
(``piestream.epoch``, with ``piestream.sink`` naming the sink): Delta's commitInfo, Iceberg's
snapshot summary. Then it deletes the staged files.

Why that is exactly once: a lake commit is atomic (Delta's log entry, Iceberg's catalog row),
so after a crash the table either has an epoch or not, and its metadata says which. A driver
killed after the lake commit but before the clean-up finds the epoch recorded and only cleans
up; one killed before the lake commit finds the staged files still named by committed state and
commits them. Staged output of failed or duplicate actor attempts is never named in committed
state, so it is never written.

Sink types: ``append-only`` appends the rows; ``upsert`` applies per key the epoch's net effect
(Delta: one MERGE; Iceberg: one transaction deleting the epoch's keys and appending the upserted
rows); ``changelog`` appends every change with its ``_op``. INTERVAL (and, for Delta, TIME)
columns are written as PostgreSQL text, as those formats have no such type.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.errors import FeatureNotSupported
from piestream.common.types import INTERVAL, TIME, VARCHAR, DataType, TypeKind
from piestream.connectors.options import InvalidOption
from piestream.connectors.staging import clear_pending, delete_staged, named_outputs, save_pending
from piestream.expr.functions.cast import cast_array

#: sinks the driver publishes through a `LakeTable` (kafka: one transaction per epoch)
LAKE_CONNECTORS = ("delta", "iceberg", "kafka")
EPOCH_KEY = "piestream.epoch"
SINK_KEY = "piestream.sink"
OP_COLUMN = "_op"


class LakeTable(Protocol):
    """One sink's target table."""

    def last_epoch(self) -> int | None:
        """The newest epoch this sink recorded in the table's commits (None: none yet)."""

    def commit(self, epoch: int, data: pa.Table) -> None:
        """Write one epoch's staged rows in one atomic commit that records `epoch`."""


def _require(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise FeatureNotSupported(
            f"the {module} package is needed for this sink; install piestream[lakehouse]"
        ) from None


def lake_type(t: DataType, connector: str) -> pa.DataType:
    """The Arrow type a column of SQL type `t` is written as."""
    if t.kind is TypeKind.INTERVAL or (connector == "delta" and t.kind is TypeKind.TIME):
        return pa.string()
    if nm.is_numeric_type(t.arrow):  # per-value scales (issue 14): a fixed-scale decimal outside
        return na.EXPORT_DECIMAL
    return t.arrow


def lake_schema(names: Sequence[str], types: Sequence[DataType], connector: str, sink_type: str) -> pa.Schema:
    """The target table's schema: the sink's columns, plus ``_op`` for a changelog sink."""
    fields = [pa.field(n, lake_type(t, connector)) for n, t in zip(names, types, strict=True)]
    if sink_type == "changelog":
        fields.append(pa.field(OP_COLUMN, pa.string()))
    return pa.schema(fields)


def to_lake(table: pa.Table, connector: str) -> pa.Table:
    """Staged rows as the lake table stores them (INTERVAL / TIME columns as text)."""
    for i, f in enumerate(table.schema):
        kind = INTERVAL if pa.types.is_interval(f.type) else None
        if connector == "delta" and pa.types.is_time(f.type):
            kind = TIME
        if kind is not None:
            text = cast_array(table.column(i).combine_chunks(), kind, VARCHAR)
            table = table.set_column(i, f.name, text)
        elif nm.is_numeric_type(f.type):
            table = table.set_column(i, f.name, na.to_export_decimal(table.column(i)))
    return table


def validate_lake_options(connector: str, options: Mapping[str, str]) -> dict[str, str]:
    """Check a lake sink's options (and that its library is installed)."""
    out = dict(options)
    if connector == "kafka":  # checked when the sink's transactional id was made
        return out
    if connector == "delta":
        _require("deltalake")
        location = options.get("location") or options.get("path")
        if not location:
            raise InvalidOption("the delta sink needs a location = '<path or URI>' option")
        if "://" not in location:
            location = os.path.abspath(location)
        out["location"] = location
    else:
        _require("pyiceberg")
        kind = options.get("catalog.type", "sql").lower()
        if kind != "sql":
            raise FeatureNotSupported(
                f"catalog.type = '{kind}' is not supported; use the SQL catalog ('sql')"
            )
        warehouse = options.get("warehouse.path")
        if not warehouse:
            raise InvalidOption("the iceberg sink needs a warehouse.path = '<path or URI>' option")
        for key in ("database.name", "table.name"):
            if not options.get(key):
                raise InvalidOption(f"the iceberg sink needs a {key} option")
        if "://" not in warehouse:
            warehouse = os.path.abspath(warehouse)
            os.makedirs(warehouse, exist_ok=True)
            out.setdefault("catalog.uri", f"sqlite:///{os.path.join(warehouse, 'piestream_catalog.db')}")
            warehouse = "file://" + warehouse
        elif "catalog.uri" not in options:
            raise InvalidOption("an iceberg sink with a remote warehouse needs a catalog.uri option")
        out["warehouse.path"] = warehouse
    return out


def new_staging_path(root: str, sink_name: str) -> str:
    """A fresh directory for a sink's staged files (a recreated sink never sees old ones)."""
    path = os.path.join(root, f"{sink_name}-{uuid.uuid4().hex[:8]}")
    os.makedirs(path, exist_ok=True)
    return path


def open_lake_table(
    connector: str, options: Mapping[str, str], sink_name: str, sink_type: str, key: Sequence[str]
) -> LakeTable:
    if connector == "kafka":
        from piestream.connectors.kafka.sink import KafkaSinkTable

        return KafkaSinkTable(options, sink_name, sink_type, tuple(key))
    if connector == "delta":
        from piestream.connectors.delta import DeltaSinkTable

        return DeltaSinkTable(options["location"], sink_name, sink_type, tuple(key))
    from piestream.connectors.iceberg import IcebergSinkTable

    return IcebergSinkTable(options, sink_name, sink_type, tuple(key))


def create_lake_table(
    connector: str, options: Mapping[str, str], schema: pa.Schema
) -> Callable[[], None] | None:
    """Create the target table at CREATE SINK (readers see it at once); an existing table must
    have the sink's columns. Returns how to remove the table if this call created it (a CREATE
    SINK that fails afterwards leaves nothing behind), else None."""
    if connector == "kafka":
        from piestream.connectors.kafka.sink import create_marker_topic

        return create_marker_topic(options)
    if connector == "delta":
        from piestream.connectors.delta import create_delta_table

        return create_delta_table(options["location"], schema)
    from piestream.connectors.iceberg import create_iceberg_table

    return create_iceberg_table(options, schema)


def drop_lake_target(connector: str, options: Mapping[str, str]) -> None:
    """After DROP SINK: remove what piestream made for the sink's delivery alone (a Kafka sink's
    marker topic). Published output (the topic, the lake table) stays."""
    if connector == "kafka":
        from piestream.connectors.kafka.sink import delete_marker_topic

        delete_marker_topic(options)


def check_columns(existing: Sequence[str], schema: pa.Schema, where: str) -> None:
    if list(existing) != schema.names:
        raise InvalidOption(
            f"{where} exists with columns ({', '.join(existing)}); "
            f"the sink writes ({', '.join(schema.names)})"
        )


def publish_lake(table: LakeTable, staging: str, committed_epoch: int, state_rows: Iterable[tuple]) -> int:
    """Driver side, after `committed_epoch` commits: write every committed epoch the lake table
    lacks (one commit each, in order; with what a failed publish left pending, `staging`), then
    delete staged files of epochs up to the committed one. Idempotent. Returns the epochs written."""
    outputs = named_outputs(staging, committed_epoch, state_rows)
    try:
        last = table.last_epoch() if outputs else None
        pending: dict[int, list[str]] = {}
        for _actor, epoch, token, _rows in outputs:
            if last is not None and epoch <= last:
                continue
            path = os.path.join(staging, token)
            if os.path.exists(path):
                pending.setdefault(epoch, []).append(path)
        for epoch in sorted(pending):  # in order: an epoch is never skipped for a later one
            data = pa.concat_tables([pq.read_table(p) for p in sorted(pending[epoch])])
            table.commit(epoch, data)
    except Exception:
        save_pending(staging, outputs)  # not deleted as orphans: the next publish retries them
        raise
    clear_pending(staging)
    delete_staged(staging, committed_epoch)
    return len(pending)
