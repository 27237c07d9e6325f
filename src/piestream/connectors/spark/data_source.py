"""The ``piestream`` Spark data source (Python Data Source API, spark-notes §1).

Read a consistent snapshot of a table, MV or index::

    spark.read.format("piestream").option("table", "mv").option("data_dir", path).load()

The snapshot (a committed epoch and the Hummock version holding it) is chosen once, when Spark
plans the read, and shipped inside every input partition; each partition scans one vnode range
at that epoch straight from the object store, so all partitions see the same epoch however the
table changes meanwhile. The server keeps SSTs it stopped referencing for
`DatabaseConfig.vacuum_retention_sec` (default 300 s): reads must finish within that.

Write a DataFrame into a table (batch or streaming)::

    df.write.format("piestream").option("table", "t").option("data_dir", path).mode("append").save()
    df.writeStream.format("piestream").option("table", "t").option("data_dir", path)
      .option("checkpointLocation", ckpt).start()

Executors cast their rows to the table's column types and stage them as Arrow files; the commit
publishes a manifest in the data directory's inbox (`piestream.meta.inbox`), which a running
Database ingests exactly once at its next epoch. Streaming writes name the manifest after the
query id and batch id, so a replayed micro-batch is ingested once.

Read an MV's changes as a stream (`piestream.connectors.spark.changefeed_stream`)::

    spark.readStream.format("piestream").option("table", "mv").option("changes", "true").load()

Options: ``table`` (required), ``data_dir`` (default ``./piestream-data``), ``object_store_url``
(default ``<data_dir>/objects``); reads: ``partitions`` (vnode ranges, default 8),
``include_hidden`` (default false); writes: ``op_column`` (a column of '+'/'-', 'insert'/'delete',
'U+'/'U-': deletes and updates of a table with a primary key), ``wait_ingested`` (``auto``
— wait when a server on the data dir is alive —, ``true`` or ``false``) and ``ingest_timeout``
(seconds, default 60; on timeout the write stays published and is ingested later).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from piestream.common.chunk import Op
from piestream.common.errors import FeatureNotSupported, InvalidInput, PiestreamError, UndefinedColumn
from piestream.common.types import DataType
from piestream.connectors.spark.snapshot import MetaSnapshot, read_snapshot, table_version
from piestream.connectors.spark.spark_types import (
    expected_arrow_schema,
    spark_schema,
    to_spark_arrow,
    to_table_arrow,
)
from piestream.frontend.catalog import Relation, RelationKind
from piestream.meta.inbox import (
    OP_FIELD,
    Manifest,
    Part,
    discard_staging,
    publish,
    server_alive,
    stage_part,
    wait_consumed,
)

log = logging.getLogger(__name__)

FORMAT = "piestream"
DEFAULT_DATA_DIR = "./piestream-data"
DEFAULT_PARTITIONS = 8
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # StreamExecution.QUERY_ID_KEY: stable across restarts
BATCH_ID_PROPERTY = "streaming.sql.batchId"

_TRUE = ("true", "1", "yes", "on")
_OPS = {
    **dict.fromkeys(("+", "i", "insert", "u+", "update_insert"), Op.INSERT),
    **dict.fromkeys(("-", "d", "delete", "u-", "update_delete"), Op.DELETE),
}


@dataclass(frozen=True)
class Options:
    """The data source options, parsed once (Spark's option map is case-insensitive)."""

    table: str
    data_dir: str
    object_store_url: str
    partitions: int = DEFAULT_PARTITIONS
    include_hidden: bool = False
    op_column: str | None = None
    wait_ingested: str = "auto"
    ingest_timeout: float = 60.0
    changes: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        table = options.get("table") or options.get("path")
        if not table:
            raise InvalidInput('the piestream data source needs option("table", <name>)')
        if options.get("url"):  # reading the data dir instead would skip the server's checks
            raise FeatureNotSupported(
                "option url (a server) needs the data source that piestream.register_spark(spark) registers"
            )
        data_dir = str(Path(options.get("data_dir") or DEFAULT_DATA_DIR).resolve())
        wait = (options.get("wait_ingested") or "auto").lower()
        if wait not in ("auto", "true", "false"):
            raise InvalidInput(f"wait_ingested must be auto, true or false, not {wait!r}")
        partitions = int(options.get("partitions") or DEFAULT_PARTITIONS)
        if partitions < 1:
            raise InvalidInput("partitions must be at least 1")
        return cls(
            table=table,
            data_dir=data_dir,
            object_store_url=options.get("object_store_url") or str(Path(data_dir) / "objects"),
            partitions=partitions,
            include_hidden=(options.get("include_hidden") or "false").lower() in _TRUE,
            op_column=options.get("op_column") or None,
            wait_ingested=wait,
            ingest_timeout=float(options.get("ingest_timeout") or 60.0),
            changes=(options.get("changes") or "false").lower() in _TRUE,
        )


def _columns(rel: Relation, include_hidden: bool) -> list[tuple[str, DataType]]:
    return [(c.name, c.data_type) for c in rel.columns if include_hidden or not c.hidden]


class PiestreamDataSource(DataSource):
    """``spark.read/write[Stream].format("piestream")``: tables, MVs and indexes of a data dir."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self) -> Options:
        return Options.parse(self.options)

    def _changes(self, opts: Options) -> bool:
        return opts.changes or read_snapshot(opts.data_dir, opts.table, with_version=False).relation.kind is (
            RelationKind.SUBSCRIPTION
        )

    def schema(self) -> StructType:
        opts = self._options()
        if self._changes(opts):
            from piestream.connectors.changefeed import change_schema
            from piestream.connectors.spark.snapshot import read_changefeed

            snap = read_changefeed(opts.data_dir, opts.table, self.options.get("subscription"))
            return spark_schema(change_schema(snap.upstream))
        rel = read_snapshot(opts.data_dir, opts.table, with_version=False).relation
        return spark_schema(_columns(rel, opts.include_hidden))

    def reader(self, schema: StructType) -> DataSourceReader:
        if self._changes(self._options()):
            raise FeatureNotSupported(
                "changes are read with spark.readStream "
                "(a batch read gives the snapshot: drop option changes)"
            )
        return SnapshotReader(self._options(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from piestream.connectors.spark.changefeed_stream import ChangefeedStreamReader

        opts = self._options()
        return ChangefeedStreamReader(
            opts.data_dir,
            opts.object_store_url,
            opts.table,
            {k.lower(): v for k, v in self.options.items()},
            schema,
        )

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(self._options(), WritePlan.build(self._options(), schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(self._options(), WritePlan.build(self._options(), schema, overwrite))


def register(spark: Any) -> None:
    """Make ``format("piestream")`` available in a SparkSession."""
    spark.dataSource.register(PiestreamDataSource)


# -- reads ----------------------------------------------------------------------------------------


def _check_created(opts: Options, snap: MetaSnapshot) -> None:
    """55000 if the snapshot holds a materialized view or index whose backfill is not done at
    its epoch (the server refuses the same read): decided from the job's backfill state tables
    in that very version, as this process cannot ask the server."""
    if not snap.fragments:
        return
    from piestream.meta.ddl_progress import backfill_finished, still_creating
    from piestream.storage.hummock.sstable_store import process_sstable_store
    from piestream.storage.hummock.store import HummockStorage
    from piestream.storage.object_store import open_object_store

    storage = HummockStorage(process_sstable_store(open_object_store(opts.object_store_url)), snap.version)
    if not backfill_finished(storage, snap.version.max_committed_epoch, snap.fragments):
        raise still_creating(snap.relation.kind.value, snap.relation.name)


@dataclass
class VnodePartition(InputPartition):
    """One vnode range of the snapshot: its epoch and the part of the version it needs."""

    index: int
    vnode_lo: int
    vnode_hi: int
    epoch: int
    version_json: str


class SnapshotReader(DataSourceReader):
    """Plans (in a Spark planner process) and reads (in executors) one committed snapshot."""

    def __init__(self, opts: Options, schema: StructType) -> None:
        self.opts = opts
        snap = read_snapshot(opts.data_dir, opts.table)
        _check_created(opts, snap)
        rel = snap.relation
        if rel.table is None:
            raise FeatureNotSupported(
                f'"{rel.name}" is a {rel.kind.value}: only tables, materialized views and indexes are stored'
            )
        names = [c.name for c in rel.table.columns]
        self.output: list[int] = []
        for f in schema.fields:
            if f.name not in names:
                raise UndefinedColumn(f'column "{f.name}" of relation "{rel.name}" does not exist')
            self.output.append(names.index(f.name))
        self.types = [rel.table.columns[i].data_type for i in self.output]
        self.desc_json = json.dumps(rel.table.to_json())
        self.schema_json = schema.json()
        self.epoch = snap.version.max_committed_epoch  # the one epoch every partition reads
        self._version: Any = snap.version  # planning only: dropped before the reader is shipped
        self._partitions: list[VnodePartition] | None = None

    def partitions(self) -> Sequence[InputPartition]:
        if self._partitions is None:
            from piestream.common.vnode import split_vnodes
            from piestream.storage.table.desc import TableDesc

            if self._version is None:  # unpickled before planning: take the snapshot now
                snap = read_snapshot(self.opts.data_dir, self.opts.table)
                _check_created(self.opts, snap)
                self._version, self.epoch = snap.version, snap.version.max_committed_epoch
            desc = TableDesc.from_json(json.loads(self.desc_json))
            n = min(self.opts.partitions, desc.vnode_count)
            parts = []
            for i, bitmap in enumerate(split_vnodes(n, desc.vnode_count)):
                ((lo, hi),) = bitmap.ranges()
                v = table_version(self._version, desc.table_id, lo, hi)
                parts.append(VnodePartition(i, lo, hi, self.epoch, json.dumps(v.to_json())))
            self._partitions = parts
            self._version = None
        return self._partitions

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_version": None}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from piestream.common.vnode import VnodeBitmap
        from piestream.storage.hummock.sstable_store import process_sstable_store
        from piestream.storage.hummock.store import HummockStorage
        from piestream.storage.hummock.version import HummockVersion
        from piestream.storage.object_store import open_object_store
        from piestream.storage.table.desc import TableDesc
        from piestream.storage.table.storage_table import StorageTable

        assert isinstance(partition, VnodePartition)
        desc = TableDesc.from_json(json.loads(self.desc_json))
        version = HummockVersion.from_json(json.loads(partition.version_json))
        sstables = process_sstable_store(open_object_store(self.opts.object_store_url))
        table = StorageTable(desc, HummockStorage(sstables, version), partition.epoch, self.output)
        expected = expected_arrow_schema(StructType.fromJson(json.loads(self.schema_json)))
        bitmap = VnodeBitmap.from_range(partition.vnode_lo, partition.vnode_hi, desc.vnode_count)
        for chunk in table.scan_vnodes(bitmap):
            c = chunk.compact()
            if not c.cardinality:
                continue
            cols = [
                to_spark_arrow(col, t, f.type)
                for col, t, f in zip(c.columns, self.types, expected, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(cols, schema=expected)


# -- writes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WritePlan:
    """What every writer task needs: the target table and how each DataFrame column maps to it
    (checked while planning, so a wrong table or column fails before any task runs)."""

    table: str
    table_id: int
    names: tuple[str, ...]  # target columns, in DataFrame order
    types: tuple[DataType, ...]
    op_column: str | None

    @classmethod
    def build(cls, opts: Options, schema: StructType, overwrite: bool) -> WritePlan:
        if overwrite:
            raise FeatureNotSupported('the piestream data source only appends (mode "append")')
        rel = read_snapshot(opts.data_dir, opts.table, with_version=False).relation
        if rel.kind is not RelationKind.TABLE or rel.table is None:
            raise PiestreamError(f'cannot write to "{rel.name}": it is a {rel.kind.value}', sqlstate="42809")
        if rel.properties.get("connector"):
            raise FeatureNotSupported(f'cannot write to table "{rel.name}" with a connector')
        fields = [f.name for f in schema.fields]
        if len(set(fields)) != len(fields):
            raise InvalidInput("the DataFrame has duplicate column names")
        op = opts.op_column
        if op is not None and op not in fields:
            raise UndefinedColumn(f'op_column "{op}" is not a column of the DataFrame')
        keyed = rel.row_id_index is None and not rel.append_only
        if op is not None and not keyed:
            raise FeatureNotSupported(
                f'op_column needs a table with a primary key: "{rel.name}" cannot match rows to delete'
            )
        names, types = [], []
        for name in fields:
            if name == op:
                continue
            i = rel.column_index(name)
            if i is None or rel.columns[i].hidden:
                raise UndefinedColumn(f'column "{name}" of relation "{rel.name}" does not exist')
            names.append(name)
            types.append(rel.columns[i].data_type)
        if rel.row_id_index is None:
            for i in rel.table.pk:
                if rel.columns[i].name not in names:
                    raise InvalidInput(f'primary key column "{rel.columns[i].name}" is missing')
        return cls(rel.name, rel.id, tuple(names), tuple(types), op)

    def arrow_schema(self) -> pa.Schema:
        fields = [pa.field(n, t.arrow) for n, t in zip(self.names, self.types, strict=True)]
        if self.op_column is not None:
            fields.append(pa.field(OP_FIELD, pa.int8()))
        return pa.schema(fields)

    def convert(self, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
        """A Spark batch in the staged layout: table column types, ops as `Op` codes."""
        cols = [to_table_arrow(batch.column(n), t, n) for n, t in zip(self.names, self.types, strict=True)]
        if self.op_column is not None:
            cols.append(_ops(batch.column(self.op_column), self.op_column))
        return pa.RecordBatch.from_arrays(cols, schema=schema)

    def manifest(self, write_id: str, parts: list[Part]) -> Manifest:
        return Manifest(
            id=write_id,
            table=self.table,
            table_id=self.table_id,
            columns=list(self.names),
            has_ops=self.op_column is not None,
            parts=parts,
        )


def _ops(col: pa.Array, name: str) -> pa.Array:
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise InvalidInput(f'op_column "{name}" must be a string column, not {col.type}')
    keys = pa.array(list(_OPS), pa.string())
    codes = pa.array([int(v) for v in _OPS.values()], pa.int8())
    idx = pc.index_in(pc.utf8_lower(pc.utf8_trim_whitespace(col.cast(pa.string()))), value_set=keys)
    if idx.null_count:
        bad = col.filter(idx.is_null())[0].as_py()
        raise InvalidInput(f'op_column "{name}": {bad!r} is not one of + - insert delete U+ U-')
    return codes.take(idx)


@dataclass
class PartMessage(WriterCommitMessage):
    """A task's staged file (None when its partition was empty) under the write's id."""

    write_id: str
    part: Part | None


def _stage(opts: Options, plan: WritePlan, write_id: str, batches: Iterator[pa.RecordBatch]) -> PartMessage:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    stem = f"part-{ctx.partitionId()}-{ctx.attemptNumber()}" if ctx is not None else "part"
    schema = plan.arrow_schema()
    part = stage_part(opts.data_dir, write_id, stem, schema, (plan.convert(b, schema) for b in batches))
    return PartMessage(write_id, part)


def _publish(opts: Options, plan: WritePlan, write_id: str, messages: Sequence[Any]) -> None:
    parts = [m.part for m in messages if isinstance(m, PartMessage) and m.part is not None]
    if not parts:
        return
    if not publish(opts.data_dir, plan.manifest(write_id, parts)):
        log.info("piestream write %s was already published (a replayed batch)", write_id)
    wait = opts.wait_ingested == "true" or (opts.wait_ingested == "auto" and server_alive(opts.data_dir))
    if wait and not wait_consumed(opts.data_dir, write_id, opts.ingest_timeout):
        log.warning(
            "piestream write %s into %s not ingested within %.0f s; it stays queued for the next epoch",
            write_id,
            plan.table,
            opts.ingest_timeout,
        )


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: one write id for the whole job; the manifest lists every task's part."""

    def __init__(self, opts: Options, plan: WritePlan) -> None:
        self.opts = opts
        self.plan = plan
        self.write_id = f"batch-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PartMessage:
        return _stage(self.opts, self.plan, self.write_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _publish(self.opts, self.plan, self.write_id, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # no manifest of this id exists: everything staged under it goes (failed tasks too)
        discard_staging(self.opts.data_dir, self.write_id)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: one write id per (query id, batch id), the same when Spark replays
    a batch after a restart, so the inbox ingests each batch once."""

    def __init__(self, opts: Options, plan: WritePlan) -> None:
        self.opts = opts
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PartMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if not query_id or batch_id is None:
            raise PiestreamError("streaming write outside a streaming query (no query id / batch id)")
        return _stage(self.opts, self.plan, f"stream-{query_id}-{batch_id}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ids = {m.write_id for m in messages if isinstance(m, PartMessage)}
        if not ids:
            return
        if len(ids) != 1 or not next(iter(ids)).endswith(f"-{batchId}"):
            raise PiestreamError(f"micro-batch {batchId}: tasks wrote under different ids {sorted(ids)}")
        _publish(self.opts, self.plan, ids.pop(), messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # only this attempt's files: a manifest of the same id may already list earlier ones
        for m in messages:
            if isinstance(m, PartMessage) and m.part is not None:
                discard_staging(self.opts.data_dir, m.write_id, [m.part.path])
