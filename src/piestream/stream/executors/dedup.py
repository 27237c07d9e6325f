"""AppendOnlyDedup: the first row of each dedup key passes, later ones are dropped (reference §6.5).

Planned for ``DISTINCT ON`` without ORDER BY and for a group-by-only aggregation over an
append-only input. Because the input never retracts, the first row seen for a key stays the answer
forever: the state table remembers it (pk = dedup columns), and the output is append-only with the
dedup columns as its stream key. A retractable input needs a GroupTopN with limit 1 instead (the
rows behind the first must be kept to replace it), so it is rejected here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import InternalError
from piestream.common.order import ASC
from piestream.encoding import memcomparable
from piestream.plan.dedup import DedupNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier
from piestream.stream.watermark import column_bound


class AppendOnlyDedupExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: DedupNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.node = node
        self.state = self.table(node.state_table)
        self.cols = list(node.dedup_cols)
        self.key_types = [node.schema.types[i] for i in self.cols]

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        """Forget keys below dedup column 0's committed watermark (none arrives any more)."""
        if self.node.watermark is not None:
            bound = column_bound(self.ctx, self.node.watermark)
            if bound is not None:
                self.state.update_watermark(bound)
        self.commit_state(barrier)
        return []

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        if not (c.ops == Op.INSERT).all():
            raise InternalError("AppendOnlyDedup received a retraction from an append-only input")
        if not self.cols:  # one key for all rows: only the very first row ever passes
            if self.state.exists(()):
                return []
            out = c.take(np.zeros(1, np.int64))
            self.state.insert_row(out.to_rows()[0])  # write_chunk cannot encode an empty pk
            return [out]
        # the first row of each key within the chunk (NULLs compare equal, as in DISTINCT)
        keys = memcomparable.encode_columns_arrow(
            [c.columns[i] for i in self.cols], self.key_types, [ASC] * len(self.cols)
        )
        t = pa.table({"k": keys, "i": pa.array(np.arange(n, dtype=np.int64))})
        first = t.group_by("k", use_threads=False).aggregate([("i", "min")]).column("i_min")
        firsts = c.take(np.sort(np.asarray(first.to_numpy(), np.int64)))
        # ... that no earlier chunk or epoch has seen (point gets, read-your-writes)
        found, _ = self.state.get_rows([firsts.columns[i] for i in self.cols])
        if found.all():
            return []
        out = firsts.take(np.flatnonzero(~found)) if found.any() else firsts
        self.state.write_chunk(out)
        return [out]
