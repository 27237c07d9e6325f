"""Value encoding of single Python datums and rows (reference §2.1, RisingWave's "basic" encoding).

This is the scalar half of `piestream.encoding.value`: point gets, DML and tests go through it,
and the vectorized codec (`value_encode`, `value_decode`) must produce and accept exactly the same
bytes. Every datum is a tag byte (``00`` NULL, ``01`` value) followed by the payload of its type;
fixed layouts are little-endian. Decoding checks every byte it reads and raises `DataCorruption`
for anything it cannot turn into a value: stored state is read back without trusting it.

The encoder always writes one canonical form (NUMERIC normalized, whole microseconds for times),
and the decoder accepts only that form, so any byte string that decodes re-encodes to itself.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from collections.abc import Callable, Sequence

import numpy as np

from piestream.common import numeric as nm
from piestream.common.errors import DataCorruption, InvalidInput, NumericOutOfRange
from piestream.common.interval import Interval
from piestream.common.scalar import Datum, Row
from piestream.common.types import DataType, TypeKind

NULL_TAG = 0
VALUE_TAG = 1
#: jsonb payloads start with this version byte (pgwire binary form).
JSONB_VERSION = 1
#: rust_decimal keeps at most 28 fraction digits and a 96-bit mantissa.
NUMERIC_MAX_SCALE = 28
NUMERIC_MANTISSA_BITS = 96
#: NUMERIC specials live in byte 0 of the 16-byte payload (unused low flag bits otherwise).
NUMERIC_NAN, NUMERIC_POS_INF, NUMERIC_NEG_INF = 1, 2, 3
#: DATE is stored as days from the common era: 0001-01-01 is day 1 (``date.toordinal``).
CE_DAYS_AT_UNIX_EPOCH = 719_163
SECS_PER_DAY = 86_400
NANOS_PER_SEC = 1_000_000_000
NANOS_PER_USEC = 1_000

#: Payload widths of the fixed-width kinds (the tag byte not included).
PAYLOAD_WIDTH: dict[TypeKind, int] = {
    TypeKind.BOOLEAN: 1,
    TypeKind.SMALLINT: 2,
    TypeKind.INT: 4,
    TypeKind.BIGINT: 8,
    TypeKind.SERIAL: 8,
    TypeKind.REAL: 4,
    TypeKind.DOUBLE: 8,
    TypeKind.NUMERIC: 16,
    TypeKind.DATE: 4,
    TypeKind.TIME: 8,
    TypeKind.TIMESTAMP: 12,
    TypeKind.TIMESTAMPTZ: 8,
    TypeKind.INTERVAL: 16,
}
#: Kinds stored as u32 length + bytes.
VAR_KINDS = frozenset({TypeKind.VARCHAR, TypeKind.BYTEA, TypeKind.JSONB})

# payload layouts
_U8 = struct.Struct("<B")
_I16 = struct.Struct("<h")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_TIME = struct.Struct("<II")
_TIMESTAMP = struct.Struct("<qI")
_INTERVAL = struct.Struct("<iiq")
_NUMERIC = struct.Struct("<IIII")
# tag byte + payload, packed in one call by the encoders
_TAG_U32 = struct.Struct("<BI")  # also the u32 length / count prefix
_TAG_F64 = struct.Struct("<Bd")
_TAG_DATE = struct.Struct("<Bi")
_TAG_TIME = struct.Struct("<BII")
_TAG_TIMESTAMP = struct.Struct("<BqI")
_TAG_TIMESTAMPTZ = struct.Struct("<Bq")
_TAG_INTERVAL = struct.Struct("<Biiq")

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ONE_USEC = dt.timedelta(microseconds=1)

Encoder = Callable[[Datum, DataType], bytes]
Decoder = Callable[[bytes | memoryview, int, DataType], tuple[Datum, int]]


# =============================================================================================
# Public scalar API
# =============================================================================================


def encode_datum(v: Datum, t: DataType) -> bytes:
    """One datum: ``00`` for NULL, else ``01`` + payload. Validates `v` against `t` first."""
    if v is None:
        return b"\x00"
    return _ENCODERS[t.kind](v, t)


def encode_row(row: Sequence[Datum], types: Sequence[DataType]) -> bytes:
    """The concatenated datums of a row (no header: the reader knows the column types)."""
    if len(row) != len(types):
        raise InvalidInput(f"row has {len(row)} values, expected {len(types)}")
    return b"".join(
        [b"\x00" if v is None else _ENCODERS[t.kind](v, t) for v, t in zip(row, types, strict=True)]
    )


def decode_datum(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
    """The datum of type `t` starting at `pos`, and the position just after it."""
    if not 0 <= pos < len(buf):
        raise DataCorruption(f"value truncated: no {t} datum at byte {pos} of {len(buf)}")
    tag = buf[pos]
    if tag == NULL_TAG:
        return None, pos + 1
    if tag != VALUE_TAG:
        raise DataCorruption(f"invalid null tag {tag:#04x} for a {t} datum at byte {pos}")
    return _DECODERS[t.kind](buf, pos + 1, t)


def decode_row(
    buf: bytes | memoryview,
    types: Sequence[DataType],
    pos: int = 0,
    *,
    required: int | None = None,
    missing: Sequence[Datum] = (),
) -> Row:
    """All datums of a row; the row must end exactly at the end of `buf`. With `required`, a
    row may end after that many datums (stored before later columns were added, PostgreSQL's
    ``attmissingval``): each absent datum `j` reads as ``missing[j - required]``."""
    out: list[Datum] = []
    for j, t in enumerate(types):
        if required is not None and j >= required and pos == len(buf):
            out.append(missing[j - required] if j - required < len(missing) else None)
            continue
        v, pos = decode_datum(buf, pos, t)
        out.append(v)
    if pos != len(buf):
        raise DataCorruption(f"{len(buf) - pos} trailing bytes after a row of {len(types)} columns")
    return tuple(out)


# =============================================================================================
# Encoders (value -> tagged bytes), one per kind
# =============================================================================================


def _invalid(v: Datum, t: DataType) -> InvalidInput:
    return InvalidInput(f"invalid input for type {t}: {v!r}")


def _is_int(v: Datum) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _enc_bool(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, bool | np.bool_):
        raise _invalid(v, t)
    return b"\x01\x01" if v else b"\x01\x00"


def _int_encoder(fmt: str) -> Encoder:
    packer = struct.Struct("<B" + fmt)

    def encode(v: Datum, t: DataType) -> bytes:
        if not _is_int(v):
            raise _invalid(v, t)
        try:
            return packer.pack(VALUE_TAG, v)
        except struct.error:
            raise NumericOutOfRange(f"{t.kind.value} out of range: {v}") from None

    return encode


def f32_bits(x: float) -> int:
    """The float32 bit pattern of `x`. A NaN keeps its sign and top payload bits unquieted, the
    inverse of `f32_value`, so a stored float32 NaN survives decode + encode bit for bit (the C
    double -> float cast that `struct` uses sets the quiet bit of signalling NaNs)."""
    if math.isnan(x):
        bits = _U64.unpack(_F64.pack(x))[0]
        payload = (bits >> 29) & 0x7F_FFFF
        return ((bits >> 32) & 0x8000_0000) | 0x7F80_0000 | (payload or 0x40_0000)
    return int(_U32.unpack(_F32.pack(x))[0])


def f32_value(bits: int) -> float:
    """The Python float of a float32 bit pattern (NaN payloads moved up losslessly)."""
    if bits & 0x7F80_0000 == 0x7F80_0000 and bits & 0x7F_FFFF:
        wide = ((bits & 0x8000_0000) << 32) | (0x7FF << 52) | ((bits & 0x7F_FFFF) << 29)
        return float(_F64.unpack(_U64.pack(wide))[0])
    return float(_F32.unpack(_U32.pack(bits))[0])


def _enc_real(v: Datum, t: DataType) -> bytes:
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise _invalid(v, t)
    try:
        return _TAG_U32.pack(VALUE_TAG, f32_bits(float(v)))
    except OverflowError:
        raise NumericOutOfRange(f"value out of range for type real: {v}") from None


def _enc_double(v: Datum, t: DataType) -> bytes:
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise _invalid(v, t)
    try:
        return _TAG_F64.pack(VALUE_TAG, float(v))
    except OverflowError:  # an int beyond the double range
        raise NumericOutOfRange(f"value out of range for type double precision: {v}") from None


_NUMERIC_ZERO = bytes(16)
_NUMERIC_SPECIALS = {
    NUMERIC_NAN: decimal.Decimal("NaN"),
    NUMERIC_POS_INF: decimal.Decimal("Infinity"),
    NUMERIC_NEG_INF: decimal.Decimal("-Infinity"),
}


def pack_numeric(negative: bool, mantissa: int, scale: int) -> bytes:
    """The 16-byte rust_decimal layout of ``(-1)**negative * mantissa / 10**scale``, given in
    canonical form (no trailing zeros when scale > 0). Zero is always written unsigned."""
    if mantissa == 0:
        return _NUMERIC_ZERO
    if scale > NUMERIC_MAX_SCALE:
        raise NumericOutOfRange(f"numeric out of range: scale {scale} exceeds {NUMERIC_MAX_SCALE}")
    if mantissa >> NUMERIC_MANTISSA_BITS:
        raise NumericOutOfRange(
            f"numeric out of range: mantissa {mantissa} needs more than {NUMERIC_MANTISSA_BITS} bits"
        )
    flags = (scale << 16) | (0x8000_0000 if negative else 0)
    return _NUMERIC.pack(flags, mantissa & 0xFFFF_FFFF, (mantissa >> 32) & 0xFFFF_FFFF, mantissa >> 64)


def pack_unscaled(unscaled: int, scale: int) -> bytes:
    """`pack_numeric` of the value ``unscaled / 10**scale`` (e.g. an Arrow decimal128 slot)."""
    if scale < 0:
        unscaled, scale = unscaled * 10**-scale, 0
    while scale > 0 and unscaled % 10 == 0:
        unscaled //= 10
        scale -= 1
    return pack_numeric(unscaled < 0, abs(unscaled), scale)


def numeric_payload(v: decimal.Decimal | int) -> bytes:
    """The 16-byte payload of a NUMERIC value (its display scale kept)."""
    if isinstance(v, int):
        return pack_unscaled(v, 0)
    if not v.is_finite():
        if v.is_nan():
            return bytes([NUMERIC_NAN]) + bytes(15)
        return bytes([NUMERIC_NEG_INF if v.is_signed() else NUMERIC_POS_INF]) + bytes(15)
    unscaled, scale = nm.parts_of(v)  # the display scale is stored (as numeric_value writes it)
    if unscaled == 0:
        return _NUMERIC.pack(scale << 16, 0, 0, 0)
    return pack_numeric(unscaled < 0, abs(unscaled), scale)


def _enc_numeric(v: Datum, t: DataType) -> bytes:
    if isinstance(v, bool) or not isinstance(v, decimal.Decimal | int | np.integer):
        raise _invalid(v, t)
    return b"\x01" + numeric_payload(v if isinstance(v, decimal.Decimal) else int(v))


def _utf8(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, str):
        raise _invalid(v, t)
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"invalid input for type {t}: string is not valid unicode") from None


def _length_prefixed(data: bytes, t: DataType, prefix: bytes = b"") -> bytes:
    n = len(prefix) + len(data)
    if n > 0xFFFF_FFFF:
        raise InvalidInput(f"{t} value of {n} bytes exceeds the 4 GiB length prefix")
    return _TAG_U32.pack(VALUE_TAG, n) + prefix + data


def _enc_varchar(v: Datum, t: DataType) -> bytes:
    return _length_prefixed(_utf8(v, t), t)


def _enc_bytea(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise _invalid(v, t)
    return _length_prefixed(bytes(v), t)


def _enc_jsonb(v: Datum, t: DataType) -> bytes:
    return _length_prefixed(_utf8(v, t), t, bytes([JSONB_VERSION]))


def _enc_date(v: Datum, t: DataType) -> bytes:
    if isinstance(v, dt.datetime) or not isinstance(v, dt.date):
        raise _invalid(v, t)
    return _TAG_DATE.pack(VALUE_TAG, v.toordinal())


def _enc_time(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dt.time) or v.tzinfo is not None:
        raise _invalid(v, t)
    secs = v.hour * 3600 + v.minute * 60 + v.second
    return _TAG_TIME.pack(VALUE_TAG, secs, v.microsecond * NANOS_PER_USEC)


def _enc_timestamp(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dt.datetime) or v.tzinfo is not None:
        raise _invalid(v, t)
    d = v - _EPOCH  # timedelta normalizes to floor seconds + a non-negative remainder
    return _TAG_TIMESTAMP.pack(VALUE_TAG, d.days * SECS_PER_DAY + d.seconds, d.microseconds * NANOS_PER_USEC)


def _enc_timestamptz(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dt.datetime):
        raise _invalid(v, t)
    if v.tzinfo is None:  # like scalar.to_arrow: a naive value is taken as UTC
        v = v.replace(tzinfo=dt.UTC)
    return _TAG_TIMESTAMPTZ.pack(VALUE_TAG, (v - _EPOCH_UTC) // _ONE_USEC)


def _enc_interval(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, Interval):
        raise _invalid(v, t)
    return _TAG_INTERVAL.pack(VALUE_TAG, v.months, v.days, v.usecs)


def _enc_struct(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, dict):
        raise _invalid(v, t)
    return b"\x01" + b"".join([encode_datum(v.get(f.name), f.data_type) for f in t.fields])


def _enc_list(v: Datum, t: DataType) -> bytes:
    if not isinstance(v, list | tuple):
        raise _invalid(v, t)
    assert t.elem is not None
    elem = t.elem
    return _TAG_U32.pack(VALUE_TAG, len(v)) + b"".join([encode_datum(e, elem) for e in v])


_ENCODERS: dict[TypeKind, Encoder] = {
    TypeKind.BOOLEAN: _enc_bool,
    TypeKind.SMALLINT: _int_encoder("h"),
    TypeKind.INT: _int_encoder("i"),
    TypeKind.BIGINT: _int_encoder("q"),
    TypeKind.SERIAL: _int_encoder("q"),
    TypeKind.NUMERIC: _enc_numeric,
    TypeKind.REAL: _enc_real,
    TypeKind.DOUBLE: _enc_double,
    TypeKind.VARCHAR: _enc_varchar,
    TypeKind.BYTEA: _enc_bytea,
    TypeKind.JSONB: _enc_jsonb,
    TypeKind.DATE: _enc_date,
    TypeKind.TIME: _enc_time,
    TypeKind.TIMESTAMP: _enc_timestamp,
    TypeKind.TIMESTAMPTZ: _enc_timestamptz,
    TypeKind.INTERVAL: _enc_interval,
    TypeKind.STRUCT: _enc_struct,
    TypeKind.LIST: _enc_list,
}


# =============================================================================================
# Decoders (payload after the tag -> value, next position), one per kind
# =============================================================================================


def _need(buf: bytes | memoryview, end: int, t: DataType) -> None:
    if end > len(buf):
        raise DataCorruption(f"value truncated: {t} datum needs {end - len(buf)} more bytes")


def _fixed_decoder(s: struct.Struct, convert: Callable[..., Datum]) -> Decoder:
    """Unpack `s` at the position, then build the value with ``convert(t, *fields)``."""

    def decode(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
        end = pos + s.size
        _need(buf, end, t)
        return convert(t, *s.unpack_from(buf, pos)), end

    return decode


def _to_bool(t: DataType, b: int) -> bool:
    if b > 1:
        raise DataCorruption(f"invalid boolean byte {b:#04x}")
    return b == 1


def _to_int(t: DataType, v: int) -> int:
    return v


def _to_date(t: DataType, days: int) -> dt.date:
    try:
        return dt.date.fromordinal(days)
    except (ValueError, OverflowError):
        raise DataCorruption(f"date of day {days} from CE is outside the Python date range") from None


def check_time(secs: int, nanos: int) -> None:
    """A stored TIME / TIMESTAMP fraction must be a valid, whole-microsecond time of day."""
    if secs >= SECS_PER_DAY or nanos >= NANOS_PER_SEC or nanos % NANOS_PER_USEC:
        raise DataCorruption(f"invalid time of day: {secs} s + {nanos} ns")


def _to_time(t: DataType, secs: int, nanos: int) -> dt.time:
    check_time(secs, nanos)
    return dt.time(secs // 3600, secs // 60 % 60, secs % 60, nanos // NANOS_PER_USEC)


def _to_timestamp(t: DataType, secs: int, nanos: int) -> dt.datetime:
    check_time(0, nanos)
    try:
        return _EPOCH + dt.timedelta(seconds=secs, microseconds=nanos // NANOS_PER_USEC)
    except OverflowError:
        raise DataCorruption(f"timestamp of {secs} s is outside the Python datetime range") from None


def _to_timestamptz(t: DataType, usecs: int) -> dt.datetime:
    try:
        return _EPOCH_UTC + dt.timedelta(microseconds=usecs)
    except OverflowError:
        raise DataCorruption(f"timestamptz of {usecs} us is outside the Python datetime range") from None


def _to_interval(t: DataType, months: int, days: int, usecs: int) -> Interval:
    return Interval(months, days, usecs)


def _to_real(t: DataType, bits: int) -> float:
    return f32_value(bits)


def unpack_numeric(buf: bytes | memoryview, pos: int) -> tuple[bool, int, int] | int:
    """(negative, mantissa, scale) of a 16-byte NUMERIC payload, or the special's code (1 NaN,
    2 +Inf, 3 -Inf). Only the canonical form `pack_numeric` writes is accepted."""
    flags, lo, mid, hi = _NUMERIC.unpack_from(buf, pos)
    special = flags & 0xFF
    if special:
        if special in _NUMERIC_SPECIALS and flags == special and not (lo or mid or hi):
            return special
        raise DataCorruption(f"invalid numeric payload: flags {flags:#010x}")
    if flags & 0x7F00_FFFF:
        raise DataCorruption(f"invalid numeric payload: reserved flag bits set in {flags:#010x}")
    scale = (flags >> 16) & 0xFF
    negative = bool(flags >> 31)
    mantissa = lo | (mid << 32) | (hi << 64)
    if scale > NUMERIC_MAX_SCALE:
        raise DataCorruption(f"invalid numeric payload: scale {scale} exceeds {NUMERIC_MAX_SCALE}")
    if mantissa == 0 and negative:  # values keep their display scale (0.00 too), zero no sign
        raise DataCorruption("invalid numeric payload: negative zero")
    return negative, mantissa, scale


def _dec_numeric(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
    end = pos + 16
    _need(buf, end, t)
    parts = unpack_numeric(buf, pos)
    if isinstance(parts, int):
        return _NUMERIC_SPECIALS[parts], end
    negative, mantissa, scale = parts
    # a string keeps every digit; Decimal arithmetic would round to the context precision
    return decimal.Decimal(f"{'-' if negative else ''}{mantissa}E-{scale}"), end


def _slice(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[int, int]:
    """Start and end of the bytes of a u32-length-prefixed payload at `pos`."""
    _need(buf, pos + 4, t)
    end = pos + 4 + _U32.unpack_from(buf, pos)[0]
    _need(buf, end, t)
    return pos + 4, end


def _text(buf: bytes | memoryview, start: int, end: int, t: DataType) -> str:
    try:
        return str(buf[start:end], "utf-8")
    except UnicodeDecodeError as e:
        raise DataCorruption(f"invalid UTF-8 in a {t} value: {e.reason}") from None


def _dec_varchar(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
    start, end = _slice(buf, pos, t)
    return _text(buf, start, end, t), end


def _dec_bytea(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
    start, end = _slice(buf, pos, t)
    return bytes(buf[start:end]), end


def _dec_jsonb(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
    start, end = _slice(buf, pos, t)
    if start == end or buf[start] != JSONB_VERSION:
        version = buf[start] if start < end else None
        raise DataCorruption(f"invalid jsonb version byte {version!r}")
    return _text(buf, start + 1, end, t), end


def _dec_struct(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
    out = {}
    for f in t.fields:
        out[f.name], pos = decode_datum(buf, pos, f.data_type)
    return out, pos


def list_count(buf: bytes | memoryview, pos: int, end: int, t: DataType) -> int:
    """The element count of a LIST payload; each element takes at least its tag byte."""
    if pos + 4 > end:
        raise DataCorruption(f"value truncated: {t} datum has no element count")
    count = int(_U32.unpack_from(buf, pos)[0])
    if count > end - pos - 4:
        raise DataCorruption(f"{t} datum claims {count} elements in {end - pos - 4} bytes")
    return count


def _dec_list(buf: bytes | memoryview, pos: int, t: DataType) -> tuple[Datum, int]:
    assert t.elem is not None
    elem = t.elem
    count = list_count(buf, pos, len(buf), t)
    pos += 4
    out = []
    for _ in range(count):
        v, pos = decode_datum(buf, pos, elem)
        out.append(v)
    return out, pos


_DECODERS: dict[TypeKind, Decoder] = {
    TypeKind.BOOLEAN: _fixed_decoder(_U8, _to_bool),
    TypeKind.SMALLINT: _fixed_decoder(_I16, _to_int),
    TypeKind.INT: _fixed_decoder(_I32, _to_int),
    TypeKind.BIGINT: _fixed_decoder(_I64, _to_int),
    TypeKind.SERIAL: _fixed_decoder(_I64, _to_int),
    TypeKind.NUMERIC: _dec_numeric,
    TypeKind.REAL: _fixed_decoder(_U32, _to_real),
    TypeKind.DOUBLE: _fixed_decoder(_F64, lambda t, x: x),
    TypeKind.VARCHAR: _dec_varchar,
    TypeKind.BYTEA: _dec_bytea,
    TypeKind.JSONB: _dec_jsonb,
    TypeKind.DATE: _fixed_decoder(_I32, _to_date),
    TypeKind.TIME: _fixed_decoder(_TIME, _to_time),
    TypeKind.TIMESTAMP: _fixed_decoder(_TIMESTAMP, _to_timestamp),
    TypeKind.TIMESTAMPTZ: _fixed_decoder(_I64, _to_timestamptz),
    TypeKind.INTERVAL: _fixed_decoder(_INTERVAL, _to_interval),
    TypeKind.STRUCT: _dec_struct,
    TypeKind.LIST: _dec_list,
}


# =============================================================================================
# Skipping (for the vectorized LIST decoder, which needs element boundaries first)
# =============================================================================================


def skip_datum(buf: bytes | memoryview, pos: int, end: int, t: DataType) -> int:
    """The position after the datum of type `t` at `pos`, reading only tags and lengths.
    Payload contents are not checked here; the caller decodes them afterwards."""
    if pos >= end:
        raise DataCorruption(f"value truncated: no {t} datum at byte {pos}")
    tag = buf[pos]
    pos += 1
    if tag == NULL_TAG:
        return pos
    if tag != VALUE_TAG:
        raise DataCorruption(f"invalid null tag {tag:#04x} for a {t} datum")
    kind = t.kind
    width = PAYLOAD_WIDTH.get(kind)
    if width is not None:
        pos += width
    elif kind in VAR_KINDS:
        if pos + 4 > end:
            raise DataCorruption(f"value truncated: {t} datum has no length")
        pos += 4 + _U32.unpack_from(buf, pos)[0]
    elif kind is TypeKind.STRUCT:
        for f in t.fields:
            pos = skip_datum(buf, pos, end, f.data_type)
    else:
        assert t.elem is not None
        count = list_count(buf, pos, end, t)
        pos += 4
        for _ in range(count):
            pos = skip_datum(buf, pos, end, t.elem)
    if pos > end:
        raise DataCorruption(f"value truncated inside a {t} datum")
    return pos
