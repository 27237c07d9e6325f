"""Memcomparable encoding of single datums and rows (the per-value path; reference §1).

The bytes of one datum are a NULL tag and, unless NULL, the value's ascending bytes; for DESC
every byte, tag included, is inverted. Keys are compared with plain ``bytes`` order, so each
value encoding below is order-preserving and self-delimiting.

Decoders read through an XOR mask `x` (0 for ascending, 0xFF for descending) and check every tag,
length and marker, raising DataCorruption for anything an encoder could not have produced, so a
decoded value always re-encodes to exactly the bytes it came from.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal

from piestream.common.errors import DataCorruption, InvalidInput, NumericOutOfRange
from piestream.common.interval import (
    DAYS_PER_MONTH,
    I32_MAX,
    I32_MIN,
    I64_MAX,
    I64_MIN,
    USECS_PER_DAY,
    Interval,
)
from piestream.common.numeric import NUMERIC_MAX_SCALE
from piestream.common.order import ASC, OrderType
from piestream.common.scalar import Datum, Row, check_int, normalize_numeric
from piestream.common.types import NUMERIC_PRECISION, DataType, TypeKind
from piestream.encoding.memcmp_decimal import decode_decimal, encode_decimal

# ---------------------------------------------------------------------------------------------
# Constants shared with the vectorized codec
# ---------------------------------------------------------------------------------------------

#: ``bytes.translate`` table that inverts every byte (DESC).
INVERT = bytes(range(255, -1, -1))

#: Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
UNIX_EPOCH_DAYS_FROM_CE = 719_163
USECS_PER_SEC = 1_000_000
NANOS_PER_SEC = 1_000_000_000
SECS_PER_DAY = 86_400
USECS_PER_MONTH = DAYS_PER_MONTH * USECS_PER_DAY

#: Byte width of the fixed-width kinds.
FIXED_WIDTH: dict[TypeKind, int] = {
    TypeKind.BOOLEAN: 1,
    TypeKind.SMALLINT: 2,
    TypeKind.INT: 4,
    TypeKind.BIGINT: 8,
    TypeKind.SERIAL: 8,
    TypeKind.REAL: 4,
    TypeKind.DOUBLE: 8,
    TypeKind.DATE: 4,
    TypeKind.TIME: 8,
    TypeKind.TIMESTAMP: 12,
    TypeKind.TIMESTAMPTZ: 8,
    TypeKind.INTERVAL: 16,
}

#: Canonical (positive quiet) NaN bit patterns.
CANONICAL_NAN_F32 = 0x7FC0_0000
CANONICAL_NAN_F64 = 0x7FF8_0000_0000_0000

#: Bytes marking an escaped string's 8-byte group: more groups follow.
GROUP_CONTINUES = 9

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def datum_tags(order: OrderType) -> tuple[int, int]:
    """(non-null tag, NULL tag) as written for a key column with `order` (§1.1 table)."""
    nonnull, null = (0x00, 0x01) if order.nulls_largest else (0x01, 0x00)
    if order.descending:
        return nonnull ^ 0xFF, null ^ 0xFF
    return nonnull, null


def flip_mask(order: OrderType) -> int:
    """The XOR mask applied to every byte of a column with `order`."""
    return 0xFF if order.descending else 0x00


# ---------------------------------------------------------------------------------------------
# Encoding (ascending value bytes; the caller adds the tag and inverts for DESC)
# ---------------------------------------------------------------------------------------------


def _invalid(v: Datum, t: DataType) -> InvalidInput:
    return InvalidInput(f"invalid input for type {t}: {v!r}")


def _enc_bool(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, bool):
        raise _invalid(v, t)
    return b"\x01" if v else b"\x00"


#: (width, bias) of the integer kinds: ``v + bias`` is two's complement with the sign bit flipped.
_INT_LAYOUT = {
    k: (FIXED_WIDTH[k], 1 << (8 * FIXED_WIDTH[k] - 1))
    for k in (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT, TypeKind.SERIAL)
}


def _enc_int(v: Datum, t: DataType) -> bytes:
    if type(v) is not int and (isinstance(v, bool) or not isinstance(v, int)):
        raise _invalid(v, t)
    width, bias = _INT_LAYOUT[t.kind]
    if not -bias <= v < bias:
        check_int(v, t)  # raises the range error
    return (v + bias).to_bytes(width, "big")


def float_key_bits(bits: int, width_bits: int) -> int:
    """Order-preserving transform of IEEE bits: set the sign of positives, invert negatives."""
    sign = 1 << (width_bits - 1)
    return bits | sign if not bits & sign else ~bits & ((sign << 1) - 1)


def _as_float(v: Datum, t: DataType) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _invalid(v, t)
    try:
        return float(v)
    except OverflowError:
        raise NumericOutOfRange(f"value out of range for type {t}") from None


def _enc_real(v: Datum, t: DataType) -> bytes:
    f = _as_float(v, t)
    if math.isnan(f):
        bits = CANONICAL_NAN_F32
    elif f == 0.0:
        bits = 0  # -0.0 == +0.0
    else:
        try:
            bits = _U32.unpack(_F32.pack(f))[0]
        except OverflowError:
            raise NumericOutOfRange(f"value out of range for type {t}") from None
    return _U32.pack(float_key_bits(bits, 32))


def _enc_double(v: Datum, t: DataType) -> bytes:
    f = _as_float(v, t)
    if math.isnan(f):
        bits = CANONICAL_NAN_F64
    elif f == 0.0:
        bits = 0
    else:
        bits = _U64.unpack(_F64.pack(f))[0]
    return _U64.pack(float_key_bits(bits, 64))


#: NUMERIC values are below 10^NUMERIC_INT_DIGITS in magnitude, with up to NUMERIC_MAX_SCALE digits
#: after the point (keys decode what the value domain, `piestream.common.numeric`, may hold).
NUMERIC_INT_DIGITS = NUMERIC_PRECISION
_KEY_SCALE = NUMERIC_MAX_SCALE
_KEY_DIGITS = NUMERIC_PRECISION


def _enc_numeric(v: Datum, t: DataType) -> bytes:
    if isinstance(v, bool) or not isinstance(v, Decimal | int | float | str):
        raise _invalid(v, t)
    try:
        d = normalize_numeric(v)
    except decimal.InvalidOperation:  # unparsable text, or too large to round
        if isinstance(v, str) and not _parses_as_decimal(v):
            raise _invalid(v, t) from None
        raise NumericOutOfRange("numeric field overflow") from None
    if not d.is_zero() and d.adjusted() >= NUMERIC_INT_DIGITS:
        raise NumericOutOfRange("numeric field overflow")
    return encode_decimal(d)


def _parses_as_decimal(text: str) -> bool:
    try:
        Decimal(text)
    except decimal.InvalidOperation:
        return False
    return True


def escape_bytes(b: bytes) -> bytes:
    """The escaped 8-byte-group form of a byte string (§1.2 varchar/bytea)."""
    n = len(b)
    if n == 0:
        return b"\x00"
    if n <= 8:
        return b"\x01" + b + bytes(8 - n) + _COUNT_BYTE[n]
    full = (n - 1) // 8  # groups followed by the "more" marker
    last = b[8 * full :]
    head = b"\x09".join([b[i : i + 8] for i in range(0, 8 * full, 8)] + [b""]) if full else b""
    return b"\x01" + head + last + bytes(8 - len(last)) + _COUNT_BYTE[len(last)]


_COUNT_BYTE = [bytes([c]) for c in range(9)]


def _enc_varchar(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, str):
        raise _invalid(v, t)
    try:
        return escape_bytes(v.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidInput(f"invalid input for type {t}: {e}") from None


def _enc_bytea(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise _invalid(v, t)
    return escape_bytes(bytes(v))


def _enc_date(v: Datum, t: DataType) -> bytes:
    if isinstance(v, dt.datetime) or not isinstance(v, dt.date):
        raise _invalid(v, t)
    return _U32.pack(v.toordinal() + (1 << 31))


def _enc_time(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dt.time) or v.tzinfo is not None:
        raise _invalid(v, t)
    secs = v.hour * 3600 + v.minute * 60 + v.second
    return _U32.pack(secs) + _U32.pack(v.microsecond * 1000)


def _micros_since_epoch(v: dt.datetime, epoch: dt.datetime) -> int:
    d = v - epoch
    return (d.days * SECS_PER_DAY + d.seconds) * USECS_PER_SEC + d.microseconds


def _enc_timestamp(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dt.datetime) or v.tzinfo is not None:
        raise _invalid(v, t)
    secs, us = divmod(_micros_since_epoch(v, _EPOCH), USECS_PER_SEC)
    return _U64.pack(secs + (1 << 63)) + _U32.pack(us * 1000)


def _enc_timestamptz(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dt.datetime):
        raise _invalid(v, t)
    if v.tzinfo is None:  # like scalar.to_arrow: a naive value is taken as UTC
        v = v.replace(tzinfo=dt.UTC)
    return _U64.pack(_micros_since_epoch(v, _EPOCH_UTC) + (1 << 63))


def _enc_interval(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, Interval):
        raise _invalid(v, t)
    return (v.total_usecs + (1 << 127)).to_bytes(16, "big")


def _enc_struct(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dict):
        raise _invalid(v, t)
    return b"".join(encode_composite_datum(v.get(f.name), f.data_type) for f in t.fields)


def _enc_list(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, list | tuple):
        raise _invalid(v, t)
    assert t.elem is not None
    elem = t.elem
    return escape_bytes(b"".join([encode_composite_datum(e, elem) for e in v]))


_ENCODERS: dict[TypeKind, Callable[[Datum, DataType], bytes]] = {
    TypeKind.BOOLEAN: _enc_bool,
    TypeKind.SMALLINT: _enc_int,
    TypeKind.INT: _enc_int,
    TypeKind.BIGINT: _enc_int,
    TypeKind.SERIAL: _enc_int,
    TypeKind.NUMERIC: _enc_numeric,
    TypeKind.REAL: _enc_real,
    TypeKind.DOUBLE: _enc_double,
    TypeKind.VARCHAR: _enc_varchar,
    TypeKind.BYTEA: _enc_bytea,
    TypeKind.DATE: _enc_date,
    TypeKind.TIME: _enc_time,
    TypeKind.TIMESTAMP: _enc_timestamp,
    TypeKind.TIMESTAMPTZ: _enc_timestamptz,
    TypeKind.INTERVAL: _enc_interval,
    TypeKind.JSONB: _enc_varchar,  # its JSON text, like a string
    TypeKind.STRUCT: _enc_struct,
    TypeKind.LIST: _enc_list,
}


def encode_composite_datum(v: Datum, t: DataType) -> bytes:
    """A struct field or list element: default tags (NULL = 01, non-null = 00), ascending."""
    return b"\x01" if v is None else b"\x00" + _ENCODERS[t.kind](v, t)


#: (non-null tag, NULL tag) before inversion, by `nulls_largest`.
_TAG_BYTES = {True: (b"\x00", b"\x01"), False: (b"\x01", b"\x00")}


def encode_datum(v: Datum, t: DataType, order: OrderType = ASC) -> bytes:
    """The key bytes of one datum: tag, value, all inverted for DESC."""
    nonnull, null = _TAG_BYTES[order.nulls_largest]
    out = null if v is None else nonnull + _ENCODERS[t.kind](v, t)
    return out.translate(INVERT) if order.descending else out


def encode_row(row: Sequence[Datum], types: Sequence[DataType], orders: Sequence[OrderType]) -> bytes:
    """The key of a row: its datums' encodings concatenated (each is self-delimiting)."""
    if not len(row) == len(types) == len(orders):
        raise InvalidInput(f"row has {len(row)} values for {len(types)} key columns")
    return b"".join([encode_datum(v, t, o) for v, t, o in zip(row, types, orders, strict=True)])


