"""Arithmetic: integer overflow and division, float checks, exact NUMERIC, math functions."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from expr_helpers import Col, fails, one, run

from piestream.common.text import format_datum
from piestream.common.types import BIGINT, DOUBLE, INT, NUMERIC, REAL, SMALLINT

I32_MAX, I64_MAX = 2**31 - 1, 2**63 - 1


def dec(s: str) -> Decimal:
    return Decimal(s)


# -- integers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "a", "b", "expected"),
    [
        ("+", [1, None, -5], [2, 3, None], [3, None, None]),
        ("-", [1, -(2**31) + 1], [2, 1], [-1, -(2**31)]),
        ("*", [6, -7], [7, 6], [42, -42]),
        ("/", [7, -7, 7, -7, 0], [2, 2, -2, -2, 5], [3, -3, -3, 3, 0]),  # truncates toward zero
        ("%", [7, -7, 7, -7, -(2**31)], [3, 3, -3, -3, -1], [1, -1, 1, -1, 0]),  # sign of the dividend
    ],
)
def test_int_arithmetic(op: str, a: list, b: list, expected: list) -> None:
    assert run(op, Col(a, INT), Col(b, INT)) == expected


@pytest.mark.parametrize(
    ("op", "a", "b", "t", "message"),
    [
        ("+", I32_MAX, 1, INT, "integer out of range"),
        ("-", -(2**31), 1, INT, "integer out of range"),
        ("*", 2**16, 2**16, INT, "integer out of range"),
        ("/", -(2**31), -1, INT, "integer out of range"),
        ("+", 2**15 - 1, 1, SMALLINT, "smallint out of range"),
        ("+", I64_MAX, 1, BIGINT, "bigint out of range"),
        ("*", 2**62, 2, BIGINT, "bigint out of range"),
    ],
)
def test_int_overflow(op: str, a: int, b: int, t: object, message: str) -> None:
    fails("22003", run, op, Col([a], t), Col([b], t), match=message)


def test_int_division_by_zero_and_nulls() -> None:
    fails("22012", run, "/", Col([1], INT), Col([0], INT), match="division by zero")
    fails("22012", run, "%", Col([1], BIGINT), Col([0], BIGINT))
    # a NULL divisor is not a zero divisor
    assert run("/", Col([1, 2], INT), Col([None, 2], INT)) == [None, 1]
    assert run("%", Col([1, 5], INT), Col([None, 3], INT)) == [None, 2]


def test_unary_minus_and_abs() -> None:
    assert run("-", Col([1, None, -3], INT)) == [-1, None, 3]
    fails("22003", run, "-", Col([-(2**31)], INT), match="integer out of range")
    fails("22003", run, "abs", Col([-(2**63)], BIGINT), match="bigint out of range")
    assert run("abs", Col([-2, None], SMALLINT)) == [2, None]
    assert run("abs", Col([-2.5, None], DOUBLE)) == [2.5, None]
    assert run("abs", Col([dec("-2.5")], NUMERIC)) == [dec("2.5")]
    assert run("-", Col([dec("2.5"), dec("0")], NUMERIC)) == [dec("-2.5"), 0]


# -- floats ---------------------------------------------------------------------------------------


def test_float_arithmetic_and_checks() -> None:
    assert run("+", Col([0.1, None], DOUBLE), Col([0.2, 1.0], DOUBLE)) == [0.1 + 0.2, None]
    assert run("/", Col([1.0, -1.0], DOUBLE), Col([4.0, 8.0], DOUBLE)) == [0.25, -0.125]
    assert one("*", float("inf"), 2.0) == float("inf")  # infinite input: no error
    assert math.isnan(one("+", float("nan"), 1.0))
    fails("22012", one, "/", 1.0, 0.0, match="division by zero")
    assert math.isnan(one("/", float("nan"), 0.0))  # NaN / 0 is NaN in PostgreSQL
    fails("22003", one, "*", 1e308, 10.0, match="value out of range: overflow")
    fails("22003", one, "+", 1.7e308, 1.7e308, match="overflow")
    fails("22003", one, "*", 1e-300, 1e-300, match="value out of range: underflow")
    fails("22003", one, "/", 1e-300, 1e300, match="underflow")
    assert run("*", Col([2.5], REAL), Col([2.0], REAL)) == [5.0]
    fails("22003", run, "*", Col([3e38], REAL), Col([10.0], REAL))
    assert run("+", Col([1.5], REAL), Col([0.25], DOUBLE)) == [1.75]


# -- numeric --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "a", "b", "expected"),
    [
        ("+", "0.1", "0.2", "0.3"),
        ("-", "1", "0.0000000001", "0.9999999999"),
        ("*", "0.908", "1234567", "1120986.836"),
        ("*", "1.00000000005", "1", "1.00000000005"),  # scale of a product: the sum of the scales
        ("*", "0.000001", "0.00005", "0.00000000005"),
        ("*", "-0.000001", "0.00005", "-0.00000000005"),
        ("*", "0.000001", "0.00004", "0.00000000004"),
        ("*", "123456789012345.6789", "1000", "123456789012345678.9000"),
        ("*", "99999999999.99", "99999999999.99", "9999999999998000000000.0001"),
        ("/", "1", "3", "0.33333333333333333333"),  # numeric.c's select_div_scale: 16+ digits
        ("/", "2", "3", "0.66666666666666666667"),
        ("/", "-2", "3", "-0.66666666666666666667"),
        ("/", "10", "4", "2.5000000000000000"),
        ("/", "1", "0.0000000003", "3333333333.3333333333"),
        ("/", "12345678901234567890", "0.5", "24691357802469135780.0"),
        ("%", "7.5", "2", "1.5"),
        ("%", "-7.5", "2", "-1.5"),
        ("%", "123456789012345678901", "7", "4"),
    ],
)
def test_numeric_exact(op: str, a: str, b: str, expected: str) -> None:
    """PostgreSQL's results, with its display scales (the text psql shows)."""
    assert format_datum(one(op, dec(a), dec(b)), NUMERIC) == expected


