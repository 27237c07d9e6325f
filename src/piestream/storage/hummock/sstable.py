"""The SST object format (seed 001 "Storage Format"; reference §5.1 for the ideas).

One object per SST::

    [block 0] ... [block n-1] [meta] [footer]

A block holds up to ~64 KiB of sorted entries laid out column-wise, so decoding it is a few
zero-copy numpy / Arrow views instead of a loop over entries::

    count u32 | key offsets u32 x (count+1) | value offsets u32 x (count+1)
    | filter lens u16 x count | key bytes | value bytes

On disk a block is ``body | compression u8 | xxh64(body + compression) u64`` where body is the
payload, optionally LZ4- or Zstd-compressed. The meta holds the block index (offset, length,
first key), smallest and largest key, the Bloom filter, key count, epoch range and table ids; the
footer locates and checksums the meta. Every read verifies checksums, so corrupt bytes raise
`DataCorruption` naming the object and block instead of being returned as data.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from dataclasses import dataclass, field

import lz4.block
import numpy as np
import pyarrow as pa
import xxhash
import zstandard

from piestream.common.errors import DataCorruption
from piestream.encoding.keys import EPOCH_LEN, TABLE_PREFIX_LEN, split_full_key
from piestream.storage.hummock.filter import BloomFilter
from piestream.storage.hummock.kv_batch import KvBatch

MAGIC = 0x5049_4553  # "PIES"
FORMAT_VERSION = 1
DEFAULT_BLOCK_SIZE = 64 * 1024

COMPRESSION_NONE = 0
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
_COMPRESSIONS = {"none": COMPRESSION_NONE, "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}

_BLOCK_TRAILER = struct.Struct("<BQ")
_FOOTER = struct.Struct("<QIQII")  # meta offset, meta len, meta checksum, version, magic
FOOTER_SIZE = _FOOTER.size


def compression_code(name: str) -> int:
    try:
        return _COMPRESSIONS[name]
    except KeyError:
        raise ValueError(f"unknown compression {name!r} (none, lz4, zstd)") from None


# ---------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------


def _rebased_offsets(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0 as uint32, data bytes) of a binary array slice."""
    bufs = arr.buffers()
    offs = np.frombuffer(bufs[1], np.int32, count=len(arr) + 1 + arr.offset)[arr.offset :]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = data[offs[0] : offs[-1]]
    return (offs - offs[0]).astype(np.uint32), data


def encode_block(batch: KvBatch, compression: int = COMPRESSION_NONE) -> bytes:
    """The on-disk bytes of one block holding all of `batch`."""
    n = len(batch)
    koffs, kdata = _rebased_offsets(batch.keys)
    voffs, vdata = _rebased_offsets(batch.values)
    payload = b"".join(
        (
            struct.pack("<I", n),
            koffs.tobytes(),
            voffs.tobytes(),
            np.asarray(batch.filter_lens, np.uint16).tobytes(),
            kdata.tobytes(),
            vdata.tobytes(),
        )
    )
    if compression == COMPRESSION_LZ4:
        body = lz4.block.compress(payload, store_size=True)
    elif compression == COMPRESSION_ZSTD:
        body = zstandard.ZstdCompressor(level=3).compress(payload)
    else:
        body = payload
    checksum = xxhash.xxh64_intdigest(body + bytes([compression]))
    return body + _BLOCK_TRAILER.pack(compression, checksum)


class Block:
    """A decoded block: Arrow views over its keys and values, plus a lazily built key list for
    point lookups (bisect over Python bytes is the fastest per-key search Python offers)."""

    __slots__ = ("_key_list", "_vbuf", "_voffs", "batch", "nbytes")

    def __init__(self, batch: KvBatch, nbytes: int) -> None:
        self.batch = batch
        self.nbytes = nbytes
        self._key_list: list[bytes] | None = None
        self._vbuf: memoryview | None = None
        self._voffs: list[int] | None = None

    def key_list(self) -> list[bytes]:
        if self._key_list is None:
            self._key_list = self.batch.keys.to_pylist()
        return self._key_list

    def seek(self, key: bytes) -> int:
        """Index of the first entry with full key >= `key`."""
        return bisect.bisect_left(self.key_list(), key)

    def value_at(self, i: int) -> bytes:
        """The i-th value, sliced from the value buffer (an Arrow scalar costs microseconds)."""
        if self._voffs is None:
            from piestream.encoding.ragged import Ragged

            r = Ragged.from_arrow(self.batch.values)
            self._vbuf = r.data.data
            self._voffs = r.offsets.tolist()
        assert self._vbuf is not None
        return bytes(self._vbuf[self._voffs[i] : self._voffs[i + 1]])

    def __len__(self) -> int:
        return len(self.batch)


