"""Dispatchers: how a fragment's output chunks reach the actors of a downstream fragment.

- HASH: by the vnode of the distribution-key columns, to the actor owning that vnode. An update
  pair (U-, U+) whose two rows land on different actors becomes a Delete and an Insert, so each
  actor still sees a consistent stream for its keys.
- BROADCAST: every downstream actor gets every chunk.
- SIMPLE: everything to the single downstream actor (singleton fragments).
- NO_SHUFFLE: actor i to actor i (both fragments share one vnode mapping).
"""

from __future__ import annotations

import numpy as np

from piestream.common.chunk import Op, StreamChunk
from piestream.common.vnode import actor_of_vnodes
from piestream.encoding.distribution import compute_vnodes
from piestream.plan.fragment import DispatchEdge, DispatchKind


def dispatch(chunk: StreamChunk, edge: DispatchEdge, actor_index: int) -> list[tuple[int, StreamChunk]]:
    """Split `chunk` among the downstream actors: (downstream actor index, chunk) pairs."""
    c = chunk.compact()
    if edge.output_indices is not None:
        c = c.project(edge.output_indices)
    if not c.capacity:
        return []
    if edge.kind is DispatchKind.SIMPLE:
        return [(0, c)]
    if edge.kind is DispatchKind.NO_SHUFFLE:
        return [(actor_index, c)]
    if edge.kind is DispatchKind.BROADCAST:
        return [(i, c) for i in range(edge.downstream_parallelism)]
    if edge.downstream_parallelism == 1:
        return [(0, c)]
    vnodes = compute_vnodes([c.columns[i] for i in edge.dist_key], list(edge.dist_types), edge.vnode_count)
    actors = actor_of_vnodes(vnodes, edge.downstream_parallelism, edge.vnode_count)
    ops = c.ops
    # an update pair split across actors becomes Delete + Insert
    pair = (ops[:-1] == Op.UPDATE_DELETE) & (ops[1:] == Op.UPDATE_INSERT) & (actors[:-1] != actors[1:])
    if pair.any():
        ops = ops.copy()
        idx = np.flatnonzero(pair)
        ops[idx] = Op.DELETE
        ops[idx + 1] = Op.INSERT
        c = StreamChunk(ops, c.columns, length=c.capacity)
    out = []
    for a in np.unique(actors).tolist():
        sel = np.flatnonzero(actors == a)
        # an ascending subset of the rows: a source's new-keys hint holds for it too
        out.append((int(a), c if len(sel) == c.capacity else c.take(sel).with_new_keys(c.new_keys)))
    return out
