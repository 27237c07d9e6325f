"""SubscriptionLog: append the upstream's changes to a subscription's log table
(`piestream.plan.subscription`), one vectorized write per chunk."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import PIESTREAM_EPOCH_UNIX_SEC, epoch_from_ms, epoch_to_unix_ms
from piestream.plan.subscription import SubscriptionLogNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier


def retention_cutoff(epoch: int, retention_ms: int) -> int | None:
    """The oldest epoch a log keeps at `epoch` (None: everything is still within retention)."""
    ms = epoch_to_unix_ms(epoch) - retention_ms
    return epoch_from_ms(ms) if ms > PIESTREAM_EPOCH_UNIX_SEC * 1000 else None


class SubscriptionLogExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: SubscriptionLogNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        self.log = self.table(node.log_table)
        self.seq = 0  # position of the next change of this actor in the current epoch

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        meta = [
            pa.array(np.full(n, self.log.epoch, np.int64)),
            pa.array(np.full(n, self.ctx.actor_index, np.int32)),
            pa.array(np.arange(self.seq, self.seq + n, dtype=np.int64)),
            pa.array(c.ops.astype(np.int16)),
        ]
        self.log.write_chunk(StreamChunk(np.full(n, Op.INSERT, np.int8), [*meta, *c.columns]))
        self.seq += n
        return []

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        cutoff = retention_cutoff(barrier.epoch.prev, self.node.retention_ms)
        if cutoff is not None:
            self.log.update_watermark(cutoff)
        self.seq = 0
        self.commit_state(barrier)
        return []
