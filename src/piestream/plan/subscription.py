"""Subscription log store: an MV's (or table's) change stream kept as rows, for cursors to read.

A SUBSCRIPTION is a streaming job of one node per upstream actor (no-shuffle from the upstream's
fragment, no backfill): it writes every change of the upstream into its *log table*, keyed by
``(epoch, actor, seq)`` so that a scan in pk order is commit order (epoch by epoch; within an
epoch, each upstream actor's changes in the order it emitted them, which keeps every key's
changes in order since one actor owns a key). The log commits with the epoch like any state, so
a change is in the log exactly when the epoch that made it is committed.

Retention (RisingWave's ``retention`` option) is the log table's watermark on its first pk column:
rows of epochs older than ``retention`` before the current epoch are hidden from reads at once
and dropped by compaction (``TableDesc.watermark_col``).
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.order import ASC
from piestream.common.types import BIGINT, INT, SMALLINT
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc

#: The log table's leading columns (before the upstream's columns).
LOG_EPOCH, LOG_ACTOR, LOG_SEQ, LOG_OP = 0, 1, 2, 3
LOG_META_COLUMNS = 4


def subscription_log_table(table_id: int, upstream: TableDesc, name: str) -> TableDesc:
    """``(_epoch, _actor, _seq, _op, <every upstream column>)``, pk the first three, singleton
    (each actor writes its own keys), cleaned by a watermark on ``_epoch``."""
    cols = (
        ColumnDesc("_epoch", BIGINT),
        ColumnDesc("_actor", INT),
        ColumnDesc("_seq", BIGINT),
        ColumnDesc("_op", SMALLINT),
        *(ColumnDesc(c.name, c.data_type, c.hidden) for c in upstream.columns),
    )
    return TableDesc(
        table_id,
        cols,
        pk=(LOG_EPOCH, LOG_ACTOR, LOG_SEQ),
        pk_orders=(ASC, ASC, ASC),
        append_only=True,
        watermark_col=LOG_EPOCH,
        name=f"{name}_log",
    )


@node_kind("SubscriptionLog")
@dataclass(frozen=True, kw_only=True)
class SubscriptionLogNode(StreamNode):
    child_fields = ("input",)

    input: StreamNode  # the upstream's change stream (no-shuffle exchange)
    subscription_name: str
    log_table: TableDesc
    retention_ms: int

    def tables(self) -> list[TableDesc]:
        return [self.log_table]

    def explain(self) -> str:
        return (
            f"SubscriptionLog {{ subscription: {self.subscription_name}, retention: {self.retention_ms} ms }}"
        )
