"""GeneralOverWindow: window functions of every kind (ranking, lag / lead, first / last /
nth_value, aggregates over ROWS and RANGE frames) over partitions, maintained incrementally
(reference §6.8, RisingWave's general OverWindow).

Output = input columns ++ one column per call; stream key = input stream key ++ partition columns.
The state table holds the output rows (input columns and the window values last emitted for
them), keyed partition | ORDER BY | rest of the input stream key, so a partition's rows come back
in window order with ties broken by the stream key, and a retraction carries exactly the row that
was emitted. (`OverWindowNode` is the ranking-only node of plans stored before this one existed.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.errors import InternalError
from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.types import Field
from piestream.expr.window import CURRENT_ROW, PRECEDING, WindowFunctionCall
from piestream.plan.eowc_sort import EowcSortNode
from piestream.plan.node import StreamNode, node_kind
from piestream.plan.over_window import over_window_stream_key
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.schemas import top_n_table


@node_kind("GeneralOverWindow")
@dataclass(frozen=True, kw_only=True)
class GeneralOverWindowNode(StreamNode):
    """Window calls over `input`; build it with `build_general_over_window`."""

    child_fields = ("input",)

    input: StreamNode
    partition_by: tuple[int, ...]
    order_by: tuple[tuple[int, OrderType], ...]
    calls: tuple[WindowFunctionCall, ...]
    state_table: TableDesc

    def __post_init__(self) -> None:
        if self.append_only and not looks_back_over_final_rows(self.input, self.calls):
            raise InternalError("OverWindow output is append-only only over an EowcSort, looking back")
        if len(self.state_table.columns) != len(self.schema):
            raise InternalError("OverWindow state holds the output rows")

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        names = self.input.schema.names
        part = ", ".join(names[c] for c in self.partition_by)
        order = ", ".join(f"{names[c]} {o}" for c, o in self.order_by)
        calls = ", ".join(str(c) for c in self.calls)
        return f"OverWindow {{ calls: [{calls}], partition_by: [{part}], order_by: [{order}] }}"


def looks_back_over_final_rows(input: StreamNode, calls: Sequence[WindowFunctionCall]) -> bool:
    """Whether the output is append-only: over an EowcSort every partition grows only at its end
    (a row arrives after every row ordered before it: its ORDER BY value is the watermarked one),
    so when no call reaches the rows before a change, no value emitted changes again."""
    return isinstance(input, EowcSortNode) and all(_looks_back(c) for c in calls)


def _looks_back(call: WindowFunctionCall) -> bool:
    """No row ordered before a change sees it (a RANGE frame ending at CURRENT ROW or before sees
    only the change's peers, which arrive with it)."""
    f = call.frame
    if f is not None and f.mode == "range" and f.end.kind in (CURRENT_ROW, PRECEDING):
        return True
    return call.reach()[0] == 0


def build_general_over_window(
    input: StreamNode,
    *,
    partition_by: Sequence[int],
    order_by: Sequence[tuple[int, OrderType]],
    calls: Sequence[WindowFunctionCall],
    names: Sequence[str],
    table_id: int,
) -> GeneralOverWindowNode:
    out = Schema(
        (*input.schema.fields, *(Field(n, c.return_type) for n, c in zip(names, calls, strict=True)))
    )
    table = top_n_table(
        table_id,
        [(f.name, f.data_type) for f in out],
        partition_by,
        order_by,
        input.stream_key,
        name="OverWindow",
    )
    return GeneralOverWindowNode(
        schema=out,
        stream_key=over_window_stream_key(input.stream_key, partition_by),
        append_only=looks_back_over_final_rows(input, calls),
        input=input,
        partition_by=tuple(partition_by),
        order_by=tuple(order_by),
        calls=tuple(calls),
        state_table=table,
    )
