"""Date/time arithmetic: timestamp ± interval, date ± int, date - date, timestamp - timestamp,
interval ± interval, interval * / number, time ± interval.

Everything works on int64 microseconds (days for DATE) with numpy. Adding months follows
PostgreSQL: move the calendar month, clamp the day to the month's last day, then add days and
microseconds (time zone is always UTC, so timestamptz adds like timestamp). Results must lie in
years 1..9999 (what piestream's datums can hold), else 22008 "timestamp out of range".
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.errors import DatetimeOutOfRange, DivisionByZero, InvalidInput
from piestream.common.types import DataType, TypeKind
from piestream.expr.functions.calendar import civil, days_from_civil, days_in_month
from piestream.expr.functions.vec import (
    USECS_PER_DAY,
    and_valid,
    from_numpy,
    full_valid,
    interval_parts,
    make_intervals,
    temporal_us,
    view,
)

_EPOCH_DAY_OF_0001 = -719_162  # date 0001-01-01 in days since 1970-01-01
_LAST_DAY = 2_932_896  # 9999-12-31
MIN_US = _EPOCH_DAY_OF_0001 * USECS_PER_DAY
MAX_US = (_LAST_DAY + 1) * USECS_PER_DAY - 1
_TS = (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ)
_INTS = (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT)


def check_us(us: np.ndarray, valid: np.ndarray | None, what: str = "timestamp") -> None:
    v = full_valid(valid, len(us))
    if (((us < MIN_US) | (us > MAX_US)) & v).any():
        raise DatetimeOutOfRange(f"{what} out of range")


def check_days(days: np.ndarray, valid: np.ndarray | None) -> None:
    v = full_valid(valid, len(days))
    if (((days < _EPOCH_DAY_OF_0001) | (days > _LAST_DAY)) & v).any():
        raise DatetimeOutOfRange("date out of range")


def add_months(us: np.ndarray, months: np.ndarray) -> np.ndarray:
    """Calendar month arithmetic with the day clamped to the target month's length."""
    if not months.any():
        return us
    days = np.floor_divide(us, USECS_PER_DAY)
    tod = us - days * USECS_PER_DAY
    year, month, day = civil(days)
    total = year.astype(np.int64) * 12 + (month - 1) + np.clip(months, -(10**6), 10**6)
    ny, nm = np.floor_divide(total, 12), np.mod(total, 12) + 1
    nd = np.minimum(day, days_in_month(ny, nm))
    return days_from_civil(ny, nm, nd).astype(np.int64) * USECS_PER_DAY + tod


def add_interval_us(us: np.ndarray, iv: pa.Array, sign: int = 1) -> np.ndarray:
    """us + (or -) the intervals: months first, then days and microseconds."""
    months, days, usecs = interval_parts(iv)
    with np.errstate(over="ignore"):
        out = add_months(us, sign * months)
        return out + sign * (days * USECS_PER_DAY + usecs)


def _ts_out(us: np.ndarray, valid: np.ndarray | None, t: pa.DataType) -> pa.Array:
    check_us(us, valid)
    return from_numpy(us.astype(np.int64), valid, t)


def _int_values(a: pa.Array) -> np.ndarray:
    return view(a, a.type.to_pandas_dtype()).astype(np.int64)


