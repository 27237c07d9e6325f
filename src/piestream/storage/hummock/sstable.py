"""The SST object format, version 4 (seed 001 "Storage Format"; reference §5.1 for the ideas).

One object per SST::

    [block 0] ... [block n-1] [pad to 8] [search words] [meta] [footer]

A block holds ~64 KiB of sorted entries (configurable per table) laid out as columns, so
decoding it is a few numpy / Arrow views and never a loop over entries::

    count u32 | key offsets u32 x (count+1) | value offsets u32 x (count+1)
    | filter lens u16 x count | key bytes | value bytes

Keys are full keys (user key | inverted epoch u64 BE), so every key ends in a fixed 8-byte epoch
column: the read-epoch rule is one gather of those words plus a search for ``user key | read
epoch`` (`key_index`). On disk a block is ``body | compression u8 | xxh3_64(body, seed=compression)
u64``; body is the payload, optionally LZ4- or Zstd-compressed.

The search words (version 3) are what a batched search of the SST needs besides the blocks,
written once by the builder so no reader computes them per entry: ``w1`` then ``w2``, one
little-endian u64 per entry each, the big-endian words of the 8 and the next 8 key bytes after
the prefix every key of the SST shares (`decoded` module docstring). The section starts 8-byte
aligned; the meta records its offset and its xxh3_64 checksum. A reader loads it on first use
and verifies it whole (16 bytes per entry), so a cold batched read of a mapped SST searches all
of it at once and then verifies only the blocks holding candidates.

Version 4 adds the SST's key width and value width to the meta: the one length every key (every
value) of the SST has, or 0 if lengths differ. Tables with fixed-width rows (integer keys and
columns) get both; a point lookup then finds an entry's key and value by arithmetic from its
block's base instead of reading the offset columns: two cache misses fewer per key on a warm
SST. Loading a block checks that its key and value bytes add up to the widths.

The meta is columnar too: block offsets, lengths, uncompressed sizes and key counts as arrays,
the block index as the array of block first keys (offsets + bytes), then smallest and largest key,
key count, epoch range, table ids and the Bloom filter. The footer locates and checksums the meta
and carries the format version. Version 2 SSTs (block checksums xxh64, no search words: readers
compute them per loaded block) and version 1 SSTs (row-record block index, checksum over body +
compression byte, entry-size "uncompressed" sizes) are still read, so older data directories keep
working, and so are version 3 SSTs (no widths: lookups read the offset columns); new SSTs are
written as version 4 and compaction rewrites old ones. Any other version is
refused with `SstFormatError` (README "Upgrading"). Every read verifies checksums, so corrupt
bytes raise `DataCorruption` naming the object and block instead of being returned as data.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Any

import lz4.block
import numpy as np
import pyarrow as pa
import xxhash
import zstandard

from piestream.common.errors import DataCorruption
from piestream.encoding.keys import EPOCH_LEN, split_full_key
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.filter import BloomFilter
from piestream.storage.hummock.key_index import KeyIndex, compare, padded_ragged, words
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.run_search import common_prefix

MAGIC = 0x5049_4553  # "PIES"
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
DEFAULT_BLOCK_SIZE = 64 * 1024
#: The block size for point-lookup tables (`StorageOptions.table_block_sizes`): RocksDB's default.
#: A random key then reads ~4 KiB instead of ~64 KiB from a cold SST.
POINT_LOOKUP_BLOCK_SIZE = 4 * 1024

COMPRESSION_NONE = 0
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
_COMPRESSIONS = {"none": COMPRESSION_NONE, "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}

_BLOCK_TRAILER = struct.Struct("<BQ")
BLOCK_TRAILER_SIZE = _BLOCK_TRAILER.size
_FOOTER = struct.Struct("<QIQII")  # meta offset, meta len, meta checksum, version, magic
FOOTER_SIZE = _FOOTER.size


class SstFormatError(DataCorruption):
    """An SST written in a format version this piestream does not read."""


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
    r = Ragged.from_arrow(arr)
    return (r.offsets - r.offsets[0]).astype(np.uint32), r.data[r.offsets[0] : r.offsets[-1]]


def block_payload(batch: KvBatch) -> bytes:
    """The uncompressed columnar payload of one block holding all of `batch`."""
    koffs, kdata = _rebased_offsets(batch.keys)
    voffs, vdata = _rebased_offsets(batch.values)
    return b"".join(
        (
            struct.pack("<I", len(batch)),
            koffs.tobytes(),
            voffs.tobytes(),
            np.asarray(batch.filter_lens, np.uint16).tobytes(),
            kdata.tobytes(),
            vdata.tobytes(),
        )
    )


def encode_block(batch: KvBatch, compression: int = COMPRESSION_NONE) -> bytes:
    """The on-disk bytes of one block holding all of `batch`."""
    payload = block_payload(batch)
    if compression == COMPRESSION_LZ4:
        body = lz4.block.compress(payload, store_size=True)
    elif compression == COMPRESSION_ZSTD:
        body = zstandard.ZstdCompressor(level=3).compress(payload)
    else:
        body = payload
    return body + _BLOCK_TRAILER.pack(compression, block_checksum(body, compression))


def block_checksum(body: memoryview | bytes, compression: int, version: int = FORMAT_VERSION) -> int:
    """A block body's checksum as format `version` computes it (version 3: xxh3_64 seeded with
    the compression code, which hashes a mapped block at memory speed; 2: xxh64 seeded so;
    1: xxh64 of body + compression byte)."""
    if version >= 3:
        return xxhash.xxh3_64_intdigest(body, compression)
    if version == 1:
        h = xxhash.xxh64(body)
        h.update(bytes([compression]))
        return h.intdigest()
    return xxhash.xxh64_intdigest(body, compression)


def block_body(raw: memoryview | bytes, where: str, version: int = FORMAT_VERSION) -> bytes | memoryview:
    """Verify one block's on-disk bytes and return its uncompressed payload (no copy when the
    block is not compressed)."""
    mv = memoryview(raw)
    if len(mv) < _BLOCK_TRAILER.size:
        raise DataCorruption(f"{where}: block truncated")
    body = mv[: -_BLOCK_TRAILER.size]
    compression, checksum = _BLOCK_TRAILER.unpack_from(mv, len(mv) - _BLOCK_TRAILER.size)
    if block_checksum(body, compression, version) != checksum:
        raise DataCorruption(f"{where}: block checksum mismatch")
    if compression == COMPRESSION_NONE:
        return body
    return decompress(body, compression, where)


def decompress(body: memoryview | bytes, compression: int, where: str) -> bytes:
    """A compressed block body's payload (DataCorruption if it does not decompress)."""
    try:
        if compression == COMPRESSION_LZ4:
            return lz4.block.decompress(body)
        if compression == COMPRESSION_ZSTD:
            return zstandard.ZstdDecompressor().decompress(body)
    except (lz4.block.LZ4BlockError, zstandard.ZstdError) as e:
        raise DataCorruption(f"{where}: cannot decompress block: {e}") from e
    raise DataCorruption(f"{where}: unknown compression {compression}")


