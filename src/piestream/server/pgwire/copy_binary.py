"""PostgreSQL's binary COPY format, a whole Arrow table at a time.

The format (PostgreSQL's copyto.c / copyfrom.c): an 11-byte signature, int32 flags, int32 header
extension length (+ the extension); per tuple an int16 field count and per field an int32 length
(-1 for NULL) followed by the type's binary send form; an int16 -1 trailer.

Encoding is columnar: each column becomes an Arrow binary array of its fields (length prefix +
big-endian value) built with numpy for the fixed-width types and Arrow kernels for strings; the
columns are then joined row-wise by one Arrow kernel, with each row's CopyData message header
already in front, so each batch of rows of a COPY TO is one buffer of complete CopyData messages
(one per row, as PostgreSQL sends and as psycopg parses), streamed batch by batch. Decoding finds
where each field starts with numpy over the whole stream (`_row_layout`: every position holding
the field count is parsed as a tuple at once, then the chain of tuples from the first is kept),
then converts every column with numpy; a stream whose tuples all have the same layout
(fixed-width columns without NULLs) is a matrix. Only malformed data is walked tuple by tuple,
to say what is wrong with it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.scalar import from_arrow, to_arrow
from piestream.common.types import DataType, TypeKind
from piestream.server.pgwire import codec

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = SIGNATURE + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"
_NULL_FIELD = b"\xff\xff\xff\xff"
#: Rows encoded at a time by a streamed COPY TO: a few MB of messages per batch, few enough
#: batches that numpy's per-call overhead does not show.
STREAM_BATCH_ROWS = 1 << 16

#: microseconds / days between the Unix epoch and PostgreSQL's (2000-01-01)
_EPOCH_USECS = 946_684_800_000_000
_EPOCH_DAYS = 10_957

#: The big-endian wire dtype of each fixed-width kind.
_FIXED: dict[TypeKind, str] = {
    TypeKind.BOOLEAN: "u1",
    TypeKind.SMALLINT: ">i2",
    TypeKind.INT: ">i4",
    TypeKind.BIGINT: ">i8",
    TypeKind.SERIAL: ">i8",
    TypeKind.REAL: ">f4",
    TypeKind.DOUBLE: ">f8",
    TypeKind.DATE: ">i4",
    TypeKind.TIME: ">i8",
    TypeKind.TIMESTAMP: ">i8",
    TypeKind.TIMESTAMPTZ: ">i8",
}
_VARLEN = (TypeKind.VARCHAR, TypeKind.BYTEA, TypeKind.JSONB)
#: Field widths of the fixed-width kinds (a field is that long or NULL).
_FIELD_WIDTH = {k: np.dtype(d).itemsize for k, d in _FIXED.items()} | {TypeKind.INTERVAL: 16}
#: Rounds of peeling false tuple starts before `_row_layout` gives up (see there).
_PEEL_ROUNDS = 16
#: Arrow's month_day_nano layout and PostgreSQL's interval_send (usecs, days, months).
_MDN = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])
_PG_INTERVAL = np.dtype([("usecs", ">i8"), ("days", ">i4"), ("months", ">i4")])


class BadCopyBinary(PiestreamError):
    sqlstate = "22P04"


def check_types(types: Sequence[DataType]) -> None:
    for t in types:
        if not codec.supports_binary(t):
            raise FeatureNotSupported(f"binary COPY of type {t} is not supported; use text or csv")


# -- COPY TO --------------------------------------------------------------------------------------


def encode_messages(table: pa.Table, types: Sequence[DataType]) -> bytes:
    """`encode_parts` in one buffer."""
    return b"".join(encode_parts(table, types))


def encode_parts(table: pa.Table, types: Sequence[DataType]) -> list[memoryview]:
    """`encode_stream` of the whole table as one batch."""
    return list(encode_stream(table, types, batch_rows=max(table.num_rows, 1)))


def encode_stream(
    table: pa.Table, types: Sequence[DataType], batch_rows: int | None = None
) -> Iterator[memoryview]:
    """The binary COPY of `table` as CopyData messages ('d' + int32 length + payload), encoded
    `batch_rows` rows at a time as the consumer asks for them, so a large COPY TO is written to
    the socket while the rest is still being encoded and never exists whole in memory. The header
    goes with the first row and the trailer in a message of its own, as PostgreSQL sends them
    (with no rows, header and trailer share one message); the bytes are the same whatever the
    batch size (`STREAM_BATCH_ROWS` by default). The types are checked before the first buffer
    is asked for."""
    check_types(types)
    return _stream(table, types, table.num_rows, batch_rows or STREAM_BATCH_ROWS)


def _stream(table: pa.Table, types: Sequence[DataType], n: int, batch_rows: int) -> Iterator[memoryview]:
    if n == 0:
        yield memoryview(_frame(HEADER + TRAILER))
        return
    for lo in range(0, n, batch_rows):
        body = _encode_rows(table.slice(lo, min(batch_rows, n - lo)), types, header=lo == 0)
        if lo == 0:  # row 0's frame, the file header, then the rest of row 0 and every later row
            yield body[:5]
            yield memoryview(HEADER)
            yield body[5:]
        else:
            yield body
    yield memoryview(_frame(TRAILER))


def _encode_rows(table: pa.Table, types: Sequence[DataType], *, header: bool) -> memoryview:
    """One CopyData message per row of `table` (not empty), in one buffer; with `header`, the
    first row's frame length also counts the file header sent after that frame.

    Each row is the same sequence of pieces: fixed-width ones (the frame, the field count, the
    fields of fixed-width columns without NULLs, every length prefix) and variable ones (string
    values, fields of columns with NULLs). Each run of fixed pieces is one numpy record array
    (a field per piece, packed: its bytes are the rows' bytes), so the rows are joined by one
    Arrow kernel over a few arrays; a table of fixed pieces only is that record array."""
    n = table.num_rows
    pieces: list[np.ndarray | pa.Array] = [
        np.array(b"d", "S1"),
        np.zeros(n, ">i4"),
        np.array(len(types), ">i2"),
    ]
    for i, t in enumerate(types):
        pieces.extend(_pieces(table.column(i).combine_chunks(), t))
    lengths = np.full(n, 4, np.int64)  # the frame's int32 counts itself, then the field count ...
    for p in pieces[2:]:
        if isinstance(p, np.ndarray):
            lengths += p.dtype.itemsize
        else:
            lengths += np.diff(np.frombuffer(p.buffers()[1], np.int64, n + 1, p.offset * 8))
    if header:
        lengths[0] += len(HEADER)
    pieces[1] = lengths.astype(">i4")
    segments = _join_fixed(pieces, n)
    if len(segments) == 1:
        fixed = segments[0]
        assert isinstance(fixed, np.ndarray)
        return memoryview(fixed.view(np.uint8).data)
    arrays = [
        _fixed_binary(s.view(np.uint8), s.dtype.itemsize, n) if isinstance(s, np.ndarray) else s
        for s in segments
    ]
    return _values_buffer(pc.binary_join_element_wise(*arrays, pa.scalar(b"", pa.large_binary())))


def _pieces(arr: pa.Array, t: DataType) -> list[np.ndarray | pa.Array]:
    """One column's field in every row, as pieces: a numpy array in the wire dtype for
    fixed-width bytes (a 0-d one: the same in every row), a large_binary array without NULLs
    for variable ones."""
    valid = _valid(arr)
    if (t.kind in _FIXED and t.display_scale is None) or t.kind is TypeKind.INTERVAL:
        values = _interval_values(arr) if t.kind is TypeKind.INTERVAL else _wire_values(arr, t)
        if valid is not None:
            return [_fixed_cells(values, valid)]
        return [np.array(values.dtype.itemsize, ">i4"), values]
    if t.kind in _VARLEN:
        jsonb = t.kind is TypeKind.JSONB
        lengths = pc.binary_length(arr).fill_null(0).to_numpy().astype(np.int64)
        if jsonb:
            lengths += 1  # jsonb_send's version byte
        if valid is not None:
            lengths[~valid] = -1
        out: list[np.ndarray | pa.Array] = [lengths.astype(">i4")]
        if jsonb:
            out.append(np.array(1, np.uint8) if valid is None else _version_bytes(valid))
        values = arr.cast(pa.large_binary())
        out.append(values.fill_null(b"") if valid is not None else values)
        return out
    return [_per_value_cells(arr, t)]


def _version_bytes(valid: np.ndarray) -> pa.Array:
    """jsonb's version byte: one byte for each value, none for a NULL."""
    offsets = np.zeros(len(valid) + 1, np.int64)
    np.cumsum(valid, out=offsets[1:])
    data = np.ones(int(offsets[-1]), np.uint8)
    return pa.Array.from_buffers(
        pa.large_binary(), len(valid), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _join_fixed(pieces: list[np.ndarray | pa.Array], n: int) -> list[np.ndarray | pa.Array]:
    """Each run of consecutive fixed pieces laid out as one packed record array of n rows."""
    out: list[np.ndarray | pa.Array] = []
    run: list[np.ndarray] = []

    def close() -> None:
        if not run:
            return
        names = [f"f{k}" for k in range(len(run))]
        rec = np.empty(n, np.dtype([(name, p.dtype) for name, p in zip(names, run, strict=True)]))
        for name, p in zip(names, run, strict=True):
            rec[name] = p  # a 0-d piece (a constant) broadcasts; values convert to the field's dtype
        out.append(rec)
        run.clear()

    for p in pieces:
        if isinstance(p, np.ndarray):
            run.append(p)
        else:
            close()
            out.append(p)
    close()
    return out


def _frame(payload: bytes) -> bytes:
    return b"d" + struct.pack(">i", len(payload) + 4) + payload


def _values_buffer(arr: pa.Array) -> memoryview:
    """The concatenated values of a large_binary array without NULLs (not copied)."""
    offsets = np.frombuffer(arr.buffers()[1], np.int64, len(arr) + 1, arr.offset * 8)
    return memoryview(arr.buffers()[2])[offsets[0] : offsets[-1]]


def _fixed_binary(flat: np.ndarray, width: int, n: int) -> pa.Array:
    offsets = np.arange(n + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(flat)])


def _valid(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)


def _wire_values(arr: pa.Array, t: DataType) -> np.ndarray:
    """The column's values as its big-endian wire dtype (NULL slots hold anything)."""
    k = t.kind
    if k is TypeKind.BOOLEAN:
        return np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.uint8)
    if k is TypeKind.DATE:
        days = _filled(arr.cast(pa.int32()), 0)
        return (days - _EPOCH_DAYS).astype(">i4")
    if k in (TypeKind.TIME, TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ):
        us = _filled(arr.cast(pa.int64()), 0)
        return (us if k is TypeKind.TIME else us - _EPOCH_USECS).astype(">i8")
    return _filled(arr, 0).astype(_FIXED[k])


