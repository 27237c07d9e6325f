"""The read side of HummockStorage: the runs a read searches, and point lookups through them.

A read at epoch E searches, newest first, the shared buffer's imms, the synced-but-uncommitted
SSTs and the L0 sub-levels (each SST its own run), then the non-overlapping levels; the first
run holding a version <= E of a key answers for it (seed 001 "Read Path").

Point lookups come two ways:

- `get`: one key, pure Python over per-block key lists (bisect), for callers with one key;
- `multi_get`: a batch of keys, sorted once, then per run: key-range pruning and the Bloom filter
  for the whole batch, routing to blocks and the in-block search as `KeyIndex` vector searches
  over the decoded SST, the read-epoch rule as a search for ``user key | read epoch`` and
  tombstones as a vector of tag bytes. Python runs per run and per SST touched, never per key.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import xxhash

from piestream.common.errors import DataCorruption
from piestream.encoding.keys import EPOCH_LEN, TABLE_ID_LEN, TABLE_PREFIX_LEN, encode_epoch
from piestream.encoding.ragged import Ragged, concat_rows, gather_views
from piestream.storage.hummock.key_index import KeyIndex, compare, padded_ragged, sort_order, words
from piestream.storage.hummock.kv_batch import DELETE_TAG, PUT_TAG, KvBatch
from piestream.storage.hummock.shared_buffer import Imm
from piestream.storage.hummock.sstable import Block, SstableMeta
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import HummockVersion, Level, SstableInfo, TableWatermark


class ImmRun:
    """An imm of a read view, with its one-key and batch search structures built on first use."""

    __slots__ = ("_block", "_index", "_values", "epoch", "imm")

    def __init__(self, imm: Imm) -> None:
        self.imm = imm
        self.epoch = imm.epoch
        self._block: Block | None = None
        self._index: KeyIndex | None = None
        self._values: Ragged | None = None

    @property
    def block(self) -> Block:
        if self._block is None:
            self._block = Block(self.imm.batch, self.imm.nbytes)
        return self._block

    def index(self) -> tuple[KeyIndex, Ragged]:
        if self._index is None:
            self._index = KeyIndex.of_ragged(Ragged.from_arrow(self.imm.batch.keys))
            self._values = Ragged.from_arrow(self.imm.batch.values)
        assert self._values is not None
        return self._index, self._values


class SstRun:
    """An SST of a read view, with its bounds unpacked and its meta kept once loaded."""

    __slots__ = ("hi", "info", "lo", "meta", "min_epoch")

    def __init__(self, info: SstableInfo) -> None:
        self.info = info
        self.lo = info.smallest_user_key
        self.hi = info.largest_user_key
        self.min_epoch = info.min_epoch
        self.meta: SstableMeta | None = None

    def get_meta(self, store: SstableStore) -> SstableMeta:
        if self.meta is None:
            self.meta = store.meta(self.info)
        return self.meta

    def probe(
        self, store: SstableStore, target: bytes, user_key: bytes, fkey_hash: int | None, table_id: int
    ) -> bytes | None:
        """The newest version <= the target's epoch of `user_key` in this SST, if any."""
        meta = self.get_meta(store)
        if (
            fkey_hash is not None
            and table_id not in meta.unfiltered_table_ids
            and not meta.bloom.may_contain_hash(fkey_hash)
        ):
            return None
        first_keys = meta.first_keys
        idx = max(bisect.bisect_right(first_keys, target) - 1, 0)
        nb = len(first_keys)
        while idx < nb:
            block = store.block(self.info, idx)
            keys = block.key_list()
            i = bisect.bisect_left(keys, target)
            if i < block.n:
                if keys[i][:-EPOCH_LEN] == user_key:
                    return block.value_at(i)
                return None
            idx += 1  # the next version may start the following block
        return None


class LevelRun:
    """A non-overlapping level of a read view: its SSTs ordered by key range."""

    __slots__ = ("_his", "_index", "his", "los", "ssts")

    def __init__(self, level: Level) -> None:
        self.ssts = [SstRun(s) for s in level.ssts]
        self.los = [s.lo for s in self.ssts]
        self.his = [s.hi for s in self.ssts]
        self._index: KeyIndex | None = None
        self._his: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def position(self, user_key: bytes) -> int:
        i = bisect.bisect_right(self.los, user_key) - 1
        return i if i >= 0 and self.ssts[i].hi >= user_key else -1

    def find(self, user_key: bytes) -> SstRun | None:
        i = self.position(user_key)
        return self.ssts[i] if i >= 0 else None

    def index(self) -> KeyIndex:
        """The SSTs' smallest user keys, to route a batch of keys to SSTs at once."""
        if self._index is None:
            self._index = KeyIndex.of_ragged(Ragged.from_list(self.los))
        return self._index

    def covers(self, q: Queries, j: np.ndarray, sst: np.ndarray) -> np.ndarray:
        """Whether each query's user key lies in the key range of its routed SST."""
        if self._his is None:
            self._his = padded_ragged(Ragged.from_list(self.his))
        hd, hs, hl = self._his
        lo = self.index()
        qs, ql = q.start[j], q.length[j] - EPOCH_LEN
        return (compare(q.data, qs, ql, hd, hs[sst], hl[sst]) <= 0) & (
            compare(q.data, qs, ql, lo.data, lo.starts[sst], lo.lens[sst]) >= 0
        )


