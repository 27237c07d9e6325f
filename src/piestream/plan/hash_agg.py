"""The HashAgg / SimpleAgg node and its state tables (seed 002; reference §6.1), planned once.

- The intermediate (value-state) table: group key | `_row_count` | each call's state columns.
  The hidden row count (count(*) of the group, ignoring FILTER) decides whether a group exists.
  Calls that read a materialized input keep their *last output* there, so the executor, rebuilt
  from storage every epoch, can still emit the U- / Delete carrying the previously emitted row.
- One materialized-input table per min/max call over a retractable input (`agg_extreme_table`)
  and per string_agg / array_agg call: group key | sort key | upstream stream key (| the value),
  so the answer is the start of the group's prefix scan.
- One distinct dedup table per DISTINCT column (`distinct_dedup_table`): group key | value | a
  count per distinct call on that column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from piestream.common.order import ASC, OrderType
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, DataType, Field
from piestream.common.vnode import VNODE_COUNT
from piestream.plan.agg_call import AggCall, AggKind, agg_state_columns
from piestream.plan.node import StreamNode, node_kind
from piestream.plan.watermark import ColumnWatermark
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.schemas import (
    AggStateKind,
    agg_extreme_table,
    agg_state_kind,
    agg_value_table,
    distinct_dedup_table,
)

ROW_COUNT = "_row_count"


@dataclass(frozen=True)
class MaterializedInputTable:
    """A call's materialized input: table column i holds input column `input_cols[i]`."""

    table: TableDesc
    input_cols: tuple[int, ...]
    value_col: int  # table column of the aggregated argument
    delimiter_col: int | None = None  # string_agg's per-row delimiter, if not a constant


@dataclass(frozen=True)
class DistinctTable:
    """The dedup table of one DISTINCT column, shared by the distinct calls on it."""

    column: int
    calls: tuple[int, ...]  # indices into the node's calls, in count-column order
    table: TableDesc


@dataclass(frozen=True)
class AggTables:
    value: TableDesc
    materialized: tuple[MaterializedInputTable | None, ...]  # aligned with the calls
    distinct: tuple[DistinctTable, ...]

    def all(self) -> list[TableDesc]:
        out = [self.value]
        out += [m.table for m in self.materialized if m is not None]
        out += [d.table for d in self.distinct]
        return out


def uses_materialized_input(call: AggCall, append_only_input: bool) -> bool:
    return agg_state_kind(str(call.kind), append_only_input) is AggStateKind.MATERIALIZED_INPUT


def plan_agg_tables(
    input_schema: Schema,
    input_stream_key: Sequence[int],
    append_only: bool,
    group_key: Sequence[int],
    calls: Sequence[AggCall],
    next_table_id: Callable[[], int],
) -> AggTables:
    """Every state table of an aggregation over an input with this schema and stream key."""
    cols = [ColumnDesc(f.name, f.data_type) for f in input_schema]
    types = input_schema.types
    gk = [cols[i] for i in group_key]
    states: list[tuple[str, DataType] | ColumnDesc] = [ColumnDesc(ROW_COUNT, BIGINT, hidden=True)]
    for i, call in enumerate(calls):
        for name, t in agg_state_columns(call, types[call.args[0]] if call.args else None):
            states.append(ColumnDesc(f"_{call.kind}_{i}{name}", t, hidden=True))
    value = agg_value_table(next_table_id(), gk, states, name="agg_state")

    materialized: list[MaterializedInputTable | None] = []
    for i, call in enumerate(calls):
        if not uses_materialized_input(call, append_only):
            materialized.append(None)
        elif call.kind in (AggKind.MIN, AggKind.MAX):
            materialized.append(_extreme_table(next_table_id(), cols, group_key, call, input_stream_key, i))
        else:
            materialized.append(_ordered_table(next_table_id(), cols, group_key, call, input_stream_key, i))

    by_column: dict[int, list[int]] = {}
    for i, call in enumerate(calls):
        if call.effective_distinct:
            by_column.setdefault(call.args[0], []).append(i)
    distinct = tuple(
        DistinctTable(
            col,
            tuple(idx),
            distinct_dedup_table(next_table_id(), gk, cols[col], len(idx), name=f"agg_distinct_{col}"),
        )
        for col, idx in sorted(by_column.items())
    )
    return AggTables(value, tuple(materialized), distinct)


def _extreme_table(
    table_id: int,
    cols: list[ColumnDesc],
    group_key: Sequence[int],
    call: AggCall,
    stream_key: Sequence[int],
    i: int,
) -> MaterializedInputTable:
    arg = call.args[0]
    upstream = [c for c in stream_key if c not in group_key and c != arg]
    desc = agg_extreme_table(
        table_id,
        [cols[c] for c in group_key],
        cols[arg],
        str(call.kind),
        [cols[c] for c in upstream],
        name=f"agg_call_{i}",
    )
    return MaterializedInputTable(desc, (*group_key, arg, *upstream), len(group_key))


