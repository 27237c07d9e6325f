"""Leaves of a batch plan: table scans at the query's snapshot, and VALUES.

A scan reads through `StorageTable` at `ctx.epoch` only, with the columns the query needs
(column pruning happens in the value decoder) and the narrowest key range the planner found:
a point get, a pk-prefix scan (one vnode when the prefix covers the distribution key) with an
optional range on the next pk columns, or a scan of all (or a range of) vnodes. A table a
transaction block changed is read with its `TableOverlay` merged over the snapshot.
"""

from __future__ import annotations

import pyarrow as pa

from piestream.batch.chunks import concat_chunks, empty_chunk, eval_expr
from piestream.batch.context import BatchContext
from piestream.batch.overlay import TableOverlay, pk_keys
from piestream.batch.plan import BatchScan, BatchValues
from piestream.common.chunk import DataChunk
from piestream.common.vnode import VnodeBitmap
from piestream.storage.table.storage_table import StorageTable


def execute_scan(node: BatchScan, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    overlay = ctx.overlays.get(node.table.table_id)
    if overlay is not None:
        return _merged_scan(node, overlay, ctx)
    table = StorageTable(node.table, ctx.storage, ctx.epoch, list(node.output_indices))
    types = node.schema.types
    if node.point_get:
        row = table.get_row(list(node.pk_prefix))
        return empty_chunk(types) if row is None else DataChunk.from_rows([row], types)
    if node.pk_prefix or node.pk_range != (None, None):
        chunks = table.iter_prefix(list(node.pk_prefix), node.pk_range)
    elif node.vnodes is not None:
        lo, hi = node.vnodes
        count = node.table.vnode_count
        chunks = table.scan_vnodes(VnodeBitmap.from_range(min(lo, count), min(hi, count), count))
    else:
        chunks = table.scan_vnodes()
    return concat_chunks(chunks, types)


def _merged_scan(node: BatchScan, overlay: TableOverlay, ctx: BatchContext) -> DataChunk:
    """The snapshot's rows the transaction did not change, then the transaction's own rows.
    The snapshot is read with the pk columns too (to match rows to the overlay's keys); pk range
    bounds are only pruning (their predicates stay in the filter above), the prefix is exact."""
    desc = node.table
    out = list(node.output_indices)
    read = out + [i for i in desc.pk if i not in out]
    at = {ci: k for k, ci in enumerate(read)}
    proxy = BatchScan(
        table=desc,
        output_indices=tuple(read),
        pk_prefix=node.pk_prefix,
        pk_range=node.pk_range,
        vnodes=node.vnodes,
    )
    base = execute_scan(proxy, [], BatchContext(ctx.storage, ctx.epoch, ctx.now, ctx.chunk_rows))
    keys = pk_keys(desc, [base.columns[at[ci]] for ci in desc.pk])
    kept = base.with_visibility(overlay.visible(keys)).compact().project(range(len(out)))
    own = overlay.rows(out, node.pk_prefix, node.vnodes)
    return concat_chunks([kept, own], node.schema.types)


def execute_values(node: BatchValues, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    """Each row's constant expressions over a one-row, zero-column chunk; one Python step per
    row and column is unavoidable (every row has its own expressions), and VALUES lists are short."""
    types = node.schema.types
    if not node.rows:
        return empty_chunk(types)
    unit = DataChunk([], length=1)
    cols = []
    for j, t in enumerate(types):
        parts = [eval_expr(row[j], unit) for row in node.rows]
        cols.append(pa.concat_arrays([p if p.type == t.arrow else p.cast(t.arrow) for p in parts]))
    return DataChunk(cols, length=len(node.rows))
