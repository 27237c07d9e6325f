"""HashJoinExecutor: a symmetric hash join over two state tables (reference §6.2).

A chunk arriving on side A is joined against side B's *current* rows (B does not change while
A's chunk is processed), so each A row's matches are independent of the other A rows: the chunk
is grouped by join key, B's rows of each key are read with one prefix scan, and all candidate
pairs are built, filtered by the residual condition and emitted at once. Order inside the chunk
matters only for B's degrees (an A insert then delete must flip B's padding twice, in order):
they are a running sum over the pairs in chunk order. Output rows are sorted by the input row
that caused them (deletes before inserts within one row), which is the order a row-at-a-time
join would produce, so the stream-key invariant holds per output key.

Degrees (matches satisfying the residual condition) are kept only for sides whose own rows are
emitted (outer padding, semi, anti). If the other side has at most one row per join key (its
stream key lies inside its join key) the degree is 0 or 1 and is recomputed from that row
instead of being stored, as RisingWave does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk, filter_mask
from piestream.common.epoch import EpochPair
from piestream.common.errors import StateConsistencyError
from piestream.common.scalar import Datum
from piestream.common.types import BIGINT, DataType
from piestream.plan.hash_join import HashJoinNode, SideKind
from piestream.storage.table.state_table import StateTable
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.join.cache import JoinSideCache, cacheable
from piestream.stream.executors.join.kernels import (
    as_type,
    degree_walk,
    group_by_key,
    matchable_mask,
    pair_up,
    take_or_null,
)
from piestream.stream.message import Barrier
from piestream.stream.watermark import column_bound


@dataclass
class _Side:
    """One input of the join: its keys, kind and tables."""

    pos: int  # 0 = left, 1 = right
    keys: list[int]
    kind: SideKind
    types: list[DataType]
    state: StateTable
    degree: StateTable | None  # None: no degrees, or recomputed from the other side

    @property
    def arrow_types(self) -> list[pa.DataType]:
        return [t.arrow for t in self.types]


@dataclass
class _Rows:
    """A side's rows for a list of join keys, concatenated key by key."""

    columns: list[pa.Array]
    starts: np.ndarray  # first row of each key
    counts: np.ndarray  # rows per key
    degrees: np.ndarray | None  # per row, when read from the degree table


@dataclass
class _Emitted:
    """Output rows as sources: the input row that caused each (for ordering), its op, and the
    row of the chunk (A) and of the other side (B) it is made of, -1 for NULL padding."""

    cause: list[np.ndarray]
    ops: list[np.ndarray]
    a_idx: list[np.ndarray]
    b_idx: list[np.ndarray]

    def add(
        self, cause: np.ndarray, ops: np.ndarray, a_idx: np.ndarray | None, b_idx: np.ndarray | None
    ) -> None:
        if not len(cause):
            return
        none = np.full(len(cause), -1, np.int64)
        self.cause.append(cause)
        self.ops.append(ops.astype(np.int8))
        self.a_idx.append(none if a_idx is None else a_idx)
        self.b_idx.append(none if b_idx is None else b_idx)


def _ins_or_del(insert: np.ndarray) -> np.ndarray:
    return np.where(insert, np.int8(Op.INSERT), np.int8(Op.DELETE)).astype(np.int8)


