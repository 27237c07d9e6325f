"""HummockStorage: the state store one process reads and writes (seed 001 write and read paths).

The write side (`shared_buffer`) buffers sorted batches and turns them into SSTs on `sync`; the
read side (`read_view`) searches, newest first, the shared buffer, the synced-but-uncommitted
SSTs, the L0 sub-levels and the levels of the installed version. This class ties the two to a
pinned version under one lock. Point gets stop at the first run that holds a version <= the read
epoch of a key; batched point gets (`multi_get_columns`) do that for a whole sorted batch per run
with vector searches; scans go through Merge/Concat/User iterators.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import xxhash

from piestream.common.epoch import EPOCH_SPILL_MASK, MAX_EPOCH, pure_epoch
from piestream.encoding.keys import TABLE_ID_LEN, table_id_of
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.iterators import (
    BlockIterator,
    ConcatIterator,
    KeyRange,
    MergeIterator,
    SstableIterator,
    UserIterator,
    full_key_range,
)
from piestream.storage.hummock.kv_batch import DELETE_TAG, KvBatch
from piestream.storage.hummock.range_search import Ranges
from piestream.storage.hummock.range_search import read_ranges as search_ranges
from piestream.storage.hummock.read_view import ReadView, below_watermark_key
from piestream.storage.hummock.shared_buffer import SharedBuffer, StorageOptions
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import HummockVersion, SstableInfo, TableWatermark

__all__ = ["HummockStorage", "StorageOptions", "visible_bound", "visible_pairs"]


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
        self._buffer = SharedBuffer(sstable_store, self.options)
        self._read_view: ReadView | None = None
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
            self._buffer.forget_committed(version.max_committed_epoch)
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
            self._buffer.add(batch, epoch)
            self._read_view = None

    def buffered_bytes(self) -> int:
        with self._lock:
            return self._buffer.buffered_bytes()

    def sync(self, epoch: int, *, durable: bool = True) -> list[SstableInfo]:
        """Build and upload SSTs from everything buffered at epochs <= `epoch` (all versions of
        every key are kept); return their descriptors for `commit_epoch`. `durable=False` leaves
        the fsyncs to the committer, which makes a whole epoch's SSTs durable at once
        (`ObjectStore.make_durable`, in `HummockManager.commit_epoch`)."""
        with self._lock:
            infos = self._buffer.sync(epoch, durable=durable)
            if infos:
                self._read_view = None
            return infos

    def add_table_watermark(self, table_id: int, watermark: TableWatermark) -> None:
        """Record a state table's new watermark; it is committed with the epoch's SSTs."""
        with self._lock:
            self._buffer.add_watermark(table_id, watermark)

    def take_table_watermarks(self) -> dict[int, TableWatermark]:
        """The watermarks recorded since the last call (reported with `sync`'s SSTs)."""
        with self._lock:
            return self._buffer.take_watermarks()

    def clear_uncommitted(self) -> None:
        """Forget buffered and synced-but-uncommitted data (recovery: the epoch was not committed)."""
        with self._lock:
            self._buffer.clear()
            self._read_view = None

    def may_hold_table(self, table_id: int) -> bool:
        """Whether any run this storage reads (its version's SSTs, its synced SSTs, its buffered
        batches) may hold an entry of `table_id`: metadata only, no block read. False means the
        table is empty here; True may still hold only tombstones."""
        prefix = table_id.to_bytes(TABLE_ID_LEN, "big")
        with self._lock:
            for imm in self._buffer.imms:
                b = imm.batch
                if len(b) and b.first_key()[:TABLE_ID_LEN] <= prefix <= b.last_key()[:TABLE_ID_LEN]:
                    return True
            if any(table_id in s.table_ids for _, ssts in self._buffer.synced for s in ssts):
                return True
            version = self._version
        return any(table_id in s.table_ids for s in version.all_ssts())

    # -- read path ------------------------------------------------------------------------------
    def _view(self) -> ReadView:
        """The runs a read searches, newest first (rebuilt when the version or local data change)."""
        view = self._read_view
        if view is None:
            with self._lock:
                if self._read_view is None:
                    buf = self._buffer
                    synced = [s for _, ssts in reversed(buf.synced) for s in reversed(ssts)]
                    self._read_view = ReadView(list(buf.imms), synced, self._version, buf.epoch_keys)
                view = self._read_view
        return view

    def get(self, user_key: bytes, read_epoch: int = MAX_EPOCH, *, filter_len: int = 0) -> bytes | None:
        """The value-encoded row of `user_key` at `read_epoch`, or None if absent or deleted.

        `filter_len` is the length of the pk prefix the key's table builds SST filters on
        (0 = the table has no filter); it lets the read skip SSTs whose filter rules the key out.
        """
        bound = visible_bound(read_epoch)
        view = self._view()
        value = view.get_value(self.sstables, user_key, bound, filter_len)
        if value is None or value[0] == DELETE_TAG:
            return None
        wms = view.watermarks
        if wms and below_watermark_key(user_key, wms, bound):
            return None  # below the committed watermark: cleaned
        return value[1:]

    def multi_get_columns(
        self,
        user_keys: pa.Array | Ragged,
        read_epoch: int = MAX_EPOCH,
        *,
        filter_lens: np.ndarray | None = None,
    ) -> tuple[np.ndarray, pa.Array]:
        """`get` of a batch of keys as columns: (found mask, value-encoded rows as a binary array,
        b"" where not found). Keys need not be sorted or unique. `filter_lens` gives each key's
        filter length (see `get`)."""
        keys = user_keys if isinstance(user_keys, Ragged) else Ragged.from_arrow(user_keys)
        fl = None if filter_lens is None or not np.any(filter_lens) else np.asarray(filter_lens)
        return self._view().multi_get(self.sstables, keys, visible_bound(read_epoch), fl)

    def multi_get(
        self,
        user_keys: Sequence[bytes],
        read_epoch: int = MAX_EPOCH,
        *,
        filter_lens: Sequence[int] | None = None,
    ) -> list[bytes | None]:
        """`multi_get_columns` for Python bytes in and out."""
        if not len(user_keys):
            return []
        fl = None if filter_lens is None else np.asarray(filter_lens, np.int64)
        found, values = self.multi_get_columns(Ragged.from_list(user_keys), read_epoch, filter_lens=fl)
        vals = values.to_pylist()
        return [v if f else None for v, f in zip(vals, found.tolist(), strict=True)]

    def read_ranges(
        self,
        ranges: Sequence[tuple[bytes, bytes | None]],
        read_epoch: int = MAX_EPOCH,
        *,
        filter_keys: Sequence[bytes | None] | None = None,
    ) -> KvBatch:
        """Every visible entry in any of many sorted user-key ranges [start, end), in one pass
        (`scan_ranges` of Python bytes; `filter_keys` gives a range's common prefix, for the
        Bloom filters)."""
        if not ranges:
            return KvBatch.empty()
        starts = Ragged.from_list([a for a, _ in ranges])
        ends = Ragged.from_list([b or b"" for _, b in ranges])
        has_end = np.array([b is not None for _, b in ranges], np.bool_)
        fkeys = None
        if filter_keys is not None and any(k is not None for k in filter_keys):
            fkeys = Ragged.from_list([k or b"" for k in filter_keys])
        return self.scan_ranges(starts, ends, has_end, read_epoch, filter_keys=fkeys)

    def scan_ranges(
        self,
        starts: Ragged,
        ends: Ragged,
        has_end: np.ndarray,
        read_epoch: int = MAX_EPOCH,
        *,
        filter_keys: Ragged | None = None,
    ) -> KvBatch:
        """Every visible entry (newest version <= `read_epoch`, no tombstones) with a user key in
        any of the ranges [starts[i], ends[i]) (no upper bound where `has_end` is False), in key
        order. Starts must be sorted; `filter_keys` (an empty row: none) are the ranges' common
        prefixes, for the Bloom filters. Each run is searched for every range at once
        (`range_search`), the runs are merged once and versions resolved once."""
        read_epoch = visible_bound(read_epoch)
        if not starts.n:
            return KvBatch.empty()
        view = self._view()
        r = Ranges.of(starts, ends, np.asarray(has_end, np.bool_), filter_keys)
        wms = {t: w for t, w in self._version.table_watermarks.items() if read_epoch >= w.epoch}
        return search_ranges(view, self.sstables, r, read_epoch, wms)

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
        the scan skip SSTs whose filter rules it out.

        Bounds are compared as full keys (``user key | inverted epoch``, as bytes), so a bound
        that extends a stored user key K lands among K's versions: ``K + b"\0"`` as a start
        still returns K, as an end drops K. No caller builds such a bound: stored user keys are
        ``table | vnode | memcomparable(pk)``, prefix-free within a table, and bounds are pk
        prefixes or ``next_key`` of them (``key_range.byte_range``); the key after K is
        ``next_key(K)`` (tests/storage/hummock/test_key_bounds.py)."""
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
            imms = list(self._buffer.imms)
            synced = [s for _, ssts in self._buffer.synced for s in ssts]
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

        inputs: list[Iterable[KvBatch]] = [BlockIterator(i.batch, rng) for i in reversed(imms)]
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


def visible_bound(read_epoch: int) -> int:
    """The largest entry epoch a read at `read_epoch` sees: every spill of its barrier epoch."""
    return read_epoch if read_epoch == MAX_EPOCH else pure_epoch(read_epoch) | EPOCH_SPILL_MASK


def _in(sst: SstableInfo, rng: KeyRange) -> bool:
    start, end = rng
    if end is not None and sst.smallest_key >= end:
        return False
    return not (start is not None and sst.largest_key < start)


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
