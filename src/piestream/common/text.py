"""PostgreSQL text form of datums: what pgwire sends to clients and what ``'...'::type`` accepts.

Output matches PostgreSQL 15 with DateStyle ISO, IntervalStyle postgres, TimeZone UTC and
extra_float_digits = 1 (shortest round-trip floats), so clients and tests see exactly what they
would see from PostgreSQL. NUMERIC is printed normalized (no trailing fractional zeros), as
RisingWave does, because piestream stores every NUMERIC at one fixed scale.

Input accepts the PostgreSQL literal syntax of each type and fails with PostgreSQL's message and
SQLSTATE (22P02 bad syntax, 22007 bad date/time syntax, 22003 / 22008 out of range, ...), so an
error reads the same whether it came from piestream or from PostgreSQL.

For every type, ``parse_datum(format_datum(v, t), t)`` gives back ``v`` (see scalar.py for the
Python form of each type's values). This module dispatches on the type and holds the scalar
types' text (booleans, numbers, strings, bytea, jsonb); dates and times are in datetime_text.py,
INTERVAL in interval_text.py, STRUCT and LIST in composite_text.py, and what they all share in
text_syntax.py.
"""

from __future__ import annotations

import decimal
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np

from piestream.common import numeric as nm
from piestream.common.composite_text import format_list, format_struct, parse_list, parse_struct
from piestream.common.datetime_text import (
    format_date,
    format_time,
    format_timestamp,
    format_timestamptz,
    parse_date,
    parse_time,
    parse_timestamp,
    parse_timestamptz,
)
from piestream.common.errors import InvalidInput, NumericOutOfRange
from piestream.common.interval_text import format_interval, parse_interval
from piestream.common.scalar import Datum
from piestream.common.text_syntax import INVALID_PARAMETER, PG_NAME, UNTRANSLATABLE, WS
from piestream.common.types import DataType, TypeKind

__all__ = ["format_datum", "format_interval", "parse_datum", "parse_interval"]

_INT_RANGE = {
    TypeKind.SMALLINT: (-(2**15), 2**15 - 1),
    TypeKind.INT: (-(2**31), 2**31 - 1),
    TypeKind.BIGINT: (-(2**63), 2**63 - 1),
    TypeKind.SERIAL: (-(2**63), 2**63 - 1),
}


def _syntax_error(s: str, t: DataType) -> InvalidInput:
    """PostgreSQL's 22P02 for text that is not a value of `t` at all."""
    return InvalidInput(f'invalid input syntax for type {PG_NAME[t.kind]}: "{s}"')


# =============================================================================================
# Output
# =============================================================================================


def format_datum(v: Datum, t: DataType) -> str:
    """PostgreSQL text output of a non-NULL datum of type `t` (NULL has no text form)."""
    if v is None:
        raise ValueError("format_datum needs a non-NULL datum; NULL has no text form")
    return _FORMATTERS[t.kind](v, t)


def _format_numeric(v: Any, t: DataType | None = None) -> str:
    """Plain notation without trailing fractional zeros; "-0" prints as "0". A numeric(p, s)
    value shows s fraction digits, and a type with a display scale (`DataType.dscale`) that
    many, as PostgreSQL's display scale does (zeros are only added: a value with more digits
    than its type's scale keeps them)."""
    d = v if isinstance(v, Decimal) else Decimal(v if isinstance(v, int) else repr(float(v)))
    shown = t.display_scale if t is not None else None  # each value has its scale; a type's pads it
    if shown is not None and d.is_finite() and -int(d.as_tuple().exponent) < shown:
        d = d.quantize(Decimal(1).scaleb(-shown), context=_NUMERIC_CONTEXT)
    return nm.format_numeric(d)


_NUMERIC_CONTEXT = decimal.Context(prec=80)


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


