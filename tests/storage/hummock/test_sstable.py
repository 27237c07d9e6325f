"""The SST object format: blocks, meta, footer, filters, splitting, caches and corruption.

Every round trip compares against the plain Python list of (full key, value) pairs it was built
from; every corruption test flips real bytes of a stored object and reads it back through a cold
`SstableStore`, the way a fresh Spark worker would.
"""

from __future__ import annotations

import itertools
import os
import random
import struct
import uuid
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from piestream.common.errors import DataCorruption
from piestream.encoding.keys import full_key, split_full_key, user_key
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.cache import LruCache
from piestream.storage.hummock.filter import BloomFilter
from piestream.storage.hummock.iterators import SstableIterator
from piestream.storage.hummock.key_index import padded_ragged
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.sstable import (
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    FOOTER_SIZE,
    MAGIC,
    SstableMeta,
    block_checksum,
    compression_code,
    decode_block,
    decode_meta_and_footer,
    encode_block,
)
from piestream.storage.hummock.sstable_builder import (
    BuiltSstable,
    block_bounds,
    build_sstable,
    split_at_user_keys,
)
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.hummock.version import HummockVersion, Level, SstableInfo
from piestream.storage.object_store import InMemoryObjectStore, LocalObjectStore, ObjectStore

COMPRESSIONS = [COMPRESSION_NONE, COMPRESSION_LZ4, COMPRESSION_ZSTD]
E = 1 << 16  # the first barrier epoch of the tests


def epoch(i: int) -> int:
    return (1000 + i) << 16


def make_pairs(
    n_keys: int,
    *,
    seed: int = 0,
    versions: int = 1,
    tables: tuple[int, ...] = (1,),
    value_len: tuple[int, int] = (0, 40),
    tombstone_rate: float = 0.1,
) -> list[tuple[bytes, bytes]]:
    """Sorted, unique (full key, HummockValue) pairs: `n_keys` user keys (8-byte pks, so user keys
    are prefix-free), up to `versions` versions each at distinct epochs."""
    rng = random.Random(seed)
    pairs = []
    for t in tables:
        pks = sorted(rng.sample(range(1 << 40), n_keys))
        for pk in pks:
            uk = user_key(t, pk % 7, pk.to_bytes(8, "big"))
            for e in rng.sample(range(1, 50), rng.randint(1, versions)):
                if rng.random() < tombstone_rate:
                    v = TOMBSTONE
                else:
                    v = put_value(rng.randbytes(rng.randint(*value_len)))
                pairs.append((full_key(uk, epoch(e)), v))
    pairs.sort()
    return pairs


def batch_of(pairs: list[tuple[bytes, bytes]], filter_len: int = 4) -> KvBatch:
    return KvBatch.from_pairs(pairs, [filter_len] * len(pairs))


def new_store() -> InMemoryObjectStore:
    return InMemoryObjectStore(f"sst-{uuid.uuid4().hex}")


def decoded_pairs(built: BuiltSstable) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    for bm in built.meta.blocks:
        out += decode_block(built.data[bm.offset : bm.offset + bm.length], "t").batch.to_pairs()
    return out


# --- blocks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_block_round_trip(compression: int) -> None:
    pairs = make_pairs(300, versions=3, value_len=(0, 300))
    flens = [i % 5 for i in range(len(pairs))]
    batch = KvBatch.from_pairs(pairs, flens)
    raw = encode_block(batch, compression)
    assert raw[-9] == compression  # the trailer names the compression
    block = decode_block(raw, "obj block 0")
    assert block.batch.to_pairs() == pairs
    assert block.batch.filter_lens.tolist() == flens
    assert len(block) == len(pairs)
    # point lookups inside the block
    keys = [k for k, _ in pairs]
    for i in range(0, len(pairs), 17):
        assert block.seek(keys[i]) == i
        assert block.value_at(i) == pairs[i][1]
    assert block.seek(b"\xff" * 30) == len(pairs)
    assert block.seek(b"") == 0


def test_block_compression_shrinks_compressible_data() -> None:
    pairs = [(full_key(user_key(1, 0, i.to_bytes(8, "big")), E), put_value(b"abc" * 30)) for i in range(500)]
    batch = batch_of(pairs)
    sizes = {c: len(encode_block(batch, c)) for c in COMPRESSIONS}
    assert sizes[COMPRESSION_LZ4] < sizes[COMPRESSION_NONE] / 3
    assert sizes[COMPRESSION_ZSTD] < sizes[COMPRESSION_NONE] / 3
    for c in COMPRESSIONS:
        assert decode_block(encode_block(batch, c), "x").batch.to_pairs() == pairs


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_block_of_a_slice_and_of_nothing(compression: int) -> None:
    pairs = make_pairs(100)
    batch = batch_of(pairs)
    sub = batch.slice(37, 21)  # non-zero Arrow offsets
    assert decode_block(encode_block(sub, compression), "x").batch.to_pairs() == pairs[37:58]
    empty = decode_block(encode_block(KvBatch.empty(), compression), "x")
    assert len(empty) == 0
    assert empty.batch.to_pairs() == []


@given(
    entries=st.lists(
        st.tuples(st.binary(min_size=1, max_size=40), st.binary(max_size=200), st.integers(0, 40)),
        max_size=60,
        unique_by=lambda t: t[0],
    ),
    compression=st.sampled_from(COMPRESSIONS),
)
@settings(max_examples=60, deadline=None)
def test_block_round_trip_arbitrary_bytes(entries: list[tuple[bytes, bytes, int]], compression: int) -> None:
    entries.sort()
    batch = KvBatch.from_pairs([(k, v) for k, v, _ in entries], [f for _, _, f in entries])
    got = decode_block(encode_block(batch, compression), "x").batch
    assert got.to_pairs() == [(k, v) for k, v, _ in entries]
    assert got.filter_lens.tolist() == [f for _, _, f in entries]


