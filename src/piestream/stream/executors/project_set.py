"""ProjectSet: set-returning functions over each chunk (stateless; see `plan.project_set`).

An input row's output rows take its op; an update pair (U-, U+) becomes Deletes of the old row's
expansion followed by Inserts of the new one's (their counts may differ, so the rows do not pair
up as updates). Rows stay in input order, so per output key the ops still alternate.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.expr.table_function import project_set
from piestream.plan.project_set import ProjectSetNode
from piestream.stream.executor import ActorContext, Executor


class ProjectSetExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: ProjectSetNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.items = node.items

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity:
            return []
        # a data error in an argument or a scalar item is NULL for its row (or fails, strict)
        row, rid, cols = project_set(self.items, c.data, lambda e, d: self.ctx.eval(e, d, "ProjectSet"))
        if not len(row):
            return []
        ops = np.where(c.signs()[row] > 0, np.int8(Op.INSERT), np.int8(Op.DELETE)).astype(np.int8)
        out = StreamChunk(ops, [*cols, pa.array(rid, pa.int64())], length=len(row))
        return out.split(self.ctx.config.chunk_size)
