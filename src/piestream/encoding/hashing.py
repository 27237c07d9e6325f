"""A stable 64-bit hash of byte strings, vectorized: XXH64 (seed 0) over numpy.

Vnodes must be identical in every process and on every machine, so they never use Python's
`hash()`. Hashing one short string at a time through the `xxhash` package costs a Python call per
row; here XXH64 is evaluated for all strings of equal length at once with numpy uint64 arithmetic
(wrapping multiplication is exactly XXH64's mod-2^64 arithmetic). Rows of lengths that occur only
a few times fall back to the `xxhash` package, which gives the same numbers.
"""

from __future__ import annotations

import numpy as np
import xxhash

from piestream.encoding.ragged import Ragged

P1 = np.uint64(0x9E3779B185EBCA87)
P2 = np.uint64(0xC2B2AE3D27D4EB4F)
P3 = np.uint64(0x165667B19E3779F9)
P4 = np.uint64(0x85EBCA77C2B2AE63)
P5 = np.uint64(0x27D4EB2F165667C5)

#: Below this many rows of one length, hashing row by row through `xxhash` is cheaper.
_VECTOR_MIN_ROWS = 32


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    acc = acc + lane * P2
    acc = _rotl(acc, 31)
    return acc * P1


def _merge_round(acc: np.ndarray, val: np.ndarray) -> np.ndarray:
    acc = acc ^ _round(np.zeros_like(val), val)
    return acc * P1 + P4


#: Rows hashed per vector pass: XXH64 is a few dozen uint64 operations per lane, and over a
#: block of this many rows their temporaries stay in the CPU cache (3-4x faster at 4M rows than
#: one pass over arrays of 32 MB each).
_BLOCK_ROWS = 1 << 15


def xxh64_fixed(m: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of every row of an (n, L) uint8 matrix."""
    n = m.shape[0]
    if n <= _BLOCK_ROWS:
        return _xxh64_block(m)
    out = np.empty(n, np.uint64)
    for lo in range(0, n, _BLOCK_ROWS):  # per block of 32K rows, not per row (see _BLOCK_ROWS)
        out[lo : lo + _BLOCK_ROWS] = _xxh64_block(m[lo : lo + _BLOCK_ROWS])
    return out


def _xxh64_block(m: np.ndarray) -> np.ndarray:
    n, length = m.shape
    m = np.ascontiguousarray(m)
    with np.errstate(over="ignore"):
        pos = 0
        if length >= 32:
            v1 = np.full(n, P1 + P2, np.uint64)
            v2 = np.full(n, P2, np.uint64)
            v3 = np.zeros(n, np.uint64)
            v4 = np.full(n, np.uint64(0) - P1, np.uint64)
            while pos + 32 <= length:
                lanes = m[:, pos : pos + 32].copy().view("<u8")
                v1 = _round(v1, lanes[:, 0])
                v2 = _round(v2, lanes[:, 1])
                v3 = _round(v3, lanes[:, 2])
                v4 = _round(v4, lanes[:, 3])
                pos += 32
            h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
            h = _merge_round(h, v1)
            h = _merge_round(h, v2)
            h = _merge_round(h, v3)
            h = _merge_round(h, v4)
        else:
            h = np.full(n, P5, np.uint64)
        h = h + np.uint64(length)
        while pos + 8 <= length:
            lane = m[:, pos : pos + 8].copy().view("<u8")[:, 0]
            h = h ^ _round(np.zeros(n, np.uint64), lane)
            h = _rotl(h, 27) * P1 + P4
            pos += 8
        if pos + 4 <= length:
            lane4 = m[:, pos : pos + 4].copy().view("<u4")[:, 0].astype(np.uint64)
            h = h ^ (lane4 * P1)
            h = _rotl(h, 23) * P2 + P3
            pos += 4
        while pos < length:
            h = h ^ (m[:, pos].astype(np.uint64) * P5)
            h = _rotl(h, 11) * P1
            pos += 1
        h = h ^ (h >> np.uint64(33))
        h = h * P2
        h = h ^ (h >> np.uint64(29))
        h = h * P3
        h = h ^ (h >> np.uint64(32))
    return h


def xxh64_ragged(strings: Ragged) -> np.ndarray:
    """XXH64 (seed 0) of every string of a Ragged column, as uint64."""
    n = strings.n
    out = np.empty(n, np.uint64)
    if n == 0:
        return out
    lens = strings.lengths
    first = int(lens[0])
    if first >= 1 and n >= _VECTOR_MIN_ROWS and bool((lens == first).all()):
        # one length (fixed-width keys: the common case): equal lengths make the strings
        # contiguous, so the (n, L) matrix is a view of the data, no gather
        lo = int(strings.offsets[0])
        return xxh64_fixed(strings.data[lo : lo + n * first].reshape(n, first))
    uniq, counts = np.unique(lens, return_counts=True)
    for length, count in zip(uniq.tolist(), counts.tolist(), strict=True):
        rows = np.flatnonzero(lens == length) if len(uniq) > 1 else np.arange(n)
        if count >= _VECTOR_MIN_ROWS:
            starts = strings.offsets[rows]
            idx = starts[:, None] + np.arange(length, dtype=np.int64)
            out[rows] = xxh64_fixed(strings.data[idx].reshape(len(rows), length))
        else:
            # few rows of this length: one C call each is cheaper than a numpy pass
            data = strings.data
            offs = strings.offsets
            out[rows] = [xxhash.xxh64_intdigest(data[offs[r] : offs[r + 1]].tobytes()) for r in rows.tolist()]
    return out
