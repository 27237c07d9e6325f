"""Order-preserving key encoding of decimals (SQLite4 style, reference §1.2).

A decimal is written as one header byte (sign and base-100 exponent ``E``, with an extra exponent
byte when ``E`` is outside 0..10) followed by its base-100 digits ``0.d1 d2 ... × 100^E``: each
digit ``d`` becomes ``2d+1`` except the last, which becomes ``2d``, so the even byte terminates
the number and makes the encoding self-delimiting. Negative numbers complement the digit bytes.
Special values: ``-Inf = 07``, ``0 = 15``, ``+Inf = 23``, ``NaN = 24`` (NaN largest).

Decoding checks that the bytes are the canonical encoding of some decimal (known header, digits
0..99, no leading or trailing zero digit) and raises DataCorruption otherwise, so garbage never
decodes to a value.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

from piestream.common.errors import DataCorruption, NumericOutOfRange

NEG_INF = 0x07
ZERO = 0x15
POS_INF = 0x23
NAN = 0x24

_NEG_BIG = 0x08  # negative, E > 10: then !E
_NEG_SMALL_BASE = 0x13  # negative, 0 <= E <= 10: 0x13 - E
_NEG_TINY = 0x14  # negative, E < 0: then -E
_POS_TINY = 0x16  # positive, E < 0: then !(-E)
_POS_SMALL_BASE = 0x17  # positive, 0 <= E <= 10: 0x17 + E
_POS_BIG = 0x22  # positive, E > 10: then E

#: The exponent is an i8 in the reference implementation.
MAX_EXPONENT = 127


def encode_decimal(d: Decimal) -> bytes:
    """The ascending key bytes of `d` (any Decimal, including NaN and ±Infinity)."""
    if d.is_nan():
        return bytes([NAN])
    if d.is_infinite():
        return bytes([NEG_INF if d.is_signed() else POS_INF])
    if d.is_zero():
        return bytes([ZERO])
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    return encode_decimal_parts(bool(sign), "".join(map(str, digits)), exp)


def encode_decimal_parts(negative: bool, digits: str, exp: int) -> bytes:
    """Key bytes of the nonzero value ``(-1)^negative × int(digits) × 10^exp``.

    Shared by the scalar path (from a Decimal) and the vectorized path (from Arrow's unscaled
    128-bit integers), so both produce identical bytes.
    """
    stripped = digits.lstrip("0").rstrip("0")
    exp += len(digits.lstrip("0")) - len(stripped)
    if not stripped:
        return bytes([ZERO])
    e10 = len(stripped) + exp  # value = 0.<stripped> × 10^e10
    e100 = -((-e10) // 2)  # ceil(e10 / 2)
    if e10 % 2:
        stripped = "0" + stripped  # value = 0.0<stripped> × 100^e100
    if len(stripped) % 2:
        stripped += "0"
    if not -MAX_EXPONENT <= e100 <= MAX_EXPONENT:
        raise NumericOutOfRange("numeric value out of range for key encoding")
    body = bytearray(int(stripped[i : i + 2]) * 2 + 1 for i in range(0, len(stripped), 2))
    body[-1] -= 1
    if not negative:
        if e100 > 10:
            head = bytes([_POS_BIG, e100])
        elif e100 >= 0:
            head = bytes([_POS_SMALL_BASE + e100])
        else:
            head = bytes([_POS_TINY, ~(-e100) & 0xFF])
        return head + bytes(body)
    if e100 > 10:
        head = bytes([_NEG_BIG, ~e100 & 0xFF])
    elif e100 >= 0:
        head = bytes([_NEG_SMALL_BASE - e100])
    else:
        head = bytes([_NEG_TINY, -e100])
    return head + bytes(b ^ 0xFF for b in body)


def _byte(buf: bytes | memoryview, pos: int, end: int, x: int) -> int:
    if pos >= end:
        raise DataCorruption("truncated numeric key")
    return buf[pos] ^ x


def decode_decimal(
    buf: bytes | memoryview, pos: int, x: int = 0, end: int | None = None
) -> tuple[Decimal, int]:
    """Decode one decimal key starting at `pos`; `x` = 0xFF for descending (inverted) bytes.

    Returns the value and the position after it. Reads nothing at or past `end`.
    """
    if end is None:
        end = len(buf)
    h = _byte(buf, pos, end, x)
    pos += 1
    if h == NAN:
        return Decimal("NaN"), pos
    if h == POS_INF:
        return Decimal("Infinity"), pos
    if h == NEG_INF:
        return Decimal("-Infinity"), pos
    if h == ZERO:
        return Decimal(0), pos
    negative = h < ZERO
    if h == _POS_BIG:
        e100 = _byte(buf, pos, end, x)
        pos += 1
        if e100 <= 10 or e100 > MAX_EXPONENT:
            raise DataCorruption("invalid numeric key exponent")
    elif _POS_SMALL_BASE <= h < _POS_BIG:
        e100 = h - _POS_SMALL_BASE
    elif h == _POS_TINY:
        e100 = -(~_byte(buf, pos, end, x) & 0xFF)
        pos += 1
        if e100 >= 0 or e100 < -MAX_EXPONENT:
            raise DataCorruption("invalid numeric key exponent")
    elif h == _NEG_BIG:
        e100 = ~_byte(buf, pos, end, x) & 0xFF
        pos += 1
        if e100 <= 10 or e100 > MAX_EXPONENT:
            raise DataCorruption("invalid numeric key exponent")
    elif _NEG_BIG < h <= _NEG_SMALL_BASE:
        e100 = _NEG_SMALL_BASE - h
    elif h == _NEG_TINY:
        e100 = -_byte(buf, pos, end, x)
        pos += 1
        if e100 >= 0 or e100 < -MAX_EXPONENT:
            raise DataCorruption("invalid numeric key exponent")
    else:
        raise DataCorruption(f"invalid numeric key header byte 0x{h:02x}")
    dx = x ^ (0xFF if negative else 0)
    digits: list[int] = []
    while True:
        b = _byte(buf, pos, end, dx)
        pos += 1
        if b > 199:
            raise DataCorruption("invalid numeric key digit")
        digits.append(b >> 1)
        if not b & 1:
            break
    if digits[0] == 0 or digits[-1] == 0:
        raise DataCorruption("non-canonical numeric key digits")
    text = "".join(f"{d:02d}" for d in digits)
    value = Decimal((int(negative), tuple(map(int, text)), 2 * (e100 - len(digits))))
    return value.normalize(decimal.Context(prec=2 * len(digits) + 2)), pos


def decimal_len(buf: bytes | memoryview, pos: int, x: int = 0, end: int | None = None) -> int:
    """Byte length of the decimal key at `pos` (checks its framing)."""
    return decode_decimal(buf, pos, x, end)[1] - pos
