"""Sink connectors: ``parquet`` (files, exactly once per epoch), ``delta`` and ``iceberg``
(lakehouse tables, staged here like parquet and committed by `lakehouse`) and ``blackhole``.

Parquet layout under ``path``::

    part-<epoch:020d>-<actor:04d>.parquet    published: one file per (epoch, actor) with rows
    _staging/<epoch>-<actor>-<attempt>.parquet  written by actors; invisible to readers

Protocol (see `piestream.stream.executors.sink`): an actor writes its epoch's rows to a staging
file whose name is unique to the attempt, and records the name in the sink's state table in
the same epoch. After the epoch commits, the driver reads the committed state and renames the
named staging files to their final ``part-`` names (`publish_committed`); anything else staged
for epochs up to the committed one came from failed or duplicate attempts and is deleted. On
restart the driver publishes what the last committed epoch left staged. So a final file exists
iff its epoch committed, and each (epoch, actor) has at most one. Readers (pyarrow, Spark, DuckDB)
skip ``_``-prefixed paths, so reading the directory shows exactly the committed epochs; file
names sort by epoch, which is the order to apply upsert / changelog files in.

The driver must see the same filesystem as the actors (a local directory in local mode, a shared
mount on a cluster).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.errors import FeatureNotSupported
from piestream.common.types import INTERVAL, VARCHAR
from piestream.connectors.lakehouse import LAKE_CONNECTORS, validate_lake_options
from piestream.connectors.options import InvalidOption
from piestream.connectors.staging import clear_pending, delete_staged, named_outputs, save_pending
from piestream.expr.functions.cast import cast_array
from piestream.stream.connector import SinkWriter

STAGING = "_staging"


def final_name(epoch: int, actor_index: int) -> str:
    return f"part-{epoch:020d}-{actor_index:04d}.parquet"


@dataclass(frozen=True)
class ParquetSinkWriter:
    """Actor side: stage an epoch's rows as a Parquet file unique to this attempt."""

    path: str

    def stage(self, epoch: int, actor_index: int, table: pa.Table) -> str | None:
        staging = os.path.join(self.path, STAGING)
        os.makedirs(staging, exist_ok=True)
        name = f"{epoch:020d}-{actor_index:04d}-{uuid.uuid4().hex[:12]}.parquet"
        tmp = os.path.join(staging, "." + name)
        pq.write_table(_parquet_compatible(table), tmp)
        os.replace(tmp, os.path.join(staging, name))  # a staged file is always complete
        return name


def _parquet_compatible(table: pa.Table) -> pa.Table:
    """Parquet has no month-day-nano interval: INTERVAL columns are written as PostgreSQL text;
    NUMERIC columns of per-value scales as a fixed-scale decimal (`numeric_arrays.EXPORT_DECIMAL`)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_interval(f.type):
            text = cast_array(table.column(i).combine_chunks(), INTERVAL, VARCHAR)
            table = table.set_column(i, f.name, text)
        elif nm.is_numeric_type(f.type):
            table = table.set_column(i, f.name, na.to_export_decimal(table.column(i)))
    return table


@dataclass(frozen=True)
class BlackholeSinkWriter:
    """Discards everything (the Nexmark benchmarks' sink)."""

    def stage(self, epoch: int, actor_index: int, table: pa.Table) -> str | None:
        return None


def publish_committed(path: str, committed_epoch: int, state_rows: Iterable[tuple]) -> int:
    """Driver side, after `committed_epoch` commits: publish the staged files the committed sink
    state names (and what a failed publish left pending, `staging`), delete orphans of epochs up
    to it. Idempotent. Returns files published."""
    staging = os.path.join(path, STAGING)
    outputs = named_outputs(staging, committed_epoch, state_rows)
    published = 0
    try:
        for actor_index, epoch, token, _rows in outputs:
            src = os.path.join(staging, token)
            if os.path.exists(src):
                os.replace(src, os.path.join(path, final_name(epoch, actor_index)))
                published += 1
    except Exception:
        save_pending(staging, outputs)  # not deleted as orphans: the next publish retries them
        raise
    clear_pending(staging)
    delete_staged(staging, committed_epoch)
    return published


def parquet_sink(options: Mapping[str, str]) -> SinkWriter:
    """The registered ``parquet`` connector: the writer of a sink whose options were validated."""
    return ParquetSinkWriter(options["path"])


def blackhole_sink(options: Mapping[str, str]) -> SinkWriter:
    return BlackholeSinkWriter()


def lake_sink(options: Mapping[str, str]) -> SinkWriter:
    """``delta`` / ``iceberg``: actors stage Parquet files; the driver commits them to the table."""
    return ParquetSinkWriter(options["staging.path"])


SINK_CONNECTORS = {
    "parquet": parquet_sink,
    "blackhole": blackhole_sink,
    "delta": lake_sink,
    "iceberg": lake_sink,
    "kafka": lake_sink,  # staged like the lake sinks; the driver produces each epoch in a transaction
}


def validate_sink_options(connector: str, options: Mapping[str, str]) -> dict[str, str]:
    """CREATE SINK's options checked for `connector`, as the sink node keeps them (a parquet
    sink's path made absolute, its directory created and required to hold no output yet)."""
    c = connector.lower()
    if c not in SINK_CONNECTORS:
        raise FeatureNotSupported(
            f'sink connector "{connector}" is not supported (known: {", ".join(SINK_CONNECTORS)})'
        )
    out = dict(options)
    if c in LAKE_CONNECTORS:
        if not options.get("staging.path"):
            raise InvalidOption(f"the {c} sink needs a staging.path option")
        return validate_lake_options(c, out)
    if c == "parquet":
        path = options.get("path")
        if not path:
            raise InvalidOption("the parquet sink needs a path = '<directory>' option")
        path = os.path.abspath(path)
        os.makedirs(path, exist_ok=True)
        if any(n.startswith("part-") for n in os.listdir(path)):
            raise InvalidOption(f'path "{path}" already holds sink output; use an empty directory')
        out["path"] = path
    return out


def sink_output_path(connector: str, options: Mapping[str, str]) -> str | None:
    """Where a sink's committed output is published (None: it keeps none, e.g. blackhole)."""
    if connector.lower() in LAKE_CONNECTORS:
        return options.get("staging.path")
    return options.get("path") if connector.lower() == "parquet" else None


def read_sink(path: str) -> pa.Table:
    """All committed output of a parquet sink, in epoch order (tests, tools)."""
    names = sorted(n for n in os.listdir(path) if n.startswith("part-") and n.endswith(".parquet"))
    tables = [pq.read_table(os.path.join(path, n)) for n in names]
    return pa.concat_tables(tables) if tables else pa.table({})
