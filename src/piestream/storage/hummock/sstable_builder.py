"""Building SSTs (`sstable` module docstring for the format): block cuts, blocks, the block index,
the Bloom filter and the meta, all from a sorted `KvBatch`'s arrays; and cutting a batch into
SST-sized pieces at user-key boundaries."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc
import xxhash

from piestream.encoding.hashing import xxh64_ragged
from piestream.encoding.keys import EPOCH_LEN, TABLE_ID_LEN, TABLE_PREFIX_LEN
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.filter import BloomFilter
from piestream.storage.hummock.key_index import padded, words
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.run_search import common_prefix
from piestream.storage.hummock.sstable import (
    COMPRESSION_NONE,
    DEFAULT_BLOCK_SIZE,
    SstableMeta,
    encode_block,
    encode_footer,
)


@dataclass(frozen=True)
class BuiltSstable:
    """An SST's bytes and its meta, before upload."""

    data: bytes
    meta: SstableMeta
    meta_offset: int


def entry_filter_hashes(batch: KvBatch) -> tuple[np.ndarray, set[int]]:
    """Per entry, the XXH64 of its filter key (0 for an entry without one; `filter_lens` says
    which), and the tables that have entries without a filter key."""
    keys = Ragged.from_arrow(batch.keys)
    flens = batch.filter_lens.astype(np.int64)
    has = flens > 0
    out = np.zeros(len(batch), np.uint64)
    unfiltered: set[int] = set()
    if not has.all():
        unfiltered = {int(t) for t in np.unique(_entry_table_ids(batch)[~has])}
    if not has.any():
        return out, unfiltered
    if has.all():
        lens = np.minimum(TABLE_PREFIX_LEN + flens, keys.lengths - EPOCH_LEN)
        out[:] = xxh64_ragged(keys.gather_by(keys.offsets[:-1], lens))
    else:
        lens = np.minimum(TABLE_PREFIX_LEN + flens[has], keys.lengths[has] - EPOCH_LEN)
        out[has] = xxh64_ragged(keys.gather_by(keys.offsets[:-1][has], lens))
    return out, unfiltered


