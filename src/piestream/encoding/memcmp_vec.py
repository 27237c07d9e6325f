"""Vectorized memcomparable encoding of whole Arrow columns (the hot path; reference §1).

Encoding builds a small tree of *pieces* per key column (a tag byte, fixed-width words, an
escaped string, ...). Each piece knows every row's byte length, so the key offsets are one cumsum,
and then writes its bytes straight into the output buffer at per-row start positions with a few
numpy scatters: no Python code runs per row for fixed-width types, strings, structs and lists.
Values move as whole 1/2/4/8-byte words through `word_view` (one index per word, not per byte);
keys whose columns are all fixed-width and non-NULL are written with strided copies.

The bytes are identical to the scalar codec in `memcmp_scalar`; `memcmp_vec_decode` reads them
back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa

from piestream.common.errors import DatetimeOutOfRange, InvalidInput, NumericOutOfRange
from piestream.common.interval import USECS_PER_DAY
from piestream.common.numeric import is_numeric_array
from piestream.common.order import OrderType
from piestream.common.types import DataType, TypeKind
from piestream.encoding import numeric_value
from piestream.encoding.memcmp_scalar import (
    CANONICAL_NAN_F32,
    CANONICAL_NAN_F64,
    FIXED_WIDTH,
    GROUP_CONTINUES,
    SECS_PER_DAY,
    UNIX_EPOCH_DAYS_FROM_CE,
    USECS_PER_SEC,
    datum_tags,
    flip_mask,
)
from piestream.encoding.ragged import Ragged, word_view

#: Kinds encoded as escaped byte strings.
STRING_KINDS = frozenset({TypeKind.VARCHAR, TypeKind.BYTEA, TypeKind.JSONB})
#: Arrow's month_day_nano_interval value layout.
INTERVAL_DTYPE = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])
#: Composite (struct field / list element) tags, before any DESC inversion.
COMPOSITE_TAGS = (0x00, 0x01)
_I32_MAX = 2**31 - 1


# =============================================================================================
# Arrow input helpers
# =============================================================================================


def _as_array(col: pa.Array | pa.ChunkedArray, t: DataType) -> pa.Array:
    """One contiguous Arrow array with exactly `t`'s layout (casting compatible layouts)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not col.type.equals(t.arrow):
        try:
            col = col.cast(t.arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            if _is_number(col.type) and _is_number(t.arrow):
                raise NumericOutOfRange(f"{t} out of range: {e}") from None
            raise InvalidInput(f"cannot encode a {col.type} column as {t}: {e}") from None
    return col


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _bits(buf: pa.Buffer | None, offset: int, n: int) -> np.ndarray | None:
    if buf is None:
        return None
    raw = np.frombuffer(buf, np.uint8)
    return np.unpackbits(raw, bitorder="little", count=offset + n)[offset:].astype(np.bool_)


def _validity(arr: pa.Array) -> np.ndarray | None:
    """Row validity as bools, or None when every row is valid."""
    if arr.null_count == 0:
        return None
    return _bits(arr.buffers()[0], arr.offset, len(arr))


def _values(arr: pa.Array, dtype: str | np.dtype) -> np.ndarray:
    """The fixed-width values buffer of `arr` as numpy (slicing offset applied)."""
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None or len(arr) == 0:
        return np.zeros(len(arr), dt)
    return np.frombuffer(buf, dt, count=arr.offset + len(arr))[arr.offset :]


def _string_offsets(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, int64 offsets of the n strings) of a string/binary array, without copying."""
    bufs = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(bufs[1], np.int32, count=arr.offset + n + 1)[arr.offset :].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offsets


def _select(values: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    return values if rows is None else values[rows]


# =============================================================================================
# Encoding pieces
# =============================================================================================

#: A fixed-width part of a piece: (byte offset, big-endian word dtype, native unsigned values).
_Field = tuple[int, str, np.ndarray]


class _Piece(Protocol):
    """The bytes of some key part for m rows."""

    @property
    def lengths(self) -> np.ndarray:
        """int64 byte count per row."""
        ...

    def write(self, out: np.ndarray, starts: np.ndarray) -> None:
        """Write row i's bytes to ``out[starts[i]:]`` (every byte of its span)."""
        ...


class _Fixed:
    """Every row has the same width: a few 1/2/4/8-byte big-endian words per row."""

    def __init__(self, fields: list[_Field], width: int, m: int) -> None:
        self.fields, self.width = fields, width
        self.lengths = np.full(m, width, np.int64)

    def write(self, out: np.ndarray, starts: np.ndarray) -> None:
        if len(starts):
            for off, dtype, values in self.fields:
                word_view(out, dtype)[starts + off] = values

    def write_rows(self, out: np.ndarray) -> None:
        """Write all rows back to back (out has m * width bytes): strided, no index arrays."""
        m = len(self.lengths)
        for off, dtype, values in self.fields:
            np.ndarray((m,), dtype, buffer=out, offset=off, strides=(self.width,))[...] = values

    def shifted(self, by: int) -> list[_Field]:
        return [(off + by, dtype, values) for off, dtype, values in self.fields]


def _fixed(words: list[tuple[str, np.ndarray]], x: int) -> _Fixed:
    """Consecutive big-endian words (dtype, values) as a _Fixed, every bit inverted when x."""
    fields: list[_Field] = []
    off = 0
    for dtype, values in words:
        size = np.dtype(dtype).itemsize
        v = values.astype(f"<u{size}", copy=False)
        fields.append((off, dtype, ~v if x else v))
        off += size
    return _Fixed(fields, off, len(words[0][1]))


class _Bytes:
    """Arbitrary bytes per row (from the per-row NUMERIC encoder)."""

    def __init__(self, r: Ragged) -> None:
        self.r = r
        self.lengths = r.lengths

    def write(self, out: np.ndarray, starts: np.ndarray) -> None:
        r, lens = self.r, self.lengths
        total = int(lens.sum())
        if total:
            base = int(r.offsets[0])
            dest = np.repeat(starts - r.offsets[:-1], lens) + np.arange(base, base + total, dtype=np.int64)
            out[dest] = r.data[base : base + total]


class _Tagged:
    """A tag byte per row, then `inner`, which covers only the rows where `valid`."""

    def __init__(self, tags: np.ndarray, valid: np.ndarray, inner: _Piece) -> None:
        self.tags, self.valid, self.inner = tags, valid, inner
        self.lengths = np.ones(len(tags), np.int64)
        self.lengths[valid] += inner.lengths

    def write(self, out: np.ndarray, starts: np.ndarray) -> None:
        out[starts] = self.tags
        self.inner.write(out, starts[self.valid] + 1)


class _Seq:
    """Parts one after the other."""

    def __init__(self, parts: Sequence[_Piece], m: int) -> None:
        self.parts = parts
        self.lengths = sum((p.lengths for p in parts), np.zeros(m, np.int64))

    def write(self, out: np.ndarray, starts: np.ndarray) -> None:
        cursor = starts
        for i, p in enumerate(self.parts):
            p.write(out, cursor)
            if i + 1 < len(self.parts):
                cursor = cursor + p.lengths


def _seq(parts: Sequence[_Piece], m: int) -> _Piece:
    """Parts in sequence; runs of fixed-width parts merge into one _Fixed (fewer scatters)."""
    flat: list[_Piece] = []
    for p in parts:
        flat.extend(p.parts if isinstance(p, _Seq) else [p])
    merged: list[_Piece] = []
    for p in flat:
        if isinstance(p, _Fixed) and merged and isinstance(merged[-1], _Fixed):
            prev = merged[-1]
            merged[-1] = _Fixed(prev.fields + p.shifted(prev.width), prev.width + p.width, m)
        else:
            merged.append(p)
    return merged[0] if len(merged) == 1 else _Seq(merged, m)


#: Little-endian masks keeping the first c bytes of an 8-byte word, c = 0..8.
KEEP_BYTES = np.array([(1 << (8 * c)) - 1 for c in range(9)], np.uint64)


class _Escaped:
    """Byte strings in the escaped 8-byte-group form: data[src[i] : src[i] + lens[i]] per row.

    Group g of a string is the 8-byte word at ``src + 8g`` (bytes past the string masked to zero)
    and goes to ``start + 1 + 9g``, its marker to ``start + 9g + 9``. One round per group index
    moves that group of every string still going on, as single 8-byte words.
    """

    def __init__(self, data: np.ndarray, src: np.ndarray, lens: np.ndarray, x: int) -> None:
        self.data, self.src, self.lens, self.x = data, src, lens, x
        self.lengths = 1 + 9 * ((lens + 7) // 8)

    def write(self, out: np.ndarray, starts: np.ndarray) -> None:
        x = np.uint8(self.x)
        src, lens = self.src, self.lens
        nonempty = lens > 0
        out[starts] = nonempty.view(np.uint8) ^ x
        if not nonempty.all():
            src, lens, starts = src[nonempty], lens[nonempty], starts[nonempty]
        if not len(lens):
            return
        data = self.data
        if int((src + lens).max()) + 7 > len(data):  # a last group may read past the buffer: pad
            data = np.concatenate([data, np.zeros(8, np.uint8)])
        words_in, words_out = word_view(data, "<u8"), word_view(out, "<u8")
        dst, rem = starts + 1, lens
        while True:
            words = words_in[src] & KEEP_BYTES[np.minimum(rem, 8)]
            words_out[dst] = ~words if self.x else words
            # the marker: 9 while more groups follow, else the byte count of this last group
            marker = np.minimum(rem, GROUP_CONTINUES).astype(np.uint8)
            out[dst + 8] = marker ^ x if self.x else marker
            more = rem > 8
            if not more.any():
                return
            if not more.all():
                src, dst, rem = src[more], dst[more], rem[more]
            src, dst, rem = src + 8, dst + 9, rem - 8


def _materialize(piece: _Piece, m: int) -> Ragged:
    if isinstance(piece, _Fixed):
        out = np.empty(m * piece.width, np.uint8)
        if m:
            piece.write_rows(out)
        return Ragged(np.arange(m + 1, dtype=np.int64) * piece.width, out)
    offsets = np.zeros(m + 1, np.int64)
    np.cumsum(piece.lengths, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    piece.write(out, offsets[:-1])
    return Ragged(offsets, out)


# =============================================================================================
# Encoding values of each type
# =============================================================================================


def _sign_flipped(values: np.ndarray, width: int) -> np.ndarray:
    """Signed ints -> unsigned with the sign bit flipped (order-preserving)."""
    u = values.astype(f"<i{width}", copy=False).view(f"<u{width}")
    return u ^ np.array(1 << (8 * width - 1), dtype=f"<u{width}")


def _float_keys(values: np.ndarray, width: int) -> np.ndarray:
    """IEEE floats -> canonical NaN, +0.0 for -0.0, then the sign trick."""
    ut = np.dtype(f"<u{width}")
    bits = values.view(ut).copy()
    bits[values == 0] = 0
    bits[np.isnan(values)] = CANONICAL_NAN_F32 if width == 4 else CANONICAL_NAN_F64
    sign = ut.type(1 << (8 * width - 1))
    return np.where(bits & sign, ~bits, bits | sign)


def _interval_total(months: np.ndarray, days: np.ndarray, usecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The i128 total usecs ``(months*30 + days) * 86400e6 + usecs`` as (hi int64, lo uint64),
    exactly, in 32-bit limbs (it overflows int64 for large months/days)."""
    a = months.astype(np.int64) * 30 + days.astype(np.int64)  # |a| < 2^37
    c = USECS_PER_DAY
    c_hi, c_lo = c >> 32, c & 0xFFFF_FFFF
    a_hi = a >> 32  # arithmetic shift: a = a_hi * 2^32 + a_lo, 0 <= a_lo < 2^32
    a_lo = (a & 0xFFFF_FFFF).astype(np.uint64)
    low = a_lo * np.uint64(c_lo)  # < 2^61
    mid = a_lo.astype(np.int64) * c_hi + a_hi * c  # a*c = low + mid * 2^32, |mid| < 2^43
    hi = mid >> 32
    lo = mid.astype(np.uint64) << np.uint64(32)
    lo2 = lo + low
    hi = hi + (lo2 < lo)
    u = usecs.astype(np.int64)
    lo3 = lo2 + u.astype(np.uint64)
    hi = hi + np.where(u < 0, -1, 0) + (lo3 < lo2)
    return hi, lo3


def _fixed_words(arr: pa.Array, t: DataType, rows: np.ndarray | None) -> list[tuple[str, np.ndarray]]:
    """Ascending key words (big-endian dtype, values) of the fixed-width values at `rows`."""
    k = t.kind
    if k is TypeKind.BOOLEAN:
        vals = _bits(arr.buffers()[1], arr.offset, len(arr))
        vals = np.zeros(len(arr), np.bool_) if vals is None else vals
        return [("u1", _select(vals, rows).view(np.uint8))]
    if k in (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT, TypeKind.SERIAL, TypeKind.TIMESTAMPTZ):
        w = FIXED_WIDTH[k]
        return [(f">u{w}", _sign_flipped(_select(_values(arr, f"<i{w}"), rows), w))]
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        w = FIXED_WIDTH[k]
        return [(f">u{w}", _float_keys(_select(_values(arr, f"<f{w}"), rows), w))]
    if k is TypeKind.DATE:
        ce = _select(_values(arr, "<i4"), rows).astype(np.int64) + UNIX_EPOCH_DAYS_FROM_CE
        if len(ce) and int(ce.max()) > _I32_MAX:
            raise DatetimeOutOfRange("date out of range")
        return [(">u4", _sign_flipped(ce, 4))]
    if k is TypeKind.TIME:
        us = _select(_values(arr, "<i8"), rows)
        if len(us) and (int(us.min()) < 0 or int(us.max()) >= SECS_PER_DAY * USECS_PER_SEC):
            raise DatetimeOutOfRange("time out of range")
        secs, sub = np.divmod(us, USECS_PER_SEC)
        return [(">u4", secs), (">u4", sub * 1000)]
    if k is TypeKind.TIMESTAMP:
        secs, sub = np.divmod(_select(_values(arr, "<i8"), rows), USECS_PER_SEC)
        return [(">u8", _sign_flipped(secs, 8)), (">u4", sub * 1000)]
    if k is TypeKind.INTERVAL:
        iv = _select(_values(arr, INTERVAL_DTYPE), rows)
        hi, lo = _interval_total(iv["months"], iv["days"], iv["nanos"] // 1000)
        return [(">u8", _sign_flipped(hi, 8)), (">u8", lo)]
    raise AssertionError(f"not a fixed-width kind: {k}")


def _numeric_piece(arr: pa.Array, rows: np.ndarray | None, x: int) -> _Piece:
    """Per distinct value in Python (`numeric_value.key_bytes`): 1.50 has the key of 1.5."""
    if is_numeric_array(arr):
        sel = arr if rows is None else arr.take(pa.array(rows, pa.int64()))
        keys = [b"\x15" if k is None else k for k in numeric_value.key_bytes(sel)]  # NULL slots: 0
        r = Ragged.from_list(keys)
        return _Bytes(r.invert() if x else r)
    raise InvalidInput(f"cannot encode a {arr.type} column as numeric")


def _list_piece(arr: pa.Array, t: DataType, rows: np.ndarray | None, x: int) -> _Piece:
    """Each list's elements (composite tags, never inverted) concatenated, written as bytes."""
    assert t.elem is not None
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), np.int64)
    lo = int(offsets[0])
    child = arr.values.slice(lo, int(offsets[-1]) - lo)
    elems = _materialize(_datum_piece(child, t.elem, COMPOSITE_TAGS, 0, None), len(child))
    bounds = elems.offsets[offsets - lo]
    starts, ends = _select(bounds[:-1], rows), _select(bounds[1:], rows)
    return _Escaped(elems.data, starts, ends - starts, x)


def _value_piece(arr: pa.Array, t: DataType, x: int, rows: np.ndarray | None) -> _Piece:
    """Value bytes (no tag) of the rows `rows` (None = all) of `arr`, inverted when x."""
    k = t.kind
    m = len(arr) if rows is None else len(rows)
    if k in FIXED_WIDTH:
        if m == 0:
            return _Fixed([], FIXED_WIDTH[k], 0)
        return _fixed(_fixed_words(arr, t, rows), x)
    if k in STRING_KINDS:
        data, offsets = _string_offsets(arr)
        starts = _select(offsets[:-1], rows)
        return _Escaped(data, starts, _select(offsets[1:], rows) - starts, x)
    if k is TypeKind.NUMERIC:
        return _numeric_piece(arr, rows, x)
    if k is TypeKind.STRUCT:
        tags = (COMPOSITE_TAGS[0] ^ x, COMPOSITE_TAGS[1] ^ x)
        return _seq(
            [_datum_piece(arr.field(i), f.data_type, tags, x, rows) for i, f in enumerate(t.fields)], m
        )
    if k is TypeKind.LIST:
        return _list_piece(arr, t, rows, x)
    raise AssertionError(f"unknown kind {k}")


def _datum_piece(
    arr: pa.Array, t: DataType, tags: tuple[int, int], x: int, rows: np.ndarray | None
) -> _Piece:
    """Tag + value of the rows `rows` of `arr`; tags = (non-null, NULL) as written."""
    valid = _validity(arr)
    if valid is not None:
        valid = _select(valid, rows)
        if valid.all():
            valid = None
    m = len(arr) if rows is None else len(rows)
    if valid is None:
        inner = _value_piece(arr, t, x, rows)
        tag = _Fixed([(0, "u1", np.full(m, tags[0], np.uint8))], 1, m)
        return _seq([tag, inner], m)
    tag_col = np.where(valid, tags[0], tags[1]).astype(np.uint8)
    inner_rows = np.flatnonzero(valid) if rows is None else rows[valid]
    return _Tagged(tag_col, valid, _value_piece(arr, t, x, inner_rows))


def encode_columns(
    columns: Sequence[pa.Array | pa.ChunkedArray],
    types: Sequence[DataType],
    orders: Sequence[OrderType],
    *,
    num_rows: int | None = None,
) -> Ragged:
    """The memcomparable key of every row of the columns (byte-identical to `encode_row`).

    An empty key (no columns, e.g. a singleton table's pk) gives `num_rows` empty keys.
    """
    if not len(columns) == len(types) == len(orders):
        raise InvalidInput(f"{len(columns)} columns for {len(types)} key types and {len(orders)} orders")
    if not columns:
        if num_rows is None:
            raise InvalidInput("encode_columns without key columns needs num_rows")
        return Ragged(np.zeros(num_rows + 1, np.int64), np.zeros(0, np.uint8))
    arrays = [_as_array(c, t) for c, t in zip(columns, types, strict=True)]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays) or num_rows not in (None, n):
        raise InvalidInput("key columns have different lengths")
    pieces = [
        _datum_piece(a, t, datum_tags(o), flip_mask(o), None)
        for a, t, o in zip(arrays, types, orders, strict=True)
    ]
    return _materialize(_seq(pieces, n), n)


def encode_columns_arrow(
    columns: Sequence[pa.Array | pa.ChunkedArray],
    types: Sequence[DataType],
    orders: Sequence[OrderType],
    *,
    num_rows: int | None = None,
) -> pa.BinaryArray:
    """`encode_columns` as an Arrow binary array."""
    return encode_columns(columns, types, orders, num_rows=num_rows).to_arrow()
