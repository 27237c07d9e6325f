"""Now: the one-row stream of ``now()`` that feeds a temporal filter's DynamicFilter (reference §6.7).

RisingWave's Now executor: on every barrier it emits the epoch's timestamp (an Insert the first
time, then an update pair). The value is a function of the sealed epoch alone, so a retried
epoch (a Spark task run twice) emits the same bound. The last emitted value is state, so a
restarted job continues with an update pair instead of a second Insert."""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.types import TIMESTAMPTZ
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc


def now_state_table(table_id: int) -> TableDesc:
    """A singleton table of one row: the value emitted last."""
    return TableDesc(table_id, (ColumnDesc("now", TIMESTAMPTZ),), pk=(), pk_orders=(), name="now_state")


@node_kind("Now")
@dataclass(frozen=True, kw_only=True)
class NowNode(StreamNode):
    """Output: one TIMESTAMPTZ column, one row at a time; stream key ()."""

    state_table: TableDesc

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        return "Now"
