"""Values on the wire: PostgreSQL type OIDs, text format and binary format.

Text format is the engine's own text form (`piestream.common.text`), so pgwire output is exactly
what ``SELECT x::text`` gives. Binary format follows PostgreSQL's send/recv functions for the
common scalar types (integers, floats, bool, text, bytea, numeric, date, time, timestamp(tz),
interval, jsonb, oid) and one-dimensional arrays of them; other types are text only (0A000).
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from piestream.common.errors import FeatureNotSupported, InvalidInput
from piestream.common.interval import Interval
from piestream.common.scalar import Datum
from piestream.common.text import format_datum, parse_datum
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    JSONB,
    NUMERIC,
    REAL,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
    TypeKind,
    list_of,
)

# OIDs of PostgreSQL types piestream does not have, but clients send or ask about
TEXT_OID = 25
UNKNOWN_OID = 705
NAME_OID = 19
CHAR_OID = 18
OID_OID = 26
BPCHAR_OID = 1042
JSON_OID = 114
INT2VECTOR_OID = 22
OIDVECTOR_OID = 30
REGCLASS_OID = 2205
REGTYPE_OID = 2206
REGPROC_OID = 24

#: What a parameter of a given OID becomes in the engine.
_OID_TYPES: dict[int, DataType] = {
    16: BOOLEAN,
    21: SMALLINT,
    23: INT,
    20: BIGINT,
    700: REAL,
    701: DOUBLE,
    1700: NUMERIC,
    25: VARCHAR,
    1043: VARCHAR,
    BPCHAR_OID: VARCHAR,
    NAME_OID: VARCHAR,
    CHAR_OID: VARCHAR,
    17: BYTEA,
    1082: DATE,
    1083: TIME,
    1114: TIMESTAMP,
    1184: TIMESTAMPTZ,
    1186: INTERVAL,
    3802: JSONB,
    JSON_OID: JSONB,
    OID_OID: BIGINT,
    REGCLASS_OID: BIGINT,
    REGTYPE_OID: BIGINT,
}
for _t in (
    BOOLEAN,
    SMALLINT,
    INT,
    BIGINT,
    REAL,
    DOUBLE,
    NUMERIC,
    VARCHAR,
    BYTEA,
    DATE,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    INTERVAL,
    JSONB,
):
    _OID_TYPES[list_of(_t).pg_oid] = list_of(_t)
_OID_TYPES[1009] = list_of(VARCHAR)  # text[]


def type_for_oid(oid: int) -> DataType | None:
    """The engine type of a client-declared parameter OID (None: unspecified or unknown)."""
    return _OID_TYPES.get(oid)


def is_known_oid(oid: int) -> bool:
    return oid in (0, UNKNOWN_OID) or oid in _OID_TYPES


def type_modifier(t: DataType) -> int:
    return t.pg_typmod


# -- text ---------------------------------------------------------------------------------------


def encode_text(v: Datum, t: DataType) -> bytes:
    return format_datum(v, t).encode("utf-8")


def decode_text(raw: bytes, t: DataType) -> Datum:
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput('invalid byte sequence for encoding "UTF8"', sqlstate="22021") from None
    return parse_datum(s, t)


# -- binary -------------------------------------------------------------------------------------

_PG_EPOCH_DATE = dt.date(2000, 1, 1)
_PG_EPOCH = dt.datetime(2000, 1, 1)
_PG_EPOCH_TZ = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_NUMERIC_POS, _NUMERIC_NEG, _NUMERIC_NAN = 0x0000, 0x4000, 0xC000
_NUMERIC_PINF, _NUMERIC_NINF = 0xD000, 0xF000
#: numeric_send's sign codes of the special values, which piestream does not store yet.
_NUMERIC_SPECIALS = {_NUMERIC_NAN: "NaN", _NUMERIC_PINF: "Infinity", _NUMERIC_NINF: "-Infinity"}


def _usecs(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _enc_numeric(v: Decimal, scale: int = 0) -> bytes:
    """A stored NUMERIC in binary: the value's own display scale, at least `scale` (a numeric(p,
    s)'s: pads a value stored before per-value scales), and NaN / +-Infinity."""
    if v.is_finite() and -int(v.as_tuple().exponent) < scale:
        v = v.quantize(Decimal(1).scaleb(-scale), context=_WIRE_DECIMAL)
    return numeric_send_value(v)


