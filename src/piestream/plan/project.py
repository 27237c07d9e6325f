"""Project: evaluate expressions over each chunk (stateless, ops unchanged).

The planner keeps stream-key columns a projection would drop as hidden output columns, so the
output still has a stream key (reference §7).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.expr.expr import Expr
from piestream.plan.node import StreamNode, node_kind


@node_kind("Project")
@dataclass(frozen=True, kw_only=True)
class ProjectNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    exprs: tuple[Expr, ...]

    def explain(self) -> str:
        return f"Project {{ exprs: [{', '.join(str(e) for e in self.exprs)}] }}"
