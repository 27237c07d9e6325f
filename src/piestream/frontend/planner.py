"""Planning streaming jobs: CREATE MATERIALIZED VIEW / INDEX (a query materialized) and CREATE
TABLE (DML, row ids, upsert handling, materialized), down to fragments ready to run.

MV primary key (reference §7): the ORDER BY columns first, until they cover the stream key, then
the rest of the stream key ascending; the MV is distributed by its stream key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.order import ASC, OrderType
from piestream.common.schema import Schema
from piestream.common.types import SERIAL, DataType, Field
from piestream.frontend.binder.query import BoundQuery
from piestream.frontend.catalog import (
    ColumnCatalog,
    IndexInfo,
    Relation,
    RelationKind,
    SubscriptionInfo,
    WatermarkInfo,
)
from piestream.frontend.fragmenter import FragmentedJob, fragment_job
from piestream.frontend.optimizer import optimize
from piestream.frontend.parser import ast
from piestream.frontend.stream_piece import SINGLE, Dist
from piestream.frontend.stream_planner import StreamPlanner, watermark_filter_node
from piestream.plan.fragment import Fragment
from piestream.plan.materialize import ConflictBehavior, MaterializeNode
from piestream.plan.node import DmlNode, ExchangeNode, StreamNode
from piestream.plan.row_id_gen import RowIdGenNode
from piestream.plan.subscription import SubscriptionLogNode, subscription_log_table
from piestream.storage.table.desc import ColumnDesc, TableDesc

ROW_ID = "_row_id"


@dataclass
class Ids:
    """Id allocators the planner draws from (meta owns the sequences)."""

    next_table_id: Callable[[], int]
    next_fragment_id: Callable[[], int]
    upstream_parallelism: Callable[[int], int]


@dataclass
class PlannedJob:
    job: FragmentedJob
    relation: Relation
    stream_plan: StreamNode  # before fragmentation (for EXPLAIN)


def _unique_names(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            out.append(f"{n}_{seen[n]}")
        else:
            seen[n] = 0
            out.append(n)
    return out


def derive_pk(
    stream_key: Sequence[int], order: Sequence[tuple[int, OrderType]]
) -> tuple[list[int], list[OrderType]]:
    pk: list[int] = []
    orders: list[OrderType] = []
    for col, ot in order:
        if set(stream_key) <= set(pk):
            break
        if col not in pk:
            pk.append(col)
            orders.append(ot)
    for k in stream_key:
        if k not in pk:
            pk.append(k)
            orders.append(ASC)
    return pk, orders


def plan_materialized_view(
    bound: BoundQuery,
    *,
    name: str,
    definition: str,
    kind: RelationKind,
    job_id: int,
    parallelism: int,
    ids: Ids,
    depends_on: Sequence[int],
    distributed_by: Sequence[int] | None = None,
    index: IndexInfo | None = None,
    emit_on_window_close: bool = False,
) -> PlannedJob:
    plan = optimize(bound.plan, streaming=True)
    planner = StreamPlanner(ids.next_table_id, emit_on_window_close=emit_on_window_close)
    piece = planner.plan_job(plan)
    sk = list(piece.stream_key)
    if distributed_by:  # an index: distributed by its leading columns, keyed by them first
        sk = list(dict.fromkeys([*distributed_by, *sk]))
    dist_key = list(distributed_by) if distributed_by else sk
    pk, orders = derive_pk(sk, bound.order)
    piece = planner.require(piece, Dist("hash", tuple(dist_key)) if dist_key else SINGLE)
    width = len(bound.names)
    names = _unique_names(
        [*bound.names, *[f"_{f.name}".replace("__", "_") for f in piece.schema.fields[width:]]]
    )
    types: list[DataType] = piece.schema.types
    cols = tuple(
        ColumnDesc(n, t, hidden=i >= width) for i, (n, t) in enumerate(zip(names, types, strict=True))
    )
    table_id = ids.next_table_id()
    desc = TableDesc(
        table_id=table_id,
        columns=cols,
        pk=tuple(pk),
        pk_orders=tuple(orders),
        dist_key=tuple(dist_key),
        read_prefix_len_hint=len(pk),
        append_only=piece.node.append_only,
        name=name,
    )
    schema = Schema(tuple(Field(c.name, c.data_type) for c in cols))
    root = MaterializeNode(
        schema=schema,
        stream_key=tuple(sk),
        append_only=piece.node.append_only,
        input=piece.node,
        table=desc,
        conflict=ConflictBehavior.NO_CHECK,
    )
    job = fragment_job(
        root,
        job_id=job_id,
        parallelism=parallelism,
        next_fragment_id=ids.next_fragment_id,
        upstream_parallelism=ids.upstream_parallelism,
    )
    root_frag = next(f for f in job.fragments if f.fragment_id == job.root_fragment_id)
    rel = Relation(
        id=table_id,
        name=name,
        kind=kind,
        columns=tuple(ColumnCatalog(c.name, c.data_type, c.hidden) for c in cols),
        definition=definition,
        table=desc,
        depends_on=tuple(depends_on),
        job_id=job_id,
        append_only=desc.append_only,
        fragment_id=job.root_fragment_id,
        parallelism=root_frag.parallelism,
        index=index,
    )
    return PlannedJob(job, rel, root)


SinkFactory = Callable[[StreamNode, Sequence[str], tuple[int, ...]], StreamNode]


def plan_sink(
    bound: BoundQuery,
    *,
    name: str,
    definition: str,
    job_id: int,
    parallelism: int,
    ids: Ids,
    depends_on: Sequence[int],
    make_sink: SinkFactory,
    key_names: Sequence[str] | None = None,
    distribute_by_key: bool = True,
    properties: dict[str, str] | None = None,
    emit_on_window_close: bool = False,
) -> PlannedJob:
    """CREATE SINK: the query's change stream into a sink node built by `make_sink(input,
    column names, key)`. The key is `key_names` (visible columns) or the stream key; with
    `distribute_by_key` the rows are hash-distributed by it, so one key's changes of an epoch
    meet in one actor (what an upsert or changelog sink needs to keep them in order)."""
    plan = optimize(bound.plan, streaming=True)
    planner = StreamPlanner(ids.next_table_id, emit_on_window_close=emit_on_window_close)
    piece = planner.plan_job(plan)
    width = len(bound.names)
    names = _unique_names(
        [*bound.names, *[f"_{f.name}".replace("__", "_") for f in piece.schema.fields[width:]]]
    )
    if key_names:
        missing = [k for k in key_names if k not in names[:width]]
        if missing:
            raise PiestreamError(
                f'sink primary key column "{missing[0]}" is not in the query', sqlstate="42703"
            )
        key = tuple(names.index(k) for k in key_names)
    else:
        key = tuple(piece.stream_key)
    if distribute_by_key and key:
        piece = planner.require(piece, Dist("hash", key))
    root = make_sink(piece.node, names, key)
    job = fragment_job(
        root,
        job_id=job_id,
        parallelism=parallelism,
        next_fragment_id=ids.next_fragment_id,
        upstream_parallelism=ids.upstream_parallelism,
    )
    root_frag = next(f for f in job.fragments if f.fragment_id == job.root_fragment_id)
    types = piece.schema.types
    rel = Relation(
        id=ids.next_table_id(),
        name=name,
        kind=RelationKind.SINK,
        columns=tuple(
            ColumnCatalog(n, t, i >= width) for i, (n, t) in enumerate(zip(names, types, strict=True))
        ),
        definition=definition,
        depends_on=tuple(depends_on),
        job_id=job_id,
        append_only=piece.node.append_only,
        properties=dict(properties or {}),
        fragment_id=job.root_fragment_id,
        parallelism=root_frag.parallelism,
    )
    return PlannedJob(job, rel, root)


def plan_subscription(
    upstream: Relation,
    *,
    name: str,
    definition: str,
    job_id: int,
    ids: Ids,
    retention_ms: int,
    start_epoch: int,
    properties: dict[str, str],
) -> PlannedJob:
    """CREATE SUBSCRIPTION: a log-store node beside each actor of `upstream` (a no-shuffle
    edge, no backfill: the log starts with the changes after `start_epoch`)."""
    desc, frag = upstream.table, upstream.fragment_id
    if (
        desc is None
        or frag is None
        or upstream.kind not in (RelationKind.TABLE, RelationKind.MATERIALIZED_VIEW)
    ):
        raise PiestreamError(
            f'"{upstream.name}" is a {upstream.kind.value}: '
            "a subscription follows a table or a materialized view",
            sqlstate="42809",
        )
    exchange = ExchangeNode(
        schema=Schema(tuple(Field(c.name, c.data_type) for c in desc.columns)),
        stream_key=desc.pk,
        append_only=upstream.append_only,
        upstream_fragment_id=frag,
    )
    log_table = subscription_log_table(ids.next_table_id(), desc, name)
    root = SubscriptionLogNode(
        schema=exchange.schema,
        stream_key=exchange.stream_key,
        append_only=exchange.append_only,
        input=exchange,
        subscription_name=name,
        log_table=log_table,
        retention_ms=retention_ms,
    )
    job = fragment_job(
        root,
        job_id=job_id,
        parallelism=upstream.parallelism or 1,
        next_fragment_id=ids.next_fragment_id,
        upstream_parallelism=ids.upstream_parallelism,
    )
    root_frag = next(f for f in job.fragments if f.fragment_id == job.root_fragment_id)
    rel = Relation(
        id=ids.next_table_id(),
        name=name,
        kind=RelationKind.SUBSCRIPTION,
        columns=tuple(ColumnCatalog(c.name, c.data_type, c.hidden) for c in upstream.columns),
        definition=definition,
        depends_on=(upstream.id,),
        job_id=job_id,
        append_only=upstream.append_only,
        properties=dict(properties),
        fragment_id=job.root_fragment_id,
        parallelism=root_frag.parallelism,
        subscription=SubscriptionInfo(upstream.id, log_table, retention_ms, start_epoch),
    )
    return PlannedJob(job, rel, root)


def table_conflict(stmt: ast.CreateTable) -> ConflictBehavior | None:
    """A table's ON CONFLICT clause as its conflict behaviour (None: the default for its kind).
    Only a table with a primary key has conflicts; an APPEND ONLY one never updates a row."""
    on_conflict = stmt.on_conflict
    if on_conflict is None:
        return None
    what = "ON CONFLICT " + on_conflict.replace("_", " ").upper()
    if not stmt.primary_key:
        raise PiestreamError(f'{what} needs a primary key: table "{stmt.name}" has none', sqlstate="42P10")
    if on_conflict == "do_nothing":
        return ConflictBehavior.IGNORE_CONFLICT
    if stmt.append_only:
        raise FeatureNotSupported(f"an APPEND ONLY table cannot have {what}")
    if on_conflict == "do_update_full":
        return ConflictBehavior.OVERWRITE
    if on_conflict == "do_update_if_not_null":
        return ConflictBehavior.DO_UPDATE_IF_NOT_NULL
    raise FeatureNotSupported(f"{what} is not supported")


def plan_table(
    *,
    name: str,
    columns: Sequence[tuple[str, DataType]],
    pk_names: Sequence[str],
    append_only: bool,
    conflict: ConflictBehavior | None,
    definition: str,
    job_id: int,
    parallelism: int,
    ids: Ids,
    properties: dict[str, str] | None = None,
    source_node: Callable[[Schema, tuple[int, ...], TableDesc], StreamNode] | None = None,
    watermark: WatermarkInfo | None = None,
) -> PlannedJob:
    """A table: DML (and/or a connector source) -> [WatermarkFilter] -> [RowIdGen] ->
    Materialize with conflict handling. A watermark needs an append-only table (checked by
    `bind_watermark`): its filter drops late rows before they are stored."""
    cols = [ColumnDesc(n, t) for n, t in columns]
    names = [c.name for c in cols]
    if pk_names:
        pk = tuple(names.index(n) for n in pk_names)
        behavior = conflict or (
            ConflictBehavior.IGNORE_CONFLICT if append_only else ConflictBehavior.OVERWRITE
        )
    else:
        cols.append(ColumnDesc(ROW_ID, SERIAL, hidden=True))
        pk = (len(cols) - 1,)
        behavior = ConflictBehavior.NO_CHECK
    table_id = ids.next_table_id()
    desc = TableDesc(
        table_id=table_id,
        columns=tuple(cols),
        pk=pk,
        pk_orders=(ASC,) * len(pk),
        dist_key=pk,
        read_prefix_len_hint=len(pk),
        append_only=append_only,
        name=name,
    )
    schema = Schema(tuple(Field(c.name, c.data_type) for c in cols))
    node: StreamNode
    if source_node is not None:
        node = source_node(schema, pk, desc)
    else:
        node = DmlNode(schema=schema, stream_key=pk, append_only=append_only, table_id=table_id, dist_key=pk)
    if watermark is not None:
        node = watermark_filter_node(node, watermark, ids.next_table_id(), name)
    if not pk_names:
        node = RowIdGenNode(
            schema=schema, stream_key=pk, append_only=append_only, input=node, row_id_index=pk[0]
        )
    root = MaterializeNode(
        schema=schema, stream_key=pk, append_only=append_only, input=node, table=desc, conflict=behavior
    )
    job = fragment_job(
        root,
        job_id=job_id,
        parallelism=parallelism,
        next_fragment_id=ids.next_fragment_id,
        upstream_parallelism=ids.upstream_parallelism,
    )
    if source_node is None:
        # DML rows enter through the driver, so a no-pk table's fragment is never a singleton
        job.fragments = [
            f if f.fragment_id != job.root_fragment_id else _with_parallelism(f, parallelism)
            for f in job.fragments
        ]
    root_frag = next(f for f in job.fragments if f.fragment_id == job.root_fragment_id)
    rel = Relation(
        id=table_id,
        name=name,
        kind=RelationKind.TABLE,
        columns=tuple(ColumnCatalog(c.name, c.data_type, c.hidden) for c in cols),
        definition=definition,
        table=desc,
        job_id=job_id,
        append_only=append_only,
        properties=dict(properties or {}),
        fragment_id=job.root_fragment_id,
        parallelism=root_frag.parallelism,
        conflict=behavior,
        row_id_index=None if pk_names else len(cols) - 1,
        watermark=watermark,
    )
    return PlannedJob(job, rel, root)


def _with_parallelism(f: Fragment, parallelism: int) -> Fragment:
    from dataclasses import replace

    return replace(f, parallelism=parallelism)


# ---------------------------------------------------------------------------------------------
# EXPLAIN


def explain_stream(planned: PlannedJob) -> str:
    """The stream plan with each operator's stream key, then fragments and state tables."""
    lines = ["StreamMaterialize " + _node_line(planned.stream_plan)]
    lines += _explain_node(planned.stream_plan, 1, top=True)
    lines.append("")
    for f in sorted(planned.job.fragments, key=lambda f: f.fragment_id):
        outs = ", ".join(e.explain() for e in f.outputs) or "-"
        lines.append(f"Fragment {f.fragment_id} (parallelism {f.parallelism}, outputs: {outs})")
        lines.append(f"  └─{f.root.explain()} {_node_line(f.root)}")
        lines += _explain_node(f.root, 2, top=False)
    for up, e in planned.job.upstream_edges:
        lines.append(f"Upstream fragment {up} -> {e.explain()}")
    lines.append("")
    seen = set()
    for f in planned.job.fragments:
        for t in f.tables():
            if t.table_id not in seen:
                seen.add(t.table_id)
                lines.append(t.describe())
    return "\n".join(lines)


def _node_line(n: StreamNode) -> str:
    key = ", ".join(n.schema[k].name for k in n.stream_key)
    return f"{{ stream_key: [{key}] }}"


def _explain_node(n: StreamNode, depth: int, top: bool) -> list[str]:
    lines = []
    for c in n.children():
        lines.append("  " * depth + f"└─{c.explain()} {_node_line(c)}")
        lines += _explain_node(c, depth + 1, top)
    return lines
