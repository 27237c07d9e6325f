"""Project: evaluate expressions over each chunk (stateless, ops unchanged).

The planner keeps stream-key columns a projection would drop as hidden output columns, so the
output still has a stream key (reference §7).

A source's ``AS PROCTIME()`` columns are computed here (the Project the planner puts right above
the source): ``proctime()`` is the physical time of the epoch the chunk belongs to, the epoch
after the last barrier, never the wall clock, so a retried epoch computes the same values.
"""

from __future__ import annotations

import contextlib

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochPair
from piestream.expr.expr import FuncCall
from piestream.expr.functions.datetime import statement_time
from piestream.plan.project import ProjectNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.now import epoch_now
from piestream.stream.message import Barrier


class ProjectExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: ProjectNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.exprs = node.exprs
        self.proctime = any(
            isinstance(x, FuncCall) and x.name == "proctime" for e in self.exprs for x in e.walk()
        )
        self.epoch = 0  # the epoch of the chunks now arriving (proctime() only)

    def init(self, epoch: EpochPair) -> None:
        super().init(epoch)
        self.epoch = epoch.curr

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        data = c.data
        with statement_time(epoch_now(self.epoch)) if self.proctime else contextlib.nullcontext():
            cols = [self.ctx.eval(e, data, "Project") for e in self.exprs]
        return [StreamChunk(c.ops, cols, length=c.capacity)]

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        self.epoch = barrier.epoch.curr
        return super().barrier(barrier)