class Block:
    """A decoded block: Arrow views over its keys and values (zero-copy into the decoded SST's
    buffer), plus a lazily built key list for the single-key `get` (bisect over Python bytes is
    the fastest one-key search Python offers)."""

    __slots__ = ("_key_list", "_vbuf", "_voffs", "batch", "n", "nbytes")

    def __init__(self, batch: KvBatch, nbytes: int) -> None:
        self.batch = batch
        self.nbytes = nbytes
        self.n = len(batch)
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
            r = Ragged.from_arrow(self.batch.values)
            self._vbuf = memoryview(r.data.tobytes()) if not r.data.flags.c_contiguous else r.data.data
            self._voffs = r.offsets.tolist()
        assert self._vbuf is not None
        return bytes(self._vbuf[self._voffs[i] : self._voffs[i + 1]])

    def __len__(self) -> int:
        return self.n


def decode_block(raw: bytes, where: str) -> Block:
    """Verify and decode one block's on-disk bytes on their own (tests, tools); reads go through
    `DecodedSstable`, which decodes blocks in its shared buffer."""
    from piestream.storage.hummock.decoded import DecodedSstable

    payload = block_body(raw, where)
    n = struct.unpack_from("<I", payload, 0)[0] if len(payload) >= 4 else -1
    if n < 0:
        raise DataCorruption(f"{where}: block header truncated")
    meta = SstableMeta.single_block(len(raw), len(payload), n)
    d = DecodedSstable(0, meta, where)

    def read_ranges(offsets: list[int], outs: list[np.ndarray]) -> None:
        for offset, out in zip(offsets, outs, strict=True):
            out[:] = np.frombuffer(raw, np.uint8, len(out), offset)

    d.ensure([0], read_ranges)
    return d.block(0)


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


