"""Date/time functions: EXTRACT / date_part, date_trunc, make_date, make_timestamp,
to_timestamp, now(), and the TUMBLE window bounds.

All fields are computed from int64 microseconds with numpy (calendar parts through numpy's
datetime64 month/year units). Time zone is UTC throughout, so timestamptz behaves like timestamp.

``now()`` is PostgreSQL's transaction timestamp: one value for a whole statement. Its value is,
in order of precedence: the ``statement_time`` option of the FuncCall (the planner freezes it in
with `bind_statement_time`, which also makes the expression picklable to Spark workers with
the right value), the time set by the `statement_time(...)` context manager, or else the wall
clock read once per evaluation.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from piestream.common.errors import DatetimeOutOfRange, FeatureNotSupported, InvalidInput, PiestreamError
from piestream.common.types import DataType, TypeKind
from piestream.expr.coercion import type_name
from piestream.expr.expr import FuncCall
from piestream.expr.functions import decimal as dec
from piestream.expr.functions.calendar import civil, days_from_civil, year_start
from piestream.expr.functions.datetime_arith import MAX_US, MIN_US, check_days, check_us
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import (
    NOT_CONSTANT,
    USECS_PER_DAY,
    and_valid,
    constant_arg,
    from_numpy,
    full_valid,
    interval_parts,
    make_intervals,
    temporal_us,
    valid_mask,
    view,
)

_INVALID_PARAMETER = "22023"
USECS_PER_HOUR = 3_600_000_000
USECS_PER_MINUTE = 60_000_000
USECS_PER_SEC = 1_000_000

# -- now() ----------------------------------------------------------------------------------------

_STATEMENT_TIME: contextvars.ContextVar[dt.datetime | None] = contextvars.ContextVar(
    "piestream_statement_time", default=None
)


@contextlib.contextmanager
def statement_time(ts: dt.datetime) -> Iterator[None]:
    """Make ``now()`` return `ts` (UTC if naive) while evaluating inside this block."""
    token = _STATEMENT_TIME.set(ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC))
    try:
        yield
    finally:
        _STATEMENT_TIME.reset(token)


def current_statement_time(call: FuncCall | None = None) -> dt.datetime:
    frozen = call.option("statement_time") if call is not None else None
    if frozen is not None:
        return frozen if frozen.tzinfo else frozen.replace(tzinfo=dt.UTC)
    ts = _STATEMENT_TIME.get()
    return ts if ts is not None else dt.datetime.now(dt.UTC)


@register("now")
def _now(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    ts = current_statement_time(call)
    return pa.repeat(pa.scalar(ts, pa.timestamp("us", tz="UTC")), n)


@register("proctime")
def _proctime(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """An ``AS PROCTIME()`` source column: the time of the epoch the row is read in, which the
    Project above the source sets (`stream.executors.project`), so a retried epoch reads the same
    value; never the wall clock."""
    ts = _STATEMENT_TIME.get()
    if ts is None:
        raise PiestreamError("PROCTIME() evaluated outside its source's Project", sqlstate="XX000")
    return pa.repeat(pa.scalar(ts, pa.timestamp("us", tz="UTC")), n)


# -- calendar parts -------------------------------------------------------------------------------


def _iso(days: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ISO year, ISO week) : the week's Thursday decides the year."""
    thursday = days - np.mod(days + 3, 7) + 3
    iso_year = civil(thursday)[0]
    week = (thursday - year_start(iso_year)) // 7 + 1
    return iso_year, week


_DATE_FIELDS = {
    "year",
    "month",
    "day",
    "dow",
    "isodow",
    "doy",
    "week",
    "quarter",
    "decade",
    "century",
    "millennium",
    "isoyear",
    "julian",
}
_TIME_FIELDS = {"hour", "minute", "second", "millisecond", "microsecond"}
_FIELD_ALIASES = {
    "years": "year",
    "y": "year",
    "yr": "year",
    "yrs": "year",
    "months": "month",
    "mon": "month",
    "mons": "month",
    "days": "day",
    "d": "day",
    "hours": "hour",
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "minutes": "minute",
    "m": "minute",
    "min": "minute",
    "mins": "minute",
    "seconds": "second",
    "s": "second",
    "sec": "second",
    "secs": "second",
    "milliseconds": "millisecond",
    "ms": "millisecond",
    "msec": "millisecond",
    "msecs": "millisecond",
    "microseconds": "microsecond",
    "us": "microsecond",
    "usec": "microsecond",
    "usecs": "microsecond",
    "weeks": "week",
    "w": "week",
    "decades": "decade",
    "centuries": "century",
    "c": "century",
    "millennia": "millennium",
    "millenniums": "millennium",
    "mil": "millennium",
    "qtr": "quarter",
}


