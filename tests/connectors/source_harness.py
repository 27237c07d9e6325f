"""Run one source/sink actor epoch by epoch over real Hummock storage (rebuilt every epoch, as a
Spark task would be), with the option of running an epoch twice (a retried task)."""

from __future__ import annotations

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.vnode import VnodeBitmap
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.plan.node import StreamNode
from piestream.storage.hummock import HummockStorage, SstableStore
from piestream.storage.object_store import InMemoryObjectStore
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.storage_table import StorageTable
from piestream.stream.actor import Actor
from piestream.stream.cache.registry import ActorCaches
from piestream.stream.executor import ActorContext, StreamingConfig
from piestream.stream.message import Barrier

_ids = iter(range(10**9))


class EpochHarness:
    def __init__(self, node: StreamNode, *, actor_index: int = 0, parallelism: int = 1) -> None:
        self.node = node
        self.sstables = SstableStore(InMemoryObjectStore(f"src-harness-{next(_ids)}"))
        self.manager = HummockManager(MetaStore(":memory:"), self.sstables)
        self.actor_index = actor_index
        self.parallelism = parallelism
        self.committed = 0
        self.ms = 1_000_000
        self.cache = ActorCaches()

    def run(
        self,
        span_ms: int = 1000,
        *,
        commit: bool = True,
        cache: bool = True,
        config: StreamingConfig | None = None,
    ) -> list[StreamChunk]:
        """One epoch of `span_ms` (the barrier's wall-clock span); committed unless told not to."""
        data_epoch = self.ms << 16
        nxt = (self.ms + span_ms) << 16
        storage = HummockStorage(self.sstables, self.manager.version)
        ctx = ActorContext(
            1,
            1,
            self.actor_index,
            self.parallelism,
            VnodeBitmap.full(),
            storage,
            config or StreamingConfig(sanity_check_storage=True),
            committed_epoch=self.committed,
            cache=self.cache if cache else ActorCaches(),
        )
        actor = Actor(ctx, self.node)
        actor.init(EpochPair(data_epoch, self.committed))
        out = actor.barrier(Barrier(EpochPair(nxt, data_epoch)))
        if commit:
            ssts = storage.sync(data_epoch)
            tables = [t.table_id for n in self.node.walk() for t in n.tables()]
            self.manager.commit_epoch(data_epoch, ssts, tables)
            self.committed = data_epoch
            self.ms += span_ms
        return out

    def rows(self, desc: TableDesc) -> list[tuple]:
        st = StorageTable(desc, HummockStorage(self.sstables, self.manager.version), self.committed)
        return list(st.iter_rows())
