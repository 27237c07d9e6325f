"""HopWindow: each row belongs to size/slide overlapping windows (reference §6.6).

``hop_start = tumble_start(ts - (size - slide), slide)``, window i starts at hop_start + i*slide
and ends `size` later. The output holds one chunk per window index, so an input update pair stays
a pair in every chunk (stream key = input key + window_start).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.common.errors import FeatureNotSupported
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.nodes import StreamNode


@dataclass(frozen=True, kw_only=True)
class HopWindowNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    time_col: int
    slide_usecs: int
    size_usecs: int
    offset_usecs: int = 0

    def __post_init__(self) -> None:
        if self.slide_usecs <= 0 or self.size_usecs <= 0:
            raise FeatureNotSupported("HOP window slide and size must be positive")
        if self.size_usecs % self.slide_usecs:
            raise FeatureNotSupported("HOP window size must be a multiple of the slide")

    def build(self, ctx: ActorContext) -> Executor:
        return HopWindowExecutor(ctx, self)

    def explain(self) -> str:
        return (
            f"HopWindow {{ time_col: ${self.time_col}, slide: {self.slide_usecs}us, "
            f"size: {self.size_usecs}us }}"
        )


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
