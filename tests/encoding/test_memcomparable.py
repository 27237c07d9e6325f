"""Memcomparable keys: golden bytes (reference §1), byte order == PostgreSQL ORDER BY order,
round trips, scalar == vectorized, and corruption detection."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import math
import struct
from collections.abc import Callable, Sequence
from decimal import Context, Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piestream.common.errors import DataCorruption, InvalidInput, NumericOutOfRange
from piestream.common.interval import I32_MAX, I32_MIN, I64_MAX, I64_MIN, Interval
from piestream.common.numeric import wrap
from piestream.common.order import ASC, ASC_NULLS_FIRST, DESC, DESC_NULLS_LAST, OrderType
from piestream.common.scalar import from_arrow, normalize_numeric, to_arrow
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
    SERIAL,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
    struct_of,
)
from piestream.encoding.memcmp_decimal import decode_decimal, encode_decimal
from piestream.encoding.memcomparable import (
    decode_datum,
    decode_keys,
    decode_row,
    encode_columns,
    encode_columns_arrow,
    encode_datum,
    encode_row,
    encoded_len,
)
from piestream.encoding.ragged import Ragged

ORDERS = [ASC, ASC_NULLS_FIRST, DESC, DESC_NULLS_LAST]
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------
# Value strategies (with the edge values the order must get right)
# ---------------------------------------------------------------------------------------------

EDGE_STRINGS = ["", "\x00", "\x00\x00", "a", "a\x00", "ab", *("x" * n for n in (7, 8, 9, 16, 17))]
EDGE_STRINGS += ["abcdefg\x00", "abcdefgh\x00", "abcdefgh", "abcdefgh\x01", "z" * 100, "é", "\U0010ffff"]
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)  # no lone surrogates
EDGE_DECIMALS = [
    "0",
    "-0",
    "1",
    "-1",
    "1.0",
    "10",
    "0.5",
    "-0.5",
    "99.01",
    "100",
    "1E-10",
    "-1E-10",
    "0.0000000011",
    "9999999999999999999999999999",
    "-9999999999999999999999999999",
    "1E+27",
    "-1E+27",
    "123456789012345678.9012345678",
]


@st.composite
def numerics(draw: st.DrawFn) -> Decimal:
    """Finite NUMERIC values inside the domain (|unscaled| < 2**96, <= 28 fraction digits), with
    trailing zeros (display scales) of their own."""
    digits = draw(st.integers(1, 28))
    mantissa = draw(st.integers(-(10**digits) + 1, 10**digits - 1))
    exp = draw(st.integers(max(-28, -digits - 10), 28 - digits))
    return Decimal(mantissa).scaleb(exp)


UTC_OFFSETS = [dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(-dt.timedelta(hours=8))]
#: usecs within what Arrow's month_day_nano (i64 nanoseconds) holds
INTERVALS = st.builds(
    Interval,
    st.integers(I32_MIN, I32_MAX),
    st.integers(I32_MIN, I32_MAX),
    st.integers(I64_MIN // 1000 + 1, I64_MAX // 1000),
) | st.builds(Interval, st.integers(-30, 30), st.integers(-40, 40), st.integers(-(10**11), 10**11))
JSON_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
    max_leaves=6,
).map(json.dumps)

SCALARS: dict[DataType, st.SearchStrategy[Any]] = {
    BOOLEAN: st.booleans(),
    SMALLINT: st.integers(-(2**15), 2**15 - 1) | st.sampled_from([-(2**15), -1, 0, 1, 2**15 - 1]),
    INT: st.integers(-(2**31), 2**31 - 1) | st.sampled_from([-(2**31), -1, 0, 2**31 - 1]),
    BIGINT: st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-(2**63), -1, 0, 2**63 - 1]),
    SERIAL: st.integers(0, 2**63 - 1),
    NUMERIC: numerics() | st.sampled_from([Decimal(s) for s in EDGE_DECIMALS]),
    REAL: st.floats(width=32) | st.sampled_from([math.nan, -math.inf, math.inf, -0.0, 0.0]),
    DOUBLE: st.floats()
    | st.sampled_from([math.nan, -math.nan, -math.inf, math.inf, -0.0, 0.0, 5e-324, -5e-324]),
    VARCHAR: TEXT | st.sampled_from(EDGE_STRINGS),
    BYTEA: st.binary(max_size=30) | st.sampled_from([s.encode() for s in EDGE_STRINGS] + [b"\xff" * 9]),
    DATE: st.dates() | st.sampled_from([dt.date.min, dt.date.max, dt.date(1970, 1, 1)]),
    TIME: st.times() | st.sampled_from([dt.time(0), dt.time(23, 59, 59, 999_999)]),
    TIMESTAMP: st.datetimes()
    | st.sampled_from([dt.datetime.min, dt.datetime.max, dt.datetime(1969, 12, 31, 23, 59, 59, 999_999)]),
    TIMESTAMPTZ: st.datetimes(
        min_value=dt.datetime(2, 1, 1),
        max_value=dt.datetime(9998, 12, 31),
        timezones=st.sampled_from(UTC_OFFSETS),
    ),
    INTERVAL: INTERVALS
    | st.sampled_from([Interval(1, 0, 0), Interval(0, 30, 0), Interval(0, 0, -1), Interval(-1, 31, 5)]),
    JSONB: JSON_TEXT | st.sampled_from(["{}", "[]", "null", '{"a": 1}', '"\\u0000"']),
}

SMALL_STRUCT = struct_of(("a", INT), ("b", VARCHAR))
NESTED_STRUCT = struct_of(
    ("x", DOUBLE), ("y", list_of(SMALLINT)), ("z", struct_of(("p", BOOLEAN), ("q", BYTEA)))
)
COMPOSITES = [
    SMALL_STRUCT,
    NESTED_STRUCT,
    list_of(INT),
    list_of(VARCHAR),
    list_of(list_of(SMALLINT)),
    list_of(struct_of(("k", BIGINT), ("v", NUMERIC))),
    list_of(INTERVAL),
]
ALL_TYPES = list(SCALARS) + COMPOSITES


def values_of(t: DataType, depth: int = 0) -> st.SearchStrategy[Any]:
    """Non-NULL datums of `t` (composites: NULL members included)."""
    if t.kind is TypeKind.STRUCT:
        return st.fixed_dictionaries({f.name: maybe(f.data_type, depth + 1) for f in t.fields})
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return st.lists(maybe(t.elem, depth + 1), max_size=4 if depth else 5)
    return SCALARS[t]


def maybe(t: DataType, depth: int = 0) -> st.SearchStrategy[Any]:
    return st.none() | values_of(t, depth)


def type_id(t: DataType) -> str:
    return str(t).replace(" ", "_")


# ---------------------------------------------------------------------------------------------
# An independent PostgreSQL comparator and the expected round-trip form
# ---------------------------------------------------------------------------------------------


def pg_cmp(a: Any, b: Any, t: DataType) -> int:
    """PostgreSQL's comparison of two datums of `t`, NULL largest (as inside records and arrays)."""
    if a is None or b is None:
        return (a is None) - (b is None)
    k = t.kind
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        a_nan, b_nan = math.isnan(a), math.isnan(b)
        if a_nan or b_nan:  # NaN is equal to NaN and above every other float
            return a_nan - b_nan
    elif k in (TypeKind.VARCHAR, TypeKind.JSONB):  # C collation: by UTF-8 bytes; jsonb by its text
        a, b = a.encode(), b.encode()
    elif k is TypeKind.INTERVAL:  # interval_cmp: 1 month = 30 days, 1 day = 24 hours
        a, b = ((x.months * 30 + x.days) * 86_400_000_000 + x.usecs for x in (a, b))
    elif k is TypeKind.STRUCT:
        for f in t.fields:
            c = pg_cmp(a.get(f.name), b.get(f.name), f.data_type)
            if c:
                return c
        return 0
    elif k is TypeKind.LIST:
        assert t.elem is not None
        for x, y in zip(a, b, strict=False):
            c = pg_cmp(x, y, t.elem)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    return (a > b) - (a < b)


