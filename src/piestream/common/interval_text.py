"""PostgreSQL text form of INTERVAL values.

Output is IntervalStyle ``postgres`` (``1 year 2 mons 3 days 04:05:06.5``), the style pgwire
clients expect. Input follows PostgreSQL's ``interval_in``: the verbose unit syntax
(``1 day 2 hours``, ``@ 1 day ago``, ``-1 days +02:00:00``, SQL ``1-2`` years-months) is decoded
right to left like ``DecodeInterval``, falling back to ISO 8601 (``P1Y2M3DT4H5M6S``,
``P0001-02-03T04:05:06``). Fractional units cascade with PostgreSQL's own double arithmetic
(``1.5 months`` = ``1 mon 15 days``) so both systems read a literal as the same value.
"""

from __future__ import annotations

import math
import re

from piestream.common.errors import DatetimeOutOfRange, InvalidInput
from piestream.common.interval import (
    DAYS_PER_MONTH,
    I32_MAX,
    I32_MIN,
    I64_MAX,
    I64_MIN,
    USECS_PER_DAY,
    USECS_PER_HOUR,
    USECS_PER_MINUTE,
    USECS_PER_SEC,
    Interval,
)

#: SQLSTATEs PostgreSQL uses for interval input errors (invalid_datetime_format,
#: interval_field_overflow).
SQLSTATE_BAD_FORMAT = "22007"
SQLSTATE_INTERVAL_OVERFLOW = "22015"

_MONTHS_PER_YEAR = 12


