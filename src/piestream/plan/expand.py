"""Expand: GROUPING SETS' row copier (RisingWave's Expand), stateless.

Each input row once per grouping set `i`: the `key_cols` not in `subsets[i]` are NULL, the other
columns pass; then the set's index `flag` (BIGINT); then `keep` (the input's stream-key columns
as they came in, so the output's stream key = those ++ flag holds even where a key column was
NULLed). The Agg above groups by (key columns, flag).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.plan.node import StreamNode, node_kind


@node_kind("Expand")
@dataclass(frozen=True, kw_only=True)
class ExpandNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    subsets: tuple[tuple[int, ...], ...]
    key_cols: tuple[int, ...]
    keep: tuple[int, ...] = ()

    def explain(self) -> str:
        sets = ", ".join("[" + ", ".join(f"${c}" for c in s) + "]" for s in self.subsets)
        return f"Expand {{ column_subsets: [{sets}] }}"
