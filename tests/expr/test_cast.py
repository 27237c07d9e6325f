"""CAST between types: rounding, range errors, text forms, date/time conversions, composites."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest
from expr_helpers import Col, bind, evaluate, fails

from piestream.common.interval import Interval
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
    list_of,
    struct_of,
)
from piestream.expr import InputRef, cast

UTC = dt.UTC


def cast_col(values: list, src: DataType, dst: DataType) -> list:
    """CAST over a column (the runtime kernel, not literal folding)."""
    _, chunk = bind("is_null", Col(values, src))
    return evaluate(cast(InputRef(0, src), dst), chunk)


@pytest.mark.parametrize(
    ("values", "src", "dst", "expected"),
    [
        ([1, None, -(2**15)], INT, SMALLINT, [1, None, -(2**15)]),
        ([2**40], BIGINT, DOUBLE, [float(2**40)]),
        ([2**63 - 1], BIGINT, NUMERIC, [Decimal(2**63 - 1)]),
        ([5], SMALLINT, BIGINT, [5]),
        ([Decimal("2.5"), Decimal("-2.5"), Decimal("2.4999999999")], NUMERIC, INT, [3, -3, 2]),
        ([Decimal("9223372036854775807.4")], NUMERIC, BIGINT, [2**63 - 1]),
        ([0.5, 1.5, 2.5, -2.5, 2.6], DOUBLE, INT, [0, 2, 2, -2, 3]),  # rint: half to even
        ([2.5], REAL, SMALLINT, [2]),
        (
            [
                0.1,
                1e-11,
                123456.78901234567,
                1e20,
            ],  # float8_numeric: 15 significant digits, no rounding to a scale
            DOUBLE,
            NUMERIC,
            [Decimal("0.1"), Decimal("0.00000000001"), Decimal("123456.789012346"), Decimal("1E+20")],
        ),
        ([0.1], REAL, NUMERIC, [Decimal("0.1")]),
        (
            [Decimal("0.1"), Decimal("123456789012345678.9"), None],
            NUMERIC,
            DOUBLE,
            [0.1, 1.2345678901234568e17, None],
        ),
        ([Decimal("0.1")], NUMERIC, REAL, [pytest.approx(0.1)]),
        ([1.5], DOUBLE, REAL, [1.5]),
        ([0.1], REAL, DOUBLE, [pytest.approx(0.1, rel=1e-7)]),
        ([0, 7, None], INT, BOOLEAN, [False, True, None]),
        ([True, False], BOOLEAN, INT, [1, 0]),
    ],
)
def test_numeric_casts(values: list, src: DataType, dst: DataType, expected: list) -> None:
    assert cast_col(values, src, dst) == expected


@pytest.mark.parametrize(
    ("values", "src", "dst", "message"),
    [
        ([2**31], BIGINT, INT, "integer out of range"),
        ([2**15], INT, SMALLINT, "smallint out of range"),
        ([Decimal("2147483647.5")], NUMERIC, INT, "integer out of range"),
        ([Decimal("9999999999999999999")], NUMERIC, BIGINT, "bigint out of range"),
        ([2147483647.5], DOUBLE, INT, "integer out of range"),
        ([float("nan")], DOUBLE, INT, "integer out of range"),
        ([float("inf")], DOUBLE, BIGINT, "bigint out of range"),
        ([9.3e18], DOUBLE, BIGINT, "bigint out of range"),
        ([1e39], DOUBLE, REAL, "overflow"),
        ([1e29], DOUBLE, NUMERIC, "value overflows numeric format"),  # beyond 2**96 (README)
        ([1e-30], DOUBLE, NUMERIC, "value overflows numeric format"),  # 28 fraction digits (README)
    ],
)
def test_numeric_cast_errors(values: list, src: DataType, dst: DataType, message: str) -> None:
    fails("22003", cast_col, values, src, dst, match=message)


def test_float_specials_become_numeric_specials() -> None:
    """PostgreSQL: 'NaN'::float8::numeric is NaN, and the infinities map to NUMERIC's."""
    got = cast_col([float("nan"), float("inf"), float("-inf"), None], DOUBLE, NUMERIC)
    assert [None if v is None else str(v) for v in got] == ["NaN", "Infinity", "-Infinity", None]
    back = cast_col([Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")], NUMERIC, DOUBLE)
    assert math.isnan(back[0]) and back[1:] == [math.inf, -math.inf]


@pytest.mark.parametrize(
    ("values", "src", "expected"),
    [
        ([True, False, None], BOOLEAN, ["true", "false", None]),
        ([-5, 0, 2**63 - 1], BIGINT, ["-5", "0", "9223372036854775807"]),
        (
            [
                Decimal("1.50"),
                Decimal("-0.5"),
                Decimal("0"),
                Decimal("100"),
                Decimal("123456789012345678901.5"),
            ],
            NUMERIC,
            ["1.50", "-0.5", "0", "100", "123456789012345678901.5"],  # the value's display scale
        ),
        (
            [1.0, 0.1, 1e15, 1e-5, 123456789012345.6, -0.0, float("nan"), float("inf"), 2.5e-4, 1e100],
            DOUBLE,
            ["1", "0.1", "1e+15", "1e-05", "123456789012345.6", "-0", "NaN", "Infinity", "0.00025", "1e+100"],
        ),
        ([1.5, 1e6, 123456.0, 0.1], REAL, ["1.5", "1e+06", "123456", "0.1"]),
        ([dt.date(2021, 1, 2), dt.date(1, 1, 1)], DATE, ["2021-01-02", "0001-01-01"]),
        (
            [dt.datetime(2021, 1, 2, 3, 4, 5), dt.datetime(2021, 1, 2, 3, 4, 5, 120000)],
            TIMESTAMP,
            ["2021-01-02 03:04:05", "2021-01-02 03:04:05.12"],
        ),
        ([dt.datetime(2021, 1, 2, 3, 4, 5, 1, tzinfo=UTC)], TIMESTAMPTZ, ["2021-01-02 03:04:05.000001+00"]),
        ([dt.time(1, 2, 3), dt.time(0, 0, 0, 500)], TIME, ["01:02:03", "00:00:00.0005"]),
        (
            [Interval(14, 3, 3_600_000_000), Interval(0, 0, -1)],
            INTERVAL,
            ["1 year 2 mons 3 days 01:00:00", "-00:00:00.000001"],
        ),
        ([b"\x01\xff"], BYTEA, ["\\x01ff"]),
        ([[1, None, 3]], list_of(INT), ["{1,NULL,3}"]),
        ([{"a": 1, "b": "x y"}], struct_of(("a", INT), ("b", VARCHAR)), ['(1,"x y")']),
        (['{"a": 1}'], JSONB, ['{"a": 1}']),
    ],
)
def test_to_text(values: list, src: DataType, expected: list) -> None:
    assert cast_col(values, src, VARCHAR) == expected


@pytest.mark.parametrize(
    ("values", "dst", "expected"),
    [
        ([" 12 ", "-3", None], INT, [12, -3, None]),
        (["+7"], BIGINT, [7]),
        (["1.25", "1e3"], NUMERIC, [Decimal("1.25"), Decimal(1000)]),
        (["1.5", "NaN", "-Infinity"], DOUBLE, [1.5, pytest.approx(float("nan"), nan_ok=True), float("-inf")]),
        (["t", "off", "YES"], BOOLEAN, [True, False, True]),
        (["2021-01-02"], DATE, [dt.date(2021, 1, 2)]),
        (["2021-01-02 03:04:05.5"], TIMESTAMP, [dt.datetime(2021, 1, 2, 3, 4, 5, 500000)]),
        (["2021-01-02 03:04:05+02"], TIMESTAMPTZ, [dt.datetime(2021, 1, 2, 1, 4, 5, tzinfo=UTC)]),
        (["1 day 02:00"], INTERVAL, [Interval(0, 1, 7_200_000_000)]),
        (["{1,2}"], list_of(INT), [[1, 2]]),
        (['{"b": 1, "a": [1, 2.50]}'], JSONB, ['{"a": [1, 2.50], "b": 1}']),
    ],
)
def test_from_text(values: list, dst: DataType, expected: list) -> None:
    assert cast_col(values, VARCHAR, dst) == expected


@pytest.mark.parametrize(
    ("value", "dst", "state"),
    [
        ("1.5", INT, "22P02"),
        ("abc", DOUBLE, "22P02"),
        ("99999999999", INT, "22003"),
        ("maybe", BOOLEAN, "22P02"),
        ("2021-13-01", DATE, "22008"),
        ("yesterday-ish", TIMESTAMP, "22007"),
        ("{1,", list_of(INT), "22P02"),
        ("{bad json", JSONB, "22P02"),
    ],
)
def test_from_text_errors(value: str, dst: DataType, state: str) -> None:
    fails(state, cast_col, [value], VARCHAR, dst)


@pytest.mark.parametrize(
    ("values", "src", "dst", "expected"),
    [
        ([dt.date(2021, 1, 2)], DATE, TIMESTAMP, [dt.datetime(2021, 1, 2)]),
        ([dt.date(2021, 1, 2)], DATE, TIMESTAMPTZ, [dt.datetime(2021, 1, 2, tzinfo=UTC)]),
        ([dt.datetime(2021, 1, 2, 3)], TIMESTAMP, TIMESTAMPTZ, [dt.datetime(2021, 1, 2, 3, tzinfo=UTC)]),
        ([dt.datetime(2021, 1, 2, 3, tzinfo=UTC)], TIMESTAMPTZ, TIMESTAMP, [dt.datetime(2021, 1, 2, 3)]),
        ([dt.datetime(1969, 12, 31, 23, 59, 59)], TIMESTAMP, DATE, [dt.date(1969, 12, 31)]),
        ([dt.datetime(1969, 12, 31, 23, 59, 59)], TIMESTAMP, TIME, [dt.time(23, 59, 59)]),
        ([dt.datetime(2021, 1, 2, 3, tzinfo=UTC)], TIMESTAMPTZ, DATE, [dt.date(2021, 1, 2)]),
        ([dt.time(1, 30)], TIME, INTERVAL, [Interval(0, 0, 5_400_000_000)]),
        (
            [Interval(1, 2, 90_000_000_000), Interval(0, 0, -1)],
            INTERVAL,
            TIME,
            [dt.time(1, 0), dt.time(23, 59, 59, 999999)],
        ),
    ],
)
def test_datetime_casts(values: list, src: DataType, dst: DataType, expected: list) -> None:
    assert cast_col(values, src, dst) == expected


def test_jsonb_to_scalars() -> None:
    assert cast_col(["1.5", None], JSONB, NUMERIC) == [Decimal("1.5"), None]
    assert cast_col(["true"], JSONB, BOOLEAN) == [True]
    assert cast_col(["2.5"], JSONB, INT) == [3]
    assert cast_col(["12"], JSONB, DOUBLE) == [12.0]
    fails("22023", cast_col, ['"x"'], JSONB, INT, match="cannot cast jsonb string to type integer")
    fails("22023", cast_col, ["1"], JSONB, BOOLEAN, match="cannot cast jsonb numeric to type boolean")


def test_composite_casts() -> None:
    assert cast_col([[1, None], None, []], list_of(INT), list_of(NUMERIC)) == [[Decimal(1), None], None, []]
    assert cast_col([["1", "2"]], list_of(VARCHAR), list_of(INT)) == [[1, 2]]
    st = struct_of(("a", INT), ("b", VARCHAR))
    out = struct_of(("x", BIGINT), ("y", VARCHAR))
    assert cast_col([{"a": 1, "b": "q"}, None], st, out) == [{"x": 1, "y": "q"}, None]
    fails("22003", cast_col, [[2**40]], list_of(BIGINT), list_of(INT))


def test_sliced_list_cast() -> None:
    import pyarrow as pa

    from piestream.common.chunk import DataChunk

    arr = pa.array([[1], [2, 3], None, [4]], pa.list_(pa.int32())).slice(1, 3)
    out = cast(InputRef(0, list_of(INT)), list_of(BIGINT)).eval(DataChunk([arr]))
    assert out.to_pylist() == [[2, 3], None, [4]]
