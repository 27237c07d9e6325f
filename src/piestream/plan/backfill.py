"""Backfill (StreamTableScan): a new MV reads an existing table's snapshot, then its changes.
Its state says, per upstream vnode, whether that vnode's snapshot was emitted, how many of its
rows were, and the table key of the last one (where the next epoch's snapshot read resumes)."""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.order import ASC
from piestream.common.types import BIGINT, BOOLEAN, BYTEA, INT
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc

#: columns of the first format: (vnode, done), the whole snapshot in the first epoch
LEGACY_STATE_COLUMNS = 2


def backfill_state_table(table_id: int) -> TableDesc:
    """One row per upstream vnode: done, rows emitted, the last emitted table key (NULL before
    the first). Plans from before chunked backfill carry the 2-column form (vnode, done)."""
    return TableDesc(
        table_id,
        (
            ColumnDesc("vnode", INT),
            ColumnDesc("done", BOOLEAN),
            ColumnDesc("rows", BIGINT),
            ColumnDesc("pos", BYTEA),
        ),
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