def build_sstable(
    batch: KvBatch,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    compression: int = COMPRESSION_NONE,
    bits_per_key: int = 10,
    hashes: tuple[np.ndarray, set[int]] | None = None,
    table_block_sizes: Mapping[int, int] | None = None,
) -> BuiltSstable:
    """Build one SST from a non-empty sorted batch (block cuts and the index from arrays).
    `hashes`: the batch's `entry_filter_hashes` if the caller has them already;
    `table_block_sizes`: block sizes of tables that do not use `block_size` (`block_bounds`)."""
    if not len(batch):
        raise ValueError("cannot build an empty SST")
    bounds = block_bounds(batch, block_size, table_block_sizes)
    parts: list[bytes] = []
    lengths: list[int] = []
    for s, e in itertools.pairwise(bounds.tolist()):  # one iteration per block, not per entry
        raw = encode_block(batch.slice(s, e - s), compression)
        parts.append(raw)
        lengths.append(len(raw))
    starts, ends = bounds[:-1], bounds[1:]
    lens = np.asarray(lengths, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    counts = ends - starts
    keys = Ragged.from_arrow(batch.keys)
    koffs, voffs = keys.offsets, Ragged.from_arrow(batch.values).offsets
    usizes = 4 + 8 * (counts + 1) + 2 * counts + (koffs[ends] - koffs[starts]) + (voffs[ends] - voffs[starts])
    epochs = batch.epochs()
    per_entry, unfiltered = hashes if hashes is not None else entry_filter_hashes(batch)
    tids = sorted(_table_ids(batch))
    meta = SstableMeta(
        offsets=offsets,
        lengths=lens,
        usizes=usizes,
        key_counts=counts,
        first_keys=keys.take(starts),
        smallest_key=batch.first_key(),
        largest_key=batch.last_key(),
        key_count=len(batch),
        min_epoch=int(epochs.min()),
        max_epoch=int(epochs.max()),
        table_ids=tids,
        unfiltered_table_ids=sorted(unfiltered),
        bloom=BloomFilter.build(per_entry[batch.filter_lens > 0], bits_per_key),
        key_width=common_width(koffs),
        value_width=common_width(voffs),
    )
    blocks_end = int(lens.sum())
    pad = -blocks_end % 8
    words = search_words(keys, len(common_prefix(meta.smallest_key, meta.largest_key)))
    meta.words_offset = blocks_end + pad
    h = xxhash.xxh3_64(b"\x00" * pad)  # the checksum covers the padding too: every byte is checked
    h.update(words)
    meta.words_checksum = h.intdigest()
    meta_bytes = meta.encode()
    end = meta.words_offset + len(words)
    data = b"".join([*parts, b"\x00" * pad, words, meta_bytes, encode_footer(end, meta_bytes)])
    return BuiltSstable(data, meta, end)


def common_width(offsets: np.ndarray) -> int:
    """The length every string of a ragged column has (its offsets), or 0 if lengths differ
    (the meta's key and value widths)."""
    lens = np.diff(offsets)
    if not len(lens) or not (lens == lens[0]).all() or not 0 < int(lens[0]) < 2**32:
        return 0
    return int(lens[0])


def search_words(keys: Ragged, cp: int) -> memoryview:
    """The search-words section of an SST whose keys share `cp` leading bytes: every entry's
    ``w1`` (the big-endian word of the 8 key bytes after the prefix, zero-filled past the key's
    end), then every entry's ``w2`` (the next 8), each as little-endian u64 (`sstable` module
    docstring). Readers used to compute exactly these per loaded block."""
    starts = keys.offsets[:-1].astype(np.int64) + cp
    # a word read ends at most 16 bytes past a key's start + cp, the last key's furthest: pad
    # (copy) the key bytes only if that runs past their end
    data = keys.data if keys.n and int(starts[-1]) + 16 <= len(keys.data) else padded(keys.data)
    lens = keys.lengths.astype(np.int64) - cp
    out = np.empty(2 * keys.n, "<u8")
    out[: keys.n] = words(data, starts, lens)
    out[keys.n :] = words(data, starts + 8, lens - 8)
    return out.view(np.uint8).data


def block_bounds(
    batch: KvBatch, block_size: int, table_block_sizes: Mapping[int, int] | None = None
) -> np.ndarray:
    """Entry positions where the blocks of an SST start, plus its length at the end.

    A block is cut whenever the running entry size passes a multiple of the block size. An SST
    may hold several tables (a sync or compaction output covers every table of the epoch or
    range); when any of them has its own block size (`table_block_sizes`, by table id), blocks
    are also cut at every table boundary and each table's entries are cut by its own size. So a
    point-lookup table gets small blocks even in an SST it shares with a scanned table, at the
    cost of at most one short block per table per SST."""
    sizes = batch.entry_sizes()
    cum = np.cumsum(sizes)
    n = len(batch)
    if table_block_sizes:
        tids = _entry_table_ids(batch)
        t_lo, t_hi = int(tids[0]), int(tids[-1])  # keys are sorted, so table ids are too
        if any(t_lo <= t <= t_hi for t in table_block_sizes):
            starts = np.concatenate([[0], np.flatnonzero(tids[1:] != tids[:-1]) + 1])
            seg = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
            bs = np.array([table_block_sizes.get(int(t), block_size) for t in tids[starts]], np.int64)
            # one iteration per table of the SST above; the rest is per entry in numpy
            before = (cum - sizes)[starts]  # running size where each table starts
            q = (cum - before[seg]) // bs[seg]
            cut = (np.diff(q) > 0) | (np.diff(seg) > 0)
            return np.concatenate([[0], np.flatnonzero(cut) + 1, [n]]).astype(np.int64)
    # block boundaries: cut whenever the running size passes a multiple of block_size
    cuts = np.flatnonzero(np.diff(cum // block_size) > 0) + 1
    return np.array([0, *cuts.tolist(), n], np.int64)


def _entry_table_ids(batch: KvBatch) -> np.ndarray:
    """The table id of every entry (the first 4 key bytes, big-endian)."""
    keys = Ragged.from_arrow(batch.keys)
    starts = keys.offsets[:-1]
    return keys.data[starts[:, None] + np.arange(4)].copy().view(">u4")[:, 0]


def _table_ids(batch: KvBatch) -> set[int]:
    """The table ids of a sorted batch: one when its first and last keys share it (sorted keys
    between them do too), else each value where the per-entry ids change (no sort)."""
    first, last = batch.first_key()[:TABLE_ID_LEN], batch.last_key()[:TABLE_ID_LEN]
    if first == last:
        return {int.from_bytes(first, "big")}
    tids = _entry_table_ids(batch)
    change = np.ones(len(tids), np.bool_)
    change[1:] = tids[1:] != tids[:-1]
    return {int(t) for t in tids[change]}


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
