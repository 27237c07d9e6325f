"""Union (all): every input's chunks pass through unchanged.

The planner makes the inputs' schemas identical and appends the branch index as a hidden
column when the inputs' stream keys could collide (reference §7).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.plan.node import StreamNode, node_kind


@node_kind("Union")
@dataclass(frozen=True, kw_only=True)
class UnionNode(StreamNode):
    child_fields = ("union_inputs",)

    union_inputs: tuple[StreamNode, ...]

    def explain(self) -> str:
        return "Union"
