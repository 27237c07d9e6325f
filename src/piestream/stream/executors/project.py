"""Project: evaluate expressions over each chunk (stateless, ops unchanged).

The planner keeps stream-key columns a projection would drop as hidden output columns, so the
output still has a stream key (reference §7).
"""

from __future__ import annotations

from piestream.common.chunk import StreamChunk
from piestream.plan.project import ProjectNode
from piestream.stream.executor import ActorContext, Executor


class ProjectExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: ProjectNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.exprs = node.exprs

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        data = c.data
        return [
            StreamChunk(c.ops, [self.ctx.eval(e, data, "Project") for e in self.exprs], length=c.capacity)
        ]