def _tdiv(a: int, b: int) -> int:
    """C integer division (truncates toward zero), which PostgreSQL's field split relies on."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _crem(a: int, b: int) -> int:
    """C remainder (takes the dividend's sign)."""
    return a - b * _tdiv(a, b)


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def format_interval(iv: Interval) -> str:
    """IntervalStyle postgres: signed year / mon / day parts, then ``[-+]hh:mm:ss[.ffffff]``.

    Like PostgreSQL's EncodeInterval, a part after a negative one gets an explicit ``+``, so the
    text reads back to the same fields (``-1 days +02:00:00``).
    """
    years = _tdiv(iv.months, _MONTHS_PER_YEAR)
    parts: list[str] = []
    is_before = False
    for value, unit in ((years, "year"), (iv.months - years * _MONTHS_PER_YEAR, "mon"), (iv.days, "day")):
        if value == 0:
            continue
        plus = "+" if is_before and value > 0 else ""
        parts.append(f"{plus}{value} {unit}{'' if value == 1 else 's'}")
        is_before = value < 0
    if not parts or iv.usecs != 0:
        mag = abs(iv.usecs)
        hours, rest = divmod(mag, USECS_PER_HOUR)
        minutes, rest = divmod(rest, USECS_PER_MINUTE)
        secs, frac = divmod(rest, USECS_PER_SEC)
        sign = "-" if iv.usecs < 0 else ("+" if is_before else "")
        text = f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"
        if frac:
            text += f".{frac:06d}".rstrip("0")
        parts.append(text)
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------------------------


class _BadFormat(Exception):
    """DTERR_BAD_FORMAT: the text is not an interval in this syntax."""


class _Overflow(Exception):
    """DTERR_FIELD_OVERFLOW: a field does not fit (reported as 22015)."""


def _int(digits: str) -> int:
    """Unsigned decimal digits as an int; absurdly many digits overflow (like strtoi64's ERANGE)."""
    d = digits.lstrip("0")
    if len(d) > 30:
        raise _Overflow
    return int(d or "0")


def _i32(v: int) -> int:
    if not I32_MIN <= v <= I32_MAX:
        raise _Overflow
    return v


def _i64(v: int) -> int:
    if not I64_MIN <= v <= I64_MAX:
        raise _Overflow
    return v


class _Fields:
    """PostgreSQL's ``pg_itm_in`` accumulator with its Adjust* helpers and overflow checks.

    The fractional helpers use floats on purpose: they replay PostgreSQL's double arithmetic
    (C casts truncate, ``rint`` rounds half to even) so fractional input rounds identically.
    """

    __slots__ = ("days", "months", "usecs", "years")

    def __init__(self) -> None:
        self.usecs = 0
        self.days = 0
        self.months = 0
        self.years = 0

    def fract_usecs(self, frac: float, scale: int) -> None:
        if frac == 0:
            return
        frac *= scale
        usec = int(frac)
        frac -= usec
        if frac > 0.5:
            usec += 1
        elif frac < -0.5:
            usec -= 1
        self.usecs = _i64(self.usecs + usec)

    def fract_days(self, frac: float, scale: int) -> None:
        if frac == 0:
            return
        frac *= scale
        extra = int(frac)
        self.days = _i32(self.days + extra)
        self.fract_usecs(frac - extra, USECS_PER_DAY)

    def fract_years(self, frac: float, scale: int) -> None:
        self.months = _i32(self.months + round(frac * scale * _MONTHS_PER_YEAR))

    def micro(self, val: int, fval: float, scale: int) -> None:
        self.usecs = _i64(self.usecs + _i64(val * scale))
        self.fract_usecs(fval, scale)

    def add_days(self, val: int, scale: int) -> None:
        self.days = _i32(self.days + _i32(_i32(val) * scale))

    def add_months(self, val: int) -> None:
        self.months = _i32(self.months + _i32(val))

    def add_years(self, val: int, scale: int) -> None:
        self.years = _i32(self.years + _i32(_i32(val) * scale))

    def negate(self) -> None:
        if I32_MIN in (self.days, self.months, self.years) or self.usecs == I64_MIN:
            raise _Overflow
        self.usecs, self.days, self.months, self.years = -self.usecs, -self.days, -self.months, -self.years

    def to_interval(self) -> Interval:
        return Interval(_i32(self.years * _MONTHS_PER_YEAR + self.months), self.days, self.usecs)


def parse_interval(s: str) -> Interval:
    """An interval from any text PostgreSQL's interval_in accepts (see the module docstring)."""
    text = s.strip(" \t\n\r\v\f")
    try:
        try:
            fields = _decode_verbose(_tokenize(text))
        except _BadFormat:
            fields = _decode_iso8601(text)
        return fields.to_interval()
    except _BadFormat:
        raise InvalidInput(
            f'invalid input syntax for type interval: "{s}"', sqlstate=SQLSTATE_BAD_FORMAT
        ) from None
    except _Overflow:
        raise DatetimeOutOfRange(
            f'interval field value out of range: "{s}"', sqlstate=SQLSTATE_INTERVAL_OVERFLOW
        ) from None


# -- verbose syntax -----------------------------------------------------------------------------

# Field kinds of PostgreSQL's ParseDateTime that an interval can contain.
_TOKEN = re.compile(
    r"""
    (?P<time>[0-9]+:[0-9:.]*)               # hh:mm[:ss[.frac]]  (DTK_TIME)
  | (?P<num>[0-9]+(?:[-/.][0-9\-/.]*)?      # 5  1.5  1-2        (DTK_NUMBER / DTK_DATE)
       |\.[0-9]*)
  | (?P<signed>[+-][ \t\n\r\v\f]*[0-9][0-9:.\-]*)  # -1.5  +02:00   (DTK_TZ)
  | (?P<word>[A-Za-z]+)                     # units, "ago"       (DTK_STRING)
  | (?P<space>[ \t\n\r\v\f]+)
  | (?P<punct>[!-*,./:-@\[-`{-~])           # other ASCII punctuation only delimits ("@")
    """,
    re.VERBOSE,
)

# DecodeInterval unit kinds; a field's bit in the "already seen" mask is its position here.
_UNIT_KINDS = (
    "year",
    "month",
    "day",
    "week",
    "hour",
    "minute",
    "second",
    "millisecond",
    "microsecond",
    "decade",
    "century",
    "millennium",
)
_MASK = {kind: 1 << i for i, kind in enumerate(_UNIT_KINDS)}
_ALL_SECS = _MASK["second"] | _MASK["millisecond"] | _MASK["microsecond"]
_TIME_MASK = _MASK["hour"] | _MASK["minute"] | _ALL_SECS

# PostgreSQL's deltatktbl; words are looked up lowercased and cut to TOKMAXLEN (10) characters,
# which is how "milliseconds" finds "millisecon".
_UNITS: dict[str, str] = {
    **dict.fromkeys(("c", "cent", "centuries", "century"), "century"),
    **dict.fromkeys(("d", "day", "days"), "day"),
    **dict.fromkeys(("dec", "decade", "decades", "decs"), "decade"),
    **dict.fromkeys(("h", "hour", "hours", "hr", "hrs"), "hour"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "minute"),
    **dict.fromkeys(("microsecon", "us", "usec", "usecond", "useconds", "usecs"), "microsecond"),
    **dict.fromkeys(("mil", "millennia", "millennium", "mils"), "millennium"),
    **dict.fromkeys(("millisecon", "ms", "msec", "msecond", "mseconds", "msecs"), "millisecond"),
    **dict.fromkeys(("mon", "mons", "month", "months"), "month"),
    **dict.fromkeys(("s", "sec", "second", "seconds", "secs"), "second"),
    **dict.fromkeys(("w", "week", "weeks"), "week"),
    **dict.fromkeys(("y", "year", "years", "yr", "yrs"), "year"),
}
_TOKMAXLEN = 10
_AGO = "ago"
_AFTER_AGO = "after-ago"  # the unit a bare number before "ago" would get: none (DTK_NUMBER)


def _tokenize(text: str) -> list[tuple[str, str]]:
    """Split into (kind, text) fields like ParseDateTime; punctuation other than signs is dropped."""
    fields: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _BadFormat
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        if kind in ("space", "punct"):
            continue
        token = m.group()
        if kind == "signed":  # ParseDateTime soaks up blanks after the sign
            token = token[0] + token[1:].lstrip(" \t\n\r\v\f")
        fields.append((kind, token))
    return fields


def _decode_time(body: str) -> int:
    """``hh:mm``, ``hh:mm:ss[.frac]`` or ``mm:ss.frac`` (DecodeTimeCommon) in microseconds."""
    m = re.fullmatch(r"([0-9]+):([0-9]*)(?:(:)([0-9]*))?(\.[0-9]*)?", body)
    if m is None:
        raise _BadFormat
    hour, minute, sec = _int(m.group(1)), _int(m.group(2)), _int(m.group(4) or "")
    frac = m.group(5)
    fsec = round(float("0" + frac) * USECS_PER_SEC) if frac else 0
    if frac is not None and m.group(3) is None:  # "mm:ss.frac" is always MINUTE TO SECOND
        hour, minute, sec = 0, _i32(hour), minute
    if minute > 59 or sec > 60 or fsec > USECS_PER_SEC:
        raise _Overflow
    # Range is checked by the caller after applying the sign, so that the most negative interval's
    # own output ("-2562047788:00:54.775808") reads back.
    return hour * USECS_PER_HOUR + minute * USECS_PER_MINUTE + sec * USECS_PER_SEC + fsec


_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:-([0-9]*)|(\.[0-9]*))?")


