"""The ``piestream`` Spark data source with a server: ``option("url", "postgresql://alice@host:4566/dev")``.

Without ``url`` the data source reads and writes the data directory itself
(`piestream.connectors.spark.data_source`): whoever can open those files owns the database, so
nothing is checked. With ``url`` (and ``user`` / ``password`` options, or the URL's), every read
and write goes through the server as that role, over pgwire, and the server checks it with the
same code as psql's statements:

- a read is one ``COPY (SELECT cols FROM t) TO STDOUT (FORMAT binary)``: SELECT on ``t``
  (42501 ``permission denied for table t`` otherwise). The schema comes from ``SELECT * FROM t
  LIMIT 0``, so planning a read of a relation the role may not read fails already. One input
  partition reads it all, at the one epoch the statement sees (consistent, as the data-dir read).
- a batch write is one binary ``COPY t (cols) FROM STDIN`` per Spark task: INSERT on ``t``.
  Each task's rows commit when the task ends (a retried task writes its rows again, so a table
  with a primary key makes retries harmless).

Streaming reads and writes and ``op_column`` need the data directory (0A000 with ``url``).
The password travels with the read / write to the executors (as every Spark option does).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from piestream.common.errors import FeatureNotSupported, InvalidInput
from piestream.common.types import DataType
from piestream.connectors.spark import data_source as local
from piestream.connectors.spark.spark_types import (
    expected_arrow_schema,
    spark_schema,
    to_spark_arrow,
    to_table_arrow,
)
from piestream.server.pgwire import codec, copy_binary
from piestream.server.remote import ServerAddress, copy_in, quote_ident, relation_types

log = logging.getLogger(__name__)

#: rows per Arrow batch handed to Spark
BATCH_ROWS = 1 << 16


def server_address(options: dict[str, str]) -> ServerAddress | None:
    """The server the options name (None: the data directory is used)."""
    url = options.get("url")
    if not url:
        return None
    return ServerAddress.parse(url, options.get("user") or None, options.get("password") or None)


class PiestreamDataSource(local.PiestreamDataSource):
    """``format("piestream")``: the data directory's, or a server's with option ``url``."""

    def _address(self) -> ServerAddress | None:
        return server_address({k.lower(): v for k, v in self.options.items()})

    def _table(self) -> str:
        table = self.options.get("table") or self.options.get("path")
        if not table:
            raise InvalidInput('the piestream data source needs option("table", <name>)')
        return table

    def schema(self) -> StructType:
        address = self._address()
        if address is None:
            return super().schema()
        client = address.login("piestream spark")
        try:
            (r,) = client.query(f"SELECT * FROM {self._table()} LIMIT 0")  # checked: SELECT on it
        finally:
            client.close()
        return spark_schema([(name, _type(name, oid)) for name, oid in r.columns])

    def reader(self, schema: StructType) -> DataSourceReader:
        address = self._address()
        if address is None:
            return super().reader(schema)
        return ServerReader(address, self._table(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._address() is not None:
            raise FeatureNotSupported("streaming reads through a server (option url) are not supported")
        return super().streamReader(schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        address = self._address()
        if address is None:
            return super().writer(schema, overwrite)
        if overwrite:
            raise FeatureNotSupported('the piestream data source only appends (mode "append")')
        if self.options.get("op_column"):
            raise FeatureNotSupported("op_column needs the data directory (not option url)")
        names = [f.name for f in schema.fields]
        client = address.login("piestream spark")
        try:
            types = relation_types(client, self._table(), names)
        finally:
            client.close()
        return ServerWriter(address, self._table(), tuple(names), tuple(types))

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        if self._address() is not None:
            raise FeatureNotSupported("streaming writes through a server (option url) are not supported")
        return super().streamWriter(schema, overwrite)


def _type(name: str, oid: int) -> DataType:
    t = codec.type_for_oid(oid)
    if t is None:
        raise FeatureNotSupported(f'column "{name}" has a type the Spark data source cannot read (oid {oid})')
    return t


def register(spark: Any) -> None:
    """Make ``format("piestream")`` available in a SparkSession (with the server mode)."""
    spark.dataSource.register(PiestreamDataSource)


@dataclass
class WholeRelation(InputPartition):
    """The only partition of a read through a server: one statement, one epoch."""

    index: int = 0


class ServerReader(DataSourceReader):
    """Plans (the column types, from the server: SELECT is checked here already) and reads
    (one COPY in the executor) a relation through a server."""

    def __init__(self, address: ServerAddress, table: str, schema: StructType) -> None:
        self.address = address
        self.table = table
        self.schema_json = schema.json()
        names = [f.name for f in schema.fields]
        self.select = f"SELECT {', '.join(quote_ident(n) for n in names)} FROM {table}"
        client = address.login("piestream spark")
        try:
            (r,) = client.query(f"{self.select} LIMIT 0")
        finally:
            client.close()
        self.types = [_type(name, oid) for name, oid in r.columns]

    def partitions(self) -> Sequence[InputPartition]:
        return [WholeRelation()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        expected = expected_arrow_schema(StructType.fromJson(json.loads(self.schema_json)))
        client = self.address.login("piestream spark")
        try:
            (r,) = client.query(f"COPY ({self.select}) TO STDOUT WITH (FORMAT binary)")
        finally:
            client.close()
        columns = copy_binary.decode(b"".join(r.copy_data), self.types)
        n = len(columns[0]) if columns else 0
        for lo in range(0, n, BATCH_ROWS):
            cols = [
                to_spark_arrow(c.slice(lo, BATCH_ROWS), t, f.type)
                for c, t, f in zip(columns, self.types, expected, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(cols, schema=expected)


@dataclass
class CopyMessage(WriterCommitMessage):
    """A task's COPY: how many rows the server took."""

    rows: int


class ServerWriter(DataSourceArrowWriter):
    """``df.write`` through a server: each task COPYs its rows in as the role."""

    def __init__(
        self, address: ServerAddress, table: str, names: tuple[str, ...], types: tuple[DataType, ...]
    ) -> None:
        self.address = address
        self.table = table
        self.names = names
        self.types = types

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CopyMessage:
        batches = [
            pa.RecordBatch.from_arrays(
                [to_table_arrow(b.column(n), t, n) for n, t in zip(self.names, self.types, strict=True)],
                names=list(self.names),
            )
            for b in iterator
        ]
        if not batches or not sum(b.num_rows for b in batches):
            return CopyMessage(0)
        client = self.address.login("piestream spark")
        try:
            return CopyMessage(copy_in(client, self.table, pa.Table.from_batches(batches), self.types))
        finally:
            client.close()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every task's COPY committed when it returned

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(m.rows for m in messages if isinstance(m, CopyMessage))
        if done:  # committed by their tasks: a server COPY cannot be taken back
            log.warning("piestream write into %s failed after %d rows of it were committed", self.table, done)