def numeric_send(sign: int, digits: tuple[int, ...], exp: int, dscale: int) -> bytes:
    """PostgreSQL's numeric_send of ``(-1)**sign * digits * 10**exp`` with display scale
    `dscale`: base-10000 digit groups, weight, sign, dscale."""
    s = "".join(map(str, digits))
    if exp >= 0:
        int_part, frac_part = s + "0" * exp, ""
    else:
        int_part, frac_part = (s[:exp] or "0"), s[exp:].rjust(-exp, "0")
    int_part = int_part.lstrip("0")
    pad_int = (-len(int_part)) % 4
    int_part = "0" * pad_int + int_part
    frac_part = frac_part + "0" * ((-len(frac_part)) % 4)
    groups = [int(int_part[i : i + 4]) for i in range(0, len(int_part), 4)]
    weight = len(groups) - 1
    groups += [int(frac_part[i : i + 4]) for i in range(0, len(frac_part), 4)]
    # strip leading and trailing zero groups
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    negative = bool(sign) and bool(groups)  # PostgreSQL has no negative zero
    head = struct.pack("!hhHH", len(groups), weight, _NUMERIC_NEG if negative else _NUMERIC_POS, dscale)
    return head + b"".join(struct.pack("!H", g) for g in groups)


def numeric_send_value(v: Decimal) -> bytes:
    """numeric_send of a value that carries its own display scale (its exponent: ``1.50`` has
    2), or NaN / Infinity / -Infinity (sign codes 0xC000 / 0xD000 / 0xF000): the binary form of
    issue 14's per-value-scale NUMERIC."""
    if not v.is_finite():
        code = _NUMERIC_NAN if v.is_nan() else (_NUMERIC_NINF if v.is_signed() else _NUMERIC_PINF)
        return struct.pack("!hhHH", 0, 0, code, 0)
    sign, digits, exp = v.as_tuple()
    assert isinstance(exp, int)
    return numeric_send(sign, digits, exp, max(0, -exp))


def _dec_numeric(raw: bytes) -> Decimal:
    """A NUMERIC parameter: its display scale kept, NaN / +-Infinity are values."""
    return numeric_recv(raw)


def numeric_recv(raw: bytes) -> Decimal:
    """PostgreSQL's numeric_recv: the value with its display scale (``1.50`` stays 1.50), and
    NaN / Infinity / -Infinity by their sign codes; 22P02 for anything else."""
    if len(raw) < 8:
        raise InvalidInput('insufficient data left in message for "numeric" value')
    ndigits, weight, sign, dscale = struct.unpack("!hhHH", raw[:8])
    if sign in _NUMERIC_SPECIALS and ndigits == 0:
        return Decimal(_NUMERIC_SPECIALS[sign])
    if sign not in (_NUMERIC_POS, _NUMERIC_NEG) or ndigits < 0 or len(raw) != 8 + 2 * ndigits:
        raise InvalidInput('invalid sign in external "numeric" value')
    groups = struct.unpack(f"!{ndigits}H", raw[8:])
    if any(g > 9999 for g in groups):
        raise InvalidInput('invalid digit in external "numeric" value')
    value = 0
    for g in groups:
        value = value * 10000 + g
    exp = (weight - ndigits + 1) * 4
    d = Decimal(value).scaleb(exp, context=_WIRE_DECIMAL)
    if sign == _NUMERIC_NEG:
        d = d.copy_negate()
    # a context wide enough for 1000 digits: the default 28-digit one cannot quantize 38 digits
    return d.quantize(Decimal(1).scaleb(-dscale), context=_WIRE_DECIMAL) if dscale <= 40 else d


_WIRE_DECIMAL = decimal.Context(prec=1100)


def _enc_interval(v: Interval) -> bytes:
    return struct.pack("!qii", v.usecs, v.days, v.months)


def _dec_interval(raw: bytes) -> Interval:
    usecs, days, months = struct.unpack("!qii", raw)
    return Interval(months, days, usecs)


def _enc_time(v: dt.time) -> bytes:
    return struct.pack("!q", ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond)


def _dec_time(raw: bytes) -> dt.time:
    (us,) = struct.unpack("!q", raw)
    s, us = divmod(us, 1_000_000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return dt.time(h, m, s, us)


def _enc_timestamptz(v: dt.datetime) -> bytes:
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.UTC)
    return struct.pack("!q", _usecs(v - _PG_EPOCH_TZ))


_Enc = Callable[[Any], bytes]
_Dec = Callable[[bytes], Any]

