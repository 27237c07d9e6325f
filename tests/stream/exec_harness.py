"""Run one actor's executors epoch by epoch, the way the runtime does, for executor tests.

Each epoch the harness builds the actor afresh from the plan node (as a Spark task would), over
a HummockStorage at the last committed version, feeds pretty-form chunks, passes the barrier,
syncs the epoch's SSTs and commits them with a real HummockManager. State therefore survives
only through storage: a test that passes here also proves recovery from the committed state.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.scalar import Row
from piestream.common.types import DataType
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

_store_names = itertools.count()


class Harness:
    """One actor of `node` (vnodes: all, unless given), epochs committed for real."""

    def __init__(
        self,
        node: StreamNode,
        *,
        vnodes: VnodeBitmap | None = None,
        rebuild_each_epoch: bool = True,
        sanity_check_storage: bool = True,
        warm_cache: bool = False,
        config: StreamingConfig | None = None,
    ) -> None:
        self.node = node
        self.sstables = SstableStore(InMemoryObjectStore(f"harness-{next(_store_names)}"))
        self.manager = HummockManager(MetaStore(":memory:"), self.sstables)
        self.vnodes = vnodes
        self.rebuild = rebuild_each_epoch
        self.config = config or StreamingConfig(
            check_consistency=True, sanity_check_storage=sanity_check_storage
        )
        # warm: the rebuilt actor gets the executor cache of the previous epoch's (the runtime
        # does this when a Python worker runs the same actor again at the committed epoch)
        self.warm_cache = warm_cache
        self.cache = ActorCaches()
        self.metrics: dict[str, float] = {}
        self._epoch_ms = 1000
        self.committed = 0
        self.epoch = self._next_epoch()
        self.actor: Actor | None = None
        self._start_actor()

    def _next_epoch(self) -> int:
        self._epoch_ms += 1000
        return self._epoch_ms << 16

    def _start_actor(self) -> None:
        storage = HummockStorage(self.sstables, self.manager.version)
        vnodes = self.vnodes or VnodeBitmap.full()
        cache = self.cache if self.warm_cache else ActorCaches()
        ctx = ActorContext(
            1, 1, 0, 1, vnodes, storage, self.config, committed_epoch=self.committed, cache=cache
        )
        ctx.metrics = self.metrics  # counters accumulate over the whole run
        self.storage = storage
        self.actor = Actor(ctx, self.node)
        self.actor.init(EpochPair(self.epoch, self.committed))

    def push(self, chunk: StreamChunk | str, port: str = "fragment:1") -> list[StreamChunk]:
        """Feed one chunk (or its pretty form, typed by `node`'s input) into a port."""
        assert self.actor is not None
        if isinstance(chunk, str):
            chunk = StreamChunk.from_pretty(chunk)
        return self.actor.feed(port, chunk)

    def barrier(self) -> list[StreamChunk]:
        """End the epoch: barrier through the actor, sync, commit; the next epoch starts."""
        assert self.actor is not None
        nxt = self._next_epoch()
        out = self.actor.barrier(Barrier(EpochPair(nxt, self.epoch)))
        ssts = self.storage.sync(self.epoch)
        self.manager.commit_epoch(
            self.epoch,
            ssts,
            [t.table_id for t in self.node_tables()],
            new_watermarks=self.storage.take_table_watermarks(),
        )
        self.committed = self.epoch
        self.epoch = nxt
        if self.rebuild:
            self._start_actor()
        else:
            self.storage.update_version(self.manager.version)
        return out

    def node_tables(self) -> list[TableDesc]:
        return [t for n in self.node.walk() for t in n.tables()]

    def table_rows(self, desc: TableDesc) -> list[Row]:
        """A table's committed rows, sorted (read through a StorageTable)."""
        st = StorageTable(desc, HummockStorage(self.sstables, self.manager.version), self.committed)
        return sorted(st.iter_rows(), key=_sort_key)


def records(chunks: Sequence[StreamChunk], types: Sequence[DataType] | None = None) -> list[tuple[str, Row]]:
    """Chunks as (op pretty, row) pairs, in order."""
    out = []
    for c in chunks:
        for op, row in c.to_records(types):
            out.append((Op(op).pretty, row))
    return out


def pretty_records(text: str) -> list[tuple[str, Row]]:
    """The records of a pretty-form chunk (for expected outputs)."""
    return records([StreamChunk.from_pretty(text)])


def apply_changes(rows: dict[Row, int], chunks: Sequence[StreamChunk]) -> dict[Row, int]:
    """A multiset of rows after applying changes (for checking outputs against a model)."""
    for c in chunks:
        for op, row in c.to_records():
            rows[row] = rows.get(row, 0) + (1 if Op(op).is_insert else -1)
            if rows[row] == 0:
                del rows[row]
    return rows


def _sort_key(row: Row) -> tuple:  # type: ignore[type-arg]
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)
