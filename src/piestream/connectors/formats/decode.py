"""Decoders shared by every connector: a batch of message payloads -> Arrow columns (ENCODE JSON,
CSV, BYTES, AVRO), one decode call per batch.

The fast path hands the whole batch to one reader call (pyarrow's JSON or CSV reader over the
concatenated payloads, fastavro over the Avro bodies); whenever that call cannot give exactly
the answer the per-record rules give (a value needing PostgreSQL's text input, a malformed
record, a payload spanning lines), the batch falls back to the row path, which applies the
rules record by record and says which records were bad. So the result never depends on the path
taken, and the common case (well-formed records of plain types) never builds a dict per row.

A field whose value does not convert is, under ``lenient`` decoding (RisingWave's rule for
message sources), NULL in its row and reported; otherwise (files' ``error.handling``) the whole
record is bad. A record that does not parse at all is always bad (skipped and reported).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson

from piestream.common.scalar import Datum, check_int, normalize_numeric, to_arrow
from piestream.common.text import parse_datum
from piestream.common.types import DataType, TypeKind

Columns = tuple[tuple[str, DataType], ...]
#: a batch of message payloads: a list, or a binary Arrow array (a transport's columns)
Payloads: TypeAlias = Sequence[bytes | None] | pa.BinaryArray


def payload(payloads: Payloads, i: int) -> bytes | None:
    """Payload `i` as bytes (for reports and the row path)."""
    v = payloads[i]
    return v.as_py() if isinstance(v, pa.Scalar) else v


def payload_list(payloads: Payloads) -> Sequence[bytes | None]:
    """The payloads as a list of bytes: the row path's input (it works per record anyway)."""
    return payloads.to_pylist() if isinstance(payloads, pa.Array) else payloads


def binary_array(payloads: Payloads) -> pa.BinaryArray:
    """The payloads as one binary Arrow array (a list is converted in one call)."""
    if isinstance(payloads, pa.Array):
        return payloads if payloads.type == pa.binary() else payloads.cast(pa.binary())
    return pa.array(payloads, pa.binary())


def joined_lines(payloads: pa.BinaryArray) -> bytes | None:
    """The payloads, each followed by a newline, in one buffer built by one Arrow kernel
    (`binary_join` over the whole array as one list: no Python per payload); None when a
    payload holds a newline itself (not one record per line)."""
    n = len(payloads)
    offs = np.frombuffer(payloads.buffers()[1], np.int32)[payloads.offset : payloads.offset + n + 1]
    data = payloads.buffers()[2]
    lo, hi = int(offs[0]), int(offs[-1])
    if data is not None and hi > lo and np.count_nonzero(np.frombuffer(data, np.uint8)[lo:hi] == 10):
        return None
    if not n:
        return b""
    # an empty last payload makes binary_join end the buffer with the final newline: one copy
    ended = pa.concat_arrays([payloads.fill_null(b""), pa.array([b""], payloads.type)])
    one = pa.ListArray.from_arrays(pa.array([0, n + 1], pa.int32()), ended)
    return pc.binary_join(one, b"\n")[0].as_buffer().to_pybytes()


class BadValue(Exception):
    """A value (or a record) that does not convert to its column's type."""


@dataclass
class Decoded:
    """The rows a batch of records decoded to: `table` (the requested columns) holds one row per
    record index in `rows` (ascending); `errors` are (record index, message), the record
    skipped unless its index is also in `rows` (a field nulled under lenient decoding)."""

    table: pa.Table
    rows: np.ndarray  # int64 record indices, one per table row
    errors: list[tuple[int, str]] = field(default_factory=list)


def message(e: BaseException) -> str:
    return getattr(e, "message", None) or str(e) or type(e).__name__


def empty_table(columns: Columns) -> pa.Table:
    return pa.Table.from_arrays([pa.array([], t.arrow) for _, t in columns], names=[c for c, _ in columns])


def rows_table(rows: Sequence[Sequence[Datum]], columns: Columns) -> pa.Table:
    cols = [to_arrow([r[i] for r in rows], t) for i, (_, t) in enumerate(columns)]
    return pa.Table.from_arrays(cols, names=[c for c, _ in columns])


# -- value conversion (the row path's rules) -------------------------------------------------------


