"""EowcSort: EMIT ON WINDOW CLOSE for rows (`plan.eowc_sort`, RisingWave's SortExecutor).

Each input chunk is written to the state table as it comes (one `write_chunk`: inserts add a
row, deletes remove one not yet emitted); rows below the bound already emitted are final
downstream, so a change reaching one (only a retracting input brings them: the WatermarkFilter
drops late rows) is dropped and counted. At the barrier, once the committed watermark of the sort
column has risen past the bound emitted so far, the buffered rows below it are read in one scan
(read-your-writes: this epoch's rows too), sorted by the sort column and emitted as Inserts; the
same barrier cleans them by a table watermark, so each row is emitted exactly once and the state
holds only rows at or above the watermark. Nothing lives in memory between epochs.
"""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, StreamChunk
from piestream.plan.eowc_sort import EowcSortNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.agg.hash_agg import EMIT_CHUNK_ROWS
from piestream.stream.message import Barrier
from piestream.stream.watermark import below, cleaned_bound, column_bound


class EowcSortExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: EowcSortNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.node = node
        self.state = self.table(node.state_table)
        self.sort_col = node.sort_col
        self.sort_type = node.schema.types[node.sort_col]

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity:
            return []
        emitted = cleaned_bound(self.ctx, self.state, self.sort_type)
        if emitted is not None:
            final = below(c.columns[self.sort_col], emitted)
            if final.any():
                self.ctx.count("eowc_closed_window_rows", int(final.sum()))
                c = c.take(np.flatnonzero(~final))
        if c.capacity:
            self.state.write_chunk(c)
        return []

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out = self._emit()
        self.commit_state(barrier)
        return out

    def _emit(self) -> list[StreamChunk]:
        bound = column_bound(self.ctx, self.node.watermark)
        if bound is None or bound == cleaned_bound(self.ctx, self.state, self.sort_type):
            return []
        parts: list[DataChunk] = []
        for chunk in self.state.iter_chunks_with_prefix():
            data = chunk.compact()
            final = below(data.columns[self.sort_col], bound)
            if final.any():
                parts.append(data.take(np.flatnonzero(final)))
        self.state.update_watermark(bound)
        if not parts:
            return []
        rows = DataChunk.concat(parts)
        # each vnode's rows come sorted; across vnodes, one stable sort by the sort column
        order = pc.sort_indices(rows.columns[self.sort_col]).to_numpy(zero_copy_only=False)
        rows = rows.take(np.asarray(order, np.int64))
        self.ctx.count("eowc_emitted_rows", rows.cardinality)
        return StreamChunk.inserts(rows).split(max(self.ctx.config.chunk_size, EMIT_CHUNK_ROWS))