def order_cmp(a: Any, b: Any, t: DataType, order: OrderType) -> int:
    """ORDER BY comparison of one column with `order` (ASC/DESC, NULLS FIRST/LAST)."""
    if a is None and b is None:
        return 0
    if a is None or b is None:
        null_pos = -1 if order.nulls_first else 1
        return null_pos if a is None else -null_pos
    c = pg_cmp(a, b, t)
    return -c if order.descending else c


def row_cmp(
    r1: Sequence[Any], r2: Sequence[Any], types: Sequence[DataType], orders: Sequence[OrderType]
) -> int:
    for a, b, t, o in zip(r1, r2, types, orders, strict=True):
        c = order_cmp(a, b, t, o)
        if c:
            return c
    return 0


def expected(v: Any, t: DataType) -> Any:
    """What decoding returns for `v` (the documented normalizations)."""
    if v is None:
        return None
    k = t.kind
    if k is TypeKind.REAL:
        return struct.unpack("<f", struct.pack("<f", v))[0] + 0.0  # float32; -0.0 + 0.0 == +0.0
    if k is TypeKind.DOUBLE:
        return v + 0.0
    if k is TypeKind.NUMERIC:  # keys hold the value, not its display scale: 1.50 decodes as 1.5
        n = normalize_numeric(v).normalize(Context(prec=60))
        return (
            n.quantize(Decimal(1), context=Context(prec=60))
            if n.is_finite() and n.as_tuple().exponent > 0
            else n
        )
    if k is TypeKind.TIMESTAMPTZ:
        return v.astimezone(dt.UTC)
    if k is TypeKind.STRUCT:
        return {f.name: expected(v.get(f.name), f.data_type) for f in t.fields}
    if k is TypeKind.LIST:
        assert t.elem is not None
        return [expected(e, t.elem) for e in v]
    return v