def from_json(v: Any, t: DataType) -> Datum:
    """A JSON value as a datum of `t` (strings use PostgreSQL's text input for the type)."""
    if v is None:
        return None
    k = t.kind
    if k is TypeKind.JSONB:
        return parse_datum(json.dumps(v), t)
    if k is TypeKind.VARCHAR:
        if isinstance(v, str):
            return v
        return json.dumps(v)
    if isinstance(v, str):
        return parse_datum(v, t)
    if isinstance(v, bool):
        if k is TypeKind.BOOLEAN:
            return v
        raise BadValue(f"expected {t}, got a boolean")
    if isinstance(v, int | float):
        if k in (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT):
            if isinstance(v, float) and not v.is_integer():
                raise BadValue(f"invalid input syntax for type {t}: {v!r}")
            return check_int(int(v), t)
        if k is TypeKind.NUMERIC:
            return normalize_numeric(v)
        if k in (TypeKind.REAL, TypeKind.DOUBLE):
            return float(v)
        raise BadValue(f"expected {t}, got a number")
    if isinstance(v, dict) and k is TypeKind.STRUCT:
        return {f.name: from_json(v.get(f.name), f.data_type) for f in t.fields}
    if isinstance(v, list) and k is TypeKind.LIST:
        assert t.elem is not None
        return [from_json(e, t.elem) for e in v]
    raise BadValue(f"expected {t}, got {type(v).__name__}")


def from_text(s: str, t: DataType) -> Datum:
    """A CSV field as a datum of `t`: '' is NULL except for text."""
    if t.kind is TypeKind.VARCHAR:
        return s
    if s == "":
        return None
    return parse_datum(s, t)


def object_row(obj: Any, columns: Columns, lenient: bool, errors: list[str]) -> list[Datum]:
    """A JSON object's values for `columns` (names matched exactly, then case-insensitively).
    A field that does not convert raises `BadValue`, or under `lenient` is NULL and noted."""
    if not isinstance(obj, dict):
        raise BadValue(f"expected a JSON object, got {type(obj).__name__}")
    lower = None
    out: list[Datum] = []
    for c, t in columns:
        if c in obj:
            v = obj[c]
        else:
            if lower is None:
                lower = {k.lower(): val for k, val in obj.items()}
            v = lower.get(c.lower())
        try:
            out.append(from_json(v, t))
        except Exception as e:
            if not lenient:
                raise BadValue(f'column "{c}": {message(e)}') from None
            errors.append(f'column "{c}": {message(e)}')
            out.append(None)
    return out


def decode_rows(n: int, row: Callable[[int, list[str]], list[Datum] | None], columns: Columns) -> Decoded:
    """The row path: `row(i, notes)` gives record i's values (None: nothing to emit) or raises
    for a bad record; `notes` collects nulled fields' messages. Per record by design: it runs
    only for batches the fast path could not decode exactly, and must say which record failed."""
    rows: list[list[Datum]] = []
    kept: list[int] = []
    errors: list[tuple[int, str]] = []
    for i in range(n):
        notes: list[str] = []
        try:
            r = row(i, notes)
        except Exception as e:  # any problem is this record's, reported
            errors.append((i, message(e)))
            continue
        errors += [(i, m) for m in notes]
        if r is not None:
            rows.append(r)
            kept.append(i)
    return Decoded(rows_table(rows, columns), np.array(kept, np.int64), errors)


def decode_batch(
    payloads: Payloads,
    fast: Callable[[pa.BinaryArray], pa.Table | None],
    row: Callable[[bytes | None, list[str]], list[Datum] | None],
    columns: Columns,
) -> Decoded:
    """`fast` over the whole batch when every payload is present and it can decode them
    exactly, else the row path with `row(payload, notes)` per record."""
    n = len(payloads)
    arr = binary_array(payloads)
    if n and not arr.null_count:
        table = fast(arr)
        if table is not None:
            return Decoded(table, np.arange(n, dtype=np.int64))
    rows = payload_list(payloads)
    return decode_rows(n, lambda i, notes: row(rows[i], notes), columns)


# -- JSON ------------------------------------------------------------------------------------------

#: types pyarrow's JSON reader converts exactly as `from_json` does
ARROW_JSON_KINDS = frozenset(
    {
        TypeKind.BOOLEAN,
        TypeKind.SMALLINT,
        TypeKind.INT,
        TypeKind.BIGINT,
        TypeKind.REAL,
        TypeKind.DOUBLE,
        TypeKind.VARCHAR,
    }
)
#: read as strings, then cast by Arrow (ISO 8601 without a zone); anything else: the row path
_CAST_FROM_STRING = frozenset({TypeKind.TIMESTAMP, TypeKind.DATE})


