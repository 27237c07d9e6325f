"""Expand: each input chunk once per grouping set (see `plan.expand`).

One output chunk per set, so an input update pair stays a pair in each (the flag is part of the
output's stream key); the NULLed columns are whole `pa.nulls` arrays, no per-row work.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.plan.expand import ExpandNode
from piestream.stream.executor import ActorContext, Executor


def expand_columns(
    columns: Sequence[pa.Array], n: int, subset: tuple[int, ...], key_cols: tuple[int, ...], flag: int
) -> list[pa.Array]:
    """`columns` of one grouping set: key columns outside `subset` NULL, then the flag column."""
    out = [pa.nulls(n, c.type) if i in key_cols and i not in subset else c for i, c in enumerate(columns)]
    out.append(pa.array(np.full(n, flag, np.int64)))
    return out


class ExpandExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: ExpandNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        n = self.node
        c = chunk.compact()
        if not c.capacity:
            return []
        kept = [c.columns[k] for k in n.keep]
        return [
            StreamChunk(
                c.ops,
                [*expand_columns(c.columns, c.capacity, s, n.key_cols, i), *kept],
                length=c.capacity,
            )
            for i, s in enumerate(n.subsets)
        ]
