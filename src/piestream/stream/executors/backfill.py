"""Backfill (StreamTableScan): a new MV reads an existing table's rows, then follows its changes.

The actor sits beside one actor of the upstream table (same vnode range, a no-shuffle edge). In
its first epoch it emits the upstream's committed snapshot of its vnodes as inserts, before any of
the epoch's upstream changes, so downstream sees snapshot + changes = the table's state; after
that it forwards the changes. Whether a vnode is done is state, so a restart does not repeat it.
"""

from __future__ import annotations

import pyarrow as pa

from piestream.common.chunk import DataChunk, StreamChunk
from piestream.plan.backfill import BackfillNode
from piestream.storage.table.storage_table import StorageTable
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier


class BackfillExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: BackfillNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        self.progress = self.table(node.state_table)
        self.vnodes = ctx.vnodes.vnodes().tolist() if node.upstream.vnode_count == ctx.vnodes.count else [0]
        self._checked = False
        self._pending: list[int] = []
        # the actor's cache is shared by its executors: a join of two scans has two backfills
        self._done_key = f"backfill_done:{node.state_table.table_id}"

    def _project(self, chunk: StreamChunk) -> StreamChunk:
        return chunk.project(list(self.node.output_indices))

    def _snapshot_first(self) -> list[StreamChunk]:
        """The first time: the snapshot rows of vnodes not yet done, as inserts."""
        if self._checked:
            return []
        self._checked = True
        if self.ctx.cache.get(self._done_key):  # valid: the cache reflects the committed epoch
            return []
        done, _ = self.progress.get_rows([pa.array(self.vnodes, pa.int32())])  # one state call
        self._pending = [v for v, d in zip(self.vnodes, done.tolist(), strict=True) if not d]
        if not self._pending:
            self.ctx.cache[self._done_key] = True
            return []
        from piestream.common.vnode import VnodeBitmap

        snapshot = StorageTable(
            self.node.upstream, self.ctx.storage, self.ctx.committed_epoch, list(self.node.output_indices)
        )
        out = []
        if self.ctx.committed_epoch:  # before the first commit there is nothing to read
            bitmap = VnodeBitmap.from_vnodes(self._pending, self.node.upstream.vnode_count)
            for chunk in snapshot.scan_vnodes(bitmap):
                out.extend(StreamChunk.inserts(chunk).split(self.ctx.config.chunk_size))
        k = len(self._pending)
        self.progress.write_chunk(
            StreamChunk.inserts(
                DataChunk([pa.array(self._pending, pa.int32()), pa.array([True] * k)], length=k)
            )
        )
        self.ctx.cache[self._done_key] = True
        return out

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        return [*self._snapshot_first(), self._project(chunk)]

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out = self._snapshot_first()
        self.commit_state(barrier)
        return out
