"""Comparisons (NaN, collation, intervals, composites), Kleene logic, IS predicates, IN, BETWEEN."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from expr_helpers import Col, bind, evaluate, fails, one, run

from piestream.common.interval import Interval
from piestream.common.types import (
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    NUMERIC,
    REAL,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    list_of,
)
from piestream.expr import InputRef, bind_call, literal

NAN, INF = float("nan"), float("inf")
OPS = ["=", "<>", "<", "<=", ">", ">="]


def truth(a: object, b: object, t: object) -> list[object]:
    return [run(op, Col([a], t), Col([b], t))[0] for op in OPS]


@pytest.mark.parametrize(
    ("a", "b", "t", "expected"),
    [
        (1, 2, INT, [False, True, True, True, False, False]),
        (2, 2, INT, [True, False, False, True, False, True]),
        (None, 2, INT, [None] * 6),
        (NAN, NAN, DOUBLE, [True, False, False, True, False, True]),  # NaN = NaN
        (NAN, INF, DOUBLE, [False, True, False, False, True, True]),  # NaN above everything
        (1.0, NAN, DOUBLE, [False, True, True, True, False, False]),
        (-0.0, 0.0, DOUBLE, [True, False, False, True, False, True]),
        (NAN, 1.0, REAL, [False, True, False, False, True, True]),
        ("abc", "abd", VARCHAR, [False, True, True, True, False, False]),
        ("Z", "a", VARCHAR, [False, True, True, True, False, False]),  # C collation: bytes
        ("é", "z", VARCHAR, [False, True, False, False, True, True]),
        ("", "a", VARCHAR, [False, True, True, True, False, False]),
        (b"\x00", b"\xff", BYTEA, [False, True, True, True, False, False]),
        (False, True, BOOLEAN, [False, True, True, True, False, False]),
        (Decimal("1.10"), Decimal("1.1"), NUMERIC, [True, False, False, True, False, True]),
        (dt.date(2021, 1, 1), dt.date(2020, 12, 31), DATE, [False, True, False, False, True, True]),
        (Interval(1, 0, 0), Interval(0, 30, 0), INTERVAL, [True, False, False, True, False, True]),
        (
            Interval(0, 1, 0),
            Interval(0, 0, 86_400_000_000),
            INTERVAL,
            [True, False, False, True, False, True],
        ),
        (Interval(0, 0, -1), Interval(0, 0, 0), INTERVAL, [False, True, True, True, False, False]),
        (
            Interval(0, 1, -1),
            Interval(0, 0, 86_399_999_999),
            INTERVAL,
            [True, False, False, True, False, True],
        ),
        ([1, 2], [1, 3], list_of(INT), [False, True, True, True, False, False]),
        ([1, None], [1, 2], list_of(INT), [False, True, False, False, True, True]),  # NULL element sorts last
        ([1], [1, 0], list_of(INT), [False, True, True, True, False, False]),
    ],
)
def test_comparisons(a: object, b: object, t: object, expected: list) -> None:
    assert truth(a, b, t) == expected


def test_mixed_type_comparisons() -> None:
    assert run("<", Col([1, 3], INT), Col([Decimal("1.5"), Decimal("2.5")], NUMERIC)) == [True, False]
    ts = Col([dt.datetime(2021, 1, 1, 12)], TIMESTAMP)
    assert run(">", ts, Col([dt.date(2021, 1, 1)], DATE)) == [True]
    assert run("=", ts, "2021-01-01 12:00:00") == [True]
    tz = Col([dt.datetime(2021, 1, 1, 12, tzinfo=dt.UTC)], TIMESTAMPTZ)
    assert run("=", tz, "2021-01-01 13:00:00+01") == [True]
    assert run(">=", Col([1.5], REAL), Col([1.5], DOUBLE)) == [True]


def test_kleene_logic() -> None:
    vals = [True, True, True, False, False, False, None, None, None]
    other = [True, False, None] * 3
    a, b = Col(vals, BOOLEAN), Col(other, BOOLEAN)
    assert run("and", a, b) == [True, False, None, False, False, False, None, False, None]
    assert run("or", a, b) == [True, True, True, True, False, None, True, None, None]
    assert run("not", Col([True, False, None], BOOLEAN)) == [False, True, None]
    assert run("and", Col([True], BOOLEAN), True, None) == [None]


def test_and_or_short_circuit_only_on_error() -> None:
    x = InputRef(0, INT)
    guard = bind_call("<>", [x, literal(0)])
    risky = bind_call(">", [bind_call("/", [literal(10), x]), literal(1)])
    _, chunk = bind("+", Col([0, 5, 20, None], INT), 1)
    assert evaluate(bind_call("and", [guard, risky]), chunk) == [False, True, False, None]
    safe_or = bind_call("or", [bind_call("=", [x, literal(0)]), risky])
    assert evaluate(safe_or, chunk) == [True, True, False, None]
    # an error on a row the first operand does not decide still raises
    fails("22012", evaluate, bind_call("and", [bind_call("<", [x, literal(100)]), risky]), chunk)


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        ("is_true", [True, False, False]),
        ("is_not_true", [False, True, True]),
        ("is_false", [False, True, False]),
        ("is_not_false", [True, False, True]),
        ("is_null", [False, False, True]),
        ("is_not_null", [True, True, False]),
    ],
)
def test_is_predicates(fn: str, expected: list) -> None:
    assert run(fn, Col([True, False, None], BOOLEAN)) == expected


def test_is_null_on_any_type() -> None:
    assert run("is_null", Col([[1], None], list_of(INT))) == [False, True]
    assert one("is_null", None) is True
    assert one("is_not_null", "x") is True


def test_is_distinct_from() -> None:
    a = Col([1, 1, None, None, 2], INT)
    b = Col([1, None, None, 3, 3], INT)
    assert run("is_distinct_from", a, b) == [False, True, False, True, True]
    assert run("is_not_distinct_from", a, b) == [True, False, True, False, False]
    nan = Col([NAN, NAN, None], DOUBLE)
    assert run("is_not_distinct_from", nan, Col([NAN, 1.0, None], DOUBLE)) == [True, False, True]
    assert run("is_distinct_from", Col([1], INT), Col([Decimal(1)], NUMERIC)) == [False]


def test_between() -> None:
    x = Col([0, 1, 3, 5, 6, None], INT)
    assert run("between", x, 1, 5) == [False, True, True, True, False, None]
    assert run("not_between", x, 1, 5) == [True, False, False, False, True, None]
    assert run("between", Col([3], INT), None, 5) == [None]
    assert run("between", Col([0], INT), None, 5) == [None]
    assert run("between", Col([9], INT), None, 5) == [False]
    assert run("between", Col([dt.date(2021, 1, 5)], DATE), "2021-01-01", "2021-01-31") == [True]


def test_in_list() -> None:
    x = Col([1, 2, 3, None], INT)
    assert run("in", x, 1, 2) == [True, True, False, None]
    assert run("in", x, 1, None) == [True, None, None, None]  # no match and a NULL: NULL
    assert run("not_in", x, 1, 2) == [False, False, True, None]
    assert run("not_in", x, 1, None) == [False, None, None, None]
    assert run("in", x, Decimal("1.0"), 2.5) == [True, False, False, None]
    y = Col([2, 3], INT)
    assert run("in", Col([1, 3], INT), y, Col([1, 7], INT)) == [True, True]  # column values
    assert run("in", Col([NAN, 0.0], DOUBLE), NAN, -0.0) == [True, True]
    assert run("in", Col(["a", "b"], VARCHAR), "a", "c") == [True, False]
    assert run("in", Col([Interval(1, 0, 0)], INTERVAL), "30 days") == [True]


def test_nexmark_q2_in_list_over_bigint() -> None:
    from piestream.common.types import BIGINT

    auction = Col([1007, 1008, 2001, 2087, None], BIGINT)
    assert run("in", auction, 1007, 1020, 2001, 2019, 2087) == [True, False, True, True, None]