def _apply_number(f: _Fields, text: str, unit: str) -> tuple[int, str]:
    """Add one number field in `unit`; returns the field's mask and the unit kept for the next one."""
    m = _NUMBER.fullmatch(text)
    if m is None or (not m.group(2) and not (m.group(4) and not m.group(1))):
        raise _BadFormat  # strtoi64 needs digits, except for a bare ".5"
    negative = m.group(1) == "-"
    val = _i64(-_int(m.group(2)) if negative else _int(m.group(2)))
    fval = 0.0
    if m.group(3) is not None:  # SQL "years-months"
        months = _int(m.group(3))
        if months >= _MONTHS_PER_YEAR:
            raise _Overflow
        val = _i64(val * _MONTHS_PER_YEAR + (-months if negative else months))
        unit = "month"
    elif m.group(4):
        fval = float("0" + m.group(4)) if m.group(4) != "." else 0.0
        if negative:
            fval = -fval
    mask = _MASK.get(unit, 0)
    if unit == "microsecond":
        f.micro(val, fval, 1)
    elif unit == "millisecond":
        f.micro(val, fval, 1000)
    elif unit == "second":
        f.micro(val, fval, USECS_PER_SEC)
        if fval != 0:
            mask = _ALL_SECS
    elif unit == "minute":
        f.micro(val, fval, USECS_PER_MINUTE)
    elif unit == "hour":
        f.micro(val, fval, USECS_PER_HOUR)
        unit = "day"  # '1 5 hours' means 1 day 5 hours
    elif unit == "day":
        f.add_days(val, 1)
        f.fract_usecs(fval, USECS_PER_DAY)
    elif unit == "week":
        f.add_days(val, 7)
        f.fract_days(fval, 7)
    elif unit == "month":
        f.add_months(val)
        f.fract_days(fval, DAYS_PER_MONTH)
    elif unit in ("year", "decade", "century", "millennium"):
        scale = {"year": 1, "decade": 10, "century": 100, "millennium": 1000}[unit]
        f.add_years(val, scale)
        f.fract_years(fval, scale)
    else:
        raise _BadFormat
    return mask, unit


def _decode_verbose(fields: list[tuple[str, str]]) -> _Fields:
    """DecodeInterval: read fields right to left so each unit word applies to the number before it."""
    f = _Fields()
    fmask = 0
    unit: str | None = None  # None = no unit seen yet: a trailing bare number means seconds
    is_before = False
    pending_unit = False
    for i in range(len(fields) - 1, -1, -1):
        kind, text = fields[i]
        if kind == "time" or (kind == "signed" and ":" in text):
            body = text[1:] if kind == "signed" else text
            usecs = _decode_time(body)
            f.usecs = _i64(f.usecs + (-usecs if text[0] == "-" else usecs))
            tmask = _TIME_MASK
            unit, pending_unit = "day", False  # '1 02:03' means 1 day 02:03
        elif kind in ("num", "signed"):
            tmask, unit = _apply_number(f, text, unit or "second")
            pending_unit = False
        else:
            word = text.lower()[:_TOKMAXLEN]
            if pending_unit:
                raise _BadFormat  # two unit words in a row
            tmask = 0
            if word in _UNITS:
                unit, pending_unit = _UNITS[word], True
            elif word == _AGO and i == len(fields) - 1:
                is_before, unit = True, _AFTER_AGO
            else:
                raise _BadFormat
        if tmask & fmask:
            raise _BadFormat  # the same field given twice
        fmask |= tmask
    if fmask == 0 or pending_unit:
        raise _BadFormat
    if is_before:
        f.negate()
    return f


