"""NUMERIC columns of the per-value-scale layout (`piestream.common.numeric.NUMERIC_VALUE_ARROW`)
in the durable encodings, a whole column at a time.

- **Value payloads** keep each value's display scale: ``1.50`` is written as mantissa 150, scale 2
  (the 16-byte rust_decimal layout of `piestream.encoding.value_datum`, specials in byte 0). That
  is the one change to the stored format: the writer before per-value scales stripped trailing
  zeros and its reader refuses them as corrupt, so relations holding such values are of
  RELATION_FORMAT 4, which an older piestream refuses by number. Every payload the older writer
  produced decodes here to the same value (its scale being the normalized one).
- **Key bytes** are exactly today's memcomparable bytes (`piestream.encoding.memcmp_decimal`):
  equal values share a key whatever their scales (1.5 and 1.50), -Infinity < finite < Infinity
  < NaN. Keys do not change.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common import numeric_arrays as na
from piestream.common.errors import DataCorruption, NumericOutOfRange
from piestream.common.numeric import NAN_SCALE, NEG_INF_SCALE, NUMERIC_MAX_SCALE, POS_INF_SCALE
from piestream.encoding.memcmp_decimal import NAN, NEG_INF, POS_INF, encode_decimal_parts
from piestream.encoding.value_datum import NUMERIC_NAN, NUMERIC_NEG_INF, NUMERIC_POS_INF

_SIGN = np.uint32(0x8000_0000)
#: Flag bits that are never set: bits 8..15 and 24..30 (byte 0 holds a special's code).
_RESERVED = np.uint32(0x7F00_FF00)
_CODE_OF_SCALE = {NAN_SCALE: NUMERIC_NAN, POS_INF_SCALE: NUMERIC_POS_INF, NEG_INF_SCALE: NUMERIC_NEG_INF}


def value_payloads(col: pa.Array) -> np.ndarray:
    """(n, 16) uint8 payloads of a NUMERIC column, each keeping its value's scale (NULL rows are
    zero bytes; the row encoders write the NULL flag). 22003 for a value whose unscaled integer
    needs more than rust_decimal's 96 bits."""
    num = na.unpack(col)
    n = len(num)
    neg, mh, ml = na.magnitude(num.hi, num.lo)
    fin = ~num.special & num.vmask()
    if (fin & ((mh >> np.uint64(32)) != 0)).any():
        raise NumericOutOfRange("numeric out of range: the unscaled value needs more than 96 bits")
    if (fin & (num.scale > NUMERIC_MAX_SCALE)).any():
        raise NumericOutOfRange(f"numeric out of range: scale exceeds {NUMERIC_MAX_SCALE}")
    zero = (mh == 0) & (ml == 0)
    words = np.zeros((n, 4), "<u4")
    flags = np.where(fin, num.scale, 0).astype(np.uint32) << np.uint32(16)
    flags |= np.where(fin & neg & ~zero, _SIGN, np.uint32(0))
    for scale, code in _CODE_OF_SCALE.items():
        flags = np.where(num.scale == scale, np.uint32(code), flags)
    words[:, 0] = np.where(num.vmask(), flags, 0)
    words[:, 1] = np.where(fin, ml & np.uint64(0xFFFF_FFFF), 0)
    words[:, 2] = np.where(fin, ml >> np.uint64(32), 0)
    words[:, 3] = np.where(fin, mh & np.uint64(0xFFFF_FFFF), 0)
    return words.view(np.uint8).reshape(n, 16)


def from_value_payloads(payloads: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """A NUMERIC column from (n, 16) payloads (rows where `valid` is False are NULL and not
    looked at). Raises DataCorruption for bytes no writer produces: reserved flag bits, an
    unknown special, a special with a mantissa, a scale above 28, a negative zero."""
    n = len(payloads)
    words = np.ascontiguousarray(payloads, np.uint8).view("<u4").reshape(n, 4)
    flags, lo, mid, hi = (words[:, i].astype(np.uint64) for i in range(4))
    live = np.ones(n, np.bool_) if valid is None else np.asarray(valid, np.bool_)
    code = flags & np.uint64(0xFF)
    special = code != 0
    scale = ((flags >> np.uint64(16)) & np.uint64(0xFF)).astype(np.int64)
    neg = (flags >> np.uint64(31)) != 0
    mantissa_set = (lo | mid | hi) != 0
    bad = (flags & np.uint64(_RESERVED)) != 0
    bad |= special & ((code > 3) | (flags != code) | mantissa_set)
    bad |= ~special & ((scale > NUMERIC_MAX_SCALE) | (neg & ~mantissa_set))
    rows = np.flatnonzero(bad & live)
    if len(rows):
        i = int(rows[0])
        raise DataCorruption(f"invalid numeric payload in row {i}: flags {int(flags[i]):#010x}")
    ml = lo | (mid << np.uint64(32))
    hi_word, lo_word = na.signed(neg, hi, ml)
    sc = np.select(
        [code == NUMERIC_NAN, code == NUMERIC_POS_INF, code == NUMERIC_NEG_INF],
        [NAN_SCALE, POS_INF_SCALE, NEG_INF_SCALE],
        scale,
    )
    hi_word = np.where(special | ~live, 0, hi_word)
    lo_word = np.where(special | ~live, np.uint64(0), lo_word)
    sc = np.where(live, sc, 0)
    return na.pack(na.Num(hi_word, lo_word, sc, None if valid is None else live))


def at_least_scale(col: pa.Array, scale: int) -> pa.Array:
    """`col` with every finite value shown with at least `scale` fraction digits (zeros added,
    exact): a numeric(p, s) column's values as PostgreSQL stores them, also those written
    normalized (without trailing zeros) by piestream before per-value scales."""
    num = na.unpack(col)
    short = ~num.special & (num.scale < scale)
    if not short.any():
        return col
    out, bad = na.rescale(num, np.where(short, scale, num.scale))
    if (bad & num.vmask()).any():
        raise NumericOutOfRange("numeric field overflow")
    return na.pack(out)


def key_bytes(col: pa.Array) -> list[bytes | None]:
    """Today's memcomparable (ascending) key bytes of each value, None for NULL: the key of 1.50
    is the key of 1.5. Per distinct value in Python (base-100 digits need big integers), as the
    decimal128 path of `piestream.encoding.memcmp_vec` does."""
    num = na.unpack(col)
    if ((num.scale > NUMERIC_MAX_SCALE) & num.vmask()).any():  # a struct built around the builders
        raise NumericOutOfRange("value overflows numeric format")
    neg, mh, ml = na.magnitude(num.hi, num.lo)
    fixed = {NAN_SCALE: bytes([NAN]), POS_INF_SCALE: bytes([POS_INF]), NEG_INF_SCALE: bytes([NEG_INF])}
    cache: dict[tuple[int, int], bytes] = {}
    out: list[bytes | None] = []
    rows = zip(num.vmask().tolist(), neg.tolist(), mh.tolist(), ml.tolist(), num.scale.tolist(), strict=True)
    for valid, negative, h, low, scale in rows:  # per row: see the docstring
        if not valid:
            out.append(None)
            continue
        if scale < 0:
            out.append(fixed[scale])
            continue
        unscaled = -((h << 64) | low) if negative else (h << 64) | low
        enc = cache.get((unscaled, scale))
        if enc is None:
            enc = cache[(unscaled, scale)] = encode_decimal_parts(unscaled < 0, str(abs(unscaled)), -scale)
        out.append(enc)
    return out