def _field_name(call: FuncCall) -> str:
    from piestream.expr.expr import Literal

    arg = call.args[0]
    if not isinstance(arg, Literal) or not isinstance(arg.value, str):
        raise FeatureNotSupported(f"{call.name} needs a constant field name")
    f = arg.value.strip().lower()
    return _FIELD_ALIASES.get(f, f)


def _unsupported(field: str, t: DataType) -> FeatureNotSupported:
    return FeatureNotSupported(f'unit "{field}" not supported for type {type_name(t)}')


def _timestamp_field(field: str, us: np.ndarray, t: DataType) -> tuple[np.ndarray, int]:
    """(value, implied fraction digits) of one field of timestamps."""
    days = np.floor_divide(us, USECS_PER_DAY)
    tod = us - days * USECS_PER_DAY
    if field == "epoch":
        return (days * 86_400, 0) if t.kind is TypeKind.DATE else (us, 6)
    if field in _TIME_FIELDS:
        if t.kind is TypeKind.DATE:
            raise _unsupported(field, t)
        return _time_field(field, tod)
    if field in ("timezone", "timezone_hour", "timezone_minute"):
        if t.kind is not TypeKind.TIMESTAMPTZ:
            raise _unsupported(field, t)
        return np.zeros(len(us), np.int64), 0
    if field not in _DATE_FIELDS:
        raise InvalidInput(
            f'unit "{field}" not recognized for type {type_name(t)}', sqlstate=_INVALID_PARAMETER
        )
    year, month, day = civil(days)
    values = {
        "year": lambda: year,
        "month": lambda: month,
        "day": lambda: day,
        "dow": lambda: np.mod(days + 4, 7),
        "isodow": lambda: np.mod(days + 3, 7) + 1,
        "doy": lambda: days - year_start(year) + 1,
        "week": lambda: _iso(days)[1],
        "isoyear": lambda: _iso(days)[0],
        "quarter": lambda: (month - 1) // 3 + 1,
        "decade": lambda: year // 10,
        "century": lambda: (year + 99) // 100,
        "millennium": lambda: (year + 999) // 1000,
        "julian": lambda: days + 2_440_588,
    }
    return values[field](), 0


def _time_field(field: str, tod: np.ndarray) -> tuple[np.ndarray, int]:
    if field == "hour":
        return tod // USECS_PER_HOUR, 0
    if field == "minute":
        return (tod // USECS_PER_MINUTE) % 60, 0
    sec_us = tod % USECS_PER_MINUTE
    if field == "second":
        return sec_us, 6
    if field == "millisecond":
        return sec_us, 3
    return sec_us, 0  # microsecond


def _trunc_div(a: np.ndarray, b: int) -> np.ndarray:
    """C integer division (toward zero), as PostgreSQL's interval field arithmetic uses."""
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)


def _interval_field(field: str, x: pa.Array, t: DataType) -> tuple[np.ndarray, int]:
    months, days, usecs = interval_parts(x)
    sec_part = usecs - _trunc_div(usecs, USECS_PER_MINUTE) * USECS_PER_MINUTE
    simple = {
        "year": lambda: _trunc_div(months, 12),
        "month": lambda: months - _trunc_div(months, 12) * 12,
        "day": lambda: days,
        "hour": lambda: _trunc_div(usecs, USECS_PER_HOUR),
        "minute": lambda: _trunc_div(usecs, USECS_PER_MINUTE) - _trunc_div(usecs, USECS_PER_HOUR) * 60,
        "quarter": lambda: _trunc_div(months - _trunc_div(months, 12) * 12, 3) + 1,
        "decade": lambda: _trunc_div(months, 120),
        "century": lambda: _trunc_div(months, 1200),
        "millennium": lambda: _trunc_div(months, 12000),
    }
    if field in simple:
        return simple[field](), 0
    if field == "second":
        return sec_part, 6
    if field == "millisecond":
        return sec_part, 3
    if field == "microsecond":
        return sec_part, 0
    if field == "epoch":
        secs = (
            31_557_600 * _trunc_div(months, 12)
            + 2_592_000 * (months - _trunc_div(months, 12) * 12)
            + 86_400 * days
        )
        if (np.abs(secs) > 9_000_000_000_000).any():
            raise DatetimeOutOfRange("interval out of range")
        return secs * USECS_PER_SEC + usecs, 6
    if field in _DATE_FIELDS | {"timezone"}:
        raise _unsupported(field, t)
    raise InvalidInput(f'unit "{field}" not recognized for type interval', sqlstate=_INVALID_PARAMETER)


