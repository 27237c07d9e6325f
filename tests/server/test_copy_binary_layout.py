"""The binary COPY decoder's vectorized tuple finding (`_row_layout`) against the tuple-by-tuple
walk, on streams built to confuse it: NULLs, strings that hold the field count and whole
encoded tuples, a NULL last field before an optional trailer, and malformed data."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from piestream.common.interval import Interval
from piestream.common.scalar import to_arrow
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    JSONB,
    NUMERIC,
    REAL,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
)
from piestream.server.pgwire import codec
from piestream.server.pgwire import copy_binary as cb


def _stream(rows: list[tuple[bytes | None, ...]], *, trailer: bool = True) -> bytes:
    """A binary COPY stream of already-encoded field values (None: NULL)."""
    out = [cb.HEADER]
    for row in rows:
        out.append(struct.pack(">h", len(row)))
        out.extend(b"\xff\xff\xff\xff" if v is None else struct.pack(">i", len(v)) + v for v in row)
    if trailer:
        out.append(cb.TRAILER)
    return b"".join(out)


def _both(data: bytes, types: list[DataType]) -> tuple[cb.Layout | None, cb.Layout]:
    arr = np.frombuffer(data, np.uint8)
    end = len(data) - 2 if data.endswith(cb.TRAILER) else len(data)
    widths = [cb._FIELD_WIDTH.get(t.kind) for t in types]
    walk_end = end
    found = cb._row_layout(arr, len(cb.HEADER), end, widths)
    if found is None and end != len(data):  # the walk's reading: no trailer after all
        walk_end = len(data)
    return found, cb._walk_layout(memoryview(data), len(cb.HEADER), walk_end, len(types))


def _same(a: cb.Layout, b: cb.Layout) -> None:
    for x, y in zip(a[0] + a[1], b[0] + b[1], strict=True):
        assert np.array_equal(x, y)


def test_strings_holding_the_field_count_and_whole_tuples() -> None:
    """Strings whose bytes parse as tuples (even as a chain of them) are found as data."""
    inner = _stream([(b"\x00\x00\x00\x07", b"\x00\x02")] * 3, trailer=False)[len(cb.HEADER) :]
    rows: list[tuple[bytes | None, ...]] = []
    for i in range(300):
        text = [b"", b"\x00\x02", inner, inner * 4, None, b"\x00\x02\x00\x00\x00\x04"][i % 6]
        rows.append((struct.pack(">i", i), text))
    data = _stream(rows)
    found, walked = _both(data, [INT, VARCHAR])
    assert found is not None
    _same(found, walked)
    assert len(found[0][0]) == 300


def test_a_long_chain_of_tuples_inside_a_string_falls_back_to_the_walk() -> None:
    inner = _stream([(b"\x00\x00\x00\x07", b"\x00\x02")] * 40, trailer=False)[len(cb.HEADER) :]
    data = _stream([(struct.pack(">i", 1), inner), (struct.pack(">i", 2), b"z")])
    found, _ = _both(data, [INT, VARCHAR])
    assert found is None
    cols = cb.decode(data, [INT, BYTEA])
    assert cols[0].to_pylist() == [1, 2] and cols[1].to_pylist() == [inner, b"z"]


def test_null_last_field_with_and_without_trailer() -> None:
    rows = [(struct.pack(">q", i), None if i % 2 else b"x" * i) for i in range(50)]
    for trailer in (True, False):
        data = _stream(rows, trailer=trailer)
        cols = cb.decode(data, [BIGINT, BYTEA])
        assert cols[0].to_pylist() == list(range(50))
        assert cols[1].to_pylist() == [None if i % 2 else b"x" * i for i in range(50)]


def test_decode_matches_the_values_with_nulls_in_every_column() -> None:
    rng = np.random.default_rng(3)
    n = 5000
    table = pa.table(
        {
            "a": pa.array(rng.integers(-(2**15), 2**15, n).astype(np.int16), mask=rng.random(n) < 0.1),
            "b": pa.array(rng.integers(0, 2**31, n).astype(np.int32), mask=rng.random(n) < 0.1),
            "c": pa.array(rng.random(n), mask=rng.random(n) < 0.1),
            "d": pa.array([("é" * (i % 7)) if i % 5 else None for i in range(n)]),
        }
    )
    types = [SMALLINT, INT, DOUBLE, VARCHAR]
    messages = cb.encode_messages(table, types)
    data, pos = bytearray(), 0
    while pos < len(messages):  # strip the CopyData frames
        length = int.from_bytes(messages[pos + 1 : pos + 5], "big")
        data += messages[pos + 5 : pos + 1 + length]
        pos += 1 + length
    found, walked = _both(bytes(data), types)
    assert found is not None
    _same(found, walked)
    for got, want in zip(cb.decode(bytes(data), types), table.columns, strict=True):
        assert got.equals(want.combine_chunks())


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (struct.pack(">h", 3), "row field count is 3, expected 2"),
        (struct.pack(">hi", 2, 9) + b"\x00" * 3, "unexpected EOF"),
        (struct.pack(">hi", 2, -5), "invalid field size -5"),
    ],
)
def test_malformed_data_is_reported_by_the_walk(tail: bytes, message: str) -> None:
    good = _stream([(struct.pack(">i", 1), b"ok")], trailer=False)
    with pytest.raises(cb.BadCopyBinary, match=message):
        cb.decode(good + tail, [INT, VARCHAR])


def test_wrong_width_of_a_fixed_type_is_refused() -> None:
    data = _stream([(struct.pack(">i", 1), b"ok"), (struct.pack(">q", 1), b"no")])
    with pytest.raises(cb.BadCopyBinary, match="is not 4 bytes"):
        cb.decode(data, [INT, VARCHAR])


def test_data_holding_the_field_count_everywhere_is_walked_not_laid_out() -> None:
    """A bytea of repeated field counts makes every other byte a candidate tuple start: laying
    them all out would cost many times the stream's size, so the decoder walks it instead."""
    blob = b"\x00\x01" * 200_000
    data = _stream([(blob,), (b"x",)])
    found, walked = _both(data, [BYTEA])
    assert found is None
    assert walked[1][0].tolist() == [len(blob), 1]  # one column: the two values' lengths
    assert cb.decode(data, [BYTEA])[0].to_pylist() == [blob, b"x"]