def decode_block(raw: bytes, where: str) -> Block:
    """Verify and decode one block's on-disk bytes; `where` names it in errors."""
    if len(raw) < _BLOCK_TRAILER.size:
        raise DataCorruption(f"{where}: block truncated")
    body = raw[: -_BLOCK_TRAILER.size]
    compression, checksum = _BLOCK_TRAILER.unpack_from(raw, len(raw) - _BLOCK_TRAILER.size)
    if xxhash.xxh64_intdigest(body + bytes([compression])) != checksum:
        raise DataCorruption(f"{where}: block checksum mismatch")
    try:
        if compression == COMPRESSION_LZ4:
            payload = lz4.block.decompress(body)
        elif compression == COMPRESSION_ZSTD:
            payload = zstandard.ZstdDecompressor().decompress(body)
        elif compression == COMPRESSION_NONE:
            payload = body
        else:
            raise DataCorruption(f"{where}: unknown compression {compression}")
    except (lz4.block.LZ4BlockError, zstandard.ZstdError) as e:
        raise DataCorruption(f"{where}: cannot decompress block: {e}") from e
    return Block(_parse_payload(payload, where), len(payload))


def _parse_payload(payload: bytes, where: str) -> KvBatch:
    buf = np.frombuffer(payload, np.uint8)
    try:
        (n,) = struct.unpack_from("<I", payload, 0)
        pos = 4
        # copies: a bytes object's buffer is not 4-byte aligned, and Arrow (Acero) wants aligned offsets
        koffs = np.frombuffer(payload, np.uint32, n + 1, pos).copy()
        pos += 4 * (n + 1)
        voffs = np.frombuffer(payload, np.uint32, n + 1, pos).copy()
        pos += 4 * (n + 1)
        flens = np.frombuffer(payload, np.uint16, n, pos).copy()
        pos += 2 * n
    except (struct.error, ValueError) as e:
        raise DataCorruption(f"{where}: block header truncated") from e
    kbytes, vbytes = int(koffs[-1]), int(voffs[-1])
    if (
        koffs[0] != 0
        or voffs[0] != 0
        or pos + kbytes + vbytes != len(payload)
        or (
            n and (np.any(np.diff(koffs.astype(np.int64)) < 0) or np.any(np.diff(voffs.astype(np.int64)) < 0))
        )
    ):
        raise DataCorruption(f"{where}: block layout is inconsistent")
    kbuf = pa.py_buffer(buf[pos : pos + kbytes])
    vbuf = pa.py_buffer(buf[pos + kbytes : pos + kbytes + vbytes])
    keys = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(koffs.view(np.int32)), kbuf])
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(voffs.view(np.int32)), vbuf])
    return KvBatch(keys, values, flens)


# ---------------------------------------------------------------------------------------------
# Meta
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockMeta:
    offset: int
    length: int
    uncompressed_size: int
    key_count: int
    first_key: bytes