@dataclass
class Queries:
    """A sorted batch of point lookups: search targets ``user key | inverted read epoch`` in one
    padded buffer, plus each target's filter-key hash (0 = none) and table id."""

    data: np.ndarray
    start: np.ndarray
    length: np.ndarray
    hashes: np.ndarray | None
    table_ids: np.ndarray

    def user_key(self, i: int) -> bytes:
        s = int(self.start[i])
        return self.data[s : s + int(self.length[i]) - EPOCH_LEN].tobytes()

    def bound(self, key: bytes, *, right: bool) -> int:
        """First sorted query whose user key is >= `key` (> with `right`)."""
        f = bisect.bisect_right if right else bisect.bisect_left
        return f(range(len(self.start)), key, key=self.user_key)


@dataclass
class Found:
    """Values found in one run: query positions (sorted order) and their HummockValues."""

    pos: np.ndarray
    data: np.ndarray
    vstart: np.ndarray
    vlen: np.ndarray


def _same_user_key(
    data: np.ndarray, starts: np.ndarray, lens: np.ndarray, q: Queries, j: np.ndarray
) -> np.ndarray:
    """Whether each entry (full key) has the user key of query j."""
    same_len = lens == q.length[j]
    out = np.zeros(len(j), np.bool_)
    k = np.flatnonzero(same_len)
    if len(k):
        ul = lens[k] - EPOCH_LEN
        out[k] = compare(data, starts[k], ul, q.data, q.start[j[k]], ul) == 0
    return out


