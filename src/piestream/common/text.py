"""PostgreSQL text form of datums: what pgwire sends to clients and what ``'...'::type`` accepts.

Output matches PostgreSQL 15 with DateStyle ISO, IntervalStyle postgres, TimeZone UTC and
extra_float_digits = 1 (shortest round-trip floats), so clients and tests see exactly what they
would see from PostgreSQL. NUMERIC is printed normalized (no trailing fractional zeros), as
RisingWave does, because piestream stores every NUMERIC at one fixed scale.

Input accepts the PostgreSQL literal syntax of each type and fails with PostgreSQL's message and
SQLSTATE (22P02 bad syntax, 22007 bad date/time syntax, 22003 / 22008 out of range, ...), so an
error reads the same whether it came from piestream or from PostgreSQL.

For every type, ``parse_datum(format_datum(v, t), t)`` gives back ``v`` (see scalar.py for the
Python form of each type's values). INTERVAL text lives in interval_text.py.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import numpy as np

from piestream.common.errors import DatetimeOutOfRange, InvalidInput, NumericOutOfRange
from piestream.common.interval_text import format_interval, parse_interval
from piestream.common.scalar import NUMERIC_MAX_DIGITS, Datum, normalize_numeric
from piestream.common.types import DataType, TypeKind

__all__ = ["format_datum", "format_interval", "parse_datum", "parse_interval"]

#: C isspace(): what PostgreSQL trims around non-string input and treats as blanks in composites.
_WS = " \t\n\r\v\f"

#: SQLSTATEs without an error class of their own (the error class still says what went wrong).
_BAD_DATETIME_FORMAT = "22007"  # invalid_datetime_format
_TZ_DISPLACEMENT = "22009"  # invalid_time_zone_displacement_value
_INVALID_PARAMETER = "22023"  # invalid_parameter_value
_UNTRANSLATABLE = "22P05"  # untranslatable_character

#: The type names PostgreSQL puts in input error messages.
_PG_NAME = {
    TypeKind.BOOLEAN: "boolean",
    TypeKind.SMALLINT: "smallint",
    TypeKind.INT: "integer",
    TypeKind.BIGINT: "bigint",
    TypeKind.SERIAL: "bigint",
    TypeKind.NUMERIC: "numeric",
    TypeKind.REAL: "real",
    TypeKind.DOUBLE: "double precision",
    TypeKind.DATE: "date",
    TypeKind.TIME: "time",
    TypeKind.TIMESTAMP: "timestamp",
    TypeKind.TIMESTAMPTZ: "timestamp with time zone",
}

_INT_RANGE = {
    TypeKind.SMALLINT: (-(2**15), 2**15 - 1),
    TypeKind.INT: (-(2**31), 2**31 - 1),
    TypeKind.BIGINT: (-(2**63), 2**63 - 1),
    TypeKind.SERIAL: (-(2**63), 2**63 - 1),
}


def _syntax_error(s: str, t: DataType) -> InvalidInput:
    """PostgreSQL's 22P02 for text that is not a value of `t` at all."""
    return InvalidInput(f'invalid input syntax for type {_PG_NAME[t.kind]}: "{s}"')


# =============================================================================================
# Output
# =============================================================================================


def format_datum(v: Datum, t: DataType) -> str:
    """PostgreSQL text output of a non-NULL datum of type `t` (NULL has no text form)."""
    if v is None:
        raise ValueError("format_datum needs a non-NULL datum; NULL has no text form")
    return _FORMATTERS[t.kind](v, t)