def same(got: Any, want: Any, t: DataType) -> bool:
    """Exact equality of decoded and expected datums (NaN == NaN, sign of zero, types, tz)."""
    if got is None or want is None:
        return got is None and want is None
    k = t.kind
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    if k is TypeKind.INTERVAL:
        if got.total_usecs != want.total_usecs:
            return False
        try:
            return got.identical(Interval.from_total_usecs(want.total_usecs))
        except Exception:  # beyond the justified form: saturated, same total
            return True
    if k is TypeKind.STRUCT:
        return set(got) == {f.name for f in t.fields} and all(
            same(got[f.name], want[f.name], f.data_type) for f in t.fields
        )
    if k is TypeKind.LIST:
        assert t.elem is not None
        elem = t.elem
        return len(got) == len(want) and all(same(g, w, elem) for g, w in zip(got, want, strict=True))
    if k is TypeKind.TIMESTAMPTZ:
        return got == want and got.utcoffset() == dt.timedelta(0)
    if k is TypeKind.NUMERIC:  # NaN = NaN; the normalized form (no trailing zeros)
        if want.is_nan():
            return got.is_nan()
        return got == want and got.as_tuple().exponent == want.as_tuple().exponent
    return type(got) is type(want) and got == want


def check_sorted_like_pg(
    values: Sequence[Any], keys: Sequence[bytes], cmp: Callable[[Any, Any], int]
) -> None:
    """Sorting by key bytes gives ORDER BY order, and equal keys <=> equal values."""
    ranked = sorted(range(len(values)), key=lambda i: keys[i])
    for i, j in itertools.pairwise(ranked):
        c = cmp(values[i], values[j])
        if keys[i] == keys[j]:
            assert c == 0, (values[i], values[j])
        else:
            assert c < 0, (values[i], values[j], keys[i].hex(), keys[j].hex())


# ---------------------------------------------------------------------------------------------
# Golden bytes (reference §1)
# ---------------------------------------------------------------------------------------------

DECIMAL_VECTORS = [
    ("1.0", "18 02"),
    ("10", "18 14"),
    ("99.01", "18 c7 02"),
    ("111.11", "19 03 17 16"),
    ("1234", "19 19 44"),
    ("12345", "1a 03 2f 5a"),
    ("0.0123", "17 03 2e"),
    ("0.00123", "16 fe 19 3c"),
    ("0", "15"),
]


@pytest.mark.parametrize(("text", "hexbytes"), DECIMAL_VECTORS)
def test_decimal_reference_vectors(text: str, hexbytes: str) -> None:
    want = bytes.fromhex(hexbytes)
    assert encode_decimal(Decimal(text)) == want
    assert encode_datum(Decimal(text), NUMERIC) == b"\x00" + want
    assert decode_decimal(want, 0) == (Decimal(text), len(want))


def test_decimal_scale_does_not_change_key_and_specials_decode() -> None:
    assert encode_datum(Decimal("1.0"), NUMERIC) == encode_datum(Decimal("1.00"), NUMERIC) == b"\x00\x18\x02"
    assert encode_datum(Decimal("-0"), NUMERIC) == encode_datum(0, NUMERIC) == b"\x00\x15"
    # negative numbers: complemented digits behind their own header range
    assert encode_decimal(Decimal(-1)) == bytes([0x13 - 1, 0xFF ^ 0x02])
    assert encode_decimal(Decimal("NaN")) == b"\x24"
    assert encode_decimal(Decimal("Infinity")) == b"\x23"
    assert encode_decimal(Decimal("-Infinity")) == b"\x07"
    nan, pos = decode_datum(b"\x00\x24", 0, NUMERIC)
    assert nan.is_nan() and pos == 2
    assert decode_datum(b"\x00\x23", 0, NUMERIC) == (Decimal("Infinity"), 2)
    assert decode_datum(b"\xff\xf8", 0, NUMERIC, DESC) == (Decimal("-Infinity"), 2)
    assert encode_datum(Decimal("NaN"), NUMERIC) == b"\x00\x24"  # NaN is a value, sorted last
    assert decode_datum(encode_datum(Decimal("1.50"), NUMERIC), 0, NUMERIC)[0].as_tuple().exponent == -1
    # each value keeps its digits: no rounding to a fixed scale; 28 fraction digits at most
    assert encode_datum(Decimal("0.00000000005"), NUMERIC) != encode_datum(Decimal("1E-10"), NUMERIC)
    with pytest.raises(NumericOutOfRange):
        encode_datum(Decimal("1E-29"), NUMERIC)


@pytest.mark.parametrize(
    ("order", "null_hex", "one_hex"),
    [
        (ASC, "01", "00 80000001"),
        (ASC_NULLS_FIRST, "00", "01 80000001"),
        (DESC, "fe", "ff 7ffffffe"),
        (DESC_NULLS_LAST, "ff", "fe 7ffffffe"),
    ],
)
def test_null_tags_and_desc_inversion(order: OrderType, null_hex: str, one_hex: str) -> None:
    assert encode_datum(None, INT, order) == bytes.fromhex(null_hex)
    assert encode_datum(1, INT, order) == bytes.fromhex(one_hex.replace(" ", ""))
    assert decode_datum(bytes.fromhex(null_hex), 0, INT, order) == (None, 1)
    assert decode_datum(bytes.fromhex(one_hex.replace(" ", "")), 0, INT, order) == (1, 5)


