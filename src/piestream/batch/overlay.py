"""A transaction's uncommitted changes to one table, laid over the snapshot it reads.

Inside a transaction block, INSERT / UPDATE / DELETE do not go to the streaming job at once: each
statement's effect is folded into the table's `TableOverlay`, one entry per primary key the
transaction touched (the hidden ``_row_id`` of a table without a primary key). An entry holds the
row as the transaction leaves it (`after`, or a tombstone), and whether the key existed in the
snapshot (`Before`). Everything is columnar: keys are one memcomparable binary array, rows are
Arrow columns, and a statement's changes are merged with a few vector operations.

The overlay serves three readers:

* batch scans of the table inside the transaction (`visible` hides the snapshot's rows the
  transaction changed, `rows` adds the transaction's own), so the transaction reads its writes;
* COMMIT, which hands `changes` — one consistent change stream, relative to the snapshot — to one
  epoch, and `write_keys` to the conflict check (first committer wins);
* the buffer limit (`nbytes`).

Statement semantics are PostgreSQL's (a statement sees the rows as they were before it): a
statement's deletes apply before its inserts, so ``UPDATE t SET k = k + 1`` moves every row. A
table's conflict behaviour decides what an insert of a key that is already there does, as its
Materialize would: overwrite (a table with a primary key: the last row wins), ignore (ON CONFLICT
DO NOTHING and APPEND ONLY tables: the first wins, and a key the snapshot has is kept), or nothing
to decide (no primary key: rows get provisional, negative ``_row_id`` s, replaced by generated
ones when the transaction commits).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.scalar import Datum
from piestream.encoding import memcomparable
from piestream.encoding.keys import TABLE_ID_LEN
from piestream.encoding.ragged import Ragged, concat_rows
from piestream.plan.materialize import ConflictBehavior
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.row_serde import RowSerde

#: Rows per change chunk COMMIT hands to the epoch (executors see chunks; one epoch takes them all).
COMMIT_CHUNK_ROWS = 1 << 16


class Before(enum.IntEnum):
    """What the snapshot held at an entry's key."""

    ABSENT = 0  # nothing: the transaction inserted the key
    PRESENT = 1  # a row (for tables without a pk it is kept in `before`: its delete must carry it)
    UNKNOWN = 2  # not looked up: an upsert into an overwriting table (its Materialize resolves it)


def encode_keys(desc: TableDesc, columns: Sequence[pa.Array]) -> pa.Array:
    """The memcomparable pk of every row (full table rows as columns)."""
    return pk_keys(desc, [columns[i] for i in desc.pk])


def pk_keys(desc: TableDesc, pk_columns: Sequence[pa.Array]) -> pa.Array:
    """The memcomparable keys of pk columns, as large_binary: the key the conflict check of
    COMMIT compares (`piestream.meta.write_conflicts` encodes committed writes the same way)."""
    n = len(pk_columns[0])
    return memcomparable.encode_columns(pk_columns, desc.pk_types, list(desc.pk_orders), num_rows=n).to_arrow(
        large=True
    )


def _empty_columns(desc: TableDesc) -> list[pa.Array]:
    return [pa.nulls(0, c.data_type.arrow) for c in desc.columns]


def _first_per_key(keys: pa.Array, last: bool) -> np.ndarray | None:
    """Row positions keeping one row per key (the first, or the last); None if keys are distinct."""
    if len(pc.unique(keys)) == len(keys):  # keys are never NULL; `unique` hashes ~2x faster
        return None
    t = pa.table({"k": keys, "i": pa.array(np.arange(len(keys), dtype=np.int64))})
    agg = t.group_by("k", use_threads=False).aggregate([("i", "max" if last else "min")])
    return np.sort(agg.column(1).to_numpy())


