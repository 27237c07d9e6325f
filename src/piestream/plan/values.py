"""Values: a constant set of rows, emitted once in the job's first epoch; whether they were
emitted is state (a one-row singleton table), so a restarted job does not emit them again."""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.scalar import Row
from piestream.common.types import BOOLEAN
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc


def values_state_table(table_id: int) -> TableDesc:
    return TableDesc(table_id, (ColumnDesc("emitted", BOOLEAN),), pk=(), pk_orders=(), name="values_state")


@node_kind("Values")
@dataclass(frozen=True, kw_only=True)
class ValuesNode(StreamNode):
    rows: tuple[Row, ...]  # datums of the schema's types
    state_table: TableDesc

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        return f"Values {{ rows: {len(self.rows)} }}"
