"""DynamicFilter: ``left.key <op> (scalar subquery)`` with a changing right-hand side (reference
§6.7). Left rows live in a table ordered by the compared key, the committed right-hand side in a
one-row singleton table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.common.vnode import VNODE_COUNT
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc

COMPARATORS = ("<", "<=", ">", ">=")


def dynamic_filter_left_table(
    table_id: int,
    left_columns: Sequence[tuple[str, DataType] | ColumnDesc],
    key_col: int,
    left_stream_key: Sequence[int],
    dist_key: Sequence[int] | None = None,
    *,
    name: str = "",
) -> TableDesc:
    """Left state: all left columns; pk = key column ++ left stream key (ASC), prefix hint 0.

    `dist_key` (left column indices, inside the pk) must be how the left input is sharded over
    actors; it defaults to the left stream key (a singleton table if that is empty)."""
    cols = tuple(c if isinstance(c, ColumnDesc) else ColumnDesc(c[0], c[1]) for c in left_columns)
    pk = (key_col, *(c for c in left_stream_key if c != key_col))
    dist = tuple(left_stream_key) if dist_key is None else tuple(dist_key)
    return TableDesc(
        table_id=table_id,
        columns=cols,
        pk=pk,
        pk_orders=(ASC,) * len(pk),
        dist_key=dist,
        vnode_count=VNODE_COUNT if dist else 1,
        read_prefix_len_hint=0,
        name=name,
    )


def dynamic_filter_right_table(table_id: int, rhs_type: DataType, *, name: str = "") -> TableDesc:
    """Right state: a singleton table of one row, the committed RHS value (pk = ())."""
    return TableDesc(table_id, (ColumnDesc("rhs", rhs_type),), pk=(), pk_orders=(), name=name)


@node_kind("DynamicFilter")
@dataclass(frozen=True, kw_only=True)
class DynamicFilterNode(StreamNode):
    """``left[key_col] <comparator> right[right_col]``; output = left columns, stream key = left's.
    Build it with `build_dynamic_filter`."""

    child_fields = ("left", "right")

    left: StreamNode
    right: StreamNode
    key_col: int
    comparator: str  # one of COMPARATORS
    right_col: int = 0
    left_table: TableDesc
    right_table: TableDesc
    # the RHS never decreases (a temporal filter's now() ± constant): rows that can never pass
    # again are dropped from the left table, rows that will pass forever are not kept either
    rhs_non_decreasing: bool = field(default=False, metadata={"since_format": 3})

    def __post_init__(self) -> None:
        if self.comparator not in COMPARATORS:
            raise FeatureNotSupported(f"dynamic filter comparator {self.comparator!r} is not supported")
        lt = self.left.schema[self.key_col].data_type
        rt = self.right.schema[self.right_col].data_type
        if lt != rt:
            raise InternalError(f"dynamic filter compares {lt} with {rt}: the planner must cast the RHS")
        if self.left_table.pk[:1] != (self.key_col,):
            raise InternalError("dynamic filter left table pk must start with the key column")
        if self.stream_key != self.left.stream_key:
            raise InternalError("dynamic filter stream key must be the left stream key")

    def tables(self) -> list[TableDesc]:
        return [self.left_table, self.right_table]

    def explain(self) -> str:
        temporal = ", temporal: now() never decreases" if self.rhs_non_decreasing else ""
        predicate = f"${self.key_col} {self.comparator} $expr{self.right_col}"
        return f"DynamicFilter {{ predicate: {predicate}{temporal} }}"


def build_dynamic_filter(
    left: StreamNode,
    right: StreamNode,
    *,
    key_col: int,
    comparator: str,
    right_col: int = 0,
    left_table_id: int,
    right_table_id: int,
    left_dist_key: Sequence[int] | None = None,
    rhs_non_decreasing: bool = False,
) -> DynamicFilterNode:
    """The planner's entry point: a DynamicFilterNode with both state tables."""
    ls = left.schema
    return DynamicFilterNode(
        schema=ls,
        stream_key=tuple(left.stream_key),
        append_only=False,
        left=left,
        right=right,
        key_col=key_col,
        comparator=comparator,
        right_col=right_col,
        rhs_non_decreasing=rhs_non_decreasing,
        left_table=dynamic_filter_left_table(
            left_table_id,
            [(f.name, f.data_type) for f in ls],
            key_col,
            left.stream_key,
            left_dist_key,
            name="dynamic_filter_left",
        ),
        right_table=dynamic_filter_right_table(
            right_table_id, right.schema[right_col].data_type, name="dynamic_filter_right"
        ),
    )
