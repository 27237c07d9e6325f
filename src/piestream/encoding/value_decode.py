"""Vectorized value decoding: encoded rows -> Arrow columns (reference §2.1).

All rows are decoded together with a per-row cursor (an int64 numpy array of byte positions): for
each column the tag bytes of every row are read at once, then the payloads of the non-NULL rows,
and the cursors advance. Every read is bounds-checked against its row's end first, and every
payload is checked as strictly as `value_datum` checks it, so malformed bytes raise
`DataCorruption` instead of decoding to a wrong value. Fixed-width payloads are gathered through
an unaligned strided view of the data (one fancy index per column, no Python per row).

Python runs per value only where numpy cannot help: NUMERIC (96-bit mantissas) and the element
boundaries of LIST datums (each element's start depends on the previous element's length).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from piestream.common.errors import DataCorruption
from piestream.common.numeric import is_numeric_type
from piestream.common.scalar import Datum, constant_array, to_arrow
from piestream.common.types import NUMERIC_PRECISION, NUMERIC_SCALE, DataType, TypeKind
from piestream.encoding import numeric_value
from piestream.encoding.ragged import Ragged
from piestream.encoding.value_datum import (
    CE_DAYS_AT_UNIX_EPOCH,
    JSONB_VERSION,
    NANOS_PER_SEC,
    NANOS_PER_USEC,
    SECS_PER_DAY,
    list_count,
    skip_datum,
    unpack_numeric,
)

_USECS_PER_SEC = 1_000_000
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
#: Seconds whose microseconds may still fit an int64; at the two boundary seconds only part of
#: the microseconds do (the lowest / highest microsecond allowed there).
_TS_SECS_MIN, _TS_SECS_MAX = -(2**63) // _USECS_PER_SEC, (2**63 - 1) // _USECS_PER_SEC
_TS_MIN_USECS_AT_MIN = -(2**63) - _TS_SECS_MIN * _USECS_PER_SEC
_TS_MAX_USECS_AT_MAX = (2**63 - 1) - _TS_SECS_MAX * _USECS_PER_SEC
#: Microseconds whose nanoseconds fit Arrow's month_day_nano int64.
_IV_USECS_MAX = (2**63 - 1) // NANOS_PER_USEC
_PLAIN_DTYPES: dict[TypeKind, str] = {
    TypeKind.SMALLINT: "<i2",
    TypeKind.INT: "<i4",
    TypeKind.BIGINT: "<i8",
    TypeKind.SERIAL: "<i8",
    TypeKind.REAL: "<f4",
    TypeKind.DOUBLE: "<f8",
    TypeKind.TIMESTAMPTZ: "<i8",
}
_TIME = np.dtype([("secs", "<u4"), ("nanos", "<u4")])
_TIMESTAMP = np.dtype([("secs", "<i8"), ("nanos", "<u4")])
_INTERVAL = np.dtype([("months", "<i4"), ("days", "<i4"), ("usecs", "<i8")])
_MONTH_DAY_NANO = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])
_NO_OFFSETS = np.zeros(1, np.int64)


# =============================================================================================
# Public API
# =============================================================================================


def decode_values(
    values: pa.Array | pa.ChunkedArray | Ragged,
    types: Sequence[DataType],
    start: np.ndarray | int | None = None,
    *,
    required: int | None = None,
    missing: Sequence[Datum] = (),
) -> list[pa.Array]:
    """Decode every value (one whole row each, from byte `start` of the value, default 0) into
    one Arrow column per type, in each type's Arrow layout. Every value must be consumed exactly.

    With `required`, a value may end after that many datums: it was stored before the later
    columns were added (ALTER TABLE ADD COLUMN, no rewrite). Its absent datum `j` reads as
    ``missing[j - required]`` (the column's default, NULL if none): PostgreSQL's
    ``attmissingval``. Datums are self-delimiting, so a value's length says how many it holds."""
    rows = _as_ragged(values)
    data = np.ascontiguousarray(rows.data, dtype=np.uint8)
    pos = rows.offsets[:-1].astype(np.int64)  # a fresh array: the cursors advance in place
    end = rows.offsets[1:].astype(np.int64)
    if start is not None:
        skip = np.asarray(start, np.int64)
        if (skip < 0).any():
            raise ValueError("decode_values: start offsets must be >= 0")
        pos += skip
        if (pos > end).any():
            raise DataCorruption("value truncated: shorter than its prefix")
    columns = []
    for j, t in enumerate(types):
        if required is None or j < required:
            columns.append(_decode_column(data, pos, end, t))
            continue
        fill = missing[j - required] if j - required < len(missing) else None
        columns.append(_decode_optional(data, pos, end, t, fill))
    left = end - pos
    if left.any():
        i = int(np.flatnonzero(left)[0])
        raise DataCorruption(f"value {i}: {int(left[i])} trailing bytes after a row of {len(types)} columns")
    return columns


def _decode_optional(
    data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType, fill: Datum
) -> pa.Array:
    """A column the older values lack (their cursor is at their end): `fill` for those, the
    decoded datum for the others."""
    absent = pos >= end
    if not absent.any():
        return _decode_column(data, pos, end, t)
    if absent.all():
        return constant_array(fill, t, len(pos))
    filler = to_arrow([fill], t)
    rows = np.flatnonzero(~absent)
    sub = pos[rows]
    part = _decode_column(data, sub, end[rows], t)
    pos[rows] = sub
    index = np.full(len(pos), len(part), np.int64)  # absent rows take the filler
    index[rows] = np.arange(len(rows))
    return pa.concat_arrays([part, filler.cast(part.type)]).take(pa.array(index))


def _as_ragged(values: pa.Array | pa.ChunkedArray | Ragged) -> Ragged:
    if isinstance(values, Ragged):
        return values
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        raise DataCorruption("NULL where an encoded value was expected")
    return Ragged.from_arrow(values)


# =============================================================================================
# Cursor primitives
# =============================================================================================


def _need(pos: np.ndarray, end: np.ndarray, width: int | np.ndarray, t: DataType) -> None:
    """Every row must have `width` more bytes before its end."""
    if (pos + width > end).any():
        raise DataCorruption(f"value truncated inside a {t} datum")


def _read(data: np.ndarray, pos: np.ndarray, dtype: np.dtype | str) -> np.ndarray:
    """The `dtype` value starting at each position (positions already bounds-checked)."""
    d = np.dtype(dtype)
    if not len(pos):
        return np.zeros(0, d)
    # every byte offset viewed as the start of an (unaligned) item: one gather reads them all
    view = np.ndarray(shape=(len(data) - d.itemsize + 1,), dtype=d, buffer=data, strides=(1,))
    return view[pos]


def _fail_if(bad: np.ndarray, message: str) -> None:
    if bad.any():
        raise DataCorruption(message)


def _primitive(
    arrow_type: pa.DataType, values: np.ndarray | bytearray, length: int | None = None
) -> pa.Array:
    """A NULL-free Arrow array whose data buffer is `values` (one item per element by default)."""
    buf = pa.py_buffer(values if isinstance(values, bytearray) else np.ascontiguousarray(values))
    return pa.Array.from_buffers(arrow_type, len(values) if length is None else length, [None, buf])


# =============================================================================================
# Columns
# =============================================================================================


def _decode_column(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    """The datums of type `t` at every cursor; advances `pos` past them."""
    n = len(pos)
    if n == 0:
        return pa.nulls(0, t.arrow)
    _need(pos, end, 1, t)
    tags = data[pos]
    _fail_if(tags > 1, f"invalid null tag in a {t} datum")
    pos += 1
    payload = _PAYLOADS[t.kind]
    if tags.all():
        return payload(data, pos, end, t)
    valid = tags.view(np.bool_)
    rows = np.flatnonzero(valid)
    sub = pos[rows]
    arr = payload(data, sub, end[rows], t)
    pos[rows] = sub
    return _spread(arr, valid)


def _spread(arr: pa.Array, valid: np.ndarray) -> pa.Array:
    """The NULL-free `arr` placed at the `valid` rows of a longer array, NULL elsewhere."""
    at = arr.type
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    fixed = not pa.types.is_boolean(at) and (
        pa.types.is_integer(at)
        or pa.types.is_floating(at)
        or pa.types.is_temporal(at)
        or pa.types.is_decimal(at)
        or pa.types.is_interval(at)
    )
    if fixed and arr.offset == 0:
        width = at.bit_width // 8
        src = np.frombuffer(arr.buffers()[1], np.uint8, count=len(arr) * width).reshape(-1, width)
        full = np.zeros((len(valid), width), np.uint8)
        full[valid] = src
        return pa.Array.from_buffers(at, len(valid), [bitmap, pa.py_buffer(full)])
    index = pa.array(np.cumsum(valid) - 1, mask=~valid)
    return arr.take(index)


# =============================================================================================
# Payloads (rows all non-NULL), one function per family of kinds
# =============================================================================================

Payload = Callable[[np.ndarray, np.ndarray, np.ndarray, DataType], pa.Array]


def _plain(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    """Kinds whose payload is the Arrow value itself (raw little-endian ints / IEEE bits)."""
    dtype = np.dtype(_PLAIN_DTYPES[t.kind])
    _need(pos, end, dtype.itemsize, t)
    values = _read(data, pos, dtype)
    pos += dtype.itemsize
    return _primitive(t.arrow, values)


def _boolean(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    _need(pos, end, 1, t)
    b = data[pos]
    _fail_if(b > 1, "invalid boolean byte")
    pos += 1
    bits = pa.py_buffer(np.packbits(b, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(b), [None, bits])


def _date(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    _need(pos, end, 4, t)
    days = _read(data, pos, "<i4").astype(np.int64) - CE_DAYS_AT_UNIX_EPOCH
    pos += 4
    _fail_if(days < _I32_MIN, "date outside the range of Arrow date32")
    return _primitive(t.arrow, days.astype(np.int32))


def _check_nanos(nanos: np.ndarray) -> None:
    _fail_if((nanos >= NANOS_PER_SEC) | (nanos % NANOS_PER_USEC != 0), "invalid sub-second nanoseconds")


def _time(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    _need(pos, end, 8, t)
    rec = _read(data, pos, _TIME)
    pos += 8
    secs = rec["secs"].astype(np.int64)
    nanos = rec["nanos"].astype(np.int64)
    _fail_if(secs >= SECS_PER_DAY, "invalid time of day")
    _check_nanos(nanos)
    return _primitive(t.arrow, secs * _USECS_PER_SEC + nanos // NANOS_PER_USEC)


def _timestamp(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    _need(pos, end, 12, t)
    rec = _read(data, pos, _TIMESTAMP)
    pos += 12
    secs = rec["secs"]
    usecs = rec["nanos"].astype(np.int64) // NANOS_PER_USEC
    _check_nanos(rec["nanos"].astype(np.int64))
    out_of_range = (
        (secs < _TS_SECS_MIN)
        | (secs > _TS_SECS_MAX)
        | ((secs == _TS_SECS_MIN) & (usecs < _TS_MIN_USECS_AT_MIN))
        | ((secs == _TS_SECS_MAX) & (usecs > _TS_MAX_USECS_AT_MAX))
    )
    _fail_if(out_of_range, "timestamp outside the range of Arrow timestamp[us]")
    # at the lowest second the product wraps around int64 and the sum wraps back: still exact
    return _primitive(t.arrow, secs * _USECS_PER_SEC + usecs)


def _interval(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    _need(pos, end, 16, t)
    rec = _read(data, pos, _INTERVAL)
    pos += 16
    usecs = rec["usecs"]
    _fail_if((usecs > _IV_USECS_MAX) | (usecs < -_IV_USECS_MAX), "interval outside the range of Arrow")
    out = np.empty(len(rec), _MONTH_DAY_NANO)
    out["months"] = rec["months"]
    out["days"] = rec["days"]
    out["nanos"] = usecs * NANOS_PER_USEC
    return _primitive(t.arrow, out)


def _numeric(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    """NUMERIC -> decimal128(38, 10). One Python step per value: the 96-bit mantissa is scaled to
    10 fraction digits with big-integer arithmetic (rounding half away from zero, like
    `normalize_numeric`, when a stored value has more fraction digits than the column keeps)."""
    _need(pos, end, 16, t)
    if is_numeric_type(t.arrow):  # per-value scale (issue 14): kept as stored
        payloads = _read(data, pos, "V16").view(np.uint8).reshape(-1, 16)
        pos += 16
        col = numeric_value.from_value_payloads(payloads, None)
        if t.typmod is not None:  # numeric(p, s) written before display scales were kept: pad to s
            col = numeric_value.at_least_scale(col, t.typmod[1])
        return col
    raw = _read(data, pos, "V16").tobytes()
    pos += 16
    k = len(raw) // 16
    out = bytearray(16 * k)
    limit = 10**NUMERIC_PRECISION
    for i in range(k):
        parts = unpack_numeric(raw, 16 * i)
        if isinstance(parts, int):
            raise DataCorruption("numeric NaN / Infinity cannot be held in an Arrow decimal128 column")
        negative, mantissa, scale = parts
        if scale <= NUMERIC_SCALE:
            unscaled = mantissa * 10 ** (NUMERIC_SCALE - scale)
        else:
            unit = 10 ** (scale - NUMERIC_SCALE)
            unscaled, rest = divmod(mantissa, unit)
            if 2 * rest >= unit:
                unscaled += 1
        if unscaled >= limit:
            raise DataCorruption(f"numeric value does not fit Arrow {t.arrow}")
        out[16 * i : 16 * i + 16] = (-unscaled if negative else unscaled).to_bytes(16, "little", signed=True)
    return _primitive(t.arrow, out, k)


def _bytes(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    """VARCHAR / BYTEA / JSONB: u32 length, then the bytes (JSONB: a version byte first)."""
    _need(pos, end, 4, t)
    lengths = _read(data, pos, "<u4").astype(np.int64)
    pos += 4
    _need(pos, end, lengths, t)
    starts = pos.copy()
    pos += lengths
    if t.kind is TypeKind.JSONB:
        _fail_if(lengths < 1, "jsonb value without a version byte")
        _fail_if(data[starts] != JSONB_VERSION, "invalid jsonb version byte")
        starts += 1
        lengths -= 1
    arr = Ragged(_NO_OFFSETS, data).gather_by(starts, lengths).to_arrow()
    if t.kind is not TypeKind.BYTEA:
        arr = arr.view(pa.large_string() if pa.types.is_large_binary(arr.type) else pa.string())
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid as e:
            raise DataCorruption(f"invalid UTF-8 in a {t} value: {e}") from None
    return arr if arr.type == t.arrow else arr.cast(t.arrow)


def _struct(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    """The field datums follow each other: decode them column by column on the same cursors."""
    children = [_decode_column(data, pos, end, f.data_type) for f in t.fields]
    return pa.StructArray.from_arrays(children, fields=list(t.arrow))


def _list(data: np.ndarray, pos: np.ndarray, end: np.ndarray, t: DataType) -> pa.Array:
    """u32 count + element datums. The element boundaries are found by a Python scan (each
    element's start depends on the previous one's tag and length); the elements themselves are
    then decoded vectorized, each as a 'row' that must end exactly at the next boundary."""
    assert t.elem is not None
    elem = t.elem
    buf = memoryview(data.data)  # fast int indexing for the scan
    starts: list[int] = []
    ends: list[int] = []
    counts = np.empty(len(pos), np.int64)
    for i, (p, e) in enumerate(zip(pos.tolist(), end.tolist(), strict=True)):
        count = list_count(buf, p, e, t)
        counts[i] = count
        p += 4
        for _ in range(count):
            starts.append(p)
            p = skip_datum(buf, p, e, elem)
            ends.append(p)
        pos[i] = p
    elem_pos = np.array(starts, np.int64)
    elem_end = np.array(ends, np.int64)
    values = _decode_column(data, elem_pos, elem_end, elem)
    _fail_if(elem_pos != elem_end, f"malformed element in a {t} datum")
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=t.arrow)


_PAYLOADS: dict[TypeKind, Payload] = {
    **dict.fromkeys(_PLAIN_DTYPES, _plain),
    TypeKind.BOOLEAN: _boolean,
    TypeKind.DATE: _date,
    TypeKind.TIME: _time,
    TypeKind.TIMESTAMP: _timestamp,
    TypeKind.INTERVAL: _interval,
    TypeKind.NUMERIC: _numeric,
    TypeKind.VARCHAR: _bytes,
    TypeKind.BYTEA: _bytes,
    TypeKind.JSONB: _bytes,
    TypeKind.STRUCT: _struct,
    TypeKind.LIST: _list,
}
