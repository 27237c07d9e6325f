"""AppendOnlyDedup: the first row of each dedup key passes, later ones are dropped (reference §6.5).

Planned for ``DISTINCT ON`` without ORDER BY and for a group-by-only aggregation over an
append-only input. Because the input never retracts, the first row seen for a key stays the answer
forever: the state table remembers it (pk = dedup columns), and the output is append-only with the
dedup columns as its stream key. A retractable input needs a GroupTopN with limit 1 instead (the
rows behind the first must be kept to replace it), so it is rejected here.

The keys the state holds (and, once looked up, those it does not) are cached in the worker
across epochs (`KeyedRows`, key -> stored flag; valid only at the committed epoch): a warm actor
answers a chunk's keys from memory, and one whose cache started on an empty table and was never
evicted (`complete`) sends no point get to storage at all.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.errors import InternalError
from piestream.common.order import ASC
from piestream.encoding import memcomparable
from piestream.plan.dedup import DedupNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier
from piestream.stream.watermark import column_bound


class AppendOnlyDedupExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: DedupNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.node = node
        self.state = self.table(node.state_table)
        self.cols = list(node.dedup_cols)
        self.key_types = [node.schema.types[i] for i in self.cols]
        tid = node.state_table.table_id
        self.cache = ctx.cache.keyed(f"dedup:{tid}", [pa.bool_()]) if self.cols else None

    def init(self, epoch: EpochPair) -> None:
        super().init(epoch)
        if self.cache is not None and self.cache.complete is None:  # a new cache, nothing written yet
            # from metadata: a scan for one row would merge every run of the LSM (`surely_empty`)
            self.cache.complete = self.state.surely_empty()

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        """Forget keys below dedup column 0's committed watermark (none arrives any more)."""
        if self.node.watermark is not None:
            bound = column_bound(self.ctx, self.node.watermark)
            if bound is not None:
                self.state.update_watermark(bound)
                if self.cache is not None:
                    self.cache.remove_below(memcomparable.encode_datum(bound, self.key_types[0], ASC))
        self.commit_state(barrier)
        return []

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        if not (c.ops == Op.INSERT).all():
            raise InternalError("AppendOnlyDedup received a retraction from an append-only input")
        if not self.cols:  # one key for all rows: only the very first row ever passes
            if self.state.exists(()):
                return []
            out = c.take(np.zeros(1, np.int64))
            self.state.insert_row(out.to_rows()[0])  # write_chunk cannot encode an empty pk
            return [out]
        # the first row of each key within the chunk (NULLs compare equal, as in DISTINCT)
        keys = memcomparable.encode_columns_arrow(
            [c.columns[i] for i in self.cols], self.key_types, [ASC] * len(self.cols)
        )
        t = pa.table({"k": keys, "i": pa.array(np.arange(n, dtype=np.int64))})
        first = t.group_by("k", use_threads=False).aggregate([("i", "min")]).column("i_min")
        first_idx = np.sort(np.asarray(first.to_numpy(), np.int64))
        firsts = c.take(first_idx)
        # ... that no earlier chunk or epoch has seen (the cache, then point gets for the keys it
        # does not know; read-your-writes)
        assert self.cache is not None
        fkeys = keys.take(pa.array(first_idx, pa.int64()))
        hit, flags = self.cache.get(fkeys)
        found = hit & np.asarray(flags[0].fill_null(False).to_numpy(zero_copy_only=False), np.bool_)
        unknown = np.flatnonzero(~hit)
        if len(unknown) and not self.cache.complete:  # (a complete cache knows every stored key)
            take = pa.array(unknown, pa.int64())
            stored, _ = self.state.get_rows([firsts.columns[i].take(take) for i in self.cols])
            found[unknown] = stored
            self.cache.put(fkeys.take(take), [pa.array(stored, pa.bool_())], distinct=True)
        if found.all():
            self.ctx.charge_caches()
            return []
        new = np.flatnonzero(~found)
        out = firsts.take(new) if found.any() else firsts
        self.state.write_chunk(out)
        self.cache.put(
            fkeys.take(pa.array(new, pa.int64())), [pa.array(np.ones(len(new), np.bool_))], distinct=True
        )
        self.ctx.charge_caches()
        return [out]
