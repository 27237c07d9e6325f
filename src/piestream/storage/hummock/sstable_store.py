"""Reading and writing SST objects through the object store, with meta and block caches.

`SstableStore` is the only component that touches SST bytes: `upload` publishes a built SST
under a fresh object id (every write attempt gets its own name, so a retried Spark task never
overwrites what another attempt wrote), `meta` and `block` read with caching and verify checksums.
The block cache holds decoded arrays: one `DecodedSstable` per SST that has blocks in memory,
charged by the bytes of its loaded blocks and evicted whole, least recently used first.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence

import numpy as np

from piestream.common.errors import DataCorruption, ObjectNotFound, StorageError
from piestream.storage.hummock.cache import LruCache
from piestream.storage.hummock.decoded import DecodedSstable, in_place_layout
from piestream.storage.hummock.sstable import Block, SstableMeta, decode_meta_and_footer
from piestream.storage.hummock.sstable_builder import BuiltSstable
from piestream.storage.hummock.version import SstableInfo, sst_path
from piestream.storage.object_store import ObjectStore, open_object_store

DEFAULT_META_CACHE_BYTES = 64 << 20
DEFAULT_BLOCK_CACHE_BYTES = 256 << 20


def new_object_id() -> int:
    """A fresh 63-bit object id; random, so concurrent writers on many machines never collide."""
    return secrets.randbits(63) or 1


class SstableStore:
    """SST I/O over one object store, with process-wide caches."""

    def __init__(
        self,
        store: ObjectStore,
        meta_cache_bytes: int = DEFAULT_META_CACHE_BYTES,
        block_cache_bytes: int = DEFAULT_BLOCK_CACHE_BYTES,
    ) -> None:
        self.store = store
        self.meta_cache: LruCache[SstableMeta] = LruCache(meta_cache_bytes, lambda m: m.nbytes())
        self.block_cache: LruCache[DecodedSstable] = LruCache(block_cache_bytes, lambda d: d.nbytes())

    def upload(self, built: BuiltSstable, *, durable: bool = True) -> SstableInfo:
        """Publish an SST under a fresh object id and describe it for a version. `durable=False`:
        the committer makes it durable (`ObjectStore.make_durable`) before any version holds it."""
        object_id = new_object_id()
        if durable:
            self.store.put(sst_path(object_id), built.data)
        else:
            self.store.put_deferred(sst_path(object_id), built.data)
        m = built.meta
        self.meta_cache.put(object_id, m)
        return SstableInfo(
            object_id=object_id,
            file_size=len(built.data),
            meta_offset=built.meta_offset,
            smallest_key=m.smallest_key,
            largest_key=m.largest_key,
            table_ids=tuple(m.table_ids),
            key_count=m.key_count,
            min_epoch=m.min_epoch,
            max_epoch=m.max_epoch,
        )

    def _read(self, sst: SstableInfo, offset: int, length: int, what: str) -> bytes:
        """Bytes of an SST; an object shorter than its descriptor says is corrupt, not missing."""
        try:
            return self.store.get_range(sst.path, offset, length)
        except ObjectNotFound:
            raise
        except StorageError as e:
            if self.store.exists(sst.path) and self.store.size(sst.path) < offset + length:
                raise DataCorruption(f"{sst.path}: {what} is cut off (object truncated)") from e
            raise

    def _read_ranges(self, sst: SstableInfo, offsets: list[int], outs: list[np.ndarray]) -> None:
        """`_read` of several ranges straight into buffers (one object-store call; one kernel
        copy per range for a local object)."""
        try:
            self.store.read_ranges_into(sst.path, offsets, [o.data for o in outs])
        except ObjectNotFound:
            raise
        except StorageError as e:
            end = max(a + len(o) for a, o in zip(offsets, outs, strict=True))
            if self.store.exists(sst.path) and self.store.size(sst.path) < end:
                raise DataCorruption(
                    f"{sst.path}: a block read to {end} is cut off (object truncated)"
                ) from e
            raise

    def meta(self, sst: SstableInfo) -> SstableMeta:
        def load() -> SstableMeta:
            tail = self._read(sst, sst.meta_offset, sst.file_size - sst.meta_offset, "meta")
            return decode_meta_and_footer(tail, sst.meta_offset, sst.path)

        return self.meta_cache.get_or_load(sst.object_id, load)

    def decoded(self, sst: SstableInfo) -> DecodedSstable:
        """The SST's decoded blocks (from the block cache, or a new empty one)."""
        d = self.block_cache.peek(sst.object_id)
        if d is None:
            meta = self.meta(sst)
            d = DecodedSstable(
                sst.object_id,
                meta,
                sst.path,
                self._mapped(sst, meta),
                lambda offs, outs: self._read_ranges(sst, offs, outs),
            )
        return d

    def charge(self, sst: SstableInfo, d: DecodedSstable, loaded_before: int, reads: int) -> None:
        """Account a search of `d` that loaded blocks on demand (`DecodedSstable.load_on_demand`):
        blocks it loaded count as misses, the rest of its `reads` as hits; the cache holds `d`,
        charged with its new size."""
        loaded = d.n_loaded - loaded_before
        self.block_cache.count(hits=max(reads - loaded, 0), misses=loaded)
        if loaded or self.block_cache.peek(sst.object_id) is None:
            self.block_cache.put(sst.object_id, d)
        else:
            self.block_cache.touch(sst.object_id)

    def _mapped(self, sst: SstableInfo, meta: SstableMeta) -> np.ndarray | None:
        """The SST object mapped into memory, where the store can map it and its blocks decode
        in place (`DecodedSstable`); None otherwise, and for an object whose size is not the
        descriptor's (then block reads report what is wrong)."""
        if not in_place_layout(meta):
            return None
        view = self.store.map(sst.path)
        if view is None or len(view) != sst.file_size:
            return None
        return np.frombuffer(view, np.uint8)

    def cached(self, sst: SstableInfo, reads: int = 1) -> DecodedSstable | None:
        """The SST's decoded blocks if the cache holds them (counted as `reads` block hits)."""
        d = self.block_cache.peek(sst.object_id)
        if d is not None and d.all_loaded:
            self.block_cache.count(hits=reads)
            self.block_cache.touch(sst.object_id)
        return d

    def load_blocks(self, sst: SstableInfo, blocks: Sequence[int] | np.ndarray) -> DecodedSstable:
        """The SST's decoded blocks with `blocks` loaded (read, verified and decoded if missing)."""
        d = self.decoded(sst)
        nb = len(d.meta)
        want = np.asarray(blocks, np.int64)
        if len(want) and (want.min() < 0 or want.max() >= nb):
            raise DataCorruption(f"{sst.path}: block {int(want.max())} does not exist")
        before = int(d.loaded[want].sum()) if len(want) else 0
        loaded = d.ensure(want, lambda offs, outs: self._read_ranges(sst, offs, outs))
        self.block_cache.count(hits=before, misses=loaded)
        if loaded or self.block_cache.peek(sst.object_id) is None:
            self.block_cache.put(sst.object_id, d)  # re-charged with its new size
        else:
            self.block_cache.touch(sst.object_id)
        return d

    def block(self, sst: SstableInfo, idx: int) -> Block:
        """One decoded block (the single-key path: a cached block costs a few dict lookups)."""
        cache = self.block_cache
        d = cache.peek(sst.object_id)
        if d is not None and 0 <= idx < len(d.loaded) and d.loaded[idx]:
            cache.hits += 1
            cache.touch(sst.object_id)
            return d.block(idx)
        return self.load_blocks(sst, [idx]).block(idx)

    def delete_objects(self, object_ids: list[int]) -> None:
        self.store.delete_many([sst_path(i) for i in object_ids])
        for i in object_ids:
            self.meta_cache.evict_where(lambda k, i=i: k == i)  # type: ignore[misc]
        ids = set(object_ids)
        self.block_cache.evict_where(lambda k: k in ids)


_PROCESS_STORES: dict[str, SstableStore] = {}
_BY_URL: dict[str, SstableStore] = {}  # `url_sstable_store`: by the url it was asked for
_LOCK = threading.Lock()


def process_sstable_store(store: ObjectStore) -> SstableStore:
    """The process-wide SstableStore of an object store (shared caches across tasks in a Spark
    worker; the cache survives from one epoch's task to the next while the worker lives)."""
    with _LOCK:
        s = _PROCESS_STORES.get(store.url)
        if s is None:
            s = SstableStore(store)
            _PROCESS_STORES[store.url] = s
        return s


def url_sstable_store(url: str) -> SstableStore:
    """`process_sstable_store(open_object_store(url))`, the store opened once per url: a task
    asks for every actor of every epoch, and opening one (parsing the url, a local store's
    `url` built again from its path) was a noticeable part of an empty epoch (issue 27)."""
    with _LOCK:
        s = _BY_URL.get(url)
    if s is None:
        s = process_sstable_store(open_object_store(url))
        with _LOCK:
            s = _BY_URL.setdefault(url, s)
    return s
