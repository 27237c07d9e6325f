"""Union (all): every input's chunks pass through unchanged.

The planner makes the inputs' schemas identical and appends the branch index as a hidden
column when the inputs' stream keys could collide (reference §7).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.stream.executor import ActorContext, Executor
from piestream.stream.nodes import StreamNode


@dataclass(frozen=True, kw_only=True)
class UnionNode(StreamNode):
    child_fields = ("union_inputs",)

    union_inputs: tuple[StreamNode, ...]

    def build(self, ctx: ActorContext) -> Executor:
        return Executor(ctx, self.schema, self.stream_key, self.append_only)

    def explain(self) -> str:
        return "Union"
