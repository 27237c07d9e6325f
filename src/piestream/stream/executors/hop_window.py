"""HopWindow: each row belongs to size/slide overlapping windows (reference §6.6).

``hop_start = tumble_start(ts - (size - slide), slide)``, window i starts at hop_start + i*slide
and ends `size` later. The output holds one chunk per window index, so an input update pair stays
a pair in every chunk (stream key = input key + window_start).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.plan.hop_window import HopWindowNode
from piestream.stream.executor import ActorContext, Executor


def window_starts(ts_us: np.ndarray, slide: int, size: int, offset: int) -> np.ndarray:
    """(n, units) start of every window each timestamp belongs to (floor arithmetic)."""
    base = ts_us - (size - slide)
    hop_start = base - np.mod(base - offset, slide)
    units = size // slide
    return hop_start[:, None] + np.arange(units, dtype=np.int64)[None, :] * slide


class HopWindowExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: HopWindowNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        n = self.node
        c = chunk.compact()
        ts = c.columns[n.time_col]
        valid = np.asarray(ts.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        if not valid.all():  # a NULL time belongs to no window
            c = c.take(np.flatnonzero(valid))
            ts = c.columns[n.time_col]
        if not c.capacity:
            return []
        us = ts.cast(pa.int64()).to_numpy()
        starts = window_starts(us, n.slide_usecs, n.size_usecs, n.offset_usecs)
        t = ts.type
        out = []
        for i in range(starts.shape[1]):
            s = pa.array(starts[:, i]).cast(t)
            e = pa.array(starts[:, i] + n.size_usecs).cast(t)
            out.append(StreamChunk(c.ops, [*c.columns, s, e], length=c.capacity))
        return out