def test_compression_names() -> None:
    assert [compression_code(n) for n in ("none", "lz4", "zstd")] == COMPRESSIONS
    with pytest.raises(ValueError, match="snappy"):
        compression_code("snappy")


# --- SST build + meta ---------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_build_sstable_round_trip(compression: int) -> None:
    pairs = make_pairs(400, versions=3, tables=(3, 1, 2))
    batch = batch_of(pairs)
    built = build_sstable(batch, block_size=1024, compression=compression)
    m = built.meta
    assert len(m.blocks) > 10
    assert sum(b.key_count for b in m.blocks) == m.key_count == len(pairs)
    assert m.smallest_key == pairs[0][0] and m.largest_key == pairs[-1][0]
    epochs = [split_full_key(k)[1] for k, _ in pairs]
    assert (m.min_epoch, m.max_epoch) == (min(epochs), max(epochs))
    assert m.table_ids == [1, 2, 3]
    assert m.unfiltered_table_ids == []
    # blocks tile the data region, in order, and hold exactly the input
    assert m.blocks[0].offset == 0
    for a, b in zip(m.blocks, m.blocks[1:], strict=False):
        assert a.offset + a.length == b.offset
    # then, 8-byte aligned, the search words (w1 of every entry, then w2), then the meta
    blocks_end = m.blocks[-1].offset + m.blocks[-1].length
    assert m.words_offset == blocks_end + (-blocks_end % 8)
    assert built.meta_offset == m.words_offset + 16 * len(pairs)
    on_disk = np.frombuffer(built.data[m.words_offset : built.meta_offset], "<u8")
    first, last = pairs[0][0], pairs[-1][0]
    short = min(len(first), len(last))
    cp = next((i for i in range(short) if first[i] != last[i]), short)  # the shared prefix
    padded_keys = [k[cp:] + b"\x00" * 16 for k, _ in pairs]
    assert on_disk[: len(pairs)].tolist() == [int.from_bytes(k[:8], "big") for k in padded_keys]
    assert on_disk[len(pairs) :].tolist() == [int.from_bytes(k[8:16], "big") for k in padded_keys]
    gap = built.data[blocks_end : built.meta_offset]  # padding and words: one checksum
    assert xxhash.xxh3_64_intdigest(gap) == m.words_checksum
    assert decoded_pairs(built) == pairs
    starts = np.cumsum([0] + [b.key_count for b in m.blocks[:-1]])
    assert [b.first_key for b in m.blocks] == [pairs[i][0] for i in starts]
    # meta survives encode/decode, and the footer locates it
    again = decode_meta_and_footer(built.data[built.meta_offset :], built.meta_offset, "x")
    for field in (
        "blocks",
        "smallest_key",
        "largest_key",
        "key_count",
        "min_epoch",
        "max_epoch",
        "table_ids",
        "version",
        "words_offset",
        "words_checksum",
    ):
        assert getattr(again, field) == getattr(m, field), field
    assert again.bloom.to_bytes() == m.bloom.to_bytes()
    assert SstableMeta.decode(m.encode(), "x").blocks == m.blocks
    assert len(built.data) - built.meta_offset == len(m.encode()) + FOOTER_SIZE


def test_block_size_bounds_blocks() -> None:
    pairs = make_pairs(2000, value_len=(20, 60))
    built = build_sstable(batch_of(pairs), block_size=4096)
    sizes = [b.uncompressed_size for b in built.meta.blocks]
    assert max(sizes) <= 4096 + 200  # one entry of overshoot at most
    assert sum(sizes[:-1]) / len(sizes[:-1]) > 2048
    assert decoded_pairs(built) == pairs


def test_one_entry_larger_than_a_block() -> None:
    big = put_value(b"x" * 100_000)
    pairs = [(full_key(user_key(1, 0, bytes([i]) * 8), E), big) for i in range(3)]
    built = build_sstable(batch_of(pairs), block_size=4096)
    assert len(built.meta.blocks) == 3
    assert decoded_pairs(built) == pairs


def test_table_block_sizes_cut_each_tables_blocks_by_its_own_size() -> None:
    """A table with its own block size gets blocks of that size in an SST it shares with
    other tables, blocks never straddle a table boundary, and the entries read back unchanged."""
    pairs = make_pairs(3000, tables=(1, 2, 5), value_len=(20, 60), tombstone_rate=0.0)
    batch = batch_of(pairs, filter_len=8)
    built = build_sstable(batch, block_size=4096, table_block_sizes={2: 256})
    assert decoded_pairs(built) == pairs
    tables = [split_full_key(k)[0][:4] for k, _ in pairs]
    ends = np.cumsum([b.key_count for b in built.meta.blocks])
    starts = ends - [b.key_count for b in built.meta.blocks]
    by_table: dict[bytes, list[int]] = {}
    for s, e, b in zip(starts, ends, built.meta.blocks, strict=True):
        assert len(set(tables[s:e])) == 1, "a block straddles two tables"
        by_table.setdefault(tables[s], []).append(b.uncompressed_size)
    small, big = by_table[(2).to_bytes(4, "big")], by_table[(1).to_bytes(4, "big")]
    assert max(small) <= 256 + 200 and len(small) > 20
    assert max(big[:-1]) <= 4096 + 200 and min(big[:-1]) > 2048
    # point gets and multi_get through the small blocks
    store = SstableStore(new_store())
    info = store.upload(built)
    hs = HummockStorage(
        store, HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=epoch(60))
    )
    some = pairs[::7]
    keys = [k[:-8] for k, _ in some]
    assert [hs.get(k, filter_len=8) for k in keys] == [v[1:] for _, v in some]
    store.block_cache.clear()
    assert hs.multi_get(keys, filter_lens=[8] * len(keys)) == [v[1:] for _, v in some]