_FORMATTERS: dict[TypeKind, Callable[[Any, DataType], str]] = {
    TypeKind.BOOLEAN: lambda v, t: "t" if v else "f",
    TypeKind.SMALLINT: lambda v, t: str(int(v)),
    TypeKind.INT: lambda v, t: str(int(v)),
    TypeKind.BIGINT: lambda v, t: str(int(v)),
    TypeKind.SERIAL: lambda v, t: str(int(v)),
    TypeKind.NUMERIC: _format_numeric,
    TypeKind.REAL: _format_float,
    TypeKind.DOUBLE: _format_float,
    TypeKind.VARCHAR: lambda v, t: str(v),
    TypeKind.JSONB: lambda v, t: str(v),
    TypeKind.BYTEA: lambda v, t: "\\x" + bytes(v).hex(),
    TypeKind.DATE: lambda v, t: format_date(v),
    TypeKind.TIME: lambda v, t: format_time(v),
    TypeKind.TIMESTAMP: lambda v, t: format_timestamp(v),
    TypeKind.TIMESTAMPTZ: lambda v, t: format_timestamptz(v),
    TypeKind.INTERVAL: lambda v, t: format_interval(v),
    TypeKind.STRUCT: lambda v, t: format_struct(v, t, format_datum),
    TypeKind.LIST: lambda v, t: format_list(v, t, format_datum),
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
    word = s.strip(WS).lower()
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
    text = s.strip(WS)
    if not _INT_RE.fullmatch(text):
        raise _syntax_error(s, t)
    lo, hi = _INT_RANGE[t.kind]
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 20 or not lo <= int(text) <= hi:  # the length test guards int() on huge input
        raise NumericOutOfRange(f'value "{s}" is out of range for type {PG_NAME[t.kind]}')
    return int(text)


_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?")
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
    """PostgreSQL's numeric_in: display scale and NaN / +-Infinity kept."""
    return nm.parse(s)


def _parse_float(s: str, t: DataType) -> float:
    """float8in / float4in: decimal or Infinity / inf / NaN; overflow and underflow are 22003."""
    text = s.strip(WS)
    if _SPECIAL_FLOAT_RE.fullmatch(text):
        return float(text)
    m = _DECIMAL_RE.fullmatch(text)
    if m is None:
        raise _syntax_error(s, t)
    x = float(text)
    if t.kind is TypeKind.REAL and not math.isinf(x):
        x = _round_to_float32(x, text)
    if math.isinf(x) or (x == 0 and Decimal(text) != 0):
        raise NumericOutOfRange(f'"{s}" is out of range for type {PG_NAME[t.kind]}')
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
                    raise InvalidInput(f'invalid hexadecimal digit: "{ch}"', sqlstate=INVALID_PARAMETER)
            if len(pair) < 2:
                raise InvalidInput(
                    "invalid hexadecimal data: odd number of digits", sqlstate=INVALID_PARAMETER
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
            sqlstate=UNTRANSLATABLE,
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


def jsonb_value(s: str) -> Any:
    """A jsonb text as Python values: dicts (keys in jsonb order), lists, str, Decimal, bool, None."""
    try:
        return json.loads(
            s,
            parse_float=_json_number,
            parse_int=_json_number,
            parse_constant=_json_reject_constant,
            object_pairs_hook=_json_object,
        )
    except (ValueError, RecursionError) as e:
        raise InvalidInput("invalid input syntax for type json", detail=str(e)) from None


def jsonb_text(v: Any) -> str:
    """The normalized jsonb text of a Python value (dict keys are put in jsonb order)."""
    return _jsonb_text(_jsonb_ordered(v))


def _jsonb_ordered(v: Any) -> Any:
    if isinstance(v, dict):
        return _json_object([(k, _jsonb_ordered(x)) for k, x in v.items()])
    if isinstance(v, list):
        return [_jsonb_ordered(x) for x in v]
    return v


def _parse_jsonb(s: str, t: DataType) -> str:
    """Valid JSON, returned as the normalized text PostgreSQL's jsonb would print."""
    return _jsonb_text(jsonb_value(s))


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
    TypeKind.DATE: parse_date,
    TypeKind.TIME: parse_time,
    TypeKind.TIMESTAMP: parse_timestamp,
    TypeKind.TIMESTAMPTZ: parse_timestamptz,
    TypeKind.INTERVAL: lambda s, t: parse_interval(s),
    TypeKind.STRUCT: lambda s, t: parse_struct(s, t, parse_datum),
    TypeKind.LIST: lambda s, t: parse_list(s, t, parse_datum),
}


def format_bytes(n: float) -> str:
    """A byte count for people: ``845 B``, ``3.2 KiB``, ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
