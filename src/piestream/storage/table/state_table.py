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

import bisect
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, StreamChunk
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
from piestream.storage.table.mem_table import Drained, KeyOp, KeyOpKind, MemTable
from piestream.storage.table.row_serde import RowSerde

DEFAULT_SPILL_THRESHOLD = 4 << 20


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
    ) -> None:
        self.desc = desc
        self.storage = storage
        self.serde = RowSerde(desc)
        self.vnodes = vnodes if vnodes is not None else VnodeBitmap.full(desc.vnode_count)
        if self.vnodes.count != desc.vnode_count:
            raise ValueError(f"vnode bitmap of {self.vnodes.count} vnodes for a table of {desc.vnode_count}")
        self.mem = MemTable(check_consistency=check_consistency)
        self.sanity_check_storage = sanity_check_storage
        self.spill_threshold = spill_threshold
        self._epoch: EpochPair | None = None
        self._spill_offset = 0
        self._pending_watermark: Datum = None
        self._prefix = desc.table_id.to_bytes(TABLE_ID_LEN, "big")
        self._hint = desc.read_prefix_len_hint

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
        """Spill the MemTable to the shared buffer if it grew past the threshold."""
        if self.mem.nbytes > self.spill_threshold:
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
        """Bytes of the first `read_prefix_len_hint` pk columns of each key (the SST filter key)."""
        if self._hint == 0 or table_keys.n == 0:
            return np.zeros(table_keys.n, np.uint16)
        if self._hint == len(self.desc.pk):  # the filter key is the whole pk
            return (table_keys.lengths - VNODE_LEN).astype(np.uint16)
        _, ends = memcomparable.decode_keys(
            table_keys, self.desc.pk_types[: self._hint], list(self.desc.pk_orders[: self._hint]), VNODE_LEN
        )
        return (ends - VNODE_LEN).astype(np.uint16)

    def _check_against_storage(self, ops: list[tuple[bytes, KeyOp]]) -> None:
        for key, (kind, old, _) in ops:
            stored = self.storage.get(self._prefix + key)
            if kind is KeyOpKind.INSERT and stored is not None:
                raise StateConsistencyError(f"insert of key {key.hex()} that storage already holds")
            if kind is not KeyOpKind.INSERT and stored != old:
                raise StateConsistencyError(f"old value of key {key.hex()} differs from storage")

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
        self.mem.apply_batch(keys.to_arrow(), vals.to_arrow(), c.insert_mask(), nbytes)
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

    def get_rows(
        self, pk_columns: Sequence[pa.Array], num_rows: int | None = None
    ) -> tuple[np.ndarray, list[pa.Array]]:
        """Vectorized `get_row` for a column of pks: (found mask, table rows as columns; the rows
        that were not found are NULL). A table with an empty pk needs `num_rows`."""
        n = len(pk_columns[0]) if pk_columns else (num_rows or 0)
        cols = [None] * len(self.desc.columns)
        for pos, ci in enumerate(self.desc.pk):
            cols[ci] = pk_columns[pos]
        pk_bytes = memcomparable.encode_columns(
            list(pk_columns), self.desc.pk_types, list(self.desc.pk_orders), num_rows=n
        )
        if self.desc.is_singleton:
            vn = np.zeros(n, np.int64)
        else:
            from piestream.encoding.distribution import compute_vnodes

            dcols = [pk_columns[p] for p in self.desc.dist_key_in_pk]
            dtypes = [self.desc.pk_types[p] for p in self.desc.dist_key_in_pk]
            vn = compute_vnodes(dcols, dtypes, self.desc.vnode_count)
        from piestream.encoding.ragged import be_matrix

        key_r = concat_rows([Ragged.fixed(be_matrix(vn.astype(np.uint16), ">u2")), pk_bytes])
        keys = key_r.to_list()
        flen = self._filter_lens(key_r) if self._hint else np.zeros(n, np.uint16)
        values: list[bytes | None] = [None] * n
        missing: list[int] = []
        mem = self.mem
        for i, k in enumerate(keys):  # the MemTable wins; the rest go to storage in one batch
            op = mem.get(k)
            if op is None:
                missing.append(i)
            elif op[0] is not KeyOpKind.DELETE:
                values[i] = op[2]
        if missing:
            p = self._prefix
            got = self.storage.multi_get(
                [p + keys[i] for i in missing], MAX_EPOCH, filter_lens=[int(flen[i]) for i in missing]
            )
            for i, v in zip(missing, got, strict=True):
                values[i] = v
        found = np.array([v is not None for v in values], np.bool_)
        if not found.any():
            return found, [pa.nulls(n, t.arrow) for t in self.desc.types]
        idx = np.flatnonzero(found)
        rows = self.serde.decode(
            pa.array([keys[i] for i in idx], pa.binary()), pa.array([values[i] for i in idx], pa.binary())
        )
        # scatter found rows back to their positions, NULL elsewhere
        where = np.full(n, -1, np.int64)
        where[idx] = np.arange(len(idx))
        take = pa.array(where, mask=~found)
        return found, [col.take(take) for col in rows]

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
        keys = [self._prefix_key(p, self._scan_vnodes(p, None)[0]) for p in prefixes]
        order = sorted(range(n), key=keys.__getitem__)
        ranges = [(keys[i], next_key(keys[i])) for i in order]
        use_filter = self._hint > 0 and all(len(p) == self._hint for p in prefixes)
        filters = [self._prefix + k for k, _ in ranges] if use_filter else None
        full = [
            (self._prefix + a, self._prefix + b if b is not None else next_key(self._prefix))
            for a, b in ranges
        ]
        batch = self.storage.read_ranges(full, MAX_EPOCH, filter_keys=filters)
        ukeys = batch.user_keys() if len(batch) else pa.array([], pa.binary())
        rows = batch.rows() if len(batch) else pa.array([], pa.binary())
        mem_ops = [op for a, b in ranges for op in self.mem.iter_range(a, b)]
        merged = self._merge_batch(ukeys if len(ukeys) else None, rows if len(rows) else None, mem_ops)
        if merged is None:
            return DataChunk([pa.nulls(0, t.arrow) for t in self.desc.types], length=0), counts
        chunk, tkey_arr = merged
        # rows are in key order; find each range's run, then lay the runs out in prefix order
        tkeys = tkey_arr.to_pylist()
        bounds = [
            (bisect.bisect_left(tkeys, a), bisect.bisect_left(tkeys, b) if b is not None else len(tkeys))
            for a, b in ranges
        ]
        take: list[np.ndarray] = [np.zeros(0, np.int64)] * n
        for pos, i in enumerate(order):
            lo, hi = bounds[pos]
            counts[i] = hi - lo
            take[i] = np.arange(lo, hi, dtype=np.int64)
        idx = np.concatenate(take) if take else np.zeros(0, np.int64)
        return chunk.take(idx), counts

    def _merged_range(self, start: bytes, end: bytes | None, filter_key: bytes | None) -> Iterator[DataChunk]:
        """Storage rows in [start, end) with the MemTable's ops applied (the MemTable wins)."""
        mem_ops = list(self.mem.iter_range(start, end))
        p = self._prefix
        storage_end = p + end if end is not None else next_key(p)
        batches = self.storage.iter(p + start, storage_end, MAX_EPOCH, filter_key=filter_key)
        mi = 0
        for batch in batches:
            ukeys = batch.user_keys()
            last = ukeys[len(ukeys) - 1].as_py()[TABLE_ID_LEN:]
            # MemTable ops up to this batch's last key merge into it
            hi = mi
            while hi < len(mem_ops) and mem_ops[hi][0] <= last:
                hi += 1
            merged = self._merge_batch(ukeys, batch.rows(), mem_ops[mi:hi])
            mi = hi
            if merged is not None:
                yield merged[0]
        if mi < len(mem_ops):
            merged = self._merge_batch(None, None, mem_ops[mi:])
            if merged is not None:
                yield merged[0]

    def _merge_batch(
        self, ukeys: pa.Array | None, rows: pa.Array | None, ops: list[tuple[bytes, KeyOp]]
    ) -> tuple[DataChunk, pa.Array] | None:
        """Storage rows with MemTable ops applied: (decoded rows, their table keys), key order."""
        tkeys = Ragged.from_arrow(ukeys).slice_bytes(TABLE_ID_LEN).to_arrow() if ukeys is not None else None
        if ops:
            op_keys = pa.array([k for k, _ in ops], pa.binary())
            if tkeys is not None:
                keep = pc.invert(pc.is_in(tkeys, value_set=op_keys)).to_numpy(zero_copy_only=False)
                tkeys = tkeys.filter(pa.array(keep))
                rows = rows.filter(pa.array(keep))  # type: ignore[union-attr]
            live = [(k, op[2]) for k, op in ops if op[0] is not KeyOpKind.DELETE]
            if live:
                lk = pa.array([k for k, _ in live], pa.binary())
                lv = pa.array([v for _, v in live], pa.binary())
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
        return DataChunk(self.serde.decode(tkeys, rows), length=len(tkeys)), tkeys


def order_of(desc: TableDesc) -> list[OrderType]:
    return list(desc.pk_orders)
