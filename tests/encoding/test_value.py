"""Value encoding (reference §2.1): exact bytes, round trips, vectorized == scalar, corruption."""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from collections.abc import Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piestream.common import types as T
from piestream.common.errors import (
    DataCorruption,
    DatetimeOutOfRange,
    InvalidInput,
    NumericOutOfRange,
)
from piestream.common.interval import Interval
from piestream.common.scalar import Datum, from_arrow, to_arrow
from piestream.common.types import DataType, TypeKind, list_of, struct_of
from piestream.encoding.ragged import Ragged
from piestream.encoding.value import (
    decode_datum,
    decode_row,
    decode_values,
    encode_columns,
    encode_columns_arrow,
    encode_datum,
    encode_row,
)

UTC = dt.UTC
PAIR = struct_of(("a", T.INT), ("b", T.VARCHAR))
INT_LIST = list_of(T.INT)
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# =============================================================================================
# Exact bytes (reference §2.1)
# =============================================================================================

BYTE_VECTORS: list[tuple[DataType, Datum, str]] = [
    (T.BOOLEAN, True, "01 01"),
    (T.BOOLEAN, False, "01 00"),
    (T.SMALLINT, -2, "01 feff"),
    (T.INT, 1, "01 01000000"),
    (T.INT, I32_MIN, "01 00000080"),
    (T.BIGINT, -1, "01 ffffffffffffffff"),
    (T.SERIAL, I64_MAX, "01 ffffffffffffff7f"),
    (T.REAL, 1.0, "01 0000803f"),
    (T.REAL, -0.0, "01 00000080"),
    (T.DOUBLE, 1.5, "01 000000000000f83f"),
    (T.DOUBLE, -0.0, "01 0000000000000080"),
    (T.DOUBLE, math.inf, "01 000000000000f07f"),
    (T.DOUBLE, math.nan, "01 000000000000f87f"),
    # NUMERIC: flags u32 (scale in bits 16..23, sign bit 31), then lo, mid, hi of the mantissa
    (T.NUMERIC, Decimal("1.5"), "01 00000100 0f000000 00000000 00000000"),
    (T.NUMERIC, Decimal("1.50"), "01 00000200 96000000 00000000 00000000"),  # the display scale is kept
    (T.NUMERIC, Decimal("-1.5"), "01 00000180 0f000000 00000000 00000000"),
    (T.NUMERIC, Decimal("100"), "01 00000000 64000000 00000000 00000000"),
    (T.NUMERIC, Decimal("1E+2"), "01 00000000 64000000 00000000 00000000"),
    (T.NUMERIC, 7, "01 00000000 07000000 00000000 00000000"),
    (T.NUMERIC, Decimal("0.0000000001"), "01 00000a00 01000000 00000000 00000000"),
    (T.NUMERIC, Decimal("0"), "01 00000000 00000000 00000000 00000000"),
    (T.NUMERIC, Decimal("-0.00"), "01 00000200 00000000 00000000 00000000"),  # zero has no sign
    (T.NUMERIC, Decimal(2**96 - 1), "01 00000000 ffffffff ffffffff ffffffff"),
    (T.NUMERIC, Decimal(2**64), "01 00000000 00000000 00000000 01000000"),
    (T.NUMERIC, Decimal("1E-28"), "01 00001c00 01000000 00000000 00000000"),
    (T.NUMERIC, Decimal("NaN"), "01 01" + "00" * 15),
    (T.NUMERIC, Decimal("Infinity"), "01 02" + "00" * 15),
    (T.NUMERIC, Decimal("-Infinity"), "01 03" + "00" * 15),
    (T.VARCHAR, "ab", "01 02000000 6162"),
    (T.VARCHAR, "", "01 00000000"),
    (T.VARCHAR, "é", "01 02000000 c3a9"),
    (T.BYTEA, b"\x00\xff", "01 02000000 00ff"),
    (T.BYTEA, b"", "01 00000000"),
    (T.JSONB, '{"a":1}', "01 08000000 01 7b2261223a317d"),
    (T.JSONB, "null", "01 05000000 01 6e756c6c"),
    (T.DATE, dt.date(1970, 1, 1), "01 3bf90a00"),  # 719163
    (T.DATE, dt.date(1, 1, 1), "01 01000000"),
    (T.TIME, dt.time(1, 2, 3, 4), "01 8b0e0000 a00f0000"),  # 3723 s, 4000 ns
    (T.TIMESTAMP, dt.datetime(1970, 1, 1, 0, 0, 1, 500000), "01 0100000000000000 0065cd1d"),
    (T.TIMESTAMP, dt.datetime(1969, 12, 31, 23, 59, 59, 500000), "01 ffffffffffffffff 0065cd1d"),
    (T.TIMESTAMPTZ, dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC), "01 0100000000000000"),
    (T.TIMESTAMPTZ, dt.datetime(1970, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), "01" + "00" * 8),
    (T.TIMESTAMPTZ, dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "01 ffffffffffffffff"),
    (T.INTERVAL, Interval(1, -2, 3), "01 01000000 feffffff 0300000000000000"),
    (PAIR, {"a": 1, "b": None}, "01 01 01000000 00"),
    (PAIR, {"a": None, "b": "x"}, "01 00 01 01000000 78"),
    (INT_LIST, [1, None], "01 02000000 01 01000000 00"),
    (INT_LIST, [], "01 00000000"),
    (list_of(PAIR), [{"a": 2, "b": "y"}, None], "01 02000000 01 01 02000000 01 01000000 79 00"),
    (struct_of(("l", INT_LIST)), {"l": [3]}, "01 01 01000000 01 03000000"),
]


