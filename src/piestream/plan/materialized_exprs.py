"""MaterializedExprs: impure expressions (random(), gen_random_uuid()) of an MV's select list,
evaluated once per row as it arrives and stored, so a retraction carries the values that were
emitted (RisingWave's ``MaterializedExprs``). The output is the input's columns followed by one
column per expression; stream key and distribution are the input's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import ASC
from piestream.common.schema import Schema
from piestream.common.types import Field
from piestream.common.vnode import VNODE_COUNT
from piestream.expr.expr import Expr
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc


def materialized_exprs_table(
    table_id: int, input: StreamNode, exprs: Sequence[Expr], dist_key: Sequence[int], *, name: str = ""
) -> TableDesc:
    """State: the input's stream-key columns (the pk, ASC) then each expression's stored value.
    `dist_key` are input columns inside the stream key (how the input is sharded; () = one actor)."""
    sk = input.stream_key
    cols = tuple(ColumnDesc(input.schema[k].name, input.schema[k].data_type) for k in sk) + tuple(
        ColumnDesc(f"_expr{i}", e.return_type) for i, e in enumerate(exprs)
    )
    dist = tuple(sk.index(k) for k in dist_key)
    return TableDesc(
        table_id=table_id,
        columns=cols,
        pk=tuple(range(len(sk))),
        pk_orders=(ASC,) * len(sk),
        dist_key=dist,
        vnode_count=VNODE_COUNT if dist else 1,
        read_prefix_len_hint=len(sk),
        name=name,
    )


@node_kind("MaterializedExprs")
@dataclass(frozen=True, kw_only=True)
class MaterializedExprsNode(StreamNode):
    """Input columns ++ `exprs` evaluated on Insert / UpdateInsert and stored by stream key;
    Delete / UpdateDelete emit (and remove) the stored values. Build it with
    `build_materialized_exprs`."""

    child_fields = ("input",)

    input: StreamNode
    exprs: tuple[Expr, ...]
    state_table: TableDesc

    def __post_init__(self) -> None:
        nk = len(self.input.stream_key)
        if self.state_table.pk != tuple(range(nk)) or len(self.state_table.columns) != nk + len(self.exprs):
            raise InternalError("MaterializedExprs state table must be stream key ++ expression values")

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        return f"MaterializedExprs {{ exprs: [{', '.join(str(e) for e in self.exprs)}] }}"


def build_materialized_exprs(
    input: StreamNode, exprs: Sequence[Expr], dist_key: Sequence[int], *, table_id: int
) -> MaterializedExprsNode:
    """The planner's entry point: `exprs` (over `input`'s columns) stored per stream key."""
    if not input.stream_key:
        raise FeatureNotSupported("impure expressions in a materialized view need an input with a stream key")
    fields = (*input.schema.fields, *(Field(f"_expr{i}", e.return_type) for i, e in enumerate(exprs)))
    return MaterializedExprsNode(
        schema=Schema(tuple(fields)),
        stream_key=input.stream_key,
        append_only=input.append_only,
        input=input,
        exprs=tuple(exprs),
        state_table=materialized_exprs_table(table_id, input, exprs, dist_key, name="materialized_exprs"),
    )