def test_table_block_sizes_of_other_tables_change_nothing() -> None:
    batch = batch_of(make_pairs(2000, tables=(1, 2), value_len=(20, 60)))
    plain = build_sstable(batch, block_size=1024)
    other = build_sstable(batch, block_size=1024, table_block_sizes={7: 128})
    assert other.data == plain.data
    assert np.array_equal(block_bounds(batch, 1024, {7: 128}), block_bounds(batch, 1024))


def test_meta_route_by_words_agrees_with_the_byte_wise_route() -> None:
    """`SstableMeta.route` (one searchsorted over block words, byte compares for ties) sends
    every target where the byte-wise `KeyIndex` route does: block first keys at older, equal
    and newer epochs, keys with many versions spanning blocks, and keys between."""
    pairs = make_pairs(1500, versions=6, tombstone_rate=0.0)
    meta = build_sstable(batch_of(pairs), block_size=300).meta
    rng = random.Random(3)
    targets = []
    for fk in meta.first_keys:
        uk, e = split_full_key(fk)
        targets += [full_key(uk, max(e + d, 0)) for d in (-(1 << 16), 0, 1 << 16)]
    targets += [full_key(split_full_key(k)[0], epoch(rng.randint(0, 60))) for k, _ in rng.sample(pairs, 500)]
    targets = sorted(t for t in targets if t[:6] == meta.smallest_key[:6])
    q = Ragged.from_list(targets)
    data, starts, lens = padded_ragged(q)
    assert np.array_equal(meta.route(data, starts, lens), meta.index().route(data, starts, lens))


def test_build_empty_sstable_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        build_sstable(KvBatch.empty())


def test_unfiltered_tables_are_recorded() -> None:
    pairs = make_pairs(50, tables=(1, 2, 5))
    flens = [0 if split_full_key(k)[0][:4] == b"\x00\x00\x00\x02" else 4 for k, _ in pairs]
    built = build_sstable(KvBatch.from_pairs(pairs, flens))
    assert built.meta.unfiltered_table_ids == [2]
    assert built.meta.may_contain_prefix(b"\x00\x00\x00\x02 anything", 2)


def test_block_index_lookup() -> None:
    """`block_for(k)` is the block whose first key <= k < the next block's first key."""
    pairs = make_pairs(1500, versions=2)
    built = build_sstable(batch_of(pairs), block_size=2048)
    m = built.meta
    firsts = [b.first_key for b in m.blocks]
    rng = random.Random(7)
    probes = [k for k, _ in rng.sample(pairs, 300)] + [rng.randbytes(22) for _ in range(300)]
    probes += [b"", b"\xff" * 30, *firsts]
    store = SstableStore(new_store())
    info = store.upload(built)
    keys = [k for k, _ in pairs]
    for p in probes:
        i = m.block_for(p)
        if p < firsts[0]:
            assert i == -1
            continue
        assert firsts[i] <= p
        assert i == len(firsts) - 1 or p < firsts[i + 1]
        # the first entry >= p is in block i or starts block i + 1
        want = next((k for k in keys if k >= p), None)
        block = store.block(info, i)
        j = block.seek(p)
        got = block.key_list()[j] if j < len(block) else (firsts[i + 1] if i + 1 < len(firsts) else None)
        assert got == want


# --- split_at_user_keys --------------------------------------------------------------------------


@given(
    spec=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 120)), min_size=1, max_size=80),
    target=st.integers(1, 3000),
)
@settings(max_examples=150, deadline=None)
def test_split_at_user_keys_never_splits_a_user_key(spec: list[tuple[int, int]], target: int) -> None:
    pairs = []
    for i, (nv, vlen) in enumerate(spec):
        uk = user_key(1, 0, i.to_bytes(4, "big"))
        pairs += [(full_key(uk, epoch(50 - j)), put_value(b"v" * vlen)) for j in range(nv)]
    batch = batch_of(sorted(pairs))
    pieces = split_at_user_keys(batch, target)
    assert [p for piece in pieces for p in piece.to_pairs()] == batch.to_pairs()
    assert all(len(p) for p in pieces)
    uks = [set(p.user_keys().to_pylist()) for p in pieces]
    for a, b in itertools.pairwise(uks):
        assert not a & b
    sizes = [int(p.entry_sizes().sum()) for p in pieces]
    group = max(nv * (18 + 1 + vlen + 10) for nv, vlen in spec)  # key, tag, value, overhead
    for s in sizes:
        assert s <= target + group  # a piece only overshoots to finish its last user key
    for piece_size in sizes[:-1]:
        assert piece_size + group > target  # nor cuts early
    if int(batch.entry_sizes().sum()) > target + 2 * group:
        assert len(pieces) > 1


def test_split_empty_and_small() -> None:
    assert split_at_user_keys(KvBatch.empty(), 10) == []
    b = batch_of(make_pairs(10))
    assert split_at_user_keys(b, 1 << 30)[0].to_pairs() == b.to_pairs()


# --- filters -------------------------------------------------------------------------------------


