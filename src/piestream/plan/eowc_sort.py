"""EowcSort (RisingWave's SortExecutor for EMIT ON WINDOW CLOSE): rows wait in a state table keyed
by a watermarked column until the watermark passes them, then go downstream once, as Inserts,
sorted by that column. The output is append-only: "the input's rows that are final".

The state table's pk is the sort column, then the distribution key, then the rest of the input's
stream key (so each input row has one key), distributed like the input; its watermark column is
the sort column, so the committed bound cleans the emitted rows (a Hummock table watermark) and
the state holds only rows at or above the watermark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.errors import InternalError
from piestream.common.order import ASC
from piestream.common.vnode import VNODE_COUNT
from piestream.plan.node import StreamNode, node_kind
from piestream.plan.watermark import ColumnWatermark
from piestream.storage.table.desc import ColumnDesc, TableDesc


def eowc_sort_table(
    table_id: int, input: StreamNode, sort_col: int, dist_key: Sequence[int], *, name: str = "EowcSort"
) -> TableDesc:
    """The buffer: every input column; pk = sort column | distribution key | stream key."""
    pk: list[int] = []
    for c in (sort_col, *dist_key, *input.stream_key):
        if c not in pk:
            pk.append(c)
    return TableDesc(
        table_id=table_id,
        columns=tuple(ColumnDesc(f.name, f.data_type) for f in input.schema),
        pk=tuple(pk),
        pk_orders=(ASC,) * len(pk),
        dist_key=tuple(dist_key),
        vnode_count=VNODE_COUNT if dist_key else 1,
        read_prefix_len_hint=0,
        name=name,
        watermark_col=sort_col,
    )


@node_kind("EowcSort")
@dataclass(frozen=True, kw_only=True)
class EowcSortNode(StreamNode):
    """Buffers `input` until `watermark` (the sort column's) passes each row; output = input
    columns, stream key = input's, append-only. Build it with `build_eowc_sort`."""

    child_fields = ("input",)

    input: StreamNode
    sort_col: int
    watermark: ColumnWatermark
    state_table: TableDesc

    def __post_init__(self) -> None:
        if not self.append_only:
            raise InternalError("EowcSort's output is append-only")
        if self.state_table.pk[0] != self.sort_col or self.state_table.watermark_col != self.sort_col:
            raise InternalError("EowcSort's state table is keyed and cleaned by the sort column")

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        col = self.schema.names[self.sort_col]
        return f"EowcSort {{ sort_column: {col}, emit: rows below {self.watermark} }}"


def build_eowc_sort(
    input: StreamNode, sort_col: int, watermark: ColumnWatermark, dist_key: Sequence[int], *, table_id: int
) -> EowcSortNode:
    return EowcSortNode(
        schema=input.schema,
        stream_key=input.stream_key,
        append_only=True,
        input=input,
        sort_col=sort_col,
        watermark=watermark,
        state_table=eowc_sort_table(table_id, input, sort_col, dist_key),
    )