_BINARY: dict[TypeKind, tuple[_Enc, _Dec]] = {
    TypeKind.BOOLEAN: (lambda v: b"\x01" if v else b"\x00", lambda b: b != b"\x00"),
    TypeKind.SMALLINT: (lambda v: struct.pack("!h", v), lambda b: struct.unpack("!h", b)[0]),
    TypeKind.INT: (lambda v: struct.pack("!i", v), lambda b: struct.unpack("!i", b)[0]),
    TypeKind.BIGINT: (lambda v: struct.pack("!q", v), lambda b: struct.unpack("!q", b)[0]),
    TypeKind.SERIAL: (lambda v: struct.pack("!q", v), lambda b: struct.unpack("!q", b)[0]),
    TypeKind.REAL: (lambda v: struct.pack("!f", v), lambda b: struct.unpack("!f", b)[0]),
    TypeKind.DOUBLE: (lambda v: struct.pack("!d", v), lambda b: struct.unpack("!d", b)[0]),
    TypeKind.NUMERIC: (_enc_numeric, _dec_numeric),
    TypeKind.VARCHAR: (lambda v: v.encode("utf-8"), lambda b: b.decode("utf-8")),
    TypeKind.BYTEA: (bytes, bytes),
    TypeKind.DATE: (
        lambda v: struct.pack("!i", (v - _PG_EPOCH_DATE).days),
        lambda b: _PG_EPOCH_DATE + dt.timedelta(days=struct.unpack("!i", b)[0]),
    ),
    TypeKind.TIME: (_enc_time, _dec_time),
    TypeKind.TIMESTAMP: (
        lambda v: struct.pack("!q", _usecs(v - _PG_EPOCH)),
        lambda b: _PG_EPOCH + dt.timedelta(microseconds=struct.unpack("!q", b)[0]),
    ),
    TypeKind.TIMESTAMPTZ: (
        _enc_timestamptz,
        lambda b: _PG_EPOCH_TZ + dt.timedelta(microseconds=struct.unpack("!q", b)[0]),
    ),
    TypeKind.INTERVAL: (_enc_interval, _dec_interval),
    TypeKind.JSONB: (lambda v: b"\x01" + v.encode("utf-8"), lambda b: b[1:].decode("utf-8")),
}


def supports_binary(t: DataType) -> bool:
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return t.elem.kind in _BINARY
    return t.kind in _BINARY


def encode_binary(v: Datum, t: DataType) -> bytes:
    if t.kind is TypeKind.LIST:
        assert t.elem is not None
        return _enc_array(v, t.elem)
    if t.display_scale is not None:  # numeric(p, s) or a display scale: PostgreSQL's dscale
        return _enc_numeric(v, t.display_scale)
    codec = _BINARY.get(t.kind)
    if codec is None:
        raise FeatureNotSupported(f"binary output of type {t} is not supported; use text format")
    return codec[0](v)


def decode_binary(raw: bytes, t: DataType, oid: int = 0) -> Datum:
    """A binary parameter of `t` (`oid` tells json from jsonb: json has no version byte)."""
    try:
        if t.kind is TypeKind.LIST:
            assert t.elem is not None
            return _dec_array(raw, t.elem)
        if oid == JSON_OID:
            return raw.decode("utf-8")
        if oid == OID_OID:
            return struct.unpack("!I", raw)[0]
        codec = _BINARY.get(t.kind)
        if codec is None:
            raise FeatureNotSupported(f"binary input of type {t} is not supported; use text format")
        return codec[1](raw)
    except (struct.error, UnicodeDecodeError, ValueError, OverflowError, IndexError) as e:
        raise InvalidInput(
            f"incorrect binary data format in parameter of type {t}: {e}", sqlstate="22P03"
        ) from None


def _enc_array(v: list[Datum], elem: DataType) -> bytes:
    has_null = any(x is None for x in v)
    head = struct.pack("!iii", 1 if v else 0, 1 if has_null else 0, elem.pg_oid)
    if v:
        head += struct.pack("!ii", len(v), 1)
    parts = [head]
    for x in v:
        if x is None:
            parts.append(struct.pack("!i", -1))
        else:
            b = encode_binary(x, elem)
            parts.append(struct.pack("!i", len(b)) + b)
    return b"".join(parts)


def _dec_array(raw: bytes, elem: DataType) -> list[Datum]:
    ndim, _flags, _oid = struct.unpack("!iii", raw[:12])
    if ndim == 0:
        return []
    if ndim != 1:
        raise FeatureNotSupported("multidimensional arrays are not supported")
    n, _lbound = struct.unpack("!ii", raw[12:20])
    pos = 20
    out: list[Datum] = []
    for _ in range(n):
        (ln,) = struct.unpack("!i", raw[pos : pos + 4])
        pos += 4
        if ln < 0:
            out.append(None)
            continue
        out.append(decode_binary(raw[pos : pos + ln], elem))
        pos += ln
    return out
