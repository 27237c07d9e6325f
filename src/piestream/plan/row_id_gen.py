"""RowIdGen: give rows of a table without a primary key their hidden `_row_id` (reference §3.3)."""

from __future__ import annotations

from dataclasses import dataclass

from piestream.plan.node import StreamNode, node_kind


@node_kind("RowIdGen")
@dataclass(frozen=True, kw_only=True)
class RowIdGenNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    row_id_index: int

    def explain(self) -> str:
        return f"RowIdGen {{ row_id_index: {self.row_id_index} }}"
