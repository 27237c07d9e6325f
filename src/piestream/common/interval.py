"""The INTERVAL scalar: months, days and microseconds kept apart, as PostgreSQL does.

Two intervals compare by their "justified" total, where 1 month = 30 days and 1 day = 24 hours
(PostgreSQL's interval_cmp; reference §1.2), so ``'1 mon' = '30 days'`` even though the fields differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering

USECS_PER_SEC = 1_000_000
USECS_PER_MINUTE = 60 * USECS_PER_SEC
USECS_PER_HOUR = 60 * USECS_PER_MINUTE
USECS_PER_DAY = 24 * USECS_PER_HOUR
DAYS_PER_MONTH = 30

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


@total_ordering
@dataclass(frozen=True, eq=False)
class Interval:
    """months (i32), days (i32) and usecs (i64), each with its own sign, like PostgreSQL."""

    months: int = 0
    days: int = 0
    usecs: int = 0

    def __post_init__(self) -> None:
        from piestream.common.errors import DatetimeOutOfRange

        if not (I32_MIN <= self.months <= I32_MAX and I32_MIN <= self.days <= I32_MAX):
            raise DatetimeOutOfRange("interval out of range")
        if not I64_MIN <= self.usecs <= I64_MAX:
            raise DatetimeOutOfRange("interval out of range")

    @property
    def total_usecs(self) -> int:
        """The justified total used for comparison, hashing and key encoding (an i128)."""
        return (self.months * DAYS_PER_MONTH + self.days) * USECS_PER_DAY + self.usecs

    @classmethod
    def from_total_usecs(cls, total: int) -> Interval:
        """The justified form of a total: whole months (of 30 days), days, then microseconds,
        each carrying the total's sign (what decoding a key returns)."""
        sign = -1 if total < 0 else 1
        mag = abs(total)
        months, rest = divmod(mag, DAYS_PER_MONTH * USECS_PER_DAY)
        days, usecs = divmod(rest, USECS_PER_DAY)
        return cls(sign * months, sign * days, sign * usecs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Interval):
            return NotImplemented
        return self.total_usecs == other.total_usecs

    def __lt__(self, other: Interval) -> bool:
        return self.total_usecs < other.total_usecs

    def __hash__(self) -> int:
        return hash(self.total_usecs)

    def identical(self, other: Interval) -> bool:
        """Field-wise equality (``'1 mon'`` is not identical to ``'30 days'``)."""
        return (self.months, self.days, self.usecs) == (other.months, other.days, other.usecs)

    def __neg__(self) -> Interval:
        return Interval(-self.months, -self.days, -self.usecs)

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.months + other.months, self.days + other.days, self.usecs + other.usecs)

    def __sub__(self, other: Interval) -> Interval:
        return self + (-other)

    def __str__(self) -> str:
        from piestream.common.text import format_interval

        return format_interval(self)

    def __repr__(self) -> str:
        return f"Interval(months={self.months}, days={self.days}, usecs={self.usecs})"
