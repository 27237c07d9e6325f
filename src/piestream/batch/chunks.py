"""Whole-table chunk helpers the executors share: empty chunks, concatenation, evaluation.

Batch executors pass one compacted `DataChunk` (no invisible rows) per operator: a SELECT's
intermediate results are whole Arrow tables, which is what pyarrow's kernels are fastest on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk
from piestream.common.types import DataType
from piestream.expr.expr import Expr


def empty_chunk(types: Sequence[DataType]) -> DataChunk:
    return DataChunk([pa.nulls(0, t.arrow) for t in types], length=0)


def concat_chunks(chunks: Iterable[DataChunk], types: Sequence[DataType]) -> DataChunk:
    """One compacted chunk of all rows (an empty one of `types` if there are none)."""
    parts = [c for c in chunks if c.cardinality]
    if not parts:
        return empty_chunk(types)
    if len(parts) == 1:
        return parts[0].compact()
    if not types:
        return DataChunk([], length=sum(p.cardinality for p in parts))
    return DataChunk.concat(parts)


def eval_expr(expr: Expr, chunk: DataChunk) -> pa.Array:
    """`expr` over every row of a compacted chunk, as one array of its return type's layout."""
    out = expr.eval(chunk)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    want = expr.return_type.arrow
    if out.type != want:
        out = out.cast(want)
    return out


def true_mask(arr: pa.Array) -> pa.Array:
    """A boolean array with NULL read as false (WHERE / ON / FILTER semantics)."""
    return pc.fill_null(arr, False) if arr.null_count else arr


def filter_chunk(chunk: DataChunk, mask: pa.Array) -> DataChunk:
    """The rows where `mask` (non-NULL boolean) is true."""
    n = int(pc.sum(mask).as_py() or 0) if len(mask) else 0
    if n == chunk.capacity:
        return chunk
    return DataChunk([c.filter(mask) for c in chunk.columns], length=n)


def take_rows(chunk: DataChunk, indices: np.ndarray) -> DataChunk:
    """Rows at `indices` (numpy int64), in that order."""
    idx = pa.array(indices, pa.int64())
    return DataChunk([c.take(idx) for c in chunk.columns], length=len(indices))


def null_columns(types: Sequence[DataType], n: int) -> list[pa.Array]:
    return [pa.nulls(n, t.arrow) for t in types]
