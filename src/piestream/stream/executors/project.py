"""Project: evaluate expressions over each chunk (stateless, ops unchanged).

The planner keeps stream-key columns a projection would drop as hidden output columns, so the
output still has a stream key (reference §7).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.chunk import StreamChunk
from piestream.expr.expr import Expr
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.nodes import StreamNode


@dataclass(frozen=True, kw_only=True)
class ProjectNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    exprs: tuple[Expr, ...]

    def build(self, ctx: ActorContext) -> Executor:
        return ProjectExecutor(ctx, self)

    def explain(self) -> str:
        return f"Project {{ exprs: [{', '.join(str(e) for e in self.exprs)}] }}"


class ProjectExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: ProjectNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.exprs = node.exprs

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        data = c.data
        return [StreamChunk(c.ops, [e.eval(data) for e in self.exprs], length=c.capacity)]
