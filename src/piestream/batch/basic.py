"""Operators that keep rows as they are: filter, project, union all, limit, max-one-row."""

from __future__ import annotations

import pyarrow as pa

from piestream.batch.chunks import concat_chunks, eval_expr, filter_chunk, true_mask
from piestream.batch.context import BatchContext
from piestream.batch.plan import (
    BatchExpand,
    BatchFilter,
    BatchLimit,
    BatchMaxOneRow,
    BatchProject,
    BatchProjectSet,
    BatchUnion,
)
from piestream.common.chunk import DataChunk
from piestream.common.errors import PiestreamError
from piestream.expr.table_function import project_set
from piestream.stream.executors.expand import expand_columns


class CardinalityViolation(PiestreamError):
    """A scalar subquery returned more than one row (21000 cardinality_violation)."""

    sqlstate = "21000"


def execute_filter(node: BatchFilter, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    if not chunk.capacity:
        return chunk
    return filter_chunk(chunk, true_mask(eval_expr(node.predicate, chunk)))


def execute_project(node: BatchProject, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    return DataChunk([eval_expr(e, chunk) for e in node.exprs], length=chunk.capacity)


def execute_project_set(node: BatchProjectSet, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    _, rid, cols = project_set(node.items, chunk)
    return DataChunk([*cols, pa.array(rid, pa.int64())], length=len(rid))


def execute_expand(node: BatchExpand, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    n = chunk.capacity
    parts = [
        DataChunk(expand_columns(chunk.columns, n, s, node.key_cols, i), length=n)
        for i, s in enumerate(node.subsets)
    ]
    return concat_chunks(parts, node.schema.types)


def execute_union(node: BatchUnion, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    return concat_chunks(inputs, node.schema.types)


def execute_limit(node: BatchLimit, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    return slice_rows(chunk, node.offset, node.limit)


def slice_rows(chunk: DataChunk, offset: int, limit: int | None) -> DataChunk:
    """Rows [offset, offset + limit) of a compacted chunk."""
    n = chunk.capacity
    start = min(offset, n)
    end = n if limit is None else min(n, start + limit)
    if start == 0 and end == n:
        return chunk
    return DataChunk([c.slice(start, end - start) for c in chunk.columns], length=end - start)


def execute_max_one_row(node: BatchMaxOneRow, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    if chunk.cardinality > 1:
        raise CardinalityViolation("more than one row returned by a subquery used as an expression")
    return chunk
