"""PostgreSQL text form of DATE, TIME, TIMESTAMP and TIMESTAMPTZ values.

Output is DateStyle ISO with TimeZone UTC (``2024-01-02 03:04:05.5+00``); fractional seconds
lose their trailing zeros. Input takes ISO dates with an optional time (``T`` or blanks between),
an optional zone (``Z``, ``UTC``, ``+hh[:mm[:ss]]`` ...) and ``AD``/``BC``, plus ``epoch`` and
``allballs``; a DATE ignores the time and zone, a TIMESTAMP the zone, and TIMESTAMPTZ values are
normalized to UTC. Errors are PostgreSQL's (22007 bad syntax, 22008 field or value out of range,
22009 bad zone displacement).
"""

from __future__ import annotations

import calendar
import datetime as dt
import re

from piestream.common.errors import DatetimeOutOfRange, InvalidInput
from piestream.common.text_syntax import BAD_DATETIME_FORMAT, PG_NAME, TZ_DISPLACEMENT, WS
from piestream.common.types import DataType, TypeKind

# -- output -------------------------------------------------------------------------------------


def _format_fraction(usecs: int) -> str:
    """``.ffffff`` without trailing zeros, or nothing for whole seconds."""
    return f".{usecs:06d}".rstrip("0") if usecs else ""


def format_date(v: dt.date) -> str:
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"


def format_time(v: dt.time | dt.datetime) -> str:
    return f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}{_format_fraction(v.microsecond)}"


def format_timestamp(v: dt.datetime) -> str:
    return f"{format_date(v)} {format_time(v)}"


def format_timestamptz(v: dt.datetime) -> str:
    """In UTC with a "+00" suffix; naive values are taken as UTC already (as scalar.py does)."""
    if v.tzinfo is not None:
        try:
            v = v.astimezone(dt.UTC)
        except OverflowError:
            raise DatetimeOutOfRange("timestamp out of range") from None
    return f"{format_date(v)} {format_time(v)}+00"


# -- input --------------------------------------------------------------------------------------

_DATE_PART = r"(?P<y>[0-9]{4,})-(?P<mo>[0-9]{1,2})-(?P<d>[0-9]{1,2})"
_TIME_PART = r"(?P<h>[0-9]{1,2}):(?P<mi>[0-9]{1,2})(?::(?P<s>[0-9]{1,2})(?:\.(?P<f>[0-9]*))?)?"
_ZONE_PART = (
    r"(?P<zone>(?i:z|utc|gmt|zulu)"
    r"|(?P<zs>[+-])(?P<zh>[0-9]{1,2})(?::?(?P<zm>[0-9]{2})(?::?(?P<zsec>[0-9]{2}))?)?)"
)
_ERA = r"(?:[ \t\n\r\v\f]+(?P<era>(?i:ad|bc)))?"
_TIMESTAMP_RE = re.compile(
    rf"{_DATE_PART}(?:(?:[Tt]|[ \t\n\r\v\f]+){_TIME_PART})?(?:[ \t\n\r\v\f]*{_ZONE_PART})?{_ERA}"
)
_TIME_RE = re.compile(rf"{_TIME_PART}(?:[ \t\n\r\v\f]*{_ZONE_PART})?")
_EPOCH = dt.datetime(1970, 1, 1)


def _field_overflow(s: str) -> DatetimeOutOfRange:
    """A date or time field such as month 13 or minute 60 (PostgreSQL's DTERR_FIELD_OVERFLOW)."""
    return DatetimeOutOfRange(f'date/time field value out of range: "{s}"')


def _time_of_day(m: re.Match[str], s: str) -> int:
    """Microseconds since midnight; 24:00:00 and a leap second 60 are allowed as PostgreSQL does."""
    if m.group("h") is None:
        return 0
    hour, minute, sec = int(m.group("h")), int(m.group("mi")), int(m.group("s") or 0)
    frac = m.group("f")
    fsec = round(float("0." + frac) * 1_000_000) if frac else 0  # PostgreSQL: rint(frac * 1e6)
    if minute > 59 or sec > 60 or hour > 24 or (hour == 24 and (minute or sec or fsec)):
        raise _field_overflow(s)
    return ((hour * 60 + minute) * 60 + sec) * 1_000_000 + fsec