def _format_numeric(v: Any) -> str:
    """Plain notation without trailing fractional zeros; "-0" prints as "0"."""
    d = v if isinstance(v, Decimal) else Decimal(v if isinstance(v, int) else repr(float(v)))
    if d.is_nan():
        return "NaN"
    if d.is_infinite():
        return "-Infinity" if d < 0 else "Infinity"
    if d == 0:
        return "0"
    text = format(d, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _format_float(v: Any, t: DataType) -> str:
    """Shortest round-trip digits laid out like PostgreSQL's float4out / float8out.

    Fixed notation when the decimal exponent X of the first digit satisfies -4 <= X < P
    (P = 15 for double, 6 for real), else ``d.ddde+XX``; REAL uses float32 shortest digits.
    """
    x = float(v)
    if t.kind is TypeKind.REAL:
        with np.errstate(over="ignore", under="ignore"):
            f32 = np.float32(x)
        x, digits_text, max_exp = float(f32), str(f32), 6
    else:
        digits_text, max_exp = repr(x), 15
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign, digit_tuple, exponent = Decimal(digits_text).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exp10 = exponent + len(digit_tuple) - 1  # decimal exponent of the first digit
    if -4 <= exp10 < max_exp:
        if exp10 < 0:
            body = "0." + "0" * (-exp10 - 1) + digits
        elif len(digits) <= exp10 + 1:
            body = digits + "0" * (exp10 + 1 - len(digits))
        else:
            body = digits[: exp10 + 1] + "." + digits[exp10 + 1 :]
    else:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        body = f"{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    return "-" + body if sign else body


def _format_fraction(usecs: int) -> str:
    """``.ffffff`` without trailing zeros, or nothing for whole seconds."""
    return f".{usecs:06d}".rstrip("0") if usecs else ""


def _format_date(v: dt.date) -> str:
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"


def _format_time(v: dt.time | dt.datetime) -> str:
    return f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}{_format_fraction(v.microsecond)}"


def _format_timestamptz(v: dt.datetime) -> str:
    """In UTC with a "+00" suffix; naive values are taken as UTC already (as scalar.py does)."""
    if v.tzinfo is not None:
        try:
            v = v.astimezone(dt.UTC)
        except OverflowError:
            raise DatetimeOutOfRange("timestamp out of range") from None
    return f"{_format_date(v)} {_format_time(v)}+00"


#: record_out quotes a field holding any of these (or an empty string).
_RECORD_QUOTE = frozenset('",()\\' + _WS)
#: array_out quotes an element holding any of these (or an empty string, or NULL in any case).
_ARRAY_QUOTE = frozenset('",{}\\' + _WS)


def _format_struct(v: Any, t: DataType) -> str:
    """Record text ``(1,foo,)``: NULL fields are empty, others quoted as record_out does.

    Inside quotes record_out doubles ``"`` and ``\\`` (``"a""b"``), unlike array_out.
    """
    values = [v.get(f.name) for f in t.fields] if isinstance(v, Mapping) else list(v)
    parts = []
    for value, field in zip(values, t.fields, strict=True):
        if value is None:
            parts.append("")
            continue
        text = format_datum(value, field.data_type)
        if text == "" or not _RECORD_QUOTE.isdisjoint(text):
            text = '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'
        parts.append(text)
    return "(" + ",".join(parts) + ")"


def _format_list(v: Any, t: DataType) -> str:
    """Array text ``{1,2,NULL}``; nested lists print their braces unquoted (``{{1,2},{3}}``)."""
    elem = t.elem
    assert elem is not None
    parts = []
    for value in v:
        if value is None:
            parts.append("NULL")
            continue
        text = format_datum(value, elem)
        if elem.kind is not TypeKind.LIST and (
            text == "" or text.lower() == "null" or not _ARRAY_QUOTE.isdisjoint(text)
        ):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(text)
    return "{" + ",".join(parts) + "}"


_FORMATTERS: dict[TypeKind, Callable[[Any, DataType], str]] = {
    TypeKind.BOOLEAN: lambda v, t: "t" if v else "f",
    TypeKind.SMALLINT: lambda v, t: str(int(v)),
    TypeKind.INT: lambda v, t: str(int(v)),
    TypeKind.BIGINT: lambda v, t: str(int(v)),
    TypeKind.SERIAL: lambda v, t: str(int(v)),
    TypeKind.NUMERIC: lambda v, t: _format_numeric(v),
    TypeKind.REAL: _format_float,
    TypeKind.DOUBLE: _format_float,
    TypeKind.VARCHAR: lambda v, t: str(v),
    TypeKind.JSONB: lambda v, t: str(v),
    TypeKind.BYTEA: lambda v, t: "\\x" + bytes(v).hex(),
    TypeKind.DATE: lambda v, t: _format_date(v),
    TypeKind.TIME: lambda v, t: _format_time(v),
    TypeKind.TIMESTAMP: lambda v, t: f"{_format_date(v)} {_format_time(v)}",
    TypeKind.TIMESTAMPTZ: lambda v, t: _format_timestamptz(v),
    TypeKind.INTERVAL: lambda v, t: format_interval(v),
    TypeKind.STRUCT: _format_struct,
    TypeKind.LIST: _format_list,
}


