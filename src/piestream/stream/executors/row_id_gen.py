"""RowIdGen: give rows of a table without a primary key their hidden `_row_id` (reference §3.3).

Ids are ``epoch milliseconds | vnode | sequence``: the vnode is one this actor owns (rows are
spread round-robin over them), so the row lands in the actor's own state; the timestamp part is
the epoch's, so ids never repeat across epochs and restarts; the sequence counts rows within the
epoch. Everything is derived from (epoch, arrival order), so a re-run task generates the same ids.
Rows that already carry an id (deletes found by scanning the table) pass through.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochPair, physical_ms
from piestream.common.row_id import make_row_ids, sequence_bits
from piestream.plan.row_id_gen import RowIdGenNode
from piestream.stream.executor import ActorContext, Executor


class RowIdGenExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: RowIdGenNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.index = node.row_id_index
        self.owned = ctx.vnodes.vnodes().astype(np.int64)
        self.count = ctx.vnodes.count
        self.seq_capacity = 1 << sequence_bits(self.count)
        self.epoch_ms = 0
        self.generated = 0

    def init(self, epoch: EpochPair) -> None:
        super().init(epoch)
        self.epoch_ms = physical_ms(epoch.curr)
        self.generated = 0

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        ids = c.columns[self.index]
        missing = np.asarray(ids.is_null().to_numpy(zero_copy_only=False), np.bool_)
        m = int(missing.sum())
        if not m:
            return [c]
        k = np.arange(self.generated, self.generated + m, dtype=np.int64)
        self.generated += m
        nv = len(self.owned)
        vnodes = self.owned[k % nv]
        per_vnode = k // nv
        ms_offset = per_vnode // self.seq_capacity
        seq = per_vnode % self.seq_capacity
        new = np.empty(m, np.int64)
        for off in np.unique(ms_offset).tolist():  # rarely more than one millisecond's worth
            sel = ms_offset == off
            new[sel] = make_row_ids(self.epoch_ms + off, vnodes[sel], seq[sel], self.count)
        filled = ids.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        filled[missing] = new
        cols = list(c.columns)
        cols[self.index] = pa.array(filled, pa.int64())
        return [StreamChunk(c.ops, cols, length=c.capacity)]

    def ms_used(self) -> int:
        """Milliseconds past the epoch the generated ids reach (the next epoch must start later)."""
        nv = max(len(self.owned), 1)
        return (self.generated // nv) // self.seq_capacity