class ReadView:
    """The runs a read searches, newest first (rebuilt when the version or local data change)."""

    def __init__(
        self,
        imms: list[Imm],
        synced: list[SstableInfo],
        version: HummockVersion,
    ) -> None:
        self.imms = [ImmRun(i) for i in reversed(imms)]
        self.l0 = [SstRun(s) for s in (*synced, *(s for lv in version.l0 for s in lv.ssts))]
        self.levels = [LevelRun(lv) for lv in version.levels if lv.ssts]
        self.watermarks = version.table_watermarks

    # -- one key --------------------------------------------------------------------------------
    def get_value(
        self, store: SstableStore, user_key: bytes, read_epoch: int, filter_len: int
    ) -> bytes | None:
        """The HummockValue of the newest version <= `read_epoch` of a key, searching newest first."""
        target = user_key + encode_epoch(read_epoch)
        for imm in self.imms:
            if imm.epoch <= read_epoch:
                block = imm.block
                i = block.seek(target)
                if i < block.n and block.key_list()[i][:-EPOCH_LEN] == user_key:
                    return block.value_at(i)
        fkey_hash = (
            xxhash.xxh64_intdigest(user_key[: TABLE_PREFIX_LEN + filter_len]) if filter_len > 0 else None
        )
        table_id = int.from_bytes(user_key[:TABLE_ID_LEN], "big")
        for s in self.l0:
            # within an L0 sub-level SSTs may overlap, but a key has one version per epoch
            if s.min_epoch <= read_epoch and s.lo <= user_key <= s.hi:
                v = s.probe(store, target, user_key, fkey_hash, table_id)
                if v is not None:
                    return v
        last = len(self.levels) - 1
        for i, lv in enumerate(self.levels):
            s2 = lv.find(user_key)
            if s2 is not None and s2.min_epoch <= read_epoch:
                # the bottom level skips the filter: a key that reached it is most likely there,
                # and a cached block answers faster than k filter probes in Python (RocksDB's
                # optimize_filters_for_hits)
                v = s2.probe(store, target, user_key, None if i == last else fkey_hash, table_id)
                if v is not None:
                    return v
        return None

    # -- many keys ------------------------------------------------------------------------------
    def multi_get(
        self,
        store: SstableStore,
        user_keys: Ragged,
        read_epoch: int,
        filter_lens: np.ndarray | None,
    ) -> tuple[np.ndarray, pa.Array]:
        """(found mask, value-encoded rows as a binary array; b"" where not found) of many user
        keys at once."""
        n = user_keys.n
        if n == 0:
            return np.zeros(0, np.bool_), _empty_values(0)
        suffix = np.frombuffer(encode_epoch(read_epoch), np.uint8)
        targets = concat_rows([user_keys, Ragged.fixed(np.broadcast_to(suffix, (n, EPOCH_LEN)))])
        data, start, length = padded_ragged(targets)
        # sorted by user key: the order the runs' key ranges and `Queries.bound` use (a target's
        # epoch suffix could reorder a key that is a prefix of another)
        order = sort_order(data, start, length - EPOCH_LEN)
        q = Queries(
            data,
            start[order],
            length[order],
            _filter_hashes(user_keys, filter_lens)[order] if filter_lens is not None else None,
            (words(data, start[order], length[order]) >> np.uint64(32)).astype(np.int64),
        )
        pending = np.arange(n)
        found: list[Found] = []
        for imm in self.imms:
            if imm.epoch <= read_epoch and len(pending):
                pending = self._in_imm(imm, q, pending, found)
        for s in self.l0:
            if not len(pending):
                break
            if s.min_epoch > read_epoch:
                continue
            lo, hi = np.searchsorted(pending, [q.bound(s.lo, right=False), q.bound(s.hi, right=True)])
            if hi > lo:
                got = self._in_sst(store, s, q, pending[lo:hi], found)
                if len(got):
                    pending = np.setdiff1d(pending, got, assume_unique=True)
        for lv in self.levels:
            if not len(pending):
                break
            # route every pending key to the one SST whose range may hold it
            ulen = q.length[pending] - EPOCH_LEN
            sst = lv.index().route(q.data, q.start[pending], ulen)
            inside = lv.covers(q, pending, sst)
            j, sst = pending[inside], sst[inside]
            if not len(j):
                continue
            starts = np.flatnonzero(np.diff(sst, prepend=-1))
            resolved = []
            for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(j)], strict=True):  # per SST
                s = lv.ssts[int(sst[a])]
                if s.min_epoch <= read_epoch:
                    resolved.append(self._in_sst(store, s, q, j[a:b], found))
            if resolved:
                pending = np.setdiff1d(pending, np.concatenate(resolved), assume_unique=True)
        return self._assemble(found, q, order, n, read_epoch)

    def _in_imm(self, imm: ImmRun, q: Queries, j: np.ndarray, found: list[Found]) -> np.ndarray:
        index, values = imm.index()
        if index.nseg == 0:
            return j
        pos = index.lower_bound(q.data, q.start[j], q.length[j])
        ok = pos < len(index.starts)
        hit = np.zeros(len(j), np.bool_)
        k = np.flatnonzero(ok)
        p = pos[k]
        hit[k] = _same_user_key(index.data, index.starts[p], index.lens[p], q, j[k])
        if hit.any():
            p = pos[hit]
            found.append(
                Found(j[hit], values.data, values.offsets[p], values.offsets[p + 1] - values.offsets[p])
            )
        return j[~hit]

    def _in_sst(
        self, store: SstableStore, s: SstRun, q: Queries, j: np.ndarray, found: list[Found]
    ) -> np.ndarray:
        """Look up queries `j` in one SST; returns the ones it answered (a version or a tombstone)."""
        meta = s.get_meta(store)
        if q.hashes is not None:
            h = q.hashes[j]
            check = h != 0
            if meta.unfiltered_table_ids:
                check &= ~np.isin(q.table_ids[j], meta.unfiltered_table_ids)
            keep = ~check
            if check.any():
                keep[check] = meta.bloom.may_contain_many(h[check])
            j = j[keep]
        if not len(j):
            return j
        blocks = meta.index().route(q.data, q.start[j], q.length[j])
        d = store.load_blocks(s.info, blocks)
        d.make_searchable(blocks)
        pos = d.keys.lower_bound(q.data, q.start[j], q.length[j], blocks)
        # past its block: the candidate is the next block's first entry (versions may straddle)
        nb = len(meta)
        past = np.flatnonzero((pos == d.ebase[blocks + 1]) & (blocks + 1 < nb))
        if len(past):
            fk = meta.index()
            nxt = blocks[past] + 1
            same = _same_user_key(fk.data, fk.starts[nxt], fk.lens[nxt], q, j[past])
            if same.any():
                d = store.load_blocks(s.info, nxt[same])
        valid = pos < len(d.vstart)
        hit = np.zeros(len(j), np.bool_)
        k = np.flatnonzero(valid)
        p = pos[k]
        hit[k] = d.loaded[np.searchsorted(d.ebase, p, "right") - 1] & _same_user_key(
            d.buf, d.keys.starts[p], d.keys.lens[p], q, j[k]
        )
        if hit.any():
            p = pos[hit]
            found.append(Found(j[hit], d.buf, d.vstart[p], d.vlen[p]))
        return j[hit]

    def _assemble(
        self, found: list[Found], q: Queries, order: np.ndarray, n: int, read_epoch: int
    ) -> tuple[np.ndarray, pa.Array]:
        """Found mask and values in query order: one Arrow gather over every run's buffer."""
        ok = np.zeros(n, np.bool_)
        where: list[np.ndarray] = []
        starts: list[np.ndarray] = []
        lens: list[np.ndarray] = []
        bufs: list[np.ndarray] = []
        buf_of: list[np.ndarray] = []
        for f in found:
            if not len(f.pos):
                continue
            if np.any(f.vlen < 1):
                raise DataCorruption("a stored value has no tag byte")
            tags = f.data[f.vstart]
            if np.any((tags != PUT_TAG) & (tags != DELETE_TAG)):
                raise DataCorruption("a stored value has an unknown tag byte")
            put = np.flatnonzero(tags == PUT_TAG)
            if len(put):
                where.append(order[f.pos[put]])
                starts.append(f.vstart[put] + 1)
                lens.append(f.vlen[put] - 1)
                buf_of.append(np.full(len(put), len(bufs), np.int64))
                bufs.append(f.data)
        if not where:
            return ok, pa.array([b""] * 0, pa.binary()) if n == 0 else _empty_values(n)
        dest = np.concatenate(where)
        ok[dest] = True
        if self.watermarks:
            from piestream.storage.hummock.iterators import below_watermark

            wms = {t: w for t, w in self.watermarks.items() if read_epoch >= w.epoch}
            if wms:
                inv = np.empty(n, np.int64)
                inv[order] = np.arange(n)
                sp = inv[dest]
                ukeys = Ragged(np.zeros(1, np.int64), q.data).gather_by(q.start[sp], q.length[sp] - EPOCH_LEN)
                ok[dest[below_watermark(ukeys.to_arrow(), wms)]] = False
        src_start = np.zeros(n, np.int64)
        src_len = np.zeros(n, np.int64)
        src_buf = np.zeros(n, np.int64)
        src_start[dest] = np.concatenate(starts)
        src_len[dest] = np.concatenate(lens)
        src_buf[dest] = np.concatenate(buf_of)
        src_len[~ok] = 0
        return ok, gather_views(bufs, src_buf, src_start, src_len)

    # -- helpers for ranges ---------------------------------------------------------------------
    def sst_runs(self) -> list[SstRun]:
        return [*self.l0, *(s for lv in self.levels for s in lv.ssts)]


