"""Turning a transport's raw messages into a `ReadResult`, for every message connector (Kafka,
CDC): the FORMAT ... ENCODE of the spec picks an envelope and a decoder
(`piestream.connectors.formats`), INCLUDE columns come from the messages' metadata, malformed
messages become `BadRecord`s naming their split and position (RisingWave's
``into_chunk_stream``: transports know no formats).

Connectors call `source_parser(spec, lenient=...)` once (when the reader is built) and
`RawMessages.parse(parser, split)` per read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op
from piestream.common.types import DataType
from piestream.connectors.formats.decode import (
    AvroDecoder,
    BytesDecoder,
    Columns,
    CsvDecoder,
    Decoder,
    JsonDecoder,
    Payloads,
)
from piestream.connectors.formats.decode import (
    payload as payload_at,
)
from piestream.connectors.formats.envelope import envelope
from piestream.connectors.options import InvalidOption
from piestream.plan.source import SourceSpec
from piestream.stream.connector import BadRecord, ReadResult

#: INCLUDE kinds a message connector can fill, and the column type each has (RisingWave's)
INCLUDE_KINDS = ("key", "partition", "offset", "timestamp", "header")


def payload_columns(spec: SourceSpec) -> Columns:
    """The spec's columns the payload decodes to (all but the INCLUDE columns)."""
    included = {col for _, col, _ in spec.include}
    return tuple((c, t) for c, t in spec.columns if c not in included)


def make_decoder(
    spec: SourceSpec,
    columns: Columns,
    *,
    lenient: bool,
    avro_schema: Callable[[int | None], Any] | None = None,
    confluent: bool = False,
) -> Decoder:
    """The decoder of `spec`'s ENCODE for `columns` (options were validated by the connector)."""
    encode = (spec.encode or "json").lower()
    eo = {k.lower(): v for k, v in spec.encode_options.items()}
    if encode == "json":
        return JsonDecoder(columns, lenient)
    if encode == "csv":
        delimiter = eo.get("delimiter", ",")
        if len(delimiter) != 1:
            raise InvalidOption("the CSV delimiter must be one character")
        return CsvDecoder(columns, delimiter, None, lenient)
    if encode == "bytes":
        if len(columns) != 1 or columns[0][1].kind.name != "BYTEA":
            raise InvalidOption("ENCODE BYTES needs exactly one payload column, of type bytea")
        return BytesDecoder(columns, lenient)
    if encode == "avro":
        if avro_schema is None:
            raise InvalidOption("ENCODE AVRO needs schema.location or schema.registry")
        return AvroDecoder(columns, avro_schema, confluent, lenient)
    raise InvalidOption(f"ENCODE {encode.upper()} is not supported")


@dataclass(frozen=True)
class SourceParser:
    """A spec's envelope over its decoder, and where its INCLUDE columns go."""

    spec: SourceSpec
    envelope: Any  # PlainEnvelope | UpsertEnvelope | DebeziumEnvelope
    payload: Columns

    @property
    def append_only(self) -> bool:
        return self.spec.append_only


def source_parser(spec: SourceSpec, decoder: Decoder | None = None, *, lenient: bool) -> SourceParser:
    cols = payload_columns(spec)
    dec = decoder if decoder is not None else make_decoder(spec, cols, lenient=lenient)
    fmt = (spec.format or "plain").lower()
    return SourceParser(spec, envelope(fmt, dec, cols, lenient), cols)


@dataclass
class RawMessages:
    """One split's messages of one read, in order: payloads, keys and positions, plus what
    INCLUDE may ask for (`meta`: "partition", "offset", "timestamp", "key" as Arrow arrays of
    one value per message; `headers`: a header name's values)."""

    values: Payloads  # a list, or a binary Arrow array (what a fast transport hands over)
    keys: Payloads
    positions: Sequence[int] | np.ndarray  # e.g. Kafka offsets, for bad-record reports
    meta: Mapping[str, pa.Array] = field(default_factory=dict)
    headers: Mapping[str, pa.Array] = field(default_factory=dict)

    def parse(
        self, parser: SourceParser, split: str, *, container: str = "split", unit: str = "offset"
    ) -> tuple[pa.RecordBatch | None, np.ndarray | None, list[BadRecord]]:
        """The rows (columns of `parser.spec.columns`), their ops (None: inserts) and the bad
        records of these messages."""
        if not len(self.values):
            return None, None, []
        p = parser.envelope.parse(self.keys, self.values)
        bad = [
            BadRecord(
                split,
                int(self.positions[i]),
                _raw(payload_at(self.values, i)),
                m,
                container=container,
                unit=unit,
            )
            for i, m in p.errors
        ]
        if not p.table.num_rows:
            return None, None, bad
        take = pa.array(p.rows)
        payload = {c: p.table.column(c) for c, _ in parser.payload}
        include = {col: (kind, name) for kind, col, name in parser.spec.include}
        cols: list[pa.Array | pa.ChunkedArray] = []
        for c, t in parser.spec.columns:
            if c in payload:
                cols.append(payload[c])
                continue
            kind, name = include[c]
            src = self.headers.get(name) if kind == "header" else self.meta.get(kind)
            cols.append(pa.nulls(len(take), t.arrow) if src is None else _cast(src.take(take), t))
        batch = pa.RecordBatch.from_arrays(
            [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols],
            names=[c for c, _ in parser.spec.columns],
        )
        return batch, p.ops, bad


def _cast(a: pa.Array, t: DataType) -> pa.Array:
    return a if a.type == t.arrow else a.cast(t.arrow)


def _raw(v: bytes | None) -> str:
    return "" if v is None else v[:1000].decode("utf-8", errors="replace")


def read_result(
    parsed: Sequence[tuple[pa.RecordBatch | None, np.ndarray | None, list[BadRecord]]],
    offset: str,
    consumed: int,
) -> ReadResult:
    """A ReadResult from parsed message batches (ops kept only when some batch has them)."""
    batches = [b for b, _, _ in parsed if b is not None]
    with_ops = any(o is not None for b, o, _ in parsed if b is not None)
    ops = (
        [
            o if o is not None else np.full(b.num_rows, Op.INSERT, np.int8)
            for b, o, _ in parsed
            if b is not None
        ]
        if with_ops
        else None
    )
    bad = [r for _, _, rs in parsed for r in rs]
    return ReadResult(batches, offset, consumed, bad, ops)
