"""HashAgg / SimpleAgg: the aggregation executor, its calls, states and state tables."""

from piestream.stream.executors.agg.calls import AggCall, AggKind, agg_return_type
from piestream.stream.executors.agg.hash_agg import HashAggExecutor, HashAggNode, hash_agg_node
from piestream.stream.executors.agg.tables import (
    AggTables,
    DistinctTable,
    MaterializedInputTable,
    plan_agg_tables,
)

__all__ = [
    "AggCall",
    "AggKind",
    "AggTables",
    "DistinctTable",
    "HashAggExecutor",
    "HashAggNode",
    "MaterializedInputTable",
    "agg_return_type",
    "hash_agg_node",
    "plan_agg_tables",
]
