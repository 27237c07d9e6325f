"""Filter: keep rows whose predicate is true (NULL counts as false, as in WHERE)."""

from __future__ import annotations

from dataclasses import dataclass

from piestream.expr.expr import Expr
from piestream.plan.node import StreamNode, node_kind


@node_kind("Filter")
@dataclass(frozen=True, kw_only=True)
class FilterNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    predicate: Expr

    def explain(self) -> str:
        return f"Filter {{ predicate: {self.predicate} }}"
