"""HashAgg and SimpleAgg: grouped aggregation over a change stream (reference §6.1).

Input chunks only accumulate per-group deltas (vectorized, see `dirty`); materialized-input
and distinct-dedup tables are written as rows arrive or at the barrier. On the barrier the
dirty groups' previous states are read in one vectorized `get_rows`, the new states and both
the old and new outputs are computed column-at-a-time, and the changes are emitted:

- HashAgg (a group key; output only if the group has input): row count 0 -> n: Insert;
  n -> 0: Delete of the previous row; n -> m: U- / U+ if the output changed, else nothing.
- SimpleAgg (no group key, stream key []): exactly one output row, inserted on the job's first
  barrier even without input (count 0, sum NULL, ...), then U- / U+ on change, never deleted.
- EMIT ON WINDOW CLOSE (RisingWave's EOWC HashAgg): states are kept as above but nothing is
  emitted for them; at the barrier the groups whose watermarked key (group key column 0) is below
  the committed bound are closed windows: emitted once as Inserts, then cleaned with the rest.

The previous output is rebuilt from the stored state, never from memory: the runtime rebuilds
executors from storage every epoch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk, StreamChunk, filter_mask
from piestream.common.errors import NumericOutOfRange, StateConsistencyError
from piestream.common.order import ASC
from piestream.common.scalar import Datum, to_arrow
from piestream.common.types import DataType, TypeKind
from piestream.encoding import memcomparable
from piestream.encoding.ragged import Ragged
from piestream.expr.expr import Expr
from piestream.expr.functions.numeric_rules import decimal_rules
from piestream.plan.hash_agg import HashAggNode
from piestream.stream.errors import EXPRESSION, sample_row
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.agg.arrays import add_bigint, change_rows, np_int, rows_differ, take_merged
from piestream.stream.executors.agg.dirty import DirtyGroups, Groups
from piestream.stream.executors.agg.distinct import DistinctDedup
from piestream.stream.executors.agg.states import (
    LEGACY_SPECIAL,
    CallState,
    DeltaSpec,
    GroupBatch,
    LegacyNumericSumState,
    MaterializedState,
    NumericSumState,
    make_call_state,
)
from piestream.stream.message import Barrier
from piestream.stream.watermark import below, cleaned_bound, column_bound

_ROW_COUNT = DeltaSpec(pa.int64(), "sum")
#: The barrier's changes go downstream in chunks of this many rows (or the configured chunk size
#: if larger): they exist as columns already, and every downstream call on a chunk (a state
#: table write, an exchange payload) costs a fixed overhead, so small chunks only add calls.
EMIT_CHUNK_ROWS = 1 << 16


class HashAggExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: HashAggNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        input_types = node.input.schema.types
        self.group_key = list(node.group_key)
        self.group_types = [input_types[i] for i in self.group_key]
        tables = node.state_tables
        self.value_table = self.table(tables.value)
        self.value_types: list[DataType] = tables.value.types
        self.calls: list[CallState] = []
        value_names = {c.name for c in tables.value.columns}
        for i, (call, mat) in enumerate(zip(node.calls, tables.materialized, strict=True)):
            st = make_call_state(call, input_types, mat)
            if isinstance(st, NumericSumState) and call.decimal_rules:  # planned before issue 14
                st = LegacyNumericSumState(call, input_types[call.args[0]])
                st.on_special = self._legacy_special
            if isinstance(st, NumericSumState) and f"_{call.kind}_{i}_scale0" not in value_names:
                raise StateConsistencyError(f"the state table of {call.kind} #{i} has no per-scale counts")
            if mat is not None:
                st.table = self.table(mat.table)
            self.calls.append(st)
        self.dedups = [
            DistinctDedup(d, self.table(d.table), self.group_types, input_types[d.column])
            for d in tables.distinct
        ]
        self.distinct = [c.effective_distinct for c in node.calls]
        self.spans: list[slice] = []  # each call's deltas within the dirty groups' delta columns
        at = 1  # after the row count
        for st in self.calls:
            self.spans.append(slice(at, at + len(st.specs)))
            at += len(st.specs)
        self.specs = [_ROW_COUNT] + [s for st in self.calls for s in st.specs]
        self.dirty = DirtyGroups(self.group_types, self.specs)
        # the value table's rows of recently written groups, kept in the worker across epochs
        # (write-through: every state written at a barrier is put, every group that dies leaves)
        desc = tables.value
        self.cache = (
            ctx.cache.keyed(f"hash_agg:{desc.table_id}", [t.arrow for t in desc.types])
            if self.group_key
            else None
        )
        self._keys: Ragged | None = None  # the flushed groups' cache keys, from read to write
        self._hashes: np.ndarray | None = None  # ... and their hashes
        # the value table's pk is the group key, ascending: the dirty groups' key bytes are its pk
        self._pk_is_group_key = list(desc.pk_types) == self.group_types and all(
            o == ASC for o in desc.pk_orders
        )

    # -- input --------------------------------------------------------------------------------
    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if self.node.emit_on_window_close:
            c = self._drop_closed(c)
        n = c.capacity
        if not n:
            return []
        signs = c.signs()
        cols = c.columns
        filters = _FilterMasks(c, self.ctx)
        masks = [st.mask(cols, filters.of(st.call.filter)) for st in self.calls]
        deltas: list[pa.Array] = [pa.array(signs)]
        for st, distinct, mask in zip(self.calls, self.distinct, masks, strict=True):
            if distinct:  # contributes at the barrier, through its dedup table
                deltas += [s.identity(n) for s in st.specs]
                continue
            if isinstance(st, MaterializedState):
                st.write_input(signs, mask, cols)
            deltas += st.deltas(signs, mask, cols)
        keys = [cols[i] for i in self.group_key]
        self.dirty.add(keys, deltas, n)
        for d in self.dedups:
            d.add(keys, cols[d.desc.column], signs, [masks[i] for i in d.desc.calls])
        return []

    def _apply_distinct(self) -> None:
        """Feed each distinct value's zero crossings to its calls as if they were input rows."""
        ncols = len(self.node.input.schema)
        for d in self.dedups:
            contrib = d.flush()
            if contrib is None:
                continue
            n = len(contrib.value)
            cols: list[pa.Array | None] = [None] * ncols
            for i, col in zip(self.group_key, contrib.key_cols, strict=True):
                cols[i] = col
            cols[d.desc.column] = contrib.value
            deltas = [s.identity(n) for s in self.specs]
            for i, signs in zip(d.desc.calls, contrib.signs, strict=True):
                st, mask = self.calls[i], signs != 0
                if isinstance(st, MaterializedState):
                    st.write_input(signs, mask, cols)
                deltas[self.spans[i]] = st.deltas(signs, mask, cols)
            self.dirty.add(contrib.key_cols, deltas, n)

    def _drop_closed(self, c: StreamChunk) -> StreamChunk:
        """EOWC: rows of windows already emitted (below the bound the value table is cleaned
        to) are dropped: an emitted window is final. The WatermarkFilter drops late rows, so only
        a retracting input (a join's delete of an old row) brings them; they are counted. Rows
        below the *current* bound are not late: an EOWC aggregation upstream emits its windows
        in the epoch they close, and this one closes them at the same barrier."""
        bound = self._emitted_bound() if c.capacity else None
        if bound is None:
            return c
        closed = below(c.columns[self.group_key[0]], bound)
        if not closed.any():
            return c
        self.ctx.count("eowc_closed_window_rows", int(closed.sum()))
        return c.take(np.flatnonzero(~closed))

    # -- barrier ------------------------------------------------------------------------------
    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out = self._flush()
        if self.node.emit_on_window_close:
            out = self._emit_closed()
        self._clean_by_watermark()
        self.commit_state(barrier)
        return out

    def _emit_closed(self) -> list[StreamChunk]:
        """EOWC: the final rows of the groups below the committed bound, as Inserts. They are
        cleaned in the same epoch (`_clean_by_watermark`), so each is emitted exactly once; an
        epoch whose bound the value table is already cleaned to reads nothing. The scan reads
        only open windows (older ones are below the table watermark): bounded state."""
        wm = self.node.watermark
        assert wm is not None
        bound = column_bound(self.ctx, wm)
        if bound is None or bound == self._emitted_bound():
            return []
        g = len(self.group_key)
        parts: list[DataChunk] = []
        for chunk in self.value_table.iter_chunks_with_prefix():
            data = chunk.compact()
            closed = below(data.columns[0], bound)
            if not closed.any():
                continue
            mask = pa.array(closed)
            cols = [col.filter(mask) for col in data.columns]
            outs = []
            at = g + 1  # after the row count
            for st in self.calls:
                outs.append(self._call_output(st, cols[at : at + st.n_states]))
                at += st.n_states
            types = self.schema.types[g:]
            outs = [o.cast(t.arrow) for o, t in zip(outs, types, strict=True)]
            parts.append(DataChunk([*cols[:g], *outs]))
        if not parts:
            return []
        closed_rows = DataChunk.concat(parts)
        self.ctx.count("eowc_emitted_windows", closed_rows.cardinality)
        return StreamChunk.inserts(closed_rows).split(max(self.ctx.config.chunk_size, EMIT_CHUNK_ROWS))

    def _emitted_bound(self) -> Datum:
        """The bound the windows were emitted up to: the value table's cleaned bound."""
        return cleaned_bound(self.ctx, self.value_table, self.group_types[0])

    @staticmethod
    def _call_output(st: CallState, state: list[pa.Array]) -> pa.Array:
        out = st.output(state)
        if st.call.decimal_rules and st.call.return_type.kind is TypeKind.NUMERIC:  # plan format <= 2
            out = decimal_rules(out)
        return out

    def _clean_by_watermark(self) -> None:
        """Forget the groups whose group key column 0 is below its committed watermark: no row
        below it reaches this executor any more (the WatermarkFilter dropped them), so those
        groups never change again; their output rows stay downstream (the MV keeps them).
        Storage drops them by a table watermark (reads skip them, compaction deletes them); the
        cache drops them by one vector compare of its keys."""
        wm = self.node.watermark
        if wm is None:
            return
        bound = column_bound(self.ctx, wm)
        if bound is None:
            return
        for st in self.state_tables:
            st.update_watermark(bound)
        if self.cache is not None:
            key = memcomparable.encode_datum(bound, self.group_types[0], ASC)
            n = self.cache.remove_below(key)
            if n:
                self.ctx.count("watermark_cleaned_groups", n)

    def _flush(self) -> list[StreamChunk]:
        self._apply_distinct()
        groups = self.dirty.take()
        if groups is None and not self.node.is_simple:
            return []
        found, prev = self._previous(groups)
        if groups is None:
            if found[0]:
                return []  # no input, and the SimpleAgg row was emitted long ago
            groups = Groups([], [s.identity(1) for s in self.specs], 1)  # its first barrier
        deltas, groups_cols, n = groups.deltas, groups.key_cols, groups.n
        g = len(self.group_key)
        row_count = add_bigint(prev[g], deltas[0])
        counts = np_int(row_count)
        if (counts < 0).any():
            raise StateConsistencyError("group row count went negative: a retracted row was never inserted")
        alive = np.ones(n, np.bool_) if self.node.is_simple else counts > 0
        batch = GroupBatch(groups_cols, self.group_types, alive)
        new_states: list[pa.Array] = [row_count]
        old_out: list[pa.Array] = []
        new_out: list[pa.Array] = []
        at = g + 1
        for st, span in zip(self.calls, self.spans, strict=True):
            k = st.n_states
            old_state = prev[at : at + k]
            state = st.combine(old_state, deltas[span], batch)
            new_states += state
            old_out.append(self._call_output(st, old_state))
            new_out.append(self._call_output(st, state))
            at += k
        new_states = [s.cast(t.arrow) for s, t in zip(new_states, self.value_types[g:], strict=True)]
        self._write_states(found, alive, prev, [*groups_cols, *new_states])
        if self.node.emit_on_window_close:
            return []  # emitted when the window closes (`_emit_closed`)
        return self._emit(found, alive, groups_cols, old_out, new_out)

    def _legacy_special(self, rows: np.ndarray, cols: Sequence[pa.Array | None]) -> None:
        """NaN / +-Infinity reached a legacy NUMERIC sum: NULL for it, an error record (strict
        mode: the epoch fails)."""
        if self.ctx.config.strict_mode:
            raise NumericOutOfRange(LEGACY_SPECIAL)
        present = [c for c in cols if c is not None]
        sample = sample_row(DataChunk(present), int(rows[0])) if present else ""
        self.ctx.errors.add(EXPRESSION, "HashAgg", "22003", LEGACY_SPECIAL, len(rows), sample)

    def _previous(self, groups: Groups | None) -> tuple[np.ndarray, list[pa.Array]]:
        """(found, the stored intermediate rows as columns, NULL where not found)."""
        if groups is not None and groups.key_cols:
            return self._cached_rows(groups)
        row = self.value_table.get_row(())  # get_rows cannot look up the empty pk
        if row is None:
            return np.zeros(1, np.bool_), [pa.nulls(1, t.arrow) for t in self.value_types]
        return np.ones(1, np.bool_), [to_arrow([v], t) for v, t in zip(row, self.value_types, strict=True)]

    def _cached_rows(self, groups: Groups) -> tuple[np.ndarray, list[pa.Array]]:
        """`get_rows` of the value table, answered from the group cache where it holds the key."""
        cache = self.cache
        assert cache is not None
        key_cols = groups.key_cols
        desc = self.value_table.desc
        if groups.keys is not None and self._pk_is_group_key:
            self._keys = groups.keys  # the dirty groups' bytes are the value table's pk bytes
        else:
            self._keys = memcomparable.encode_columns(key_cols, desc.pk_types, list(desc.pk_orders))
        self._hashes = cache.hashes(self._keys)
        hit, rows = cache.get(self._keys, hashes=self._hashes)
        if hit.all():
            return hit, rows
        if cache.complete is None:
            # a new cache: complete if the table holds nothing yet (a new job), and then kept
            # complete by writing through; decided from metadata (`surely_empty`), since a scan
            # for one row merges every run of the LSM (a cold actor paid it every epoch)
            cache.complete = self.value_table.surely_empty()
        if cache.complete:
            return hit, rows  # the groups it does not hold are new: no state read
        miss = np.flatnonzero(~hit)
        mask = pa.array(~hit)
        found_m, chunk_m = self.value_table.get_rows([k.filter(mask) for k in key_cols])
        rows_m = chunk_m.columns
        if not hit.any():
            return found_m, rows_m
        rows = [take_merged(r, miss, m) for r, m in zip(rows, rows_m, strict=True)]
        found = hit.copy()
        found[miss] = found_m
        return found, rows

    def _write_states(
        self, found: np.ndarray, alive: np.ndarray, prev: list[pa.Array], new: list[pa.Array]
    ) -> None:
        g = len(self.group_key)
        changed = rows_differ(prev[g:], new[g:], len(found))
        if not g:  # SimpleAgg's one row: write_chunk cannot encode the empty pk
            old_row, new_row = (DataChunk(c).to_rows(self.value_types)[0] for c in (prev, new))
            if not found[0]:
                self.value_table.insert_row(new_row)
            elif changed[0]:
                self.value_table.update_row(old_row, new_row)
            return
        ops, cols = change_rows(prev, new, found, alive, changed)
        if len(ops):
            self.value_table.write_chunk(StreamChunk(ops, cols))
        if self.cache is not None and self._keys is not None and self._hashes is not None:
            dead = np.flatnonzero(found & ~alive)
            if len(dead):
                self.cache.remove(self._keys.take(dead), hashes=self._hashes[dead])
            live = np.flatnonzero(alive)
            if len(live) == len(alive):  # every group lives on (the common case): no gather
                self.cache.put(self._keys, new, hashes=self._hashes, distinct=True)
            elif len(live):
                idx = pa.array(live)
                self.cache.put(
                    self._keys.take(live),
                    [c.take(idx) for c in new],
                    hashes=self._hashes[live],
                    distinct=True,
                )
            self._keys = self._hashes = None
            self.ctx.charge_caches()

    def _emit(
        self,
        found: np.ndarray,
        alive: np.ndarray,
        key_cols: list[pa.Array],
        old_out: list[pa.Array],
        new_out: list[pa.Array],
    ) -> list[StreamChunk]:
        types = self.schema.types[len(self.group_key) :]
        old_out = [o.cast(t.arrow) for o, t in zip(old_out, types, strict=True)]
        new_out = [o.cast(t.arrow) for o, t in zip(new_out, types, strict=True)]
        changed = rows_differ(old_out, new_out, len(found))
        ops, cols = change_rows([*key_cols, *old_out], [*key_cols, *new_out], found, alive, changed)
        if not len(ops):
            return []
        return StreamChunk(ops, cols).split(max(self.ctx.config.chunk_size, EMIT_CHUNK_ROWS))


class _FilterMasks:
    """FILTER (WHERE ...) masks of one chunk, each distinct predicate evaluated once."""

    def __init__(self, chunk: StreamChunk, ctx: ActorContext) -> None:
        self.chunk = chunk
        self.ctx = ctx
        self.all = np.ones(chunk.capacity, np.bool_)
        self._done: list[tuple[Expr, np.ndarray]] = []

    def of(self, expr: Expr | None) -> np.ndarray:
        if expr is None:
            return self.all
        for e, m in self._done:
            if e == expr:
                return m
        m = filter_mask(self.ctx.eval(expr, self.chunk.data, "HashAgg"))
        self._done.append((expr, m))
        return m
