"""OverWindow: ranking window functions (row_number, rank, dense_rank) over partitions (reference
§6 / §7): output = input columns ++ one BIGINT per call, stream key = input stream key ++ partition
columns. The state table holds every input row keyed like a GroupTopN's (`top_n_table`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, Field
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.schemas import top_n_table

RANKING = ("row_number", "rank", "dense_rank")


def over_window_stream_key(input_stream_key: Sequence[int], partition_by: Sequence[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys([*input_stream_key, *partition_by]))


@node_kind("OverWindow")
@dataclass(frozen=True, kw_only=True)
class OverWindowNode(StreamNode):
    """Window calls over `input`; build it with `build_over_window`."""

    child_fields = ("input",)

    input: StreamNode
    partition_by: tuple[int, ...]
    order_by: tuple[tuple[int, OrderType], ...]
    calls: tuple[str, ...]
    state_table: TableDesc

    def __post_init__(self) -> None:
        bad = [c for c in self.calls if c not in RANKING]
        if bad:
            raise FeatureNotSupported(f"window function {bad[0]} is not supported in materialized views")
        if self.append_only:
            raise InternalError("OverWindow output is never append-only: ranks move")

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        names = self.input.schema.names
        part = ", ".join(names[c] for c in self.partition_by)
        order = ", ".join(f"{names[c]} {o}" for c, o in self.order_by)
        return (
            f"OverWindow {{ calls: [{', '.join(self.calls)}], partition_by: [{part}], order_by: [{order}] }}"
        )


def build_over_window(
    input: StreamNode,
    *,
    partition_by: Sequence[int],
    order_by: Sequence[tuple[int, OrderType]],
    calls: Sequence[str],
    names: Sequence[str] | None = None,
    table_id: int,
) -> OverWindowNode:
    schema = input.schema
    names = list(names or [f"_window{i}" for i in range(len(calls))])
    out = Schema((*schema.fields, *(Field(n, BIGINT) for n in names)))
    table = top_n_table(
        table_id, [(f.name, f.data_type) for f in schema], partition_by, order_by, input.stream_key
    )
    return OverWindowNode(
        schema=out,
        stream_key=over_window_stream_key(input.stream_key, partition_by),
        append_only=False,
        input=input,
        partition_by=tuple(partition_by),
        order_by=tuple(order_by),
        calls=tuple(calls),
        state_table=table,
    )