# =============================================================================================
# Input
# =============================================================================================


def parse_datum(s: str, t: DataType) -> Datum:
    """The datum PostgreSQL's input function for `t` would read from `s` (in its Python form)."""
    return _PARSERS[t.kind](s, t)


# -- booleans and numbers -----------------------------------------------------------------------


def _parse_bool(s: str, t: DataType) -> bool:
    """boolin: t/true/yes/on/1 and f/false/no/off/0, any case, unique prefixes allowed."""
    word = s.strip(_WS).lower()
    if word:
        for full, value, min_len in (
            ("true", True, 1),
            ("false", False, 1),
            ("yes", True, 1),
            ("no", False, 1),
            ("on", True, 2),
            ("off", False, 2),
            ("1", True, 1),
            ("0", False, 1),
        ):
            if len(word) >= min_len and full.startswith(word):
                return value
    raise _syntax_error(s, t)


_INT_RE = re.compile(r"[+-]?[0-9]+")


def _parse_int(s: str, t: DataType) -> int:
    """pg_strtoint: optional sign and ASCII digits only (no "1e3", "1.0" or "1_000")."""
    text = s.strip(_WS)
    if not _INT_RE.fullmatch(text):
        raise _syntax_error(s, t)
    lo, hi = _INT_RANGE[t.kind]
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 20 or not lo <= int(text) <= hi:  # the length test guards int() on huge input
        raise NumericOutOfRange(f'value "{s}" is out of range for type {_PG_NAME[t.kind]}')
    return int(text)


_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?")
_SPECIAL_NUMBER_RE = re.compile(r"[+-]?(?:inf|infinity)|nan", re.IGNORECASE)
_SPECIAL_FLOAT_RE = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)  # strtod takes "-nan"
#: numeric_in rejects exponents beyond this (NUMERIC_MAX_PRECISION).
_MAX_EXPONENT = 1000


def _parse_decimal_text(text: str, original: str) -> Decimal:
    """A Decimal from numeric_in syntax, with its exponent bound; `original` is for the message."""
    m = _DECIMAL_RE.fullmatch(text)
    exponent = (m.group(1) or "0").lstrip("+-").lstrip("0") if m else ""
    if m is None or len(exponent) > 4 or int(exponent or "0") > _MAX_EXPONENT:
        raise InvalidInput(f'invalid input syntax for type numeric: "{original}"')
    return Decimal(text)


def _parse_numeric(s: str, t: DataType) -> Decimal:
    """numeric_in syntax, then rounded to the stored scale and range-checked by normalize_numeric."""
    text = s.strip(_WS)
    if _SPECIAL_NUMBER_RE.fullmatch(text):
        # normalize_numeric explains that only finite NUMERICs can be stored.
        return normalize_numeric(Decimal(text.lower().replace("infinity", "inf")))
    d = _parse_decimal_text(text, s)
    if d != 0 and d.adjusted() >= NUMERIC_MAX_DIGITS:  # before quantize, which would overflow
        raise NumericOutOfRange("numeric field overflow")
    return normalize_numeric(d)


def _parse_float(s: str, t: DataType) -> float:
    """float8in / float4in: decimal or Infinity / inf / NaN; overflow and underflow are 22003."""
    text = s.strip(_WS)
    if _SPECIAL_FLOAT_RE.fullmatch(text):
        return float(text)
    m = _DECIMAL_RE.fullmatch(text)
    if m is None:
        raise _syntax_error(s, t)
    x = float(text)
    if t.kind is TypeKind.REAL and not math.isinf(x):
        x = _round_to_float32(x, text)
    if math.isinf(x) or (x == 0 and Decimal(text) != 0):
        raise NumericOutOfRange(f'"{s}" is out of range for type {_PG_NAME[t.kind]}')
    return x


