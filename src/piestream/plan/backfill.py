"""Backfill (StreamTableScan): a new MV reads an existing table's snapshot, then its changes.
Its state says, per upstream vnode, whether that vnode's snapshot was emitted."""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.order import ASC
from piestream.common.types import BOOLEAN, INT
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc


def backfill_state_table(table_id: int) -> TableDesc:
    """One row per upstream vnode: whether its snapshot was emitted."""
    return TableDesc(
        table_id,
        (ColumnDesc("vnode", INT), ColumnDesc("done", BOOLEAN)),
        pk=(0,),
        pk_orders=(ASC,),
        name="backfill_progress",
    )


@node_kind("Backfill")
@dataclass(frozen=True, kw_only=True)
class BackfillNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode  # the upstream table's change stream (no-shuffle exchange)
    upstream: TableDesc
    output_indices: tuple[int, ...]  # upstream columns to output
    state_table: TableDesc

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        cols = ", ".join(self.upstream.columns[i].name for i in self.output_indices)
        return (
            f"StreamTableScan {{ table: {self.upstream.name or self.upstream.table_id}, columns: [{cols}] }}"
        )