def test_string_groups_and_scalar_bytes() -> None:
    assert encode_datum("abc", VARCHAR) == bytes.fromhex("00 01 61 62 63 00 00 00 00 00 03")
    assert encode_datum("", VARCHAR) == b"\x00\x00"
    assert encode_datum("abcdefgh", VARCHAR) == b"\x00\x01abcdefgh\x08"
    assert encode_datum("abcdefghi", VARCHAR) == b"\x00\x01abcdefgh\x09i" + bytes(7) + b"\x01"
    assert encode_datum(b"\x00" * 16, BYTEA) == b"\x00\x01" + bytes(8) + b"\x09" + bytes(8) + b"\x08"
    assert encode_datum('{"a": 1}', JSONB) == encode_datum('{"a": 1}', VARCHAR)
    assert encode_datum(dt.date(1970, 1, 1), DATE) == b"\x00" + (719_163 + 2**31).to_bytes(4, "big")
    assert encode_datum(dt.date(1, 1, 1), DATE) == b"\x00\x80\x00\x00\x01"
    assert encode_datum(-1, BIGINT) == b"\x00\x7f" + b"\xff" * 7
    assert encode_datum(True, BOOLEAN) == b"\x00\x01"
    assert encode_datum(dt.time(0, 0, 1, 5), TIME) == b"\x00" + (1).to_bytes(4, "big") + (5000).to_bytes(
        4, "big"
    )
    ts = dt.datetime(1969, 12, 31, 23, 59, 59, 500_000)  # -0.5 s: seconds -1, nanos 5e8
    assert encode_datum(ts, TIMESTAMP) == b"\x00" + (2**63 - 1).to_bytes(8, "big") + (500_000_000).to_bytes(
        4, "big"
    )
    tz = dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)
    assert encode_datum(tz, TIMESTAMPTZ) == b"\x00" + (2**63 + 1).to_bytes(8, "big")
    assert encode_datum(Interval(0, 0, 1), INTERVAL) == b"\x00" + (2**127 + 1).to_bytes(16, "big")


def test_float_normalization() -> None:
    assert encode_datum(-0.0, DOUBLE) == encode_datum(0.0, DOUBLE) == b"\x00\x80" + bytes(7)
    other_nan = struct.unpack(">d", bytes.fromhex("fff8000000000001"))[0]
    assert encode_datum(other_nan, DOUBLE) == encode_datum(math.nan, DOUBLE) == b"\x00\xff\xf8" + bytes(6)
    assert encode_datum(math.nan, REAL) == b"\x00\xff\xc0\x00\x00"
    assert encode_datum(math.inf, DOUBLE) < encode_datum(math.nan, DOUBLE)


def test_interval_month_is_thirty_days_and_decodes_justified() -> None:
    month = encode_datum(Interval(1, 0, 0), INTERVAL)
    assert month == encode_datum(Interval(0, 30, 0), INTERVAL)
    value, _ = decode_datum(encode_datum(Interval(0, 45, -1), INTERVAL), 0, INTERVAL)
    assert value.identical(Interval(1, 14, 86_400_000_000 - 1))
    extreme = Interval(I32_MAX, I32_MAX, I64_MAX)  # beyond the justified form: saturated, same total
    got, _ = decode_datum(encode_datum(extreme, INTERVAL), 0, INTERVAL)
    assert got == extreme and got.months == I32_MAX


def test_composite_bytes() -> None:
    lst = encode_datum([1, None], list_of(INT))
    inner = b"\x00\x80\x00\x00\x01" + b"\x01"  # elements: composite tags, never inverted
    assert lst == b"\x00\x01" + inner + bytes(2) + b"\x06"
    assert encode_datum([1, None], list_of(INT), DESC) == bytes(b ^ 0xFF for b in lst)
    st_ = encode_datum({"a": None, "b": "x"}, SMALL_STRUCT)
    assert st_ == b"\x00" + b"\x01" + b"\x00\x01x" + bytes(7) + b"\x01"
    assert encode_datum([], list_of(INT)) == b"\x00\x00"


