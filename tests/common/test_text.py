"""PostgreSQL text form of datums: known PostgreSQL 15 outputs, input errors, round trips."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piestream.common.errors import DatetimeOutOfRange, InvalidInput, NumericOutOfRange, PiestreamError
from piestream.common.interval import I32_MAX, I32_MIN, I64_MAX, I64_MIN, Interval
from piestream.common.scalar import normalize_numeric
from piestream.common.text import format_datum, format_interval, parse_datum, parse_interval
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
    SCALAR_TYPES,
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


def f32(x: float) -> float:
    """The float32 value nearest `x`, as REAL datums hold it."""
    return float(np.float32(x))


def raises(
    s: str, t: DataType, cls: type[PiestreamError], sqlstate: str, message: str | None = None
) -> PiestreamError:
    """Parse `s` expecting an error of class `cls` with `sqlstate` (and `message` if given)."""
    with pytest.raises(cls) as info:
        parse_datum(s, t)
    assert info.value.sqlstate == sqlstate
    if message is not None:
        assert info.value.message == message
    return info.value


UTC = dt.UTC

# =============================================================================================
# Output: known PostgreSQL 15 text
# =============================================================================================


@pytest.mark.parametrize(
    ("value", "t", "expected"),
    [
        (True, BOOLEAN, "t"),
        (False, BOOLEAN, "f"),
        (-5, SMALLINT, "-5"),
        (2147483647, INT, "2147483647"),
        (-(2**63), BIGINT, "-9223372036854775808"),
        (7, SERIAL, "7"),
        (Decimal("1.5000000000"), NUMERIC, "1.5000000000"),  # PostgreSQL keeps the value's scale
        (Decimal("2.000"), NUMERIC, "2.000"),
        (Decimal("0"), NUMERIC, "0"),
        (Decimal("-0"), NUMERIC, "0"),
        (Decimal("-0.0000000000"), NUMERIC, "0.0000000000"),  # no negative zero, scale kept
        (Decimal("1E+5"), NUMERIC, "100000"),
        (Decimal("0.0000000001"), NUMERIC, "0.0000000001"),
        (Decimal("-12.340"), NUMERIC, "-12.340"),
        (Decimal("NaN"), NUMERIC, "NaN"),
        (Decimal("Infinity"), NUMERIC, "Infinity"),
        (Decimal("-Infinity"), NUMERIC, "-Infinity"),
        (Decimal("123456789012345678.9"), NUMERIC, "123456789012345678.9"),
        ("héllo, wörld", VARCHAR, "héllo, wörld"),
        ("", VARCHAR, ""),
        ('{"a": 1}', JSONB, '{"a": 1}'),
        (b"\x0a\x0b", BYTEA, "\\x0a0b"),
        (b"", BYTEA, "\\x"),
        (b"\xde\xad\xbe\xef", BYTEA, "\\xdeadbeef"),
        (dt.date(2021, 4, 1), DATE, "2021-04-01"),
        (dt.date(1, 1, 1), DATE, "0001-01-01"),
        (dt.time(12, 34, 56), TIME, "12:34:56"),
        (dt.time(12, 34, 56, 500000), TIME, "12:34:56.5"),
        (dt.time(0, 0, 0, 1), TIME, "00:00:00.000001"),
        (dt.datetime(2021, 4, 1, 12, 34, 56, 123000), TIMESTAMP, "2021-04-01 12:34:56.123"),
        (dt.datetime(2021, 4, 1), TIMESTAMP, "2021-04-01 00:00:00"),
        (dt.datetime(2021, 4, 1, 12, 34, 56, tzinfo=UTC), TIMESTAMPTZ, "2021-04-01 12:34:56+00"),
        (
            dt.datetime(2021, 4, 1, 18, 4, 56, 250000, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
            TIMESTAMPTZ,
            "2021-04-01 12:34:56.25+00",
        ),
        (dt.datetime(2021, 4, 1, 12, 34, 56), TIMESTAMPTZ, "2021-04-01 12:34:56+00"),  # naive = UTC
        (Interval(14, 3, 14706500000), INTERVAL, "1 year 2 mons 3 days 04:05:06.5"),
    ],
)
def test_format_scalars(value: Any, t: DataType, expected: str) -> None:
    assert format_datum(value, t) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e15, "1e+15"),
        (123456789012345.0, "123456789012345"),
        (1e14, "100000000000000"),
        (0.1, "0.1"),
        (1.0, "1"),
        (100.0, "100"),
        (-2.5, "-2.5"),
        (0.0, "0"),
        (-0.0, "-0"),
        (1e-4, "0.0001"),
        (1.5e-5, "1.5e-05"),
        (1e-5, "1e-05"),
        (1e100, "1e+100"),
        (-1.25e-300, "-1.25e-300"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1 / 3, "0.3333333333333333"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (math.nan, "NaN"),
    ],
)
def test_format_double(value: float, expected: str) -> None:
    assert format_datum(value, DOUBLE) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f32(0.1), "0.1"),
        (1000000.0, "1e+06"),
        (123456.0, "123456"),
        (100000.0, "100000"),
        (f32(1 / 3), "0.33333334"),
        (f32(3.4028234663852886e38), "3.4028235e+38"),
        (f32(1e-45), "1e-45"),
        (f32(1.5e-5), "1.5e-05"),
        (f32(0.0001), "0.0001"),
        (f32(-2.5), "-2.5"),
        (-0.0, "-0"),
        (math.inf, "Infinity"),
        (math.nan, "NaN"),
    ],
)
def test_format_real(value: float, expected: str) -> None:
    assert format_datum(value, REAL) == expected


@pytest.mark.parametrize(
    ("iv", "expected"),
    [
        (Interval(14, 3, 14706500000), "1 year 2 mons 3 days 04:05:06.5"),
        (Interval(0, -1, 0), "-1 days"),
        (Interval(0, 1, 0), "1 day"),
        (Interval(1, 0, 0), "1 mon"),
        (Interval(12, 0, 0), "1 year"),
        (Interval(24, 0, 0), "2 years"),
        (Interval(-14, 0, 0), "-1 years -2 mons"),
        (Interval(0, 0, 0), "00:00:00"),
        (Interval(0, 0, -1_000_000), "-00:00:01"),
        (Interval(0, 1, -1_000_000), "1 day -00:00:01"),
        (Interval(0, -1, 3_600_000_000), "-1 days +01:00:00"),
        (Interval(-1, 1, 0), "-1 mons +1 day"),
        (Interval(-1, 0, -1), "-1 mons -00:00:00.000001"),
        (Interval(0, 0, 1), "00:00:00.000001"),
        (Interval(0, 0, 100 * 3_600_000_000), "100:00:00"),
        (Interval(0, 0, I64_MAX), "2562047788:00:54.775807"),
        (Interval(0, 0, I64_MIN), "-2562047788:00:54.775808"),
        (Interval(I32_MIN, I32_MIN, 0), "-178956970 years -8 mons -2147483648 days"),
        (Interval(1, 30, 0), "1 mon 30 days"),
    ],
)
def test_format_interval(iv: Interval, expected: str) -> None:
    assert format_interval(iv) == expected
    assert str(iv) == expected
    assert format_datum(iv, INTERVAL) == expected


PERSON = struct_of(("a", INT), ("b", VARCHAR), ("c", INT))


@pytest.mark.parametrize(
    ("value", "t", "expected"),
    [
        ({"a": 1, "b": "foo", "c": None}, PERSON, "(1,foo,)"),
        ({"a": None, "b": None, "c": None}, PERSON, "(,,)"),
        ({"a": 1, "b": "", "c": 2}, PERSON, '(1,"",2)'),
        ({"a": 1, "b": "a b", "c": 2}, PERSON, '(1,"a b",2)'),
        ({"a": 1, "b": 'x"y', "c": 2}, PERSON, '(1,"x""y",2)'),  # record_out doubles quotes
        ({"a": 1, "b": "a\\b", "c": 2}, PERSON, '(1,"a\\\\b",2)'),
        ({"a": 1, "b": "(x)", "c": 2}, PERSON, '(1,"(x)",2)'),
        ({"a": 1, "b": "x,y", "c": 2}, PERSON, '(1,"x,y",2)'),
        ({"a": 1, "b": "NULL", "c": 2}, PERSON, "(1,NULL,2)"),  # records do not quote NULL text
        ({"a": 1, "b": "{}", "c": 2}, PERSON, "(1,{},2)"),
        ({"s": {"x": 1, "y": 2}}, struct_of(("s", struct_of(("x", INT), ("y", INT)))), '("(1,2)")'),
        ({"l": [1, 2]}, struct_of(("l", list_of(INT))), '("{1,2}")'),
        ({"l": [3]}, struct_of(("l", list_of(INT))), "({3})"),
        ([1, "x", None], PERSON, "(1,x,)"),  # a positional tuple also works
    ],
)
def test_format_struct(value: Any, t: DataType, expected: str) -> None:
    assert format_datum(value, t) == expected


@pytest.mark.parametrize(
    ("value", "t", "expected"),
    [
        ([1, 2, None], list_of(INT), "{1,2,NULL}"),
        ([], list_of(INT), "{}"),
        ([[1, 2], [3]], list_of(list_of(INT)), "{{1,2},{3}}"),
        ([None, [1], []], list_of(list_of(INT)), "{NULL,{1},{}}"),
        (
            ["a b", "", "NULL", "null", 'q"', "x", "back\\slash", "{", "c,d"],
            list_of(VARCHAR),
            '{"a b","","NULL","null","q\\"",x,"back\\\\slash","{","c,d"}',
        ),
        (["(x)"], list_of(VARCHAR), "{(x)}"),  # parentheses need no quotes in arrays
        ([{"a": 1, "b": "x"}], list_of(struct_of(("a", INT), ("b", VARCHAR))), '{"(1,x)"}'),
        ([{"a": 1}], list_of(struct_of(("a", INT))), "{(1)}"),
        ([1.5, math.nan, -math.inf], list_of(DOUBLE), "{1.5,NaN,-Infinity}"),
        ([dt.date(2021, 4, 1)], list_of(DATE), "{2021-04-01}"),
        ([dt.datetime(2021, 4, 1, 1, 2, 3)], list_of(TIMESTAMP), '{"2021-04-01 01:02:03"}'),
        ([Interval(0, 1, 0)], list_of(INTERVAL), '{"1 day"}'),
        ([b"\x01"], list_of(BYTEA), '{"\\\\x01"}'),
        ([True, False], list_of(BOOLEAN), "{t,f}"),
    ],
)
def test_format_list(value: Any, t: DataType, expected: str) -> None:
    assert format_datum(value, t) == expected


def test_format_rejects_null() -> None:
    with pytest.raises(ValueError):
        format_datum(None, INT)


def test_format_timestamptz_overflow() -> None:
    far_east = dt.timezone(dt.timedelta(hours=1))
    with pytest.raises(DatetimeOutOfRange) as info:
        format_datum(dt.datetime(1, 1, 1, 0, 0, tzinfo=far_east), TIMESTAMPTZ)
    assert info.value.sqlstate == "22008"


# =============================================================================================
# Input: PostgreSQL literals and errors
# =============================================================================================


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("t", True),
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
        ("y", True),
        ("on", True),
        ("1", True),
        ("tr", True),
        ("f", False),
        ("false", False),
        ("No", False),
        ("n", False),
        ("off", False),
        ("of", False),
        ("0", False),
        ("fal", False),
    ],
)
def test_parse_bool(text: str, expected: bool) -> None:
    assert parse_datum(text, BOOLEAN) is expected


@pytest.mark.parametrize("text", ["o", "tru e", "2", "", "yess", "truee", "-1"])
def test_parse_bool_invalid(text: str) -> None:
    raises(text, BOOLEAN, InvalidInput, "22P02", f'invalid input syntax for type boolean: "{text}"')


@pytest.mark.parametrize(
    ("text", "t", "expected"),
    [
        (" 42 ", INT, 42),
        ("+7", INT, 7),
        ("-2147483648", INT, -(2**31)),
        ("007", SMALLINT, 7),
        ("32767", SMALLINT, 32767),
        ("9223372036854775807", BIGINT, 2**63 - 1),
        ("-9223372036854775808", SERIAL, -(2**63)),
        ("\t\n12\r", BIGINT, 12),
    ],
)
def test_parse_int(text: str, t: DataType, expected: int) -> None:
    assert parse_datum(text, t) == expected


@pytest.mark.parametrize("text", ["abc", "1e3", "1.0", "", " ", "1_000", "١٢", "0x10", "- 1", "1 2"])
def test_parse_int_invalid(text: str) -> None:
    raises(text, INT, InvalidInput, "22P02", f'invalid input syntax for type integer: "{text}"')
    raises(text, SMALLINT, InvalidInput, "22P02", f'invalid input syntax for type smallint: "{text}"')


@pytest.mark.parametrize(
    ("text", "t", "name"),
    [
        ("2147483648", INT, "integer"),
        ("99999999999", INT, "integer"),
        ("-2147483649", INT, "integer"),
        ("32768", SMALLINT, "smallint"),
        ("9223372036854775808", BIGINT, "bigint"),
        ("9" * 5000, BIGINT, "bigint"),
    ],
)
def test_parse_int_out_of_range(text: str, t: DataType, name: str) -> None:
    raises(text, t, NumericOutOfRange, "22003", f'value "{text}" is out of range for type {name}')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5e3", "1500"),  # PostgreSQL's display scales: max(0, digits after the point - exponent)
        (" -0.5 ", "-0.5"),
        (".5", "0.5"),
        ("5.", "5"),
        ("+12.340", "12.340"),
        ("1.23456789012", "1.23456789012"),
        ("0.00000000005", "0.00000000005"),
        ("-0.00000000005", "-0.00000000005"),
        ("1E-20", "0.00000000000000000001"),
        ("1e27", "1000000000000000000000000000"),
        ("1.50E1", "15.0"),
        ("79228162514264337593543950335", "79228162514264337593543950335"),  # 2**96 - 1: the largest
    ],
)
def test_parse_numeric(text: str, expected: str) -> None:
    got = parse_datum(text, NUMERIC)
    assert isinstance(got, Decimal)
    assert format_datum(got, NUMERIC) == expected
    assert got.as_tuple().exponent == Decimal(expected).as_tuple().exponent  # the scale is kept


@pytest.mark.parametrize("text", ["abc", "1e", "1_0", "", "1.2.3", "e5", "1e1001", "--1", "0x1"])
def test_parse_numeric_invalid(text: str) -> None:
    raises(text, NUMERIC, InvalidInput, "22P02", f'invalid input syntax for type numeric: "{text}"')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NaN", "NaN"),
        (" nan ", "NaN"),
        ("Infinity", "Infinity"),
        ("-Infinity", "-Infinity"),
        ("inf", "Infinity"),
        ("-inf", "-Infinity"),
        ("+Infinity", "Infinity"),
    ],
)
def test_parse_numeric_specials_as_postgres(text: str, expected: str) -> None:
    got = parse_datum(text, NUMERIC)
    assert isinstance(got, Decimal) and not got.is_finite()
    assert format_datum(got, NUMERIC) == expected


# PostgreSQL's NUMERIC has 131072 digits before the point and 16383 after; piestream's a 96-bit
# unscaled value (28 significant digits, some of 29) and at most 28 after the point (README).
@pytest.mark.parametrize(
    "text",
    [
        "1e38",
        "123456789012345678901234567890123456789",
        "-1e38",
        "1e-29",
        "79228162514264337593543950336",
        "1e29",
    ],
)
def test_parse_numeric_overflow(text: str) -> None:
    raises(text, NUMERIC, NumericOutOfRange, "22003", "value overflows numeric format")  # PostgreSQL's text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5", 1.5),
        (" -2 ", -2.0),
        ("1e308", 1e308),
        ("Infinity", math.inf),
        (" -Infinity", -math.inf),
        ("inf", math.inf),
        ("+INF", math.inf),
        (".5e-3", 0.0005),
        ("5e-324", 5e-324),
        ("0.30000000000000004", 0.30000000000000004),
    ],
)
def test_parse_double(text: str, expected: float) -> None:
    assert parse_datum(text, DOUBLE) == expected


def test_parse_float_nan_and_negative_zero() -> None:
    assert math.isnan(parse_datum("NaN", DOUBLE))
    assert math.isnan(parse_datum("nan", REAL))
    neg = parse_datum("-0", DOUBLE)
    assert neg == 0 and math.copysign(1.0, neg) == -1.0


@pytest.mark.parametrize("text", ["abc", "1.5x", "0x10", "1_0", "", "1e", "in", "1,5"])
def test_parse_float_invalid(text: str) -> None:
    raises(text, DOUBLE, InvalidInput, "22P02", f'invalid input syntax for type double precision: "{text}"')
    raises(text, REAL, InvalidInput, "22P02", f'invalid input syntax for type real: "{text}"')


@pytest.mark.parametrize(
    ("text", "t", "name"),
    [
        ("1e400", DOUBLE, "double precision"),
        ("-1e400", DOUBLE, "double precision"),
        ("1e-400", DOUBLE, "double precision"),
        ("1e39", REAL, "real"),
        ("-3.5e38", REAL, "real"),
        ("1e-50", REAL, "real"),
    ],
)
def test_parse_float_out_of_range(text: str, t: DataType, name: str) -> None:
    raises(text, t, NumericOutOfRange, "22003", f'"{text}" is out of range for type {name}')


def test_parse_real() -> None:
    assert parse_datum("0.1", REAL) == f32(0.1)
    assert parse_datum("3.4028235e38", REAL) == f32(3.4028235e38)
    assert parse_datum("1e-45", REAL) == f32(1e-45)  # the smallest subnormal
    assert parse_datum("1e+06", REAL) == 1000000.0


def test_parse_real_rounds_once() -> None:
    # Just above the midpoint between 1 and the next float32: its nearest double is the midpoint
    # itself, so rounding through double would tie to even (1.0); strtof gives the upper float32.
    text = "1.00000005960464477539062500000000001"
    assert float(text) == 1 + 2**-24
    assert parse_datum(text, REAL) == 1 + 2**-23
    assert parse_datum("1.00000005960464477539062499999999999", REAL) == 1.0
    assert parse_datum("1.000000059604644775390625", REAL) == 1.0  # an exact tie: to even


def test_parse_varchar_keeps_everything() -> None:
    assert parse_datum(" a \t", VARCHAR) == " a \t"
    assert parse_datum("", VARCHAR) == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"b": 1, "a": [1, 2.50, {"aa": null, "b": true}]}',
            '{"a": [1, 2.50, {"b": true, "aa": null}], "b": 1}',
        ),
        ('{"a":1,"a":2}', '{"a": 2}'),
        ('{"bb": 1, "c": 2, "a": 3}', '{"a": 3, "c": 2, "bb": 1}'),
        ("1e2", "100"),
        ("-0", "0"),
        ("1.50", "1.50"),
        ("-1.5E-3", "-0.0015"),
        ("[]", "[]"),
        ("{}", "{}"),
        (' [1,"x",false,null] ', '[1, "x", false, null]'),
        ('"x\\ny\\t\\"q\\"\\\\"', '"x\\ny\\t\\"q\\"\\\\"'),
        ('"\\u00e9\\u0001"', '"é\\u0001"'),
        ('"\\ud83d\\ude00"', '"😀"'),
        ('{"é": 1, "z": 2}', '{"z": 2, "é": 1}'),  # "é" is two bytes long
    ],
)
def test_parse_jsonb(text: str, expected: str) -> None:
    assert parse_datum(text, JSONB) == expected
    assert parse_datum(expected, JSONB) == expected


@pytest.mark.parametrize(
    "text", ["{a:1}", "NaN", "", "[1,]", "{'a': 1}", "Infinity", "[1] x", '"\\ud800"', "1e5000"]
)
def test_parse_jsonb_invalid(text: str) -> None:
    raises(text, JSONB, InvalidInput, "22P02")


def test_parse_jsonb_nul_escape() -> None:
    raises('"\\u0000"', JSONB, InvalidInput, "22P05", "unsupported Unicode escape sequence")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\x0a0B", b"\n\x0b"),
        ("\\x", b""),
        ("\\x 0a 0b ", b"\n\x0b"),
        ("abc", b"abc"),
        ("\\001\\\\x", b"\x01\\x"),
        ("\\377", b"\xff"),
        ("é", b"\xc3\xa9"),
        ("", b""),
        (" x ", b" x "),
    ],
)
def test_parse_bytea(text: str, expected: bytes) -> None:
    assert parse_datum(text, BYTEA) == expected


def test_parse_bytea_invalid() -> None:
    raises("\\x0", BYTEA, InvalidInput, "22023", "invalid hexadecimal data: odd number of digits")
    raises("\\xzz", BYTEA, InvalidInput, "22023", 'invalid hexadecimal digit: "z"')
    raises("\\x0 1", BYTEA, InvalidInput, "22023", 'invalid hexadecimal digit: " "')
    raises("\\9", BYTEA, InvalidInput, "22P02", "invalid input syntax for type bytea")
    raises("ab\\", BYTEA, InvalidInput, "22P02", "invalid input syntax for type bytea")
    raises("\\400", BYTEA, InvalidInput, "22P02")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2021-04-01", dt.date(2021, 4, 1)),
        (" 2021-4-1 ", dt.date(2021, 4, 1)),
        ("2021-04-01 12:34", dt.date(2021, 4, 1)),
        ("2020-02-29", dt.date(2020, 2, 29)),
        ("0001-01-01", dt.date(1, 1, 1)),
        ("9999-12-31", dt.date(9999, 12, 31)),
        ("epoch", dt.date(1970, 1, 1)),
        ("2021-04-01 AD", dt.date(2021, 4, 1)),
    ],
)
def test_parse_date(text: str, expected: dt.date) -> None:
    got = parse_datum(text, DATE)
    assert got == expected and type(got) is dt.date


def test_parse_date_errors() -> None:
    for text in ["foo", "2021-04", "21-04-01", "2021-04-01x", ""]:
        raises(text, DATE, InvalidInput, "22007", f'invalid input syntax for type date: "{text}"')
    for text in ["2021-02-30", "2021-13-01", "2019-02-29", "0000-01-01", "2021-00-10"]:
        raises(text, DATE, DatetimeOutOfRange, "22008", f'date/time field value out of range: "{text}"')
    for text in ["10000-01-01", "infinity", "-infinity", "2021-01-01 BC"]:
        raises(text, DATE, DatetimeOutOfRange, "22008", f'date out of range: "{text}"')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12:34", dt.time(12, 34)),
        ("12:34:56", dt.time(12, 34, 56)),
        ("12:34:56.789", dt.time(12, 34, 56, 789000)),
        ("1:02:03", dt.time(1, 2, 3)),
        ("12:34:56.1234567", dt.time(12, 34, 56, 123457)),
        ("23:59:59.999999", dt.time(23, 59, 59, 999999)),
        ("00:00:60", dt.time(0, 1)),
        (" 04:05:06+02 ", dt.time(4, 5, 6)),  # time without time zone ignores the zone
        ("allballs", dt.time(0)),
    ],
)
def test_parse_time(text: str, expected: dt.time) -> None:
    assert parse_datum(text, TIME) == expected


def test_parse_time_errors() -> None:
    for text in ["12", "abc", "12:34:56:78", "", "12-34"]:
        raises(text, TIME, InvalidInput, "22007", f'invalid input syntax for type time: "{text}"')
    for text in ["12:60", "25:00", "12:00:61"]:
        raises(text, TIME, DatetimeOutOfRange, "22008", f'date/time field value out of range: "{text}"')
    raises("24:00:00", TIME, DatetimeOutOfRange, "22008")  # valid in PostgreSQL, not in Python


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2021-04-01 12:34:56.123", dt.datetime(2021, 4, 1, 12, 34, 56, 123000)),
        ("2021-04-01T12:34:56", dt.datetime(2021, 4, 1, 12, 34, 56)),
        ("2021-04-01", dt.datetime(2021, 4, 1)),
        ("2021-04-01  1:02", dt.datetime(2021, 4, 1, 1, 2)),
        ("2021-04-01 24:00:00", dt.datetime(2021, 4, 2)),
        ("2021-04-01 12:00:00+05", dt.datetime(2021, 4, 1, 12)),  # zone ignored for timestamp
        ("2021-04-01 12:34:56.1234565", dt.datetime(2021, 4, 1, 12, 34, 56, 123456)),
        ("9999-12-31 23:59:59.999999", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
        ("epoch", dt.datetime(1970, 1, 1)),
    ],
)
def test_parse_timestamp(text: str, expected: dt.datetime) -> None:
    got = parse_datum(text, TIMESTAMP)
    assert got == expected and got.tzinfo is None


def test_parse_timestamp_errors() -> None:
    for text in ["2021-04-01 12", "2021-04-01 x", "yesterday", "2021-04-01 12:34:56 +", ""]:
        raises(text, TIMESTAMP, InvalidInput, "22007", f'invalid input syntax for type timestamp: "{text}"')
    for text in ["2021-04-31 00:00", "2021-04-01 24:00:01", "2021-04-01 12:60:00"]:
        raises(text, TIMESTAMP, DatetimeOutOfRange, "22008", f'date/time field value out of range: "{text}"')
    for text in ["9999-12-31 24:00:00", "12021-04-01 00:00", "infinity"]:
        raises(text, TIMESTAMP, DatetimeOutOfRange, "22008", f'timestamp out of range: "{text}"')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2021-04-01 12:34:56+00", dt.datetime(2021, 4, 1, 12, 34, 56)),
        ("2021-04-01 12:34:56", dt.datetime(2021, 4, 1, 12, 34, 56)),
        ("2021-04-01 12:34:56+05:30", dt.datetime(2021, 4, 1, 7, 4, 56)),
        ("2021-04-01 12:34:56+0530", dt.datetime(2021, 4, 1, 7, 4, 56)),
        ("2021-04-01 12:34:56-08", dt.datetime(2021, 4, 1, 20, 34, 56)),
        ("2021-04-01T12:34:56Z", dt.datetime(2021, 4, 1, 12, 34, 56)),
        ("2021-04-01 12:34:56.5 UTC", dt.datetime(2021, 4, 1, 12, 34, 56, 500000)),
        ("2021-04-01 23:30:00-01", dt.datetime(2021, 4, 2, 0, 30)),
        ("2021-04-01", dt.datetime(2021, 4, 1)),
    ],
)
def test_parse_timestamptz(text: str, expected: dt.datetime) -> None:
    got = parse_datum(text, TIMESTAMPTZ)
    assert got == expected.replace(tzinfo=UTC)
    assert got.utcoffset() == dt.timedelta(0)


def test_parse_timestamptz_errors() -> None:
    raises("2021-04-01 12:00+16", TIMESTAMPTZ, DatetimeOutOfRange, "22009")
    raises(
        "0001-01-01 00:00:00+01",
        TIMESTAMPTZ,
        DatetimeOutOfRange,
        "22008",
        'timestamp out of range: "0001-01-01 00:00:00+01"',
    )
    raises(
        "x", TIMESTAMPTZ, InvalidInput, "22007", 'invalid input syntax for type timestamp with time zone: "x"'
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 year 2 months 3 days 4 hours 5 minutes 6.5 seconds", Interval(14, 3, 14706500000)),
        ("1 year 2 mons 3 days 04:05:06.5", Interval(14, 3, 14706500000)),
        ("1 yr 2 mon 3 d 4 hrs 5 mins 6 secs", Interval(14, 3, 14706000000)),
        ("1 Y 2 MONTH 3 DAY 4 H 5 M 6 S", Interval(14, 3, 14706000000)),
        ("1 day 02:03:04", Interval(0, 1, 7384000000)),
        ("02:03:04", Interval(0, 0, 7384000000)),
        ("02:03", Interval(0, 0, 7380000000)),
        ("1:30.5", Interval(0, 0, 90500000)),  # mm:ss.frac
        ("-1 days +02:00:00", Interval(0, -1, 7200000000)),
        ("1 day -00:00:01", Interval(0, 1, -1000000)),
        ("-00:00:01", Interval(0, 0, -1000000)),
        ("@ 1 day ago", Interval(0, -1, 0)),
        ("1 day 2 hours ago", Interval(0, -1, -7200000000)),
        ("-1 years -2 mons", Interval(-14, 0, 0)),
        ("P1Y2M3DT4H5M6S", Interval(14, 3, 14706000000)),
        ("PT10S", Interval(0, 0, 10000000)),
        ("P1W", Interval(0, 7, 0)),
        ("PT1.5S", Interval(0, 0, 1500000)),
        ("P-1Y-2M", Interval(-14, 0, 0)),
        ("P0.5Y", Interval(6, 0, 0)),
        ("P0001-02-03T04:05:06", Interval(14, 3, 14706000000)),
        ("P00010203T040506", Interval(14, 3, 14706000000)),
        ("1.5 days", Interval(0, 1, 43200000000)),
        ("1.5 months", Interval(1, 15, 0)),
        ("1.5 years", Interval(18, 0, 0)),
        ("0.5 weeks", Interval(0, 3, 43200000000)),
        ("-1.5 seconds", Interval(0, 0, -1500000)),
        ("-0.5 days", Interval(0, 0, -43200000000)),
        (".5 hours", Interval(0, 0, 1800000000)),
        ("1 ms", Interval(0, 0, 1000)),
        ("1.5 milliseconds", Interval(0, 0, 1500)),
        ("2 microseconds", Interval(0, 0, 2)),
        ("3 us", Interval(0, 0, 3)),
        ("1 week 2 days", Interval(0, 9, 0)),
        ("10", Interval(0, 0, 10000000)),
        ("1 02:03", Interval(0, 1, 7380000000)),
        ("1-2", Interval(14, 0, 0)),
        ("-1-2", Interval(-14, 0, 0)),
        ("1 decade", Interval(120, 0, 0)),
        ("2 centuries", Interval(2400, 0, 0)),
        ("1 millennium", Interval(12000, 0, 0)),
        ("1day 2hours", Interval(0, 1, 7200000000)),
        ("1 day, 2 hours", Interval(0, 1, 7200000000)),
        ("  1 mon  ", Interval(1, 0, 0)),
        ("00:00:00", Interval(0, 0, 0)),
        ("0 days", Interval(0, 0, 0)),
        ("2147483647 days", Interval(0, I32_MAX, 0)),
        ("-2147483648 days", Interval(0, I32_MIN, 0)),
        ("-178956970 years -8 mons", Interval(I32_MIN, 0, 0)),
        ("2562047788:00:54.775807", Interval(0, 0, I64_MAX)),
        ("-2562047788:00:54.775808", Interval(0, 0, I64_MIN)),
    ],
)
def test_parse_interval(text: str, expected: Interval) -> None:
    got = parse_interval(text)
    assert got.identical(expected), (got, expected)
    assert parse_datum(text, INTERVAL).identical(expected)


@pytest.mark.parametrize(
    "text",
    [
        "abc",
        "",
        "1 day 2 days",
        "1 fortnight",
        "day",
        "5 ago",
        "ago 1 day",
        "1 day 1 day ago",
        "1 2",
        "01:02 03:04",
        "1 hour 01:02",
        "1.5.3 days",
        "1 quarter",
        "infinity",
        "P1X",
        "PT1D",
        "P",
        "1 days hours",
        "1:2:3:4",
    ],
)
def test_parse_interval_invalid(text: str) -> None:
    raises(text, INTERVAL, InvalidInput, "22007", f'invalid input syntax for type interval: "{text}"')


@pytest.mark.parametrize(
    "text",
    [
        "2147483648 days",
        "99999999999 years",
        "178956971 years",
        "1 day 25:61:00",
        "9223372036854775807 hours",
        "2562047788:00:54.775808",
        "-2147483648 days ago",
        "1-12",
        "P1e20D",
    ],
)
def test_parse_interval_overflow(text: str) -> None:
    err = raises(text, INTERVAL, DatetimeOutOfRange, "22015")
    assert err.message == f'interval field value out of range: "{text}"'


@pytest.mark.parametrize(
    ("text", "t", "expected"),
    [
        ("(1,foo,)", PERSON, {"a": 1, "b": "foo", "c": None}),
        ('(1,"a ""b"" \\\\c",)', PERSON, {"a": 1, "b": 'a "b" \\c', "c": None}),
        ('(1,"a \\"b\\"",2)', PERSON, {"a": 1, "b": 'a "b"', "c": 2}),
        ("( 1 , x ,2)", PERSON, {"a": 1, "b": " x ", "c": 2}),
        ('(,"",)', PERSON, {"a": None, "b": "", "c": None}),
        ("(1,a\\,b,2)", PERSON, {"a": 1, "b": "a,b", "c": 2}),
        (" (1,NULL,2) ", PERSON, {"a": 1, "b": "NULL", "c": 2}),
        ('("(1,2)")', struct_of(("s", struct_of(("x", INT), ("y", INT)))), {"s": {"x": 1, "y": 2}}),
        ('("{1,2}")', struct_of(("l", list_of(INT))), {"l": [1, 2]}),
        ("()", struct_of(("a", INT)), {"a": None}),
    ],
)
def test_parse_struct(text: str, t: DataType, expected: dict[str, Any]) -> None:
    assert parse_datum(text, t) == expected


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("1,2,3", "Missing left parenthesis."),
        ("(1,2)", "Too few columns."),
        ("(1,2,3,4)", "Too many columns."),
        ("(1,2", "Unexpected end of input."),
        ('(1,"x,3)', "Unexpected end of input."),
        ("(1,2,3) x", "Junk after right parenthesis."),
    ],
)
def test_parse_struct_malformed(text: str, detail: str) -> None:
    err = raises(text, PERSON, InvalidInput, "22P02", f'malformed record literal: "{text}"')
    assert err.detail == detail


def test_parse_struct_bad_field() -> None:
    raises("(x,y,z)", PERSON, InvalidInput, "22P02", 'invalid input syntax for type integer: "x"')


@pytest.mark.parametrize(
    ("text", "t", "expected"),
    [
        ("{1,2,NULL}", list_of(INT), [1, 2, None]),
        (" { 1 , 2 } ", list_of(INT), [1, 2]),
        ("{}", list_of(INT), []),
        ("{ }", list_of(INT), []),
        ("{{1,2},{3}}", list_of(list_of(INT)), [[1, 2], [3]]),
        ("{ {1} , NULL, {} }", list_of(list_of(INT)), [[1], None, []]),
        ('{"{1,2}"}', list_of(list_of(INT)), [[1, 2]]),
        ('{"a b","",NULL,"NULL",null,x}', list_of(VARCHAR), ["a b", "", None, "NULL", None, "x"]),
        ("{a\\,b, c d ,\\ e\\ }", list_of(VARCHAR), ["a,b", "c d", " e "]),
        ('{"q\\"",back\\\\slash}', list_of(VARCHAR), ['q"', "back\\slash"]),
        ('{a"b c"d}', list_of(VARCHAR), ["ab cd"]),
        (
            '{"(1,x)","(2,)"}',
            list_of(struct_of(("a", INT), ("b", VARCHAR))),
            [{"a": 1, "b": "x"}, {"a": 2, "b": None}],
        ),
        ('{"2021-04-01 01:02:03"}', list_of(TIMESTAMP), [dt.datetime(2021, 4, 1, 1, 2, 3)]),
        ('{"1 day",-00:00:01}', list_of(INTERVAL), [Interval(0, 1, 0), Interval(0, 0, -1_000_000)]),
    ],
)
def test_parse_list(text: str, t: DataType, expected: Any) -> None:
    assert parse_datum(text, t) == expected


def test_parse_list_of_floats() -> None:
    got = parse_datum("{1.5, NaN ,-Infinity}", list_of(DOUBLE))
    assert got[0] == 1.5 and math.isnan(got[1]) and got[2] == -math.inf


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("1,2", 'Array value must start with "{" or dimension information.'),
        ("{1,2", "Unexpected end of input."),
        ("{1,,2}", 'Unexpected "," character.'),
        ("{1,}", 'Unexpected "}" character.'),
        ("{1}x", "Junk after closing right brace."),
        ('{"1}', "Unexpected end of input."),
        ("{{1}}", 'Unexpected "{" character.'),
    ],
)
def test_parse_list_malformed(text: str, detail: str) -> None:
    err = raises(text, list_of(INT), InvalidInput, "22P02", f'malformed array literal: "{text}"')
    assert err.detail == detail


def test_parse_list_bad_element() -> None:
    raises("{1,x}", list_of(INT), InvalidInput, "22P02", 'invalid input syntax for type integer: "x"')
    raises('{""}', list_of(INT), InvalidInput, "22P02", 'invalid input syntax for type integer: ""')


# =============================================================================================
# Round trips: parse_datum(format_datum(v, t), t) == v
# =============================================================================================


def _json_values() -> st.SearchStrategy[Any]:
    """JSON documents PostgreSQL accepts (its text type holds no NUL)."""
    text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
    numbers = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    return st.recursive(
        st.none() | st.booleans() | numbers | text,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=10,
    )


_NUMERIC_VALUES = st.builds(
    lambda digits, scale: normalize_numeric(Decimal(digits).scaleb(-scale)),
    st.integers(-(10**28) + 1, 10**28 - 1),
    st.integers(0, 10),
)

_TZ_OFFSETS = st.integers(-15 * 60, 15 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))

_SCALAR_VALUES: dict[TypeKind, st.SearchStrategy[Any]] = {
    TypeKind.BOOLEAN: st.booleans(),
    TypeKind.SMALLINT: st.integers(-(2**15), 2**15 - 1),
    TypeKind.INT: st.integers(-(2**31), 2**31 - 1),
    TypeKind.BIGINT: st.integers(-(2**63), 2**63 - 1),
    TypeKind.SERIAL: st.integers(-(2**63), 2**63 - 1),
    TypeKind.NUMERIC: _NUMERIC_VALUES,
    TypeKind.REAL: st.floats(width=32),
    TypeKind.DOUBLE: st.floats(),
    TypeKind.VARCHAR: st.text(),
    TypeKind.BYTEA: st.binary(),
    TypeKind.DATE: st.dates(),
    TypeKind.TIME: st.times(),
    TypeKind.TIMESTAMP: st.datetimes(),
    TypeKind.TIMESTAMPTZ: st.datetimes(timezones=st.just(UTC))
    | st.datetimes(
        min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=_TZ_OFFSETS
    ),
    TypeKind.INTERVAL: st.builds(
        Interval, st.integers(I32_MIN, I32_MAX), st.integers(I32_MIN, I32_MAX), st.integers(I64_MIN, I64_MAX)
    )
    | st.builds(Interval, st.integers(-30, 30), st.integers(-40, 40), st.integers(-(10**12), 10**12)),
    TypeKind.JSONB: _json_values().map(lambda v: parse_datum(json.dumps(v), JSONB)),
}


def values_of(t: DataType) -> st.SearchStrategy[Any]:
    """Non-NULL datums of type `t` in their Python form."""
    if t.kind is TypeKind.STRUCT:
        return st.fixed_dictionaries({f.name: st.none() | values_of(f.data_type) for f in t.fields})
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return st.lists(st.none() | values_of(t.elem), max_size=4)
    return _SCALAR_VALUES[t.kind]


def same(a: Any, b: Any, t: DataType) -> bool:
    """`a` (what was parsed) equals `b`: also for NaN, telling -0.0 from 0.0, comparing intervals
    field-wise and timestamptz values as instants (the parsed one in UTC)."""
    if a is None or b is None:
        return a is None and b is None
    k = t.kind
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return bool(a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    if k is TypeKind.INTERVAL:
        return bool(a.identical(b))
    if k is TypeKind.TIMESTAMPTZ:
        return bool(a == b and a.utcoffset() == dt.timedelta(0))
    if k is TypeKind.STRUCT:
        return all(same(a[f.name], b[f.name], f.data_type) for f in t.fields)
    if k is TypeKind.LIST:
        assert t.elem is not None
        return len(a) == len(b) and all(same(x, y, t.elem) for x, y in zip(a, b, strict=True))
    return bool(a == b and type(a) is type(b))


def types_() -> st.SearchStrategy[DataType]:
    """Scalar types and STRUCT / LIST types nested a few levels deep."""
    return st.recursive(
        st.sampled_from(SCALAR_TYPES),
        lambda inner: (
            st.lists(inner, min_size=1, max_size=3).map(
                lambda ts: struct_of(*[(f"f{i}", x) for i, x in enumerate(ts)])
            )
            | inner.map(list_of)
        ),
        max_leaves=6,
    )


@pytest.mark.parametrize("t", SCALAR_TYPES, ids=str)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_round_trip_scalars(t: DataType, data: st.DataObject) -> None:
    v = data.draw(values_of(t))
    text = format_datum(v, t)
    back = parse_datum(text, t)
    assert same(back, v, t), (v, text, back)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_round_trip_composites(data: st.DataObject) -> None:
    t = data.draw(types_())
    v = data.draw(values_of(t))
    text = format_datum(v, t)
    back = parse_datum(text, t)
    assert same(back, v, t), (str(t), v, text, back)


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        Interval,
        st.integers(I32_MIN, I32_MAX),
        st.integers(I32_MIN, I32_MAX),
        st.integers(I64_MIN, I64_MAX),
    )
)
def test_interval_output_reads_back_identical(iv: Interval) -> None:
    assert parse_interval(format_interval(iv)).identical(iv)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_double_output_is_shortest_repr(x: float) -> None:
    def significant(s: str) -> str:
        return s.split("e", maxsplit=1)[0].replace("-", "").replace(".", "").strip("0")

    text = format_datum(x, DOUBLE)
    assert float(text) == x
    assert not text.endswith(".0")
    assert significant(text) == significant(repr(x))  # Python's repr is shortest round-trip too


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text())
def test_composite_text_of_strings(a: str, b: str) -> None:
    t = struct_of(("a", VARCHAR), ("l", list_of(VARCHAR)))
    v = {"a": a, "l": [b, a, None]}
    assert parse_datum(format_datum(v, t), t) == v


@settings(max_examples=200, deadline=None)
@given(_json_values())
def test_jsonb_is_normalized_once(v: Any) -> None:
    text = parse_datum(json.dumps(v), JSONB)
    assert parse_datum(text, JSONB) == text

    def exact(doc: str) -> Any:
        return json.loads(doc, parse_float=Decimal, parse_int=Decimal)

    assert exact(text) == exact(json.dumps(v))