def _empty_values(n: int) -> pa.Array:
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")]
    )


def _concat_ragged(parts: list[Ragged]) -> Ragged:
    if len(parts) == 1:
        return parts[0]
    lens = np.concatenate([p.lengths for p in parts])
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return Ragged(offsets, np.concatenate([p.data[p.offsets[0] : p.offsets[-1]] for p in parts]))


def _filter_hashes(keys: Ragged, flens: np.ndarray) -> np.ndarray:
    """XXH64 of each key's filter prefix (0 where the key has none)."""
    from piestream.encoding.hashing import xxh64_ragged

    fl = np.asarray(flens, np.int64)
    # like `key[:TABLE_PREFIX_LEN + filter_len]`, clipped to the key
    pref = keys.gather_by(
        keys.offsets[:-1], np.where(fl > 0, np.minimum(TABLE_PREFIX_LEN + fl, keys.lengths), 0)
    )
    h = xxh64_ragged(pref)
    h[fl == 0] = 0
    return h


def below_watermark_key(user_key: bytes, wms: dict[int, TableWatermark], read_epoch: int) -> bool:
    wm = wms.get(int.from_bytes(user_key[:TABLE_ID_LEN], "big"))
    if wm is None or read_epoch < wm.epoch:
        return False
    key = wm.key_for_vnode(int.from_bytes(user_key[TABLE_ID_LEN:TABLE_PREFIX_LEN], "big"))
    return key is not None and user_key[TABLE_PREFIX_LEN:] < key


def slices_of_batch(
    batch: KvBatch, block: Block | None, fulls: Sequence[tuple[bytes | None, bytes | None]]
) -> KvBatch:
    """The entries of a sorted run inside any of the sorted full-key ranges, as one sorted batch."""
    keys = (block or Block(batch, 0)).key_list()
    parts = []
    for start, end in fulls:  # per range (a bisect each): see `HummockStorage.read_ranges`
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        if hi > lo:
            parts.append(batch.slice(lo, hi - lo))
    return KvBatch.concat(parts)
