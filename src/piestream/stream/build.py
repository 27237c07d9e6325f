"""Building executors from plan nodes: one builder per node kind (RisingWave's ``from_proto``).

Plan nodes are data (`piestream.plan`); this table is the only place that knows which executor
runs each kind. A node kind without a builder cannot run: `build_executor` says so by name.
Connector-backed nodes get their reader / writer from the actor's `Connectors`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from piestream.common.errors import InternalError
from piestream.plan.asof_join import AsOfJoinNode
from piestream.plan.backfill import BackfillNode
from piestream.plan.dedup import DedupNode
from piestream.plan.dynamic_filter import DynamicFilterNode
from piestream.plan.eowc_sort import EowcSortNode
from piestream.plan.expand import ExpandNode
from piestream.plan.filter import FilterNode
from piestream.plan.general_over_window import GeneralOverWindowNode
from piestream.plan.hash_agg import HashAggNode
from piestream.plan.hash_join import HashJoinNode
from piestream.plan.hop_window import HopWindowNode
from piestream.plan.materialize import MaterializeNode
from piestream.plan.materialized_exprs import MaterializedExprsNode
from piestream.plan.node import DmlNode, ExchangeNode, StreamNode
from piestream.plan.now import NowNode
from piestream.plan.over_window import OverWindowNode
from piestream.plan.project import ProjectNode
from piestream.plan.project_set import ProjectSetNode
from piestream.plan.row_id_gen import RowIdGenNode
from piestream.plan.sink import SinkNode
from piestream.plan.source import SourceNode
from piestream.plan.subscription import SubscriptionLogNode
from piestream.plan.temporal_join import TemporalJoinNode
from piestream.plan.top_n import TopNNode
from piestream.plan.union import UnionNode
from piestream.plan.values import ValuesNode
from piestream.plan.watermark import WatermarkFilterNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.agg.hash_agg import HashAggExecutor
from piestream.stream.executors.backfill import BackfillExecutor
from piestream.stream.executors.dedup import AppendOnlyDedupExecutor
from piestream.stream.executors.dynamic_filter import DynamicFilterExecutor
from piestream.stream.executors.eowc_sort import EowcSortExecutor
from piestream.stream.executors.expand import ExpandExecutor
from piestream.stream.executors.filter import FilterExecutor
from piestream.stream.executors.general_over_window import GeneralOverWindowExecutor
from piestream.stream.executors.hop_window import HopWindowExecutor
from piestream.stream.executors.join.asof_executor import AsOfJoinExecutor
from piestream.stream.executors.join.executor import HashJoinExecutor
from piestream.stream.executors.materialize import MaterializeExecutor
from piestream.stream.executors.materialized_exprs import MaterializedExprsExecutor
from piestream.stream.executors.now import NowExecutor
from piestream.stream.executors.over_window import OverWindowExecutor
from piestream.stream.executors.project import ProjectExecutor
from piestream.stream.executors.project_set import ProjectSetExecutor
from piestream.stream.executors.row_id_gen import RowIdGenExecutor
from piestream.stream.executors.sink import SinkExecutor
from piestream.stream.executors.source import SourceExecutor
from piestream.stream.executors.subscription import SubscriptionLogExecutor
from piestream.stream.executors.temporal_join import TemporalJoinExecutor
from piestream.stream.executors.top_n import TopNExecutor
from piestream.stream.executors.top_n_append_only import AppendOnlyTopNExecutor
from piestream.stream.executors.values import ValuesExecutor
from piestream.stream.executors.watermark_filter import WatermarkFilterExecutor

Builder = Callable[[Any, ActorContext], Executor]


def _pass_through(node: StreamNode, ctx: ActorContext) -> Executor:
    """Input ports and Union: chunks pass unchanged (the base executor)."""
    return Executor(ctx, node.schema, node.stream_key, node.append_only)


def _source(node: SourceNode, ctx: ActorContext) -> Executor:
    reader, _ = ctx.connectors.source(node.spec.connector)(node.spec)
    return SourceExecutor(ctx, node, reader)


def _top_n(node: TopNNode, ctx: ActorContext) -> Executor:
    """Append-only input without WITH TIES keeps only each group's top rows (AppendOnlyGroupTopN)."""
    if node.input.append_only and not (node.with_ties and node.limit > 0):
        return AppendOnlyTopNExecutor(ctx, node)
    return TopNExecutor(ctx, node)


def _sink(node: SinkNode, ctx: ActorContext) -> Executor:
    return SinkExecutor(ctx, node, ctx.connectors.sink(node.connector)(node.options))


BUILDERS: dict[type[StreamNode], Builder] = {
    ExchangeNode: _pass_through,
    DmlNode: _pass_through,
    UnionNode: _pass_through,
    ProjectNode: lambda n, ctx: ProjectExecutor(ctx, n),
    ProjectSetNode: lambda n, ctx: ProjectSetExecutor(ctx, n),
    FilterNode: lambda n, ctx: FilterExecutor(ctx, n),
    MaterializeNode: lambda n, ctx: MaterializeExecutor(ctx, n),
    MaterializedExprsNode: lambda n, ctx: MaterializedExprsExecutor(ctx, n),
    RowIdGenNode: lambda n, ctx: RowIdGenExecutor(ctx, n),
    HashAggNode: lambda n, ctx: HashAggExecutor(ctx, n),
    HashJoinNode: lambda n, ctx: HashJoinExecutor(ctx, n),
    AsOfJoinNode: lambda n, ctx: AsOfJoinExecutor(ctx, n),
    TopNNode: _top_n,
    DedupNode: lambda n, ctx: AppendOnlyDedupExecutor(ctx, n),
    EowcSortNode: lambda n, ctx: EowcSortExecutor(ctx, n),
    DynamicFilterNode: lambda n, ctx: DynamicFilterExecutor(ctx, n),
    TemporalJoinNode: lambda n, ctx: TemporalJoinExecutor(ctx, n),
    HopWindowNode: lambda n, ctx: HopWindowExecutor(ctx, n),
    ExpandNode: lambda n, ctx: ExpandExecutor(ctx, n),
    OverWindowNode: lambda n, ctx: OverWindowExecutor(ctx, n),
    GeneralOverWindowNode: lambda n, ctx: GeneralOverWindowExecutor(ctx, n),
    BackfillNode: lambda n, ctx: BackfillExecutor(ctx, n),
    ValuesNode: lambda n, ctx: ValuesExecutor(ctx, n),
    NowNode: lambda n, ctx: NowExecutor(ctx, n),
    SourceNode: _source,
    SinkNode: _sink,
    SubscriptionLogNode: lambda n, ctx: SubscriptionLogExecutor(ctx, n),
    WatermarkFilterNode: lambda n, ctx: WatermarkFilterExecutor(ctx, n),
}


def build_executor(node: StreamNode, ctx: ActorContext) -> Executor:
    """The executor of one plan node (its inputs are built by the actor, children first)."""
    builder = BUILDERS.get(type(node))
    if builder is None:
        raise InternalError(f"no executor for stream plan node {node.kind or type(node).__name__}")
    return builder(node, ctx)
