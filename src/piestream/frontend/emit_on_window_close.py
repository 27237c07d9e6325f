"""EMIT ON WINDOW CLOSE (RisingWave's emit mode) in the stream planner: which group key column
closes an aggregation's windows, and whether a planned job emits only closed windows.

In an EOWC job every aggregation becomes an EOWC HashAgg (`HashAggNode.emit_on_window_close`):
it emits a group's row once, when the group's watermarked key falls below the watermark's
bound, and never retracts it. So the job's output is "the query over the closed windows" only
if nothing above the top aggregation could change rows again: Projects, Filters and exchanges.
Other shapes RisingWave supports (a sort buffer, EowcSort, above joins and plain scans; EOWC
over-window and sinks) are refused with 0A000 by name. The error texts are RisingWave's.
"""

from __future__ import annotations

from collections.abc import Sequence

from piestream.common.errors import FeatureNotSupported
from piestream.frontend.stream_piece import ExchangeMarker
from piestream.frontend.watermark_derive import Watermarks
from piestream.plan.filter import FilterNode
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


def check_emits_on_window_close(node: StreamNode, watermarks: Watermarks) -> None:
    """0A000 unless `node` is an EOWC HashAgg under Projects, Filters and exchanges only."""
    top = node
    while isinstance(top, ProjectNode | FilterNode | ExchangeMarker):
        top = top.input
    if isinstance(top, HashAggNode) and top.emit_on_window_close:
        return
    if not watermarks:
        raise FeatureNotSupported(
            CANNOT_EXECUTE,
            hint="Try define a watermark column in the source, or avoid aggregation without GROUP BY",
        )
    below = "the query has no aggregation"
    if any(isinstance(n, HashAggNode) for n in top.walk()):
        below = f"{top.kind} above the aggregation is not supported"
    raise FeatureNotSupported(
        f"{CANNOT_EXECUTE} piestream emits on window close only from an aggregation over a "
        f"watermarked GROUP BY column at the top of the query ({below})",
        hint="RisingWave's sort buffer (EowcSort) for other queries is not implemented.",
    )
