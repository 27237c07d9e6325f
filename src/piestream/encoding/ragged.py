"""Columns of variable-length byte strings as numpy arrays, for vectorized encoders.

A `Ragged` holds n byte strings as ``offsets`` (int64, n+1 entries, ``offsets[0]`` may be > 0 for
views) and ``data`` (uint8). Encoders build one Ragged per column (a tag byte, a fixed-width
payload, or an escaped string) and `concat_rows` glues the parts of every row together with a few
numpy scatters, so no Python code runs per row. `to_arrow` / `from_arrow` convert to Arrow binary
arrays without copying where Arrow's layout allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Ragged:
    """n byte strings: string i is ``data[offsets[i]:offsets[i+1]]``."""

    offsets: np.ndarray  # int64, n + 1
    data: np.ndarray  # uint8

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> bytes:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def to_list(self) -> list[bytes]:
        return self.to_arrow().to_pylist()

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def fixed(cls, matrix: np.ndarray) -> Ragged:
        """From an (n, w) uint8 matrix: every string has width w."""
        m = np.ascontiguousarray(matrix, dtype=np.uint8)
        n, w = m.shape
        return cls(
            np.arange(0, (n + 1) * w, w, dtype=np.int64) if w else np.zeros(n + 1, np.int64), m.reshape(-1)
        )

    @classmethod
    def constant(cls, n: int, value: bytes) -> Ragged:
        """n copies of `value`."""
        return cls.fixed(np.tile(np.frombuffer(value, np.uint8), (n, 1)).reshape(n, len(value)))

    @classmethod
    def from_list(cls, items: Sequence[bytes]) -> Ragged:
        """From Python bytes (a loop in C via b"".join; for the non-vectorizable encoders)."""
        lens = np.array(list(map(len, items)), dtype=np.int64)
        offsets = np.zeros(len(items) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        return cls(offsets, np.frombuffer(b"".join(items), np.uint8))

    @classmethod
    def from_arrow(cls, arr: pa.Array) -> Ragged:
        """View a binary/string Arrow array (nulls read as empty strings)."""
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        t = arr.type
        large = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        if not (large or pa.types.is_binary(t) or pa.types.is_string(t)):
            raise TypeError(f"Ragged.from_arrow needs binary or string, got {t}")
        bufs = arr.buffers()
        n = len(arr)
        off_dtype = np.int64 if large else np.int32
        offsets = np.frombuffer(bufs[1], dtype=off_dtype, count=n + 1 + arr.offset)[arr.offset :]
        offsets = offsets.astype(np.int64)
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        if arr.null_count:
            # null slots may hold garbage lengths in general Arrow data: rebuild with empty strings
            valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
            lens = np.where(valid, np.diff(offsets), 0)
            starts = offsets[:-1]
            return Ragged(offsets, data).gather_by(starts, lens)
        return cls(offsets, data)

    def gather_by(self, starts: np.ndarray, lens: np.ndarray) -> Ragged:
        """A new Ragged whose string i is ``data[starts[i] : starts[i] + lens[i]]``.

        Strings lying in order in the data (a column of encoded rows) are copied by Arrow's take
        (`_gather_in_order`). Otherwise, large gathers describe the strings as an Arrow
        ``binary_view`` array over the data and let Arrow's cast to ``binary`` copy them (C++
        memcpy per string). Small ones copy whole
        8-byte words with one fancy index per word (destinations never overlap: a string's full
        words lie inside its own output range) and the last ``len % 8`` bytes byte by byte.
        """
        lens = np.asarray(lens, np.int64)
        starts = np.asarray(starts, np.int64)
        offsets = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        total = int(offsets[-1])
        if total == 0:
            return Ragged(offsets, np.zeros(0, np.uint8))
        ordered = _gather_in_order(self.data, starts, lens)
        if ordered is not None:
            return ordered
        # views pay off for strings longer than a view's 12 inline bytes
        if (
            total >= _VIEW_GATHER_MIN
            and total > 12 * len(lens)
            and len(self.data) < 2**31 - 1
            and total < 2**31 - 1
        ):
            return _gather_with_views(self.data, starts, lens)
        out = np.empty(total, np.uint8)
        nw = lens >> 3
        words = int(nw.sum())
        if words:
            first = np.repeat(np.cumsum(nw) - nw, nw)
            k8 = (np.arange(words, dtype=np.int64) - first) << 3
            src = np.repeat(starts, nw) + k8
            dst = np.repeat(offsets[:-1], nw) + k8
            word_view(out, "u8")[dst] = word_view(np.ascontiguousarray(self.data), "u8")[src]
        tail = lens & 7
        nt = int(tail.sum())
        if nt:
            tstart = starts + (nw << 3)
            tdst = offsets[:-1] + (nw << 3)
            step = np.arange(nt, dtype=np.int64) - np.repeat(np.cumsum(tail) - tail, tail)
            out[np.repeat(tdst, tail) + step] = self.data[np.repeat(tstart, tail) + step]
        return Ragged(offsets, out)

    def slice_bytes(self, start: int, cut_end: int = 0) -> Ragged:
        """Every string without its first `start` and last `cut_end` bytes (they must exist)."""
        n = self.n
        o0 = int(self.offsets[0])
        width = (int(self.offsets[-1]) - o0) // n if n else 0
        if n and width and self.offsets[-1] - o0 == width * n and np.all(self.lengths == width):
            # equal widths (fixed-width keys): one 2-D slice
            keep = width - start - cut_end
            grid = self.data[o0 : o0 + width * n].reshape(n, width)[:, start : width - cut_end]
            return Ragged(np.arange(n + 1, dtype=np.int64) * keep, np.ascontiguousarray(grid).reshape(-1))
        return self.gather_by(self.offsets[:-1] + start, self.lengths - start - cut_end)

    def take(self, idx: np.ndarray) -> Ragged:
        """Strings at positions `idx`."""
        idx = np.asarray(idx, dtype=np.int64)
        return self.gather_by(self.offsets[idx], self.offsets[idx + 1] - self.offsets[idx])

    def to_arrow(self, *, large: bool | None = None) -> pa.Array:
        """As a pa.binary() array (pa.large_binary() when the data exceeds 2 GiB or `large`)."""
        base = int(self.offsets[0])
        total = int(self.offsets[-1]) - base
        if large is None:
            large = total >= 2**31 - 1
        offs = (self.offsets - base).astype(np.int64 if large else np.int32)
        data = self.data[base : base + total]
        return pa.Array.from_buffers(
            pa.large_binary() if large else pa.binary(),
            self.n,
            [None, pa.py_buffer(offs), pa.py_buffer(np.ascontiguousarray(data))],
        )

    # -- transformation -------------------------------------------------------------------------
    def invert(self) -> Ragged:
        """Every byte bitwise-NOT (memcomparable DESC)."""
        return Ragged(self.offsets, np.bitwise_not(self.data))

    def compacted(self) -> Ragged:
        """The same strings with offsets starting at 0 and no unused data."""
        if self.offsets[0] == 0 and len(self.data) == self.offsets[-1]:
            return self
        return Ragged(self.offsets - self.offsets[0], self.data[self.offsets[0] : self.offsets[-1]])


_VIEW_GATHER_MIN = 1 << 16


def _gather_in_order(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> Ragged | None:
    """`Ragged.gather_by` of strings that lie in `data` in order without overlapping (a column
    of row-major encoded rows, the common case), or None when they do not: the strings and the
    gaps between them are then the elements of one Arrow binary array over `data` (offsets
    start0, end0, start1, end1, ...), and Arrow's take of its even elements copies the strings
    (a C++ memcpy each, several times faster than numpy's byte gathers for short strings)."""
    n = len(lens)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = starts
    bounds[1::2] = starts + lens
    # monotone bounds inside the data: every string (and gap) is a valid, in-bounds slice
    if bounds[0] < 0 or bounds[-1] > len(data) or not np.all(bounds[1:] >= bounds[:-1]):
        return None
    spans = pa.Array.from_buffers(
        pa.large_binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(np.ascontiguousarray(data))]
    )
    out = pc.take(spans, pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
    offsets = np.frombuffer(out.buffers()[1], np.int64, n + 1, out.offset * 8)
    return Ragged(offsets, np.frombuffer(out.buffers()[2], np.uint8)[: int(offsets[-1])])


def _gather_with_views(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> Ragged:
    """`Ragged.gather_by` through an Arrow binary_view array and a cast to binary."""
    return Ragged.from_arrow(gather_views([data], np.zeros(len(lens), np.int64), starts, lens))


_INLINE_MASK = np.arange(12)


def binary_views(
    buffers: Sequence[np.ndarray],
    buf: np.ndarray | None,
    starts: np.ndarray,
    lens: np.ndarray,
    groups: Sequence[np.ndarray] | None = None,
) -> pa.Array:
    """An Arrow binary_view array whose string i is ``buffers[buf[i]][starts[i]:][:lens[i]]``,
    without copying the strings (views of up to 12 bytes hold them inline, zero-padded, as the
    format requires). Arrow's kernels then compare or copy them in C++. Buffers must be under
    2 GiB. `groups`, if given, lists the rows of each buffer (then `buf` is not read, and rows in
    no group are empty strings): a caller that has them saves a pass over every row per buffer."""
    n = len(lens)
    lens = np.asarray(lens, np.int64)
    starts = np.asarray(starts, np.int64)
    # the four u32 columns of a view: length | prefix or inline bytes | buffer | offset
    prefix = np.zeros(n, np.uint32)
    bufno = np.zeros(n, np.uint32)
    offset = np.zeros(n, np.uint32)
    short = lens <= 12
    multi = len(buffers) > 1
    for k, data in enumerate(buffers):  # one step per source buffer, not per string
        if groups is not None:
            mine: np.ndarray = groups[k]
        elif multi and buf is not None:
            mine = np.flatnonzero(buf == k)
        else:
            mine = np.arange(n)
        st = starts[mine]
        data = np.ascontiguousarray(data)
        size = len(data)
        safe = st + 12 <= size
        if size >= 4 and safe.all():
            w = word_view(data, "<u4")
            prefix[mine] = w[st]
            bufno[mine] = k
            offset[mine] = st
            sh = np.flatnonzero(short[mine])
            if len(sh):  # inline strings: their bytes 4..12 instead of buffer and offset
                rows, s = mine[sh], st[sh]
                bufno[rows] = w[s + 4]
                offset[rows] = w[s + 8]
        else:  # near the end of an unpadded buffer: gather byte by byte
            sh = short[mine]
            idx = np.minimum(st[:, None] + _INLINE_MASK, max(size - 1, 0))
            raw = data[idx] if size else np.zeros((len(st), 12), np.uint8)
            w3 = np.ascontiguousarray(raw).view("<u4")
            prefix[mine] = w3[:, 0]
            bufno[mine] = np.where(sh, w3[:, 1], k)
            offset[mine] = np.where(sh, w3[:, 2], st)
    views = np.column_stack([lens.astype(np.uint32), prefix, bufno, offset])
    si = np.flatnonzero(short)
    if len(si):  # inline bytes past the string's end must be zero
        vb = views.view(np.uint8).reshape(n, 16)
        vb[si, 4:16] &= np.where(_INLINE_MASK[None, :] < lens[si, None], 0xFF, 0).astype(np.uint8)
    return pa.Array.from_buffers(
        pa.binary_view(),
        n,
        [None, pa.py_buffer(views), *(pa.py_buffer(np.ascontiguousarray(b)) for b in buffers)],
    )


def gather_views(
    buffers: Sequence[np.ndarray],
    buf: np.ndarray | None,
    starts: np.ndarray,
    lens: np.ndarray,
    groups: Sequence[np.ndarray] | None = None,
) -> pa.Array:
    """A binary array whose string i is ``buffers[buf[i]][starts[i]:starts[i] + lens[i]]``
    (`binary_views` cast to binary: Arrow copies each string in C++)."""
    return binary_views(buffers, buf, starts, lens, groups).cast(pa.binary())


def concat_rows(parts: Sequence[Ragged]) -> Ragged:
    """Row-wise concatenation: string i of the result is ``parts[0][i] + parts[1][i] + ...``."""
    if not parts:
        raise ValueError("concat_rows of nothing")
    n = parts[0].n
    if len(parts) == 1:
        return parts[0].compacted()
    widths = [_fixed_width(p) for p in parts]
    if n and all(w is not None for w in widths):
        # every part has one width: the rows are a matrix, glued with one hstack
        mats = [
            p.data[p.offsets[0] : p.offsets[-1]].reshape(n, int(w or 0))
            for p, w in zip(parts, widths, strict=True)
        ]
        return Ragged.fixed(np.hstack(mats))
    if any(p.n != n for p in parts):
        raise ValueError("concat_rows of parts with different row counts")
    if not n:
        return Ragged(np.zeros(1, np.int64), np.zeros(0, np.uint8))
    # Arrow's row-wise join copies each string once in C++ (a numpy scatter needs a destination
    # index per byte: ~10x slower for short rows)
    joined = pc.binary_join_element_wise(*(p.to_arrow(large=True) for p in parts), _NO_SEPARATOR)
    return Ragged.from_arrow(joined)


_NO_SEPARATOR = pa.scalar(b"", pa.large_binary())


def _fixed_width(r: Ragged) -> int | None:
    """The width of every string if they all have one (cheap test: total = n * first width)."""
    if r.n == 0:
        return None
    w = int(r.offsets[1] - r.offsets[0])
    if int(r.offsets[-1] - r.offsets[0]) != w * r.n:
        return None
    if r.n > 1 and not (np.diff(r.offsets) == w).all():
        return None
    return w


def be_matrix(values: np.ndarray, dtype: str) -> np.ndarray:
    """Fixed-width values as an (n, width) uint8 matrix in byte order `dtype` (e.g. ``'>u8'``)."""
    v = np.ascontiguousarray(values.astype(dtype, copy=False))
    return v.view(np.uint8).reshape(len(v), v.dtype.itemsize)


def tagged(payload: Ragged, valid: np.ndarray, tag_valid: int, tag_null: int) -> Ragged:
    """Per row: one tag byte, then the payload only where `valid` (NULL rows are the tag alone)."""
    n = payload.n
    tags = Ragged.fixed(np.where(valid, tag_valid, tag_null).astype(np.uint8).reshape(n, 1))
    if valid.all():
        return concat_rows([tags, payload])
    lens = np.where(valid, payload.lengths, 0)
    return concat_rows([tags, payload.gather_by(payload.offsets[:-1], lens)])


def read_fixed(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Gather `width` bytes at each position (an (n, width) matrix); positions past the end read 0."""
    idx = pos[:, None] + np.arange(width, dtype=np.int64)
    ok = idx < len(data)
    if ok.all():
        return data[idx]
    return np.where(ok, data[np.minimum(idx, max(len(data) - 1, 0))] if len(data) else 0, 0).astype(np.uint8)


def word_view(data: np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    """A view of a uint8 array whose element p is the `dtype` word stored in
    ``data[p : p + itemsize]`` (unaligned, overlapping; writable when `data` is).

    Fancy-indexing it gathers or scatters whole 1/2/4/8-byte words at arbitrary byte offsets with
    one index per word instead of one per byte; a big-endian `dtype` byte-swaps on the way.
    """
    if data.dtype != np.uint8 or data.ndim != 1 or not data.flags.c_contiguous:
        raise ValueError("word_view needs a contiguous 1-D uint8 array")
    dt = np.dtype(dtype)
    return np.ndarray((max(len(data) - dt.itemsize + 1, 0),), dt, buffer=data, strides=(1,))
