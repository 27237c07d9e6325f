"""Hash aggregation: GROUP BY over a whole input with PostgreSQL's aggregate semantics.

Rows get dense group ids (`keys.group_rows`: SQL equality, NULLs form one group); each call
then picks its rows — FILTER (NULL = false), non-NULL arguments for the aggregates that skip
NULLs, one row per distinct argument value for DISTINCT — orders them for string_agg /
array_agg, and hands (values, group ids) to a vectorized kernel in `agg_kernels`. Without a
group key there is one group even over no rows, so ``count`` gives 0 and the others NULL.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.batch import agg_kernels as k
from piestream.batch.chunks import eval_expr, true_mask
from piestream.batch.context import BatchContext
from piestream.batch.keys import codes_of, eq_key, group_rows, grouping_of, sort_order
from piestream.batch.plan import BatchAggCall, BatchHashAgg
from piestream.common.chunk import DataChunk
from piestream.common.order import ASC
from piestream.common.types import DataType

#: Aggregates whose result depends on the order of their input rows.
_ORDERED = frozenset({"string_agg", "array_agg"})
#: Aggregates that see NULL arguments (every other one skips rows whose argument is NULL).
_KEEP_NULLS = frozenset({"count_star", "array_agg"})


def execute_hash_agg(node: BatchHashAgg, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    (chunk,) = inputs
    types = node.input.schema.types
    n = chunk.capacity
    if node.group_key:
        grouping = group_rows(
            [chunk.columns[g] for g in node.group_key], [types[g] for g in node.group_key], n
        )
    else:
        grouping = grouping_of(np.zeros(n, np.int64), 1)
    out: list[pa.Array] = []
    if node.group_key:
        reps = pa.array(grouping.first_rows, pa.int64())
        out = [chunk.columns[g].take(reps) for g in node.group_key]
    out += [_call(c, chunk, types, grouping.ids, grouping.count) for c in node.calls]
    return DataChunk(out, length=grouping.count)


def _call(
    call: BatchAggCall, chunk: DataChunk, types: list[DataType], ids: np.ndarray, groups: int
) -> pa.Array:
    """One aggregate over its selected rows, one value per group."""
    n = chunk.capacity
    keep = np.ones(n, np.bool_)
    if call.filter is not None and n:
        keep &= np.asarray(true_mask(eval_expr(call.filter, chunk)).to_numpy(zero_copy_only=False), np.bool_)
    args = [chunk.columns[a] for a in call.args]
    arg_types = [types[a] for a in call.args]
    if call.kind not in _KEEP_NULLS and args and args[0].null_count:
        keep &= np.asarray(args[0].is_valid().to_numpy(zero_copy_only=False), np.bool_)
    rows = np.flatnonzero(keep)
    if call.distinct and len(rows):
        rows = _distinct_rows(rows, args, arg_types, ids)
    order_by = call.order_by
    if call.distinct and not order_by and call.kind in _ORDERED:
        order_by = ((call.args[0], ASC),)  # PostgreSQL sorts to find the distinct values
    if call.kind in _ORDERED and order_by and len(rows) > 1:
        cols = [chunk.columns[c].take(pa.array(rows, pa.int64())) for c, _ in order_by]
        o = sort_order(cols, [types[c] for c, _ in order_by], [ob for _, ob in order_by], len(rows))
        rows = rows[o]
    idx = pa.array(rows, pa.int64())
    values = [a.take(idx) for a in args]
    if call.delimiter is not None:  # string_agg's constant delimiter
        values.append(pa.repeat(pa.scalar(call.delimiter, values[0].type), len(rows)))
        arg_types = [*arg_types, arg_types[0]]
    inp = k.AggInput(values, arg_types, ids[rows], groups)
    return k.compute(call.kind, inp, call.return_type)


def _distinct_rows(
    rows: np.ndarray, args: list[pa.Array], arg_types: list[DataType], ids: np.ndarray
) -> np.ndarray:
    """The first row (in input order) of each distinct (group, argument values) among `rows`."""
    idx = pa.array(rows, pa.int64())
    codes, count = codes_of(eq_key([a.take(idx) for a in args], arg_types))
    combined = ids[rows] * max(count, 1) + codes
    _, first = np.unique(combined, return_index=True)
    return rows[np.sort(first)]
