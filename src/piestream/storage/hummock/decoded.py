"""A decoded SST: what the block cache holds (reference §5.5; DESIGN "The state path is columnar").

`DecodedSstable` keeps the blocks of one SST that have been read in *one* buffer, each block's
payload at a fixed place once loaded. Slots are handed out from the front of the buffer in load
order, so the memory touched is the bytes loaded, packed, however sparse the blocks (a cold batch
of random keys reads a quarter of the blocks of a 4 KiB-block SST). An uncompressed block's slot
holds its on-disk bytes, and a run of consecutive blocks gets consecutive slots, so every run
of an SST is read straight into place by one range-read call (`read_ranges`: one kernel copy per
range, no intermediate bytes) and decodes *in place*: nothing is copied or rearranged, the
block's own key- and value-offset columns address its entries. Compressed blocks are
decompressed into their own slots.

A load of many blocks is vectorized: the checksums are one C call per block, and the block
headers of every block loaded together are checked and their search words (`w1`) computed with
a handful of numpy calls over all their entries. No per-entry arrays other than `w1` are kept:
the position of an entry's key or value is two gathers from the block's offset columns
(`key_pos`, `value_pos`), done only for the entries a lookup touches.

Search words: every key of an SST shares the prefix of its smallest and largest keys (`cp`
bytes), and ``w1[e]`` is the big-endian uint64 of the 8 key bytes after it (zero-filled past the
key's end). Word order is key order (non-strictly), so one `np.searchsorted` over `w1` finds a
batch of keys in the whole SST (`run_search`). Entries of blocks not loaded yet carry their
block's first-key word, which keeps `w1` sorted, so a search clipped to a loaded block is exact.
``w2[e]`` holds the next 8 bytes the same way, so ``(w1, w2)`` orders entries by their first 16
bytes after the prefix: a range search (`range_search`) settles the entries tied on `w1` (keys of
one vnode whose first word is the vnode and the high bytes of a number) with plain word compares.

Version 3 and later SSTs carry the search words (`sstable` module docstring): they are read and verified
whole on first use instead of computed per loaded block, and loading a block does no per-entry
work. An SST of a store that maps objects (`ObjectStore.map`: the local-directory store) is not
copied at all: the mapping is the buffer, a block's slot is its place in the object, loading a
block is checking its checksum where the OS page cache holds it, and a batched search of a
version 3 SST runs over its words first, loading only the blocks of the entries it then reads
(`load_on_demand`): a cold batch of random keys verifies the blocks it touches, once, at memory
speed. Version 4 SSTs also give the width of every key and value when all have one: then
`key_pos` and `value_pos` are arithmetic on the block's base, with no offset column read.

Scans and the single-key `get` see a block as a `Block`: Arrow arrays over the buffer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import xxhash

from piestream.common.errors import DataCorruption
from piestream.encoding.ragged import word_view
from piestream.storage.hummock.key_index import PAD, words
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.run_search import (
    SAMPLE_STRIDE,
    common_prefix,
    prefix_words,
    sampled_lower_bound,
    word_sample,
)
from piestream.storage.hummock.sstable import (
    BLOCK_TRAILER_SIZE,
    COMPRESSION_NONE,
    Block,
    SstableMeta,
    block_body,
    decompress,
)

#: Bytes per entry charged to the block cache besides the block bytes (the two search words).
ENTRY_OVERHEAD = 16

#: ``read_ranges(offsets, outs)``: fill each writable uint8 array ``outs[i]`` with SST bytes from
#: ``offsets[i]`` (one object-store call for them all: one open and a `preadv` per range locally).
ReadRanges = Callable[[list[int], list[np.ndarray]], None]


class DecodedSstable:
    """The decoded blocks of one SST, in one buffer, searchable as one sorted run."""

    def __init__(
        self,
        object_id: int,
        meta: SstableMeta,
        path: str,
        mapped: np.ndarray | None = None,
        read_ranges: ReadRanges | None = None,
    ) -> None:
        self.object_id = object_id
        self.meta = meta
        self.path = path
        nb = len(meta)
        counts = meta.key_counts
        # uncompressed blocks decode in place: a block's slot holds its on-disk bytes, and
        # consecutive blocks read together sit together; compressed blocks get slots of their
        # payload size (rounded to 8)
        self.in_place = in_place_layout(meta)
        self.room = meta.lengths.copy() if self.in_place else (meta.usizes + 7) // 8 * 8
        size = int(self.room.sum())
        # Slots are handed out in load order from the front of the buffer (`_cursor`), so the
        # memory a batch touches is what it loaded, packed: reading 1/4 of an SST's blocks
        # faults in (and the kernel zeroes) 1/4 of its size, not every page of the object.
        self._cursor = 0
        # A mapped object (`ObjectStore.map`, the whole SST, copy-on-write) *is* the buffer: a
        # block's slot is its place in the object, loading it is verifying it, and nothing is
        # copied. Word reads past a key's end stay inside the object (the meta and footer follow
        # the last block), so no padding is needed.
        self.mapped = mapped is not None and self.in_place
        if self.mapped:
            assert mapped is not None
            self.buf = mapped
        else:
            self.buf = np.empty(size + PAD, np.uint8)
            self.buf[size:] = 0
        self._u4 = word_view(self.buf, "<u4")
        self._u8 = word_view(self.buf, "<u8")
        # where each block's payload and columns start, known once loaded (payload: count |
        # key offsets | value offsets | filter lens | key bytes | value bytes)
        self.pbase = np.zeros(nb, np.int64)
        self.kobase = np.zeros(nb, np.int64)
        self.vobase = np.zeros(nb, np.int64)
        self.fbase = np.zeros(nb, np.int64)
        self.kbase = np.zeros(nb, np.int64)
        self.vbase = np.zeros(nb, np.int64)  # kbase + key bytes
        self.ebase = np.zeros(nb + 1, np.int64)
        np.cumsum(counts, out=self.ebase[1:])
        self.loaded = np.zeros(nb, np.bool_)
        self.all_loaded = nb == 0
        self.loaded_bytes = 0
        self.n_loaded = 0  # blocks loaded so far (cache accounting of on-demand loads)
        self.read_ranges = read_ranges
        # search words (see the module docstring): version 3 SSTs carry them (`sstable`), read
        # and verified whole on first use; older ones get them computed per loaded block, with
        # each block's first-key word standing in for the entries of blocks not loaded yet
        self.prefix = common_prefix(meta.smallest_key, meta.largest_key)
        self.cp = len(self.prefix)
        self.prefix_words = prefix_words(self.prefix)
        self.words_on_disk = meta.version >= 3
        # A mapped version 3 SST is searched whole before any block is loaded: the blocks of the
        # entries a search reads are loaded (verified) when it first reads them (`key_pos`).
        self.load_on_demand = self.mapped and self.words_on_disk
        self._w1: np.ndarray | None = None
        self._w2: np.ndarray | None = None
        self._sample: np.ndarray | None = None  # `lower_bound`
        if not self.words_on_disk:
            self._w1 = np.repeat(meta.block_words(), counts)
            fk = meta.index()
            cp8 = np.full(nb, self.cp + 8, np.int64)
            fw2 = words(fk.data, fk.starts + cp8, fk.lens - cp8) if nb else np.zeros(0, np.uint64)
            self._w2 = np.repeat(fw2, counts)
        self._folded: tuple[np.ndarray, int, np.ndarray] | None = None  # see `folded_words`
        self._views: dict[int, Block] = {}
        self._lock = threading.RLock()  # `folded_words` may load the words under it

    @property
    def kdata(self) -> np.ndarray:
        return self.buf

    @property
    def vdata(self) -> np.ndarray:
        return self.buf

    @property
    def w1(self) -> np.ndarray:
        if self._w1 is None:
            self._load_words()
            assert self._w1 is not None
        return self._w1

    @property
    def w2(self) -> np.ndarray:
        if self._w2 is None:
            self._load_words()
            assert self._w2 is not None
        return self._w2

    def lower_bound(self, qw: np.ndarray) -> np.ndarray:
        """``np.searchsorted(w1, qw, "left")``; sampled (`sampled_lower_bound`) once every block
        is loaded (a warm SST, searched again and again; its words are final then) and there
        are enough words. A cold search does not pay for the sample."""
        w1 = self.w1
        if len(w1) < 16 * SAMPLE_STRIDE or not self.all_loaded:
            return np.searchsorted(w1, qw, "left")
        sample = self._sample
        if sample is None:
            sample = self._sample = word_sample(w1)
        return sampled_lower_bound(w1, sample, qw)

    def _load_words(self) -> None:
        """Read (or view, mapped) and verify a version 3 SST's search words."""
        with self._lock:
            if self._w1 is not None:
                return
            # the checksum covers the padding between the last block and the words, too
            meta = self.meta
            n = int(self.ebase[-1])
            at = int(meta.offsets[-1] + meta.lengths[-1]) if len(meta) else 0
            pad = meta.words_offset - at
            if not 0 <= pad < 8:
                raise DataCorruption(f"{self.path}: search words are not after the blocks")
            size = pad + 16 * n
            if self.mapped:
                if at + size > len(self.buf):
                    raise DataCorruption(f"{self.path}: search words lie past the end of the object")
                raw = self.buf[at : at + size]
            else:
                if self.read_ranges is None:
                    raise RuntimeError("no reader for the search words")
                lead = -pad % 8  # so the words themselves land 8-byte aligned
                raw = np.empty(size + lead, np.uint8)[lead:]
                self.read_ranges([at], [raw])
            if xxhash.xxh3_64_intdigest(raw.data) != meta.words_checksum:
                raise DataCorruption(f"{self.path}: search words checksum mismatch")
            w = raw[pad:].view("<u8")
            w.flags.writeable = False  # a mapped object's pages: never written
            self._w2 = w[n:]
            self._w1 = w[:n]

    def nbytes(self) -> int:
        """Memory charged to the cache: loaded blocks plus the search words."""
        n = int(self.ebase[-1])
        folded = 8 * n if self._folded is not None else 0
        return self.loaded_bytes + (ENTRY_OVERHEAD * n + folded) + 256

    def folded_words(self) -> tuple[np.ndarray, int, np.ndarray]:
        """(`w1` and `w2` folded into one sorted uint64 per entry, the high bits of it that hold
        the rank of `w1`, the distinct values of `w1` in order): ``rank(w1) << (64 - bits) |
        w2 >> bits``, where the rank numbers `w1`'s distinct values. The folded words order
        entries as ``(w1, w2)`` does, dropping only the low `bits` bits of `w2`, so a range start
        is one search of the (few) distinct `w1` values and one of the folded words, even where
        `w1` ties (the vnode and the high bytes of a number); `w2` is looked at only where the
        folded word ties too. Built when a range search first asks, again after a load changes
        the words; charged to the cache once built."""
        f = self._folded
        if f is None:
            with self._lock:
                w1 = self.w1
                n = len(w1)
                first = np.ones(n, np.bool_)
                first[1:] = w1[1:] != w1[:-1]
                distinct = w1[first]
                rank = np.cumsum(first, dtype=np.uint64)
                rank -= np.uint64(1)
                bits = max(len(distinct).bit_length(), 1)  # room for every rank and one past
                folded = rank << np.uint64(64 - bits)
                folded |= self.w2 >> np.uint64(bits)
                f = self._folded = (folded, bits, distinct)
        return f

    def where(self, idx: int) -> str:
        return f"{self.path} block {idx}"

    def __len__(self) -> int:
        return int(self.ebase[-1])

    # -- entries --------------------------------------------------------------------------------
    def block_of(self, e: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.ebase, e, "right") - 1

    def key_pos(self, e: np.ndarray, blk: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(start in `buf`, length) of the keys of entries `e` (of loaded blocks, or of any
        block when loaded on demand)."""
        b = self.block_of(e) if blk is None else blk
        if self.load_on_demand and not self.all_loaded:
            self._load_entries(b)
        kw = self.meta.key_width
        if kw:  # every key has this length (version 4): no offset column to read
            return self.kbase[b] + kw * (e - self.ebase[b]), np.full(len(e), kw, np.int64)
        pair = self._u8[self.kobase[b] + 4 * (e - self.ebase[b])]
        s = (pair & np.uint64(0xFFFFFFFF)).astype(np.int64)
        return self.kbase[b] + s, (pair >> np.uint64(32)).astype(np.int64) - s

    def value_pos(self, e: np.ndarray, blk: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(start in `buf`, length) of the values of entries `e` (of loaded blocks, or of any
        block when loaded on demand)."""
        b = self.block_of(e) if blk is None else blk
        if self.load_on_demand and not self.all_loaded:
            self._load_entries(b)
        vw = self.meta.value_width
        if vw:  # every value has this length (version 4)
            return self.vbase[b] + vw * (e - self.ebase[b]), np.full(len(e), vw, np.int64)
        pair = self._u8[self.vobase[b] + 4 * (e - self.ebase[b])]
        s = (pair & np.uint64(0xFFFFFFFF)).astype(np.int64)
        return self.vbase[b] + s, (pair >> np.uint64(32)).astype(np.int64) - s

    # -- loading --------------------------------------------------------------------------------
    def _load_entries(self, blk: np.ndarray) -> None:
        """Load (verify, mapped) the blocks `blk` of entries a search is about to read."""
        missing = blk[~self.loaded[blk]]
        if len(missing):
            self.ensure(missing)

    def ensure(self, blocks: Sequence[int] | np.ndarray, read_ranges: ReadRanges | None = None) -> int:
        """Load the given blocks that are not loaded yet: one `read_ranges` call reads each run of
        consecutive missing blocks as one range; the rest is vectorized over every block of the
        call. Returns how many blocks were loaded."""
        want = np.asarray(blocks, np.int64)
        if not len(want) or self.all_loaded:
            return 0
        want = np.unique(want)
        missing = want[~self.loaded[want]]
        if not len(missing):
            return 0
        with self._lock:
            missing = missing[~self.loaded[missing]]
            if not len(missing):
                return 0
            reader = read_ranges if read_ranges is not None else self.read_ranges
            if reader is None and not self.mapped:
                raise RuntimeError("no reader for the blocks")
            self._load(missing, reader or _no_reads)
            self.loaded[missing] = True
            self.n_loaded += len(missing)
            self.loaded_bytes += int(self.meta.usizes[missing].sum())
            self.all_loaded = bool(self.loaded.all())
            return len(missing)

    def _place(self, blocks: np.ndarray) -> None:
        """Give `blocks` (sorted, not loaded) their slots: the next `room` bytes of the buffer
        each, in block order, so a run of consecutive blocks is one contiguous range."""
        if self.mapped:
            at = self.meta.offsets[blocks]
        else:
            room = self.room[blocks]
            at = np.cumsum(room)
            at -= room
            at += self._cursor
            self._cursor += int(room.sum())
        counts = self.meta.key_counts[blocks]
        self.pbase[blocks] = at
        self.kobase[blocks] = at + 4
        self.vobase[blocks] = at + 4 + 4 * (counts + 1)
        self.fbase[blocks] = at + 4 + 8 * (counts + 1)
        self.kbase[blocks] = at + 4 + 8 * (counts + 1) + 2 * counts

    def _load(self, blocks: np.ndarray, read_ranges: ReadRanges) -> None:
        meta = self.meta
        offs, lens = meta.offsets, meta.lengths
        breaks = np.flatnonzero(np.diff(blocks) != 1) + 1
        first = blocks[np.concatenate([[0], breaks])]
        last = blocks[np.append(breaks - 1, len(blocks) - 1)]
        starts = offs[first].tolist()
        ends = (offs[last] + lens[last]).tolist()
        cursor = self._cursor
        try:
            self._fill(blocks, breaks, first, starts, ends, read_ranges)
            self._decode(blocks)
        except BaseException:
            self._cursor = cursor  # the slots stay free: these blocks are not loaded
            raise

    def _fill(
        self,
        blocks: np.ndarray,
        breaks: np.ndarray,
        first: np.ndarray,
        starts: list[int],
        ends: list[int],
        read_ranges: ReadRanges,
    ) -> None:
        """Place, read and verify `blocks` (runs of consecutive blocks start at `breaks` and span
        the object bytes [starts[i], ends[i]))."""
        meta = self.meta
        offs, lens = meta.offsets, meta.lengths
        self._place(blocks)
        if self.mapped:  # the bytes are in place already
            self._verify_in_place(blocks)
        elif self.in_place:
            buf = self.buf
            # one range per run of consecutive blocks, read straight into its slots
            at = self.pbase[first].tolist()
            read_ranges(starts, [buf[p : p + z - a] for p, a, z in zip(at, starts, ends, strict=True)])
            self._verify_in_place(blocks)
        else:
            raws = [np.empty(z - a, np.uint8) for a, z in zip(starts, ends, strict=True)]
            read_ranges(starts, raws)
            for run, a, raw in zip(np.split(blocks, breaks), starts, raws, strict=True):
                for b in run.tolist():  # per block: checksum and decompression are C calls
                    at = int(offs[b]) - a
                    payload = _verified_payload(raw[at : at + int(lens[b])], self.where(b), meta.version)
                    if len(payload) != int(meta.usizes[b]):
                        want = int(meta.usizes[b])
                        raise DataCorruption(
                            f"{self.where(b)}: block is {len(payload)} bytes, the index says {want}"
                        )
                    p = int(self.pbase[b])
                    self.buf[p : p + len(payload)] = np.frombuffer(payload, np.uint8)

    def _verify_in_place(self, blocks: np.ndarray) -> None:
        """Checksums of blocks read into place; a (rare) compressed block is decompressed into
        its place, which its uncompressed size fills exactly."""
        meta = self.meta
        body = self.pbase[blocks]
        blen = meta.lengths[blocks] - BLOCK_TRAILER_SIZE
        comp = self.buf[body + blen]
        stored = self._u8[body + blen + 1]
        mv = self.buf.data
        if meta.version == 1:  # xxh64(body + compression byte)
            sums = [
                xxhash.xxh64_intdigest(mv[s : s + n + 1])
                for s, n in zip(body.tolist(), blen.tolist(), strict=True)
            ]  # one C call per block
        else:  # xxh3_64 (version 3) or xxh64 (2) of the body, seeded with the compression code
            h = xxhash.xxh3_64_intdigest if meta.version >= 3 else xxhash.xxh64_intdigest
            bl = zip(body.tolist(), blen.tolist(), comp.tolist(), strict=True)
            sums = [h(mv[s : s + n], c) for s, n, c in bl]  # one C call per block
        bad = np.flatnonzero(np.asarray(sums, np.uint64) != stored)
        if len(bad):
            raise DataCorruption(f"{self.where(int(blocks[bad[0]]))}: block checksum mismatch")
        for i in np.flatnonzero(comp != COMPRESSION_NONE).tolist():  # compressed blocks, if any
            b, s, n = int(blocks[i]), int(body[i]), int(blen[i])
            payload = decompress(mv[s : s + n], int(comp[i]), self.where(b))
            if len(payload) != n:
                raise DataCorruption(f"{self.where(b)}: block is {len(payload)} bytes, the index says {n}")
            self.buf[s : s + n] = np.frombuffer(payload, np.uint8)

    def _decode(self, blocks: np.ndarray) -> None:
        """Check the layout of loaded blocks and compute their search words, all at once."""
        meta = self.meta
        n = meta.key_counts[blocks]
        usize = meta.usizes[blocks]
        p = self.pbase[blocks]
        head = 4 + 8 * (n + 1) + 2 * n
        if np.any(usize < head):
            b = int(blocks[np.argmax(usize < head)])
            raise DataCorruption(f"{self.where(b)}: key count differs from the index")
        u4 = self._u4
        ko_end = u4[self.kobase[blocks] + 4 * n].astype(np.int64)
        vo_end = u4[self.vobase[blocks] + 4 * n].astype(np.int64)
        bad = (u4[p] != n) | (u4[self.kobase[blocks]] != 0) | (u4[self.vobase[blocks]] != 0)
        bad |= head + ko_end + vo_end != usize
        # version 4 widths: lookups place entries by them (`key_pos`), so the block's key and value
        # bytes must be exactly count x width (its offset columns are what scans read)
        if meta.key_width:
            bad |= ko_end != n * meta.key_width
        if meta.value_width:
            bad |= vo_end != n * meta.value_width
        if bad.any():
            b = int(blocks[np.argmax(bad)])
            if u4[int(self.pbase[b])] != meta.key_counts[b]:
                raise DataCorruption(f"{self.where(b)}: key count differs from the index")
            raise DataCorruption(f"{self.where(b)}: block layout is inconsistent")
        self.vbase[blocks] = self.kbase[blocks] + ko_end
        if self.words_on_disk:
            # version 3: the words come with the SST, and no per-entry work is done at load; a
            # block's entry offsets are checked where Arrow views of it are made (`batch`), and
            # the vector search reads through numpy, which bounds-checks every gather
            return
        # every entry of these blocks: its key- and value-offset pairs (one 8-byte gather each,
        # no per-entry block lookups), offsets non-decreasing, then its search word
        total = int(n.sum())
        if not total:
            return
        first = self.ebase[blocks]
        if len(blocks) == int(blocks[-1] - blocks[0]) + 1:  # a run of consecutive blocks
            e = np.arange(int(first[0]), int(first[0]) + total, dtype=np.int64)
        else:
            e = np.repeat(first - (np.cumsum(n) - n), n) + np.arange(total, dtype=np.int64)
        at = np.repeat(self.kobase[blocks] - 4 * first, n)
        at += 4 * e
        mask = np.uint64(0xFFFFFFFF)
        kpair = self._u8[at]
        at += np.repeat(self.vobase[blocks] - self.kobase[blocks], n)
        vpair = self._u8[at]
        kst = kpair & mask
        kend = kpair >> np.uint64(32)
        bad = kend < kst
        bad |= (vpair >> np.uint64(32)) < (vpair & mask)
        if bad.any():
            b = int(blocks[np.searchsorted(np.cumsum(n), int(np.argmax(bad)), "right")])
            raise DataCorruption(f"{self.where(b)}: block layout is inconsistent")
        ks = np.repeat(self.kbase[blocks] + self.cp, n)
        ks += kst.astype(np.int64)
        kl = (kend - kst).astype(np.int64)
        kl -= self.cp
        self.w1[e] = words(self.buf, ks, kl)
        self.w2[e] = words(self.buf, ks + 8, kl - 8)
        self._folded = None

    # -- views ----------------------------------------------------------------------------------
    def block(self, idx: int) -> Block:
        """Block `idx` (loaded) as Arrow views over the buffer."""
        b = self._views.get(idx)
        if b is None:
            if not self.loaded[idx]:
                raise RuntimeError("block not loaded")
            b = Block(self.batch(idx), int(self.meta.usizes[idx]))
            self._views[idx] = b
        return b

    def batch(self, idx: int) -> KvBatch:
        """The entries of loaded block `idx` as a KvBatch viewing the buffer."""
        n = int(self.meta.key_counts[idx])
        if n == 0:
            return KvBatch.empty()
        buf = self.buf
        ko = self._u4[self.kobase[idx] + 4 * np.arange(n + 1)].astype(np.int32)
        vo = self._u4[self.vobase[idx] + 4 * np.arange(n + 1)].astype(np.int32)
        if np.any(ko[1:] < ko[:-1]) or np.any(vo[1:] < vo[:-1]):  # Arrow trusts its offsets
            raise DataCorruption(f"{self.where(idx)}: block layout is inconsistent")
        kb, vb, fb = int(self.kbase[idx]), int(self.vbase[idx]), int(self.fbase[idx])
        keys = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(ko), pa.py_buffer(buf[kb : kb + int(ko[-1])])]
        )
        values = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(vo), pa.py_buffer(buf[vb : vb + int(vo[-1])])]
        )
        flens = buf[fb : fb + 2 * n].view("<u2") if fb % 2 == 0 else buf[fb : fb + 2 * n].copy().view("<u2")
        return KvBatch(keys, values, flens)

    def run_batch(self, lo: int, hi: int) -> KvBatch:
        """The entries of loaded blocks [lo, hi) as one KvBatch (a copy of their key and value
        bytes): what `batch` of each block then `KvBatch.concat` give, with a few numpy calls
        for the whole run instead of a dozen per block. The run must fit int32 offsets."""
        if hi - lo == 1:
            return self.batch(lo)
        blocks = np.arange(lo, hi, dtype=np.int64)
        if not self.loaded[blocks].all():
            raise RuntimeError("block not loaded")
        n = self.meta.key_counts[blocks].astype(np.int64)
        total = int(n.sum())
        if total == 0:
            return KvBatch.empty()
        # every block's n + 1 key and value offsets, gathered for the whole run
        w = n + 1
        wstart = np.cumsum(w) - w
        blk = np.repeat(np.arange(len(blocks)), w)  # the block (of the run) of each offset
        j = np.arange(int(w.sum()), dtype=np.int64) - wstart[blk]
        ko = self._u4[self.kobase[blocks][blk] + 4 * j].astype(np.int64)
        vo = self._u4[self.vobase[blocks][blk] + 4 * j].astype(np.int64)
        bad = ((ko[1:] < ko[:-1]) | (vo[1:] < vo[:-1])) & (j[1:] != 0)  # Arrow trusts its offsets
        if bad.any():
            b = int(blocks[blk[int(np.argmax(bad)) + 1]])
            raise DataCorruption(f"{self.where(b)}: block layout is inconsistent")
        kend, vend = ko[wstart + n], vo[wstart + n]  # each block's key / value bytes
        ktotal, vtotal = int(kend.sum()), int(vend.sum())
        if max(ktotal, vtotal) >= 2**31:
            raise ValueError("a run of blocks too large for one batch")
        entry = j != n[blk]  # every offset but each block's last
        koff = np.empty(total + 1, np.int32)
        voff = np.empty(total + 1, np.int32)
        koff[:total] = (ko + (np.cumsum(kend) - kend)[blk])[entry]
        voff[:total] = (vo + (np.cumsum(vend) - vend)[blk])[entry]
        koff[total], voff[total] = ktotal, vtotal
        buf = self.buf
        kb, vb, fb = self.kbase[blocks].tolist(), self.vbase[blocks].tolist(), self.fbase[blocks].tolist()
        # one slice per block (a run is a few dozen blocks)
        kdata = np.concatenate([buf[a : a + z] for a, z in zip(kb, kend.tolist(), strict=True)])
        vdata = np.concatenate([buf[a : a + z] for a, z in zip(vb, vend.tolist(), strict=True)])
        flens = np.concatenate([buf[a : a + 2 * c] for a, c in zip(fb, n.tolist(), strict=True)]).view("<u2")
        keys = pa.Array.from_buffers(pa.binary(), total, [None, pa.py_buffer(koff), pa.py_buffer(kdata)])
        values = pa.Array.from_buffers(pa.binary(), total, [None, pa.py_buffer(voff), pa.py_buffer(vdata)])
        return KvBatch(keys, values, flens)


def _no_reads(offsets: list[int], outs: list[np.ndarray]) -> None:
    raise RuntimeError("a mapped SST reads nothing")


def in_place_layout(meta: SstableMeta) -> bool:
    """Whether an SST's blocks decode in place: every block's on-disk length is its payload
    plus the trailer (uncompressed; a compressed block of that length is decompressed into its
    own bytes)."""
    return bool(len(meta)) and bool(np.all(meta.lengths == meta.usizes + BLOCK_TRAILER_SIZE))


def _verified_payload(raw: np.ndarray, where: str, version: int) -> bytes | memoryview:
    return block_body(raw.data, where, version)
