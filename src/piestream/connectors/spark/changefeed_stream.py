"""``spark.readStream.format("piestream")``: an MV's changes as a Structured Streaming source.

    spark.readStream.format("piestream").option("table", "mv").option("changes", "true").load()

Rows are the MV's visible columns plus ``op`` (insert / delete / update_delete / update_insert)
and ``epoch``, read from a subscription on the MV (`piestream.connectors.changefeed`). Offsets
are epochs: ``{"epoch": E}`` means every change of epochs up to E was delivered. A micro-batch
(start, end] reads exactly the changes of the committed epochs in that range, the same rows
however often Spark replays it, so a restarted query resumes without gaps or duplicates — as
long as it restarts within the subscription's retention (else it fails, naming the gap).

Options besides the batch ones: ``changes`` (``true``: read changes; needed when ``table`` names
a table or MV, because Spark asks a data source for one schema for batch and streaming reads),
``subscription`` (which subscription; default: ``table`` if it is one, else the one on ``table``
keeping changes longest), ``startingOffsets`` (``latest`` — the default —, ``earliest`` — the
oldest retained change — or an epoch).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from piestream.common.errors import InvalidInput
from piestream.connectors.changefeed import Position, change_schema, retained_start
from piestream.connectors.spark.snapshot import read_changefeed, table_version

#: Spark passes these keys to `latestOffset`/`partitions`; piestream's offsets hold one epoch.
EPOCH_KEY = "epoch"


@dataclass
class EpochRangePartition(InputPartition):
    """The changes of the committed epochs in (start, end], read from `version_json`."""

    start: int
    end: int
    version_json: str


def _storage(object_store_url: str, version_json: str) -> Any:
    from piestream.storage.hummock.sstable_store import process_sstable_store
    from piestream.storage.hummock.store import HummockStorage
    from piestream.storage.hummock.version import HummockVersion
    from piestream.storage.object_store import open_object_store

    version = HummockVersion.from_json(json.loads(version_json))
    return HummockStorage(process_sstable_store(open_object_store(object_store_url)), version)


class ChangefeedStreamReader(DataSourceStreamReader):
    """Plans micro-batches as epoch ranges (driver) and reads a range's changes (executors)."""

    def __init__(
        self, data_dir: str, object_store_url: str, table: str, options: dict[str, str], schema: StructType
    ) -> None:
        self.data_dir = data_dir
        self.object_store_url = object_store_url
        self.table = table
        self.subscription = options.get("subscription") or None
        self.starting = (options.get("startingoffsets") or options.get("startingOffsets") or "latest").lower()
        snap = read_changefeed(data_dir, table, self.subscription)
        names = [n for n, _ in change_schema(snap.upstream)]
        if [f.name for f in schema.fields] != names:
            raise InvalidInput(
                f'a streaming read of "{table}" gives the columns {names}; add option("changes", "true") '
                "(Spark asks a data source for one schema for batch and streaming reads)"
            )
        self.sub_json = json.dumps(snap.subscription.to_json())
        self.upstream_json = json.dumps(snap.upstream.to_json())
        self.schema_json = schema.json()

    def _relations(self) -> tuple[Any, Any]:
        from piestream.frontend.catalog import Relation

        return Relation.from_json(json.loads(self.sub_json)), Relation.from_json(
            json.loads(self.upstream_json)
        )

    # -- planning (driver) ----------------------------------------------------------------------
    def initialOffset(self) -> dict:
        snap = read_changefeed(self.data_dir, self.table, self.subscription)
        committed = snap.version.max_committed_epoch
        info = snap.subscription.subscription
        assert info is not None
        if self.starting == "latest":
            return {EPOCH_KEY: committed}
        if self.starting == "earliest":
            pos = retained_start(snap.version, snap.subscription, Position.before_epoch(info.start_epoch))
            # an exclusive bound just below the first retained epoch (barrier epochs end in 16 zero bits)
            return {EPOCH_KEY: pos.epoch if pos.epoch_done else max(info.start_epoch, pos.epoch - 1)}
        try:
            return {EPOCH_KEY: int(self.starting)}
        except ValueError:
            raise InvalidInput(
                f"startingOffsets must be latest, earliest or an epoch, not {self.starting!r}"
            ) from None

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """The latest committed epoch, or `start` while no change was committed after it (so an
        idle MV costs no micro-batches, though epochs keep committing)."""
        from piestream.connectors.changefeed import read_changes

        snap = read_changefeed(self.data_dir, self.table, self.subscription)
        committed = snap.version.max_committed_epoch
        if start is None:
            return {EPOCH_KEY: committed}
        info = snap.subscription.subscription
        assert info is not None
        v = table_version(snap.version, info.log_table.table_id, 0, 1)
        storage = _storage(self.object_store_url, json.dumps(v.to_json()))
        after = Position.after_epoch(int(start[EPOCH_KEY]))
        probe = read_changes(storage, committed, snap.subscription, snap.upstream, after, limit=1)
        return {EPOCH_KEY: committed} if probe.table.num_rows else dict(start)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = int(start[EPOCH_KEY]), int(end[EPOCH_KEY])
        if hi <= lo:
            return []
        snap = read_changefeed(self.data_dir, self.table, self.subscription)
        info = snap.subscription.subscription
        assert info is not None
        v = table_version(snap.version, info.log_table.table_id, 0, 1)
        return [EpochRangePartition(lo, hi, json.dumps(v.to_json()))]

    def commit(self, end: dict) -> None:
        """Nothing to release: the subscription's retention decides how long changes stay."""

    # -- reading (executors) --------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from piestream.connectors.changefeed import read_changes
        from piestream.connectors.spark.spark_types import expected_arrow_schema, to_spark_arrow

        assert isinstance(partition, EpochRangePartition)
        sub, upstream = self._relations()
        storage = _storage(self.object_store_url, partition.version_json)
        read_epoch = storage.version.max_committed_epoch
        if read_epoch < partition.end:
            raise InvalidInput(f"epoch {partition.end} is not committed in the planned version")
        changes = read_changes(
            storage,
            read_epoch,
            sub,
            upstream,
            Position.after_epoch(partition.start),
            upto_epoch=partition.end,
        )
        expected = expected_arrow_schema(StructType.fromJson(json.loads(self.schema_json)))
        types = [t for _, t in change_schema(upstream)]
        for batch in changes.table.to_batches(max_chunksize=65536):
            cols = [
                to_spark_arrow(col, t, f.type)
                for col, t, f in zip(batch.columns, types, expected, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(cols, schema=expected)
