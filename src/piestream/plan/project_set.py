"""ProjectSet: a select list with set-returning functions, evaluated per chunk (stateless).

Output = one column per item (`TableFunction` items expand each input row into several output
rows, zipped to the longest; scalar items repeat), then `projected_row_id` (BIGINT), the output
row's index within its input row. The planner keeps the input's stream-key columns among the items,
so the stream key is those columns ++ projected_row_id (reference §7). Deleting an input row
deletes exactly the rows inserting it produced: the functions are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.schema import Schema
from piestream.common.types import BIGINT, Field
from piestream.expr.expr import Expr
from piestream.plan.node import StreamNode, node_kind

PROJECTED_ROW_ID = "projected_row_id"


@node_kind("ProjectSet")
@dataclass(frozen=True, kw_only=True)
class ProjectSetNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    items: tuple[Expr, ...]

    def explain(self) -> str:
        return f"ProjectSet {{ items: [{', '.join(str(e) for e in self.items)}] }}"


def build_project_set(
    input: StreamNode, items: Sequence[Expr], names: Sequence[str], key_items: Sequence[int]
) -> ProjectSetNode:
    """A ProjectSetNode over `input`; `key_items` are the items holding the input's stream key."""
    fields = [Field(n, e.return_type) for n, e in zip(names, items, strict=True)]
    schema = Schema((*fields, Field(PROJECTED_ROW_ID, BIGINT)))
    return ProjectSetNode(
        schema=schema,
        stream_key=(*key_items, len(items)),
        append_only=input.append_only,
        input=input,
        items=tuple(items),
    )
