"""Values: emit a constant set of rows once, in the job's first epoch (e.g. ``SELECT 1``, VALUES).

Whether the rows were emitted is state (a one-row singleton table), so a restarted job does not
emit them again.
"""

from __future__ import annotations

from piestream.common.chunk import Op, StreamChunk
from piestream.plan.values import ValuesNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier


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
