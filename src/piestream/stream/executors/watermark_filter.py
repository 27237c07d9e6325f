"""WatermarkFilter: drops late rows and raises the source's watermark (plan/watermark).

In epoch e every actor filters with the committed global watermark W_e (the same value in every
actor and attempt): a row is late, and dropped, when its time column is below W_e (NULL is below
any watermark, as in RisingWave's ``col >= watermark`` filter; before the first watermark every
row passes). At the barrier the actor raises its own row of the state table to the largest
watermark expression over the epoch's rows, never lowering it; the next epoch's W is the max of
all actors' rows. Input is append-only (the planner refuses anything else).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import StreamChunk, filter_mask
from piestream.common.scalar import Datum
from piestream.plan.watermark import WatermarkFilterNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier
from piestream.stream.watermark import committed_watermarks


class WatermarkFilterExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: WatermarkFilterNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.node = node
        self.state = self.table(node.state_table)
        self._current: Datum = None
        self._read = False
        self._epoch_max: Datum = None  # the largest watermark expression of this epoch's rows

    def _watermark(self) -> Datum:
        if not self._read:
            self._current = committed_watermarks(self.ctx, [self.node.state_table])[
                self.node.state_table.table_id
            ]
            self._read = True
        return self._current

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity:
            return []
        wm = self.ctx.eval(self.node.expr, c.data, "WatermarkFilter")
        top = pc.max(wm).as_py()
        if top is not None and (self._epoch_max is None or top > self._epoch_max):
            self._epoch_max = top
        current = self._watermark()
        if current is None:
            return [c]
        col = c.columns[self.node.time_col]
        keep = filter_mask(pc.greater_equal(col, pa.scalar(current, col.type)))
        late = int(len(keep) - keep.sum())
        if not late:
            return [c]
        self.ctx.count("watermark_late_rows", late)
        if late == len(keep):
            return []
        return [StreamChunk(c.ops, c.columns, keep, c.capacity).compact()]

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        top = self._epoch_max
        if top is not None:
            current = self._watermark()
            if current is None or top > current:
                me = self.ctx.actor_index
                old = self.state.get_row((me,))
                if old is None:
                    self.state.insert_row((me, top))
                elif old[1] is None or top > old[1]:
                    self.state.update_row(old, (me, top))
                self.ctx.raised_watermarks[self.node.state_table.table_id] = top  # reported
        self._epoch_max = None
        self.commit_state(barrier)
        return []
