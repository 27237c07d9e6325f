"""piestream.plan: stream plan nodes as versioned data (DESIGN "Layers": between expr and stream).

One module per node kind, each a frozen dataclass registered under a stable name (`node.node_kind`),
with the state-table layouts the planner derives for it; `fragment` holds fragments, their
dispatch edges and the fragment graph; `serde` is the versioned JSON form meta stores. The
frontend builds these nodes, meta stores them, `piestream.stream.build` turns them into
executors; nothing here imports an executor.
"""

from piestream.plan import (  # noqa: F401 - every node kind registers itself on import
    asof_join,
    backfill,
    dedup,
    dynamic_filter,
    eowc_sort,
    expand,
    filter,
    general_over_window,
    hash_agg,
    hash_join,
    hop_window,
    materialize,
    materialized_exprs,
    now,
    over_window,
    project,
    project_set,
    row_id_gen,
    sink,
    source,
    subscription,
    temporal_join,
    top_n,
    union,
    values,
    watermark,
)
from piestream.plan.node import NODE_KINDS, DmlNode, ExchangeNode, InputPortNode, StreamNode, node_kind

__all__ = ["NODE_KINDS", "DmlNode", "ExchangeNode", "InputPortNode", "StreamNode", "node_kind"]