def test_bloom_no_false_negatives_and_low_fpr() -> None:
    rng = np.random.default_rng(3)
    n = 100_000
    present = rng.integers(0, 2**64, n, dtype=np.uint64)
    absent = rng.integers(0, 2**64, n, dtype=np.uint64)
    absent = absent[~np.isin(absent, present)]
    f = BloomFilter.build(present, 10)
    assert f.may_contain_many(present).all()
    fpr = float(f.may_contain_many(absent).mean())
    assert fpr < 0.03, fpr
    assert fpr > 0.0001  # a Bloom filter that says "no" to everything would pass the line above
    # the scalar probe agrees with the vectorized one
    for h in list(present[:500]) + list(absent[:2000]):
        assert f.may_contain_hash(int(h)) == bool(f.may_contain_many(np.array([h], np.uint64))[0])
    again = BloomFilter.from_bytes(f.to_bytes())
    assert again.may_contain_many(present).all()
    assert (again.may_contain_many(absent) == f.may_contain_many(absent)).all()


def test_bloom_of_keys_through_sst_filters() -> None:
    """Keys added through an SST's per-entry filter lengths are found by the prefix probe."""
    pairs = make_pairs(5000, tables=(1, 9))
    built = build_sstable(batch_of(pairs, filter_len=8), bits_per_key=10)
    m = built.meta
    prefixes = {k[:14] for k, _ in pairs}
    assert all(m.may_contain_prefix(p, int.from_bytes(p[:4], "big")) for p in prefixes)
    rng = random.Random(1)
    misses = [user_key(1, 3, rng.randbytes(8)) for _ in range(20_000)]
    fp = sum(m.may_contain_prefix(k, 1) for k in misses if k not in prefixes) / len(misses)
    assert fp < 0.03, fp


def test_bloom_empty_and_corrupt_header() -> None:
    f = BloomFilter.build(np.zeros(0, np.uint64))
    assert not f.may_contain(b"anything")
    with pytest.raises(DataCorruption):
        BloomFilter.from_bytes(b"\x01")
    with pytest.raises(DataCorruption):
        BloomFilter.from_bytes(struct.pack("<IB", 128, 7) + b"\x00" * 8)


def test_point_get_skips_ssts_by_filter() -> None:
    """A get with a filter length reads no block of an SST whose filter rules the key out."""
    store = SstableStore(new_store())
    pairs = make_pairs(500)
    info = store.upload(build_sstable(batch_of(pairs, filter_len=8), block_size=1024))
    version = HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=epoch(60))
    hs = HummockStorage(store, version)
    for k, _ in pairs[:50]:
        uk = k[:-8]
        got = hs.get(uk, filter_len=8)
        want_full = next(val for kk, val in pairs if kk[:-8] == uk)  # newest version first
        assert got == (None if want_full == TOMBSTONE else want_full[1:])
    store.block_cache.clear()
    store.block_cache.hits = store.block_cache.misses = 0
    rng = random.Random(5)
    absent = [user_key(1, 0, rng.randbytes(8)) for _ in range(300)]
    assert all(hs.get(k, filter_len=8) is None for k in absent)
    # only Bloom false positives (~1%) may read a block
    assert store.block_cache.misses < 15


def test_get_and_multi_get_agree_when_filter_len_exceeds_the_key() -> None:
    """A filter length longer than a key's pk must not make `multi_get` read past the key (get
    clamps the prefix to the key; multi_get must do the same, not hash the next key's bytes)."""
    store = SstableStore(new_store())
    keys = [user_key(1, 0, bytes([i, i])) for i in range(50)]
    pairs = [(full_key(k, E), put_value(b"v%d" % i)) for i, k in enumerate(keys)]
    info = store.upload(build_sstable(KvBatch.from_pairs(pairs, [2] * 50)))
    hs = HummockStorage(store, HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=E))
    want = [b"v%d" % i for i in range(50)]
    assert [hs.get(k, filter_len=2) for k in keys] == want
    assert hs.multi_get(keys, filter_lens=[2] * 50) == want
    assert [hs.get(k, filter_len=4) for k in keys] == want
    assert hs.multi_get(keys, filter_lens=[4] * 50) == want


# --- caches and the SST store --------------------------------------------------------------------


def test_lru_cache_bounds_bytes_and_evicts_least_recent() -> None:
    c: LruCache[bytes] = LruCache(100, len)
    for i in range(5):
        c.put(i, b"x" * 30)
    assert c.used_bytes <= 100
    assert len(c) == 3
    assert c.get(0) is None and c.get(1) is None
    assert c.get(2) == b"x" * 30  # 2 is now most recent
    c.put(9, b"y" * 30)
    assert c.get(3) is None and c.get(2) is not None
    c.put(10, b"z" * 1000)  # larger than the cache: not kept
    assert c.get(10) is None
    assert c.used_bytes <= 100
    c.put(2, b"w" * 10)  # replacing adjusts the size
    assert c.get(2) == b"w" * 10
    assert c.used_bytes == sum(len(c.get(k) or b"") for k in (2, 4, 9))
    assert c.hits > 0 and c.misses > 0 and 0 < c.hit_rate() < 1
    calls = []
    assert c.get_or_load("k", lambda: calls.append(1) or b"v") == b"v"
    assert c.get_or_load("k", lambda: calls.append(1) or b"v") == b"v"
    assert calls == [1]
    c.evict_where(lambda k: k == "k")
    assert c.get("k") is None
    c.clear()
    assert len(c) == 0 and c.used_bytes == 0


class CountingStore(InMemoryObjectStore):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.reads = 0

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        self.reads += 1
        return super().get_range(path, offset, length)


