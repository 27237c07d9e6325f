"""Sink: write each epoch's change stream to an external system, exactly once per epoch.

The connector side is a `SinkWriter` (`piestream.stream.connector`), built from the node's
connector name and options when the actor builds its executors. The executor buffers
one epoch's changes of its actor, shapes them by the sink type, and at the barrier hands them to
the writer, which *stages* them (e.g. a Parquet file under a name unique to this attempt) and
returns a token naming what it staged. The token is written to the sink's state table in the
same epoch, so it commits atomically with everything else of the epoch.

Why staging: an actor cannot know whether its epoch will commit (another actor may fail; a
Spark task may run twice). So nothing an actor writes is visible to readers. After the epoch
commits, the driver reads the committed state table and *publishes* exactly the staged output it
names (`piestream.connectors.sinks`), and on restart publishes whatever the last committed epoch
left staged. Output of failed or duplicate attempts is never named in committed state, so it is
never published (and is cleaned up).

Sink types (RisingWave's ``type`` option):
- ``append-only``: the inserted rows (the input must be append-only, or ``force_append_only``
  drops deletes and turns updates into inserts);
- ``upsert``: per key, the epoch's net effect: the last row with ``_op = 'upsert'`` or
  ``'delete'``; the key defaults to the input's stream key;
- ``changelog`` (piestream): every change in order, ``_op`` = insert / delete / update_delete /
  update_insert.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common import numeric as nm
from piestream.common import numeric_arrays as na
from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.errors import NumericOutOfRange
from piestream.common.order import ASC
from piestream.encoding import memcomparable
from piestream.plan.sink import SinkNode
from piestream.stream.connector import SinkWriter
from piestream.stream.errors import EXPRESSION, sample_row
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier

OP_COLUMN = "_op"
_SPECIAL_TO_DECIMAL = "cannot write NaN or Infinity to a decimal column: written as NULL"
_OP_NAMES = {
    Op.INSERT: "insert",
    Op.DELETE: "delete",
    Op.UPDATE_DELETE: "update_delete",
    Op.UPDATE_INSERT: "update_insert",
}


class SinkExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: SinkNode, writer: SinkWriter) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        self.writer = writer
        self.state = self.table(node.state_table)
        self.chunks: list[StreamChunk] = []

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if c.capacity:
            self.chunks.append(c)
            self.ctx.count("rows.sink", c.cardinality)  # for /metrics, per chunk
        return []

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        table = self._epoch_output()
        if table is not None and table.num_rows and self.node.connector != "blackhole":
            table = self._decimal_ready(table)
        if table is not None and table.num_rows:
            epoch = barrier.epoch.prev  # the epoch whose data this is
            token = self.writer.stage(epoch, self.ctx.actor_index, table)
            if token is not None:
                row = (self.ctx.actor_index, epoch, token, table.num_rows)
                old = self.state.get_row((self.ctx.actor_index,))
                if old is None:
                    self.state.insert_row(row)
                else:
                    self.state.update_row(old, row)
        self.chunks = []
        self.commit_state(barrier)
        return []

    def _decimal_ready(self, table: pa.Table) -> pa.Table:
        """NaN / +-Infinity have no form in the fixed-scale decimals of Parquet, Delta and Iceberg:
        such a value is written as NULL and recorded as an error (rw_streaming_errors), so the
        sink never wedges; strict mode fails the epoch instead."""
        for i, f in enumerate(table.schema):
            if not nm.is_numeric_type(f.type):
                continue
            col, rows = na.specials_to_null(table.column(i))
            if not len(rows):
                continue
            if self.ctx.config.strict_mode:
                raise NumericOutOfRange(_SPECIAL_TO_DECIMAL)
            data = DataChunk([c.combine_chunks() for c in table.columns])
            self.ctx.errors.add(
                EXPRESSION,
                f"Sink {self.node.sink_name}",
                "22003",
                _SPECIAL_TO_DECIMAL,
                len(rows),
                sample_row(data, int(rows[0])),
            )
            table = table.set_column(i, f, col)
        return table

    def _epoch_output(self) -> pa.Table | None:
        if not self.chunks:
            return None
        c = StreamChunk.concat(self.chunks)
        ops = c.ops
        n = self.node
        cols = [c.columns[i] for i in n.columns]
        if n.sink_type == "append-only":
            keep = np.flatnonzero((ops == Op.INSERT) | (ops == Op.UPDATE_INSERT))
            if len(keep) != len(ops) and not n.force_append_only:
                raise AssertionError(f"sink {n.sink_name}: a delete reached an append-only sink")
            return pa.Table.from_arrays([col.take(pa.array(keep)) for col in cols], names=list(n.names))
        if n.sink_type == "changelog":
            names = np.array(["", *(_OP_NAMES[Op(o)] for o in range(1, 5))], dtype=object)
            op_names = names[ops.astype(np.int64)]
            return pa.Table.from_arrays([*cols, pa.array(op_names, pa.string())], names=[*n.names, OP_COLUMN])
        # upsert: the last change per key decides
        key_cols = [c.columns[i] for i in n.key]
        key_types = [n.input.schema[i].data_type for i in n.key]
        # a sink from a singleton (a global aggregation's MV) has an empty key: one key, every row
        keys = memcomparable.encode_columns(key_cols, key_types, [ASC] * len(key_cols), num_rows=len(ops))
        # later rows of a key overwrite earlier ones: one hash aggregation in Arrow, not a dict per row
        index = pa.table({"k": keys, "i": pa.array(np.arange(len(ops), dtype=np.int64))})
        last = index.group_by("k", use_threads=False).aggregate([("i", "max")]).column("i_max")
        rows = np.sort(last.to_numpy())
        upsert = (ops[rows] == Op.INSERT) | (ops[rows] == Op.UPDATE_INSERT)
        op_col = pa.array(np.where(upsert, "upsert", "delete").astype(object), pa.string())
        taken = [col.take(pa.array(rows)) for col in cols]
        return pa.Table.from_arrays([*taken, op_col], names=[*n.names, OP_COLUMN])