@dataclass
class SstableMeta:
    """Everything about an SST except its entries."""

    blocks: list[BlockMeta]
    smallest_key: bytes
    largest_key: bytes
    key_count: int
    min_epoch: int
    max_epoch: int
    table_ids: list[int]
    unfiltered_table_ids: list[int]
    bloom: BloomFilter
    first_keys: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.first_keys = [b.first_key for b in self.blocks]

    def block_for(self, key: bytes) -> int:
        """Index of the block that may hold the first entry >= `key` (-1: before all blocks)."""
        return bisect.bisect_right(self.first_keys, key) - 1

    def may_contain_prefix(self, filter_key: bytes, table_id: int) -> bool:
        """False only if no entry's filter key equals `filter_key` (a user-key prefix)."""
        if table_id in self.unfiltered_table_ids:
            return True
        return self.bloom.may_contain(filter_key)

    def nbytes(self) -> int:
        return sum(len(b.first_key) + 40 for b in self.blocks) + len(self.bloom.to_bytes()) + 200

    def encode(self) -> bytes:
        parts = [struct.pack("<I", len(self.blocks))]
        for b in self.blocks:
            parts.append(struct.pack("<QIII", b.offset, b.length, b.uncompressed_size, b.key_count))
            parts.append(_lp(b.first_key))
        parts += [
            _lp(self.smallest_key),
            _lp(self.largest_key),
            struct.pack("<QQQ", self.key_count, self.min_epoch, self.max_epoch),
            struct.pack(f"<I{len(self.table_ids)}I", len(self.table_ids), *self.table_ids),
            struct.pack(
                f"<I{len(self.unfiltered_table_ids)}I",
                len(self.unfiltered_table_ids),
                *self.unfiltered_table_ids,
            ),
            _lp(self.bloom.to_bytes()),
        ]
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes, where: str) -> SstableMeta:
        try:
            r = _Reader(data)
            blocks = []
            for _ in range(r.u32()):
                off, length, usize, kc = r.unpack("<QIII")
                blocks.append(BlockMeta(off, length, usize, kc, r.lp()))
            smallest, largest = r.lp(), r.lp()
            key_count, min_epoch, max_epoch = r.unpack("<QQQ")
            table_ids = [r.u32() for _ in range(r.u32())]
            unfiltered = [r.u32() for _ in range(r.u32())]
            bloom = BloomFilter.from_bytes(r.lp())
            if r.pos != len(data):
                raise DataCorruption("trailing bytes")
        except (struct.error, DataCorruption) as e:
            raise DataCorruption(f"{where}: SST meta is corrupt ({e})") from e
        return cls(blocks, smallest, largest, key_count, min_epoch, max_epoch, table_ids, unfiltered, bloom)


