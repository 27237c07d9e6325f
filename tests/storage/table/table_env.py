"""A small Hummock deployment for relational-table tests: object store, meta store, manager,
one `HummockStorage` for the streaming side and the full barrier cycle of seed 000 / seed 001.

    env = TableEnv()
    t = env.state_table(desc)          # init_epoch at env.epoch
    t.insert_row(...)
    committed = env.barrier(t)        # commit(EpochPair) -> sync -> commit_epoch -> update_version
    env.storage_table(desc, committed).iter_rows()
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from piestream.common.epoch import EpochPair
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock import HummockStorage, SstableStore, StorageOptions
from piestream.storage.hummock.compaction import CompactionConfig
from piestream.storage.object_store import open_object_store
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.state_table import StateTable
from piestream.storage.table.storage_table import StorageTable

EPOCH_STEP = 1 << 16


def epoch_no(k: int) -> int:
    """The k-th barrier epoch of a test (low 16 bits zero, strictly increasing)."""
    return k << 16


class TableEnv:
    """Object store + meta store + Hummock manager + the streaming side's storage."""

    def __init__(
        self,
        url: str | None = None,
        compaction: CompactionConfig | None = None,
        options: StorageOptions | None = None,
    ) -> None:
        self.url = url or f"memory://t{uuid.uuid4().hex}"
        self.sstables = SstableStore(open_object_store(self.url))
        self.manager = HummockManager(MetaStore(":memory:"), self.sstables, compaction)
        self.options = options
        self.storage = HummockStorage(self.sstables, self.manager.version, options)
        self.epoch = epoch_no(1)  # the epoch writes currently carry
        self.committed: list[int] = []

    def state_table(self, desc: TableDesc, **kw: Any) -> StateTable:
        t = StateTable(desc, self.storage, **kw)
        t.init_epoch(EpochPair.initial(self.epoch))
        return t

    def barrier(self, *tables: StateTable, checkpoint: bool = True) -> int:
        """Commit every table to the next epoch; with `checkpoint`, sync and commit the ended epoch
        in meta and install the new version. Returns the ended epoch."""
        cur = self.epoch
        nxt = cur + EPOCH_STEP
        for t in tables:
            t.commit(EpochPair(nxt, cur))
        self.epoch = nxt
        if checkpoint:
            self.checkpoint(cur, {t.desc.table_id for t in tables})
        return cur

    def checkpoint(self, epoch: int, table_ids: Sequence[int] | set[int] = ()) -> None:
        ssts = self.storage.sync(epoch)
        self.manager.commit_epoch(
            epoch, ssts, sorted(table_ids), new_watermarks=self.storage.take_table_watermarks()
        )
        self.storage.update_version(self.manager.version)
        self.committed.append(epoch)

    def reader(self) -> HummockStorage:
        """A batch reader's storage: the committed version only, no local uncommitted data."""
        return HummockStorage(self.sstables, self.manager.version, self.options)

    def storage_table(
        self, desc: TableDesc, epoch: int, output_indices: Sequence[int] | None = None
    ) -> StorageTable:
        return StorageTable(desc, self.reader(), epoch, output_indices)

    def compact(self) -> int:
        n = self.manager.compact_until_idle()
        self.storage.update_version(self.manager.version)
        return n


def live_user_keys(storage: HummockStorage, table_id: int, *, apply_watermarks: bool) -> int:
    """Visible (non-tombstone, newest) keys of a table, optionally ignoring table watermarks."""
    p = table_id.to_bytes(4, "big")
    q = (table_id + 1).to_bytes(4, "big")
    return sum(len(b) for b in storage.iter(p, q, apply_watermarks=apply_watermarks))
