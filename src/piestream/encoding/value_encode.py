"""Vectorized value encoding: Arrow columns -> one encoded row per index (reference §2.1).

This is the hot path: every row a state table writes, and every distribution key hashed to a vnode,
goes through it. Each column adds byte *segments* to a `_RowBuilder`: fixed-width segments (a tag
byte, a little-endian payload) and variable-length ones (string bytes, encoded list elements),
each present only in the rows of a mask (a NULL datum is its tag byte alone; fields of a NULL
struct are absent). Consecutive fixed segments are laid out as one (rows x width) numpy matrix;
when variable segments exist, Arrow's `binary_join_element_wise` kernel concatenates the parts
row by row. No Python code runs per row except for NUMERIC (96-bit mantissa arithmetic).

The bytes equal `value_datum.encode_datum` of every value (tests check this with hypothesis).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import DatetimeOutOfRange, InvalidInput, NumericOutOfRange
from piestream.common.numeric import is_numeric_array
from piestream.common.types import DataType, TypeKind
from piestream.encoding import numeric_value
from piestream.encoding.ragged import Ragged
from piestream.encoding.value_datum import (
    CE_DAYS_AT_UNIX_EPOCH,
    JSONB_VERSION,
    NANOS_PER_USEC,
    NUMERIC_MAX_SCALE,
    SECS_PER_DAY,
    pack_unscaled,
)

_USECS_PER_SEC = 1_000_000
_I32_MAX = 2**31 - 1
_SMALL_BINARY_LIMIT = 2**31 - 1  # beyond this many bytes the join needs large_binary
#: Little-endian payload dtypes of the kinds whose Arrow buffer is already the payload.
_PLAIN_DTYPES: dict[TypeKind, str] = {
    TypeKind.SMALLINT: "<i2",
    TypeKind.INT: "<i4",
    TypeKind.BIGINT: "<i8",
    TypeKind.SERIAL: "<i8",
    TypeKind.REAL: "<u4",  # raw IEEE bits: NaN payloads and -0.0 are kept
    TypeKind.DOUBLE: "<u8",
    TypeKind.TIMESTAMPTZ: "<i8",
}
_MONTH_DAY_NANO = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


# =============================================================================================
# Public API
# =============================================================================================


def encode_columns(columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[DataType]) -> Ragged:
    """The value-encoded row of every index of the columns."""
    out = _encode(columns, types)
    return out if isinstance(out, Ragged) else Ragged.from_arrow(out)


def encode_columns_arrow(
    columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[DataType]
) -> pa.BinaryArray:
    """`encode_columns` as an Arrow binary array (large_binary beyond 2 GiB)."""
    out = _encode(columns, types)
    return out.to_arrow() if isinstance(out, Ragged) else out


def _encode(columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[DataType]) -> Ragged | pa.Array:
    if len(columns) != len(types):
        raise InvalidInput(f"{len(columns)} columns for {len(types)} types")
    if not columns:
        raise InvalidInput("encoding rows needs at least one column (the row count is unknown)")
    cols = [_coerce(c, t) for c, t in zip(columns, types, strict=True)]
    n = len(cols[0])
    if any(len(c) != n for c in cols):
        raise InvalidInput(f"columns of different lengths: {[len(c) for c in cols]}")
    builder = _RowBuilder(n)
    for c, t in zip(cols, types, strict=True):
        _append_column(builder, c, t, None)
    return builder.finish()


# =============================================================================================
# Row layout: segments -> rows
# =============================================================================================


@dataclass(frozen=True)
class _Fixed:
    """`width` bytes per row: `src` is an (n,) array of itemsize `width`, an (n, width) uint8
    matrix, or one constant byte. Present only in the rows of `mask` (None: all rows)."""

    src: np.ndarray | int
    width: int
    mask: np.ndarray | None


@dataclass(frozen=True)
class _Var:
    """Variable-length bytes per row (binary Arrow array or Ragged), present in the rows of `mask`."""

    data: pa.Array | Ragged
    mask: np.ndarray | None

    @property
    def nbytes(self) -> int:
        if isinstance(self.data, Ragged):
            return int(self.data.offsets[-1] - self.data.offsets[0])
        offs = _offsets(self.data)
        return int(offs[-1] - offs[0])

    def to_arrow(self, large: bool) -> pa.Array:
        if isinstance(self.data, Ragged):
            arr = self.data.to_arrow(large=large)
        else:
            arr = self.data.cast(pa.large_binary() if large else pa.binary())
        return _with_validity(arr, self.mask)


class _RowBuilder:
    """Collects the segments of every row, column by column, then lays the rows out."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.segments: list[_Fixed | _Var] = []

    def fixed(self, src: np.ndarray | int, width: int, mask: np.ndarray | None) -> None:
        self.segments.append(_Fixed(src, width, mask))

    def var(self, data: pa.Array | Ragged, mask: np.ndarray | None) -> None:
        self.segments.append(_Var(data, mask))

    def finish(self) -> Ragged | pa.Array:
        """The rows: a Ragged when every segment is fixed-width, else an Arrow binary array."""
        parts: list[Ragged | _Var] = []
        run: list[_Fixed] = []
        for seg in self.segments:
            if isinstance(seg, _Fixed):
                run.append(seg)
                continue
            if run:
                parts.append(_lay_out_fixed(run, self.n))
                run = []
            parts.append(seg)
        if run:
            parts.append(_lay_out_fixed(run, self.n))
        if len(parts) == 1 and isinstance(parts[0], Ragged):
            return parts[0]
        total = sum(int(p.offsets[-1] - p.offsets[0]) if isinstance(p, Ragged) else p.nbytes for p in parts)
        large = total >= _SMALL_BINARY_LIMIT
        arrays = [p.to_arrow(large=large) for p in parts]
        sep = pa.scalar(b"", pa.large_binary() if large else pa.binary())
        # The C++ kernel concatenates row-wise; masked-out (null) parts are skipped.
        return pc.binary_join_element_wise(*arrays, sep, null_handling="skip")


