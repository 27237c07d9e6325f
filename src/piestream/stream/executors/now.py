"""Now: emits ``now()`` once per epoch, derived from the sealed epoch's physical time.

Never the wall clock: an epoch run twice (a Spark task retry, a recovery) must emit the same
value, and epochs only grow, so the emitted value never goes back (a temporal filter relies on
that to clean its state)."""

from __future__ import annotations

import datetime as dt

from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import INVALID_EPOCH, epoch_to_unix_ms
from piestream.plan.now import NowNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier


def epoch_now(epoch: int) -> dt.datetime:
    """The value of ``now()`` in a streaming job for data of `epoch` (millisecond precision)."""
    return dt.datetime.fromtimestamp(epoch_to_unix_ms(epoch) / 1000, dt.UTC)


class NowExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: NowNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, False)
        self.state = self.table(node.state_table)

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        sealed = barrier.epoch.prev if barrier.epoch.prev != INVALID_EPOCH else barrier.epoch.curr
        value = epoch_now(sealed)
        row = self.state.get_row(())
        out: list[StreamChunk] = []
        if row is None:
            out.append(StreamChunk.from_rows([(Op.INSERT, (value,))], self.schema.types))
            self.state.insert_row((value,))
        elif row[0] != value:
            rows = [(Op.UPDATE_DELETE, (row[0],)), (Op.UPDATE_INSERT, (value,))]
            out.append(StreamChunk.from_rows(rows, self.schema.types))
            self.state.update_row(row, (value,))
        self.commit_state(barrier)
        return out
