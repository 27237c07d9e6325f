"""HummockStorage: the state store one process reads and writes (seed 001 write and read paths).

Write path: writers hand sorted batches (full keys already carry their epoch) to the *shared
buffer*; `sync(epoch)` turns every buffered batch up to that epoch into SSTs, uploads them and
returns their descriptors for the Hummock manager to commit. Until a version holding them is
installed, synced SSTs stay readable here, so a writer always reads its own writes.

Read path: a read at epoch E merges, newest first, the shared buffer, the synced-but-uncommitted
SSTs, the L0 sub-levels and the levels of the installed version; point gets stop at the first
run that holds a version <= E of the key; scans go through Merge/Concat/User iterators.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from piestream.common.epoch import EPOCH_SPILL_MASK, MAX_EPOCH, pure_epoch
from piestream.encoding.keys import EPOCH_LEN, TABLE_ID_LEN, TABLE_PREFIX_LEN, table_id_of
from piestream.storage.hummock.iterators import (
    BlockIterator,
    ConcatIterator,
    KeyRange,
    MergeIterator,
    SstableIterator,
    UserIterator,
    full_key_range,
    seek_key,
)
from piestream.storage.hummock.kv_batch import DELETE_TAG, KvBatch
from piestream.storage.hummock.sstable import (
    COMPRESSION_NONE,
    DEFAULT_BLOCK_SIZE,
    Block,
    SstableMeta,
    build_sstable,
    split_at_user_keys,
)
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import HummockVersion, Level, SstableInfo, TableWatermark


@dataclass(frozen=True)
class StorageOptions:
    """Write-path knobs (defaults as RisingWave's system parameters where they exist)."""

    block_size: int = DEFAULT_BLOCK_SIZE
    sstable_size: int = 64 << 20
    compression: int = COMPRESSION_NONE
    bloom_bits_per_key: int = 10


@dataclass
class _Imm:
    """An immutable sorted batch in the shared buffer, written at `epoch` (with spill offset)."""

    epoch: int
    block: Block  # the batch, with a lazily built key list for point gets


class HummockStorage:
    """Reads and writes of one process over a pinned version plus its own uncommitted data."""

    def __init__(
        self,
        sstable_store: SstableStore,
        version: HummockVersion,
        options: StorageOptions | None = None,
    ) -> None:
        self.sstables = sstable_store
        self.options = options or StorageOptions()
        self._version = version
        self._imms: list[_Imm] = []  # newest last
        self._synced: list[tuple[int, list[SstableInfo]]] = []  # (epoch, ssts), newest last
        self._watermarks: dict[int, TableWatermark] = {}  # uncommitted, per table
        self._read_view: _ReadView | None = None
        self._lock = threading.RLock()
        self._version_changed = threading.Condition(self._lock)

    # -- versions -------------------------------------------------------------------------------
    @property
    def version(self) -> HummockVersion:
        return self._version

    def update_version(self, version: HummockVersion) -> None:
        """Install a newer version; synced SSTs it has committed stop being local-only."""
        with self._lock:
            if version.id < self._version.id:
                return
            self._version = version
            self._synced = [(e, s) for e, s in self._synced if e > version.max_committed_epoch]
            self._read_view = None
            self._version_changed.notify_all()

    def wait_epoch(self, epoch: int, timeout: float | None = None) -> bool:
        """Block until the local version contains `epoch` (seed 001 `wait_epoch`); False on timeout."""
        with self._version_changed:
            return self._version_changed.wait_for(lambda: self._version.max_committed_epoch >= epoch, timeout)

    # -- write path -----------------------------------------------------------------------------
    def write_batch(self, batch: KvBatch, epoch: int) -> None:
        """Add a sorted batch whose full keys carry `epoch` to the shared buffer."""
        if not len(batch):
            return
        with self._lock:
            self._imms.append(_Imm(epoch, Block(batch, batch.nbytes())))
            self._read_view = None

    def buffered_bytes(self) -> int:
        with self._lock:
            return sum(i.block.nbytes for i in self._imms)

    def sync(self, epoch: int) -> list[SstableInfo]:
        """Build and upload SSTs from everything buffered at epochs <= `epoch` (all versions of
        every key are kept); return their descriptors for `commit_epoch`."""
        with self._lock:
            todo = [i for i in self._imms if pure_epoch(i.epoch) <= epoch]
            if not todo:
                return []
            merged = KvBatch.merge([i.block.batch for i in reversed(todo)])
            infos = [
                self.sstables.upload(
                    build_sstable(
                        part,
                        block_size=self.options.block_size,
                        compression=self.options.compression,
                        bits_per_key=self.options.bloom_bits_per_key,
                    )
                )
                for part in split_at_user_keys(merged, self.options.sstable_size)
            ]
            done = {id(i) for i in todo}
            self._imms = [i for i in self._imms if id(i) not in done]
            self._synced.append((epoch, infos))
            self._read_view = None
            return infos

    def add_table_watermark(self, table_id: int, watermark: TableWatermark) -> None:
        """Record a state table's new watermark; it is committed with the epoch's SSTs."""
        with self._lock:
            cur = self._watermarks.get(table_id)
            self._watermarks[table_id] = cur.merged(watermark) if cur else watermark

    def take_table_watermarks(self) -> dict[int, TableWatermark]:
        """The watermarks recorded since the last call (reported with `sync`'s SSTs)."""
        with self._lock:
            out, self._watermarks = self._watermarks, {}
            return out

    def clear_uncommitted(self) -> None:
        """Forget buffered and synced-but-uncommitted data (recovery: the epoch was not committed)."""
        with self._lock:
            self._imms.clear()
            self._synced.clear()
            self._watermarks.clear()
            self._read_view = None

    # -- read path ------------------------------------------------------------------------------
    def get(self, user_key: bytes, read_epoch: int = MAX_EPOCH, *, filter_len: int = 0) -> bytes | None:
        """The value-encoded row of `user_key` at `read_epoch`, or None if absent or deleted.

        `filter_len` is the length of the pk prefix the key's table builds SST filters on
        (0 = the table has no filter); it lets the read skip SSTs whose filter rules the key out.
        """
        bound = visible_bound(read_epoch)
        value = self._get_value(user_key, bound, filter_len)
        if value is None or value[0] == DELETE_TAG:
            return None
        wms = self._version.table_watermarks
        if wms and _below_watermark(user_key, wms, bound):
            return None  # below the committed watermark: cleaned
        return value[1:]

    def _view(self) -> _ReadView:
        """The runs a read searches, newest first (rebuilt when the version or local data change)."""
        with self._lock:
            if self._read_view is None:
                synced = [s for _, ssts in reversed(self._synced) for s in reversed(ssts)]
                l0 = [s for lv in self._version.l0 for s in lv.ssts]
                self._read_view = _ReadView(
                    [(i.epoch, i.block) for i in reversed(self._imms)],
                    [_Sst(s) for s in (*synced, *l0)],
                    [_Level(lv) for lv in self._version.levels if lv.ssts],
                )
            return self._read_view

    def _get_value(self, user_key: bytes, read_epoch: int, filter_len: int) -> bytes | None:
        target = seek_key(user_key, read_epoch)
        view = self._view()
        for epoch, block in view.imms:
            if epoch <= read_epoch:
                v = _get_in_block(block, target, user_key)
                if v is not None:
                    return v
        fkey_hash = (
            xxhash.xxh64_intdigest(user_key[: TABLE_PREFIX_LEN + filter_len]) if filter_len > 0 else None
        )
        table_id = int.from_bytes(user_key[:TABLE_ID_LEN], "big")
        store = self.sstables
        for s in view.l0:
            # within an L0 sub-level SSTs may overlap, but a key has one version per epoch
            if s.min_epoch <= read_epoch and s.lo <= user_key <= s.hi:
                v = s.probe(store, target, user_key, fkey_hash, table_id)
                if v is not None:
                    return v
        for lv in view.levels:
            s2 = lv.find(user_key)
            if s2 is not None and s2.min_epoch <= read_epoch:
                v = s2.probe(store, target, user_key, fkey_hash, table_id)
                if v is not None:
                    return v
        return None

    def multi_get(
        self,
        user_keys: Sequence[bytes],
        read_epoch: int = MAX_EPOCH,
        *,
        filter_lens: Sequence[int] | None = None,
    ) -> list[bytes | None]:
        """`get` of many keys at once: each run is pruned by key range and Bloom filter for the
        whole batch (numpy), so only keys that may be in a run are looked up in its blocks."""
        n = len(user_keys)
        out: list[bytes | None] = [None] * n
        if not n:
            return out
        read_epoch = visible_bound(read_epoch)
        order = sorted(range(n), key=user_keys.__getitem__)
        keys = [user_keys[i] for i in order]
        pend = list(range(n))  # positions into `keys` still unresolved, ascending
        found: list[bytes | None] = [None] * n
        view = self._view()
        targets = [k + _epoch_suffix(read_epoch) for k in keys]
        for epoch, block in view.imms:
            if epoch > read_epoch:
                continue
            rest = []
            for j in pend:
                v = _get_in_block(block, targets[j], keys[j])
                if v is None:
                    rest.append(j)
                else:
                    found[j] = v
            pend = rest
        flens = [filter_lens[i] for i in order] if filter_lens is not None else [0] * n
        hashes = _filter_hashes(keys, flens)
        tids = [int.from_bytes(k[:TABLE_ID_LEN], "big") for k in keys] if hashes is not None else None
        store = self.sstables
        for s in view.l0:
            if not pend or s.min_epoch > read_epoch:
                continue
            pkeys = [keys[j] for j in pend]
            lo = bisect.bisect_left(pkeys, s.lo)
            hi = bisect.bisect_right(pkeys, s.hi)
            if lo >= hi:
                continue
            hits = s.candidates(store, pend[lo:hi], hashes, tids)
            resolved = set()
            for j in hits:
                v = s.probe(store, targets[j], keys[j], None, 0)
                if v is not None:
                    found[j] = v
                    resolved.add(j)
            if resolved:
                pend = [j for j in pend if j not in resolved]
        for lv in view.levels:
            if not pend:
                break
            groups: dict[int, list[int]] = {}
            for j in pend:
                pos = lv.position(keys[j])
                if pos >= 0:
                    groups.setdefault(pos, []).append(j)
            resolved = set()
            for pos, js in groups.items():
                s = lv.ssts[pos]
                if s.min_epoch > read_epoch:
                    continue
                for j in s.candidates(store, js, hashes, tids):
                    v = s.probe(store, targets[j], keys[j], None, 0)
                    if v is not None:
                        found[j] = v
                        resolved.add(j)
            if resolved:
                pend = [j for j in pend if j not in resolved]
        wms = self._version.table_watermarks
        for j, v in enumerate(found):
            if v is None or v[0] == DELETE_TAG:
                continue
            if wms and _below_watermark(keys[j], wms, read_epoch):
                continue
            out[order[j]] = v[1:]
        return out

    def read_ranges(
        self,
        ranges: Sequence[tuple[bytes, bytes | None]],
        read_epoch: int = MAX_EPOCH,
        *,
        filter_keys: Sequence[bytes | None] | None = None,
    ) -> KvBatch:
        """Every visible entry in any of many sorted, disjoint user-key ranges [start, end), in one
        pass: each run contributes the slices of its blocks that the ranges cover (Bloom-pruned
        per range when `filter_keys` gives a range's common prefix), the runs are merged once and
        versions resolved once — instead of one iterator stack per range."""
        read_epoch = visible_bound(read_epoch)
        if not ranges:
            return KvBatch.empty()
        view = self._view()
        fulls = [full_key_range(a, b) for a, b in ranges]
        hashes = None
        if filter_keys is not None and any(k is not None for k in filter_keys):
            hashes = [xxhash.xxh64_intdigest(k) if k is not None else None for k in filter_keys]
        runs: list[KvBatch] = []
        for epoch, block in view.imms:
            if epoch <= read_epoch:
                runs.append(_slices_of_block(block, fulls))
        store = self.sstables
        runs += [s.slices(store, fulls, ranges, hashes) for s in view.l0 if s.min_epoch <= read_epoch]
        for lv in view.levels:
            parts = []
            for i, (start, end) in enumerate(ranges):
                lo = max(lv.position(start), 0) if lv.ssts else 0
                j = lo
                while j < len(lv.ssts) and (end is None or lv.ssts[j].lo < end):
                    s = lv.ssts[j]
                    if s.min_epoch <= read_epoch and s.hi >= start:
                        parts.append(
                            s.slices(store, [fulls[i]], [ranges[i]], None if hashes is None else [hashes[i]])
                        )
                    j += 1
            runs.append(KvBatch.concat(parts))
        merged = KvBatch.merge([r for r in runs if len(r)])
        if not len(merged):
            return merged
        wms = {t: w for t, w in self._version.table_watermarks.items() if read_epoch >= w.epoch}
        out = list(UserIterator([merged], read_epoch, wms))
        return KvBatch.concat(out)

    def iter(
        self,
        start_user_key: bytes | None,
        end_user_key: bytes | None,
        read_epoch: int = MAX_EPOCH,
        *,
        filter_key: bytes | None = None,
        apply_watermarks: bool = True,
    ) -> Iterator[KvBatch]:
        """Visible entries (newest version <= `read_epoch`, no tombstones) with user keys in
        [start, end), as sorted batches. `filter_key` (a user-key prefix all results share) lets
        the scan skip SSTs whose filter rules it out."""
        rng = full_key_range(start_user_key, end_user_key)
        read_epoch = visible_bound(read_epoch)
        inner = self.merged_runs(rng, read_epoch, filter_key)
        wms = None
        if apply_watermarks:  # a snapshot older than a watermark still sees the rows it cleaned
            wms = {t: w for t, w in self._version.table_watermarks.items() if read_epoch >= w.epoch}
        return iter(UserIterator(inner, read_epoch, wms))

    def merged_runs(self, rng: KeyRange, read_epoch: int, filter_key: bytes | None = None) -> MergeIterator:
        """All versions of all keys in `rng` from every run, newest run first (a MergeIterator)."""
        with self._lock:
            imms = list(self._imms)
            synced = [s for _, ssts in self._synced for s in ssts]
            version = self._version
        fhash = xxhash.xxh64_intdigest(filter_key) if filter_key is not None else None
        tid = table_id_of(filter_key) if filter_key is not None else -1

        def keep(sst: SstableInfo) -> bool:
            if sst.min_epoch > read_epoch:
                return False
            if fhash is None:
                return True
            meta = self.sstables.meta(sst)
            return tid in meta.unfiltered_table_ids or meta.bloom.may_contain_hash(fhash)

        inputs: list[Iterable[KvBatch]] = [BlockIterator(i.block, rng) for i in reversed(imms)]
        inputs += [
            SstableIterator(self.sstables, s, rng) for s in reversed(synced) if _in(s, rng) and keep(s)
        ]
        for level in version.l0:
            inputs += [SstableIterator(self.sstables, s, rng) for s in level.ssts if _in(s, rng) and keep(s)]
        for level in version.levels:
            ssts = [s for s in level.ssts if _in(s, rng) and keep(s)]
            if ssts:
                inputs.append(ConcatIterator(self.sstables, ssts, rng))
        return MergeIterator(inputs)


class _Sst:
    """An SST of a read view, with its bounds unpacked and its meta kept once loaded."""

    __slots__ = ("blocks", "hi", "info", "lo", "meta", "min_epoch")

    def __init__(self, info: SstableInfo) -> None:
        self.info = info
        self.lo = info.smallest_user_key
        self.hi = info.largest_user_key
        self.min_epoch = info.min_epoch
        self.meta: SstableMeta | None = None
        self.blocks: dict[int, Block] = {}  # decoded blocks this view already used

    def block(self, store: SstableStore, idx: int) -> Block:
        b = self.blocks.get(idx)
        if b is None:
            b = store.block(self.info, idx)
            if len(self.blocks) < 64:  # a view keeps a few hot blocks per SST, the LRU the rest
                self.blocks[idx] = b
        return b

    def get_meta(self, store: SstableStore) -> SstableMeta:
        if self.meta is None:
            self.meta = store.meta(self.info)
        return self.meta

    def probe(
        self, store: SstableStore, target: bytes, user_key: bytes, fkey_hash: int | None, table_id: int
    ) -> bytes | None:
        """The newest version <= the target's epoch of `user_key` in this SST, if any."""
        meta = self.get_meta(store)
        filtered = fkey_hash is not None and table_id not in meta.unfiltered_table_ids
        if filtered and not meta.bloom.may_contain_hash(fkey_hash):  # type: ignore[arg-type]
            return None
        idx = max(meta.block_for(target), 0)
        while idx < len(meta.blocks):
            block = self.block(store, idx)
            i = block.seek(target)
            if i < len(block):
                key = block.key_list()[i]
                if key[:-EPOCH_LEN] == user_key:
                    return block.value_at(i)
                return None
            idx += 1  # the next version may start the following block
        return None

    def slices(
        self,
        store: SstableStore,
        fulls: Sequence[KeyRange],
        ranges: Sequence[tuple[bytes, bytes | None]],
        hashes: Sequence[int | None] | None,
    ) -> KvBatch:
        """This SST's entries inside any of the (sorted) ranges, as one sorted batch."""
        meta: SstableMeta | None = None
        parts: list[KvBatch] = []
        for i, (start, end) in enumerate(ranges):
            if start > self.hi or (end is not None and end <= self.lo):
                continue
            if meta is None:
                meta = self.get_meta(store)
            h = None if hashes is None else hashes[i]
            tid = int.from_bytes(start[:TABLE_ID_LEN], "big")
            if h is not None and tid not in meta.unfiltered_table_ids and not meta.bloom.may_contain_hash(h):
                continue
            fstart, fend = fulls[i]
            idx = max(meta.block_for(fstart), 0) if fstart is not None else 0
            while idx < len(meta.blocks):
                if fend is not None and meta.blocks[idx].first_key >= fend:
                    break
                b = _slices_of_block(store.block(self.info, idx), [fulls[i]])
                if len(b):
                    parts.append(b)
                idx += 1
        return KvBatch.concat(parts)

    def candidates(
        self, store: SstableStore, js: list[int], hashes: np.ndarray | None, tids: list[int] | None
    ) -> list[int]:
        """Of key positions `js`, those this SST's Bloom filter does not rule out (vectorized)."""
        if hashes is None or tids is None:
            return js
        meta = self.get_meta(store)
        idx = np.asarray(js, np.int64)
        h = hashes[idx]
        has = h != 0
        if meta.unfiltered_table_ids:
            unf = np.isin(np.asarray([tids[j] for j in js]), meta.unfiltered_table_ids)
            has &= ~unf
        keep = ~has
        if has.any():
            keep[has] = meta.bloom.may_contain_many(h[has])
        return idx[keep].tolist()


class _Level:
    """A non-overlapping level of a read view: binary search by smallest user key."""

    __slots__ = ("los", "ssts")

    def __init__(self, level: Level) -> None:
        self.ssts = [_Sst(s) for s in level.ssts]
        self.los = [s.lo for s in self.ssts]

    def position(self, user_key: bytes) -> int:
        i = bisect.bisect_right(self.los, user_key) - 1
        return i if i >= 0 and self.ssts[i].hi >= user_key else -1

    def find(self, user_key: bytes) -> _Sst | None:
        i = self.position(user_key)
        return self.ssts[i] if i >= 0 else None


@dataclass
class _ReadView:
    imms: list[tuple[int, Block]]  # newest first
    l0: list[_Sst]  # synced-but-uncommitted, then L0 sub-levels, newest first
    levels: list[_Level]


def _slices_of_block(block: Block, fulls: Sequence[KeyRange]) -> KvBatch:
    """The block's entries inside any of the sorted full-key ranges, as one sorted batch."""
    keys = block.key_list()
    parts = []
    for start, end in fulls:
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        if hi > lo:
            parts.append(block.batch.slice(lo, hi - lo))
    return KvBatch.concat(parts)


def _epoch_suffix(read_epoch: int) -> bytes:
    from piestream.encoding.keys import encode_epoch

    return encode_epoch(read_epoch)


def _filter_hashes(keys: list[bytes], flens: list[int]) -> np.ndarray | None:
    """XXH64 of each key's filter prefix (0 where the key has none), or None if none has one."""
    if not any(flens):
        return None
    from piestream.encoding.hashing import xxh64_ragged
    from piestream.encoding.ragged import Ragged

    r = Ragged.from_list(keys)
    fl = np.asarray(flens, np.int64)
    # like `key[:TABLE_PREFIX_LEN + filter_len]`, clipped to the key
    pref = r.gather_by(r.offsets[:-1], np.where(fl > 0, np.minimum(TABLE_PREFIX_LEN + fl, r.lengths), 0))
    h = xxh64_ragged(pref)
    h[fl == 0] = 0
    return h


def _below_watermark(user_key: bytes, wms: dict[int, TableWatermark], read_epoch: int) -> bool:
    wm = wms.get(int.from_bytes(user_key[:TABLE_ID_LEN], "big"))
    if wm is None or read_epoch < wm.epoch:
        return False
    key = wm.key_for_vnode(int.from_bytes(user_key[TABLE_ID_LEN:TABLE_PREFIX_LEN], "big"))
    return key is not None and user_key[TABLE_PREFIX_LEN:] < key


def visible_bound(read_epoch: int) -> int:
    """The largest entry epoch a read at `read_epoch` sees: every spill of its barrier epoch."""
    return read_epoch if read_epoch == MAX_EPOCH else pure_epoch(read_epoch) | EPOCH_SPILL_MASK


def _in(sst: SstableInfo, rng: KeyRange) -> bool:
    start, end = rng
    if end is not None and sst.smallest_key >= end:
        return False
    return not (start is not None and sst.largest_key < start)


def _get_in_block(block: Block, target: bytes, user_key: bytes) -> bytes | None:
    i = block.seek(target)
    if i < len(block):
        key = block.key_list()[i]
        if key[:-EPOCH_LEN] == user_key:
            return block.value_at(i)
    return None


def visible_pairs(batches: Iterable[KvBatch]) -> list[tuple[bytes, bytes]]:
    """(user key, value-encoded row) pairs of visible batches (tests and small reads)."""
    out: list[tuple[bytes, bytes]] = []
    for b in batches:
        uks = b.user_keys().to_pylist()
        rows = b.rows().to_pylist()
        out.extend(zip(uks, rows, strict=True))
    return out


def epochs_in(batch: KvBatch) -> np.ndarray:
    return batch.epochs()