def test_numeric_errors() -> None:
    fails("22012", one, "/", dec("1"), dec("0"))
    fails("22012", one, "%", dec("1"), dec("0"))
    big = dec("70000000000000000000000000000")  # near 2**96, what a stored NUMERIC holds (README)
    fails("22003", one, "*", big, big, match="value overflows numeric format")
    fails("22003", one, "+", big, big)
    assert run("+", Col([dec("1.5"), None], NUMERIC), Col([None, dec("1")], NUMERIC)) == [None, None]


def test_mixed_numeric_types() -> None:
    assert run("+", Col([1], INT), Col([dec("0.5")], NUMERIC)) == [dec("1.5")]
    assert run("*", Col([dec("0.5")], NUMERIC), Col([3.0], DOUBLE)) == [1.5]
    assert run("*", dec("0.908"), Col([100, 2**62], BIGINT)) == [dec("90.8"), dec("4187410904732068216.832")]


# -- math functions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        ("round", [dec("2.5")], dec("3")),
        ("round", [dec("-2.5")], dec("-3")),
        ("round", [2.5], 2.0),  # floats round half to even (rint)
        ("round", [3.5], 4.0),
        ("round", [dec("2.345"), 2], dec("2.35")),
        ("round", [dec("-2.345"), 2], dec("-2.35")),
        ("round", [dec("1234.5"), -2], dec("1200")),
        ("round", [dec("1250"), -2], dec("1300")),
        ("trunc", [dec("-2.7")], dec("-2")),
        ("trunc", [dec("2.789"), 1], dec("2.7")),
        ("trunc", [-2.7], -2.0),
        ("floor", [dec("-2.5")], dec("-3")),
        ("floor", [-2.5], -3.0),
        ("ceil", [dec("-2.5")], dec("-2")),
        ("ceiling", [2.1], 3.0),
        ("sign", [dec("-3.3")], dec("-1")),
        ("sign", [0.0], 0.0),
        ("mod", [-7, 3], -1),
        ("mod", [dec("7.5"), dec("-2")], dec("1.5")),
        ("power", [2, 10], 1024.0),
        ("^", [2.0, -1.0], 0.5),
        ("power", [dec("2"), dec("10")], dec("1024.0000000000000")),  # numeric.c's result scales
        ("power", [dec("2"), dec("0.5")], dec("1.4142135623730950")),
        ("power", [dec("NaN"), dec("0")], dec("1")),
        ("power", [dec("2"), dec("NaN")], dec("NaN")),
        ("sqrt", [16], 4.0),
        ("sqrt", [dec("2")], dec("1.414213562373095")),
        ("sqrt", [dec("16")], dec("4.000000000000000")),
        ("sqrt", [dec("Infinity")], dec("Infinity")),
        ("exp", [dec("1")], dec("2.7182818284590452")),
        ("ln", [dec("2")], dec("0.6931471805599453")),
        ("ln", [dec("NaN")], dec("NaN")),
        ("log10", [dec("1000")], dec("3.0000000000000000")),
        ("exp", [0.0], 1.0),
        ("ln", [1.0], 0.0),
        ("log10", [1000], 3.0),
        ("log", [dec("100")], dec("2.0000000000000000")),
        ("abs", [-5], 5),
        ("cbrt", [27.0], pytest.approx(3.0)),
        ("pi", [], math.pi),
        ("round", [None], None),
    ],
)
def test_math_functions(fn: str, args: list, expected: object) -> None:
    got = one(fn, *args)
    if isinstance(expected, Decimal):  # NUMERIC: PostgreSQL's text, display scale included
        assert isinstance(got, Decimal) and format_datum(got, NUMERIC) == format_datum(expected, NUMERIC)
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("fn", "args", "state", "message"),
    [
        ("sqrt", [-1.0], "2201F", "square root of a negative number"),
        ("sqrt", [dec("-1")], "2201F", "square root of a negative number"),
        ("ln", [0.0], "2201E", "logarithm of zero"),
        ("log10", [-1.0], "2201E", "logarithm of a negative number"),
        ("ln", [dec("0")], "2201E", "logarithm of zero"),
        ("power", [0.0, -1.0], "2201F", "zero raised to a negative power"),
        ("power", [-8.0, 0.5], "2201F", "complex result"),
        ("power", [10.0, 400.0], "22003", "overflow"),
        ("exp", [1000.0], "22003", "overflow"),
        ("mod", [5, 0], "22012", "division by zero"),
    ],
)
def test_math_errors(fn: str, args: list, state: str, message: str) -> None:
    fails(state, one, fn, *args, match=message)


def test_numeric_rounding_columns() -> None:
    vals = [dec("1.25"), dec("-1.25"), None, dec("123456789012345678.5")]
    assert run("round", Col(vals, NUMERIC), 1) == [dec("1.3"), dec("-1.3"), None, dec("123456789012345678.5")]
    assert run("round", Col(vals, NUMERIC)) == [dec("1"), dec("-1"), None, dec("123456789012345679")]
    assert run("round", Col(vals, NUMERIC), Col([0, 1, 1, -1], INT)) == [
        dec("1"),
        dec("-1.3"),
        None,
        dec("123456789012345680"),
    ]
