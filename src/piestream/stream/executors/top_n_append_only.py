"""AppendOnlyGroupTopN: TopN / GroupTopN over an append-only input, without ties (reference §6.3).

An append-only input never retracts, so a row ranked below its group's top ``offset + limit``
can never come back: the state table holds only each group's top rows (RisingWave's
``top_n_appendonly``), and the group's new top is its old top merged with the epoch's new rows.

The whole epoch is one merge, done on columns (Nexmark q9, q18 and q19 run here):

* input chunks are only buffered (cut to each group's top rows when the buffer grows, so it is
  bounded by ``groups × (offset + limit)``); no state call per chunk;
* on the barrier, the old top of every group the epoch touched comes from the columnar cache
  (`KeyedRows`: group key -> the group's top rows, kept across epochs in the worker) or, for the
  groups it misses, from one scan of the state table; one sort of the memcomparable pk keys
  (group key, ORDER BY, stream key) ranks the old rows and the new ones together; the ranks give
  the output (Deletes of rows leaving ranks [offset, offset + limit), then Inserts of rows
  entering them), the state writes (new rows that made the top, old rows pushed out of it) and
  the cache's new runs, as masks and takes, so no group is handled on its own.

Ties in ORDER BY are broken by the stream key at the end of the pk, as in `TopNExecutor`, so
a re-run task computes the same ranking. WITH TIES and retractable input use `TopNExecutor`.
The cache is written through on every barrier (each touched group's new top), so it equals the
state table; the runtime hands it out only when it reflects the committed epoch (`registry`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.errors import InternalError
from piestream.common.order import ASC
from piestream.encoding import memcomparable
from piestream.encoding.ragged import Ragged
from piestream.plan.top_n import TopNNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.group_scan import read_groups
from piestream.stream.message import Barrier

# buffered input rows above which the buffer is cut to each group's top rows
_COMPACT_ROWS = 65536


class AppendOnlyTopNExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: TopNNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, False)
        if not node.input.append_only or (node.with_ties and node.limit > 0):
            raise InternalError("AppendOnlyGroupTopN needs an append-only input and no WITH TIES")
        self.node = node
        self.state = self.table(node.state_table)
        self.desc = node.state_table
        self.n_group = len(node.group_key)
        self.offset = node.offset
        self.k = node.offset + node.limit  # rows kept per group
        self.pending: list[DataChunk] = []  # this epoch's input, not yet merged
        # group key -> the group's rows in state (its top, in pk order), across epochs
        self.cache = ctx.cache.keyed(f"top_n:{self.desc.table_id}", [t.arrow for t in self.desc.types])
        self.n_pending = 0

    # -- ranking --------------------------------------------------------------------------------
    def _group_keys(self, columns: list[pa.Array], n: int) -> Ragged:
        """Memcomparable group keys of rows (the cache's keys; empty for a single group)."""
        return memcomparable.encode_columns(
            [columns[i] for i in self.desc.pk[: self.n_group]],
            self.desc.pk_types[: self.n_group],
            [ASC] * self.n_group,
            num_rows=n,
        )

    def _ranked(self, chunk: DataChunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row order by pk, each sorted row's rank within its group, the first sorted row of each
        group): one key encoding and one sort for all groups."""
        n = chunk.capacity
        cols = chunk.columns
        keys = memcomparable.encode_columns_arrow(
            [cols[i] for i in self.desc.pk], self.desc.pk_types, list(self.desc.pk_orders), num_rows=n
        )
        order = np.asarray(pc.sort_indices(keys).to_numpy(), np.int64)
        new_group = np.zeros(n, np.bool_)
        if n:
            new_group[0] = True
        if self.n_group and n > 1:
            gkeys = self._group_keys([c.take(pa.array(order)) for c in cols], n).to_arrow()
            new_group[1:] = pc.not_equal(gkeys.slice(1), gkeys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        firsts = np.flatnonzero(new_group)
        sizes = np.diff(np.append(firsts, n))
        rank = np.arange(n, dtype=np.int64) - np.repeat(firsts, sizes)
        return order, rank, firsts

    def _top(self, chunk: DataChunk) -> tuple[DataChunk, np.ndarray]:
        """Each group's top `k` rows of `chunk`, in pk order, and the first row of each group."""
        order, rank, firsts = self._ranked(chunk)
        keep = rank < self.k
        top = chunk.take(order[keep])
        new_firsts = np.cumsum(keep)[firsts] - 1  # groups keep their first row (k > 0)
        return top, new_firsts

    def _first_of_groups(self, chunk: DataChunk) -> np.ndarray:
        """The first row of each group in `chunk` (group keys only: no pk encoding, no sort)."""
        n = chunk.capacity
        if not self.n_group:
            return np.zeros(1, np.int64)
        ids = pc.dictionary_encode(self._group_keys(chunk.columns, n).to_arrow()).indices
        _, firsts = np.unique(np.asarray(ids.to_numpy(zero_copy_only=False), np.int64), return_index=True)
        return np.asarray(firsts, np.int64)

    # -- input ----------------------------------------------------------------------------------
    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity or self.k == 0:  # LIMIT 0 never emits, so nothing needs to be kept
            return []
        if not (c.ops == Op.INSERT).all():
            raise InternalError("append-only TopN received a retraction")
        self.pending.append(c.data)
        self.n_pending += c.capacity
        if self.n_pending > _COMPACT_ROWS and len(self.pending) > 1:
            top, _ = self._top(DataChunk.concat(self.pending))
            self.pending = [top]
            self.n_pending = top.capacity
        return []

    # -- barrier --------------------------------------------------------------------------------
    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out = self._merge() if self.pending else []
        self.pending = []
        self.n_pending = 0
        self.commit_state(barrier)
        return out

    def _merge(self) -> list[StreamChunk]:
        """Merge the epoch's rows into the old tops: the output and the state writes, as masks."""
        new = DataChunk.concat(self.pending)
        firsts = self._first_of_groups(new)
        old, old_counts = self._old_tops(
            [c.take(pa.array(firsts, pa.int64())) for c in new.columns], len(firsts)
        )
        n_old = old.capacity
        old_rank = np.arange(n_old, dtype=np.int64) - np.repeat(
            np.cumsum(old_counts) - old_counts, old_counts
        )
        merged = DataChunk.concat([old, new]) if n_old else new
        order, sorted_rank, group_firsts = self._ranked(merged)
        rank = np.empty(merged.capacity, np.int64)
        rank[order] = sorted_rank
        is_old = np.zeros(merged.capacity, np.bool_)
        is_old[:n_old] = True
        was_out = np.zeros(merged.capacity, np.bool_)  # emitted before this epoch
        was_out[:n_old] = (old_rank >= self.offset) & (old_rank < self.k)
        now_out = (rank >= self.offset) & (rank < self.k)
        # state: new rows that made a top are stored, old rows pushed out of it are deleted
        kept = rank < self.k
        writes = np.flatnonzero((is_old & ~kept) | (~is_old & kept))
        if len(writes):
            ops = np.where(is_old[writes], Op.DELETE, Op.INSERT).astype(np.int8)
            self.state.write_chunk(StreamChunk.from_data(ops, merged.take(writes)))
        self._cache_tops(merged, order, sorted_rank, group_firsts)
        # output: Deletes before Inserts, so each stream key sees its old row leave first
        # (each in pk order, so the output does not depend on which groups the cache held)
        dels = order[(was_out & ~now_out)[order]]
        ins = order[(now_out & ~was_out)[order]]
        if not len(dels) and not len(ins):
            return []
        idx = np.concatenate([dels, ins])
        ops = np.concatenate([np.full(len(dels), Op.DELETE, np.int8), np.full(len(ins), Op.INSERT, np.int8)])
        return StreamChunk.from_data(ops, merged.take(idx)).split(self.ctx.config.chunk_size)

    # -- the old tops: cache, then state --------------------------------------------------------
    def _old_tops(self, group_rows: list[pa.Array], n_groups: int) -> tuple[DataChunk, np.ndarray]:
        """The stored rows of each group (one row of `group_rows` per group), grouped, and the row
        count of each group (in any group order): cached groups from the cache, the others with
        one state call."""
        keys = self._group_keys(group_rows, n_groups)
        hit, counts, cached = self.cache.get_runs(keys)
        if hit.all():
            return DataChunk(cached, length=int(counts.sum())), counts
        miss = pa.array(np.flatnonzero(~hit), pa.int64())
        prefix = [group_rows[i].take(miss) for i in self.desc.pk[: self.n_group]]
        g = read_groups(self.state, prefix, len(miss))
        if not hit.any():
            return g.chunk, g.counts
        hits = DataChunk([c.cast(s.type) for c, s in zip(cached, g.chunk.columns, strict=True)])
        return DataChunk.concat([hits, g.chunk]), np.concatenate([counts[hit], g.counts])

    def _cache_tops(
        self, merged: DataChunk, order: np.ndarray, sorted_rank: np.ndarray, group_firsts: np.ndarray
    ) -> None:
        """Write through: every touched group's new top (the rows now in state) into the cache."""
        kept = order[sorted_rank < self.k]  # pk order, group by group
        sizes = np.diff(np.append(group_firsts, len(order)))
        counts = np.minimum(sizes, self.k)
        tops = merged.take(kept)
        first_rows = np.cumsum(counts) - counts
        keys = self._group_keys([c.take(pa.array(first_rows, pa.int64())) for c in tops.columns], len(counts))
        self.cache.put_runs(keys, counts, tops.columns)
        self.ctx.charge_caches()