def _reference_messages(rows: list[tuple[Any, ...]], types: list[DataType]) -> bytes:
    """PostgreSQL's binary COPY TO, one CopyData message per row, built value by value."""
    out = []
    for r, row in enumerate(rows):
        fields = [
            b"\xff\xff\xff\xff" if v is None else struct.pack(">i", len(b := codec.encode_binary(v, t))) + b
            for v, t in zip(row, types, strict=True)
        ]
        payload = (cb.HEADER if r == 0 else b"") + struct.pack(">h", len(types)) + b"".join(fields)
        out.append(b"d" + struct.pack(">i", len(payload) + 4) + payload)
    tail = cb.TRAILER if rows else cb.HEADER + cb.TRAILER
    return b"".join(out) + b"d" + struct.pack(">i", len(tail) + 4) + tail


_EVERY_TYPE = [BOOLEAN, SMALLINT, INT, BIGINT, REAL, DOUBLE, NUMERIC, VARCHAR, BYTEA, DATE, TIME,
               TIMESTAMP, TIMESTAMPTZ, INTERVAL, JSONB, list_of(INT)]  # fmt: skip


def _datum(t: DataType, i: int) -> Any:
    k = TypeKind
    return {
        k.BOOLEAN: i % 3 == 0,
        k.SMALLINT: (i * 7919) % 65536 - 32768,
        k.INT: (i * 104729) % 2**32 - 2**31,
        k.BIGINT: i * 982451653 - 2**62,
        k.REAL: i / 8,
        k.DOUBLE: i * 1.25 - 3,
        k.NUMERIC: Decimal(i) / 100,
        k.VARCHAR: "é" * (i % 5) + str(i),
        k.BYTEA: bytes(range(i % 7)),
        k.DATE: dt.date(1999, 1, 1) + dt.timedelta(days=i),
        k.TIME: dt.time(i % 24, i % 60, 0, i),
        k.TIMESTAMP: dt.datetime(2000, 1, 1) + dt.timedelta(seconds=i * 3601),
        k.TIMESTAMPTZ: dt.datetime(1990, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=i),
        k.INTERVAL: Interval(i % 13, i % 31, i * 1000),
        k.JSONB: f'{{"k": {i}}}',
        k.LIST: [i, None, -i],
    }[t.kind]


@pytest.mark.parametrize("n", [0, 1, 2, 300])
@pytest.mark.parametrize("nulls", ["none", "some", "all"])
def test_encode_matches_the_value_by_value_encoding(n: int, nulls: str) -> None:
    """Every type, with no NULLs (laid out as one matrix), some and only NULLs (variable pieces),
    against PostgreSQL's format built value by value."""

    def is_null(i: int, c: int) -> bool:
        return nulls == "all" or (nulls == "some" and (i + c) % 4 == 0)

    rows = [
        tuple(None if is_null(i, c) else _datum(t, i) for c, t in enumerate(_EVERY_TYPE)) for i in range(n)
    ]
    table = pa.table({f"c{c}": to_arrow([r[c] for r in rows], t) for c, t in enumerate(_EVERY_TYPE)})
    assert cb.encode_messages(table, _EVERY_TYPE) == _reference_messages(rows, _EVERY_TYPE)


@pytest.mark.parametrize("types", [[BIGINT, DOUBLE], [VARCHAR], [INT, VARCHAR, JSONB, SMALLINT]])
def test_encode_of_only_fixed_or_only_variable_pieces(types: list[DataType]) -> None:
    rows = [tuple(_datum(t, i) for t in types) for i in range(50)]
    table = pa.table({f"c{c}": to_arrow([r[c] for r in rows], t) for c, t in enumerate(types)})
    sliced = pa.table(
        {f"c{c}": to_arrow([None, *[r[c] for r in rows]], t).slice(1) for c, t in enumerate(types)}
    )
    want = _reference_messages(rows, types)
    assert cb.encode_messages(table, types) == want
    assert cb.encode_messages(sliced, types) == want  # columns that start at an offset