def _lay_out_fixed(run: Sequence[_Fixed], n: int) -> Ragged:
    """Consecutive fixed segments as one matrix; bytes of absent segments are then dropped."""
    width = sum(s.width for s in run)
    out = np.empty((n, width), np.uint8)
    keep: np.ndarray | None = None
    lengths = np.zeros(n, np.int64)
    a = 0
    for s in run:
        b = a + s.width
        if isinstance(s.src, int):
            out[:, a:b] = s.src
        else:
            out[:, a:b] = np.ascontiguousarray(s.src).view(np.uint8).reshape(n, s.width)
        if s.mask is None:
            lengths += s.width
        else:
            if keep is None:
                keep = np.ones((n, width), np.bool_)
            keep[:, a:b] = s.mask[:, None]
            lengths += s.mask * s.width
        a = b
    if keep is None:
        return Ragged.fixed(out)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Ragged(offsets, out[keep])


def _with_validity(arr: pa.Array, mask: np.ndarray | None) -> pa.Array:
    """`arr` with its validity replaced by `mask` (the rows holding the part)."""
    if mask is None:
        return arr
    bits = np.concatenate([np.zeros(arr.offset, np.bool_), mask]) if arr.offset else mask
    bitmap = pa.py_buffer(np.packbits(bits, bitorder="little"))
    bufs = arr.buffers()
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap, bufs[1], bufs[2]], offset=arr.offset)


# =============================================================================================
# Reading Arrow buffers as numpy
# =============================================================================================