# ---------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "t", "error", "message"),
    [
        (2**40, INT, NumericOutOfRange, "integer"),
        (2**15, SMALLINT, NumericOutOfRange, "smallint"),
        (2**63, BIGINT, NumericOutOfRange, "bigint"),
        (True, INT, InvalidInput, "integer"),
        ("2020-01-01", DATE, InvalidInput, "date"),
        (dt.datetime(2020, 1, 1), DATE, InvalidInput, "date"),
        (dt.datetime(2020, 1, 1, tzinfo=dt.UTC), TIMESTAMP, InvalidInput, "timestamp"),
        (1, VARCHAR, InvalidInput, "character varying"),
        ("\ud800", VARCHAR, InvalidInput, "character varying"),
        ("x", BYTEA, InvalidInput, "bytea"),
        (1, BOOLEAN, InvalidInput, "boolean"),
        (1e39, REAL, NumericOutOfRange, "real"),
        (10**400, DOUBLE, NumericOutOfRange, "double"),
        (Decimal(10**38 + 1), NUMERIC, NumericOutOfRange, "numeric"),
        (Decimal("1E+38"), NUMERIC, NumericOutOfRange, "numeric"),  # beyond 2**96
        (Decimal(2**96), NUMERIC, NumericOutOfRange, "numeric"),
        (Decimal("1E+60"), NUMERIC, NumericOutOfRange, "numeric"),
        ("12x", NUMERIC, InvalidInput, "numeric"),
        (Decimal("1E-29"), NUMERIC, NumericOutOfRange, "numeric"),  # beyond 28 fraction digits
        ((1, 2), INTERVAL, InvalidInput, "interval"),
        ([1], SMALL_STRUCT, InvalidInput, "struct"),
        ([2**40], list_of(INT), NumericOutOfRange, "integer"),
        ({"a": "x"}, SMALL_STRUCT, InvalidInput, "integer"),
    ],
)
def test_encode_validates(value: Any, t: DataType, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        encode_datum(value, t)


def test_vectorized_validates_ranges() -> None:
    with pytest.raises(InvalidInput):
        encode_columns([pa.array(["x"])], [INT], [ASC])
    with pytest.raises(NumericOutOfRange):
        encode_columns([pa.array([2**40])], [INT], [ASC])  # cast int64 -> int32 overflows
    with pytest.raises(NumericOutOfRange):  # scale 29: fits the Arrow struct, not NUMERIC
        storage = pa.StructArray.from_arrays(
            [pa.array([1], pa.decimal128(38, 0)), pa.array([29], pa.int8())], names=["unscaled", "scale"]
        )
        encode_columns([wrap(storage)], [NUMERIC], [ASC])
    with pytest.raises(InvalidInput):  # a column of another layout is refused, not misread
        encode_columns([pa.array([Decimal("1.5")], pa.decimal128(38, 10))], [NUMERIC], [ASC])
    with pytest.raises(InvalidInput):
        encode_columns([pa.array([1]), pa.array([1, 2])], [INT, INT], [ASC, ASC])


# ---------------------------------------------------------------------------------------------
# Byte order == PostgreSQL ORDER BY order
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", ALL_TYPES, ids=type_id)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_byte_order_is_pg_order(t: DataType, data: st.DataObject) -> None:
    values = data.draw(st.lists(maybe(t), min_size=2, max_size=12))
    for order in ORDERS:
        keys = [encode_datum(v, t, order) for v in values]
        check_sorted_like_pg(values, keys, functools.partial(order_cmp, t=t, order=order))


def test_edge_values_sort_like_pg() -> None:
    """Every edge value of every scalar type at once, in every order."""
    edges: dict[DataType, list[Any]] = {
        VARCHAR: [*EDGE_STRINGS, None],
        NUMERIC: [Decimal(s) for s in EDGE_DECIMALS] + [None],
        DOUBLE: [math.nan, -math.nan, -math.inf, math.inf, -0.0, 0.0, 5e-324, -5e-324, -1.5, 2.0, None],
        REAL: [math.nan, -math.inf, math.inf, -0.0, 0.0, 1.5, -1.5, None],
        INTERVAL: [Interval(1, 0, 0), Interval(0, 30, 0), Interval(0, 0, -1), Interval(-1, 31, 5), None],
    }
    for t, values in edges.items():
        for order in ORDERS:
            keys = [encode_datum(v, t, order) for v in values]
            check_sorted_like_pg(values, keys, functools.partial(order_cmp, t=t, order=order))


KEY_TYPES = [INT, VARCHAR, DOUBLE, NUMERIC, list_of(SMALLINT)]


@FAST
@given(
    orders=st.lists(st.sampled_from(ORDERS), min_size=len(KEY_TYPES), max_size=len(KEY_TYPES)),
    rows=st.lists(
        st.tuples(
            *(
                st.sampled_from([None, *samples])
                for samples in (
                    [-1, 0, 1],
                    ["", "a", "ab", "b"],
                    [math.nan, -0.0, 0.0, 1.0],
                    [Decimal(-1), Decimal("0.5"), Decimal(2)],
                    [[], [1], [1, None], [2]],
                )
            )
        ),
        min_size=2,
        max_size=25,
    ),
)
def test_composite_keys_sort_lexicographically(orders: list[OrderType], rows: list[tuple[Any, ...]]) -> None:
    keys = [encode_row(r, KEY_TYPES, orders) for r in rows]
    check_sorted_like_pg(rows, keys, lambda a, b: row_cmp(a, b, KEY_TYPES, orders))


# ---------------------------------------------------------------------------------------------
# Round trips, scalar path
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", ALL_TYPES, ids=type_id)
@FAST
@given(data=st.data())
def test_scalar_round_trip(t: DataType, data: st.DataObject) -> None:
    v = data.draw(maybe(t))
    prefix = data.draw(st.binary(max_size=3))
    for order in ORDERS:
        enc = encode_datum(v, t, order)
        buf = prefix + enc + b"\xaa"  # decoding starts at pos and stops at the datum's end
        got, pos = decode_datum(buf, len(prefix), t, order)
        assert pos == len(prefix) + len(enc)
        assert encoded_len(buf, len(prefix), t, order) == len(enc)
        assert same(got, expected(v, t), t), (got, v)
        assert encode_datum(got, t, order) == enc


@FAST
@given(data=st.data())
def test_row_round_trip_and_prefixes(data: st.DataObject) -> None:
    types = data.draw(st.lists(st.sampled_from(ALL_TYPES), min_size=1, max_size=5))
    orders = data.draw(st.lists(st.sampled_from(ORDERS), min_size=len(types), max_size=len(types)))
    row = tuple(data.draw(maybe(t)) for t in types)
    key = encode_row(row, types, orders)
    got, pos = decode_row(key, types, orders)
    assert pos == len(key)
    assert all(same(g, expected(v, t), t) for g, v, t in zip(got, row, types, strict=True))
    for k in range(len(types)):  # a prefix of the columns ends where its own encoding ends
        assert decode_row(key, types[:k], orders[:k])[1] == len(encode_row(row[:k], types[:k], orders[:k]))
    for cut in range(len(key)):  # every truncation is detected
        with pytest.raises(DataCorruption):
            decode_row(key[:cut], types, orders)


# ---------------------------------------------------------------------------------------------
# Vectorized path: identical bytes, round trips, offsets
# ---------------------------------------------------------------------------------------------


def arrow_column(values: list[Any], t: DataType, how: str) -> pa.Array | pa.ChunkedArray:
    """The column in some physical layout: plain, sliced (offset != 0) or chunked."""
    if how == "sliced":
        return to_arrow([values[0] if values else None, *values, None], t).slice(1, len(values))
    if how == "chunked":
        half = len(values) // 2
        return pa.chunked_array([to_arrow(values[:half], t), to_arrow(values[half:], t)], type=t.arrow)
    return to_arrow(values, t)


@pytest.mark.parametrize("t", ALL_TYPES, ids=type_id)
@FAST
@given(data=st.data())
def test_vectorized_matches_scalar_and_round_trips(t: DataType, data: st.DataObject) -> None:
    values = data.draw(st.lists(maybe(t), max_size=12))
    how = data.draw(st.sampled_from(["plain", "sliced", "chunked"]))
    col = arrow_column(values, t, how)
    for order in ORDERS:
        keys = encode_columns([col], [t], [order])
        want = [encode_datum(v, t, order) for v in values]
        assert keys.to_list() == want
        cols, ends = decode_keys(keys, [t], [order])
        assert cols[0].type == t.arrow
        assert ends.tolist() == [len(k) for k in want]
        got = from_arrow(cols[0], t)
        assert all(same(g, expected(v, t), t) for g, v in zip(got, values, strict=True)), (got, values)


@FAST
@given(data=st.data())
def test_vectorized_multi_column_with_start_offsets(data: st.DataObject) -> None:
    types = data.draw(st.lists(st.sampled_from(ALL_TYPES), min_size=1, max_size=4))
    orders = data.draw(st.lists(st.sampled_from(ORDERS), min_size=len(types), max_size=len(types)))
    n = data.draw(st.integers(0, 8))
    rows = [tuple(data.draw(maybe(t)) for t in types) for _ in range(n)]
    columns = [to_arrow([r[i] for r in rows], t) for i, t in enumerate(types)]
    keys = encode_columns_arrow(columns, types, orders)
    assert isinstance(keys, pa.BinaryArray)
    assert keys.to_pylist() == [encode_row(r, types, orders) for r in rows]
    # a 2-byte vnode prefix in front of every key, skipped with start=2
    prefixed = [bytes([i % 256, 7]) + k for i, k in enumerate(keys.to_pylist())]
    cols, ends = decode_keys(pa.array(prefixed, pa.binary()), types, orders, start=np.full(n, 2))
    assert ends.tolist() == [len(k) for k in prefixed]
    for i, t in enumerate(types):
        got = from_arrow(cols[i], t)
        assert all(same(g, expected(r[i], t), t) for g, r in zip(got, rows, strict=True))
    # decoding only a prefix of the columns
    k = data.draw(st.integers(0, len(types)))
    cols, ends = decode_keys(Ragged.from_list(keys.to_pylist()), types[:k], orders[:k])
    assert len(cols) == k
    assert ends.tolist() == [len(encode_row(r[:k], types[:k], orders[:k])) for r in rows]


def test_vectorized_ignores_values_under_nulls() -> None:
    """NULL struct / list slots encode as NULL whatever their children or offsets hold."""
    structs = pa.StructArray.from_arrays(
        [pa.array([1, 2, 3], pa.int32()), pa.array(["a", "b", "c"])],
        fields=[pa.field("a", pa.int32()), pa.field("b", pa.string())],
        mask=pa.array([False, True, False]),
    )
    keys = encode_columns([structs], [SMALL_STRUCT], [DESC])
    assert keys.to_list() == [
        encode_datum(v, SMALL_STRUCT, DESC) for v in [{"a": 1, "b": "a"}, None, {"a": 3, "b": "c"}]
    ]
    lists = pa.ListArray.from_arrays(
        pa.array([0, 2, 4, 5], pa.int32()),
        pa.array([1, 2, 3, 4, 5], pa.int32()),
        mask=pa.array([False, True, False]),
    )
    keys = encode_columns([lists.slice(1)], [list_of(INT)], [ASC])
    assert keys.to_list() == [encode_datum(None, list_of(INT)), encode_datum([5], list_of(INT))]


def test_vectorized_long_strings_and_many_rows() -> None:
    rng = np.random.default_rng(7)
    values: list[str | None] = [
        "".join(chr(c) for c in rng.integers(1, 0x800, int(n))) for n in rng.integers(0, 300, 500)
    ]
    values[3] = None
    for order in ORDERS:
        keys = encode_columns([pa.array(values)], [VARCHAR], [order])
        assert keys.to_list() == [encode_datum(v, VARCHAR, order) for v in values]
        cols, _ = decode_keys(keys, [VARCHAR], [order])
        assert cols[0].to_pylist() == values


def test_empty_key_has_no_columns() -> None:
    assert encode_columns([], [], [], num_rows=3).to_list() == [b"", b"", b""]
    assert encode_row((), [], []) == b""
    cols, ends = decode_keys(Ragged.from_list([b"\x00\x07", b"\x01\x02"]), [], [], start=2)
    assert cols == [] and ends.tolist() == [2, 2]
    with pytest.raises(InvalidInput):
        encode_columns([], [], [])  # the row count is unknown


def test_vectorized_decode_of_empty_input() -> None:
    cols, ends = decode_keys(pa.array([], pa.binary()), [INT, VARCHAR, list_of(INT)], [ASC, DESC, ASC])
    assert [len(c) for c in cols] == [0, 0, 0] and len(ends) == 0
    assert len(encode_columns([pa.array([], pa.int32())], [INT], [ASC])) == 0


# ---------------------------------------------------------------------------------------------
# Corruption
# ---------------------------------------------------------------------------------------------

BAD_KEYS: list[tuple[DataType, OrderType, bytes]] = [
    (INT, ASC, b"\x02\x80\x00\x00\x01"),  # tag 02 is no tag of ASC
    (INT, DESC, b"\x00\x80\x00\x00\x01"),  # ASC tag under DESC
    (INT, ASC, b"\x00\x80\x00"),  # truncated
    (BOOLEAN, ASC, b"\x00\x02"),
    (VARCHAR, ASC, b"\x00\x02"),  # header neither 00 nor 01
    (VARCHAR, ASC, b"\x00\x01abc\x00\x00\x00\x00\x00\x00"),  # marker 0
    (VARCHAR, ASC, b"\x00\x01abc\x00\x00\x00\x00\x00\x0a"),  # marker 10
    (VARCHAR, ASC, b"\x00\x01abc\x00\x00\x00\x00\x01\x03"),  # nonzero padding
    (VARCHAR, ASC, b"\x00\x01\xff\xfe\x00\x00\x00\x00\x00\x00\x02"),  # invalid UTF-8
    (VARCHAR, ASC, b"\x00\x01abcdefgh\x09"),  # group promised, missing
    (DOUBLE, ASC, b"\x00\x7f\xff\xff\xff\xff\xff\xff\xff"),  # -0.0
    (DOUBLE, ASC, b"\x00\xff\xf8\x00\x00\x00\x00\x00\x01"),  # non-canonical NaN
    (REAL, ASC, b"\x00\xff\xc0\x00\x01"),
    (NUMERIC, ASC, b"\x00\x00"),  # no such header
    (NUMERIC, ASC, b"\x00\x18\x00"),  # leading zero digit
    (NUMERIC, ASC, b"\x00\x18\x03\x00"),  # trailing zero digit
    (NUMERIC, ASC, b"\x00\x18\xd0"),  # digit > 99
    (NUMERIC, ASC, b"\x00\x18\x03"),  # no terminator
    (NUMERIC, ASC, b"\x00\x22\x05\x02"),  # big-exponent form with a small exponent
    (NUMERIC, ASC, b"\x00\x16\xf0\x02"),  # 1E-30: more than NUMERIC_SCALE fraction digits
    (NUMERIC, ASC, b"\x00\x22\x14\x02"),  # 1E+38: more digits than NUMERIC holds
    (NUMERIC, ASC, b"\x00\x22\x1a\x02"),  # 1E+50
    (TIME, ASC, b"\x00" + (86_400).to_bytes(4, "big") + bytes(4)),
    (TIME, ASC, b"\x00" + bytes(4) + (1).to_bytes(4, "big")),  # nanos not whole micros
    (TIMESTAMP, ASC, b"\x00" + (2**63).to_bytes(8, "big") + (10**9).to_bytes(4, "big")),
    (TIMESTAMP, ASC, b"\x00" + b"\xff" * 8 + bytes(4)),  # beyond int64 micros
    (DATE, ASC, b"\x00\x00\x00\x00\x00"),  # far before any representable date
    (list_of(INT), ASC, b"\x00\x01\x02" + bytes(7) + b"\x01"),  # element tag 02
    (list_of(INT), ASC, b"\x00\x01\x00\x80" + bytes(6) + b"\x02"),  # element truncated
    (SMALL_STRUCT, ASC, b"\x00\x03"),  # field tag 03
]


@pytest.mark.parametrize(("t", "order", "key"), BAD_KEYS)
def test_corrupt_keys_raise(t: DataType, order: OrderType, key: bytes) -> None:
    with pytest.raises(DataCorruption):
        decode_datum(key, 0, t, order)
    with pytest.raises(DataCorruption):
        decode_keys(Ragged.from_list([key]), [t], [order])


def test_numeric_specials_decode_into_an_arrow_column() -> None:
    cols, _ = decode_keys(Ragged.from_list([b"\x00\x24", b"\x00\x23", b"\x00\x07"]), [NUMERIC], [ASC])
    assert [str(d) for d in from_arrow(cols[0], NUMERIC)] == ["NaN", "Infinity", "-Infinity"]


def check_garbage(buf: bytes, t: DataType, order: OrderType) -> None:
    """Decoding garbage raises DataCorruption or yields a value whose encoding is the bytes read."""
    try:
        v, pos = decode_datum(buf, 0, t, order)
    except DataCorruption:
        pass
    else:
        if isinstance(v, Decimal) and not v.is_finite():  # decodable, but never stored
            enc = buf[:1] + bytes(b ^ (0xFF if order.descending else 0) for b in encode_decimal(v))
        else:
            enc = encode_datum(v, t, order)
        assert enc == buf[:pos]
        assert encoded_len(buf, 0, t, order) == pos
    try:
        cols, ends = decode_keys(Ragged.from_list([buf]), [t], [order])
    except DataCorruption:
        pass
    else:
        assert encode_columns(cols, [t], [order]).to_list() == [buf[: int(ends[0])]]


@pytest.mark.parametrize("t", ALL_TYPES, ids=type_id)
@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=40), order=st.sampled_from(ORDERS))
def test_garbage_never_decodes_to_a_wrong_value(t: DataType, body: bytes, order: OrderType) -> None:
    nonnull = encode_datum(None, t, order)[0] ^ 0x01  # the non-NULL tag of this order
    check_garbage(bytes([nonnull]) + body, t, order)