# ---------------------------------------------------------------------------------------------
# Decoding: reads through the XOR mask x, checks everything
# ---------------------------------------------------------------------------------------------

Buf = bytes | memoryview


def _need(pos: int, n: int, end: int, what: str) -> None:
    if pos + n > end:
        raise DataCorruption(f"truncated {what} key")


def _read_uint(buf: Buf, pos: int, n: int, end: int, x: int, *, what: str) -> int:
    """The big-endian unsigned integer in buf[pos:pos+n], un-inverted."""
    _need(pos, n, end, what)
    v = int.from_bytes(buf[pos : pos + n], "big")
    return v ^ ((1 << (8 * n)) - 1) if x else v


def _dec_bool(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    b = _read_uint(buf, pos, 1, end, x, what="boolean")
    if b > 1:
        raise DataCorruption(f"invalid boolean key byte 0x{b:02x}")
    return b == 1, pos + 1


def _dec_int(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    width = FIXED_WIDTH[t.kind]
    u = _read_uint(buf, pos, width, end, x, what=t.kind.value)
    return u - (1 << (8 * width - 1)), pos + width


def float_bits_from_key(key: int, width_bits: int) -> int:
    """Inverse of `float_key_bits`."""
    sign = 1 << (width_bits - 1)
    return key ^ sign if key & sign else ~key & ((sign << 1) - 1)


def _is_nan_bits(bits: int, width_bits: int) -> bool:
    mant_bits = 23 if width_bits == 32 else 52
    exp_all = ((1 << (width_bits - 1 - mant_bits)) - 1) << mant_bits
    return bits & exp_all == exp_all and bits & ((1 << mant_bits) - 1) != 0


def _dec_float(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    width = FIXED_WIDTH[t.kind]
    nbits = 8 * width
    bits = float_bits_from_key(_read_uint(buf, pos, width, end, x, what=t.kind.value), nbits)
    canonical = CANONICAL_NAN_F32 if width == 4 else CANONICAL_NAN_F64
    if bits == 1 << (nbits - 1) or (_is_nan_bits(bits, nbits) and bits != canonical):
        raise DataCorruption(f"non-canonical {t.kind.value} key")
    packer, fmt = (_U32, _F32) if width == 4 else (_U64, _F64)
    return fmt.unpack(packer.pack(bits))[0], pos + width


def _dec_numeric(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    d, pos = decode_decimal(buf, pos, x, end)
    if d.is_finite():
        d = check_numeric_domain(d)
    return d, pos


def check_numeric_domain(d: Decimal) -> Decimal:
    """A decoded finite NUMERIC in the form `normalize_numeric` gives; DataCorruption if no stored
    NUMERIC has this value (too many fraction, significant or integer digits)."""
    _, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    if not d.is_zero() and (
        exp < -_KEY_SCALE or len(digits) > _KEY_DIGITS or d.adjusted() >= NUMERIC_INT_DIGITS
    ):
        raise DataCorruption("numeric key outside the NUMERIC domain")
    return normalize_numeric(d)


def unescape(buf: Buf, pos: int, end: int, x: int, what: str = "string") -> tuple[bytes, int]:
    """Decode an escaped 8-byte-group string (checks markers and zero padding)."""
    first = _read_uint(buf, pos, 1, end, x, what=what)
    pos += 1
    if first == 0:
        return b"", pos
    if first != 1:
        raise DataCorruption(f"invalid {what} key header byte 0x{first:02x}")
    chunks: list[bytes] = []
    while True:
        _need(pos, 9, end, what)
        marker = buf[pos + 8] ^ x
        group = bytes(buf[pos : pos + 8])
        if x:
            group = group.translate(INVERT)
        pos += 9
        if marker == GROUP_CONTINUES:
            chunks.append(group)
            continue
        if not 1 <= marker <= 8 or group[marker:].strip(b"\x00"):
            raise DataCorruption(f"invalid {what} key group")
        chunks.append(group[:marker])
        return b"".join(chunks), pos


def _dec_bytea(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    return unescape(buf, pos, end, x, "bytea")


def _dec_varchar(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    raw, pos = unescape(buf, pos, end, x, t.kind.value)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError:
        raise DataCorruption(f"invalid UTF-8 in {t.kind.value} key") from None


def _dec_date(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    days = _read_uint(buf, pos, 4, end, x, what="date") - (1 << 31)
    if not dt.date.min.toordinal() <= days <= dt.date.max.toordinal():
        raise DataCorruption("date key out of range")
    return dt.date.fromordinal(days), pos + 4


def _check_nanos(nanos: int, what: str) -> int:
    """Sub-second nanoseconds of a key: < 1e9 and whole microseconds (all piestream stores)."""
    if nanos >= NANOS_PER_SEC or nanos % 1000:
        raise DataCorruption(f"invalid {what} key nanoseconds")
    return nanos // 1000


def _dec_time(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    secs = _read_uint(buf, pos, 4, end, x, what="time")
    us = _check_nanos(_read_uint(buf, pos + 4, 4, end, x, what="time"), "time")
    if secs >= SECS_PER_DAY:
        raise DataCorruption("time key out of range")
    h, rest = divmod(secs, 3600)
    return dt.time(h, rest // 60, rest % 60, us), pos + 8


def _from_micros(micros: int, epoch: dt.datetime) -> dt.datetime:
    try:
        return epoch + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise DataCorruption("timestamp key out of range") from None


def _dec_timestamp(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    secs = _read_uint(buf, pos, 8, end, x, what="timestamp") - (1 << 63)
    us = _check_nanos(_read_uint(buf, pos + 8, 4, end, x, what="timestamp"), "timestamp")
    return _from_micros(secs * USECS_PER_SEC + us, _EPOCH), pos + 12


def _dec_timestamptz(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    micros = _read_uint(buf, pos, 8, end, x, what="timestamptz") - (1 << 63)
    return _from_micros(micros, _EPOCH_UTC), pos + 8


def interval_from_total(total: int) -> Interval:
    """The interval a key holds: the justified form (`Interval.from_total_usecs`), saturating the
    months and then the days at their i32 limits when the total does not fit that form."""
    if total < 0:
        mag, cap_m, cap_d, cap_us = -total, -I32_MIN, -I32_MIN, -I64_MIN
    else:
        mag, cap_m, cap_d, cap_us = total, I32_MAX, I32_MAX, I64_MAX
    months = min(mag // USECS_PER_MONTH, cap_m)
    rest = mag - months * USECS_PER_MONTH
    days = min(rest // USECS_PER_DAY, cap_d)
    usecs = rest - days * USECS_PER_DAY
    if usecs > cap_us:
        raise DataCorruption("interval key out of range")
    sign = -1 if total < 0 else 1
    return Interval(sign * months, sign * days, sign * usecs)


def _dec_interval(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    total = _read_uint(buf, pos, 16, end, x, what="interval") - (1 << 127)
    return interval_from_total(total), pos + 16


def _dec_struct(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    out: dict[str, Datum] = {}
    for f in t.fields:
        out[f.name], pos = _decode_composite(buf, pos, end, f.data_type, x)
    return out, pos


def _dec_list(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    inner, pos = unescape(buf, pos, end, x, "list")
    assert t.elem is not None
    elems: list[Datum] = []
    p, n = 0, len(inner)
    while p < n:
        e, p = _decode_composite(inner, p, n, t.elem, 0)  # elements are never inverted inside
        elems.append(e)
    return elems, pos


_Decoder = Callable[[Buf, int, int, DataType, int], tuple[Datum, int]]

_DECODERS: dict[TypeKind, _Decoder] = {
    TypeKind.BOOLEAN: _dec_bool,
    TypeKind.SMALLINT: _dec_int,
    TypeKind.INT: _dec_int,
    TypeKind.BIGINT: _dec_int,
    TypeKind.SERIAL: _dec_int,
    TypeKind.NUMERIC: _dec_numeric,
    TypeKind.REAL: _dec_float,
    TypeKind.DOUBLE: _dec_float,
    TypeKind.VARCHAR: _dec_varchar,
    TypeKind.BYTEA: _dec_bytea,
    TypeKind.DATE: _dec_date,
    TypeKind.TIME: _dec_time,
    TypeKind.TIMESTAMP: _dec_timestamp,
    TypeKind.TIMESTAMPTZ: _dec_timestamptz,
    TypeKind.INTERVAL: _dec_interval,
    TypeKind.JSONB: _dec_varchar,
    TypeKind.STRUCT: _dec_struct,
    TypeKind.LIST: _dec_list,
}


def _decode_composite(buf: Buf, pos: int, end: int, t: DataType, x: int) -> tuple[Datum, int]:
    tag = _read_uint(buf, pos, 1, end, x, what="composite")
    if tag == 0x01:
        return None, pos + 1
    if tag != 0x00:
        raise DataCorruption(f"invalid NULL tag 0x{tag:02x} inside a composite key")
    return _DECODERS[t.kind](buf, pos + 1, end, t, x)


def decode_datum(buf: Buf, pos: int, t: DataType, order: OrderType = ASC) -> tuple[Datum, int]:
    """Decode the datum at `pos`: (value or None, position after it)."""
    nonnull, null = datum_tags(order)
    end = len(buf)
    if pos >= end or pos < 0:
        raise DataCorruption("truncated key: no NULL tag")
    tag = buf[pos]
    if tag == null:
        return None, pos + 1
    if tag != nonnull:
        raise DataCorruption(f"invalid NULL tag 0x{tag:02x} for {order}")
    return _DECODERS[t.kind](buf, pos + 1, end, t, flip_mask(order))


def decode_row(
    buf: Buf, types: Sequence[DataType], orders: Sequence[OrderType], pos: int = 0
) -> tuple[Row, int]:
    """Decode len(types) datums starting at `pos`: (row tuple, position after them)."""
    out = []
    for t, o in zip(types, orders, strict=True):
        v, pos = decode_datum(buf, pos, t, o)
        out.append(v)
    return tuple(out), pos


# ---------------------------------------------------------------------------------------------
# Lengths (skipping without building values)
# ---------------------------------------------------------------------------------------------


def escaped_len(buf: Buf, pos: int, end: int, x: int) -> int:
    """Byte length of the escaped string at `pos` (checks its markers)."""
    first = _read_uint(buf, pos, 1, end, x, what="string")
    if first == 0:
        return 1
    if first != 1:
        raise DataCorruption(f"invalid string key header byte 0x{first:02x}")
    p = pos + 1
    while True:
        _need(p, 9, end, "string")
        marker = buf[p + 8] ^ x
        p += 9
        if marker != GROUP_CONTINUES:
            if not 1 <= marker <= 8:
                raise DataCorruption("invalid string key group marker")
            return p - pos


def _value_len(buf: Buf, pos: int, end: int, t: DataType, x: int) -> int:
    k = t.kind
    width = FIXED_WIDTH.get(k)
    if width is not None:
        _need(pos, width, end, k.value)
        return width
    if k in (TypeKind.VARCHAR, TypeKind.BYTEA, TypeKind.JSONB, TypeKind.LIST):
        return escaped_len(buf, pos, end, x)
    if k is TypeKind.NUMERIC:
        return decode_decimal(buf, pos, x, end)[1] - pos
    assert k is TypeKind.STRUCT
    p = pos
    for f in t.fields:
        tag = _read_uint(buf, p, 1, end, x, what="struct")
        p += 1
        if tag == 0x00:
            p += _value_len(buf, p, end, f.data_type, x)
        elif tag != 0x01:
            raise DataCorruption(f"invalid NULL tag 0x{tag:02x} inside a struct key")
    return p - pos


def encoded_len(buf: Buf, pos: int, t: DataType, order: OrderType = ASC) -> int:
    """Length of the encoded datum at `pos`, tag included (for skipping a key column)."""
    nonnull, null = datum_tags(order)
    end = len(buf)
    if pos >= end or pos < 0:
        raise DataCorruption("truncated key: no NULL tag")
    tag = buf[pos]
    if tag == null:
        return 1
    if tag != nonnull:
        raise DataCorruption(f"invalid NULL tag 0x{tag:02x} for {order}")
    return 1 + _value_len(buf, pos + 1, end, t, flip_mask(order))