def _coerce(col: pa.Array | pa.ChunkedArray, t: DataType) -> pa.Array:
    """`col` as a single array whose layout the encoders read (cast when it is another type)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    at = col.type
    kind = t.kind
    text = pa.types.is_string(at) or pa.types.is_large_string(at)
    if kind in (TypeKind.VARCHAR, TypeKind.JSONB) and text:
        return col
    if kind is TypeKind.BYTEA and (pa.types.is_binary(at) or pa.types.is_large_binary(at)):
        return col
    if kind is TypeKind.NUMERIC and (pa.types.is_decimal128(at) or is_numeric_array(col)):
        return col
    if at == t.arrow:
        return col
    try:
        return col.cast(t.arrow)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        if any(word in str(e) for word in ("overflow", "out of bounds", "not in range")):
            raise NumericOutOfRange(f"{t} out of range: {e}") from e
        raise InvalidInput(f"cannot encode an Arrow {at} column as {t}: {e}") from e


def _validity(col: pa.Array) -> np.ndarray | None:
    """The rows that are not NULL (None when there are no NULLs)."""
    if col.null_count == 0:
        return None
    buf = col.buffers()[0]
    if buf is None:
        return np.asarray(col.is_valid())
    bits = np.frombuffer(buf, np.uint8)
    return np.unpackbits(bits, count=col.offset + len(col), bitorder="little")[col.offset :].view(np.bool_)


def _values(col: pa.Array, dtype: str | np.dtype) -> np.ndarray:
    """The data buffer of a fixed-width column as numpy (NULL slots hold arbitrary values)."""
    d = np.dtype(dtype)
    buf = col.buffers()[1]
    if buf is None:
        return np.zeros(len(col), d)
    return np.frombuffer(buf, d, count=col.offset + len(col))[col.offset :]


def _bools(col: pa.Array) -> np.ndarray:
    """A BOOLEAN column's bit-packed values as 0/1 bytes."""
    buf = col.buffers()[1]
    if buf is None:
        return np.zeros(len(col), np.uint8)
    bits = np.frombuffer(buf, np.uint8)
    return np.unpackbits(bits, count=col.offset + len(col), bitorder="little")[col.offset :]


def _offsets(col: pa.Array) -> np.ndarray:
    """The n + 1 offsets of a string, binary or list column (int64)."""
    at = col.type
    buf = col.buffers()[1]
    if buf is None:
        return np.zeros(len(col) + 1, np.int64)
    large = pa.types.is_large_string(at) or pa.types.is_large_binary(at) or pa.types.is_large_list(at)
    raw = np.frombuffer(buf, np.int64 if large else np.int32, count=col.offset + len(col) + 1)
    return raw[col.offset :].astype(np.int64)


def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def _check(ok: np.ndarray, present: np.ndarray | None, err: Exception) -> None:
    """Raise `err` if a present row fails `ok` (NULL slots may hold anything)."""
    bad = ~ok if present is None else present & ~ok
    if bad.any():
        raise err


# =============================================================================================
# Columns -> segments, one function per family of kinds
# =============================================================================================


def _append_column(b: _RowBuilder, col: pa.Array, t: DataType, parent: np.ndarray | None) -> None:
    """The tag byte and payload of every datum of `col`, in the rows of `parent` (None: all)."""
    valid = _validity(col)
    b.fixed(1 if valid is None else valid.view(np.uint8), 1, parent)
    present = _and(parent, valid)
    kind = t.kind
    plain = _PLAIN_DTYPES.get(kind)
    if plain is not None:
        b.fixed(_values(col, plain), np.dtype(plain).itemsize, present)
    elif kind is TypeKind.BOOLEAN:
        b.fixed(_bools(col), 1, present)
    elif kind is TypeKind.DATE:
        days = _values(col, "<i4").astype(np.int64) + CE_DAYS_AT_UNIX_EPOCH
        _check(days <= _I32_MAX, present, DatetimeOutOfRange("date out of range"))
        b.fixed(days.astype("<i4"), 4, present)
    elif kind is TypeKind.TIME:
        usecs = _values(col, "<i8")
        ok = (usecs >= 0) & (usecs < SECS_PER_DAY * _USECS_PER_SEC)
        _check(ok, present, DatetimeOutOfRange("time out of range"))
        secs, frac = np.divmod(usecs, _USECS_PER_SEC)
        b.fixed(secs.astype("<u4"), 4, present)
        b.fixed((frac * NANOS_PER_USEC).astype("<u4"), 4, present)
    elif kind is TypeKind.TIMESTAMP:
        secs, frac = np.divmod(_values(col, "<i8"), _USECS_PER_SEC)  # floor: frac >= 0
        b.fixed(secs.astype("<i8"), 8, present)
        b.fixed((frac * NANOS_PER_USEC).astype("<u4"), 4, present)
    elif kind is TypeKind.INTERVAL:
        mdn = _values(col, _MONTH_DAY_NANO).copy()
        mdn["nanos"] //= NANOS_PER_USEC  # floor, like scalar.from_arrow
        b.fixed(mdn, 16, present)
    elif kind is TypeKind.NUMERIC and is_numeric_array(col):  # per-value scale (issue 14)
        b.fixed(numeric_value.value_payloads(col), 16, present)
    elif kind is TypeKind.NUMERIC:
        b.fixed(_numeric_payloads(col, present), 16, present)
    elif kind in (TypeKind.VARCHAR, TypeKind.BYTEA, TypeKind.JSONB):
        _append_bytes(b, col, t, present)
    elif kind is TypeKind.STRUCT:
        for i in range(len(t.fields)):
            _append_column(b, col.field(i), t.fields[i].data_type, present)
    elif kind is TypeKind.LIST:
        _append_list(b, col, t, present)
    else:  # pragma: no cover - every TypeKind is handled above
        raise InvalidInput(f"cannot value-encode type {t}")


