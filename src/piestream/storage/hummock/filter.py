"""SST filters for point gets and prefix scans: a Bloom filter over 64-bit key hashes.

Each SST carries one filter over its entries' filter keys (the user key cut after the table's
read-prefix columns). A point get or a prefix scan hashes its prefix once and skips every SST
whose filter says "absent" (seed 001: "For point get, we will filter SSTs further by Bloom
filter"). Probes use double hashing of one XXH64: ``h1 + i * h2``.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import xxhash

from piestream.common.errors import DataCorruption

DEFAULT_BITS_PER_KEY = 10
_HEADER = struct.Struct("<IB")  # nbits u32, k u8
#: Hashes whose probe positions are computed and set in one pass: the (block, k) positions stay
#: in the CPU cache.
_BLOCK = 1 << 15


class BloomFilter:
    """An immutable Bloom filter over XXH64 hashes."""

    __slots__ = ("_bits", "k", "nbits")

    def __init__(self, bits: bytes, nbits: int, k: int) -> None:
        self._bits = bits
        self.nbits = nbits
        self.k = k

    @classmethod
    def build(cls, hashes: np.ndarray, bits_per_key: int = DEFAULT_BITS_PER_KEY) -> BloomFilter:
        """A filter holding every hash (uint64) in `hashes` (vectorized)."""
        n = max(len(hashes), 1)  # versions of one key repeat a hash: that only lowers the FPR
        nbits = max(64, ((n * bits_per_key + 63) // 64) * 64)
        k = max(1, min(30, round(bits_per_key * math.log(2))))
        flags = np.zeros(nbits, np.bool_)
        h = np.asarray(hashes, np.uint64)
        for lo in range(0, len(h), _BLOCK):  # per block of hashes (cache-sized), not per hash
            flags[_positions(h[lo : lo + _BLOCK], nbits, k).reshape(-1)] = True
        return cls(np.packbits(flags, bitorder="little").tobytes(), nbits, k)

    def may_contain_hash(self, h: int) -> bool:
        """False only if the key is certainly absent."""
        h1 = h & 0xFFFFFFFF
        h2 = h >> 32
        bits = self._bits
        nbits = self.nbits
        for i in range(self.k):  # k ~ 7 probes, each an O(1) byte lookup
            pos = (h1 + i * h2) % nbits
            if not (bits[pos >> 3] >> (pos & 7)) & 1:
                return False
        return True

    def may_contain(self, key: bytes) -> bool:
        return self.may_contain_hash(xxhash.xxh64_intdigest(key))

    def may_contain_many(self, hashes: np.ndarray) -> np.ndarray:
        """Vectorized `may_contain_hash` over uint64 hashes."""
        if not len(hashes):
            return np.zeros(0, np.bool_)
        pos = _positions(np.asarray(hashes, np.uint64), self.nbits, self.k)
        arr = np.frombuffer(self._bits, np.uint8)
        hit = (arr[pos >> 3] >> (pos & 7).astype(np.uint8)) & 1
        return hit.all(axis=1)

    def to_bytes(self) -> bytes:
        return _HEADER.pack(self.nbits, self.k) + self._bits

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        if len(data) < _HEADER.size:
            raise DataCorruption("bloom filter truncated")
        nbits, k = _HEADER.unpack_from(data, 0)
        bits = data[_HEADER.size :]
        if nbits != len(bits) * 8 or not 1 <= k <= 30:
            raise DataCorruption("bloom filter header does not match its size")
        return cls(bits, nbits, k)


def _positions(hashes: np.ndarray, nbits: int, k: int) -> np.ndarray:
    """(n, k) bit positions of each hash: ``(h1 + i * h2) % nbits`` for i < k.

    h1 and h2 are the hash's 32-bit halves and k <= 30, so ``h1 + i * h2`` never wraps in 64
    bits and equals ``(h1 % nbits + i * (h2 % nbits)) % nbits``: each probe is the previous one
    plus ``h2 % nbits``, less nbits if it passed it. One modulo per hash half instead of one per
    probe, and no (n, k) uint64 temporaries."""
    n = len(hashes)
    out = np.empty((n, k), np.int64)
    if not n:
        return out
    m = np.int64(nbits)
    p = (hashes & np.uint64(0xFFFFFFFF)).astype(np.int64) % m
    step = (hashes >> np.uint64(32)).astype(np.int64) % m
    out[:, 0] = p
    for i in range(1, k):  # per probe (k ~ 7), each a vector pass over all hashes
        p += step
        p -= m * (p >= m)
        out[:, i] = p
    return out