def test_sparse_block_loads_are_packed_and_read_in_one_call_per_load() -> None:
    """Blocks loaded apart sit together at the front of the decoded buffer (a sparse cold load
    touches only what it read), each load reads its runs of blocks in one object-store call, and
    a load that fails its checksum leaves its slots free and its blocks unloaded."""
    obj = CountingStore(f"count-{uuid.uuid4().hex}")
    calls: list[int] = []
    read_ranges = obj.read_ranges_into

    def counted(path: str, offsets: list[int], outs: list[memoryview]) -> None:
        calls.append(len(offsets))
        read_ranges(path, offsets, outs)

    obj.read_ranges_into = counted  # type: ignore[method-assign]
    store = SstableStore(obj)
    pairs = make_pairs(3000, tombstone_rate=0.0)
    info = store.upload(build_sstable(batch_of(pairs), block_size=512))
    meta = store.meta(info)
    nb = len(meta)
    want = [3, 4, 5, nb // 2, nb - 1]
    d = store.load_blocks(info, want)
    assert calls == [3]  # three runs, one call
    assert d._cursor == int(meta.lengths[want].sum())  # packed: nothing else touched
    assert int(d.pbase[[3, 4, 5, nb // 2, nb - 1]].max()) < d._cursor
    ends = np.cumsum(meta.key_counts)
    got = [p for b in want for p in d.batch(b).to_pairs()]
    assert got == [p for b in want for p in pairs[ends[b] - meta.key_counts[b] : ends[b]]]
    # a flipped byte in a block not loaded yet: the load fails, the cursor is restored
    where = int(meta.offsets[7]) + 10
    raw = bytearray(obj.get(info.path))
    raw[where] ^= 0xFF
    obj.put(info.path, bytes(raw))
    before = d._cursor
    with pytest.raises(DataCorruption):
        store.load_blocks(info, [7])
    assert d._cursor == before and not d.loaded[7]
    assert [p for b in want for p in d.batch(b).to_pairs()] == got


def test_sstable_store_caches_and_delete_evicts() -> None:
    obj = CountingStore(f"count-{uuid.uuid4().hex}")
    store = SstableStore(obj)
    pairs = make_pairs(800)
    info = store.upload(build_sstable(batch_of(pairs), block_size=2048))
    assert obj.exists(info.path)
    assert info.file_size == obj.size(info.path)
    assert info.key_count == len(pairs)
    assert list(p for b in SstableIterator(store, info) for p in b.to_pairs()) == pairs
    first = obj.reads
    assert len(store.meta(info).blocks) == 20
    assert first == 1  # the meta came from upload; a scan reads its run of blocks as one range
    assert list(p for b in SstableIterator(store, info) for p in b.to_pairs()) == pairs
    assert obj.reads == first  # all cached
    cold = SstableStore(obj)
    assert list(p for b in SstableIterator(cold, info) for p in b.to_pairs()) == pairs
    assert obj.reads == 2 * first + 1  # + the meta
    store.delete_objects([info.object_id])
    assert not obj.exists(info.path)
    assert len(store.block_cache) == 0 and len(store.meta_cache) == 0


def test_sstable_store_with_zero_sized_caches_still_reads() -> None:
    store = SstableStore(new_store(), meta_cache_bytes=0, block_cache_bytes=0)
    pairs = make_pairs(300)
    info = store.upload(build_sstable(batch_of(pairs), block_size=1024))
    assert list(p for b in SstableIterator(store, info) for p in b.to_pairs()) == pairs


# --- corruption ----------------------------------------------------------------------------------


def _small_sst(
    compression: int, obj: ObjectStore | None = None
) -> tuple[ObjectStore, SstableInfo, bytes, SstableMeta]:
    obj = obj if obj is not None else new_store()
    pairs = make_pairs(36, versions=2, value_len=(4, 12))
    built = build_sstable(batch_of(pairs), block_size=400, compression=compression)
    info = SstableStore(obj).upload(built)
    return obj, info, built.data, built.meta


def _read_all(obj: ObjectStore, info: SstableInfo) -> list[tuple[bytes, bytes]]:
    cold = SstableStore(obj)
    return [p for b in SstableIterator(cold, info) for p in b.to_pairs()]


def _multi_get_all(obj: ObjectStore, info: SstableInfo, ukeys: list[bytes]) -> list[bytes | None]:
    """A cold batched get of `ukeys` through the SST (the read that uses its search words; on a
    local store the object is mapped and each block is verified when the search first reads it)."""
    version = HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=epoch(60))
    return HummockStorage(SstableStore(obj), version).multi_get(ukeys)


def _overwrite(obj: ObjectStore, path: str, data: bytes) -> None:
    """Replace an object's bytes (a local file by rename, as a put does, without the fsyncs)."""
    if isinstance(obj, LocalObjectStore):
        tmp = obj.root / f"flip-{uuid.uuid4().hex}"
        tmp.write_bytes(data)
        os.replace(tmp, obj.root / path)
    else:
        obj.put(path, data)


def _corruption_store(kind: str, tmp_path: Path) -> ObjectStore:
    return LocalObjectStore(tmp_path / "objects") if kind == "local" else new_store()


def _position_class(pos: int, meta: SstableMeta, meta_offset: int, size: int) -> tuple[str, int]:
    if pos >= size - FOOTER_SIZE:
        return "footer", -1
    if pos >= meta_offset:
        return "meta", -1
    if pos >= meta.offsets[-1] + meta.lengths[-1]:
        return "words", -1  # the padding before the search words, and the words
    for i, b in enumerate(meta.blocks):
        if b.offset <= pos < b.offset + b.length:
            return ("trailer" if pos >= b.offset + b.length - 9 else "body"), i
    raise AssertionError(pos)


@pytest.mark.parametrize("kind", ["memory", "local"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_every_flipped_byte_is_detected(compression: int, kind: str, tmp_path: Path) -> None:
    """Flip each byte of a small SST object in turn: a full read (a scan) and a batched get of
    every key each raise DataCorruption naming the object (and the block, for block bytes), and
    never return data. The search words (and their padding) are read only by batched reads: a
    flip there fails the batched get, and the scan, which does not use them, reads intact data.
    On a local store an uncompressed SST is read through a memory map."""
    obj, info, data, meta = _small_sst(compression, _corruption_store(kind, tmp_path))
    assert len(meta.blocks) >= 3
    pairs = _read_all(obj, info)  # intact, it reads
    ukeys = sorted({k[:-8] for k, _ in pairs})
    assert _multi_get_all(obj, info, ukeys)
    mapped = SstableStore(obj).decoded(info).mapped
    assert mapped == (kind == "local" and compression == COMPRESSION_NONE)
    seen: set[str] = set()
    for pos in range(len(data)):
        cls, block = _position_class(pos, meta, info.meta_offset, len(data))
        seen.add(cls)
        bad = bytearray(data)
        bad[pos] ^= 0x5A
        _overwrite(obj, info.path, bytes(bad))
        reads = [lambda: _multi_get_all(obj, info, ukeys)]
        if cls == "words":
            assert _read_all(obj, info) == pairs
        else:
            reads.append(lambda: _read_all(obj, info))
        for read in reads:
            with pytest.raises(DataCorruption) as exc:
                read()
            msg = str(exc.value)
            assert info.path in msg, (pos, cls, msg)
            if block >= 0:
                assert f"block {block}" in msg, (pos, cls, msg)
    assert seen == {"body", "trailer", "words", "meta", "footer"}


def test_corrupt_block_fails_point_gets_and_scans() -> None:
    obj, info, data, meta = _small_sst(COMPRESSION_NONE)
    b1 = meta.blocks[1]
    bad = bytearray(data)
    bad[b1.offset + 3] ^= 1
    obj.put(info.path, bytes(bad))
    version = HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=epoch(60))
    hs = HummockStorage(SstableStore(obj), version)
    uk = b1.first_key[:-8]
    with pytest.raises(DataCorruption, match=r"block 1"):
        hs.get(uk)
    with pytest.raises(DataCorruption, match=info.path):
        list(hs.iter(None, None))
    # block 0 is intact and still readable
    assert SstableStore(obj).block(info, 0).key_list()[0] == meta.blocks[0].first_key


def test_block_index_pointing_at_garbage_is_detected() -> None:
    """A meta whose checksum was recomputed over a wrong block length still fails block reads."""
    _, _, data, meta = _small_sst(COMPRESSION_NONE)
    assert decode_block(data[: meta.blocks[0].length], "ok")  # sanity
    with pytest.raises(DataCorruption, match="where"):
        decode_block(data[: meta.blocks[0].length - 1], "where")
    with pytest.raises(DataCorruption, match="where"):
        decode_block(b"\x00" * 5, "where")
    # a valid checksum over a payload whose layout is inconsistent
    payload = struct.pack("<I", 5) + b"\x00" * 3
    raw = payload + struct.pack("<BQ", 0, block_checksum(payload, 0))
    with pytest.raises(DataCorruption, match="where"):
        decode_block(raw, "where")
    # and an unknown compression code with a valid checksum
    raw = payload + struct.pack("<BQ", 7, block_checksum(payload, 7))
    with pytest.raises(DataCorruption, match="compression"):
        decode_block(raw, "where")


@pytest.mark.parametrize("keep", ["no_meta", "half_blocks", "one_byte_short"])
def test_truncated_object_raises_data_corruption(keep: str) -> None:
    obj, info, data, meta = _small_sst(COMPRESSION_NONE)
    cut = {
        "no_meta": info.meta_offset,
        "half_blocks": meta.blocks[len(meta.blocks) // 2].offset + 5,
        "one_byte_short": len(data) - 1,
    }[keep]
    obj.put(info.path, data[:cut])
    with pytest.raises(DataCorruption) as exc:
        _read_all(obj, info)
    assert info.path in str(exc.value)


def test_unknown_format_version_is_refused_clearly() -> None:
    """An SST from a newer piestream is refused with a message naming the versions, not misread."""
    from piestream.storage.hummock.sstable import SstFormatError

    obj, info, data, _ = _small_sst(COMPRESSION_NONE)
    bad = bytearray(data)
    struct.pack_into("<I", bad, len(bad) - 8, 9)  # footer: ... version u32 | magic u32
    obj.put(info.path, bytes(bad))
    with pytest.raises(SstFormatError, match=r"version 9, but this piestream reads only versions 1, 2, 3, 4"):
        SstableStore(obj).meta(info)


def test_bloom_bits_are_the_formats_probe_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The filter's bits are exactly ``(h1 + i * h2) % nbits`` for i < k (the durable format
    readers probe), whatever the block size the builder works in and the filter size."""
    import piestream.storage.hummock.filter as filt

    rng = np.random.default_rng(9)
    hashes = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    hashes[:4] = [0, 2**64 - 1, 2**32 - 1, 2**32]
    for block in (5, 1 << 15):
        monkeypatch.setattr(filt, "_BLOCK", block)
        for n, bits_per_key in ((1, 1), (7, 3), (3000, 10), (3000, 20), (1000, 30)):
            f = BloomFilter.build(hashes[:n], bits_per_key)
            want = set()
            for h in hashes[:n].tolist():
                h1, h2 = h & 0xFFFFFFFF, h >> 32
                want.update((h1 + i * h2) % f.nbits for i in range(f.k))
            bits = np.unpackbits(np.frombuffer(f.to_bytes()[5:], np.uint8), bitorder="little")
            assert set(np.flatnonzero(bits).tolist()) == want, (block, n, bits_per_key)


def _as_version_2(built: BuiltSstable) -> BuiltSstable:
    """The same SST as format version 2 wrote it: xxh64 block checksums, no search words."""
    m = built.meta
    parts = []
    for b in m.blocks:
        raw = built.data[b.offset : b.offset + b.length]
        body, comp = raw[:-9], raw[-9]
        parts.append(body + struct.pack("<BQ", comp, xxhash.xxh64_intdigest(body, comp)))
    old = _meta_copy(m, version=2, words_offset=0, words_checksum=0, key_width=0, value_width=0)
    meta = old.encode()
    end = sum(map(len, parts))
    footer = struct.pack("<QIQII", end, len(meta), xxhash.xxh64_intdigest(meta), 2, MAGIC)
    return BuiltSstable(b"".join([*parts, meta, footer]), old, end)


@pytest.mark.parametrize("kind", ["memory", "local"])
@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_LZ4])
def test_version_2_ssts_still_read(compression: int, kind: str, tmp_path: Path) -> None:
    """An SST written by format version 2 reads as its current twin does (scans and batched
    gets, mapped or not), and its xxh64 block checksums still catch a flipped byte."""
    obj = _corruption_store(kind, tmp_path)
    pairs = make_pairs(300, versions=3, value_len=(0, 40))
    built = build_sstable(batch_of(pairs), block_size=512, compression=compression)
    new = SstableStore(obj).upload(built)
    old_built = _as_version_2(built)
    old = SstableStore(obj).upload(old_built)
    assert SstableStore(obj).meta(old).version == 2
    assert _read_all(obj, old) == _read_all(obj, new) == pairs
    ukeys = [*sorted({k[:-8] for k, _ in pairs}), user_key(1, 0, b"absent")]
    got = _multi_get_all(obj, old, ukeys)
    assert got == _multi_get_all(obj, new, ukeys)
    assert any(v is not None for v in got) and got[-1] is None
    assert not SstableStore(obj).decoded(old).words_on_disk
    bad = bytearray(old_built.data)
    bad[int(old_built.meta.offsets[2]) + 5] ^= 1
    _overwrite(obj, old.path, bytes(bad))
    with pytest.raises(DataCorruption, match="block 2"):
        _read_all(obj, old)


def _with_meta(built: BuiltSstable, meta: SstableMeta, version: int) -> BuiltSstable:
    """`built` with its meta replaced (re-encoded, checksummed, footer of `version`); blocks and
    search words stay as they are."""
    enc = meta.encode()
    end = built.meta_offset
    footer = struct.pack("<QIQII", end, len(enc), xxhash.xxh64_intdigest(enc), version, MAGIC)
    return BuiltSstable(built.data[:end] + enc + footer, meta, end)


def _meta_copy(m: SstableMeta, **changes: int) -> SstableMeta:
    fields = dict(
        offsets=m.offsets,
        lengths=m.lengths,
        usizes=m.usizes,
        key_counts=m.key_counts,
        first_keys=m.first_key_ragged,
        smallest_key=m.smallest_key,
        largest_key=m.largest_key,
        key_count=m.key_count,
        min_epoch=m.min_epoch,
        max_epoch=m.max_epoch,
        table_ids=m.table_ids,
        unfiltered_table_ids=m.unfiltered_table_ids,
        bloom=m.bloom,
        version=m.version,
        words_offset=m.words_offset,
        words_checksum=m.words_checksum,
        key_width=m.key_width,
        value_width=m.value_width,
    )
    return SstableMeta(**{**fields, **changes})  # type: ignore[arg-type]


def test_key_and_value_widths_are_recorded() -> None:
    """Version 4 metas carry the one key length and the one value length of an SST (0 where
    lengths differ), and they survive the meta's encoding."""
    fixed = make_pairs(200, versions=3, value_len=(8, 8), tombstone_rate=0.0)
    built = build_sstable(batch_of(fixed), block_size=512)
    assert (built.meta.key_width, built.meta.value_width) == (len(fixed[0][0]), 9)  # tag + 8 bytes
    obj = new_store()
    info = SstableStore(obj).upload(built)
    m = SstableStore(obj).meta(info)
    assert (m.version, m.key_width, m.value_width) == (4, len(fixed[0][0]), 9)
    mixed = make_pairs(200, versions=3, value_len=(8, 8), tombstone_rate=0.2)  # tombstones: 1 byte
    built = build_sstable(batch_of(mixed), block_size=512)
    assert (built.meta.key_width, built.meta.value_width) == (len(mixed[0][0]), 0)
    ragged = [(full_key(user_key(1, 0, b"k" * (i % 5 + 1)), epoch(1)), put_value(b"v")) for i in range(5)]
    built = build_sstable(batch_of(sorted(ragged)), block_size=512)
    assert (built.meta.key_width, built.meta.value_width) == (0, 2)


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_fixed_width_sst_batched_gets_match_the_model(kind: str, tmp_path: Path) -> None:
    """Batched gets through an SST with fixed-width keys and values (entries placed by the widths,
    not the offset columns) return every key's newest version, cold and warm, like a scan."""
    obj = _corruption_store(kind, tmp_path)
    pairs = make_pairs(1500, versions=4, value_len=(12, 12), tombstone_rate=0.0)
    built = build_sstable(batch_of(pairs), block_size=1024)
    assert built.meta.key_width and built.meta.value_width
    info = SstableStore(obj).upload(built)
    newest: dict[bytes, bytes] = {}
    for k, v in pairs:  # sorted: a key's newest version first
        newest.setdefault(k[:-8], v[1:])
    ukeys = [*newest, user_key(1, 0, b"absent!!"), user_key(1, 3, b"\xff" * 8)]
    random.Random(3).shuffle(ukeys)
    version = HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=epoch(60))
    hs = HummockStorage(SstableStore(obj), version)
    want = [newest.get(k) for k in ukeys]
    assert hs.multi_get(ukeys) == want  # cold
    assert hs.multi_get(ukeys) == want  # warm: every block loaded
    assert [hs.get(k) for k in ukeys[:50]] == want[:50]
    assert _read_all(obj, info) == pairs


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_widths_that_do_not_fit_the_blocks_are_corruption(kind: str, tmp_path: Path) -> None:
    """A meta whose key width disagrees with its blocks' key bytes is refused when a block loads,
    not used to place entries."""
    obj = _corruption_store(kind, tmp_path)
    pairs = make_pairs(300, versions=2, value_len=(6, 6), tombstone_rate=0.0)
    built = build_sstable(batch_of(pairs), block_size=512)
    bad = _with_meta(built, _meta_copy(built.meta, key_width=built.meta.key_width + 1), 4)
    info = SstableStore(obj).upload(bad)
    with pytest.raises(DataCorruption, match="inconsistent"):
        _multi_get_all(obj, info, [k[:-8] for k, _ in pairs[::7]])


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_version_3_ssts_still_read(kind: str, tmp_path: Path) -> None:
    """An SST written by format version 3 (search words, no widths) reads as its version 4 twin
    does: batched gets place entries by the offset columns."""
    obj = _corruption_store(kind, tmp_path)
    pairs = make_pairs(400, versions=3, value_len=(5, 5), tombstone_rate=0.0)
    built = build_sstable(batch_of(pairs), block_size=512)
    new = SstableStore(obj).upload(built)
    old = SstableStore(obj).upload(_with_meta(built, _meta_copy(built.meta, version=3), 3))
    m = SstableStore(obj).meta(old)
    assert (m.version, m.key_width, m.value_width) == (3, 0, 0)
    assert _read_all(obj, old) == _read_all(obj, new) == pairs
    ukeys = [*sorted({k[:-8] for k, _ in pairs}), user_key(1, 0, b"absent")]
    got = _multi_get_all(obj, old, ukeys)
    assert got == _multi_get_all(obj, new, ukeys)
    assert any(v is not None for v in got) and got[-1] is None


def test_batched_get_fills_the_few_blocks_a_mapped_sst_misses(tmp_path: Path) -> None:
    """A mapped SST warmed block by block (single-key gets) with a few blocks never read gets
    them verified by the next batched get, so it and later batches take the warm search; one
    with most blocks missing keeps loading on demand."""
    obj = LocalObjectStore(tmp_path / "objects")
    pairs = make_pairs(1500, versions=2, value_len=(10, 10), tombstone_rate=0.0)
    built = build_sstable(batch_of(pairs), block_size=512)
    nb = len(built.meta)
    assert nb >= 16
    info = SstableStore(obj).upload(built)
    version = HummockVersion(id=1, l0=(Level(0, (info,), 1),), max_committed_epoch=epoch(60))
    ukeys = sorted({k[:-8] for k, _ in pairs})
    newest = {k[:-8]: v[1:] for k, v in reversed(pairs)}  # reversed: the newest version wins
    # the keys asked lie in the first blocks; the block left out is the last
    for warm, filled in ((np.arange(nb - 1), True), (np.arange(1), False)):
        ss = SstableStore(obj)
        ss.load_blocks(info, warm)  # what single-key gets leave behind
        d = ss.block_cache.peek(info.object_id)
        assert d is not None and d.load_on_demand and not d.all_loaded
        got = HummockStorage(ss, version).multi_get(ukeys[:40])
        assert got == [newest[k] for k in ukeys[:40]]
        assert d.all_loaded is filled


def test_run_batch_is_the_blocks_batches_concatenated() -> None:
    """A run of blocks as one batch: the same entries as each block's batch concatenated, for
    any run; a block whose offsets go backwards is reported as corrupt, naming it."""
    store = SstableStore(InMemoryObjectStore())
    pairs = make_pairs(2500)
    info = store.upload(build_sstable(batch_of(pairs), block_size=700))
    nb = len(store.meta(info))
    assert nb > 20
    d = store.load_blocks(info, np.arange(nb))
    for lo, hi in [(0, nb), (0, 1), (3, 4), (5, 17), (nb - 2, nb)]:
        want = KvBatch.concat([d.batch(b) for b in range(lo, hi)])
        got = d.run_batch(lo, hi)
        assert got.to_pairs() == want.to_pairs()
        assert np.array_equal(got.filter_lens, want.filter_lens)
    b = 9
    ko = int(d.kobase[b]) + 4 * 2  # entry 2's key offset: past entry 3's
    d.buf[ko : ko + 4] = np.frombuffer(struct.pack("<I", 0xFFFF), np.uint8)
    with pytest.raises(DataCorruption, match=f"block {b}"):
        d.run_batch(b - 2, b + 3)
    d.run_batch(0, b)  # the blocks before it still read
