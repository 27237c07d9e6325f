"""GeneralOverWindow: window functions maintained incrementally (`plan.general_over_window`).

Changes of an epoch are buffered; at the barrier, for all touched partitions at once:

1. the changes are consolidated per state key (partition | ORDER BY | stream key): the last op of
   a key decides whether it is in the new state, and with which row;
2. the touched partitions' stored rows (input columns and the window values last emitted) are read
   with one `scan_prefixes` call, and the new rows are the stored ones minus the changed keys plus
   the inserted ones, sorted by key, which is window order;
3. only the rows a change can reach are recomputed: around each change, as far as the calls look
   (ROWS offsets, lag / lead offsets, the peers of RANGE CURRENT ROW; to the partition's end for
   ranks and frames open at one side, the whole partition for RANGE offsets). The window values
   are computed by `expr.window` for those rows over the whole sorted partitions;
4. the output (and the state change, the same rows) is: the stored rows of removed keys as
   Deletes, U- / U+ for recomputed rows whose values changed, Inserts for new rows.

Each barrier makes one scan and one write on the state table for all touched partitions, and the
Python work is per barrier, not per row. Reading a touched partition is whole (the state table
has no reverse scan to fetch just the rows before a change), while the compute and the output
are only the affected rows: a ROWS 10 PRECEDING average recomputes 11 rows per appended row.

Over an EowcSort (EMIT ON WINDOW CLOSE) a partition only grows at its end, so when every call
reaches a bounded number of rows (ROWS frames with offsets, lag / lead; no ranking, RANGE or
SESSION frame) only a partition's last `keep` rows can ever be read again: the older ones are
deleted from the state in the same barrier (their values are final and already emitted).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.errors import InternalError
from piestream.common.order import ASC as _ASC
from piestream.encoding.memcomparable import encode_columns_arrow
from piestream.expr.window import RANKING, SortedRows, evaluate, starts_of
from piestream.plan.eowc_sort import EowcSortNode
from piestream.plan.general_over_window import GeneralOverWindowNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier


class GeneralOverWindowExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: GeneralOverWindowNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.state = self.table(node.state_table)
        self.desc = node.state_table
        self.n_in = len(node.input.schema)
        self.types = node.schema.types
        self.partition_by = list(node.partition_by)
        self.peer_cols = self.partition_by + [c for c, _ in node.order_by]
        self.calls = list(node.calls)
        self.out_types = [c.return_type for c in self.calls]
        befores = [c.reach()[0] for c in self.calls]
        afters = [c.reach()[1] for c in self.calls]
        self.before = _max_reach(befores)
        self.after = _max_reach(afters)
        # peers matter to rank / dense_rank and to RANGE frames ending or starting at CURRENT ROW
        self.peers = any(
            c.kind in RANKING or (c.frame is not None and c.frame.mode == "range") for c in self.calls
        )
        self.pending: list[StreamChunk] = []
        # over final rows in order (an EowcSort), bounded reach: the rows a partition must keep
        # (a new row's recomputed neighbours and their frames, with one row of slack)
        bounded = self.before is not None and self.after is not None and not self.peers
        self.keep: int | None = None
        if isinstance(node.input, EowcSortNode) and bounded:
            self.keep = (self.before or 0) + (self.after or 0) + 2
        self.evict: StreamChunk | None = None

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if c.capacity:
            self.pending.append(c)
        return []

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out = self._apply() if self.pending else None
        self.pending = []
        if out is not None and out.capacity:
            if self.append_only and (out.ops != Op.INSERT).any():  # over an EowcSort, looking back
                raise InternalError("an append-only OverWindow changed a value it emitted")
            self.state.write_chunk(out)
        if self.evict is not None and self.evict.capacity:
            self.state.write_chunk(self.evict)
        self.evict = None
        self.commit_state(barrier)
        if out is None or not out.capacity:
            return []
        return out.split(self.ctx.config.chunk_size)

    # -- keys -------------------------------------------------------------------------------------
    def _keys(self, columns: list[pa.Array]) -> pa.Array:
        """Memcomparable state keys (partition | ORDER BY | stream key) of rows."""
        pk = self.desc.pk
        types, orders = list(self.desc.pk_types), list(self.desc.pk_orders)
        return encode_columns_arrow([columns[i] for i in pk], types, orders)

    # -- one epoch --------------------------------------------------------------------------------
    def _apply(self) -> StreamChunk:
        ops = np.concatenate([c.ops for c in self.pending])
        changes = DataChunk.concat([c.data for c in self.pending])
        in_cols = list(changes.columns)
        keys = self._keys(in_cols).to_numpy(zero_copy_only=False)
        n = len(keys)
        # the last op of each key decides it (the stream-key invariant makes earlier ones cancel)
        _, rev_first = np.unique(keys[::-1], return_index=True)
        last = n - 1 - rev_first
        inserted = last[np.isin(ops[last], (Op.INSERT, Op.UPDATE_INSERT))]
        changed_keys = pa.array(keys[last], pa.binary())

        old = self._read_partitions(changes, last)
        old_keys = self._keys(old.columns)
        hit = pc.is_in(old_keys, value_set=changed_keys).to_numpy(zero_copy_only=False).astype(np.bool_)
        removed = np.flatnonzero(hit)
        kept = np.flatnonzero(~hit)

        # the new rows of the touched partitions: kept stored rows, then the inserted input rows
        # (their window values NULL until computed), in key order = window order
        idx_in = pa.array(inserted, pa.int64())
        idx_kept = pa.array(kept, pa.int64())
        new_cols = [
            pa.concat_arrays([old.columns[i].take(idx_kept), self._input_col(in_cols, i, idx_in)])
            for i in range(len(self.types))
        ]
        new_keys = pa.concat_arrays([old_keys.take(idx_kept), pa.array(keys[inserted], pa.binary())])
        order = pc.sort_indices(new_keys).to_numpy(zero_copy_only=False)
        take = pa.array(order, pa.int64())
        rows_cols = [c.take(take) for c in new_cols]
        m = len(order)
        is_new = order >= len(kept)
        sorted_keys = new_keys.take(take).to_numpy(zero_copy_only=False)
        rows = SortedRows(
            DataChunk(rows_cols, length=m), self.types, self._starts(rows_cols, self.partition_by, m),
            self._starts(rows_cols, self.peer_cols, m),
        )  # fmt: skip
        # anchors: the new rows, and where each removed key was (both neighbours of its slot)
        removed_keys = old_keys.to_numpy(zero_copy_only=False)[removed]
        slots = np.asarray(np.searchsorted(sorted_keys, removed_keys) if m else [], np.int64)
        anchors = np.concatenate([np.flatnonzero(is_new), slots, slots - 1])
        targets = self._affected(rows, anchors) if m else np.zeros(0, np.int64)
        values = evaluate(self.calls, rows, targets)

        # which recomputed stored rows changed value (memcomparable bytes: NULL-safe equality)
        w = self.n_in
        old_at = [rows_cols[w + j].take(pa.array(targets, pa.int64())) for j in range(len(self.calls))]
        stored = ~is_new[targets]
        if len(targets):
            a = encode_columns_arrow(old_at, self.out_types, [_ASC] * len(self.calls))
            b = encode_columns_arrow(values, self.out_types, [_ASC] * len(self.calls))
            differs = pc.not_equal(a, b).to_numpy(zero_copy_only=False).astype(np.bool_)
        else:
            differs = np.zeros(0, np.bool_)
        upd = np.flatnonzero(stored & differs)
        ins = np.flatnonzero(~stored)
        if self.keep is not None and m:
            self.evict = self._evicted(rows, rows_cols, targets, values)
        return self._output(old, removed, rows_cols, targets, values, upd, ins)

    def _evicted(
        self, rows: SortedRows, rows_cols: list[pa.Array], targets: np.ndarray, values: list[pa.Array]
    ) -> StreamChunk | None:
        """Deletes of the state rows before each touched partition's last `keep` (EOWC, bounded
        reach): with the values they now hold (recomputed ones where this epoch computed them)."""
        assert self.keep is not None
        m = rows.n
        old_pos = np.flatnonzero(np.arange(m) <= rows.part_last - self.keep)
        if not len(old_pos):
            return None
        w = self.n_in
        # row i's current values: computed (at its position among `targets`) or stored
        src = np.arange(m, dtype=np.int64)
        src[targets] = m + np.arange(len(targets), dtype=np.int64)
        pick = pa.array(src[old_pos], pa.int64())
        cols = [c.take(pa.array(old_pos, pa.int64())) for c in rows_cols[:w]]
        for j, t in enumerate(self.out_types):
            both = pa.concat_arrays([rows_cols[w + j].cast(t.arrow), values[j].cast(t.arrow)])
            cols.append(both.take(pick))
        cols = [c.cast(t.arrow) for c, t in zip(cols, self.types, strict=True)]
        return StreamChunk(np.full(len(old_pos), Op.DELETE, np.int8), cols, length=len(old_pos))

    def _starts(self, cols: list[pa.Array], which: list[int], m: int) -> np.ndarray:
        return starts_of([cols[i] for i in which], [self.types[i] for i in which], m)

    def _input_col(self, in_cols: list[pa.Array], i: int, idx: pa.Array) -> pa.Array:
        if i < self.n_in:
            return in_cols[i].take(idx)
        return pa.nulls(len(idx), self.types[i].arrow)

    def _read_partitions(self, changes: DataChunk, rows: np.ndarray) -> DataChunk:
        """The stored rows of every partition the changes touch (one storage pass)."""
        if not self.partition_by:
            chunk, _ = self.state.scan_prefixes([()])
            return chunk
        part = changes.take(rows).project(self.partition_by)
        types = [self.types[i] for i in self.partition_by]
        pkeys = encode_columns_arrow(list(part.columns), types, [_ASC] * len(types))
        pkeys = pkeys.to_numpy(zero_copy_only=False)
        _, first = np.unique(pkeys, return_index=True)
        # the partitions' keys as columns, encoded vectorized (no Python row per partition)
        chunk, _ = self.state.scan_prefix_columns(part.take(first).columns)
        return chunk

    def _affected(self, rows: SortedRows, anchors: np.ndarray) -> np.ndarray:
        """Rows whose window values a change at any of `anchors` can reach (see the module doc)."""
        m = rows.n
        c = np.clip(anchors, 0, m - 1)
        first, last = rows.part_first[c], rows.part_last[c]
        lo = first if self.before is None else np.maximum(first, c - self.before - 1)
        hi = last if self.after is None else np.minimum(last, c + self.after + 1)
        if self.peers:
            lo = np.minimum(lo, rows.peer_first[c])
            hi = np.maximum(hi, rows.peer_last[c])
        d = np.zeros(m + 1, np.int64)
        np.add.at(d, lo, 1)
        np.add.at(d, hi + 1, -1)
        return np.flatnonzero(np.cumsum(d)[:m] > 0)

    def _output(
        self,
        old: DataChunk,
        removed: np.ndarray,
        rows_cols: list[pa.Array],
        targets: np.ndarray,
        values: list[pa.Array],
        upd: np.ndarray,
        ins: np.ndarray,
    ) -> StreamChunk:
        """Deletes of removed rows, U- / U+ pairs of changed rows, Inserts of new rows."""
        w = self.n_in
        t_upd = pa.array(targets[upd], pa.int64())
        t_ins = pa.array(targets[ins], pa.int64())
        parts: list[list[pa.Array]] = []
        ops: list[np.ndarray] = []
        if len(removed):
            parts.append([c.take(pa.array(removed, pa.int64())) for c in old.columns])
            ops.append(np.full(len(removed), Op.DELETE, np.int8))
        if len(upd):
            before = [c.take(t_upd) for c in rows_cols]
            new_vals = [v.take(pa.array(upd, pa.int64())) for v in values]
            after = [c.take(t_upd) for c in rows_cols[:w]] + new_vals
            pair = pa.array(
                np.repeat(np.arange(len(upd), dtype=np.int64), 2) + np.tile([0, len(upd)], len(upd))
            )
            both = [
                pa.concat_arrays([x, y.cast(x.type)]).take(pair) for x, y in zip(before, after, strict=True)
            ]
            parts.append(both)
            ops.append(np.tile(np.array([Op.UPDATE_DELETE, Op.UPDATE_INSERT], np.int8), len(upd)))
        if len(ins):
            new_vals = [v.take(pa.array(ins, pa.int64())) for v in values]
            parts.append([c.take(t_ins) for c in rows_cols[:w]] + new_vals)
            ops.append(np.full(len(ins), Op.INSERT, np.int8))
        if not ops:
            return StreamChunk(np.zeros(0, np.int8), [pa.nulls(0, t.arrow) for t in self.types], length=0)
        arrow_types = [t.arrow for t in self.types]
        cols = [pa.concat_arrays([p[i].cast(arrow_types[i]) for p in parts]) for i in range(len(self.types))]
        op_arr = np.concatenate(ops)
        return StreamChunk(op_arr, cols, length=len(op_arr))


def _max_reach(reaches: list[int | None]) -> int | None:
    """The farthest reach (None: to the partition's edge)."""
    known = [r for r in reaches if r is not None]
    return None if len(known) < len(reaches) else max(known, default=0)