class HashJoinExecutor(Executor):
    """Input 0 = left, 1 = right; see the module docstring for the algorithm."""

    def __init__(self, ctx: ActorContext, node: HashJoinNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        self.join_type = node.join_type
        left_state = self.table(node.left_table)
        right_state = self.table(node.right_table)
        self.sides = (
            _Side(
                0,
                list(node.left_keys),
                node.join_type.side_kind(0),
                node.left.schema.types,
                left_state,
                self.table(node.left_degree_table) if node.uses_degree_table(0) else None,
            ),
            _Side(
                1,
                list(node.right_keys),
                node.join_type.side_kind(1),
                node.right.schema.types,
                right_state,
                self.table(node.right_degree_table) if node.uses_degree_table(1) else None,
            ),
        )
        self.null_safe = list(node.null_safe)
        self.condition = node.condition
        self.condition_refs = node.condition.input_refs() if node.condition is not None else set()
        side = node.join_type.output_side
        # internal column -> (side, column of that side)
        widths = (len(node.left.schema), len(node.right.schema))
        internal = [(s, i) for s in (0, 1) for i in range(widths[s]) if side is None or s == side]
        self.output_sources = [internal[i] for i in node.output_indices]
        self.output_types = [t.arrow for t in node.schema.types]
        self.chunk_size = ctx.config.chunk_size
        # each side's rows by join key, kept in the worker across epochs (sides without degrees)
        self.caches = tuple(
            JoinSideCache(ctx, s.state, s.arrow_types, len(s.keys))
            if s.degree is None and cacheable(s.state, s.keys)
            else None
            for s in self.sides
        )

    def init(self, epoch: EpochPair) -> None:
        super().init(epoch)
        for cache in self.caches:
            if cache is not None:
                cache.init()

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        """Clean both sides below join key 0's committed watermark (no row below it arrives on
        either side any more: those rows never match nor change again), then commit."""
        wm = self.node.watermark
        if wm is not None:
            bound = column_bound(self.ctx, wm)
            if bound is not None:
                for st in self.state_tables:
                    st.update_watermark(bound)
                for cache in self.caches:
                    if cache is not None:
                        cache.clean_below(bound)
        band = self.node.interval
        if band is not None:
            for side, col, clean in (
                (0, band.left_col, band.clean_left),
                (1, band.right_col, band.clean_right),
            ):
                if clean is not None:
                    bound = column_bound(self.ctx, clean)
                    if bound is not None:
                        self._clean_side(self.sides[side], col, bound)
        self.commit_state(barrier)
        return []

    def _clean_side(self, side: _Side, time_col: int, bound: Datum) -> None:
        """An interval join's cleaning: delete `side`'s rows whose time is below `bound` (no
        future row of the other side can match them, see `IntervalBand`), with their degrees and
        cached runs. Silent: their output stays. The time column is not a pk prefix (rows are
        keyed by join key), so this is one columnar scan of the side's state per barrier, which
        the cleaning itself keeps bounded by the band plus the watermark delay."""
        chunks = list(side.state.iter_chunks_with_prefix())
        rows = DataChunk.concat(chunks) if chunks else None
        n = 0 if rows is None else rows.capacity
        if rows is None or not n:
            return
        cols = [as_type(c, t) for c, t in zip(rows.columns, side.arrow_types, strict=True)]
        t = cols[time_col]
        dead = filter_mask(pc.less(t, pa.scalar(bound, t.type)))
        if not dead.any():
            return
        ops = np.full(n, Op.DELETE, np.int8)
        if side.degree is not None:
            degrees = self._degrees(side, cols, list(side.degree.iter_chunks_with_prefix()))
            pk_cols = [cols[p] for p in side.state.desc.pk]
            side.degree.write_chunk(StreamChunk(ops, [*pk_cols, pa.array(degrees, BIGINT.arrow)], dead, n))
        side.state.write_chunk(StreamChunk(ops, cols, dead, n))
        cache = self.caches[side.pos]
        if cache is not None and cache.active:
            take = pa.array(np.flatnonzero(dead), pa.int64())
            gone = [c.take(take) for c in cols]
            m = len(take)
            key_types = [side.types[k] for k in side.keys]
            gid, keys, _ = group_by_key([gone[k] for k in side.keys], key_types, np.arange(m), m)
            cache.write(np.full(m, -1, np.int64), gone, gid, keys)
            self.ctx.charge_caches()

    # -- reading ----------------------------------------------------------------------------------
    def _read(
        self,
        side: _Side,
        keys: list[pa.Array],
        n_groups: int,
        with_degrees: bool,
        only: np.ndarray | None = None,
    ) -> _Rows:
        """`side`'s current rows (and degrees) for each join key (those in `only`), in key order;
        `keys` holds the join key columns, one row per group (none: no equi keys, one group)."""
        counts = np.zeros(n_groups, np.int64)
        wanted = np.arange(n_groups) if only is None else np.flatnonzero(only)
        cache = self.caches[side.pos]
        if cache is not None and cache.active and not with_degrees:
            take = pa.array(wanted, pa.int64())
            columns, got = cache.read([k.take(take) for k in keys])
            counts[wanted] = got
            return _Rows(columns, np.cumsum(counts) - counts, counts, None)
        # every join key of the chunk in one storage pass (grouped by key, in `keys` order)
        chunk, got = _scan_keys(side.state, keys, wanted)
        counts[wanted] = got
        parts: list[DataChunk] = [chunk] if chunk.capacity else []
        degree_parts: list[DataChunk] = []
        if with_degrees and chunk.capacity:  # keys without rows have no degrees either
            assert side.degree is not None
            dchunk, _ = _scan_keys(side.degree, keys, wanted[got > 0])
            degree_parts.append(dchunk)
        starts = np.cumsum(counts) - counts
        types = side.arrow_types
        if parts:
            columns = [as_type(c, t) for c, t in zip(DataChunk.concat(parts).columns, types, strict=True)]
        else:
            columns = [pa.nulls(0, t) for t in types]
        degrees = None
        if with_degrees:
            degrees = self._degrees(side, columns, degree_parts)
        return _Rows(columns, starts, counts, degrees)

    def _degrees(self, side: _Side, columns: list[pa.Array], degree_parts: list[DataChunk]) -> np.ndarray:
        """The degree column of a scan aligned with the state scan (same pk, so same order)."""
        n = len(columns[0]) if columns else 0
        if not degree_parts:
            if n:
                raise StateConsistencyError(f"join side {side.pos}: rows without degrees")
            return np.zeros(0, np.int64)
        deg = DataChunk.concat(degree_parts)
        pk = side.state.desc.pk
        if deg.capacity != n or not all(
            as_type(deg.columns[p], columns[c].type).equals(columns[c]) for p, c in enumerate(pk)
        ):
            raise StateConsistencyError(f"join side {side.pos}: degree table out of step with state")
        return np.asarray(deg.columns[-1].to_numpy(zero_copy_only=False), np.int64)

    # -- matching ---------------------------------------------------------------------------------
    def _matches(
        self,
        rows_side: _Side,
        rows_cols: list[pa.Array],
        pi: np.ndarray,
        other_cols: list[pa.Array],
        pj: np.ndarray,
    ) -> np.ndarray:
        """The residual condition over each candidate pair (left ++ right), NULL = no match."""
        n = len(pi)
        if self.condition is None or not n:
            return np.ones(n, np.bool_)
        if rows_side.pos == 0:
            halves = ((rows_cols, pi, self.sides[0]), (other_cols, pj, self.sides[1]))
        else:
            halves = ((other_cols, pj, self.sides[0]), (rows_cols, pi, self.sides[1]))
        cols: list[pa.Array] = []
        for src, idx, side in halves:
            take = pa.array(idx, pa.int64())
            for i, t in enumerate(side.arrow_types):
                internal = len(cols)  # this column's index in left ++ right
                # only the columns the condition reads are gathered
                cols.append(src[i].take(take) if internal in self.condition_refs else pa.nulls(n, t))
        return filter_mask(self.ctx.eval(self.condition, DataChunk(cols, length=n), "HashJoin"))

    def _recount(
        self, side: _Side, rows: _Rows, other: _Side, keys: list[pa.Array], n_groups: int
    ) -> np.ndarray:
        """Degrees of `rows` (of `side`) recomputed from `other`'s rows before this chunk, for
        sides without a degree table (the other side holds at most one row per key)."""
        old = self._read(other, keys, n_groups, with_degrees=False, only=rows.counts > 0)
        gid = np.repeat(np.arange(n_groups, dtype=np.int64), rows.counts)
        qi, qj = pair_up(gid, old.starts, old.counts)
        ok = self._matches(side, rows.columns, qi, old.columns, qj)
        return np.bincount(qi[ok], minlength=len(gid)).astype(np.int64)

    # -- processing -------------------------------------------------------------------------------
    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        a, b = self.sides[input_idx], self.sides[1 - input_idx]
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        cols = [as_type(col, t) for col, t in zip(c.columns, a.arrow_types, strict=True)]
        signs = c.signs()  # U-/U+ are Delete/Insert internally
        insert = signs > 0
        key_cols = [cols[k] for k in a.keys]
        matchable = matchable_mask(key_cols, self.null_safe, n)
        gid, keys, n_groups = group_by_key(
            key_cols, [a.types[k] for k in a.keys], np.flatnonzero(matchable), n
        )

        other = self._read(b, keys, n_groups, with_degrees=b.degree is not None)
        pi, pj = pair_up(gid, other.starts, other.counts)
        matched = self._matches(a, cols, pi, other.columns, pj)
        degree_a = np.bincount(pi[matched], minlength=n).astype(np.int64)
        out = _Emitted([], [], [], [])

        if self.join_type.emits_joined_rows:
            sel = np.flatnonzero(matched)
            out.add(pi[sel], _ins_or_del(insert[pi[sel]]), pi[sel], pj[sel])

        # A's own rows: padded / semi / anti, decided by their degree against B
        if a.kind is not SideKind.PLAIN:
            own = degree_a > 0 if a.kind is SideKind.SEMI else degree_a == 0
            rows = np.flatnonzero(own)
            out.add(rows, _ins_or_del(insert[rows]), rows, None)

        # B's rows whose degree crosses 0 <-> 1
        if b.kind is not SideKind.PLAIN:
            deg0 = other.degrees if other.degrees is not None else self._recount(b, other, a, keys, n_groups)
            delta = np.where(matched, signs[pi], 0).astype(np.int64)
            before, after = degree_walk(pj, delta, deg0)
            if len(after) and after.min() < 0:
                raise StateConsistencyError(f"join side {b.pos}: negative degree")
            first = np.flatnonzero((delta > 0) & (before == 0))  # 0 -> 1
            last = np.flatnonzero((delta < 0) & (after == 0))  # 1 -> 0
            # the first match retracts an outer row's padding or an anti row and emits a semi row;
            # losing the last match does the reverse
            on_first = Op.INSERT if b.kind is SideKind.SEMI else Op.DELETE
            on_last = Op.DELETE if b.kind is SideKind.SEMI else Op.INSERT
            out.add(pi[first], np.full(len(first), on_first, np.int8), None, pj[first])
            out.add(pi[last], np.full(len(last), on_last, np.int8), None, pj[last])
            if b.degree is not None:
                final = deg0 + np.bincount(pj, weights=delta, minlength=len(deg0)).astype(np.int64)
                self._write_degree_changes(b, other.columns, deg0, final)

        if a.degree is not None:
            pk_cols = [cols[p] for p in a.state.desc.pk]
            deg_col = pa.array(degree_a, BIGINT.arrow)
            a.degree.write_chunk(StreamChunk(c.ops, [*pk_cols, deg_col], matchable, n))
        # rows that can never match are not kept: nothing will ever look them up
        a.state.write_chunk(StreamChunk(c.ops, cols, matchable, n))
        cache = self.caches[a.pos]
        if cache is not None and cache.active:
            cache.write(signs, cols, gid, keys)
        if any(self.caches):
            self.ctx.charge_caches()
        return self._assemble(a, cols, other.columns, out)

    def _write_degree_changes(
        self, side: _Side, columns: list[pa.Array], deg0: np.ndarray, final: np.ndarray
    ) -> None:
        """Update the degree rows that changed: one U-(old) U+(new) pair each."""
        changed = np.flatnonzero(final != deg0)
        if not len(changed):
            return
        idx = pa.array(np.repeat(changed, 2), pa.int64())
        ops = np.tile(np.array([Op.UPDATE_DELETE, Op.UPDATE_INSERT], np.int8), len(changed))
        degrees = np.empty(2 * len(changed), np.int64)
        degrees[0::2] = deg0[changed]
        degrees[1::2] = final[changed]
        pk_cols = [columns[p].take(idx) for p in side.state.desc.pk]
        assert side.degree is not None
        side.degree.write_chunk(StreamChunk(ops, [*pk_cols, pa.array(degrees, BIGINT.arrow)]))

    def _assemble(
        self, a: _Side, a_cols: list[pa.Array], b_cols: list[pa.Array], out: _Emitted
    ) -> list[StreamChunk]:
        """One output chunk (split to the chunk size) in input-row order, deletes first per row."""
        if not out.cause:
            return []
        cause = np.concatenate(out.cause)
        ops = np.concatenate(out.ops)
        order = np.argsort(cause * 2 + (ops == Op.INSERT), kind="stable")
        ops = ops[order]
        a_idx = np.concatenate(out.a_idx)[order]
        b_idx = np.concatenate(out.b_idx)[order]
        columns = []
        for (side, col), t in zip(self.output_sources, self.output_types, strict=True):
            if side == a.pos:
                columns.append(take_or_null(a_cols[col], a_idx, t))
            else:
                columns.append(take_or_null(b_cols[col], b_idx, t))
        return StreamChunk(ops, columns, length=len(ops)).split(self.chunk_size)


def _scan_keys(table: StateTable, keys: list[pa.Array], groups: np.ndarray) -> tuple[DataChunk, np.ndarray]:
    """`table`'s rows of the join keys at rows `groups` of `keys` (one vectorized prefix scan)."""
    if not len(groups):
        return DataChunk([pa.nulls(0, t.arrow) for t in table.desc.types], length=0), np.zeros(0, np.int64)
    if not keys:  # no equi keys: the one group's prefix is empty
        return table.scan_prefixes([()])
    take = pa.array(groups, pa.int64())
    types = table.desc.pk_types
    return table.scan_prefix_columns([as_type(c.take(take), types[j].arrow) for j, c in enumerate(keys)])
