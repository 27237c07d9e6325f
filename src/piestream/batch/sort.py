"""ORDER BY and top-N (overall or per group) in SQL order (see `keys.sort_order`)."""

from __future__ import annotations

import numpy as np

from piestream.batch.basic import slice_rows
from piestream.batch.chunks import take_rows
from piestream.batch.context import BatchContext
from piestream.batch.keys import group_rows, peer_starts_of, sort_order
from piestream.batch.plan import BatchSort, BatchTopN, OrderBy
from piestream.common.chunk import DataChunk
from piestream.common.types import DataType


def order_rows(chunk: DataChunk, types: list[DataType], order: OrderBy) -> np.ndarray:
    """Row indices of `chunk` in `order` (stable)."""
    cols = [chunk.columns[c] for c, _ in order]
    return sort_order(cols, [types[c] for c, _ in order], [o for _, o in order], chunk.capacity)


def execute_sort(node: BatchSort, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    if not node.order or chunk.capacity <= 1:
        return chunk
    return take_rows(chunk, order_rows(chunk, node.schema.types, node.order))


def execute_top_n(node: BatchTopN, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    types = node.schema.types
    n = chunk.capacity
    if not node.group_key and not node.with_ties:
        if not node.order:
            return slice_rows(chunk, node.offset, node.limit)
        order = order_rows(chunk, types, node.order)
        end = n if node.limit is None else min(n, node.offset + node.limit)
        return take_rows(chunk, order[min(node.offset, n) : end])
    # group by the key, then order inside each group: sort by (group id, order key)
    groups = group_rows([chunk.columns[g] for g in node.group_key], [types[g] for g in node.group_key], n)
    within = order_rows(chunk, types, node.order)  # global order, stable
    order = within[np.argsort(groups.ids[within], kind="stable")]  # grouped, order kept inside
    gid = groups.ids[order]
    start_of_group = np.concatenate([[0], np.flatnonzero(np.diff(gid)) + 1]) if n else np.zeros(0, np.int64)
    group_first = np.repeat(start_of_group, np.diff(np.append(start_of_group, n)))
    rank = np.arange(n, dtype=np.int64) - group_first  # 0-based row number in the group
    keep = rank >= node.offset
    if node.limit is not None:
        last = node.offset + node.limit  # first rank not taken
        in_limit = rank < last
        if node.with_ties and node.limit > 0 and node.order:
            # rows tying with the last row taken: same peer group as rank last-1
            cols = [chunk.columns[c] for c, _ in node.order]
            peers = peer_starts_of(cols, [types[c] for c, _ in node.order], order)
            peers[start_of_group] = True
            peer_first = np.maximum.accumulate(np.where(peers, np.arange(n), 0))
            in_limit |= (peer_first - group_first) < last
        keep &= in_limit
    return take_rows(chunk, order[keep])