class SstableMeta:
    """Everything about an SST except its entries; the block index is columnar."""

    def __init__(
        self,
        *,
        offsets: np.ndarray,
        lengths: np.ndarray,
        usizes: np.ndarray,
        key_counts: np.ndarray,
        first_keys: Ragged,
        smallest_key: bytes,
        largest_key: bytes,
        key_count: int,
        min_epoch: int,
        max_epoch: int,
        table_ids: list[int],
        unfiltered_table_ids: list[int],
        bloom: BloomFilter,
        version: int = FORMAT_VERSION,
        words_offset: int = 0,
        words_checksum: int = 0,
        key_width: int = 0,
        value_width: int = 0,
    ) -> None:
        self.version = version
        #: version 4: the length of every key / every value of the SST, 0 where lengths differ
        self.key_width = key_width
        self.value_width = value_width
        #: version 3: where the search words start in the object, and their xxh3_64
        self.words_offset = words_offset
        self.words_checksum = words_checksum
        self.offsets = offsets.astype(np.int64)
        self.lengths = lengths.astype(np.int64)
        self.usizes = usizes.astype(np.int64)
        self.key_counts = key_counts.astype(np.int64)
        self.first_key_ragged = first_keys
        self.smallest_key = smallest_key
        self.largest_key = largest_key
        self.key_count = key_count
        self.min_epoch = min_epoch
        self.max_epoch = max_epoch
        self.table_ids = table_ids
        self.unfiltered_table_ids = unfiltered_table_ids
        self.bloom = bloom
        self.first_keys: list[bytes] = first_keys.to_list()
        self._index: KeyIndex | None = None
        self._blocks: list[BlockMeta] | None = None
        self._block_words: np.ndarray | None = None

    @classmethod
    def single_block(cls, length: int, usize: int, count: int) -> SstableMeta:
        return cls(
            offsets=np.zeros(1, np.int64),
            lengths=np.array([length]),
            usizes=np.array([usize]),
            key_counts=np.array([count]),
            first_keys=Ragged.from_list([b""]),
            smallest_key=b"",
            largest_key=b"",
            key_count=count,
            min_epoch=0,
            max_epoch=0,
            table_ids=[],
            unfiltered_table_ids=[],
            bloom=BloomFilter.build(np.zeros(0, np.uint64)),
        )

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def blocks(self) -> list[BlockMeta]:
        """The block index as records (tests and tools; reads use the arrays)."""
        if self._blocks is None:
            self._blocks = [
                BlockMeta(int(o), int(ln), int(u), int(c), k)
                for o, ln, u, c, k in zip(
                    self.offsets, self.lengths, self.usizes, self.key_counts, self.first_keys, strict=True
                )
            ]
        return self._blocks

    def index(self) -> KeyIndex:
        """The block first keys as a `KeyIndex`, to route a batch of keys to blocks at once."""
        if self._index is None:
            data, starts, lens = padded_ragged(self.first_key_ragged)
            idx = KeyIndex(data, starts, lens, np.array([0, len(starts)], np.int64))
            idx.fill(np.zeros(1, np.int64))
            self._index = idx
        return self._index

    def block_words(self) -> np.ndarray:
        """Each block's first-key search word: the big-endian uint64 of the 8 bytes after the
        prefix all the SST's keys share (`decoded` module docstring), kept once computed."""
        if self._block_words is None:
            if len(self):
                cp = self.prefix_len
                fk = self.index()
                self._block_words = words(fk.data, fk.starts + cp, fk.lens - cp)
            else:
                self._block_words = np.zeros(0, np.uint64)
        return self._block_words

    @property
    def prefix_len(self) -> int:
        """How many leading bytes every key of the SST shares (of its smallest and largest)."""
        return len(common_prefix(self.smallest_key, self.largest_key))

    def route(self, data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """The block of each target key (the last whose first key <= it, 0 if none is), for
        targets that start with the prefix every key of the SST shares: one `searchsorted` over
        the block words; only targets whose word ties with their block's first key (their
        order is then decided past the word) take the byte-wise `KeyIndex` route."""
        fw = self.block_words()
        cp = self.prefix_len
        qw = words(data, starts + cp, lens - cp)
        blk = np.searchsorted(fw, qw, "right") - 1
        np.maximum(blk, 0, out=blk)
        # a target whose word equals its block's first-key word is (a version of) that first
        # key, ~1 in entries-per-block targets: one byte compare past the word says whether it
        # sorts before the first key (then it belongs to the block before)
        tie = np.flatnonzero(fw[blk] == qw)
        if len(tie):
            fk = self.index()
            b = blk[tie]
            fl, tl = fk.lens[b], lens[tie]
            skip = np.minimum(cp + 8, np.minimum(fl, tl))
            before = compare(fk.data, fk.starts[b], fl, data, starts[tie], tl, skip) > 0
            blk[tie[before]] = np.maximum(b[before] - 1, 0)
            # several blocks starting with one word (long runs of one user key): byte-wise route
            again = tie[before][(b[before] > 0) & (fw[blk[tie[before]]] == qw[tie[before]])]
            if len(again):
                blk[again] = fk.route(data, starts[again], lens[again])
        return blk

    def block_for(self, key: bytes) -> int:
        """Index of the block that may hold the first entry >= `key` (-1: before all blocks)."""
        return bisect.bisect_right(self.first_keys, key) - 1

    def may_contain_prefix(self, filter_key: bytes, table_id: int) -> bool:
        """False only if no entry's filter key equals `filter_key` (a user-key prefix)."""
        if table_id in self.unfiltered_table_ids:
            return True
        return self.bloom.may_contain(filter_key)

    def may_contain_many(self, hashes: np.ndarray, table_ids: np.ndarray) -> np.ndarray:
        """`may_contain_prefix` for a batch, by filter-key hash (0: no filter key, kept): False
        only where no entry's filter key can match."""
        check = hashes != 0
        if self.unfiltered_table_ids:
            check &= ~np.isin(table_ids, self.unfiltered_table_ids)
        keep = ~check
        if check.any():
            keep[check] = self.bloom.may_contain_many(hashes[check])
        return keep

    def nbytes(self) -> int:
        return int(self.first_key_ragged.offsets[-1]) + 90 * len(self) + len(self.bloom.to_bytes()) + 200

    def encode(self) -> bytes:
        fk = self.first_key_ragged
        parts = [
            struct.pack("<I", len(self)),
            self.offsets.astype("<u8").tobytes(),
            self.lengths.astype("<u4").tobytes(),
            self.usizes.astype("<u4").tobytes(),
            self.key_counts.astype("<u4").tobytes(),
            (fk.offsets - fk.offsets[0]).astype("<u4").tobytes(),
            fk.data[fk.offsets[0] : fk.offsets[-1]].tobytes(),
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
        if self.version >= 3:
            parts.append(struct.pack("<QQ", self.words_offset, self.words_checksum))
        if self.version >= 4:
            parts.append(struct.pack("<II", self.key_width, self.value_width))
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes, where: str, version: int = FORMAT_VERSION) -> SstableMeta:
        if version == 1:
            return cls._decode_v1(data, where)
        try:
            r = _Reader(data)
            n = r.u32()
            offsets = r.array("<u8", n)
            lengths = r.array("<u4", n)
            usizes = r.array("<u4", n)
            counts = r.array("<u4", n)
            fko = r.array("<u4", n + 1).astype(np.int64)
            if n and (fko[0] != 0 or np.any(np.diff(fko) < 0)):
                raise DataCorruption("block index offsets are inconsistent")
            fkd = np.frombuffer(r.take(int(fko[-1])), np.uint8)
            tail = _read_tail(r, len(data), version)
        except (struct.error, ValueError, DataCorruption) as e:
            raise DataCorruption(f"{where}: SST meta is corrupt ({e})") from e
        return cls(
            offsets=offsets,
            lengths=lengths,
            usizes=usizes,
            key_counts=counts,
            first_keys=Ragged(fko, fkd),
            version=version,
            **tail,
        )

    @classmethod
    def _decode_v1(cls, data: bytes, where: str) -> SstableMeta:
        """Version 1: one record per block (offset u64, length, entry-size sum, key count u32,
        first key), then the same trailing fields. Its per-block "uncompressed size" summed
        key + value + 10 per entry, which is the payload size less 12."""
        try:
            r = _Reader(data)
            recs = []
            first = []
            for _ in range(r.u32()):  # per block of an old SST, once when its meta is loaded
                recs.append(r.unpack("<QIII"))
                first.append(r.lp())
            tail = _read_tail(r, len(data), 1)
        except (struct.error, ValueError, DataCorruption) as e:
            raise DataCorruption(f"{where}: SST meta is corrupt ({e})") from e
        cols = np.array(recs, np.int64).reshape(len(recs), 4)
        return cls(
            offsets=cols[:, 0],
            lengths=cols[:, 1],
            usizes=cols[:, 2] + 12,
            key_counts=cols[:, 3],
            first_keys=Ragged.from_list(first),
            version=1,
            **tail,
        )


def _read_tail(r: _Reader, size: int, version: int) -> dict[str, Any]:
    """The meta fields after the block index (the same in versions 1 and 2; version 3 adds the
    search words' offset and checksum, version 4 the key and value widths)."""
    smallest, largest = r.lp(), r.lp()
    key_count, min_epoch, max_epoch = r.unpack("<QQQ")
    table_ids = [r.u32() for _ in range(r.u32())]
    unfiltered = [r.u32() for _ in range(r.u32())]
    bloom = BloomFilter.from_bytes(r.lp())
    words: dict[str, int] = {}
    if version >= 3:
        offset, checksum = r.unpack("<QQ")
        if offset % 8:
            raise DataCorruption("search words are not 8-byte aligned")
        words = {"words_offset": offset, "words_checksum": checksum}
    if version >= 4:
        words["key_width"], words["value_width"] = r.unpack("<II")
    if r.pos != size:
        raise DataCorruption("trailing bytes")
    return {
        **words,
        "smallest_key": smallest,
        "largest_key": largest,
        "key_count": key_count,
        "min_epoch": min_epoch,
        "max_epoch": max_epoch,
        "table_ids": table_ids,
        "unfiltered_table_ids": unfiltered,
        "bloom": bloom,
    }


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

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DataCorruption("length past the end")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def array(self, dtype: str, n: int) -> np.ndarray:
        dt = np.dtype(dtype)
        return np.frombuffer(self.take(n * dt.itemsize), dt).astype(np.int64)

    def lp(self) -> bytes:
        return self.take(self.u32())


def encode_footer(meta_offset: int, meta: bytes) -> bytes:
    return _FOOTER.pack(meta_offset, len(meta), xxhash.xxh64_intdigest(meta), FORMAT_VERSION, MAGIC)


def check_footer(tail: bytes, where: str) -> tuple[int, int, int, int]:
    """(meta offset, meta length, meta checksum, format version) from an SST's last
    `FOOTER_SIZE` bytes, after checking magic and format version."""
    if len(tail) < FOOTER_SIZE:
        raise DataCorruption(f"{where}: SST footer truncated")
    off, mlen, checksum, version, magic = _FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
    if magic != MAGIC:
        raise DataCorruption(f"{where}: not an SST (bad magic)")
    if version not in READABLE_VERSIONS:
        raise SstFormatError(
            f"{where}: SST format version {version}, but this piestream reads only versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}; the data directory was written by "
            f"{'an older' if version < FORMAT_VERSION else 'a newer'} piestream. Start from a new "
            "data directory, or reload the data with the piestream that wrote it "
            '(README "Upgrading")'
        )
    return off, mlen, checksum, version


def decode_meta_and_footer(tail: bytes, meta_offset: int, where: str) -> SstableMeta:
    """Decode the bytes from `meta_offset` to the end of an SST object (meta + footer)."""
    off, mlen, checksum, version = check_footer(tail, where)
    if off != meta_offset or mlen != len(tail) - FOOTER_SIZE:
        raise DataCorruption(f"{where}: SST footer does not match its meta")
    meta = tail[:mlen]
    if xxhash.xxh64_intdigest(meta) != checksum:
        raise DataCorruption(f"{where}: SST meta checksum mismatch")
    return SstableMeta.decode(meta, where, version)


def user_key_of(full_key: bytes) -> bytes:
    return full_key[:-EPOCH_LEN]


def describe_key(full_key: bytes) -> str:
    uk, epoch = split_full_key(full_key)
    return f"{uk.hex()}@{epoch}"
