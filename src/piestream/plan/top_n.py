"""TopN / GroupTopN: per group, the rows ranked [offset, offset + limit) (reference §6.3). The
state table is keyed group key | ORDER BY | rest of the input stream key (`top_n_table`), so ties
are broken deterministically; WITH TIES keeps every row tied with the last one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import OrderType
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.schemas import top_n_table


def top_n_stream_key(
    group_key: Sequence[int], input_stream_key: Sequence[int], limit: int, offset: int, with_ties: bool
) -> tuple[int, ...]:
    """Output stream key (reference §7): the group key when a group has at most one output row,
    else group key ++ input stream key."""
    if limit == 1 and offset == 0 and not with_ties:
        return tuple(group_key)
    return tuple(group_key) + tuple(c for c in input_stream_key if c not in group_key)


@node_kind("TopN")
@dataclass(frozen=True, kw_only=True)
class TopNNode(StreamNode):
    """(Group)TopN over `input`; `group_key` empty = plain TopN (a singleton state table).

    Output columns are the input columns; `stream_key` must be `top_n_stream_key(...)`. The input
    is treated as append-only iff `input.append_only`. Build it with `build_top_n`.
    """

    child_fields = ("input",)

    input: StreamNode
    group_key: tuple[int, ...]
    order_by: tuple[tuple[int, OrderType], ...]
    limit: int
    offset: int = 0
    with_ties: bool = False
    input_stream_key: tuple[int, ...]
    state_table: TableDesc

    def __post_init__(self) -> None:
        if self.limit < 0 or self.offset < 0:
            raise FeatureNotSupported("LIMIT and OFFSET must not be negative")
        if self.append_only:
            raise InternalError("TopN output is never append-only: rows leave the top range")
        pk = self.state_table.pk
        if pk[: len(self.group_key)] != self.group_key or not set(self.input_stream_key) <= set(pk):
            raise InternalError("TopN state table pk must be group key ++ ORDER BY ++ input stream key")
        expected = top_n_stream_key(
            self.group_key, self.input_stream_key, self.limit, self.offset, self.with_ties
        )
        if self.stream_key != expected:
            raise InternalError(f"TopN stream key {self.stream_key} should be {expected}")

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        names = self.schema.names
        order = ", ".join(f"{names[c]} {o}" for c, o in self.order_by)
        kind = "GroupTopN" if self.group_key else "TopN"
        group = f", group_key: [{', '.join(names[c] for c in self.group_key)}]" if self.group_key else ""
        ties = ", with_ties: true" if self.with_ties else ""
        ao = " (append-only)" if self.input.append_only else ""
        return f"{kind}{ao} {{ order: [{order}], limit: {self.limit}, offset: {self.offset}{group}{ties} }}"


def build_top_n(
    input: StreamNode,
    *,
    group_key: Sequence[int] = (),
    order_by: Sequence[tuple[int, OrderType]],
    limit: int,
    offset: int = 0,
    with_ties: bool = False,
    table_id: int,
    name: str = "",
) -> TopNNode:
    """The planner's entry point: a TopNNode over `input` with its state table (`top_n_table`)
    and derived output stream key; append-only-ness comes from `input.append_only`."""
    schema = input.schema
    table = top_n_table(
        table_id, [(f.name, f.data_type) for f in schema], group_key, order_by, input.stream_key, name=name
    )
    return TopNNode(
        schema=schema,
        stream_key=top_n_stream_key(group_key, input.stream_key, limit, offset, with_ties),
        input=input,
        group_key=tuple(group_key),
        order_by=tuple(order_by),
        limit=limit,
        offset=offset,
        with_ties=with_ties,
        input_stream_key=tuple(input.stream_key),
        state_table=table,
    )
