"""Proleptic Gregorian calendar arithmetic on int64 day numbers (days since 1970-01-01), in pure
integer numpy operations (Howard Hinnant's civil_from_days / days_from_civil): much faster
than going through numpy's datetime64 month and year units."""

from __future__ import annotations

import numpy as np

_MONTH_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(year, month 1-12, day 1-31) of each day number."""
    z = days.astype(np.int32) + 719_468  # int32 is enough for years 1..9999 and twice as fast
    era = np.floor_divide(z, 146_097)
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return year, month, day


def days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray | int) -> np.ndarray:
    """Day number of each (year, month, day); the day may be any integer (no validation)."""
    y = year.astype(np.int64) - (month <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = np.where(month > 2, month - 3, month + 9)
    doy = (153 * mp + 2) // 5 + np.asarray(day, np.int64) - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def is_leap(year: np.ndarray) -> np.ndarray:
    return (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))


def days_in_month(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    return _MONTH_DAYS[month - 1] + ((month == 2) & is_leap(year))


def year_start(year: np.ndarray) -> np.ndarray:
    """Day number of January 1st."""
    return days_from_civil(year, np.ones_like(year), 1)