# -- ISO 8601 -----------------------------------------------------------------------------------

_ISO_NUMBER = re.compile(r"-?(?:([0-9]+)\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _iso_number(text: str, pos: int) -> tuple[int, float, int, int]:
    """ParseISO8601Number: (integer part, fraction, end position, integer digit count) of a
    strtod-style number; the digit count tells the basic alternative format apart."""
    m = _ISO_NUMBER.match(text, pos)
    if m is None:
        raise _BadFormat
    val = float(m.group())
    if math.isnan(val) or abs(val) > 1.0e15:
        raise _Overflow
    ipart = math.trunc(val)
    return ipart, val - ipart, m.end(), len(m.group(1) or "")


def _decode_iso8601(text: str) -> _Fields:
    """DecodeISO8601Interval: designators (``P1Y2M3DT4H5M6S``) or the alternative format."""
    f = _Fields()
    if len(text) < 2 or text[0] != "P":
        raise _BadFormat
    pos, datepart, havefield = 1, True, False
    while pos < len(text):
        if text[pos] == "T":
            datepart, havefield, pos = False, False, pos + 1
            continue
        val, fval, pos, width = _iso_number(text, pos)
        unit = text[pos] if pos < len(text) else ""
        pos += 1
        if datepart:
            if unit == "Y":
                f.add_years(val, 1)
                f.fract_years(fval, 1)
            elif unit == "M":
                f.add_months(val)
                f.fract_days(fval, DAYS_PER_MONTH)
            elif unit == "W":
                f.add_days(val, 7)
                f.fract_days(fval, 7)
            elif unit == "D":
                f.add_days(val, 1)
                f.fract_usecs(fval, USECS_PER_DAY)
            elif unit in ("T", "") and width == 8 and not havefield:  # basic YYYYMMDD
                f.add_years(_tdiv(val, 10000), 1)
                f.add_months(_crem(_tdiv(val, 100), 100))
                f.add_days(_crem(val, 100), 1)
                f.fract_usecs(fval, USECS_PER_DAY)
                if unit == "":
                    return f
                datepart, havefield = False, False
                continue
            elif unit in ("T", "", "-"):  # extended YYYY-MM-DD
                if havefield:
                    raise _BadFormat
                f.add_years(val, 1)
                f.fract_years(fval, 1)
                if unit == "":
                    return f
                if unit == "-":
                    val, fval, pos, _ = _iso_number(text, pos)
                    f.add_months(val)
                    f.fract_days(fval, DAYS_PER_MONTH)
                    if pos < len(text) and text[pos] == "-":
                        val, fval, pos, _ = _iso_number(text, pos + 1)
                        f.add_days(val, 1)
                        f.fract_usecs(fval, USECS_PER_DAY)
                    if pos == len(text):
                        return f
                    if text[pos] != "T":
                        raise _BadFormat
                    pos += 1
                datepart, havefield = False, False
                continue
            else:
                raise _BadFormat
        elif unit in ("H", "M", "S"):
            f.micro(val, fval, {"H": USECS_PER_HOUR, "M": USECS_PER_MINUTE, "S": USECS_PER_SEC}[unit])
        elif unit == "" and width == 6 and not havefield:  # basic hhmmss
            f.micro(_tdiv(val, 10000), 0.0, USECS_PER_HOUR)
            f.micro(_crem(_tdiv(val, 100), 100), 0.0, USECS_PER_MINUTE)
            f.micro(_crem(val, 100), 0.0, USECS_PER_SEC)
            f.fract_usecs(fval, 1)
            return f
        elif unit in ("", ":"):  # extended hh:mm:ss
            if havefield:
                raise _BadFormat
            f.micro(val, fval, USECS_PER_HOUR)
            if unit == "":
                return f
            for scale in (USECS_PER_MINUTE, USECS_PER_SEC):
                val, fval, pos, _ = _iso_number(text, pos)
                f.micro(val, fval, scale)
                if pos == len(text):
                    return f
                if text[pos] != ":" or scale == USECS_PER_SEC:
                    raise _BadFormat
                pos += 1
        else:
            raise _BadFormat
        havefield = True
    return f