def binary(op: str, ta: DataType, tb: DataType, x: pa.Array, y: pa.Array, ret: DataType) -> pa.Array:
    """Dispatch a date/time operator on the operand kinds the binder resolved."""
    ka, kb = ta.kind, tb.kind
    valid = and_valid(x, y)
    if op == "add" and ka is TypeKind.INTERVAL and kb is not TypeKind.INTERVAL:
        return binary(op, tb, ta, y, x, ret)  # interval + date/time: commute
    if op == "multiply" and ka is not TypeKind.INTERVAL:
        return binary(op, tb, ta, y, x, ret)
    if op in ("add", "subtract"):
        sign = 1 if op == "add" else -1
        if ka is TypeKind.DATE and kb in _INTS:
            days = view(x, np.int32).astype(np.int64) + sign * _int_values(y)
            check_days(days, valid)
            return from_numpy(days.astype(np.int32), valid, pa.date32())
        if ka in _INTS and kb is TypeKind.DATE and op == "add":
            return binary(op, tb, ta, y, x, ret)
        if ka is TypeKind.DATE and kb is TypeKind.DATE and op == "subtract":
            diff = view(x, np.int32).astype(np.int64) - view(y, np.int32)
            return from_numpy(diff.astype(np.int32), valid, pa.int32())
        if (ka in _TS or ka is TypeKind.DATE) and kb is TypeKind.INTERVAL:
            return _ts_out(add_interval_us(temporal_us(x), y, sign), valid, ret.arrow)
        if ka is TypeKind.DATE and kb is TypeKind.TIME and op == "add":
            return _ts_out(temporal_us(x) + view(y, np.int64), valid, ret.arrow)
        if ka is TypeKind.TIME and kb is TypeKind.DATE and op == "add":
            return binary(op, tb, ta, y, x, ret)
        if ka in _TS and kb == ka and op == "subtract":
            return timestamp_diff(view(x, np.int64), view(y, np.int64), valid)
        if ka is TypeKind.TIME and kb is TypeKind.INTERVAL:
            _, _, usecs = interval_parts(y)
            t = np.mod(view(x, np.int64) + sign * usecs, USECS_PER_DAY)
            return from_numpy(t, valid, pa.time64("us"))
        if ka is TypeKind.TIME and kb is TypeKind.TIME and op == "subtract":
            diff = view(x, np.int64) - view(y, np.int64)
            zero = np.zeros(len(diff), np.int64)
            return make_intervals(zero, zero, diff, valid)
        if ka is TypeKind.INTERVAL and kb is TypeKind.INTERVAL:
            m1, d1, u1 = interval_parts(x)
            m2, d2, u2 = interval_parts(y)
            return make_intervals(m1 + sign * m2, d1 + sign * d2, u1 + sign * u2, valid)
    if op in ("multiply", "divide") and ka is TypeKind.INTERVAL and kb is TypeKind.DOUBLE:
        return interval_scale(x, view(y, np.float64), valid, divide=op == "divide")
    raise InvalidInput(f"no {op} for {ta} and {tb}")


def timestamp_diff(a: np.ndarray, b: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """timestamp - timestamp: whole days (toward zero) and the rest, like timestamp_mi."""
    diff = a - b
    days = np.where(diff >= 0, diff // USECS_PER_DAY, -((-diff) // USECS_PER_DAY))
    rest = diff - days * USECS_PER_DAY
    return make_intervals(np.zeros(len(diff), np.int64), days, rest, valid)


def negate_interval(x: pa.Array) -> pa.Array:
    m, d, u = interval_parts(x)
    return make_intervals(-m, -d, -u, and_valid(x))


def _tsround(x: np.ndarray) -> np.ndarray:
    """PostgreSQL's TSROUND: round to microsecond precision to hide float noise."""
    return np.rint(x * 1e6) / 1e6


def interval_scale(x: pa.Array, factor: np.ndarray, valid: np.ndarray | None, *, divide: bool) -> pa.Array:
    """interval_mul / interval_div: fractional months cascade into days (30 per month) and
    fractional days into seconds; nothing cascades upward."""
    v = full_valid(valid, len(factor))
    if divide and ((factor == 0) & v).any():
        raise DivisionByZero("division by zero")
    if (np.isnan(factor) & v).any():
        raise DatetimeOutOfRange("interval out of range")
    months, days, usecs = interval_parts(x)
    f = np.where(v, factor, 1.0)
    with np.errstate(all="ignore"):
        m_exact = months / f if divide else months * f
        d_exact = days / f if divide else days * f
        if ((np.abs(m_exact) > 2**31 - 1) & v).any() or ((np.abs(d_exact) > 2**31 - 1) & v).any():
            raise DatetimeOutOfRange("interval out of range")
        rm = np.trunc(m_exact)
        rd = np.trunc(d_exact)
        month_rem_days = _tsround((m_exact - rm) * 30)
        sec_rem = _tsround((d_exact - rd + month_rem_days - np.trunc(month_rem_days)) * 86400)
        spill = np.where(np.abs(sec_rem) >= 86400, np.trunc(sec_rem / 86400), 0)
        rd = rd + spill
        sec_rem = sec_rem - spill * 86400
        rd = rd + np.trunc(month_rem_days)
        t_exact = (usecs / f if divide else usecs * f) + sec_rem * 1e6
        rt = np.rint(t_exact)
        if ((np.abs(rt) > 9.2e15) & v).any():
            raise DatetimeOutOfRange("interval out of range")
    return make_intervals(rm.astype(np.int64), rd.astype(np.int64), rt.astype(np.int64), valid)
