"""Run a batch plan over one snapshot: `execute(plan, ctx) -> pa.Table`.

Executors are functions ``(node, input chunks, ctx) -> chunk`` registered per node type; a plan
runs bottom-up, each operator over its inputs' whole results. Each output is checked against the
node's schema, so a kernel that returns a wrongly typed column fails here, not in a client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from piestream.batch import agg, basic, join, scan, sort, window
from piestream.batch.chunks import concat_chunks
from piestream.batch.context import BatchContext
from piestream.batch.plan import (
    BatchAsOfJoin,
    BatchExpand,
    BatchFilter,
    BatchHashAgg,
    BatchHashJoin,
    BatchHopWindow,
    BatchLimit,
    BatchMaxOneRow,
    BatchNestedLoopJoin,
    BatchOverWindow,
    BatchPlanNode,
    BatchProject,
    BatchProjectSet,
    BatchScan,
    BatchSort,
    BatchTopN,
    BatchUnion,
    BatchValues,
)
from piestream.common.chunk import DataChunk
from piestream.common.errors import InternalError
from piestream.common.schema import Schema

Executor = Callable[[Any, list[DataChunk], BatchContext], DataChunk]

_EXECUTORS: dict[type[BatchPlanNode], Executor] = {
    BatchScan: scan.execute_scan,
    BatchValues: scan.execute_values,
    BatchFilter: basic.execute_filter,
    BatchProject: basic.execute_project,
    BatchProjectSet: basic.execute_project_set,
    BatchUnion: basic.execute_union,
    BatchExpand: basic.execute_expand,
    BatchLimit: basic.execute_limit,
    BatchMaxOneRow: basic.execute_max_one_row,
    BatchHashJoin: join.execute_hash_join,
    BatchAsOfJoin: join.execute_asof_join,
    BatchNestedLoopJoin: join.execute_nested_loop_join,
    BatchHashAgg: agg.execute_hash_agg,
    BatchSort: sort.execute_sort,
    BatchTopN: sort.execute_top_n,
    BatchHopWindow: window.execute_hop_window,
    BatchOverWindow: window.execute_over_window,
}


def run(plan: BatchPlanNode, ctx: BatchContext) -> DataChunk:
    """The whole result of `plan` as one compacted chunk."""
    fn = _EXECUTORS.get(type(plan))
    if fn is None:
        raise InternalError(f"no batch executor for {type(plan).__name__}")
    inputs = [run(i, ctx) for i in plan.children()]
    out = fn(plan, inputs, ctx)
    _check(plan, out)
    return out


def _check(plan: BatchPlanNode, chunk: DataChunk) -> None:
    want = [t.arrow for t in plan.schema.types]
    got = [c.type for c in chunk.columns]
    if got != want:
        raise InternalError(f"{type(plan).__name__} produced columns {got}, its schema says {want}")


def execute(plan: BatchPlanNode, ctx: BatchContext) -> pa.Table:
    """The result of `plan` as an Arrow table named and typed by `plan.schema`."""
    return collect([run(plan, ctx)], plan.schema)


def execute_to_chunks(plan: BatchPlanNode, ctx: BatchContext) -> Iterator[DataChunk]:
    """The result of `plan` in chunks of at most `ctx.chunk_rows` rows (at least one chunk)."""
    out = run(plan, ctx)
    yield from out.split(max(1, ctx.chunk_rows))


def collect(chunks: list[DataChunk] | Iterator[DataChunk], schema: Schema) -> pa.Table:
    """Chunks as one Arrow table of `schema` (a zero-column result keeps its row count)."""
    chunk = concat_chunks(chunks, schema.types)
    arrow_schema = schema.arrow()
    if not schema.fields:
        return pa.table({"_": pa.nulls(chunk.cardinality)}).select([])
    return pa.Table.from_arrays(chunk.columns, schema=arrow_schema)