def _numeric_payloads(col: pa.Array, present: np.ndarray | None) -> np.ndarray:
    """(n, 16) payloads of a decimal128 column. Values whose unscaled integer fits 63 bits (a
    sum of BIGINTs, most money columns) are normalized as vectors; the rest take one Python
    step per row: normalizing a 128-bit value needs big-integer division, which numpy lacks."""
    n = len(col)
    scale = col.type.scale
    words = _values(col, "V16").view("<i8").reshape(n, 2)
    low, high = words[:, 0], words[:, 1]
    small = (high == (low >> 63)) & (low != np.iinfo(np.int64).min)
    if present is not None:
        small |= ~present
    out = np.zeros((n, 4), "<u4")
    if scale >= 0:
        neg = low < 0
        mant = np.abs(np.where(small, low, 0)).astype(np.uint64)
        sc = np.full(n, scale, np.uint32)
        for _ in range(scale):  # strip trailing zeros (canonical form), one digit per pass
            strip = (sc > 0) & (mant % 10 == 0) & (mant != 0)
            if not strip.any():
                break
            mant = np.where(strip, mant // 10, mant)
            sc -= strip.astype(np.uint32)
        nonzero = mant != 0
        bad = nonzero & (sc > NUMERIC_MAX_SCALE)  # refused by the per-row path, with its error
        small &= ~(bad if present is None else bad & present)
        out[:, 0] = np.where(nonzero, (sc << 16) | np.where(neg, 0x8000_0000, 0).astype(np.uint32), 0)
        out[:, 1] = (mant & 0xFFFF_FFFF).astype(np.uint32)
        out[:, 2] = (mant >> 32).astype(np.uint32)
    else:
        small[:] = False if present is None else ~present
    payload = out.view(np.uint8).reshape(n, 16)
    rows = np.flatnonzero(~small).tolist()
    if rows:
        raw = _values(col, "V16").tobytes()
        for i in rows:  # per row only for values beyond 63 bits (see above)
            unscaled = int.from_bytes(raw[16 * i : 16 * i + 16], "little", signed=True)
            payload[i] = np.frombuffer(pack_unscaled(unscaled, scale), np.uint8)
    return payload


def _append_bytes(b: _RowBuilder, col: pa.Array, t: DataType, present: np.ndarray | None) -> None:
    """VARCHAR / BYTEA: u32 length + bytes; JSONB: u32 length + version byte + JSON text."""
    lengths = np.diff(_offsets(col))
    jsonb = t.kind is TypeKind.JSONB
    if jsonb:
        lengths += 1
    _check(lengths <= 0xFFFF_FFFF, present, InvalidInput(f"{t} value exceeds the 4 GiB length prefix"))
    b.fixed(lengths.astype("<u4"), 4, present)
    if jsonb:
        b.fixed(JSONB_VERSION, 1, present)
    large = pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type)
    b.var(col.view(pa.large_binary() if large else pa.binary()), present)


def _append_list(b: _RowBuilder, col: pa.Array, t: DataType, present: np.ndarray | None) -> None:
    """u32 element count, then the element datums: every child value is encoded once (one
    'row' each), and list i is the contiguous run of encoded elements its offsets delimit."""
    assert t.elem is not None
    offsets = _offsets(col)
    base = int(offsets[0])
    child = col.values.slice(base, int(offsets[-1]) - base)
    if len(child):
        elems = encode_columns([child], [t.elem])
    else:
        elems = Ragged(np.zeros(1, np.int64), np.zeros(0, np.uint8))
    b.fixed(np.diff(offsets).astype("<u4"), 4, present)
    b.var(Ragged(elems.offsets[offsets - base], elems.data), present)