def _round_to_float32(x: float, text: str) -> float:
    """Correctly rounded float32 of decimal `text` (whose nearest double is `x`), like strtof.

    Rounding to double first and then to float32 goes wrong only when the double lands exactly
    halfway between two float32s; then the exact decimal decides.
    """
    with np.errstate(over="ignore", under="ignore"):
        f = np.float32(x)
        if float(f) == x or math.isinf(f):
            return float(f)
        toward = np.float32(np.inf) if float(f) < x else np.float32(-np.inf)
        other = np.nextafter(f, toward)
    mid = (Decimal(float(f)) + Decimal(float(other))) / 2
    if Decimal(x) != mid:
        return float(f)
    exact = Decimal(text)
    if exact == mid:
        return float(f)  # a true tie: numpy already rounded half to even
    closer_to_other = (exact > mid) == (float(other) > float(f))
    return float(other) if closer_to_other else float(f)


# -- strings ------------------------------------------------------------------------------------


_OCTAL_ESCAPE = re.compile(r"[0-3][0-7][0-7]")


def _parse_bytea(s: str, t: DataType) -> bytes:
    """byteain: ``\\x`` hex (blanks between bytes allowed) or the escape form (``\\ooo``, ``\\\\``)."""
    if s.startswith("\\x"):
        out = bytearray()
        i, n = 2, len(s)
        while i < n:
            if s[i] in " \n\t\r":
                i += 1
                continue
            pair = s[i : i + 2]
            for ch in pair:
                if ch not in "0123456789abcdefABCDEF":
                    raise InvalidInput(f'invalid hexadecimal digit: "{ch}"', sqlstate=_INVALID_PARAMETER)
            if len(pair) < 2:
                raise InvalidInput(
                    "invalid hexadecimal data: odd number of digits", sqlstate=_INVALID_PARAMETER
                )
            out.append(int(pair, 16))
            i += 2
        return bytes(out)
    out = bytearray()
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogatepass")
            i += 1
        elif _OCTAL_ESCAPE.fullmatch(s, i + 1, i + 4):
            out.append(int(s[i + 1 : i + 4], 8))
            i += 4
        elif s[i + 1 : i + 2] == "\\":
            out.append(0x5C)
            i += 2
        else:
            raise InvalidInput("invalid input syntax for type bytea")
    return bytes(out)


def _json_number(text: str) -> Decimal:
    """JSON numbers become numerics, as in jsonb: their text keeps its scale ("1.50")."""
    return _parse_decimal_text(text, text)


def _json_reject_constant(name: str) -> None:
    """Python's json takes NaN / Infinity; JSON (and PostgreSQL) does not."""
    raise ValueError(f'Token "{name}" is invalid.')


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """jsonb objects keep the last of duplicate keys and order keys by (byte length, bytes)."""
    obj = dict(pairs)
    for key in obj:
        _check_json_string(key)
    return dict(sorted(obj.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode())))


def _check_json_string(s: str) -> None:
    """PostgreSQL rejects \\u0000 and lone surrogates, which are not valid text."""
    if "\x00" in s:
        raise InvalidInput(
            "unsupported Unicode escape sequence",
            detail="\\u0000 cannot be converted to text.",
            sqlstate=_UNTRANSLATABLE,
        )
    if any("\ud800" <= ch <= "\udfff" for ch in s):
        raise InvalidInput(
            "invalid input syntax for type json", detail="Unicode surrogates must come in pairs."
        )


def _jsonb_text(v: Any) -> str:
    """jsonb output: ``", "`` and ``": "`` separators, numbers in numeric_out form."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, Decimal):
        text = format(v, "f")
        return text.lstrip("-") if v == 0 else text
    if isinstance(v, str):
        _check_json_string(v)
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_jsonb_text(x) for x in v) + "]"
    members = (f"{json.dumps(k, ensure_ascii=False)}: {_jsonb_text(x)}" for k, x in v.items())
    return "{" + ", ".join(members) + "}"


def _parse_jsonb(s: str, t: DataType) -> str:
    """Valid JSON, returned as the normalized text PostgreSQL's jsonb would print."""
    try:
        value = json.loads(
            s,
            parse_float=_json_number,
            parse_int=_json_number,
            parse_constant=_json_reject_constant,
            object_pairs_hook=_json_object,
        )
        return _jsonb_text(value)
    except (ValueError, RecursionError) as e:
        raise InvalidInput("invalid input syntax for type json", detail=str(e)) from None


