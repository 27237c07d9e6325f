"""MaterializedExprs: impure expressions evaluated once per row and stored (RisingWave's executor
of that name), so an MV with ``random()`` or ``gen_random_uuid()`` in its select list equals "the
upstream rows, each with the values drawn when it arrived".

Per chunk: the expressions are evaluated for the whole chunk (values for its Inserts /
UpdateInserts); a Delete / UpdateDelete takes the values of the same key's Insert earlier in the
chunk if there is one, else the stored values (one batched `get_rows` for all of them); then the
chunk's key and value columns go to the state table in order (`write_chunk`), so a key inserted
and deleted within the chunk leaves nothing behind. An UPDATE is a new row version: its insert
half draws new values, as in RisingWave. A Delete of a key with no stored values (an inconsistent
input) keeps the freshly drawn values; the state table reports the inconsistency.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import StreamChunk
from piestream.common.order import ASC
from piestream.encoding import memcomparable
from piestream.plan.materialized_exprs import MaterializedExprsNode
from piestream.stream.executor import ActorContext, Executor


class MaterializedExprsExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: MaterializedExprsNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        self.state = self.table(node.state_table)
        self.sk = list(node.input.stream_key)
        self.key_types = [node.input.schema.types[i] for i in self.sk]

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        data = c.data
        fresh = [self.ctx.eval(e, data, "MaterializedExprs") for e in self.node.exprs]
        ins = c.insert_mask()
        dels = np.flatnonzero(~ins)
        values = fresh
        if len(dels):
            values = self._values_for_deletes(c, fresh, ins, dels)
        key_cols = [c.columns[k] for k in self.sk]
        self.state.write_chunk(StreamChunk(c.ops, [*key_cols, *values], length=n))
        return [StreamChunk(c.ops, [*c.columns, *values], length=n)]

    def _values_for_deletes(
        self, c: StreamChunk, fresh: list[pa.Array], ins: np.ndarray, dels: np.ndarray
    ) -> list[pa.Array]:
        """Each row's value columns: Inserts their fresh values, Deletes the values emitted for
        their key (an earlier Insert in this chunk, else the state table)."""
        n = c.capacity
        keys = memcomparable.encode_columns_arrow(
            [c.columns[k] for k in self.sk], self.key_types, [ASC] * len(self.sk)
        )
        # rows by (key, position): a row's predecessor with the same key is the op before it
        t = pa.table({"k": keys, "i": pa.array(np.arange(n, dtype=np.int64))})
        order = np.asarray(pc.sort_indices(t, sort_keys=[("k", "ascending"), ("i", "ascending")]), np.int64)
        sk_sorted = keys.take(pa.array(order))
        same = np.zeros(n, np.bool_)
        if n > 1:
            eq = pc.equal(sk_sorted.slice(1), sk_sorted.slice(0, n - 1))
            same[1:] = np.asarray(eq.to_numpy(zero_copy_only=False), np.bool_)
        prev = np.full(n, -1, np.int64)
        prev[order[1:][same[1:]]] = order[:-1][same[1:]]
        src = np.arange(n, dtype=np.int64)  # where each row's values come from
        p = prev[dels]
        in_chunk = (p >= 0) & ins[np.maximum(p, 0)]
        src[dels[in_chunk]] = p[in_chunk]
        look = dels[~in_chunk]
        extra: list[pa.Array] = []
        if len(look):
            take = pa.array(look, pa.int64())
            found, stored = self.state.get_rows([c.columns[k].take(take) for k in self.sk])
            nk = len(self.sk)
            extra = [stored.columns[nk + j].cast(f.type) for j, f in enumerate(fresh)]
            hit = np.flatnonzero(found)
            src[look[hit]] = n + hit
        if not extra:
            return [f.take(pa.array(src)) for f in fresh]
        idx = pa.array(src)
        return [pa.concat_arrays([f, x]).take(idx) for f, x in zip(fresh, extra, strict=True)]
