"""Reading watermarks: a filter's global watermark, and a derived column's bound (plan/watermark).

A WatermarkFilter's state table holds one row per filter actor (the largest watermark it has
seen). The global watermark is the max over those rows *as committed*: every actor of an epoch,
in any fragment, reads the same value (each task's storage sees the committed version plus only
its own writes), so filtering and state clean-up agree across actors and attempts.
"""

from __future__ import annotations

from piestream.common.scalar import Datum
from piestream.plan.watermark import ColumnWatermark
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.state_table import StateTable
from piestream.stream.executor import ActorContext


def global_watermark(table: StateTable) -> Datum:
    """The max of the committed per-actor watermarks (None before any). The table has a row per
    filter actor, a handful: reading them as Python rows is one short scan per epoch."""
    values = [r[1] for r in table.scan() if r[1] is not None]
    return max(values) if values else None


def committed_watermarks(ctx: ActorContext, tables: list[TableDesc]) -> dict[int, Datum]:
    """Each filter table's global watermark, read once per actor and epoch."""
    memo = ctx.watermarks
    for desc in tables:
        if desc.table_id not in memo:
            memo[desc.table_id] = global_watermark(ctx.state_table(desc))
    return {d.table_id: memo[d.table_id] for d in tables}


def column_bound(ctx: ActorContext, wm: ColumnWatermark) -> Datum:
    """The committed bound of a watermarked column (None while a filter has no watermark yet)."""
    return wm.bound(committed_watermarks(ctx, [s.table for s in wm.sources]))
