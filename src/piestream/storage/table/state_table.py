"""StateTable: how streaming executors read and write their state (seed 000; reference §4).

Write path (seed 000): `insert_row` / `delete_row` / `update_row` / `write_chunk` only touch the
MemTable; on a barrier `commit(epoch_pair)` turns the buffered operations into KV pairs written to
Hummock's shared buffer with the epoch that just ended. A MemTable that grows past the spill
threshold is flushed early with the epoch's next spill offset, so later writes shadow it.

Read path (seed 000): reads see uncommitted data. `get_row` asks the MemTable first, then
storage; scans merge the MemTable over storage, a MemTable entry winning over storage and deletes
hiding rows. Rows are full table rows (tuples of datums); scans also come as Arrow chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.epoch import MAX_EPOCH, EpochPair, with_spill
from piestream.common.errors import StateConsistencyError
from piestream.common.order import OrderType
from piestream.common.scalar import Datum, Row
from piestream.common.vnode import VnodeBitmap
from piestream.encoding import memcomparable
from piestream.encoding.keys import TABLE_ID_LEN, VNODE_LEN, encode_epoch, next_key
from piestream.encoding.ragged import Ragged, concat_rows
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.hummock.version import TableWatermark
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.key_range import UNBOUNDED, SubRange, byte_range
from piestream.storage.table.mem_table import Drained, KeyOp, KeyOpKind, MemTable, Ops
from piestream.storage.table.row_serde import RowSerde

DEFAULT_SPILL_THRESHOLD = 4 << 20
#: A MemTable nothing has read this epoch spills only past this multiple of the threshold
#: (`try_flush`).
WRITE_ONLY_SPILL_FACTOR = 16


class StateTable:
    """A relational table as one actor's executor sees it: its vnodes, its uncommitted writes."""

    def __init__(
        self,
        desc: TableDesc,
        storage: HummockStorage,
        vnodes: VnodeBitmap | None = None,
        *,
        check_consistency: bool = True,
        sanity_check_storage: bool = False,
        spill_threshold: int = DEFAULT_SPILL_THRESHOLD,
        on_inconsistency: Callable[[int, str, int, str], None] | None = None,
    ) -> None:
        self.desc = desc
        self.storage = storage
        self.serde = RowSerde(desc)
        self.vnodes = vnodes if vnodes is not None else VnodeBitmap.full(desc.vnode_count)
        if self.vnodes.count != desc.vnode_count:
            raise ValueError(f"vnode bitmap of {self.vnodes.count} vnodes for a table of {desc.vnode_count}")
        # lenient (a callback given): an inconsistent op is reported as (table, what, count, key)
        # and applied, instead of failing the epoch
        self._on_inconsistency = on_inconsistency
        report = None
        if on_inconsistency is not None:
            table_id = desc.table_id

            def report(what: str, n: int, key: bytes) -> None:
                on_inconsistency(table_id, f"inconsistent op in state table: {what}", n, f"key {key.hex()}")

        self.mem = MemTable(check_consistency=check_consistency, on_inconsistency=report)
        self.sanity_check_storage = sanity_check_storage
        self.spill_threshold = spill_threshold
        self._epoch: EpochPair | None = None
        self._spill_offset = 0
        self._pending_watermark: Datum = None
        self._prefix = desc.table_id.to_bytes(TABLE_ID_LEN, "big")
        self._hint = desc.read_prefix_len_hint

    def surely_empty(self) -> bool:
        """Whether the table is known to hold no row, from metadata alone (no uncommitted write,
        no run of the storage that may hold the table): a cheap test where a scan of the whole
        LSM for one row would cost a merge over every run. False may still be an empty table."""
        return not len(self.mem) and not self.storage.may_hold_table(self.desc.table_id)

    # -- epochs ---------------------------------------------------------------------------------
    def init_epoch(self, epoch: EpochPair) -> None:
        """Called on the first barrier: writes until the next barrier carry `epoch.curr`."""
        self._epoch = epoch
        self._spill_offset = 0

    @property
    def epoch(self) -> int:
        if self._epoch is None:
            raise StateConsistencyError(f"state table {self.desc.table_id} used before init_epoch")
        return self._epoch.curr

    def commit(self, new_epoch: EpochPair) -> None:
        """On a barrier: flush the MemTable with the ending epoch, then move to `new_epoch`."""
        if self._epoch is None:
            raise StateConsistencyError("commit before init_epoch")
        if new_epoch.prev != self._epoch.curr:
            raise StateConsistencyError(
                f"state table {self.desc.table_id}: epochs must advance as pairs "
                f"(current {self._epoch.curr}, barrier prev {new_epoch.prev})"
            )
        self._flush()
        if self._pending_watermark is not None:
            self._record_watermark(self._pending_watermark)
            self._pending_watermark = None
        self._epoch = new_epoch
        self._spill_offset = 0

    def try_flush(self) -> None:
        """Spill the MemTable to the shared buffer if it grew past the threshold. The threshold
        keeps the merges of a MemTable that is read small; one only written to (a bulk load
        behind a complete cache) waits for `WRITE_ONLY_SPILL_FACTOR` times as much: its chunks
        are sorted once instead of once per spill, and the epoch's sync finds one run per actor
        to write instead of many overlapping ones to merge. The bytes are buffered either way
        (a spill moves them to the shared buffer until the sync)."""
        n = self.mem.nbytes
        if n > self.spill_threshold and (
            not self.mem.write_only or n > WRITE_ONLY_SPILL_FACTOR * self.spill_threshold
        ):
            self._flush()

    def _flush(self) -> None:
        if self.sanity_check_storage:
            ops = self.mem.drain()
            if not ops:
                return
            self._check_against_storage(ops)
            drained = MemTable.drained_of(ops)
        else:
            maybe = self.mem.drain_arrays()
            if maybe is None:
                return
            drained = maybe
        epoch = with_spill(self.epoch, self._spill_offset)
        self._spill_offset += 1
        self.storage.write_batch(self._to_batch(drained, epoch), epoch)

    def _to_batch(self, d: Drained, epoch: int) -> KvBatch:
        """Sorted ops as Hummock entries: Insert/Update -> Put(new row), Delete -> tombstone."""
        keys = Ragged.from_arrow(d.keys)
        n = keys.n
        head = Ragged.constant(n, self._prefix)
        tail = Ragged.constant(n, encode_epoch(epoch))
        full = concat_rows([head, keys, tail])
        tags = Ragged.fixed(d.deletes.astype(np.uint8).reshape(n, 1))
        values = concat_rows([tags, Ragged.from_arrow(d.rows)])
        return KvBatch(full.to_arrow(), values.to_arrow(), self._filter_lens(keys))

    def _filter_lens(self, table_keys: Ragged) -> np.ndarray:
        return filter_lens(self.desc, table_keys)

    def _check_against_storage(self, ops: list[tuple[bytes, KeyOp]]) -> None:
        # per key: the storage sanity check is a debugging aid, off outside tests
        bad: list[tuple[str, bytes]] = []
        for key, (kind, old, _) in ops:
            stored = self.storage.get(self._prefix + key)
            if kind is KeyOpKind.INSERT and stored is not None:
                bad.append(("insert of a key that storage already holds", key))
            elif kind is KeyOpKind.DELETE and stored is None:
                bad.append(("delete of a key that storage does not hold", key))
            elif kind is not KeyOpKind.INSERT and stored != old:
                bad.append(("old value differs from storage", key))
        if not bad:
            return
        what, key = bad[0]
        if self._on_inconsistency is None:
            raise StateConsistencyError(f"{what}: key {key.hex()}")
        # lenient: the ops stand (an insert overwrites, a delete of nothing writes a tombstone)
        self._on_inconsistency(
            self.desc.table_id, f"inconsistent op in state table: {what}", len(bad), f"key {key.hex()}"
        )

    # -- vnodes ---------------------------------------------------------------------------------
    def _check_owned(self, vnode: int) -> None:
        if vnode not in self.vnodes:
            raise StateConsistencyError(f"state table {self.desc.table_id}: vnode {vnode} is not owned here")

    def update_vnodes(self, vnodes: VnodeBitmap) -> None:
        """Take a new vnode range (rescaling); only between epochs, with nothing buffered."""
        if len(self.mem):
            raise StateConsistencyError("cannot change vnodes with uncommitted writes")
        self.vnodes = vnodes

    # -- writes ---------------------------------------------------------------------------------
    def insert_row(self, row: Sequence[Datum]) -> None:
        key = self.serde.table_key_of_row(row)
        self._check_owned(int.from_bytes(key[:VNODE_LEN], "big"))
        self.mem.insert(key, self.serde.value_of_row(row))
        self.try_flush()

    def delete_row(self, row: Sequence[Datum]) -> None:
        key = self.serde.table_key_of_row(row)
        self._check_owned(int.from_bytes(key[:VNODE_LEN], "big"))
        self.mem.delete(key, self.serde.value_of_row(row))
        self.try_flush()

    def update_row(self, old: Sequence[Datum], new: Sequence[Datum]) -> None:
        key = self.serde.table_key_of_row(new)
        if key != self.serde.table_key_of_row(old):
            raise StateConsistencyError("update_row must not change the pk")
        self._check_owned(int.from_bytes(key[:VNODE_LEN], "big"))
        self.mem.update(key, self.serde.value_of_row(old), self.serde.value_of_row(new))
        self.try_flush()

    def write_chunk(self, chunk: StreamChunk) -> None:
        """Apply a chunk: Insert/UpdateInsert insert, Delete/UpdateDelete delete (keys and values
        encoded for the whole chunk at once; the MemTable merge is one dict step per row)."""
        c = chunk.compact()
        if not c.capacity:
            return
        keys, vnodes = self.serde.table_keys(c.columns)
        if not self.vnodes.owns(vnodes).all():
            bad = int(vnodes[~self.vnodes.owns(vnodes)][0])
            raise StateConsistencyError(f"state table {self.desc.table_id}: vnode {bad} is not owned here")
        vals = self.serde.values(c.columns)
        nbytes = int(keys.offsets[-1] - keys.offsets[0] + vals.offsets[-1] - vals.offsets[0])
        ops = c.ops
        pairs = np.flatnonzero((ops[:-1] == Op.UPDATE_DELETE) & (ops[1:] == Op.UPDATE_INSERT))
        self.mem.apply_batch(keys.to_arrow(), vals.to_arrow(), c.insert_mask(), nbytes, update_pairs=pairs)
        self.try_flush()

    # -- watermarks -----------------------------------------------------------------------------
    def update_watermark(self, watermark: Datum) -> None:
        """Rows whose first pk column is below `watermark` may be cleaned once this epoch commits."""
        if self.desc.watermark_col is None:
            raise StateConsistencyError(f"state table {self.desc.table_id} has no watermark column")
        self._pending_watermark = watermark

    def _record_watermark(self, watermark: Datum) -> None:
        col = self.desc.pk[0]
        key = memcomparable.encode_datum(watermark, self.desc.columns[col].data_type, self.desc.pk_orders[0])
        committed = self.storage.version.table_watermarks.get(self.desc.table_id)
        if committed is not None:
            for lo, hi in self.vnodes.ranges():
                for v in range(lo, hi):
                    old = committed.key_for_vnode(v)
                    if old is not None and key < old:
                        raise StateConsistencyError(
                            f"state table {self.desc.table_id}: watermark moved backwards in vnode {v}"
                        )
        ranges = tuple((lo, hi, key) for lo, hi in self.vnodes.ranges())
        self.storage.add_table_watermark(self.desc.table_id, TableWatermark(self.epoch, ranges))

    # -- point reads ----------------------------------------------------------------------------
    def _filter_len_of(self, pk: Sequence[Datum], key: bytes) -> int:
        if self._hint == 0 or len(pk) < self._hint:
            return 0
        if self._hint == len(pk):
            return len(key) - VNODE_LEN
        return len(self.serde.encode_pk(list(pk[: self._hint])))

    def get_row(self, pk: Sequence[Datum]) -> Row | None:
        """The row with primary key `pk`, seeing this epoch's uncommitted writes."""
        key = self.serde.table_key_of_pk(pk)
        value = self._get_value(key, self._filter_len_of(pk, key))
        return None if value is None else self.serde.decode_row(key, value)

    def exists(self, pk: Sequence[Datum]) -> bool:
        key = self.serde.table_key_of_pk(pk)
        return self._get_value(key, self._filter_len_of(pk, key)) is not None

    def _get_value(self, key: bytes, filter_len: int) -> bytes | None:
        op = self.mem.get(key)
        if op is not None:
            return None if op[0] is KeyOpKind.DELETE else op[2]
        return self.storage.get(self._prefix + key, MAX_EPOCH, filter_len=filter_len)

    def pk_keys(
        self, pk_columns: Sequence[pa.Array], num_rows: int | None = None
    ) -> tuple[Ragged, np.ndarray]:
        return pk_keys(self.desc, pk_columns, num_rows)

    def get_rows(
        self, pk_columns: Sequence[pa.Array], num_rows: int | None = None
    ) -> tuple[np.ndarray, DataChunk]:
        """Vectorized `get_row` for a batch of pks as columns: (found mask, the table rows as a
        chunk; rows not found are NULL). The MemTable answers first (one batched lookup), storage
        the rest (one `multi_get_columns`); no step runs per key. An empty pk needs `num_rows`."""
        key_r, flen = self.pk_keys(pk_columns, num_rows)
        n = key_r.n
        kinds, mem_vals = self.mem.lookup(key_r)
        values = mem_vals
        found = (kinds != 0) & (kinds != KeyOpKind.DELETE)
        missing = np.flatnonzero(kinds == 0)
        if len(missing):
            user = concat_rows([Ragged.constant(len(missing), self._prefix), key_r.take(missing)])
            got, vals = self.storage.multi_get_columns(user, MAX_EPOCH, filter_lens=flen[missing])
            found[missing] = got
            if got.any():
                # values in key order: memtable rows where buffered, storage rows where read
                src = np.zeros(n, np.int64)
                src[missing] = np.arange(len(missing)) + len(mem_vals)
                buffered = np.flatnonzero(kinds != 0)
                src[buffered] = buffered
                values = pa.concat_arrays([mem_vals, vals]).take(pa.array(src))
        return found, decode_found(self.serde, self.desc, key_r, found, values)

    # -- scans ----------------------------------------------------------------------------------
    def _prefix_key(self, prefix: Sequence[Datum], vnode: int) -> bytes:
        return vnode.to_bytes(VNODE_LEN, "big") + (self.serde.encode_pk(list(prefix)) if prefix else b"")

    def _scan_vnodes(self, prefix: Sequence[Datum], vnode: int | None) -> list[int]:
        if vnode is not None:
            self._check_owned(vnode)
            return [vnode]
        if len(prefix) >= self.desc.dist_prefix_len() and not self.desc.is_singleton:
            v = self.serde.vnode_of_pk(prefix)
            self._check_owned(v)
            return [v]
        if self.desc.is_singleton:
            return [0]
        return self.vnodes.vnodes().tolist()

    def iter_chunks_with_prefix(
        self,
        prefix: Sequence[Datum] = (),
        sub_range: SubRange = UNBOUNDED,
        *,
        vnode: int | None = None,
        limit: int | None = None,
    ) -> Iterator[DataChunk]:
        """Rows whose pk starts with `prefix` (and whose next pk columns lie in `sub_range`), in pk
        order within each vnode, as Arrow chunks. The prefix determines the vnode if it covers the
        distribution key; otherwise every owned vnode (or `vnode`) is scanned."""
        remaining = limit
        n_prefix = len(prefix)

        def enc(values: tuple[Datum, ...]) -> bytes:
            k = len(values)
            return memcomparable.encode_row(
                list(values),
                self.desc.pk_types[n_prefix : n_prefix + k],
                list(self.desc.pk_orders[n_prefix : n_prefix + k]),
            )

        use_filter = self._hint > 0 and n_prefix == self._hint
        if not prefix and sub_range == UNBOUNDED and vnode is None and not self.desc.is_singleton:
            # a full scan: one pass per contiguous range of owned vnodes, not one per vnode
            for lo, hi in self.vnodes.ranges():
                end = hi.to_bytes(VNODE_LEN, "big") if hi < 1 << (8 * VNODE_LEN) else None
                for chunk in self._merged_range(lo.to_bytes(VNODE_LEN, "big"), end, None):
                    if remaining is not None:
                        if chunk.cardinality >= remaining:
                            yield chunk.slice(0, remaining)
                            return
                        remaining -= chunk.cardinality
                    yield chunk
            return
        for v in self._scan_vnodes(prefix, vnode):
            pk_prefix = self._prefix_key(prefix, v)
            start, end = byte_range(pk_prefix, sub_range, enc)
            fkey = self._prefix + pk_prefix if use_filter else None
            for chunk in self._merged_range(start, end, fkey):
                if remaining is not None:
                    if chunk.cardinality >= remaining:
                        yield chunk.slice(0, remaining)
                        return
                    remaining -= chunk.cardinality
                yield chunk

    def iter_with_prefix(
        self,
        prefix: Sequence[Datum] = (),
        sub_range: SubRange = UNBOUNDED,
        *,
        vnode: int | None = None,
        limit: int | None = None,
    ) -> Iterator[Row]:
        """`iter_chunks_with_prefix` as Python row tuples."""
        for chunk in self.iter_chunks_with_prefix(prefix, sub_range, vnode=vnode, limit=limit):
            yield from chunk.to_rows(self.desc.types)

    def scan(self) -> Iterator[Row]:
        """Every row of every owned vnode."""
        return self.iter_with_prefix(())

    def scan_prefixes(self, prefixes: Sequence[Sequence[Datum]]) -> tuple[DataChunk, np.ndarray]:
        """All rows whose pk starts with any of `prefixes` (each must determine its vnode), in one
        storage pass: (rows grouped by prefix, in the order of `prefixes`; row count per prefix).
        Operators probing state for many keys at once (a join's chunk) use it instead of one
        prefix scan per key."""
        n = len(prefixes)
        counts = np.zeros(n, np.int64)
        if not n:
            return DataChunk([pa.nulls(0, t.arrow) for t in self.desc.types], length=0), counts
        # per prefix: the prefixes arrive as Python rows; `scan_prefix_keys` takes encoded columns
        keys = [self._prefix_key(p, self._scan_vnodes(p, None)[0]) for p in prefixes]
        return self.scan_prefix_keys(Ragged.from_list(keys), all(len(p) == self._hint for p in prefixes))

    def scan_prefix_columns(self, prefix_columns: Sequence[pa.Array]) -> tuple[DataChunk, np.ndarray]:
        """`scan_prefixes` of prefixes given as columns (the leading pk columns, covering the
        distribution key, or the empty prefix of a singleton table), encoded vectorized."""
        m = len(prefix_columns)
        if m < self.desc.dist_prefix_len():
            raise ValueError(f"a prefix of {m} pk columns does not determine the vnode")
        if not m:
            prefixes: list[Sequence[Datum]] = [()]
            return self.scan_prefixes(prefixes)
        keys, _ = self.pk_keys(prefix_columns)
        return self.scan_prefix_keys(keys, self._hint > 0 and m == self._hint)

    def scan_prefix_keys(self, prefix_keys: Ragged, filtered: bool = False) -> tuple[DataChunk, np.ndarray]:
        """`scan_prefixes` of table-key prefixes (``vnode | memcomparable(pk prefix)``): the
        prefixes are sorted once, storage reads every prefix's range in one `scan_ranges` call
        (each run searched for all ranges at once), the MemTable's ops under the prefixes are
        found with one vector search and applied over the storage rows, and each prefix's run of
        rows is located with one more vector search. Nothing runs per prefix in Python."""
        from piestream.storage.hummock.key_index import KeyIndex, padded_ragged, sort_order
        from piestream.storage.hummock.range_search import next_keys

        n = prefix_keys.n
        counts = np.zeros(n, np.int64)
        pd, ps, pl = padded_ragged(prefix_keys)
        order = sort_order(pd, ps, pl)
        keys = prefix_keys.take(order)
        # storage ranges [table | prefix, next_key(table | prefix))
        starts = concat_rows([Ragged.constant(n, self._prefix), keys])
        ends, has_end = next_keys(starts)
        fkeys = starts if self._hint > 0 and filtered else None
        batch = self.storage.scan_ranges(starts, ends, has_end, MAX_EPOCH, filter_keys=fkeys)
        tkeys = batch.table_keys() if len(batch) else None
        mem_ops = self._mem_ranges(keys)
        merged = self._merge_batch(tkeys, batch.values if len(batch) else None, mem_ops)
        if merged is None:
            return DataChunk([pa.nulls(0, t.arrow) for t in self.desc.types], length=0), counts
        chunk, tkey_arr = merged
        # rows are in key order; each sorted prefix owns a run of them: find the runs with one
        # vector search, then lay them out in the callers' prefix order
        tk = Ragged.from_arrow(tkey_arr)
        bounds = _packed_prefix_bounds(keys, tk.data, tk.offsets[:-1], tk.lengths)
        if bounds is not None:
            lo, hi = bounds
        else:
            idx = KeyIndex.of_ragged(tk)
            kd, ks, kl = padded_ragged(keys)
            lo = idx.lower_bound(kd, ks, kl)
            hi = np.full(n, tk.n, np.int64)
            tends, has = next_keys(keys)
            if has.any():
                ed, es, el = padded_ragged(tends)
                hi[has] = idx.lower_bound(ed, es[has], el[has])
        counts[order] = hi - lo
        inv_lo = np.empty(n, np.int64)
        inv_lo[order] = lo
        total = int(counts.sum())
        take = np.repeat(inv_lo - (np.cumsum(counts) - counts), counts) + np.arange(total, dtype=np.int64)
        return chunk.take(take), counts

    def _mem_ranges(self, sorted_prefixes: Ragged) -> Ops:
        """The MemTable's ops under any of the sorted key prefixes (one vector search)."""
        if not len(self.mem):
            return Ops.empty()
        from piestream.storage.hummock.key_index import padded_ragged
        from piestream.storage.hummock.range_search import next_keys

        idx = self.mem.index()
        bounds = _packed_prefix_bounds(sorted_prefixes, idx.data, idx.starts, idx.lens)
        if bounds is not None:
            lo, hi = bounds
        else:
            qd, qs, ql = padded_ragged(sorted_prefixes)
            lo = idx.lower_bound(qd, qs, ql)
            ends, has = next_keys(sorted_prefixes)
            hi = np.full(sorted_prefixes.n, len(idx.starts), np.int64)
            if has.any():
                ed, es, el = padded_ragged(ends)
                hi[has] = idx.lower_bound(ed, es[has], el[has])
        cnt = np.maximum(hi - lo, 0)
        total = int(cnt.sum())
        if not total:
            return Ops.empty()
        take = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(total, dtype=np.int64)
        if len(sorted_prefixes) > 1 and not _disjoint(lo, hi):
            take = np.unique(take)  # nested prefixes: each op once
        return self.mem.ops().take(take)

    def _merged_range(self, start: bytes, end: bytes | None, filter_key: bytes | None) -> Iterator[DataChunk]:
        """Storage rows in [start, end) with the MemTable's ops applied (the MemTable wins)."""
        from piestream.storage.hummock.key_index import KeyIndex, padded_ragged

        mem_ops = self.mem.range_ops(start, end) if len(self.mem) else Ops.empty()
        mem_index = KeyIndex.of_ragged(Ragged.from_arrow(mem_ops.keys)) if len(mem_ops) else None
        p = self._prefix
        storage_end = p + end if end is not None else next_key(p)
        batches = self.storage.iter(p + start, storage_end, MAX_EPOCH, filter_key=filter_key)
        mi = 0
        for batch in batches:
            tkeys = batch.table_keys()
            hi = mi
            if mem_index is not None and mi < len(mem_ops):
                # MemTable ops up to this batch's last key merge into it
                last = tkeys[len(tkeys) - 1].as_py()
                qd, qs, ql = padded_ragged(Ragged.from_list([last]))
                hi = max(mi, int(mem_index.lower_bound(qd, qs, ql, right=True)[0]))
            merged = self._merge_batch(tkeys, batch.values, mem_ops.slice(mi, hi))
            mi = hi
            if merged is not None:
                yield merged[0]
        if mi < len(mem_ops):
            merged = self._merge_batch(None, None, mem_ops.slice(mi, len(mem_ops)))
            if merged is not None:
                yield merged[0]

    def _merge_batch(
        self, tkeys: pa.Array | None, values: pa.Array | None, ops: Ops
    ) -> tuple[DataChunk, pa.Array] | None:
        """Storage entries (table keys, HummockValues of Puts) with MemTable ops applied: (decoded
        rows, their table keys), key order."""
        rows = values
        if len(ops):
            rows = Ragged.from_arrow(values).slice_bytes(1).to_arrow() if values is not None else None
            if tkeys is not None:
                keep = pc.invert(pc.is_in(tkeys, value_set=ops.keys))
                tkeys = tkeys.filter(keep)
                rows = rows.filter(keep)  # type: ignore[union-attr]
            live = np.flatnonzero(ops.kinds != KeyOpKind.DELETE)
            if len(live):
                ia = pa.array(live, pa.int64())
                lk, lv = ops.keys.take(ia), ops.new.take(ia)
                if tkeys is None or not len(tkeys):
                    tkeys, rows = lk, lv
                else:
                    tkeys = pa.concat_arrays([tkeys, lk])
                    rows = pa.concat_arrays([rows, lv])
                    order = pc.sort_indices(tkeys)
                    tkeys, rows = tkeys.take(order), rows.take(order)
        if tkeys is None or not len(tkeys):
            return None
        assert rows is not None
        # storage values alone are decoded past their tag byte, without a copy
        cols = self.serde.decode(tkeys, rows, value_start=0 if len(ops) else 1)
        return DataChunk(cols, length=len(tkeys)), tkeys


