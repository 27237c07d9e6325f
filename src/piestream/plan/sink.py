"""Sink: write each epoch's change stream to an external system, exactly once per epoch.

The node holds the connector's name and its (validated) WITH options, never a writer object: the
executor asks the connector registry (`piestream.stream.connector`) for a writer when it is built.
Sink types (RisingWave's ``type`` option): ``append-only``, ``upsert`` (per key the epoch's net
effect) and ``changelog`` (every change, with its op).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from piestream.common.order import ASC
from piestream.common.types import BIGINT, INT, VARCHAR
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc

SINK_TYPES = ("append-only", "upsert", "changelog")


def sink_state_table(table_id: int, name: str = "sink_state") -> TableDesc:
    """Per actor: the epoch it last staged output for, the token, the row count (singleton; each
    actor writes only its own row)."""
    return TableDesc(
        table_id,
        (
            ColumnDesc("actor_index", INT),
            ColumnDesc("epoch", BIGINT),
            ColumnDesc("staged", VARCHAR),
            ColumnDesc("rows", BIGINT),
        ),
        pk=(0,),
        pk_orders=(ASC,),
        name=name,
    )


@node_kind("Sink")
@dataclass(frozen=True, kw_only=True)
class SinkNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode
    sink_name: str
    connector: str
    options: Mapping[str, str] = field(default_factory=dict)  # WITH (...) as validated, keys lower-case
    sink_type: str
    columns: tuple[int, ...]  # input columns written, in order
    names: tuple[str, ...]  # their names in the output
    key: tuple[int, ...]  # input columns of the upsert key
    state_table: TableDesc
    force_append_only: bool = False

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        return f"Sink {{ sink: {self.sink_name}, connector: {self.connector}, type: {self.sink_type} }}"
