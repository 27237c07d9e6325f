"""HashAgg / SimpleAgg: the aggregation executor and its states (the node, its calls and state
tables are plan data: `piestream.plan.hash_agg`, `piestream.plan.agg_call`)."""

from piestream.stream.executors.agg.hash_agg import HashAggExecutor

__all__ = ["HashAggExecutor"]