def _packed_prefix_bounds(
    prefixes: Ragged, data: np.ndarray, starts: np.ndarray, lens: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each sorted prefix's keys lie among sorted keys (`data` / `starts` / `lens`):
    ([lo, hi) per prefix), when every prefix has one width L (a fixed-width join key), every key
    is at least L bytes long, and the first L bytes of the prefixes and keys pack into one uint64
    each (`packed_keys`): then two `searchsorted` calls find them, where the general search
    compares variable-length keys. None: use the general search."""
    from piestream.storage.hummock.key_index import packed_keys, padded

    plens = prefixes.lengths
    if not prefixes.n or not len(starts) or not (plens == plens[0]).all():
        return None
    width = int(plens[0])
    if width <= 0 or int(lens.min()) < width:
        return None
    pa_, pz = int(prefixes.offsets[0]), int(prefixes.offsets[-1])
    ka, kz = int(starts.min()), int((starts + lens).max())
    buf = padded(np.concatenate([prefixes.data[pa_:pz], data[ka:kz]]))
    at = np.concatenate(
        [prefixes.offsets[:-1].astype(np.int64) - pa_, starts.astype(np.int64) - ka + (pz - pa_)]
    )
    packed = packed_keys(buf, at, np.full(len(at), width, np.int64))
    if packed is None:
        return None
    p, k = packed[: prefixes.n], packed[prefixes.n :]
    return np.searchsorted(k, p, "left"), np.searchsorted(k, p, "right")


def _disjoint(lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether sorted ranges [lo, hi) of positions overlap nowhere (prefixes that nest do)."""
    return bool((hi[:-1] <= lo[1:]).all())


def order_of(desc: TableDesc) -> list[OrderType]:
    return list(desc.pk_orders)


def filter_lens(desc: TableDesc, table_keys: Ragged) -> np.ndarray:
    """Bytes of the first `read_prefix_len_hint` pk columns of each key (the SST filter key)."""
    hint = desc.read_prefix_len_hint
    if hint == 0 or table_keys.n == 0:
        return np.zeros(table_keys.n, np.uint16)
    if hint == len(desc.pk):  # the filter key is the whole pk
        return (table_keys.lengths - VNODE_LEN).astype(np.uint16)
    _, ends = memcomparable.decode_keys(
        table_keys, desc.pk_types[:hint], list(desc.pk_orders[:hint]), VNODE_LEN
    )
    return (ends - VNODE_LEN).astype(np.uint16)


def pk_keys(
    desc: TableDesc, pk_columns: Sequence[pa.Array], num_rows: int | None = None
) -> tuple[Ragged, np.ndarray]:
    """(table keys ``vnode | memcomparable(pk)``, filter lengths) of a batch of pks; fewer
    columns than the pk give prefix keys (they must cover the distribution key)."""
    n = len(pk_columns[0]) if pk_columns else (num_rows or 0)
    m = len(pk_columns)
    pk_bytes = memcomparable.encode_columns(
        list(pk_columns), desc.pk_types[:m], list(desc.pk_orders[:m]), num_rows=n
    )
    if desc.is_singleton:
        vn = np.zeros(n, np.int64)
    else:
        from piestream.encoding.distribution import compute_vnodes

        dcols = [pk_columns[p] for p in desc.dist_key_in_pk]
        dtypes = [desc.pk_types[p] for p in desc.dist_key_in_pk]
        vn = compute_vnodes(dcols, dtypes, desc.vnode_count)
    from piestream.encoding.ragged import be_matrix

    key_r = concat_rows([Ragged.fixed(be_matrix(vn.astype(np.uint16), ">u2")), pk_bytes])
    flen = filter_lens(desc, key_r) if desc.read_prefix_len_hint else np.zeros(n, np.uint16)
    return key_r, flen


def decode_found(
    serde: RowSerde, desc: TableDesc, key_r: Ragged, found: np.ndarray, values: pa.Array
) -> DataChunk:
    """The rows of a batch of point gets as a chunk in key order, NULL where not `found`."""
    n = key_r.n
    if not found.any():
        return DataChunk([pa.nulls(n, t.arrow) for t in desc.types], length=n)
    idx = np.flatnonzero(found)
    rows = serde.decode(key_r.take(idx), values.take(pa.array(idx)))
    if len(idx) == n:
        return DataChunk(rows, length=n)
    # scatter found rows back to their positions, NULL elsewhere
    where = np.full(n, -1, np.int64)
    where[idx] = np.arange(len(idx))
    take = pa.array(where, mask=~found)
    return DataChunk([col.take(take) for col in rows], length=n)