@dataclass(frozen=True)
class TableOverlay:
    """The changes of one transaction to one table (immutable: savepoints keep old versions)."""

    desc: TableDesc
    conflict: ConflictBehavior
    row_id_index: int | None  # the hidden `_row_id` column of a table without a primary key
    keys: pa.Array  # binary, distinct: the memcomparable pk of each entry
    live: np.ndarray  # bool: the entry holds a row (else it is a tombstone)
    before: np.ndarray  # int8 `Before` of each entry
    after: tuple[pa.Array, ...]  # the row the transaction leaves (a tombstone: the row it removed)
    before_rows: tuple[pa.Array, ...] | None  # tables without a pk: the snapshot's row
    next_row_id: int = -1  # the next provisional `_row_id` (negative, so never a generated one)

    @classmethod
    def empty(cls, desc: TableDesc, conflict: ConflictBehavior, row_id_index: int | None) -> TableOverlay:
        cols = tuple(_empty_columns(desc))
        return cls(
            desc,
            conflict,
            row_id_index,
            pa.array([], pa.large_binary()),
            np.zeros(0, np.bool_),
            np.zeros(0, np.int8),
            cols,
            cols if conflict is ConflictBehavior.NO_CHECK else None,
        )

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        """Memory the buffered changes hold (what the transaction buffer limit counts)."""
        n = self.keys.nbytes + self.live.nbytes + self.before.nbytes + sum(c.nbytes for c in self.after)
        return n + sum(c.nbytes for c in self.before_rows or ())

    # -- a statement's changes ---------------------------------------------------------------------
    def apply(
        self,
        deletes: Sequence[pa.Array] | None,
        inserts: Sequence[pa.Array] | None,
        storage: HummockStorage,
        epoch: int,
    ) -> TableOverlay:
        """The overlay after one statement that removed the visible rows `deletes` and then
        added `inserts` (full table rows as columns; ``_row_id`` NULL for new rows of a table
        without a pk). `storage` at `epoch` is the snapshot (looked up for ignoring inserts)."""
        ov = self
        if deletes is not None and len(deletes[0]):
            ov = ov._touch(list(deletes), encode_keys(self.desc, deletes), live=False, new=Before.PRESENT)
        if inserts is None or not len(inserts[0]):
            return ov
        rows = list(inserts)
        if ov.row_id_index is not None:
            rows, ov = ov._with_row_ids(rows)
        keys = encode_keys(ov.desc, rows)
        if ov.conflict is ConflictBehavior.NO_CHECK:
            return ov._touch(rows, keys, live=True, new=Before.ABSENT)
        overwrite = ov.conflict is ConflictBehavior.OVERWRITE
        keep = _first_per_key(keys, last=overwrite)
        if keep is not None:
            idx = pa.array(keep)
            rows, keys = [c.take(idx) for c in rows], keys.take(idx)
        if overwrite:
            return ov._touch(rows, keys, live=True, new=Before.UNKNOWN)
        # ignore conflicts: a key the transaction sees already keeps its row
        pos = pc.index_in(keys, value_set=ov.keys)
        known = np.asarray(pos.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        at = np.asarray(pos.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        seen = known & ov.live[at] if len(ov) else known
        fresh = ~known
        if fresh.any():
            sel = pa.array(np.flatnonzero(fresh))
            seen[fresh] = _stored(ov.desc, [c.take(sel) for c in rows], storage, epoch)
        if seen.any():
            mask = pa.array(~seen)
            rows, keys = [c.filter(mask) for c in rows], keys.filter(mask)
        return ov._touch(rows, keys, live=True, new=Before.ABSENT)

    def _with_row_ids(self, rows: list[pa.Array]) -> tuple[list[pa.Array], TableOverlay]:
        """New rows of a table without a pk get provisional (negative) row ids."""
        assert self.row_id_index is not None
        ids = rows[self.row_id_index]
        missing = np.asarray(ids.is_null().to_numpy(zero_copy_only=False), np.bool_)
        m = int(missing.sum())
        if not m:
            return rows, self
        filled = ids.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        filled[missing] = np.arange(self.next_row_id, self.next_row_id - m, -1, dtype=np.int64)
        out = list(rows)
        out[self.row_id_index] = pa.array(filled, pa.int64())
        return out, replace(self, next_row_id=self.next_row_id - m)

    def _touch(self, rows: list[pa.Array], keys: pa.Array, *, live: bool, new: Before) -> TableOverlay:
        """Set the entries of `keys` (distinct) to `rows`; keys seen before keep what the snapshot
        had (`before`), new ones get `new` (and, for PRESENT, `rows` as the snapshot's rows)."""
        m = len(keys)
        n = len(self.keys)
        if n:
            pos = pc.index_in(keys, value_set=self.keys)
            found = np.asarray(pos.is_valid().to_numpy(zero_copy_only=False), np.bool_)
            at = np.asarray(pos.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        else:  # the transaction's first change to the table (a bulk COPY): nothing to match
            found, at = np.zeros(m, np.bool_), np.zeros(m, np.int64)
        before = np.where(found, self.before[at] if n else 0, int(new)).astype(np.int8)
        before_rows = self.before_rows
        if before_rows is not None:
            # one take per column from [old before rows ; the snapshot's rows of new keys]
            gather = pa.array(np.where(found, at, n + np.arange(m, dtype=np.int64)))
            fresh = rows if new is Before.PRESENT else [pa.nulls(m, b.type) for b in before_rows]
            touched = [
                pa.concat_arrays([b, r.cast(b.type)]).take(gather)
                for b, r in zip(before_rows, fresh, strict=True)
            ]
        keep_idx = np.zeros(0, np.int64)
        if n:  # (an empty overlay keeps nothing: no hash set of the new keys to build)
            kept = pc.invert(pc.is_in(self.keys, value_set=keys))
            keep_idx = np.flatnonzero(np.asarray(kept.to_numpy(zero_copy_only=False), np.bool_))
        ki = pa.array(keep_idx)

        def merged(old: Sequence[pa.Array], new_cols: Sequence[pa.Array]) -> tuple[pa.Array, ...]:
            return tuple(
                pa.concat_arrays([o.take(ki), c.cast(o.type)]) for o, c in zip(old, new_cols, strict=True)
            )

        return replace(
            self,
            keys=pa.concat_arrays([self.keys.take(ki), keys]),
            live=np.concatenate([self.live[keep_idx], np.full(m, live)]),
            before=np.concatenate([self.before[keep_idx], before]),
            after=merged(self.after, rows),
            before_rows=None if before_rows is None else merged(before_rows, touched),
        )

    # -- reads ----------------------------------------------------------------------------------
    def visible(self, keys: pa.Array) -> np.ndarray:
        """Which snapshot rows (by memcomparable pk) the transaction did not change."""
        if not len(self.keys):
            return np.ones(len(keys), np.bool_)
        hit = pc.is_in(keys, value_set=self.keys)
        return ~np.asarray(hit.to_numpy(zero_copy_only=False), np.bool_)

    def rows(
        self,
        output_indices: Sequence[int],
        prefix: Sequence[Datum] = (),
        vnodes: tuple[int, int] | None = None,
    ) -> DataChunk:
        """The transaction's rows (columns `output_indices`) whose pk starts with `prefix`, in
        vnodes [lo, hi) if given."""
        sel = self.live.copy()
        if prefix and sel.any():
            want = memcomparable.encode_row(
                list(prefix), self.desc.pk_types[: len(prefix)], list(self.desc.pk_orders[: len(prefix)])
            )
            head = pc.binary_slice(self.keys, 0, len(want))
            hit = pc.equal(head, pa.scalar(want, pa.large_binary()))
            sel &= np.asarray(hit.to_numpy(zero_copy_only=False), np.bool_)
        if vnodes is not None and sel.any():
            vn = RowSerde(self.desc).vnodes(list(self.after))
            sel &= (vn >= vnodes[0]) & (vn < vnodes[1])
        idx = pa.array(np.flatnonzero(sel))
        return DataChunk([self.after[i].take(idx) for i in output_indices], length=len(idx))

    # -- commit ---------------------------------------------------------------------------------
    def write_keys(self) -> pa.Array:
        """The keys a concurrent commit must not have written since the snapshot: every entry's,
        but the provisional row ids of new rows of a table without a pk (they cannot collide)."""
        if self.row_id_index is None:
            return self.keys
        return self.keys.filter(pa.array(self.before == Before.PRESENT))

    def changes(self) -> list[StreamChunk]:
        """The overlay as one consistent change stream over the snapshot: deletes of the rows it
        removed, U-/U+ pairs for the rows it changed, inserts of new rows (provisional row ids
        NULL again, so RowIdGen generates them)."""
        old = self.before == Before.PRESENT
        gone = ~self.live & (old | (self.before == Before.UNKNOWN))
        changed = self.live & old
        added = self.live & ~old
        out: list[StreamChunk] = []
        src = self.before_rows if self.before_rows is not None else self.after
        if gone.any():
            idx = pa.array(np.flatnonzero(gone))
            # a delete carries the stored row: the snapshot's (no pk), or any row with the key
            # (a table with a pk: its Materialize deletes the row it has)
            cols = [c.take(idx) for c in src]
            out += StreamChunk(np.full(len(idx), Op.DELETE, np.int8), cols).split(COMMIT_CHUNK_ROWS)
        if changed.any():
            rows = np.flatnonzero(changed)
            # U-(row before) U+(row after) per key: one take per column from [before ; after]
            gather = np.empty(2 * len(rows), np.int64)
            gather[0::2] = rows
            gather[1::2] = len(self.keys) + rows
            g = pa.array(gather)
            cols = [
                pa.concat_arrays([b, a.cast(b.type)]).take(g) for b, a in zip(src, self.after, strict=True)
            ]
            ops = np.tile(np.array([Op.UPDATE_DELETE, Op.UPDATE_INSERT], np.int8), len(rows))
            out += StreamChunk(ops, cols).split(COMMIT_CHUNK_ROWS)
        if added.any():
            idx = pa.array(np.flatnonzero(added))
            cols = [c.take(idx) for c in self.after]
            if self.row_id_index is not None:
                ids = cols[self.row_id_index]
                cols[self.row_id_index] = pc.if_else(pc.less(ids, 0), pa.scalar(None, ids.type), ids)
            out += StreamChunk(np.full(len(idx), Op.INSERT, np.int8), cols).split(COMMIT_CHUNK_ROWS)
        return out


def _stored(desc: TableDesc, rows: list[pa.Array], storage: HummockStorage, epoch: int) -> np.ndarray:
    """Which rows' keys the table holds at `epoch` (one batched get)."""
    serde = RowSerde(desc)
    table_keys, _ = serde.table_keys(rows)
    head = Ragged.constant(table_keys.n, desc.table_id.to_bytes(TABLE_ID_LEN, "big"))
    found, _ = storage.multi_get_columns(concat_rows([head, table_keys]), epoch)
    return np.asarray(found, np.bool_)