def fast_json_type(t: DataType) -> pa.DataType | None:
    """The Arrow type to read a JSON field of `t` as on the fast path (None: not exact there)."""
    if t.kind in ARROW_JSON_KINDS:
        return t.arrow
    if t.kind in _CAST_FROM_STRING:
        return pa.string()
    if t.kind is TypeKind.STRUCT and all(f.data_type.kind in ARROW_JSON_KINDS for f in t.fields):
        return t.arrow
    return None


def read_json_blob(payloads: Payloads, schema: pa.Schema, unexpected: str = "infer") -> pa.Table | None:
    """pyarrow's JSON reader over the newline-joined payloads with an explicit schema (fields it
    does not name are kept as inferred, for case-insensitive matching); None when the batch is
    not one JSON object per payload of those types (the caller takes the row path)."""
    if not len(payloads):
        return None
    blob = joined_lines(binary_array(payloads))
    if blob is None:
        return None  # a payload spanning lines (blank payloads show as a short table below)
    try:
        t = pjson.read_json(
            io.BytesIO(blob),
            read_options=pjson.ReadOptions(use_threads=False, block_size=max(1 << 20, len(blob) + 1)),
            parse_options=pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return t if t.num_rows == len(payloads) else None


def fast_columns(t: pa.Table, columns: Columns) -> list[pa.Array] | None:
    """The requested columns out of a table the JSON reader made; None when the row path must
    decide (a field named like a column but in another case, a value Arrow cannot cast)."""
    wanted = {c for c, _ in columns}
    lower = {c.lower() for c in wanted}
    if any(n not in wanted and n.lower() in lower for n in t.column_names):
        return None  # matched case-insensitively per record by the row path
    out = []
    for c, dt in columns:
        col = t.column(c).combine_chunks()
        if col.type == dt.arrow:
            out.append(col)
        elif pa.types.is_string(col.type) and dt.kind in _CAST_FROM_STRING:
            try:
                out.append(pc.cast(col, dt.arrow))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None  # not ISO 8601 without a zone: PostgreSQL's input rules decide
        else:
            return None
    return out


@dataclass(frozen=True)
class JsonDecoder:
    """ENCODE JSON: each payload one JSON object, fields matched to columns by name."""

    columns: Columns
    lenient: bool = False

    def decode(self, payloads: Payloads) -> Decoded:
        return decode_batch(payloads, self._fast, self.row, self.columns)

    def _fast(self, payloads: pa.BinaryArray) -> pa.Table | None:
        types = [fast_json_type(t) for _, t in self.columns]
        if any(t is None for t in types):
            return None
        schema = pa.schema([(c, t) for (c, _), t in zip(self.columns, types, strict=True)])
        t = read_json_blob(payloads, schema)
        if t is None:
            return None
        cols = fast_columns(t, self.columns)
        if cols is None:
            return None
        return pa.Table.from_arrays(cols, names=[c for c, _ in self.columns])

    def row(self, payload: bytes | None, notes: list[str]) -> list[Datum]:
        if payload is None:
            raise BadValue("the message has no payload")
        return object_row(json.loads(payload), self.columns, self.lenient, notes)


# -- CSV -------------------------------------------------------------------------------------------

_ARROW_CSV_KINDS = frozenset(
    {TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT, TypeKind.REAL, TypeKind.DOUBLE, TypeKind.VARCHAR}
)


@dataclass(frozen=True)
class CsvDecoder:
    """ENCODE CSV: each payload one CSV line; `header` (the file's first line) maps fields to
    columns by name, else by position."""

    columns: Columns
    delimiter: str = ","
    header: tuple[str, ...] | None = None
    lenient: bool = False

    def _index(self) -> tuple[list[int | None], int]:
        if self.header is not None:
            pos = {h.strip().lower(): i for i, h in enumerate(self.header)}
            return [pos.get(c.lower()) for c, _ in self.columns], len(self.header)
        return list(range(len(self.columns))), len(self.columns)

    def decode(self, payloads: Payloads) -> Decoded:
        idx, width = self._index()
        return decode_batch(
            payloads, self._fast, lambda p, notes: self.row(p, idx, width, notes), self.columns
        )

    def _fast(self, payloads: pa.BinaryArray) -> pa.Table | None:
        if any(t.kind not in _ARROW_CSV_KINDS for _, t in self.columns):
            return None
        blob = joined_lines(payloads)
        if blob is None or b'"' in blob or pc.any(pc.match_substring_regex(payloads, r"^\s*$")).as_py():
            return None  # quoting and blank lines: the row path's csv module decides
        idx, width = self._index()
        names = [f"f{i}" for i in range(width)]
        types = {f"f{i}": pa.string() for i in range(width)}
        for (_, t), i in zip(self.columns, idx, strict=True):
            if i is not None:
                types[f"f{i}"] = t.arrow
        try:
            t = pcsv.read_csv(
                io.BytesIO(blob),
                read_options=pcsv.ReadOptions(column_names=names, use_threads=False),
                parse_options=pcsv.ParseOptions(delimiter=self.delimiter, quote_char=False),
                convert_options=pcsv.ConvertOptions(
                    column_types=types, null_values=[""], strings_can_be_null=False
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if t.num_rows != len(payloads):
            return None
        cols = [
            pa.nulls(t.num_rows, ct.arrow) if i is None else t.column(i).combine_chunks()
            for (_, ct), i in zip(self.columns, idx, strict=True)
        ]
        return pa.Table.from_arrays(cols, names=[c for c, _ in self.columns])

    def row(self, payload: bytes | None, idx: list[int | None], width: int, notes: list[str]) -> list[Datum]:
        if payload is None:
            raise BadValue("the message has no payload")
        text = payload.decode("utf-8", errors="replace").rstrip("\r\n")
        fields = next(csv.reader([text], delimiter=self.delimiter))
        if len(fields) != width:
            raise BadValue(f"expected {width} fields, got {len(fields)}")
        out: list[Datum] = []
        for (c, t), i in zip(self.columns, idx, strict=True):
            try:
                out.append(None if i is None else from_text(fields[i], t))
            except Exception as e:
                if not self.lenient:
                    raise BadValue(f'column "{c}": {message(e)}') from None
                notes.append(f'column "{c}": {message(e)}')
                out.append(None)
        return out


# -- BYTES -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BytesDecoder:
    """ENCODE BYTES: the payload as the one BYTEA column."""

    columns: Columns
    lenient: bool = False

    def decode(self, payloads: Payloads) -> Decoded:
        (name, t), *_ = self.columns
        arr = binary_array(payloads).cast(t.arrow)
        return Decoded(pa.Table.from_arrays([arr], names=[name]), np.arange(len(payloads), dtype=np.int64))


# -- AVRO ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AvroDecoder:
    """ENCODE AVRO: each payload one Avro datum, either bare (a schema file's writer schema) or
    in Confluent's wire format (magic byte 0, a 4-byte big-endian schema id, the body), its
    writer schema found by id through `schema_of`. fastavro decodes the bodies; records become
    rows through the JSON rules (Avro's logical types arrive as Python dates and decimals)."""

    columns: Columns
    schema_of: Callable[[int | None], Any]  # schema id (None: the bare schema) -> parsed schema
    confluent: bool = False
    lenient: bool = False

    def decode(self, payloads: Payloads) -> Decoded:
        import fastavro

        payloads = payload_list(payloads)
        readers: dict[int | None, Any] = {}

        def row(i: int, notes: list[str]) -> list[Datum]:
            # Per record: fastavro reads one datum per call (its C reader); the rows then go to
            # Arrow a column at a time.
            p = payloads[i]
            if p is None:
                raise BadValue("the message has no payload")
            sid: int | None = None
            body = p
            if self.confluent:
                if len(p) < 5 or p[0] != 0:
                    raise BadValue("not in the Confluent wire format (magic byte 0 + schema id)")
                sid = int.from_bytes(p[1:5], "big")
                body = p[5:]
            if sid not in readers:
                readers[sid] = self.schema_of(sid)
            rec = fastavro.schemaless_reader(io.BytesIO(body), readers[sid], None)
            return object_row(_avro_plain(rec), self.columns, self.lenient, notes)

        return decode_rows(len(payloads), row, self.columns)


def _avro_plain(v: Any) -> Any:
    """Avro values as JSON-like values the conversion rules take (dates/times as ISO text)."""
    import datetime as dt
    import decimal
    import uuid

    if isinstance(v, dict):
        return {k: _avro_plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_avro_plain(x) for x in v]
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal | uuid.UUID):
        return str(v)
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    return v


Decoder = JsonDecoder | CsvDecoder | BytesDecoder | AvroDecoder
