"""TemporalJoin (plan/temporal_join): each chunk of the append-only left input probes the
dimension table by primary key in one batched storage read at the committed epoch; no state.

The committed version is the same for every actor and attempt of an epoch (a retried epoch
joins the same dimension rows), and rows joined earlier are never revisited: a later change
of the dimension affects only rows that arrive after it commits.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk, StreamChunk, filter_mask
from piestream.plan.temporal_join import TemporalJoinNode
from piestream.storage.table.storage_table import StorageTable
from piestream.stream.executor import ActorContext, Executor


class TemporalJoinExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: TemporalJoinNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        node = self.node
        cols = c.columns
        dim = StorageTable(node.table, self.ctx.storage, self.ctx.committed_epoch, list(node.right_cols))
        keys = [cols[k] for k in node.left_keys]
        # a NULL key matches nothing (=): probe only rows whose keys are all present
        valid = np.ones(n, np.bool_)
        for k in keys:
            if k.null_count:
                valid &= np.asarray(k.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        probe = np.flatnonzero(valid)
        found = np.zeros(n, np.bool_)
        right: list[pa.Array] = [pa.nulls(n, t.arrow) for t in (node.table.types[i] for i in node.right_cols)]
        if len(probe):
            idx = pa.array(probe)
            hit, rows = dim.get_rows([k.take(idx) if len(probe) < n else k for k in keys])
            found[probe] = hit
            if len(probe) == n:
                right = list(rows.columns)
            else:  # scatter the probed rows back, NULL for the rest
                where = np.full(n, -1, np.int64)
                where[probe] = np.arange(len(probe))
                take = pa.array(where, mask=where < 0)
                right = [col.take(take) for col in rows.columns]
        data = DataChunk([*cols, *right], length=n)
        if node.condition is not None and found.any():
            found &= filter_mask(self.ctx.eval(node.condition, data, "TemporalJoin"))
        if node.outer:
            if not found.all():  # matched rows failing the condition are unmatched: NULLs
                mask = pa.array(~found)
                right = [pa.compute.if_else(mask, pa.nulls(n, col.type), col) for col in right]
                data = DataChunk([*cols, *right], length=n)
            return [StreamChunk.inserts(data)]
        if not found.any():
            return []
        return [StreamChunk.inserts(data.take(np.flatnonzero(found)) if not found.all() else data)]