def _zone_offset(m: re.Match[str], s: str) -> dt.timedelta:
    """The UTC offset written in the text (zero when there is none)."""
    if m.group("zs") is None:
        return dt.timedelta(0)
    hours, minutes, secs = int(m.group("zh")), int(m.group("zm") or 0), int(m.group("zsec") or 0)
    if hours > 15 or minutes > 59 or secs > 59:
        raise DatetimeOutOfRange(f'time zone displacement out of range: "{s}"', sqlstate=TZ_DISPLACEMENT)
    offset = dt.timedelta(hours=hours, minutes=minutes, seconds=secs)
    return -offset if m.group("zs") == "-" else offset


def _parse_datetime(s: str, t: DataType) -> dt.datetime:
    """Date, optional time and optional zone, as a naive datetime (in UTC for TIMESTAMPTZ).

    Like PostgreSQL, DATE ignores the time and zone and TIMESTAMP ignores the zone.
    """
    text = s.strip(WS)
    what = "date" if t.kind is TypeKind.DATE else "timestamp"
    special = text.lower()
    if special == "epoch":
        return _EPOCH
    if special in ("infinity", "+infinity", "-infinity"):
        raise DatetimeOutOfRange(f'{what} out of range: "{s}"')
    m = _TIMESTAMP_RE.fullmatch(text)
    if m is None:
        raise InvalidInput(
            f'invalid input syntax for type {PG_NAME[t.kind]}: "{s}"', sqlstate=BAD_DATETIME_FORMAT
        )
    year_digits = m.group("y").lstrip("0")
    year = int(year_digits or "0") if len(year_digits) < 10 else dt.MAXYEAR + 1
    month, day = int(m.group("mo")), int(m.group("d"))
    if year == 0 or not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year % 400 or 400, month)[1]:
        raise _field_overflow(s)
    if year > dt.MAXYEAR or (m.group("era") or "").lower() == "bc":
        raise DatetimeOutOfRange(f'{what} out of range: "{s}"')
    usecs = _time_of_day(m, s)
    offset = _zone_offset(m, s)
    if t.kind is TypeKind.DATE:
        return dt.datetime(year, month, day)
    try:
        result = dt.datetime(year, month, day) + dt.timedelta(microseconds=usecs)
        if t.kind is TypeKind.TIMESTAMPTZ:
            result -= offset
    except OverflowError:
        raise DatetimeOutOfRange(f'{what} out of range: "{s}"') from None
    return result


def parse_date(s: str, t: DataType) -> dt.date:
    """date_in: the date of a date or timestamp literal."""
    return _parse_datetime(s, t).date()


def parse_timestamp(s: str, t: DataType) -> dt.datetime:
    """A naive datetime; a zone in the text is ignored, as timestamp_in does."""
    return _parse_datetime(s, t)


def parse_timestamptz(s: str, t: DataType) -> dt.datetime:
    """An aware datetime in UTC; text without an offset is UTC (the session TimeZone)."""
    return _parse_datetime(s, t).replace(tzinfo=dt.UTC)


def parse_time(s: str, t: DataType) -> dt.time:
    """time_in: ``hh:mm[:ss[.frac]]``; a zone suffix is ignored as for time without time zone."""
    text = s.strip(WS)
    if text.lower() == "allballs":
        return dt.time(0)
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise InvalidInput(f'invalid input syntax for type time: "{s}"', sqlstate=BAD_DATETIME_FORMAT)
    usecs = _time_of_day(m, s)
    _zone_offset(m, s)  # validated, then ignored
    if usecs >= 86_400_000_000:
        raise DatetimeOutOfRange(f'time "{s}" is not supported: TIME values end at 23:59:59.999999')
    secs, micro = divmod(usecs, 1_000_000)
    return dt.time(secs // 3600, secs // 60 % 60, secs % 60, micro)
