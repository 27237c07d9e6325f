"""EMIT ON WINDOW CLOSE (RisingWave's emit mode) in the stream planner: which group key column
closes an aggregation's windows, and which column an EowcSort buffers by.

In an EOWC job every aggregation becomes an EOWC HashAgg (`HashAggNode.emit_on_window_close`):
it emits a group's row once, when the group's watermarked key falls below the watermark's
bound, and never retracts it. An OVER window gets an EowcSort below it (its input's final rows,
in window order). A job whose top (under Projects, Filters and exchanges) is neither gets an
EowcSort above it, as RisingWave does: a query without aggregation, a join above aggregations.
The error texts are RisingWave's.
"""

from __future__ import annotations

from collections.abc import Sequence

from piestream.common.errors import FeatureNotSupported
from piestream.common.order import OrderType
from piestream.frontend.stream_piece import ExchangeMarker
from piestream.frontend.watermark_derive import Watermarks
from piestream.plan.eowc_sort import EowcSortNode
from piestream.plan.filter import FilterNode
from piestream.plan.general_over_window import GeneralOverWindowNode
from piestream.plan.hash_agg import HashAggNode
from piestream.plan.node import StreamNode
from piestream.plan.project import ProjectNode

#: RisingWave's texts (frontend/src/optimizer/plan_node/generic/agg.rs and convert.rs)
NEEDS_GROUP_WATERMARK = "Emit-On-Window-Close mode requires a watermark column in GROUP BY."
CANNOT_EXECUTE = "The query cannot be executed in Emit-On-Window-Close mode."


def eowc_window_column(group_key: Sequence[int], watermarks: Watermarks) -> int:
    """The group key column whose watermark closes the windows (the first watermarked one), or
    RisingWave's error: none, or watermarks derived from different upstream columns."""
    marked = [k for k in group_key if k in watermarks]
    if not marked:
        raise FeatureNotSupported(NEEDS_GROUP_WATERMARK, hint="Please try to GROUP BY a watermark column")
    origins = {frozenset(s.table.table_id for s in watermarks[k].sources) for k in marked}
    if len(origins) > 1:
        raise FeatureNotSupported(
            "Emit-On-Window-Close mode requires that watermark columns in GROUP BY are derived "
            "from the same upstream column.",
            hint="Please try to remove undesired columns from GROUP BY",
        )
    return marked[0]


def emits_final_rows(node: StreamNode) -> bool:
    """Whether `node` emits only final rows already: an EOWC HashAgg, or an OverWindow over an
    EowcSort (EOWC over-window), or an aggregation over one of those, under Projects, Filters and
    exchanges only."""
    top = node
    while isinstance(top, ProjectNode | FilterNode | ExchangeMarker):
        top = top.input
    if isinstance(top, HashAggNode):  # an EOWC one, or one planned over final rows
        return top.emit_on_window_close or emits_final_rows(top.input)
    return isinstance(top, GeneralOverWindowNode) and isinstance(top.input, EowcSortNode)


def eowc_sort_column(piece_watermarks: Watermarks, width: int) -> int:
    """The column an EowcSort above a query buffers by: its first watermarked column (a visible
    one if any), or RisingWave's error if the query has none."""
    if not piece_watermarks:
        raise FeatureNotSupported(
            CANNOT_EXECUTE,
            hint="Try define a watermark column in the source, or avoid aggregation without GROUP BY",
        )
    cols = sorted(piece_watermarks)
    visible = [c for c in cols if c < width]
    return (visible or cols)[0]


def check_over_window_order(order_by: Sequence[tuple[int, OrderType]], watermarks: Watermarks) -> int:
    """EOWC over-window: the single ORDER BY column must be watermarked and ascending (RisingWave's
    rule), so rows leave the EowcSort in window order; returns that column."""
    if len(order_by) != 1 or order_by[0][0] not in watermarks or order_by[0][1].descending:
        raise FeatureNotSupported(
            "Only support window functions order by single column and that column should be "
            "watermark column in EMIT ON WINDOW CLOSE mode",
            hint="piestream sorts an EOWC over-window's input by its ascending watermarked ORDER BY column",
        )
    return order_by[0][0]