# -- dates and times ----------------------------------------------------------------------------

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
        raise DatetimeOutOfRange(f'time zone displacement out of range: "{s}"', sqlstate=_TZ_DISPLACEMENT)
    offset = dt.timedelta(hours=hours, minutes=minutes, seconds=secs)
    return -offset if m.group("zs") == "-" else offset


def _parse_datetime(s: str, t: DataType) -> dt.datetime:
    """Date, optional time and optional zone, as a naive datetime (in UTC for TIMESTAMPTZ).

    Like PostgreSQL, DATE ignores the time and zone and TIMESTAMP ignores the zone.
    """
    text = s.strip(_WS)
    what = "date" if t.kind is TypeKind.DATE else "timestamp"
    special = text.lower()
    if special == "epoch":
        return _EPOCH
    if special in ("infinity", "+infinity", "-infinity"):
        raise DatetimeOutOfRange(f'{what} out of range: "{s}"')
    m = _TIMESTAMP_RE.fullmatch(text)
    if m is None:
        raise InvalidInput(
            f'invalid input syntax for type {_PG_NAME[t.kind]}: "{s}"', sqlstate=_BAD_DATETIME_FORMAT
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


def _parse_date(s: str, t: DataType) -> dt.date:
    """date_in: the date of a date or timestamp literal."""
    return _parse_datetime(s, t).date()


def _parse_timestamp(s: str, t: DataType) -> dt.datetime:
    """A naive datetime; a zone in the text is ignored, as timestamp_in does."""
    return _parse_datetime(s, t)


def _parse_timestamptz(s: str, t: DataType) -> dt.datetime:
    """An aware datetime in UTC; text without an offset is UTC (the session TimeZone)."""
    return _parse_datetime(s, t).replace(tzinfo=dt.UTC)


def _parse_time(s: str, t: DataType) -> dt.time:
    """time_in: ``hh:mm[:ss[.frac]]``; a zone suffix is ignored as for time without time zone."""
    text = s.strip(_WS)
    if text.lower() == "allballs":
        return dt.time(0)
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise InvalidInput(f'invalid input syntax for type time: "{s}"', sqlstate=_BAD_DATETIME_FORMAT)
    usecs = _time_of_day(m, s)
    _zone_offset(m, s)  # validated, then ignored
    if usecs >= 86_400_000_000:
        raise DatetimeOutOfRange(f'time "{s}" is not supported: TIME values end at 23:59:59.999999')
    secs, micro = divmod(usecs, 1_000_000)
    return dt.time(secs // 3600, secs // 60 % 60, secs % 60, micro)


# -- composites ---------------------------------------------------------------------------------


class _Scanner:
    """A cursor over composite text (record or array literal) that reports malformed input."""

    def __init__(self, text: str, what: str) -> None:
        self.text = text
        self.pos = 0
        self.what = what

    def error(self, detail: str) -> InvalidInput:
        return InvalidInput(f'malformed {self.what} literal: "{self.text}"', detail=detail)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        """The next character; running out means the literal ended too early."""
        if self.pos >= len(self.text):
            raise self.error("Unexpected end of input.")
        self.pos += 1
        return self.text[self.pos - 1]

    def skip_blanks(self) -> None:
        while self.peek() and self.peek() in _WS:
            self.pos += 1


def _parse_struct(s: str, t: DataType) -> dict[str, Datum]:
    """record_in: ``(f1,f2,...)``; an empty unquoted field is NULL, ``""`` is an empty string.

    Quoted text takes ``\\x`` and ``""`` escapes; blanks inside the parentheses are kept and left
    to each field's own input function.
    """
    sc = _Scanner(s, "record")
    sc.skip_blanks()
    if sc.peek() != "(":
        raise sc.error("Missing left parenthesis.")
    sc.pos += 1
    result: dict[str, Datum] = {}
    for i, field in enumerate(t.fields):
        if i > 0:
            if sc.peek() != ",":
                raise sc.error("Too few columns.")
            sc.pos += 1
        if sc.peek() in (",", ")"):
            result[field.name] = None
            continue
        buf: list[str] = []
        in_quotes = False
        while in_quotes or sc.peek() not in (",", ")"):
            ch = sc.take()
            if ch == "\\":
                buf.append(sc.take())
            elif ch == '"':
                if in_quotes and sc.peek() == '"':
                    buf.append(sc.take())
                else:
                    in_quotes = not in_quotes
            else:
                buf.append(ch)
        result[field.name] = parse_datum("".join(buf), field.data_type)
    if sc.peek() != ")":
        raise sc.error("Too many columns." if sc.peek() == "," else "Unexpected end of input.")
    sc.pos += 1
    sc.skip_blanks()
    if sc.peek():
        raise sc.error("Junk after right parenthesis.")
    return result


def _parse_list(s: str, t: DataType) -> list[Datum]:
    """array_in: ``{e1,e2,...}`` with NULL, quoted elements and nested braces for lists of lists."""
    sc = _Scanner(s, "array")
    sc.skip_blanks()
    if sc.peek() != "{":
        raise sc.error('Array value must start with "{" or dimension information.')
    result = _read_array(sc, t)
    sc.skip_blanks()
    if sc.peek():
        raise sc.error("Junk after closing right brace.")
    return result


def _read_array(sc: _Scanner, t: DataType) -> list[Datum]:
    """The array starting at the scanner's ``{``; leaves the scanner after its ``}``."""
    elem = t.elem
    assert elem is not None
    sc.pos += 1
    sc.skip_blanks()
    result: list[Datum] = []
    if sc.peek() == "}":
        sc.pos += 1
        return result
    while True:
        sc.skip_blanks()
        if sc.peek() == "{" and elem.kind is TypeKind.LIST:
            result.append(_read_array(sc, elem))
        else:
            text, literal = _read_element(sc)
            is_null = not literal and text.lower() == "null"
            result.append(None if is_null else parse_datum(text, elem))
        sc.skip_blanks()
        ch = sc.take()
        if ch == "}":
            return result
        if ch != ",":
            raise sc.error(f'Unexpected "{ch}" character.')


def _read_element(sc: _Scanner) -> tuple[str, bool]:
    """One scalar element's text, and whether any of it was quoted or escaped (so not NULL).

    Unquoted trailing blanks are dropped; quoted or escaped characters are always kept.
    """
    buf: list[str] = []
    keep = 0  # buf[:keep] ends at the last character that is not an unquoted blank
    literal = False
    in_quotes = False
    while in_quotes or sc.peek() not in (",", "}"):
        ch = sc.take()
        if ch == "\\":
            buf.append(sc.take())
            literal = True
        elif ch == '"':
            in_quotes = not in_quotes
            literal = True
        elif ch == "{" and not in_quotes:
            raise sc.error('Unexpected "{" character.')
        else:
            buf.append(ch)
            if ch in _WS and not in_quotes:
                continue  # an unquoted blank is kept only if more text follows it
        keep = len(buf)
    if not buf and not literal:
        raise sc.error(f'Unexpected "{sc.peek()}" character.')
    return "".join(buf[:keep]), literal


_PARSERS: dict[TypeKind, Callable[[str, DataType], Datum]] = {
    TypeKind.BOOLEAN: _parse_bool,
    TypeKind.SMALLINT: _parse_int,
    TypeKind.INT: _parse_int,
    TypeKind.BIGINT: _parse_int,
    TypeKind.SERIAL: _parse_int,
    TypeKind.NUMERIC: _parse_numeric,
    TypeKind.REAL: _parse_float,
    TypeKind.DOUBLE: _parse_float,
    TypeKind.VARCHAR: lambda s, t: s,
    TypeKind.JSONB: _parse_jsonb,
    TypeKind.BYTEA: _parse_bytea,
    TypeKind.DATE: _parse_date,
    TypeKind.TIME: _parse_time,
    TypeKind.TIMESTAMP: _parse_timestamp,
    TypeKind.TIMESTAMPTZ: _parse_timestamptz,
    TypeKind.INTERVAL: lambda s, t: parse_interval(s),
    TypeKind.STRUCT: _parse_struct,
    TypeKind.LIST: _parse_list,
}
