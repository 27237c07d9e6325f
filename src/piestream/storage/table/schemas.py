"""State-table layouts of the stateful executors (seed 000's table, seed 002; reference §6).

=============  ==========================================  =================================
state          key                                         value
=============  ==========================================  =================================
mv             sort key | pk                               the row
top n          group key | sort key | input stream key     the row
join           join key | input stream key                 the row (+ a degree table)
agg value      group key                                   one state per agg call
agg extreme    group key | sort key | upstream pk          the row's columns
=============  ==========================================  =================================

For min/max over a retractable input the extreme table orders the sort key so the aggregate's
answer is the first row of the group's prefix scan (min ascending, max descending): on a cache
miss the executor reads one row, not the whole group. Over an append-only input nothing is ever
retracted, so min/max keep only a value state, like sum and count (seed 002).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from piestream.common.order import ASC, DESC, OrderType
from piestream.common.types import BIGINT, DataType
from piestream.common.vnode import VNODE_COUNT
from piestream.storage.table.desc import ColumnDesc, TableDesc


class AggStateKind(enum.Enum):
    VALUE = "value"  # one value per group in the agg's intermediate table
    MATERIALIZED_INPUT = "materialized_input"  # every input row, ordered (extreme state)


_EXTREME = {"min", "max"}
_ORDERED_INPUT = {"string_agg", "array_agg", "first_value", "last_value"}
# reference §6.1: these keep their whole (ordered) input as well
_ORDERED_INPUT |= {"jsonb_agg", "jsonb_object_agg", "percentile_cont", "percentile_disc", "mode"}


def agg_state_kind(agg: str, append_only_input: bool) -> AggStateKind:
    """Seed 002: min/max need the materialized input unless the input is append-only."""
    if agg in _EXTREME:
        return AggStateKind.VALUE if append_only_input else AggStateKind.MATERIALIZED_INPUT
    if agg in _ORDERED_INPUT:
        return AggStateKind.MATERIALIZED_INPUT
    return AggStateKind.VALUE


def _cols(columns: Sequence[tuple[str, DataType] | ColumnDesc]) -> tuple[ColumnDesc, ...]:
    return tuple(c if isinstance(c, ColumnDesc) else ColumnDesc(c[0], c[1]) for c in columns)


def mv_table(
    table_id: int,
    columns: Sequence[tuple[str, DataType] | ColumnDesc],
    pk: Sequence[int],
    pk_orders: Sequence[OrderType] | None = None,
    dist_key: Sequence[int] | None = None,
    *,
    name: str = "",
    append_only: bool = False,
) -> TableDesc:
    """An MV or table: key = sort key | pk (the pk as derived by the planner, ORDER BY columns first)."""
    return TableDesc(
        table_id=table_id,
        columns=_cols(columns),
        pk=tuple(pk),
        pk_orders=tuple(pk_orders) if pk_orders is not None else (ASC,) * len(pk),
        dist_key=tuple(dist_key) if dist_key is not None else tuple(pk),
        read_prefix_len_hint=len(pk),
        append_only=append_only,
        name=name,
    )


def top_n_table(
    table_id: int,
    input_columns: Sequence[tuple[str, DataType] | ColumnDesc],
    group_key: Sequence[int],
    order_by: Sequence[tuple[int, OrderType]],
    input_stream_key: Sequence[int],
    *,
    name: str = "",
) -> TableDesc:
    """TopN / GroupTopN state: all input columns; pk = group key | ORDER BY | rest of stream key."""
    pk = list(group_key)
    orders = [ASC] * len(group_key)
    for col, order in order_by:
        if col not in pk:
            pk.append(col)
            orders.append(order)
    for col in input_stream_key:
        if col not in pk:
            pk.append(col)
            orders.append(ASC)
    return TableDesc(
        table_id=table_id,
        columns=_cols(input_columns),
        pk=tuple(pk),
        pk_orders=tuple(orders),
        dist_key=tuple(group_key),
        vnode_count=VNODE_COUNT if group_key else 1,
        read_prefix_len_hint=len(group_key),
        name=name,
    )


def join_table(
    table_id: int,
    input_columns: Sequence[tuple[str, DataType] | ColumnDesc],
    join_key: Sequence[int],
    input_stream_key: Sequence[int],
    *,
    name: str = "",
) -> TableDesc:
    """One side of a hash join: all input columns; pk = join key | stream key (minus join-key
    columns), all ascending; distributed and filtered by the join key."""
    pk = list(join_key) + [c for c in input_stream_key if c not in join_key]
    return TableDesc(
        table_id=table_id,
        columns=_cols(input_columns),
        pk=tuple(pk),
        pk_orders=(ASC,) * len(pk),
        dist_key=tuple(join_key),
        vnode_count=VNODE_COUNT if join_key else 1,
        read_prefix_len_hint=len(join_key),
        name=name,
    )


def join_degree_table(table_id: int, side: TableDesc, *, name: str = "") -> TableDesc:
    """The degree table of a join side: the side's pk columns + ``_degree`` (matches on the other
    side), whose 0 <-> 1 transitions drive outer-join NULL padding and semi/anti emission."""
    cols = [side.columns[i] for i in side.pk] + [ColumnDesc("_degree", BIGINT, hidden=True)]
    n = len(side.pk)
    return TableDesc(
        table_id=table_id,
        columns=tuple(cols),
        pk=tuple(range(n)),
        pk_orders=side.pk_orders,
        dist_key=tuple(side.pk.index(i) for i in side.dist_key),
        vnode_count=side.vnode_count,
        value_indices=(n,),
        read_prefix_len_hint=side.read_prefix_len_hint,
        name=name,
    )


def agg_value_table(
    table_id: int,
    group_key: Sequence[tuple[str, DataType] | ColumnDesc],
    states: Sequence[tuple[str, DataType] | ColumnDesc],
    *,
    name: str = "",
) -> TableDesc:
    """HashAgg / SimpleAgg intermediate state: group key | one state column per agg call."""
    g = len(group_key)
    cols = _cols(list(group_key) + list(states))
    return TableDesc(
        table_id=table_id,
        columns=cols,
        pk=tuple(range(g)),
        pk_orders=(ASC,) * g,
        dist_key=tuple(range(g)),
        vnode_count=VNODE_COUNT if g else 1,
        value_indices=tuple(range(g, len(cols))),
        read_prefix_len_hint=g,
        name=name,
    )


def agg_extreme_table(
    table_id: int,
    group_key: Sequence[tuple[str, DataType] | ColumnDesc],
    sort_key: tuple[str, DataType] | ColumnDesc,
    kind: str,
    upstream_pk: Sequence[tuple[str, DataType] | ColumnDesc],
    *,
    name: str = "",
) -> TableDesc:
    """Materialized input of min/max: group key ASC | sort key (min ASC, max DESC) | upstream pk ASC,
    so the first row of a group's prefix scan is the answer."""
    if kind not in _EXTREME:
        raise ValueError(f"extreme state is for min/max, not {kind}")
    g = len(group_key)
    cols = _cols([*group_key, sort_key, *upstream_pk])
    order = ASC if kind == "min" else DESC
    return TableDesc(
        table_id=table_id,
        columns=cols,
        pk=tuple(range(len(cols))),
        pk_orders=(ASC,) * g + (order,) + (ASC,) * len(upstream_pk),
        dist_key=tuple(range(g)),
        vnode_count=VNODE_COUNT if g else 1,
        read_prefix_len_hint=g,
        name=name,
    )


def distinct_dedup_table(
    table_id: int,
    group_key: Sequence[tuple[str, DataType] | ColumnDesc],
    distinct_col: tuple[str, DataType] | ColumnDesc,
    n_calls: int = 1,
    *,
    name: str = "",
) -> TableDesc:
    """count(DISTINCT x): group key | x (both pk) | one count per distinct agg call on x."""
    g = len(group_key)
    counts = [(f"_count_{i}", BIGINT) for i in range(n_calls)]
    cols = _cols([*group_key, distinct_col, *counts])
    return TableDesc(
        table_id=table_id,
        columns=cols,
        pk=tuple(range(g + 1)),
        pk_orders=(ASC,) * (g + 1),
        dist_key=tuple(range(g)),
        vnode_count=VNODE_COUNT if g else 1,
        value_indices=tuple(range(g + 1, len(cols))),
        read_prefix_len_hint=g,
        name=name,
    )