def _lp(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> tuple[int, ...]:
        vals = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals

    def u32(self) -> int:
        return self.unpack("<I")[0]

    def lp(self) -> bytes:
        n = self.u32()
        if self.pos + n > len(self.data):
            raise DataCorruption("length past the end")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


def encode_footer(meta_offset: int, meta: bytes) -> bytes:
    return _FOOTER.pack(meta_offset, len(meta), xxhash.xxh64_intdigest(meta), FORMAT_VERSION, MAGIC)


def decode_meta_and_footer(tail: bytes, meta_offset: int, where: str) -> SstableMeta:
    """Decode the bytes from `meta_offset` to the end of an SST object (meta + footer)."""
    if len(tail) < FOOTER_SIZE:
        raise DataCorruption(f"{where}: SST footer truncated")
    off, mlen, checksum, version, magic = _FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
    if magic != MAGIC:
        raise DataCorruption(f"{where}: not an SST (bad magic)")
    if version != FORMAT_VERSION:
        raise DataCorruption(f"{where}: unsupported SST format version {version}")
    if off != meta_offset or mlen != len(tail) - FOOTER_SIZE:
        raise DataCorruption(f"{where}: SST footer does not match its meta")
    meta = tail[:mlen]
    if xxhash.xxh64_intdigest(meta) != checksum:
        raise DataCorruption(f"{where}: SST meta checksum mismatch")
    return SstableMeta.decode(meta, where)


# ---------------------------------------------------------------------------------------------
# Builder
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltSstable:
    """An SST's bytes and its meta, before upload."""

    data: bytes
    meta: SstableMeta
    meta_offset: int


def filter_hashes(batch: KvBatch) -> tuple[np.ndarray, set[int]]:
    """XXH64 of every entry's filter key (user key cut after the pk prefix), and the tables that
    have entries without a filter key."""
    from piestream.encoding.hashing import xxh64_ragged
    from piestream.encoding.ragged import Ragged

    keys = Ragged.from_arrow(batch.keys)
    flens = batch.filter_lens.astype(np.int64)
    has = flens > 0
    unfiltered: set[int] = set()
    if not has.all():
        starts = keys.offsets[:-1][~has]
        tids = keys.data[starts[:, None] + np.arange(4)].copy().view(">u4")[:, 0]
        unfiltered = {int(t) for t in np.unique(tids)}
    if not has.any():
        return np.zeros(0, np.uint64), unfiltered
    lens = np.minimum(TABLE_PREFIX_LEN + flens[has], keys.lengths[has] - EPOCH_LEN)
    pref = keys.gather_by(keys.offsets[:-1][has], lens)
    return xxh64_ragged(pref), unfiltered


def build_sstable(
    batch: KvBatch,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    compression: int = COMPRESSION_NONE,
    bits_per_key: int = 10,
) -> BuiltSstable:
    """Build one SST from a non-empty sorted batch."""
    if not len(batch):
        raise ValueError("cannot build an empty SST")
    cum = np.cumsum(batch.entry_sizes())
    # block boundaries: cut whenever the running size passes a multiple of block_size
    cuts = np.flatnonzero(np.diff(cum // block_size) > 0) + 1
    bounds = [0, *cuts.tolist(), len(batch)]
    parts: list[bytes] = []
    blocks: list[BlockMeta] = []
    offset = 0
    for s, e in itertools.pairwise(bounds):
        if e <= s:
            continue
        sub = batch.slice(s, e - s)
        raw = encode_block(sub, compression)
        usize = int(cum[e - 1] - (cum[s - 1] if s else 0))
        blocks.append(BlockMeta(offset, len(raw), usize, e - s, sub.first_key()))
        parts.append(raw)
        offset += len(raw)
    epochs = batch.epochs()
    hashes, unfiltered = filter_hashes(batch)
    tids = sorted(_table_ids(batch))
    meta = SstableMeta(
        blocks=blocks,
        smallest_key=batch.first_key(),
        largest_key=batch.last_key(),
        key_count=len(batch),
        min_epoch=int(epochs.min()),
        max_epoch=int(epochs.max()),
        table_ids=tids,
        unfiltered_table_ids=sorted(unfiltered),
        bloom=BloomFilter.build(hashes, bits_per_key),
    )
    meta_bytes = meta.encode()
    data = b"".join([*parts, meta_bytes, encode_footer(offset, meta_bytes)])
    return BuiltSstable(data, meta, offset)


def _table_ids(batch: KvBatch) -> set[int]:
    from piestream.encoding.ragged import Ragged

    keys = Ragged.from_arrow(batch.keys)
    starts = keys.offsets[:-1]
    tids = keys.data[starts[:, None] + np.arange(4)].copy().view(">u4")[:, 0]
    return {int(t) for t in np.unique(tids)}


def split_at_user_keys(batch: KvBatch, target_bytes: int) -> list[KvBatch]:
    """Cut a sorted batch into pieces of about `target_bytes`, never between two versions of one
    user key (so SSTs of a non-overlapping level have disjoint user-key ranges)."""
    n = len(batch)
    if n == 0:
        return []
    sizes = batch.entry_sizes()
    if int(sizes.sum()) <= target_bytes:
        return [batch]
    uk = batch.user_keys()
    import pyarrow.compute as pc

    same_as_prev = np.concatenate(
        [[False], pc.equal(uk.slice(1), uk.slice(0, n - 1)).to_numpy(zero_copy_only=False)]
    )
    cum = np.cumsum(sizes)
    out: list[KvBatch] = []
    start = 0
    while start < n:
        base = cum[start - 1] if start else 0
        end = int(np.searchsorted(cum, base + target_bytes, side="right"))
        end = max(end, start + 1)
        while end < n and same_as_prev[end]:
            end += 1
        out.append(batch.slice(start, end - start))
        start = end
    return out


def user_key_of(full_key: bytes) -> bytes:
    return full_key[:-EPOCH_LEN]


def describe_key(full_key: bytes) -> str:
    uk, epoch = split_full_key(full_key)
    return f"{uk.hex()}@{epoch}"
