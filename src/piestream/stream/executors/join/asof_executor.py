"""AsOfJoinExecutor (plan/asof_join): RisingWave's AsOf join over two state tables.

Per chunk, everything is column-wise: the chunk's distinct join keys are read from the state
tables with one prefix scan per side, and `asof_match` matches all rows at once.

- A left chunk is matched against the right rows of its keys (unchanged by it); each left row
  emits its op with its match (ASOF LEFT JOIN: NULL-padded when none; inner: nothing).
- A right chunk re-matches the left rows of its keys before and after it is applied; only left
  rows whose matched right row changed are emitted, as a delete of the old joined row and an
  insert of the new one (an update pair where both exist). This reads the keys' whole left and
  right groups (RisingWave narrows the right read to the neighbours of the changed rows); the
  cost is per key touched, not per stored row.

A row with a NULL join key never matches and is not stored (a left one is emitted padded by a
LEFT join, statelessly); a NULL inequality value is stored but never matches.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.encoding import memcomparable
from piestream.plan.asof_join import AsOfJoinNode
from piestream.storage.table.state_table import StateTable
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.join.asof import asof_match
from piestream.stream.executors.join.kernels import group_by_key, matchable_mask, take_or_null


class AsOfJoinExecutor(Executor):
    """Input 0 = left, 1 = right."""

    def __init__(self, ctx: ActorContext, node: AsOfJoinNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        self.states = (self.table(node.left_table), self.table(node.right_table))
        self.keys = (list(node.left_keys), list(node.right_keys))
        self.key_types: list[DataType] = [node.left.schema.types[k] for k in node.left_keys]
        self.t_type = node.left.schema.types[node.left_col]
        self.right_types = node.right.schema.types

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity:
            return []
        keys = [c.columns[k] for k in self.keys[input_idx]]
        ok = matchable_mask(keys, [False] * len(keys), c.capacity)
        _, prefixes, groups = group_by_key(keys, self.key_types, np.flatnonzero(ok), c.capacity)
        if input_idx == 0:
            return self._left(c, ok, prefixes, groups)
        return self._right(c, ok, prefixes, groups)

    def _scan(self, state: StateTable, prefixes: list[pa.Array], groups: int) -> DataChunk:
        if not groups:
            return DataChunk([pa.nulls(0, t.arrow) for t in state.desc.types], length=0)
        rows, _ = state.scan_prefix_columns(prefixes)
        return rows.compact()

    def _match(self, left: DataChunk, right: DataChunk) -> np.ndarray:
        n = self.node
        return asof_match(
            [left.columns[k] for k in n.left_keys],
            [right.columns[k] for k in n.right_keys],
            self.key_types,
            left.columns[n.left_col],
            right.columns[n.right_col],
            self.t_type,
            n.op,
        )

    def _joined(self, left: DataChunk, right: DataChunk, m: np.ndarray) -> list[pa.Array]:
        return [
            *left.columns,
            *(take_or_null(col, m, t.arrow) for col, t in zip(right.columns, self.right_types, strict=True)),
        ]

    def _left(
        self, c: StreamChunk, ok: np.ndarray, prefixes: list[pa.Array], groups: int
    ) -> list[StreamChunk]:
        right = self._scan(self.states[1], prefixes, groups)
        m = self._match(c.data, right)
        if not ok.all():
            self.states[0].write_chunk(c.take(np.flatnonzero(ok)))
        else:
            self.states[0].write_chunk(c)
        out = StreamChunk(c.ops, self._joined(c.data, right, m), length=c.capacity)
        if self.node.outer:
            return [out]
        hit = np.flatnonzero(m >= 0)
        if not len(hit):
            return []
        # an update pair may lose one half (matched before, not after): plain ops then
        ops = np.where(out.insert_mask()[hit], np.int8(Op.INSERT), np.int8(Op.DELETE)).astype(np.int8)
        return [StreamChunk(ops, [col.take(pa.array(hit)) for col in out.columns], length=len(hit))]

    def _right(
        self, c: StreamChunk, ok: np.ndarray, prefixes: list[pa.Array], groups: int
    ) -> list[StreamChunk]:
        if not groups:
            return []  # only NULL keys: nothing stored, nothing matched
        left = self._scan(self.states[0], prefixes, groups)
        before = self._scan(self.states[1], prefixes, groups)
        self.states[1].write_chunk(c.take(np.flatnonzero(ok)) if not ok.all() else c)
        after = self._scan(self.states[1], prefixes, groups)
        if not left.capacity:
            return []
        m0, m1 = self._match(left, before), self._match(left, after)
        old = [
            take_or_null(col, m0, t.arrow) for col, t in zip(before.columns, self.right_types, strict=True)
        ]
        new = [take_or_null(col, m1, t.arrow) for col, t in zip(after.columns, self.right_types, strict=True)]
        # a left row changes when its matched right row's values differ (equal encodings)
        types = list(self.right_types)
        enc0 = memcomparable.encode_columns(old, types, [ASC] * len(types)).to_arrow()
        enc1 = memcomparable.encode_columns(new, types, [ASC] * len(types)).to_arrow()
        same = np.asarray(pa.compute.equal(enc0, enc1).to_numpy(zero_copy_only=False), np.bool_)
        changed = np.flatnonzero(~same | ((m0 >= 0) != (m1 >= 0)))
        if not len(changed):
            return []
        had, has = m0[changed] >= 0, m1[changed] >= 0
        if self.node.outer:
            had[:] = True
            has[:] = True
        # per changed left row: its old joined row (if any), then its new one (if any)
        rows = np.concatenate([changed[had], changed[has]])
        side = np.concatenate([np.zeros(int(had.sum()), np.int8), np.ones(int(has.sum()), np.int8)])
        pair = np.concatenate([has[had], had[has]])  # the row has the other half too
        order = np.lexsort((side, rows))
        rows, side, pair = rows[order], side[order], pair[order]
        ops = np.where(
            side == 0,
            np.where(pair, np.int8(Op.UPDATE_DELETE), np.int8(Op.DELETE)),
            np.where(pair, np.int8(Op.UPDATE_INSERT), np.int8(Op.INSERT)),
        ).astype(np.int8)
        take = pa.array(rows)
        lcols = [col.take(take) for col in left.columns]
        rcols = [
            pa.concat_arrays([o.take(pa.array(changed[had])), n.take(pa.array(changed[has]))]).take(
                pa.array(order)
            )
            for o, n in zip(old, new, strict=True)
        ]
        return [StreamChunk(ops, [*lcols, *rcols], length=len(rows))]
