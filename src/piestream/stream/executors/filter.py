"""Filter: keep rows whose predicate is true (NULL counts as false, as in WHERE).

An update pair whose halves disagree is rewritten so the stream stays consistent: the old row
passing and the new one not becomes a Delete; the reverse becomes an Insert.
"""

from __future__ import annotations

import numpy as np

from piestream.common.chunk import Op, StreamChunk, filter_mask
from piestream.plan.filter import FilterNode
from piestream.stream.executor import ActorContext, Executor


def fix_update_pairs(ops: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Ops after dropping the rows not in `keep`: halves of broken U-/U+ pairs become D / I."""
    ops = ops.copy()
    n = len(ops)
    if n < 2:
        return ops
    pair = (ops[:-1] == Op.UPDATE_DELETE) & (ops[1:] == Op.UPDATE_INSERT)
    first = np.flatnonzero(pair)
    old_only = first[keep[first] & ~keep[first + 1]]
    new_only = first[~keep[first] & keep[first + 1]]
    ops[old_only] = Op.DELETE
    ops[new_only + 1] = Op.INSERT
    return ops


class FilterExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: FilterNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.predicate = node.predicate

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        # a row whose predicate meets a data error is dropped (NULL counts as false)
        keep = filter_mask(self.ctx.eval(self.predicate, c.data, "Filter"))
        if keep.all():
            return [c]
        if not keep.any():
            return []
        ops = fix_update_pairs(c.ops, keep)
        return [StreamChunk(ops, c.columns, keep, c.capacity).compact()]
