"""The read side of HummockStorage: the runs a read searches, and point lookups through them.

A read at epoch E searches, newest first, the shared buffer's imms, the synced-but-uncommitted
SSTs and the L0 sub-levels (each SST its own run), then the non-overlapping levels; the first
run holding a version <= E of a key answers for it (seed 001 "Read Path").

Point lookups come two ways:

- `get`: one key, pure Python over per-block key lists (bisect), for callers with one key;
- `multi_get`: a batch of keys, sorted once, then per run: key-range pruning and the Bloom filter
  for the whole batch, then the vector search of `run_search.find` over the whole run (an imm, or
  an SST whose blocks are all cached) or, for an SST read partly, over the blocks its keys route
  to (loaded first, consecutive blocks with one read); the read-epoch rule is a search for
  ``user key | read epoch`` and tombstones a vector of tag bytes. Python runs per run and per SST
  touched, never per key.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import xxhash

from piestream.common.epoch import pure_epoch
from piestream.common.errors import DataCorruption
from piestream.encoding.keys import EPOCH_LEN, TABLE_ID_LEN, TABLE_PREFIX_LEN, encode_epoch
from piestream.encoding.ragged import Ragged, concat_rows, gather_views
from piestream.storage.hummock.epoch_keys import EpochKeys
from piestream.storage.hummock.key_index import padded_ragged, sort_order
from piestream.storage.hummock.kv_batch import DELETE_TAG, PUT_TAG
from piestream.storage.hummock.run_search import BatchRun, Queries, common_prefix, find, same_user_key
from piestream.storage.hummock.shared_buffer import Imm
from piestream.storage.hummock.sstable import Block, SstableMeta
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import HummockVersion, Level, SstableInfo, TableWatermark

#: `multi_get` loads an SST whole when its batch has at least this many keys per block (then
#: 1 - e^-2 = 86 % of the blocks would be read anyway, and one search over the whole SST replaces
#: routing to blocks) ...
FILL_KEYS_PER_BLOCK = 2
#: ... or when at most 1/FILL_MISSING_FRACTION of its blocks are missing (a cache warmed by
#: single-key gets leaves a few holes in every SST; filling them costs a few small reads, or for
#: a mapped SST a few checksums). The decoded SST's buffer spans every block already, so this
#: adds no memory, only cache charge.
FILL_MISSING_FRACTION = 8


class ImmRun:
    """An imm of a read view. Its search structures live on the `Imm` itself, built on first use,
    so they outlive the read view (a view is rebuilt at every write and spill)."""

    __slots__ = ("epoch", "imm")

    def __init__(self, imm: Imm) -> None:
        self.imm = imm
        self.epoch = imm.epoch

    @property
    def block(self) -> Block:
        imm = self.imm
        if imm.block is None:
            imm.block = Block(imm.batch, imm.nbytes)
        return imm.block

    def run(self) -> BatchRun:
        imm = self.imm
        if imm.run is None:
            imm.run = BatchRun(imm.batch)
        return imm.run


class SstRun:
    """An SST of a read view, with its bounds unpacked and its meta kept once loaded."""

    __slots__ = ("_in_prefix", "hi", "info", "lo", "meta", "min_epoch")

    def __init__(self, info: SstableInfo) -> None:
        self.info = info
        self.lo = info.smallest_user_key
        self.hi = info.largest_user_key
        self.min_epoch = info.min_epoch
        self.meta: SstableMeta | None = None
        self._in_prefix: bool | None = None

    def in_prefix(self, meta: SstableMeta) -> bool:
        """Whether every user key in [lo, hi] starts with the prefix all the SST's full keys
        share (`DecodedSstable.cp`): true when that prefix ends inside both bounding user keys
        (keys between two keys with a common prefix have it too) and the bounds are the SST's
        own smallest and largest keys."""
        if self._in_prefix is None:
            cp = len(common_prefix(meta.smallest_key, meta.largest_key))
            own = (self.info.smallest_key, self.info.largest_key) == (meta.smallest_key, meta.largest_key)
            self._in_prefix = own and cp <= min(len(self.lo), len(self.hi))
        return self._in_prefix

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

    __slots__ = ("his", "los", "ssts")

    def __init__(self, level: Level) -> None:
        self.ssts = [SstRun(s) for s in level.ssts]
        self.los = [s.lo for s in self.ssts]
        self.his = [s.hi for s in self.ssts]

    def position(self, user_key: bytes) -> int:
        i = bisect.bisect_right(self.los, user_key) - 1
        return i if i >= 0 and self.ssts[i].hi >= user_key else -1

    def find(self, user_key: bytes) -> SstRun | None:
        i = self.position(user_key)
        return self.ssts[i] if i >= 0 else None


@dataclass
class Found:
    """Values found in one run: query positions (sorted order) and their HummockValues."""

    pos: np.ndarray
    data: np.ndarray
    vstart: np.ndarray
    vlen: np.ndarray


class ReadView:
    """The runs a read searches, newest first (rebuilt when the version or local data change)."""

    def __init__(
        self,
        imms: list[Imm],
        synced: list[SstableInfo],
        version: HummockVersion,
        epoch_keys: dict[int, EpochKeys] | None = None,
    ) -> None:
        self.imms = [ImmRun(i) for i in reversed(imms)]
        # the key index of each epoch with several imms (taken with the imms: it covers them)
        per_epoch: dict[int, int] = {}
        for i in imms:
            per_epoch[pure_epoch(i.epoch)] = per_epoch.get(pure_epoch(i.epoch), 0) + 1
        self.epoch_keys = {e: k for e, k in (epoch_keys or {}).items() if per_epoch.get(e, 0) > 1}
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
        order = sort_order(data, start, length - EPOCH_LEN, stable=False)
        # the targets laid out in sorted order: every later pass reads them front to back
        data, start, length = padded_ragged(_rows_in_order(targets, order))
        q = Queries(data, start, length, user_keys, order, filter_lens)
        pending = np.arange(n)
        found: list[Found] = []
        may_hold: dict[int, np.ndarray] = {}  # per epoch with a key index: may its imms hold it
        for imm in self.imms:
            if imm.epoch <= read_epoch and len(pending):
                cand = pending
                keys = self.epoch_keys.get(pure_epoch(imm.epoch)) if filter_lens is not None else None
                if keys is not None:
                    e = pure_epoch(imm.epoch)
                    if e not in may_hold:
                        hashes = q.hashes()
                        assert hashes is not None
                        may_hold[e] = keys.may_hold(hashes, q.table_ids() if keys.unfiltered else None)
                    cand = pending[may_hold[e][pending]]
                    if not len(cand):
                        continue
                run = imm.run()
                hit, pos = find(run, q, cand)
                if hit.any():
                    found.append(Found(cand[hit], run.vdata, *run.value_pos(pos[hit])))
                    pending = (
                        pending[~hit]
                        if cand is pending
                        else np.setdiff1d(pending, cand[hit], assume_unique=True)
                    )
        for s in self.l0:
            if not len(pending):
                break
            if s.min_epoch > read_epoch:
                continue
            j = _in_range(q, pending, s.lo, s.hi)
            if len(j):
                got = self._in_sst(store, s, q, j, found, use_filter=True)
                if len(got):
                    pending = np.setdiff1d(pending, got, assume_unique=True)
        last = len(self.levels) - 1
        for i, lv in enumerate(self.levels):
            if not len(pending):
                break
            resolved = []
            # per SST of the level (a bisect over the sorted queries each), not per key
            first = max(bisect.bisect_right(lv.los, q.user_key(int(pending[0]))) - 1, 0)
            lo_q = 0
            for s in lv.ssts[first:]:
                a = int(np.searchsorted(pending, q.bound(s.lo, right=False, lo=int(pending[lo_q])), "left"))
                if a >= len(pending):
                    break
                b = int(np.searchsorted(pending, q.bound(s.hi, right=True, lo=int(pending[a])), "left"))
                lo_q = min(b, len(pending) - 1)
                if b > a and s.min_epoch <= read_epoch:
                    # the bottom level skips the filter, as `get` does
                    resolved.append(self._in_sst(store, s, q, pending[a:b], found, use_filter=i != last))
                if b >= len(pending):
                    break
            if resolved:
                pending = np.setdiff1d(pending, np.concatenate(resolved), assume_unique=True)
        return self._assemble(found, q, order, n, read_epoch)

    def _in_sst(
        self,
        store: SstableStore,
        s: SstRun,
        q: Queries,
        j: np.ndarray,
        found: list[Found],
        *,
        use_filter: bool,
    ) -> np.ndarray:
        """Look up queries `j` in one SST; returns the ones it answered (a version or a tombstone)."""
        meta = s.get_meta(store)
        hashes = q.hashes() if use_filter else None
        if hashes is not None:
            j = j[meta.may_contain_many(hashes[j], q.table_ids()[j])]
        if not len(j):
            return j
        d = store.cached(s.info, len(j))
        in_prefix = s.in_prefix(meta)  # the queries lie in the SST's user-key range
        if d is None or not d.all_loaded:
            d = d if d is not None else store.decoded(s.info)
            nb = len(meta)
            if d.load_on_demand and (nb - int(np.count_nonzero(d.loaded))) * FILL_MISSING_FRACTION <= nb:
                # a mapped SST with a few holes left (a cache warmed by single-key gets): verify
                # the rest now, so this and later batches take the warm search (sampled, and
                # with no per-entry check of what is loaded)
                d = store.load_blocks(s.info, np.flatnonzero(~d.loaded))
            if d.load_on_demand and not d.all_loaded:
                # a mapped SST with its search words: search it whole; the blocks of the entries
                # the search reads are verified as it reads them (nothing is copied)
                before = d.n_loaded
                hit, pos = find(d, q, j, in_prefix=in_prefix)
                if hit.any():
                    found.append(Found(j[hit], d.vdata, *d.value_pos(pos[hit])))
                store.charge(s.info, d, before, len(j))
                return j[hit]
        if d is None or not d.all_loaded:
            nb = len(meta)
            missing = nb if d is None else nb - int(np.count_nonzero(d.loaded))
            if len(j) >= FILL_KEYS_PER_BLOCK * nb or missing * FILL_MISSING_FRACTION <= nb:
                # the batch would touch most blocks anyway, or few are missing: read the rest
                # (runs of consecutive blocks in one read each) and search the SST whole
                d = store.load_blocks(s.info, np.arange(nb))
        if d is not None and d.all_loaded:
            hit, pos = find(d, q, j, in_prefix=in_prefix)
        else:
            # route to blocks by their first keys, load them, search clipped to each block
            if in_prefix:
                blocks = meta.route(q.data, q.start[j], q.length[j])
            else:
                blocks = meta.index().route(q.data, q.start[j], q.length[j])
            d = store.load_blocks(s.info, blocks)
            if d.all_loaded:
                hit, pos = find(d, q, j, in_prefix=in_prefix)
            else:
                hit, pos = find(d, q, j, d.ebase[blocks], d.ebase[blocks + 1], in_prefix=in_prefix)
                # past its block: the candidate is the next block's first entry (versions of a key
                # may straddle blocks); it answers if it has the target's user key
                nb = len(meta)
                past = np.flatnonzero(~hit & (pos == d.ebase[blocks + 1]) & (blocks + 1 < nb))
                if len(past):
                    fk = meta.index()
                    nxt = blocks[past] + 1
                    same = same_user_key(fk.data, fk.starts[nxt], fk.lens[nxt], q, j[past])
                    if same.any():
                        d = store.load_blocks(s.info, nxt[same])
                        hit[past[same]] = True
                        pos[past[same]] = d.ebase[nxt[same]]
        if hit.any():
            found.append(Found(j[hit], d.vdata, *d.value_pos(pos[hit])))
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
        src_start[dest] = np.concatenate(starts)
        src_len[dest] = np.concatenate(lens)
        src_len[~ok] = 0
        # the rows of each run's buffer are known: no pass over all rows per buffer
        return ok, gather_views(bufs, None, src_start, src_len, where)

    # -- helpers for ranges ---------------------------------------------------------------------
    def sst_runs(self) -> list[SstRun]:
        return [*self.l0, *(s for lv in self.levels for s in lv.ssts)]


def _rows_in_order(r: Ragged, order: np.ndarray) -> Ragged:
    """`r.take(order)`; a row gather of the matrix when every string has one width."""
    n = r.n
    w = int(r.offsets[1] - r.offsets[0]) if n else 0
    if n and int(r.offsets[-1] - r.offsets[0]) == w * n and (np.diff(r.offsets) == w).all():
        base = int(r.offsets[0])
        return Ragged.fixed(np.take(r.data[base : base + w * n].reshape(n, w), order, axis=0))
    return r.take(order)


def _in_range(q: Queries, pending: np.ndarray, lo: bytes, hi: bytes) -> np.ndarray:
    """The pending queries whose user keys lie in [lo, hi] (two bisects)."""
    a, b = np.searchsorted(pending, [q.bound(lo, right=False), q.bound(hi, right=True)])
    return pending[a:b]


def _empty_values(n: int) -> pa.Array:
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")]
    )


def below_watermark_key(user_key: bytes, wms: dict[int, TableWatermark], read_epoch: int) -> bool:
    wm = wms.get(int.from_bytes(user_key[:TABLE_ID_LEN], "big"))
    if wm is None or read_epoch < wm.epoch:
        return False
    key = wm.key_for_vnode(int.from_bytes(user_key[TABLE_ID_LEN:TABLE_PREFIX_LEN], "big"))
    return key is not None and user_key[TABLE_PREFIX_LEN:] < key