@pytest.mark.parametrize(("t", "v", "expected"), BYTE_VECTORS, ids=lambda x: str(x)[:30])
def test_datum_bytes(t: DataType, v: Datum, expected: str) -> None:
    assert encode_datum(v, t) == h(expected)
    decoded, end = decode_datum(h(expected), 0, t)
    assert end == len(h(expected))
    assert encode_datum(decoded, t) == h(expected)


@pytest.mark.parametrize("t", [*T.SCALAR_TYPES, PAIR, INT_LIST], ids=str)
def test_null_is_one_zero_byte(t: DataType) -> None:
    assert encode_datum(None, t) == b"\x00"
    assert decode_datum(b"\x00", 0, t) == (None, 1)


def test_row_is_concatenated_datums() -> None:
    types = [T.INT, T.BIGINT, T.VARCHAR]
    assert encode_row((1, None, "x"), types) == h("01 01000000 00 01 01000000 78")
    assert decode_row(h("01 01000000 00 01 01000000 78"), types) == (1, None, "x")
    assert decode_row(h("ff 00"), [T.INT], pos=1) == (None,)


def test_decoded_values_have_python_types() -> None:
    assert decode_datum(h("01 00000100 0f000000 00000000 00000000"), 0, T.NUMERIC) == (Decimal("1.5"), 17)
    ts, _ = decode_datum(encode_datum(dt.datetime(2020, 1, 1, tzinfo=UTC), T.TIMESTAMPTZ), 0, T.TIMESTAMPTZ)
    assert ts.tzinfo is UTC
    nan, _ = decode_datum(h("01 01" + "00" * 15), 0, T.NUMERIC)
    assert nan.is_nan()
    iv, _ = decode_datum(h("01 01000000 feffffff 0300000000000000"), 0, T.INTERVAL)
    assert iv.identical(Interval(1, -2, 3))


# =============================================================================================
# Encode-side validation
# =============================================================================================


@pytest.mark.parametrize(
    ("t", "v", "name"),
    [
        (T.INT, 2**40, "integer"),
        (T.SMALLINT, 2**15, "smallint"),
        (T.BIGINT, 2**63, "bigint"),
        (T.SERIAL, -(2**63) - 1, "serial"),
        (T.REAL, 1e300, "real"),
        (T.NUMERIC, Decimal(2**96), "numeric"),
        (T.NUMERIC, Decimal("1E+29"), "numeric"),
        (T.NUMERIC, Decimal("1E-29"), "numeric"),
        (T.NUMERIC, Decimal("1" * 40), "numeric"),
    ],
)
def test_out_of_range_names_the_type(t: DataType, v: Datum, name: str) -> None:
    with pytest.raises(NumericOutOfRange, match=name):
        encode_datum(v, t)