@pytest.mark.parametrize("t", ALL_TYPES, ids=type_id)
@FAST
@given(data=st.data())
def test_truncated_or_mutated_keys_are_detected(t: DataType, data: st.DataObject) -> None:
    order = data.draw(st.sampled_from(ORDERS))
    key = encode_datum(data.draw(values_of(t)), t, order)
    cut = data.draw(st.integers(0, len(key) - 1))
    with pytest.raises(DataCorruption):
        decode_datum(key[:cut], 0, t, order)
    with pytest.raises(DataCorruption):
        decode_keys(Ragged.from_list([key[:cut], key]), [t], [order])
    mutated = bytearray(key)
    mutated[data.draw(st.integers(0, len(key) - 1))] = data.draw(st.integers(0, 255))
    check_garbage(bytes(mutated), t, order)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_vectorized_truncation_is_detected(data: st.DataObject) -> None:
    types = data.draw(st.lists(st.sampled_from(ALL_TYPES), min_size=1, max_size=3))
    orders = data.draw(st.lists(st.sampled_from(ORDERS), min_size=len(types), max_size=len(types)))
    key = encode_row(tuple(data.draw(maybe(t)) for t in types), types, orders)
    for cut in range(len(key)):
        with pytest.raises(DataCorruption):
            decode_keys(Ragged.from_list([key, key[:cut], key]), types, orders)  # bytes follow the cut
    with pytest.raises(DataCorruption):
        decode_keys(Ragged.from_list([key]), types, orders, start=np.array([len(key) + 1]))


def test_sorting_vectorized_keys_orders_rows() -> None:
    """A larger cross-check: sorting encoded keys orders rows like a multi-key sort."""
    rng = np.random.default_rng(3)
    n = 2000
    ints = pa.array(rng.integers(-5, 5, n), pa.int64())
    strs = pa.array([None if i % 17 == 0 else "k" * int(rng.integers(0, 12)) for i in range(n)])
    orders = [DESC, ASC_NULLS_FIRST]
    keys = encode_columns([ints, strs], [BIGINT, VARCHAR], orders).to_list()
    by_key = sorted(range(n), key=lambda i: keys[i])
    rows = list(zip(ints.to_pylist(), strs.to_pylist(), strict=True))

    def cmp(i: int, j: int) -> int:
        return row_cmp(rows[i], rows[j], [BIGINT, VARCHAR], orders) or i - j

    by_cmp = sorted(range(n), key=functools.cmp_to_key(cmp))
    assert [rows[i] for i in by_key] == [rows[i] for i in by_cmp]