def _ordered_table(
    table_id: int,
    cols: list[ColumnDesc],
    group_key: Sequence[int],
    call: AggCall,
    stream_key: Sequence[int],
    i: int,
) -> MaterializedInputTable:
    """string_agg / array_agg input: group key | ORDER BY | stream key (the distinct value for
    DISTINCT calls) | the value and delimiter unless already in the key."""
    arg = call.args[0]
    sources = list(group_key)
    orders: list[OrderType] = [ASC] * len(sources)
    for col, order in call.order_by:
        if col not in sources:
            sources.append(col)
            orders.append(order)
    for col in (arg,) if call.effective_distinct else stream_key:
        if col not in sources:
            sources.append(col)
            orders.append(ASC)
    n_pk = len(sources)
    if arg not in sources:
        sources.append(arg)
    delimiter_col = None
    if len(call.args) > 1:
        delimiter_col = len(sources)
        sources.append(call.args[1])
    g = len(group_key)
    desc = TableDesc(
        table_id=table_id,
        columns=tuple(cols[c] for c in sources),
        pk=tuple(range(n_pk)),
        pk_orders=tuple(orders),
        dist_key=tuple(range(g)),
        vnode_count=VNODE_COUNT if g else 1,
        read_prefix_len_hint=g,
        name=f"agg_call_{i}",
    )
    return MaterializedInputTable(desc, tuple(sources), sources.index(arg), delimiter_col)


@node_kind("HashAgg")
@dataclass(frozen=True, kw_only=True)
class HashAggNode(StreamNode):
    """Output: group key columns, then one column per call; stream key = the group key.
    With an empty group key this is a SimpleAgg. Build it with `hash_agg_node`."""

    child_fields = ("input",)

    input: StreamNode
    group_key: tuple[int, ...]
    calls: tuple[AggCall, ...]
    state_tables: AggTables
    #: the watermark of group key column 0 (plan format 3): groups below it are cleaned from
    #: every state table (Hummock table watermarks on their first pk column) and the cache
    watermark: ColumnWatermark | None = field(default=None, metadata={"since_format": 3})
    #: EMIT ON WINDOW CLOSE (RisingWave's EOWC HashAgg): nothing is emitted as rows arrive; at
    #: each barrier the groups whose `watermark`ed key fell below the bound (closed windows) are
    #: emitted once as Inserts and cleaned, so the output is append-only
    emit_on_window_close: bool = field(default=False, metadata={"since_format": 3})

    def __post_init__(self) -> None:
        if self.watermark is not None and any(t.watermark_col != t.pk[0] for t in self.tables()):
            raise ValueError("a watermarked HashAgg needs every state table cleaned by its first pk column")
        if self.emit_on_window_close and (self.watermark is None or not self.append_only):
            raise ValueError(
                "an EMIT ON WINDOW CLOSE HashAgg needs a watermarked group key and emits only inserts"
            )

    @property
    def is_simple(self) -> bool:
        return not self.group_key

    def tables(self) -> list[TableDesc]:
        return self.state_tables.all()

    def explain(self) -> str:
        aggs = ", ".join(str(c) for c in self.calls)
        if self.is_simple:
            return f"SimpleAgg {{ aggs: [{aggs}] }}"
        keys = ", ".join(f"${i}" for i in self.group_key)
        wm = "" if self.watermark is None else f", cleaned_by: ${self.group_key[0]} >= {self.watermark}"
        if self.emit_on_window_close:
            closes = f", emit: window ${self.group_key[0]} closes below {self.watermark}"
            return f"HashAgg [eowc] {{ group_key: [{keys}], aggs: [{aggs}]{closes} }}"
        return f"HashAgg {{ group_key: [{keys}], aggs: [{aggs}]{wm} }}"


def hash_agg_node(
    input: StreamNode,
    group_key: Sequence[int],
    calls: Sequence[AggCall],
    next_table_id: Callable[[], int],
    *,
    output_names: Sequence[str] | None = None,
    watermark: ColumnWatermark | None = None,
    emit_on_window_close: bool = False,
) -> HashAggNode:
    """A HashAgg (SimpleAgg if `group_key` is empty) over `input`, with its state tables.

    Table ids come from `next_table_id`, in this order: the intermediate table, one
    materialized-input table per call that needs one, one dedup table per DISTINCT column.
    `watermark`: group key column 0's, if it has one; every table's pk starts with that column.
    `emit_on_window_close`: emit each group once, when its key falls below the watermark."""
    group_key = tuple(group_key)
    calls = tuple(calls)
    in_schema = input.schema
    tables = plan_agg_tables(in_schema, input.stream_key, input.append_only, group_key, calls, next_table_id)
    if output_names is None:
        output_names = [in_schema[i].name for i in group_key] + [str(c.kind) for c in calls]
    names = list(output_names)
    if len(names) != len(group_key) + len(calls):
        raise ValueError(f"{len(names)} output names for {len(group_key)} group keys and {len(calls)} calls")
    fields = [Field(names[j], in_schema[i].data_type) for j, i in enumerate(group_key)]
    fields += [Field(names[len(group_key) + j], c.return_type) for j, c in enumerate(calls)]
    if watermark is not None:
        if not group_key:
            raise ValueError("a SimpleAgg has no group key to clean by")
        tables = AggTables(
            _cleaned(tables.value),
            tuple(None if m is None else replace(m, table=_cleaned(m.table)) for m in tables.materialized),
            tuple(replace(d, table=_cleaned(d.table)) for d in tables.distinct),
        )
    return HashAggNode(
        watermark=watermark,
        emit_on_window_close=emit_on_window_close,
        schema=Schema(tuple(fields)),
        stream_key=tuple(range(len(group_key))),
        append_only=emit_on_window_close,
        input=input,
        group_key=group_key,
        calls=calls,
        state_tables=tables,
    )


def _cleaned(desc: TableDesc) -> TableDesc:
    """`desc` cleaned by a watermark on its first pk column (group key column 0)."""
    return replace(desc, watermark_col=desc.pk[0])
