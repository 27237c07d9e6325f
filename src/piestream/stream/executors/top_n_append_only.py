"""AppendOnlyGroupTopN: TopN / GroupTopN over an append-only input, without ties (reference §6.3).

An append-only input never retracts, so a row ranked below its group's top ``offset + limit``
can never come back: the state table holds only each group's top rows (RisingWave's
``top_n_appendonly``), and the group's new top is its old top merged with the epoch's new rows.

The whole epoch is one merge, done on columns (Nexmark q9, q18 and q19 run here):

* input chunks are only buffered (cut to each group's top rows when the buffer grows, so it is
  bounded by ``groups × (offset + limit)``); no state call per chunk;
* on the barrier, one scan reads the old top of every group the epoch touched, and one sort of the
  memcomparable pk keys (group key, ORDER BY, stream key) ranks the old rows and the new ones
  together; the ranks give the output (Deletes of rows leaving ranks [offset, offset + limit),
  then Inserts of rows entering them) and the state writes (new rows that made the top, old rows
  pushed out of it) as masks, so no group is handled on its own.

Ties in ORDER BY are broken by the stream key at the end of the pk, as in `TopNExecutor`, so
a re-run task computes the same ranking. WITH TIES and retractable input use `TopNExecutor`.
The old tops are read from the committed state every epoch, which is what survives a re-run.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.errors import InternalError
from piestream.common.order import ASC
from piestream.encoding import memcomparable
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
        self.n_pending = 0

    # -- ranking --------------------------------------------------------------------------------
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
            gkeys = memcomparable.encode_columns_arrow(
                [cols[i].take(pa.array(order)) for i in self.desc.pk[: self.n_group]],
                self.desc.pk_types[: self.n_group],
                [ASC] * self.n_group,
            )
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
        new, firsts = self._top(DataChunk.concat(self.pending))
        # the old top of every touched group, with one state call (state holds only the tops)
        prefix = pa.array(firsts, pa.int64())
        prefix_cols = [new.columns[i].take(prefix) for i in self.desc.pk[: self.n_group]]
        g = read_groups(self.state, prefix_cols, len(firsts))
        old = g.chunk
        n_old = old.capacity
        if n_old:
            old_rank = np.arange(n_old, dtype=np.int64) - np.repeat(g.starts, g.counts)
            merged = DataChunk.concat([old, new])
        else:
            old_rank = np.zeros(0, np.int64)
            merged = new
        order, sorted_rank, _ = self._ranked(merged)
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
        # output: Deletes before Inserts, so each stream key sees its old row leave first
        dels = np.flatnonzero(was_out & ~now_out)
        ins = np.flatnonzero(now_out & ~was_out)
        if not len(dels) and not len(ins):
            return []
        idx = np.concatenate([dels, ins])
        ops = np.concatenate([np.full(len(dels), Op.DELETE, np.int8), np.full(len(ins), Op.INSERT, np.int8)])
        return StreamChunk.from_data(ops, merged.take(idx)).split(self.ctx.config.chunk_size)