def _extract(call: FuncCall, a: list[pa.Array]) -> tuple[np.ndarray, int, np.ndarray | None]:
    field = _field_name(call)
    t = call.args[1].return_type
    x = a[1]
    if t.kind is TypeKind.INTERVAL:
        vals, scale = _interval_field(field, x, t)
    elif t.kind is TypeKind.TIME:
        if field == "epoch":
            vals, scale = view(x, np.int64), 6
        elif field in _TIME_FIELDS:
            vals, scale = _time_field(field, view(x, np.int64))
        else:
            raise (
                _unsupported(field, t)
                if field in _DATE_FIELDS
                else InvalidInput(
                    f'unit "{field}" not recognized for type {type_name(t)}', sqlstate=_INVALID_PARAMETER
                )
            )
    else:
        vals, scale = _timestamp_field(field, temporal_us(x), t)
    valid = and_valid(x)
    return np.where(full_valid(valid, len(vals)), vals, 0), scale, valid


@register("extract")
def _extract_numeric(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    vals, scale, valid = _extract(call, a)
    return dec.from_scaled(vals, scale, valid)


@register("date_part")
def _date_part(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    vals, scale, valid = _extract(call, a)
    return from_numpy(vals.astype(np.float64) / 10**scale, valid, pa.float64())


# -- date_trunc -----------------------------------------------------------------------------------

_FIXED_UNITS = {
    "microsecond": 1,
    "millisecond": 1000,
    "second": USECS_PER_SEC,
    "minute": USECS_PER_MINUTE,
    "hour": USECS_PER_HOUR,
    "day": USECS_PER_DAY,
}


def _trunc_timestamp(unit: str, us: np.ndarray) -> np.ndarray:
    if unit in _FIXED_UNITS:
        step = _FIXED_UNITS[unit]
        return us - np.mod(us, step)
    days = np.floor_divide(us, USECS_PER_DAY)
    if unit == "week":
        return (days - np.mod(days + 3, 7)) * USECS_PER_DAY
    year, month, _ = civil(days)
    if unit == "month":
        new_month = month
    elif unit == "quarter":
        new_month = (month - 1) // 3 * 3 + 1
    else:
        new_month = np.ones_like(month)
        if unit == "decade":
            year = year // 10 * 10
        elif unit == "century":
            year = (year + 99) // 100 * 100 - 99
        elif unit == "millennium":
            year = (year + 999) // 1000 * 1000 - 999
        elif unit != "year":
            raise InvalidInput(
                f'unit "{unit}" not recognized for type timestamp', sqlstate=_INVALID_PARAMETER
            )
    return days_from_civil(year, new_month, 1).astype(np.int64) * USECS_PER_DAY


def _trunc_interval(unit: str, x: pa.Array) -> pa.Array:
    months, days, usecs = interval_parts(x)
    zero = np.zeros_like(months)
    if unit in _FIXED_UNITS and unit != "day":
        step = _FIXED_UNITS[unit]
        return make_intervals(months, days, _trunc_div(usecs, step) * step, and_valid(x))
    per = {
        "day": 1,
        "month": 1,
        "quarter": 3,
        "year": 12,
        "decade": 120,
        "century": 1200,
        "millennium": 12000,
    }
    if unit not in per:
        raise FeatureNotSupported(f'unit "{unit}" not supported for type interval')
    if unit == "day":
        return make_intervals(months, days, zero, and_valid(x))
    step = per[unit]
    return make_intervals(_trunc_div(months, step) * step, zero, zero, and_valid(x))


@register("date_trunc")
def _date_trunc(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    unit = _field_name(call)
    x = a[1]
    if call.args[1].return_type.kind is TypeKind.INTERVAL:
        return _trunc_interval(unit, x)
    valid = and_valid(x)
    us = np.where(full_valid(valid, n), view(x, np.int64), 0)
    return from_numpy(_trunc_timestamp(unit, us), valid, call.return_type.arrow)


# -- constructors ---------------------------------------------------------------------------------


def _ints(x: pa.Array) -> np.ndarray:
    return x.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)


def _make_days(y: np.ndarray, m: np.ndarray, d: np.ndarray, v: np.ndarray) -> np.ndarray:
    bad_field = ((m < 1) | (m > 12) | (d < 1) | (y == 0)) & v
    safe_m = np.where(bad_field | ~v, 1, m)
    safe_y = np.where(~v | (y < 1) | (y > 9999), 1970, y)
    first = ((safe_y - 1970) * 12 + safe_m - 1).astype("datetime64[M]")
    dim = ((first + np.timedelta64(1, "M")).astype("datetime64[D]") - first.astype("datetime64[D]")).astype(
        np.int64
    )
    bad_field |= (d > dim) & v
    if bad_field.any():
        i = int(np.flatnonzero(bad_field)[0])
        raise DatetimeOutOfRange(f"date field value out of range: {y[i]}-{m[i]:02d}-{d[i]:02d}")
    if (((y < 1) | (y > 9999)) & v).any():
        raise DatetimeOutOfRange("date out of range")
    return days_from_civil(safe_y, safe_m, np.where(v, d, 1)).astype(np.int64)


@register("make_date")
def _make_date(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    valid = and_valid(*a)
    days = _make_days(_ints(a[0]), _ints(a[1]), _ints(a[2]), full_valid(valid, n))
    check_days(days, valid)
    return from_numpy(days.astype(np.int32), valid, pa.date32())


@register("make_timestamp")
def _make_timestamp(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    valid = and_valid(*a)
    v = full_valid(valid, n)
    days = _make_days(_ints(a[0]), _ints(a[1]), _ints(a[2]), v)
    hour, minute = _ints(a[3]), _ints(a[4])
    sec = a[5].cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False)
    bad = ((hour < 0) | (minute < 0) | (minute > 59) | (sec < 0) | (sec > 60) | (hour > 24)) & v
    bad |= ((hour == 24) & ((minute > 0) | (sec > 0))) & v
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DatetimeOutOfRange(f"time field value out of range: {hour[i]}:{minute[i]:02d}:{sec[i]:02g}")
    us = (
        days * USECS_PER_DAY
        + hour * USECS_PER_HOUR
        + minute * USECS_PER_MINUTE
        + np.rint(sec * 1e6).astype(np.int64)
    )
    check_us(us, valid)
    return from_numpy(us, valid, call.return_type.arrow)


@register("to_timestamp")
def _to_timestamp(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """to_timestamp(seconds since 1970) -> timestamptz, rounded to the microsecond."""
    valid = and_valid(a[0])
    v = full_valid(valid, n)
    secs = view(a[0], np.float64)
    if (np.isnan(secs) & v).any():
        raise DatetimeOutOfRange("timestamp cannot be NaN")
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(secs) | (secs * 1e6 < MIN_US) | (secs * 1e6 > MAX_US)
    if (bad & v).any():
        raise DatetimeOutOfRange(f'timestamp out of range: "{secs[np.flatnonzero(bad & v)[0]]}"')
    us = np.rint(np.where(v, secs, 0) * 1e6).astype(np.int64)
    return from_numpy(us, valid, pa.timestamp("us", tz="UTC"))


# -- TUMBLE windows -------------------------------------------------------------------------------


def _window_usecs(call: FuncCall, a: list[pa.Array], i: int, what: str, *, positive: bool) -> np.ndarray:
    """Window size / offset in microseconds (a literal is read once, not per row)."""
    const = constant_arg(call, i)
    if const is not NOT_CONSTANT and const is not None:
        x = pa.array([pa.MonthDayNano([const.months, const.days, const.usecs * 1000])])
    else:
        x = a[i]
    months, days, usecs = interval_parts(x)
    v = full_valid(valid_mask(x), len(x))
    if ((months != 0) & v).any():
        raise FeatureNotSupported(f"TUMBLE window {what} must not contain months or years")
    total = days * USECS_PER_DAY + usecs
    if positive and ((total <= 0) & v).any():
        raise InvalidInput(f"TUMBLE window {what} must be positive", sqlstate=_INVALID_PARAMETER)
    return np.where(v, total, 1 if positive else 0)


def tumble_start_us(call: FuncCall, a: list[pa.Array]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(window start, window size) in microseconds: ts - ((ts - offset) mod size), floor mod."""
    ts = temporal_us(a[0])
    size = _window_usecs(call, a, 1, "size", positive=True)
    offset = _window_usecs(call, a, 2, "offset", positive=False) if len(a) > 2 else 0
    start = ts - np.mod(ts - offset, size)
    valid = and_valid(*[a[i] for i in range(len(a)) if constant_arg(call, i) is NOT_CONSTANT])
    if any(constant_arg(call, i) is None for i in range(1, len(a))):
        valid = np.zeros(len(ts), np.bool_)
    return start, size, valid


@register("tumble_start")
def _tumble_start(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    start, _, valid = tumble_start_us(call, a)
    check_us(start, valid)
    return from_numpy(start, valid, call.return_type.arrow)


@register("tumble_end")
def _tumble_end(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    start, size, valid = tumble_start_us(call, a)
    end = start + size
    check_us(end, valid)
    return from_numpy(end, valid, call.return_type.arrow)
