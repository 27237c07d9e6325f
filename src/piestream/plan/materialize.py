"""Materialize: write a change stream into a table or MV (reference §6.4), and the conflict
behaviour of a table's pk (the catalog keeps it with the table)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import TableDesc


class ConflictBehavior(enum.Enum):
    """What an insert of an existing pk does: NoCheck for MVs (a consistent change stream),
    Overwrite for tables with a pk (upsert), IgnoreConflict for ON CONFLICT DO NOTHING,
    DoUpdateIfNotNull for ON CONFLICT DO UPDATE IF NOT NULL (NULL columns keep the stored value)."""

    NO_CHECK = "no_check"
    OVERWRITE = "overwrite"
    IGNORE_CONFLICT = "ignore_conflict"
    DO_UPDATE_IF_NOT_NULL = "do_update_if_not_null"


@node_kind("Materialize")
@dataclass(frozen=True, kw_only=True)
class MaterializeNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    table: TableDesc
    conflict: ConflictBehavior = ConflictBehavior.NO_CHECK

    def tables(self) -> list[TableDesc]:
        return [self.table]

    def explain(self) -> str:
        table = self.table.name or self.table.table_id
        return f"Materialize {{ table: {table}, conflict: {self.conflict.value} }}"