@pytest.mark.parametrize(
    ("t", "v"),
    [
        (T.INT, "1"),
        (T.INT, 1.0),
        (T.INT, True),
        (T.BOOLEAN, 1),
        (T.DOUBLE, "1.5"),
        (T.NUMERIC, 1.5),
        (T.NUMERIC, "1.5"),
        (T.VARCHAR, b"x"),
        (T.VARCHAR, "\ud800"),
        (T.BYTEA, "x"),
        (T.JSONB, {"a": 1}),
        (T.DATE, dt.datetime(2020, 1, 1)),
        (T.TIME, dt.time(1, tzinfo=UTC)),
        (T.TIMESTAMP, dt.datetime(2020, 1, 1, tzinfo=UTC)),
        (T.TIMESTAMP, dt.date(2020, 1, 1)),
        (T.TIMESTAMPTZ, "2020-01-01"),
        (T.INTERVAL, dt.timedelta(1)),
        (PAIR, [1, "x"]),
        (INT_LIST, {"a": 1}),
        (INT_LIST, [1, "x"]),
    ],
)
def test_wrong_python_type_is_invalid_input(t: DataType, v: Datum) -> None:
    with pytest.raises(InvalidInput):
        encode_datum(v, t)


def test_row_arity_is_checked() -> None:
    with pytest.raises(InvalidInput):
        encode_row((1, 2), [T.INT])


def test_vectorized_encode_validation() -> None:
    with pytest.raises(DatetimeOutOfRange):
        encode_columns([pa.array([2**31 - 1], pa.date32())], [T.DATE])
    with pytest.raises(DatetimeOutOfRange):
        encode_columns([pa.array([86_400_000_000], pa.time64("us"))], [T.TIME])
    big = pa.array([Decimal("1" * 28)], pa.decimal128(38, 0))  # 1.1e27 fits 96 bits; 10x does not
    assert encode_columns([big], [T.NUMERIC])[0] == encode_datum(Decimal("1" * 28), T.NUMERIC)
    with pytest.raises(NumericOutOfRange, match="numeric"):
        encode_columns([pa.array([Decimal("1" * 29 + "0")], pa.decimal128(38, 0))], [T.NUMERIC])
    with pytest.raises(NumericOutOfRange):
        encode_columns([pa.array([2**40], pa.int64())], [T.INT])
    with pytest.raises(InvalidInput):
        encode_columns([pa.array(["x"])], [T.INT])
    with pytest.raises(InvalidInput):
        encode_columns([pa.array([1]), pa.array([1, 2])], [T.INT, T.INT])
    with pytest.raises(InvalidInput):
        encode_columns([pa.array([1])], [T.INT, T.INT])
    # NULL slots may hold anything: a garbage date under a NULL is not an error
    days = pa.Array.from_buffers(
        pa.date32(),
        2,
        [
            pa.py_buffer(np.packbits([1, 0], bitorder="little")),
            pa.py_buffer(np.array([0, I32_MAX], np.int32)),
        ],
    )
    assert encode_columns([days], [T.DATE]).to_list() == [h("01 3bf90a00"), b"\x00"]


# =============================================================================================
# Value strategies
# =============================================================================================

I32 = st.integers(I32_MIN, I32_MAX)
JSON_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
).map(lambda v: json.dumps(v, ensure_ascii=False))


@st.composite
def numerics(draw: st.DrawFn, arrow: bool) -> Decimal:
    """Any canonical NUMERIC (96-bit mantissa, scale <= 28), or one that decimal128(38, 10) holds."""
    if arrow:  # at most 28 digits and 10 fraction digits
        scale = draw(st.integers(0, 10))
        mantissa = draw(st.integers(-(10**28) + 1, 10**28 - 1) | st.integers(-1000, 1000))
    else:
        scale = draw(st.integers(0, 28))
        mantissa = draw(st.integers(-(2**96) + 1, 2**96 - 1) | st.integers(-1000, 1000))
    return Decimal(f"{mantissa}E-{scale}")


def finite_or_canonical_nan(x: float) -> float:
    return math.nan if math.isnan(x) else x


def datums(t: DataType, arrow: bool = False) -> st.SearchStrategy[Datum]:
    """Values of `t` (or None). With `arrow`, only values whose Arrow layout holds them exactly."""
    return st.none() | values(t, arrow)


