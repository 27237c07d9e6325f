"""Date/time: EXTRACT, date_trunc, to_char, constructors, now(), interval arithmetic, TUMBLE."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from expr_helpers import Col, evaluate, fails, one, run

from piestream.common.interval import Interval
from piestream.common.types import (
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
)
from piestream.expr import (
    FuncCall,
    bind_call,
    bind_statement_time,
    cast,
    fold_constants,
    literal,
    statement_time,
)

UTC = dt.UTC
TS = dt.datetime(2021, 3, 4, 5, 6, 7, 500000)
D = Decimal


def iv(text: str) -> object:
    return cast(literal(text), INTERVAL)


@pytest.mark.parametrize(
    ("field", "value", "t", "expected"),
    [
        ("year", TS, TIMESTAMP, D(2021)),
        ("YEAR", TS, TIMESTAMP, D(2021)),
        ("month", TS, TIMESTAMP, D(3)),
        ("day", TS, TIMESTAMP, D(4)),
        ("hour", TS, TIMESTAMP, D(5)),
        ("minute", TS, TIMESTAMP, D(6)),
        ("second", TS, TIMESTAMP, D("7.5")),
        ("milliseconds", TS, TIMESTAMP, D("7500")),
        ("microsecond", TS, TIMESTAMP, D(7500000)),
        ("epoch", TS, TIMESTAMP, D("1614834367.5")),
        ("epoch", dt.datetime(1969, 12, 31, 23, 59, 59), TIMESTAMP, D(-1)),
        ("dow", TS, TIMESTAMP, D(4)),
        ("dow", dt.datetime(2021, 3, 7), TIMESTAMP, D(0)),
        ("isodow", dt.datetime(2021, 3, 7), TIMESTAMP, D(7)),
        ("doy", TS, TIMESTAMP, D(63)),
        ("week", TS, TIMESTAMP, D(9)),
        ("week", dt.datetime(2021, 1, 1), TIMESTAMP, D(53)),
        ("isoyear", dt.datetime(2021, 1, 1), TIMESTAMP, D(2020)),
        ("week", dt.datetime(2024, 12, 30), TIMESTAMP, D(1)),
        ("quarter", TS, TIMESTAMP, D(1)),
        ("quarter", dt.datetime(2021, 12, 31), TIMESTAMP, D(4)),
        ("decade", TS, TIMESTAMP, D(202)),
        ("century", dt.datetime(2000, 12, 31), TIMESTAMP, D(20)),
        ("century", dt.datetime(2001, 1, 1), TIMESTAMP, D(21)),
        ("millennium", dt.datetime(2001, 1, 1), TIMESTAMP, D(3)),
        ("year", dt.datetime(1900, 2, 28, tzinfo=UTC), TIMESTAMPTZ, D(1900)),
        ("timezone", dt.datetime(1900, 2, 28, tzinfo=UTC), TIMESTAMPTZ, D(0)),
        ("day", dt.date(2021, 2, 28), DATE, D(28)),
        ("epoch", dt.date(1970, 1, 2), DATE, D(86400)),
        ("doy", dt.date(2020, 12, 31), DATE, D(366)),
        ("hour", dt.time(13, 14, 15, 16), TIME, D(13)),
        ("second", dt.time(13, 14, 15, 16), TIME, D("15.000016")),
        ("epoch", dt.time(1, 0), TIME, D(3600)),
        ("year", Interval(14, 3, 14_706_500_000), INTERVAL, D(1)),
        ("month", Interval(14, 3, 14_706_500_000), INTERVAL, D(2)),
        ("day", Interval(14, 3, 14_706_500_000), INTERVAL, D(3)),
        ("hour", Interval(14, 3, 14_706_500_000), INTERVAL, D(4)),
        ("minute", Interval(14, 3, 14_706_500_000), INTERVAL, D(5)),
        ("second", Interval(14, 3, 14_706_500_000), INTERVAL, D("6.5")),
        ("epoch", Interval(14, 3, 14_706_500_000), INTERVAL, D("37015506.5")),
        ("hour", Interval(0, 0, -90_000_000_000), INTERVAL, D(-25)),
        ("month", Interval(-14, 0, 0), INTERVAL, D(-2)),
        ("year", None, TIMESTAMP, None),
    ],
)
def test_extract(field: str, value: object, t: object, expected: object) -> None:
    assert run("extract", field, Col([value], t)) == [expected]


def test_date_part_is_double() -> None:
    assert run("date_part", "second", Col([TS], TIMESTAMP)) == [7.5]
    assert run("date_part", "epoch", Col([TS], TIMESTAMP)) == [1614834367.5]
    assert run("date_part", "dow", Col([dt.date(2021, 3, 4)], DATE)) == [4.0]  # via timestamptz


def test_extract_errors() -> None:
    fails("0A000", run, "extract", "hour", Col([dt.date(2021, 1, 1)], DATE))
    fails("0A000", run, "extract", "dow", Col([Interval(1, 0, 0)], INTERVAL))
    fails("0A000", run, "extract", "year", Col([dt.time(1, 0)], TIME))
    fails("22023", run, "extract", "bogus", Col([TS], TIMESTAMP))
    fails("0A000", run, "extract", "timezone", Col([TS], TIMESTAMP))


@pytest.mark.parametrize(
    ("unit", "value", "expected"),
    [
        ("microseconds", TS, TS),
        ("millisecond", dt.datetime(2021, 3, 4, 5, 6, 7, 123456), dt.datetime(2021, 3, 4, 5, 6, 7, 123000)),
        ("second", TS, dt.datetime(2021, 3, 4, 5, 6, 7)),
        ("minute", TS, dt.datetime(2021, 3, 4, 5, 6)),
        ("hour", TS, dt.datetime(2021, 3, 4, 5)),
        ("day", TS, dt.datetime(2021, 3, 4)),
        ("week", dt.datetime(2021, 3, 7, 9), dt.datetime(2021, 3, 1)),
        ("week", dt.datetime(2021, 3, 1), dt.datetime(2021, 3, 1)),
        ("month", TS, dt.datetime(2021, 3, 1)),
        ("quarter", dt.datetime(2021, 5, 15), dt.datetime(2021, 4, 1)),
        ("year", TS, dt.datetime(2021, 1, 1)),
        ("decade", TS, dt.datetime(2020, 1, 1)),
        ("century", TS, dt.datetime(2001, 1, 1)),
        ("century", dt.datetime(2000, 6, 1), dt.datetime(1901, 1, 1)),
        ("millennium", TS, dt.datetime(2001, 1, 1)),
        ("hour", dt.datetime(1969, 12, 31, 23, 30), dt.datetime(1969, 12, 31, 23)),
        ("day", dt.datetime(1969, 12, 31, 23, 30), dt.datetime(1969, 12, 31)),
    ],
)
def test_date_trunc(unit: str, value: dt.datetime, expected: dt.datetime) -> None:
    assert run("date_trunc", unit, Col([value], TIMESTAMP)) == [expected]
    aware = run("date_trunc", unit, Col([value.replace(tzinfo=UTC)], TIMESTAMPTZ))
    assert aware == [expected.replace(tzinfo=UTC)]


def test_date_trunc_interval_and_date() -> None:
    v = Col([Interval(14, 3, 14_706_500_000)], INTERVAL)
    assert run("date_trunc", "hour", v) == [Interval(14, 3, 14_400_000_000)]
    assert run("date_trunc", "day", v) == [Interval(14, 3, 0)]
    assert run("date_trunc", "year", v) == [Interval(12, 0, 0)]
    fails("0A000", run, "date_trunc", "week", v)
    assert run("date_trunc", "month", Col([dt.date(2021, 3, 4)], DATE)) == [
        dt.datetime(2021, 3, 1, tzinfo=UTC)
    ]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("YYYY-MM-DD", "2021-03-04"),
        ("yyyy-MM-dd", "2021-03-04"),
        ("HH:MI", "03:06"),
        ("HH24:MI:SS", "15:06:07"),
        ("HH12:MI:SS AM", "03:06:07 PM"),
        ("hh12 am", "03 pm"),
        ("HH24:MI:SS.MS", "15:06:07.123"),
        ("SS.US", "07.123456"),
        ("Mon Month MON mon", "Mar March     MAR mar"),
        ("FMMonth FMDD", "March 4"),
        ("Dy Day DY", "Thu Thursday  THU"),
        ("D ID DDD Q WW IW CC J", "5 4 063 1 09 09 21 2459278"),
        ("YYY YY Y Y,YYY", "021 21 1 2,021"),
        ('"Year" YYYY "and text"', "Year 2021 and text"),
        ("A.M. p.m.", "P.M. p.m."),
        ("SSSS", "54367"),
        ("TZ|OF", "|"),
        ("", ""),
    ],
)
def test_to_char(pattern: str, expected: str) -> None:
    ts = dt.datetime(2021, 3, 4, 15, 6, 7, 123456)
    assert run("to_char", Col([ts, None], TIMESTAMP), pattern) == [expected, None]


def test_to_char_variants() -> None:
    ts = Col([dt.datetime(2021, 3, 4, 0, 6, tzinfo=UTC)], TIMESTAMPTZ)
    assert run("to_char", ts, "HH12 AM TZ OF") == ["12 AM UTC +00"]
    pats = Col(["YYYY", "MM", None], VARCHAR)
    times = Col([TS, TS, TS], TIMESTAMP)
    assert run("to_char", times, pats) == ["2021", "03", None]
    assert run("to_char", Col([TS], TIMESTAMP), None) == [None]


def test_constructors() -> None:
    assert one("make_date", 2021, 2, 28) == dt.date(2021, 2, 28)
    assert one("make_date", 2020, 2, 29) == dt.date(2020, 2, 29)
    assert run("make_date", Col([2021, None], INT), 1, 31) == [dt.date(2021, 1, 31), None]
    fails("22008", one, "make_date", 2021, 2, 29, match="date field value out of range: 2021-02-29")
    fails("22008", one, "make_date", 2021, 13, 1)
    fails("22008", one, "make_date", 0, 1, 1)
    assert one("make_timestamp", 2021, 3, 4, 5, 6, 7.5) == TS
    fails("22008", one, "make_timestamp", 2021, 3, 4, 25, 0, 0.0)
    assert one("to_timestamp", 1614834367.5) == TS.replace(tzinfo=UTC)
    assert one("to_timestamp", 0) == dt.datetime(1970, 1, 1, tzinfo=UTC)
    assert one("to_timestamp", -1.0000005) == dt.datetime(1969, 12, 31, 23, 59, 58, 999999, tzinfo=UTC)
    fails("22008", one, "to_timestamp", float("nan"))
    fails("22008", one, "to_timestamp", 1e20)


def test_now_statement_time() -> None:
    t0 = dt.datetime(2022, 5, 6, 7, 8, 9, tzinfo=UTC)
    now = bind_call("now", [])
    with statement_time(t0):
        assert evaluate(now) == [t0]
        assert evaluate(bind_call("-", [now, iv("1 day")])) == [t0 - dt.timedelta(days=1)]
    frozen = bind_statement_time(bind_call("+", [now, iv("1 hour")]), dt.datetime(2020, 1, 1))
    assert evaluate(frozen) == [dt.datetime(2020, 1, 1, 1, tzinfo=UTC)]
    assert isinstance(fold_constants(bind_call("+", [now, iv("1 hour")])), FuncCall)  # volatile
    assert evaluate(fold_constants(frozen)) == [dt.datetime(2020, 1, 1, 1, tzinfo=UTC)]
    wall = evaluate(now)[0]
    assert abs(wall - dt.datetime.now(UTC)) < dt.timedelta(minutes=5)


# -- arithmetic -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ts", "interval", "expected"),
    [
        (dt.datetime(2021, 1, 31), "1 month", dt.datetime(2021, 2, 28)),
        (dt.datetime(2020, 2, 29), "1 year", dt.datetime(2021, 2, 28)),
        (dt.datetime(2020, 1, 31, 10), "1 mon 1 day 1 hour", dt.datetime(2020, 3, 1, 11)),
        (dt.datetime(2021, 3, 31), "-1 month", dt.datetime(2021, 2, 28)),
        (dt.datetime(2021, 1, 1), "-1 us", dt.datetime(2020, 12, 31, 23, 59, 59, 999999)),
        (dt.datetime(1969, 12, 31, 12), "36 hours", dt.datetime(1970, 1, 2)),
        (dt.datetime(2021, 1, 1), "1 mon -1 day", dt.datetime(2021, 1, 31)),
    ],
)
def test_timestamp_plus_interval(ts: dt.datetime, interval: str, expected: dt.datetime) -> None:
    assert run("+", Col([ts], TIMESTAMP), interval) == [expected]
    assert run("+", Col([ts.replace(tzinfo=UTC)], TIMESTAMPTZ), interval) == [expected.replace(tzinfo=UTC)]
    assert run("-", Col([ts], TIMESTAMP), cast(literal(interval), INTERVAL)) == run(
        "+", Col([ts], TIMESTAMP), bind_call("-", [iv(interval)])
    )


def test_date_and_time_arithmetic() -> None:
    d = Col([dt.date(2021, 1, 31), None], DATE)
    assert run("+", d, 1) == [dt.date(2021, 2, 1), None]
    assert run("+", 30, d) == [dt.date(2021, 3, 2), None]
    assert run("-", d, 31) == [dt.date(2020, 12, 31), None]
    assert run("-", d, Col([dt.date(2021, 3, 1), dt.date(2021, 1, 1)], DATE)) == [-29, None]
    assert run("+", d, iv("1 month")) == [dt.datetime(2021, 2, 28), None]
    # like PostgreSQL's resolution rules: date + unknown matches date + integer / interval / time
    fails("42725", run, "+", d, "1 month", match="operator is not unique: date + unknown")
    assert run("+", d, Col([dt.time(12, 30), dt.time(1)], TIME)) == [dt.datetime(2021, 1, 31, 12, 30), None]
    t = Col([dt.time(23, 0)], TIME)
    assert run("+", t, "2 hours") == [dt.time(1, 0)]
    assert run("-", t, iv("24 hours 1 minute")) == [dt.time(22, 59)]
    assert run("-", t, Col([dt.time(1, 30)], TIME)) == [Interval(0, 0, 77_400_000_000)]
    fails("22008", run, "+", Col([dt.date(9999, 12, 31)], DATE), 1, match="date out of range")
    fails(
        "22008",
        run,
        "+",
        Col([dt.datetime(9999, 12, 31)], TIMESTAMP),
        "1 day",
        match="timestamp out of range",
    )


def test_timestamp_difference() -> None:
    a = Col([dt.datetime(2021, 1, 1), dt.datetime(2020, 12, 30, 12)], TIMESTAMP)
    b = Col([dt.datetime(2020, 12, 30, 12), dt.datetime(2021, 1, 1)], TIMESTAMP)
    got = run("-", a, b)
    assert [(x.months, x.days, x.usecs) for x in got] == [(0, 1, 43_200_000_000), (0, -1, -43_200_000_000)]
    tz = Col([dt.datetime(2021, 1, 1, tzinfo=UTC)], TIMESTAMPTZ)
    assert run("-", tz, tz) == [Interval()]


@pytest.mark.parametrize(
    ("op", "interval", "factor", "expected"),
    [
        ("*", Interval(1, 0, 0), 1.5, (1, 15, 0)),
        ("*", Interval(0, 1, 0), 1.5, (0, 1, 43_200_000_000)),
        ("*", Interval(1, 1, 1_000_000), 2, (2, 2, 2_000_000)),
        ("*", Interval(1, 1, 0), 2.5, (2, 17, 43_200_000_000)),
        ("*", Interval(0, 0, 3_600_000_000), -0.5, (0, 0, -1_800_000_000)),
        ("/", Interval(0, 0, 3_600_000_000), 3, (0, 0, 1_200_000_000)),
        ("/", Interval(1, 0, 0), 3, (0, 10, 0)),
        ("/", Interval(0, 1, 0), 2, (0, 0, 43_200_000_000)),
        ("/", Interval(1, 0, 0), 7, (0, 4, 24_685_689_600)),  # TSROUND-ed cascade, as interval_div
    ],
)
def test_interval_scaling(op: str, interval: Interval, factor: object, expected: tuple) -> None:
    got = one(op, literal(interval), factor)
    assert (got.months, got.days, got.usecs) == expected


def test_interval_arithmetic() -> None:
    a = Col([Interval(1, 2, 3), None], INTERVAL)
    b = Col([Interval(4, 5, 6), Interval(1, 1, 1)], INTERVAL)
    got = run("+", a, b)
    assert (got[0].months, got[0].days, got[0].usecs) == (5, 7, 9) and got[1] is None
    got = run("-", a, b)[0]
    assert (got.months, got.days, got.usecs) == (-3, -3, -3)
    got = run("-", a)[0]
    assert (got.months, got.days, got.usecs) == (-1, -2, -3)
    fails("22012", one, "/", literal(Interval(1, 0, 0)), 0)
    fails("22008", one, "*", literal(Interval(2**30, 0, 0)), 4)
    fails("22008", run, "+", Col([Interval(2**31 - 1, 0, 0)], INTERVAL), "1 month")
    assert run("*", Col([Interval(0, 1, 0)], INTERVAL), Col([2.0], DOUBLE)) == [Interval(0, 2, 0)]


# -- TUMBLE ---------------------------------------------------------------------------------------


def test_tumble_windows() -> None:
    ts = Col(
        [
            dt.datetime(2021, 3, 4, 15, 6, 7),
            dt.datetime(1969, 12, 31, 23, 59, 55),
            dt.datetime(2021, 3, 4, 15, 6, 0),
            None,
        ],
        TIMESTAMP,
    )
    assert run("tumble_start", ts, "10 seconds") == [
        dt.datetime(2021, 3, 4, 15, 6, 0),
        dt.datetime(1969, 12, 31, 23, 59, 50),
        dt.datetime(2021, 3, 4, 15, 6, 0),
        None,
    ]
    assert run("tumble_end", ts, "10 seconds")[0] == dt.datetime(2021, 3, 4, 15, 6, 10)
    assert run("tumble_start", ts, "10 seconds", "3 seconds")[0] == dt.datetime(2021, 3, 4, 15, 6, 3)
    assert run("tumble_start", ts, "1 day")[0] == dt.datetime(2021, 3, 4)
    tz = Col([dt.datetime(2021, 3, 4, 15, 6, 7, tzinfo=UTC)], TIMESTAMPTZ)
    assert run("tumble_start", tz, "1 hour") == [dt.datetime(2021, 3, 4, 15, tzinfo=UTC)]
    assert run("tumble_start", Col([dt.date(2021, 3, 5)], DATE), "2 days") == [dt.datetime(2021, 3, 4)]
    fails("0A000", run, "tumble_start", ts, "1 month", match="months")
    fails("22023", run, "tumble_start", ts, "-1 second", match="positive")
