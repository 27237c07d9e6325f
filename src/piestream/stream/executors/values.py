"""Values: emit a constant set of rows once, in the job's first epoch (e.g. ``SELECT 1``, VALUES).

Whether the rows were emitted is state (a one-row singleton table), so a restarted job does not
emit them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.chunk import Op, StreamChunk
from piestream.common.scalar import Row
from piestream.common.types import BOOLEAN
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier
from piestream.stream.nodes import StreamNode


def values_state_table(table_id: int) -> TableDesc:
    return TableDesc(table_id, (ColumnDesc("emitted", BOOLEAN),), pk=(), pk_orders=(), name="values_state")


@dataclass(frozen=True, kw_only=True)
class ValuesNode(StreamNode):
    rows: tuple[Row, ...]
    state_table: TableDesc

    def build(self, ctx: ActorContext) -> Executor:
        return ValuesExecutor(ctx, self)

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        return f"Values {{ rows: {len(self.rows)} }}"


class ValuesExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: ValuesNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.rows = node.rows
        self.state = self.table(node.state_table)

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        if self.state.get_row(()) is None:
            if self.rows:
                out.append(StreamChunk.from_rows([(Op.INSERT, r) for r in self.rows], self.schema.types))
            self.state.insert_row((True,))
        self.commit_state(barrier)
        return out
