"""The state tables of a HashAgg / SimpleAgg (seed 002; reference §6.1), planned once.

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
from dataclasses import dataclass

from piestream.common.order import ASC, OrderType
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, DataType
from piestream.common.vnode import VNODE_COUNT
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.schemas import (
    AggStateKind,
    agg_extreme_table,
    agg_state_kind,
    agg_value_table,
    distinct_dedup_table,
)
from piestream.stream.executors.agg.calls import AggCall, AggKind
from piestream.stream.executors.agg.states import state_columns

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
        for name, t in state_columns(call, [types[a] for a in call.args[:1]]):
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
