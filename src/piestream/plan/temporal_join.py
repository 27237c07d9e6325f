"""TemporalJoin: ``stream JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() ON ...`` (RisingWave's
process-time temporal join, append-only left side).

Each left row looks the dimension table up by its primary key, in the table's version committed
before the row's epoch (every actor and every attempt of an epoch reads the same version). The
node keeps no state: nothing of the stream side is stored, and a later change of the dimension
does not retract or update rows already joined (RisingWave's rule). The output is append-only:
the left columns, then the dimension's columns `right_cols` (NULL for an unmatched row of a
LEFT join); its stream key is the left's (a full-pk lookup matches at most one row).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.expr.expr import Expr
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import TableDesc


@node_kind("TemporalJoin")
@dataclass(frozen=True, kw_only=True)
class TemporalJoinNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    #: the dimension table, read at the committed epoch (not a state table of this node)
    table: TableDesc
    #: left columns equal to the table's pk columns, in pk order
    left_keys: tuple[int, ...]
    #: the table's columns in the output, after the left columns
    right_cols: tuple[int, ...]
    #: LEFT JOIN: unmatched left rows are kept with NULLs
    outer: bool = False
    #: the rest of the ON condition, over the output columns (a matched row failing it is unmatched)
    condition: Expr | None = None

    def __post_init__(self) -> None:
        if len(self.left_keys) != len(self.table.pk):
            raise ValueError("a temporal join looks the table up by its whole primary key")
        if not self.input.append_only or not self.append_only:
            raise ValueError("a temporal join reads an append-only input and emits inserts only")

    def explain(self) -> str:
        kind = "LeftOuter" if self.outer else "Inner"
        keys = ", ".join(f"${k}" for k in self.left_keys)
        cond = "" if self.condition is None else f", condition: {self.condition}"
        table = self.table.name or self.table.table_id
        return f"TemporalJoin {{ type: {kind}, lookup: {table} by pk = [{keys}], as of: proctime{cond} }}"
