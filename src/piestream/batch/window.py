"""Window operators: hopping windows (a row per window) and ranking window functions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.batch.chunks import take_rows
from piestream.batch.context import BatchContext
from piestream.batch.keys import peer_starts_of, sort_order
from piestream.batch.plan import BatchHopWindow, BatchOverWindow
from piestream.common.chunk import DataChunk
from piestream.common.order import ASC
from piestream.common.types import TypeKind
from piestream.expr.window import SortedRows, evaluate


def hop_starts(ts_us: np.ndarray, slide: int, size: int, offset: int) -> np.ndarray:
    """(n, size/slide) start of every window each timestamp belongs to: the same floor
    arithmetic as the streaming HopWindow, so a batch query and its MV agree."""
    base = ts_us - (size - slide)
    hop_start = base - np.mod(base - offset, slide)
    units = size // slide
    return hop_start[:, None] + np.arange(units, dtype=np.int64)[None, :] * slide


def execute_hop_window(node: BatchHopWindow, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    ts = chunk.columns[node.time_col]
    if node.input.schema[node.time_col].data_type.kind is TypeKind.DATE:
        ts = ts.cast(pa.timestamp("us"))
    valid = np.flatnonzero(np.asarray(ts.is_valid().to_numpy(zero_copy_only=False), np.bool_))
    if len(valid) < chunk.capacity:  # a NULL time belongs to no window
        chunk = take_rows(chunk, valid)
        ts = ts.take(pa.array(valid, pa.int64()))
    us = np.asarray(ts.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    starts = hop_starts(us, node.slide_usecs, node.size_usecs, node.offset_usecs)
    units = starts.shape[1]
    rows = np.repeat(np.arange(chunk.capacity, dtype=np.int64), units)  # each row's windows in turn
    flat = starts.reshape(-1)
    out_t = node.schema.types[-1].arrow
    begin = pa.array(flat, pa.int64()).cast(out_t)
    end = pa.array(flat + node.size_usecs, pa.int64()).cast(out_t)
    base = take_rows(chunk, rows)
    return DataChunk([*base.columns, begin, end], length=len(rows))


def execute_over_window(node: BatchOverWindow, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    """Sort by (partition, order), then every call over the whole sorted rows (`expr.window`)."""
    (chunk,) = inputs
    n = chunk.capacity
    types = node.input.schema.types
    pcols = [chunk.columns[c] for c in node.partition_by]
    ptypes = [types[c] for c in node.partition_by]
    ocols = [chunk.columns[c] for c, _ in node.order_by]
    otypes = [types[c] for c, _ in node.order_by]
    oorders = [o for _, o in node.order_by]
    order = sort_order(pcols + ocols, ptypes + otypes, [ASC] * len(pcols) + oorders, n)
    out = take_rows(chunk, order)
    part_start = peer_starts_of(pcols, ptypes, order)
    peer_start = peer_starts_of(pcols + ocols, ptypes + otypes, order)
    rows = SortedRows(out, list(types), part_start, peer_start)
    values = evaluate(node.calls, rows, np.arange(n, dtype=np.int64))
    cols = [*out.columns, *(v.cast(c.return_type.arrow) for v, c in zip(values, node.calls, strict=True))]
    return DataChunk(cols, length=n)