def _filled(arr: pa.Array, zero: Any) -> np.ndarray:
    """The values as numpy, NULL slots as `zero` (no copy by Arrow when there is no NULL)."""
    return (arr.fill_null(zero) if arr.null_count else arr).to_numpy()


def _interval_values(arr: pa.Array) -> np.ndarray:
    raw = np.frombuffer(arr.buffers()[1], _MDN, len(arr), arr.offset)
    out = np.empty(len(arr), _PG_INTERVAL)
    out["usecs"] = raw["nanos"] // 1000
    out["days"] = raw["days"]
    out["months"] = raw["months"]
    return out


def _fixed_cells(values: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    n = len(values)
    w = values.dtype.itemsize
    mat = np.empty((n, 4 + w), np.uint8)
    mat[:, :4] = np.frombuffer(struct.pack(">i", w), np.uint8)
    mat[:, 4:] = np.ascontiguousarray(values).view(np.uint8).reshape(n, w)
    if valid is None:
        return _fixed_binary(mat.reshape(-1), 4 + w, n)
    mat[~valid, :4] = 0xFF
    keep = np.ones((n, 4 + w), np.bool_)
    keep[~valid, 4:] = False
    lengths = np.where(valid, 4 + w, 4).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = mat[keep]
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _per_value_cells(arr: pa.Array, t: DataType) -> pa.Array:
    """NUMERIC (base-10000 digit groups at each value's own display scale) and arrays (a nested
    header and elements) have a variable-length send form built value by value by `codec`."""
    out = []
    for v in from_arrow(arr, t):  # per value: see the docstring
        if v is None:
            out.append(_NULL_FIELD)
        else:
            b = codec.encode_binary(v, t)
            out.append(struct.pack(">i", len(b)) + b)
    return pa.array(out, pa.large_binary())


# -- COPY FROM ------------------------------------------------------------------------------------


def decode(data: bytes, types: Sequence[DataType]) -> list[pa.Array]:
    """The columns of a binary COPY stream (the whole of it, header to trailer)."""
    check_types(types)
    buf = memoryview(data)
    if len(data) < 19 or data[:11] != SIGNATURE:
        raise BadCopyBinary("COPY file signature not recognized")
    (flags, ext) = struct.unpack_from(">iI", data, 11)
    if flags & (1 << 16):
        raise FeatureNotSupported("binary COPY with OIDs is not supported")
    if flags & ~0xFFFF & ~(1 << 16):
        raise BadCopyBinary("unrecognized critical flags in COPY file header")
    pos = 19 + ext
    if pos > len(data):
        raise BadCopyBinary("invalid COPY file header (missing extension)")
    starts, lengths = _layout(buf, pos, len(data), types)
    arr = np.frombuffer(data, np.uint8)
    return [_column(data, arr, starts[k], lengths[k], t) for k, t in enumerate(types)]


#: Where the fields of each column start and how long they are (-1: NULL), column by column.
Layout = tuple[list[np.ndarray], list[np.ndarray]]


def _layout(buf: memoryview, pos: int, end: int, types: Sequence[DataType]) -> Layout:
    """(starts, lengths) of every field, one array per column; length -1 is NULL.

    The trailer (int16 -1) is optional, as in PostgreSQL (ADBC sends none): two 0xFF bytes at the
    end are the trailer only if the tuples end there, since a NULL last field ends in them too."""
    ncols = len(types)
    if pos == end or (end - pos == 2 and buf[pos:end] == TRAILER):
        none = [np.empty(0, np.int64)] * ncols
        return none, none
    for body_end in (end - 2, end) if buf[end - 2 : end] == TRAILER else (end,):
        uniform = _uniform_layout(buf, pos, body_end, ncols)
        if uniform is not None:
            return uniform
    if ncols:
        arr = np.frombuffer(buf, np.uint8, end)
        found = _row_layout(arr, pos, end, [_FIELD_WIDTH.get(t.kind) for t in types])
        if found is not None:
            return found
    return _walk_layout(buf, pos, end, ncols)


def _at(arr: np.ndarray, at: np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    """The `dtype` value at each byte position `at` (unaligned reads through a 1-byte stride)."""
    dt = np.dtype(dtype)
    return np.ndarray((len(arr) - dt.itemsize + 1,), dt, arr, 0, (1,))[at]


#: the most the vectorized layout may allocate per byte of COPY data before it walks instead
_LAYOUT_BYTES_PER_BYTE = 8


def _field_step(
    arr: np.ndarray, at: np.ndarray, end: int, width: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For fields whose length word is at `at`: (length, where the next field begins, whether
    the field is well-formed: in bounds, and -1 or `width` long when the type has one)."""
    inside = at + 4 <= end
    ln = _at(arr, np.where(inside, at, 0), ">i4").astype(np.int64)
    ok = inside & (ln >= -1)
    if width is not None:
        ok &= (ln == -1) | (ln == width)
    nxt = at + 4 + np.maximum(ln, 0)
    return ln, nxt, ok & (nxt <= end)


def _row_layout(arr: np.ndarray, pos: int, end: int, widths: list[int | None]) -> Layout | None:
    """(starts, lengths) of every field, found without a walk: every position holding the field
    count is a candidate tuple start, each candidate is parsed as a tuple (all candidates at once),
    and the tuples are the chain of candidates from `pos` to the end. Candidates inside a tuple's
    data that parse too are removed by peeling: a tuple start other than the first is the end of
    another tuple. None when the chain is not found in a few rounds (malformed data, or data
    holding tuples itself)."""
    cand = _find_int16(arr, pos, end, len(widths))
    # each candidate costs (2 per column + 3) int64s: real tuples need at most ~5x the stream's
    # bytes; data crafted to hold the field count everywhere would need far more, so it is walked
    if len(cand) * (2 * len(widths) + 3) * 8 > _LAYOUT_BYTES_PER_BYTE * (end - pos) + (1 << 20):
        return None
    field_at = cand + 2
    starts: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    for width in widths:  # per column, over every candidate at once
        ln, nxt, ok = _field_step(arr, field_at, end, width)
        if not ok.all():
            cand, nxt, ln, field_at = cand[ok], nxt[ok], ln[ok], field_at[ok]
            starts = [x[ok] for x in starts]
            lengths = [x[ok] for x in lengths]
        starts.append(field_at + 4)
        lengths.append(ln)
        field_at = nxt
    if not len(cand) or cand[0] != pos:
        return None
    trailer = end - 2 if arr[end - 2] == 0xFF and arr[end - 1] == 0xFF else -1
    keep = np.ones(len(cand), np.bool_)
    for _ in range(_PEEL_ROUNDS):
        pointed = np.zeros(end + 1, np.bool_)
        pointed[field_at[keep]] = True
        pointed[pos] = True
        again = keep & pointed[cand]
        if (again == keep).all():
            break
        keep = again
    else:
        return None
    if not keep.all():
        cand, field_at = cand[keep], field_at[keep]
        starts = [x[keep] for x in starts]
        lengths = [x[keep] for x in lengths]
    last = field_at[-1]
    if (field_at[:-1] != cand[1:]).any() or last not in (end, trailer):
        return None
    return starts, lengths


def _find_int16(arr: np.ndarray, pos: int, end: int, value: int) -> np.ndarray:
    """The positions in [pos, end - 1) holding `value` as a big-endian int16, ascending."""
    found = []
    for start in (pos, pos + 1):  # the even and the odd positions, as two aligned int16 views
        words = np.frombuffer(arr, ">i2", (end - start) // 2, start)
        found.append(np.flatnonzero(words == value) * 2 + start)
    return np.sort(np.concatenate(found))


def _walk_layout(buf: memoryview, pos: int, end: int, ncols: int) -> Layout:
    """The tuples read one by one: for malformed data (this names what is wrong with it) and for
    data `_row_layout` cannot untangle."""
    starts: list[int] = []
    lengths: list[int] = []
    unpack_h = struct.Struct(">h").unpack_from
    unpack_i = struct.Struct(">i").unpack_from
    while pos < end:  # per tuple and field: a field's start is known only once the one before is read
        if pos + 2 > end:
            raise BadCopyBinary("unexpected EOF in COPY data")
        (count,) = unpack_h(buf, pos)
        if count == -1:
            if pos + 2 != end:
                raise BadCopyBinary("received copy data after EOF marker")
            break
        if count != ncols:
            raise BadCopyBinary(f"row field count is {count}, expected {ncols}")
        pos += 2
        for _ in range(ncols):
            if pos + 4 > end:
                raise BadCopyBinary("unexpected EOF in COPY data")
            (ln,) = unpack_i(buf, pos)
            pos += 4
            starts.append(pos)
            lengths.append(ln)
            if ln > 0:
                pos += ln
            elif ln < -1:
                raise BadCopyBinary(f"invalid field size {ln}")
        if pos > end:
            raise BadCopyBinary("unexpected EOF in COPY data")
    at = np.array(starts, np.int64).reshape(-1, ncols)
    ln = np.array(lengths, np.int64).reshape(-1, ncols)
    return [at[:, k] for k in range(ncols)], [ln[:, k] for k in range(ncols)]


def _uniform_layout(buf: memoryview, pos: int, end: int, ncols: int) -> Layout | None:
    """When every tuple has the first one's field lengths (no NULLs, fixed widths), the stream is
    a matrix: checked and sliced with numpy, no walk."""
    first = []
    p = pos + 2
    if p > end or struct.unpack_from(">h", buf, pos)[0] != ncols:
        return None
    for _ in range(ncols):
        if p + 4 > end:
            return None
        (ln,) = struct.unpack_from(">i", buf, p)
        if ln < 0:
            return None
        first.append(ln)
        p += 4 + ln
    stride = p - pos
    if (end - pos) % stride:
        return None
    n = (end - pos) // stride
    mat = np.frombuffer(buf, np.uint8, n * stride, pos).reshape(n, stride)
    row0 = mat[0]
    field_starts = []
    q = 2
    heads = [slice(0, 2)]
    for ln in first:
        heads.append(slice(q, q + 4))
        field_starts.append(q + 4)
        q += 4 + ln
    for h in heads:
        if not (mat[:, h] == row0[h]).all():
            return None
    base = pos + np.arange(n, dtype=np.int64) * stride
    return [base + s for s in field_starts], [np.full(n, ln, np.int64) for ln in first]


def _column(data: bytes, arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray, t: DataType) -> pa.Array:
    n = len(starts)
    valid = lengths >= 0
    mask = None if valid.all() else ~valid
    k = t.kind
    if k in _FIXED or k is TypeKind.INTERVAL:
        dtype = np.dtype(_FIXED[k]) if k in _FIXED else _PG_INTERVAL
        w = dtype.itemsize
        if (lengths[valid] != w).any():
            raise BadCopyBinary(f"incorrect binary data format: a {t} field is not {w} bytes")
        raw = _at(arr, np.where(valid, starts, 0), dtype) if n else np.empty(0, dtype)
        return _from_wire(raw, t, mask)
    if k in _VARLEN:
        return _varlen_column(arr, starts, lengths, valid, mask, t)
    return _per_value_column(data, starts, lengths, t)


def _validity(mask: np.ndarray | None) -> pa.Buffer | None:
    """An Arrow validity bitmap of a NULL mask."""
    return None if mask is None else pa.array(~mask).buffers()[1]


def _from_wire(raw: np.ndarray, t: DataType, mask: np.ndarray | None) -> pa.Array:
    k = t.kind
    if k is TypeKind.INTERVAL:
        mdn = np.empty(len(raw), _MDN)
        mdn["months"] = raw["months"]
        mdn["days"] = raw["days"]
        mdn["nanos"] = raw["usecs"].astype(np.int64) * 1000
        return pa.Array.from_buffers(t.arrow, len(raw), [_validity(mask), pa.py_buffer(mdn)], null_count=-1)
    if k is TypeKind.BOOLEAN:
        return pa.array(raw != 0, pa.bool_(), mask=mask)
    if k is TypeKind.DATE:
        return pa.array(raw.astype(np.int32) + _EPOCH_DAYS, pa.int32(), mask=mask).cast(t.arrow)
    if k in (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ):
        return pa.array(raw.astype(np.int64) + _EPOCH_USECS, pa.int64(), mask=mask).cast(t.arrow)
    if k is TypeKind.TIME:
        return pa.array(raw.astype(np.int64), pa.int64(), mask=mask).cast(t.arrow)
    return pa.array(raw.astype(raw.dtype.newbyteorder("=")), t.arrow, mask=mask)


def _varlen_column(
    arr: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    valid: np.ndarray,
    mask: np.ndarray | None,
    t: DataType,
) -> pa.Array:
    skip = 1 if t.kind is TypeKind.JSONB else 0
    if skip:
        bad = valid & ((lengths < 1) | (arr[np.where(valid & (lengths >= 1), starts, 0)] != 1))
        if bad.any():
            raise BadCopyBinary("unsupported jsonb version number (expected 1)")
    lens = np.where(valid, lengths - skip, 0)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    total = int(offsets[-1])
    src = np.repeat(starts + skip - offsets[:-1], lens) + np.arange(total, dtype=np.int64)
    data = arr[src]
    validity = _validity(mask)
    kind = pa.large_binary() if t.kind is TypeKind.BYTEA else pa.large_string()
    out = pa.Array.from_buffers(
        kind, len(starts), [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=-1
    )
    if t.kind is not TypeKind.BYTEA:
        try:
            out.validate(full=True)
        except pa.ArrowInvalid:
            raise PiestreamError('invalid byte sequence for encoding "UTF8"', sqlstate="22021") from None
    return out.cast(t.arrow)


def _per_value_column(data: bytes, starts: np.ndarray, lengths: np.ndarray, t: DataType) -> pa.Array:
    """NUMERIC and arrays: their recv forms are variable-length structures, decoded per value."""
    values: list[Any] = []
    for s, ln in zip(starts.tolist(), lengths.tolist(), strict=True):  # per value: see the docstring
        values.append(None if ln < 0 else codec.decode_binary(data[s : s + ln], t))
    if t.kind is TypeKind.NUMERIC:
        return nm.to_arrow(values)
    return to_arrow(values, t)