def values(t: DataType, arrow: bool) -> st.SearchStrategy[Datum]:
    k = t.kind
    if k is TypeKind.BOOLEAN:
        return st.booleans()
    if k is TypeKind.SMALLINT:
        return st.integers(-(2**15), 2**15 - 1)
    if k is TypeKind.INT:
        return I32
    if k in (TypeKind.BIGINT, TypeKind.SERIAL):
        return st.integers(I64_MIN, I64_MAX)
    if k is TypeKind.NUMERIC:
        if arrow:
            return numerics(arrow=True)
        specials = st.sampled_from([Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")])
        return numerics(arrow=False) | specials
    if k is TypeKind.REAL:
        f32 = st.floats(width=32)
        return f32.map(finite_or_canonical_nan) if arrow else f32
    if k is TypeKind.DOUBLE:
        return st.floats()
    if k is TypeKind.VARCHAR:
        return st.text() | st.text(min_size=300, max_size=400)
    if k is TypeKind.BYTEA:
        return st.binary() | st.just(b"\x00" * 70)
    if k is TypeKind.JSONB:
        return JSON_TEXT
    if k is TypeKind.DATE:
        return st.dates()
    if k is TypeKind.TIME:
        return st.times()
    if k is TypeKind.TIMESTAMP:
        return st.datetimes()
    if k is TypeKind.TIMESTAMPTZ:
        return st.datetimes(timezones=st.just(UTC))
    if k is TypeKind.INTERVAL:
        # Arrow holds nanoseconds in an int64
        usecs = st.integers(I64_MIN // 1000 + 1, I64_MAX // 1000) if arrow else st.integers(I64_MIN, I64_MAX)
        return st.builds(Interval, I32, I32, usecs)
    if k is TypeKind.STRUCT:
        return st.fixed_dictionaries({f.name: datums(f.data_type, arrow) for f in t.fields})
    assert t.elem is not None
    return st.lists(datums(t.elem, arrow), max_size=4)


def data_types(max_leaves: int = 4) -> st.SearchStrategy[DataType]:
    def composite(inner: st.SearchStrategy[DataType]) -> st.SearchStrategy[DataType]:
        structs = st.lists(inner, min_size=1, max_size=3).map(
            lambda ts: struct_of(*[(f"f{i}", t) for i, t in enumerate(ts)])
        )
        return inner.map(list_of) | structs

    return st.recursive(st.sampled_from(T.SCALAR_TYPES), composite, max_leaves=max_leaves)


def same(a: Datum, b: Datum, t: DataType) -> bool:
    """Identity for round trips: NaN is NaN, -0.0 keeps its sign, intervals field by field."""
    if a is None or b is None:
        return a is None and b is None
    k = t.kind
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if k is TypeKind.NUMERIC:
        return (a.is_nan() and b.is_nan()) or a == b
    if k is TypeKind.INTERVAL:
        return bool(a.identical(b))
    if k is TypeKind.STRUCT:
        return all(same(a[f.name], b[f.name], f.data_type) for f in t.fields)
    if k is TypeKind.LIST:
        assert t.elem is not None
        return len(a) == len(b) and all(same(x, y, t.elem) for x, y in zip(a, b, strict=True))
    if k is TypeKind.TIMESTAMPTZ:
        return bool(a == b and b.utcoffset() == dt.timedelta(0))
    return bool(type(a) is type(b) and a == b)


# =============================================================================================
# Round trips
# =============================================================================================

EDGE_VALUES: list[tuple[DataType, list[Datum]]] = [
    (T.BOOLEAN, [True, False]),
    (T.SMALLINT, [-(2**15), 2**15 - 1, 0]),
    (T.INT, [I32_MIN, I32_MAX, -1]),
    (T.BIGINT, [I64_MIN, I64_MAX, 0]),
    (T.SERIAL, [I64_MIN, I64_MAX]),
    (T.REAL, [math.nan, math.inf, -math.inf, -0.0, 0.0, 3.4028234663852886e38, 1.401298464324817e-45]),
    (T.DOUBLE, [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308]),
    (T.NUMERIC, [Decimal("1234567890123456789.012345678"), Decimal("-0.0000000001"), Decimal("1e27")]),
    (T.VARCHAR, ["", "\x00", "a\x00b", "€" * 1000, "x" * 100_000, "🙂"]),
    (T.BYTEA, [b"", b"\x00", b"\x00\xff" * 1000]),
    (T.JSONB, ["{}", "[]", '{"k": [1, 2.5, null, "é"]}']),
    (T.DATE, [dt.date.min, dt.date.max, dt.date(1970, 1, 1), dt.date(1969, 12, 31)]),
    (T.TIME, [dt.time.min, dt.time.max, dt.time(12)]),
    (T.TIMESTAMP, [dt.datetime.min, dt.datetime.max, dt.datetime(1969, 12, 31, 23, 59, 59, 1)]),
    (T.TIMESTAMPTZ, [dt.datetime.min.replace(tzinfo=UTC), dt.datetime.max.replace(tzinfo=UTC)]),
    (T.INTERVAL, [Interval(1, -1, 1), Interval(-1, 1, -1), Interval(I32_MIN, I32_MAX, -(10**15))]),
    (PAIR, [{"a": None, "b": None}, {"a": 1, "b": ""}]),
    (INT_LIST, [[], [None], [I32_MIN, None, I32_MAX]]),
    (list_of(list_of(T.VARCHAR)), [[[]], [None, ["a", None]], []]),
    (struct_of(("s", PAIR), ("l", list_of(PAIR))), [{"s": None, "l": [None, {"a": 1, "b": "z"}]}]),
]


@pytest.mark.parametrize(("t", "vals"), EDGE_VALUES, ids=lambda x: str(x)[:20])
def test_edge_values_round_trip(t: DataType, vals: list[Datum]) -> None:
    rows = [(v,) for v in [*vals, None]]
    for (v,) in rows:
        enc = encode_datum(v, t)
        back, end = decode_datum(enc, 0, t)
        assert end == len(enc)
        assert same(v, back, t), (v, back)
        assert encode_datum(back, t) == enc
    col = to_arrow([r[0] for r in rows], t)
    enc_col = encode_columns([col], [t])
    assert enc_col.to_list() == [encode_row(r, [t]) for r in rows]
    (dec,) = decode_values(enc_col, [t])
    assert encode_columns([dec], [t]).to_list() == enc_col.to_list()
    assert all(same(a, b, t) for a, b in zip(from_arrow(col, t), from_arrow(dec, t), strict=True))


def test_float_signs_and_nan_payloads_are_kept() -> None:
    # -0.0 keeps its sign in the value encoding (unlike the memcomparable key encoding)
    assert decode_datum(encode_datum(-0.0, T.DOUBLE), 0, T.DOUBLE)[0].hex() == "-0x0.0p+0"
    # a signalling float32 NaN survives decode + encode bit for bit, in both codecs
    for bits in (0x7F800001, 0xFFA00000, 0x7FC00001):
        raw = b"\x01" + struct.pack("<I", bits)
        v, _ = decode_datum(raw, 0, T.REAL)
        assert math.isnan(v)
        assert encode_datum(v, T.REAL) == raw
        (col,) = decode_values(pa.array([raw], pa.binary()), [T.REAL])
        assert encode_columns([col], [T.REAL])[0] == raw
    nan_col = pa.array(np.array([0x7FC00000, 0x7F800001], np.uint32).view(np.float32))
    assert encode_columns([nan_col], [T.REAL]).to_list() == [h("01 0000c07f"), h("01 0100807f")]


def test_timestamptz_decodes_as_utc() -> None:
    paris = dt.timezone(dt.timedelta(hours=2))
    v = dt.datetime(2024, 6, 1, 12, tzinfo=paris)
    back, _ = decode_datum(encode_datum(v, T.TIMESTAMPTZ), 0, T.TIMESTAMPTZ)
    assert back == v and back.tzinfo is UTC and back.hour == 10
    naive, _ = decode_datum(encode_datum(dt.datetime(2024, 6, 1), T.TIMESTAMPTZ), 0, T.TIMESTAMPTZ)
    assert naive == dt.datetime(2024, 6, 1, tzinfo=UTC)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_scalar_round_trip(data: st.DataObject) -> None:
    types = data.draw(st.lists(data_types(), min_size=1, max_size=4))
    row = tuple(data.draw(datums(t)) for t in types)
    enc = encode_row(row, types)
    back = decode_row(enc, types)
    assert all(same(a, b, t) for a, b, t in zip(row, back, types, strict=True)), (row, back)
    assert encode_row(back, types) == enc
    assert b"".join(encode_datum(v, t) for v, t in zip(row, types, strict=True)) == enc


def _variants(col: pa.Array, t: DataType) -> list[pa.Array | pa.ChunkedArray]:
    """The same column plain, sliced out of a longer array, and chunked."""
    n = len(col)
    padded = pa.concat_arrays([to_arrow([None], t), col, to_arrow([None, None], t)])
    return [
        col,
        padded.slice(1, n),
        pa.chunked_array([col.slice(0, n // 2), col.slice(n // 2)], type=col.type),
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_vectorized_equals_scalar(data: st.DataObject) -> None:
    types = data.draw(st.lists(data_types(max_leaves=3), min_size=1, max_size=3))
    rows = data.draw(st.lists(st.tuples(*[datums(t, arrow=True) for t in types]), max_size=12))
    cols = [to_arrow([r[i] for r in rows], t) for i, t in enumerate(types)]
    # the Python form of what the Arrow column holds (e.g. NUMERIC quantized to 10 digits)
    rows = list(zip(*[from_arrow(c, t) for c, t in zip(cols, types, strict=True)], strict=True)) or rows
    expected = [encode_row(r, types) for r in rows]
    variant = data.draw(st.integers(0, 2))
    enc = encode_columns([_variants(c, t)[variant] for c, t in zip(cols, types, strict=True)], types)
    assert enc.to_list() == expected
    assert encode_columns_arrow(cols, types).to_pylist() == expected

    decoded = decode_values(enc, types)
    assert [len(d) for d in decoded] == [len(rows)] * len(types)
    assert [d.type for d in decoded] == [t.arrow for t in types]
    assert encode_columns(decoded, types).to_list() == expected
    for c, d, t in zip(cols, decoded, types, strict=True):
        assert all(same(a, b, t) for a, b in zip(from_arrow(c, t), from_arrow(d, t), strict=True))


# =============================================================================================
# Vectorized specifics
# =============================================================================================


def test_decode_values_inputs_and_start_offsets() -> None:
    types = [T.INT, T.VARCHAR]
    rows = [(1, "a"), (None, "bcd"), (3, None)]
    enc = [encode_row(r, types) for r in rows]
    arr = pa.array(enc, pa.binary())
    for values in (arr, pa.chunked_array([arr.slice(0, 1), arr.slice(1)]), Ragged.from_arrow(arr)):
        cols = decode_values(values, types)
        assert list(zip(*[c.to_pylist() for c in cols], strict=True)) == rows
    prefixed = pa.array([b"\xaa" + e for e in enc], pa.large_binary())
    for start in (1, np.ones(3, np.int64)):
        assert decode_values(prefixed, types, start=start)[1].to_pylist() == ["a", "bcd", None]
    ragged_starts = pa.array([b"\xaa" + enc[0], enc[1], b"\xaa\xbb" + enc[2]])
    assert decode_values(ragged_starts, types, start=np.array([1, 0, 2]))[0].to_pylist() == [1, None, 3]
    assert decode_values(pa.array([], pa.binary()), types)[1].type == pa.string()


def test_children_under_null_parents_are_not_encoded() -> None:
    # Arrow keeps child values under a NULL struct / list slot; the encoding must drop them
    structs = pa.StructArray.from_arrays(
        [pa.array([1, 2], pa.int32()), pa.array(["x", "y"])], names=["a", "b"], mask=pa.array([False, True])
    )
    lists = pa.ListArray.from_arrays(
        pa.array([0, 2, 4], pa.int32()), pa.array([1, 2, 3, 4], pa.int32()), mask=pa.array([False, True])
    )
    enc = encode_columns([structs, lists], [PAIR, INT_LIST])
    assert enc.to_list() == [encode_row(({"a": 1, "b": "x"}, [1, 2]), [PAIR, INT_LIST]), b"\x00\x00"]
    assert encode_columns([lists.slice(1)], [INT_LIST]).to_list() == [b"\x00"]


def test_vectorized_numeric_decode_keeps_each_values_scale() -> None:
    """Each value comes back exactly as written, display scale and specials included (no rounding
    to a column scale); a scale beyond the layout's 28 is corruption."""
    vals = ["0.12345678905", "-0.12345678905", "0.123456789049", "1E-28", "1.50", "0.00", "NaN", "-Infinity"]
    enc = pa.array([encode_datum(Decimal(v), T.NUMERIC) for v in vals], pa.binary())
    (col,) = decode_values(enc, [T.NUMERIC])
    assert [str(d) for d in col.to_pylist()] == [str(Decimal(v)) for v in vals]
    (big,) = decode_values(pa.array([h("01 00000000 00000010 6102253e 5ece4f20")]), [T.NUMERIC])
    assert big.to_pylist() == [Decimal("1E+28")]  # 29 digits: within the 38 of the layout
    with pytest.raises(DataCorruption):
        decode_values(pa.array([h("01 00001d00 01000000 00000000 00000000")]), [T.NUMERIC])  # scale 29


def test_vectorized_decode_beyond_python_datetimes() -> None:
    # year 10000 fits Arrow timestamp[us] but not a Python datetime
    raw = b"\x01" + struct.pack("<qI", 253_402_300_800, 0)
    (col,) = decode_values(pa.array([raw]), [T.TIMESTAMP])
    assert col.cast(pa.int64()).to_pylist() == [253_402_300_800_000_000]
    assert encode_columns([col], [T.TIMESTAMP])[0] == raw
    with pytest.raises(DataCorruption):
        decode_row(raw, [T.TIMESTAMP])
    for secs, nanos in ((2**62, 0), (-(2**63) // 10**6, 0)):
        with pytest.raises(DataCorruption):
            decode_values(pa.array([b"\x01" + struct.pack("<qI", secs, nanos)]), [T.TIMESTAMP])
    lowest = b"\x01" + struct.pack("<qI", -(2**63) // 10**6, 224_192_000)
    (col,) = decode_values(pa.array([lowest]), [T.TIMESTAMP])
    assert col.cast(pa.int64()).to_pylist() == [-(2**63)]


def test_fixed_width_rows_are_one_matrix() -> None:
    n = 1000
    ids = pa.array(np.arange(n, dtype=np.int64) - 500, mask=np.arange(n) % 7 == 0)
    flags = pa.array(np.arange(n) % 2 == 0)
    enc = encode_columns([ids, flags], [T.BIGINT, T.BOOLEAN])
    rows = list(zip(ids.to_pylist(), flags.to_pylist(), strict=True))
    assert enc.to_list() == [encode_row(r, [T.BIGINT, T.BOOLEAN]) for r in rows]


# =============================================================================================
# Corruption
# =============================================================================================

SAMPLE_TYPES = [
    T.BOOLEAN, T.SMALLINT, T.INT, T.BIGINT, T.NUMERIC, T.REAL, T.DOUBLE, T.VARCHAR, T.BYTEA, T.JSONB,
    T.DATE, T.TIME, T.TIMESTAMP, T.TIMESTAMPTZ, T.INTERVAL, PAIR, list_of(PAIR),
]  # fmt: skip
SAMPLE_ROW = (
    True, -3, 7, 2**40, Decimal("-12.345"), 1.5, -2.25, "héllo", b"\x00\x01", '{"a": [1]}',
    dt.date(2024, 2, 29), dt.time(23, 59, 59, 999999), dt.datetime(2024, 1, 2, 3, 4, 5, 6),
    dt.datetime(2024, 1, 2, tzinfo=UTC), Interval(1, -2, 3), {"a": 5, "b": "q"},
    [{"a": None, "b": "r"}, None, {"a": 6, "b": None}],
)  # fmt: skip


def test_truncation_at_every_position_is_detected() -> None:
    enc = encode_row(SAMPLE_ROW, SAMPLE_TYPES)
    assert decode_row(enc, SAMPLE_TYPES) == SAMPLE_ROW
    for cut in range(len(enc)):
        with pytest.raises(DataCorruption):
            decode_row(enc[:cut], SAMPLE_TYPES)
        with pytest.raises(DataCorruption):
            decode_values(pa.array([enc[:cut]]), SAMPLE_TYPES)
    # a row cut short in the middle of a batch of good rows
    batch = pa.array([enc, enc[: len(enc) // 2], enc])
    with pytest.raises(DataCorruption):
        decode_values(batch, SAMPLE_TYPES)


def test_trailing_bytes_are_detected() -> None:
    enc = encode_row(SAMPLE_ROW, SAMPLE_TYPES) + b"\x00"
    with pytest.raises(DataCorruption, match="trailing"):
        decode_row(enc, SAMPLE_TYPES)
    with pytest.raises(DataCorruption, match="trailing"):
        decode_values(pa.array([enc]), SAMPLE_TYPES)


@pytest.mark.parametrize(
    ("t", "raw"),
    [
        (T.INT, "02 01000000"),  # invalid tag
        (T.INT, "ff"),
        (T.BOOLEAN, "01 02"),
        (T.VARCHAR, "01 02000000 c328"),  # invalid UTF-8
        (T.VARCHAR, "01 05000000 6162"),  # length past the end
        (T.VARCHAR, "01 ffffffff"),
        (T.JSONB, "01 02000000 02 31"),  # bad version byte
        (T.JSONB, "01 00000000"),  # no version byte
        (T.JSONB, "01 02000000 01 ff"),
        (T.NUMERIC, "01 00001d00 01000000 00000000 00000000"),  # scale 29
        (T.NUMERIC, "01 00000140 01000000 00000000 00000000"),  # reserved flag bits
        (T.NUMERIC, "01 01000000 01000000 00000000 00000000"),  # low flag bits
        (T.NUMERIC, "01 00000080 00000000 00000000 00000000"),  # negative zero
        (T.NUMERIC, "01 04" + "00" * 15),  # unknown special
        (T.NUMERIC, "01 01" + "00" * 14 + "01"),  # NaN with a payload
        (T.TIME, "01 80510100 00000000"),  # 86400 s
        (T.TIME, "01 00000000 01000000"),  # 1 ns: not whole microseconds
        (T.TIME, "01 00000000 00ca9a3b"),  # 1e9 ns
        (T.TIMESTAMP, "01 0000000000000000 00ca9a3b"),
        (INT_LIST, "01 ffffff7f 00"),  # count larger than the bytes left
        (INT_LIST, "01 02000000 00"),
        (INT_LIST, "01 01000000 03"),
        (PAIR, "01 01 01000000"),
    ],
)
def test_malformed_datums_raise(t: DataType, raw: str) -> None:
    with pytest.raises(DataCorruption):
        decode_row(h(raw), [t])
    with pytest.raises(DataCorruption):
        decode_values(pa.array([h(raw)]), [t])


@pytest.mark.parametrize(
    ("t", "raw"),
    [
        (T.DATE, "01 00000000"),  # day 0: before 0001-01-01
        (T.TIMESTAMP, "01 ffffffffffffff7f 00000000"),
        (T.TIMESTAMPTZ, "01 ffffffffffffff7f"),
    ],
)
def test_values_beyond_python_range_raise_in_scalar_decode(t: DataType, raw: str) -> None:
    with pytest.raises(DataCorruption):
        decode_row(h(raw), [t])


def test_null_value_is_corruption() -> None:
    with pytest.raises(DataCorruption):
        decode_values(pa.array([b"\x00", None]), [T.INT])


GARBAGE_TYPES: list[list[DataType]] = [
    [T.INT, T.VARCHAR],
    [T.NUMERIC, T.BOOLEAN],
    [T.TIMESTAMP, T.TIME, T.DATE],
    [T.REAL, T.DOUBLE, T.INTERVAL, T.TIMESTAMPTZ],
    [T.JSONB, T.BYTEA],
    [PAIR, INT_LIST],
    [list_of(PAIR), T.SMALLINT],
]


def _check_garbage(raw: bytes, types: Sequence[DataType]) -> None:
    """Either DataCorruption, or a row that re-encodes to exactly the same bytes."""
    try:
        row = decode_row(raw, types)
    except DataCorruption:
        pass
    else:
        assert encode_row(row, types) == raw
    try:
        cols = decode_values(pa.array([raw], pa.binary()), types)
    except DataCorruption:
        return
    if not any(t.kind is TypeKind.NUMERIC for t in types):  # NUMERIC rounds to the column scale
        assert encode_columns(cols, types)[0] == raw


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(GARBAGE_TYPES), st.binary(max_size=40))
def test_random_garbage(types: list[DataType], raw: bytes) -> None:
    _check_garbage(raw, types)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_rows(data: st.DataObject) -> None:
    types = data.draw(st.sampled_from(GARBAGE_TYPES))
    row = tuple(data.draw(datums(t)) for t in types)
    raw = bytearray(encode_row(row, types))
    for _ in range(data.draw(st.integers(1, 3))):
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.sampled_from([0, 1, 2, 0x80, 0xFF]))
    _check_garbage(bytes(raw), types)
