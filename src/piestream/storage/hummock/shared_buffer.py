"""The write side of HummockStorage: the shared buffer and the upload of SSTs (seed 001 "Write Path").

Writers hand sorted batches (full keys already carry their epoch) to the shared buffer as
immutable runs ("imms"); `sync(epoch)` merges every buffered run up to that epoch (all versions
kept), builds SSTs from the sorted arrays, uploads them and returns their descriptors for the
Hummock manager to commit. Until a version holding them is installed, synced SSTs stay readable
here, so a writer always reads its own writes. Table watermarks recorded by state tables travel
with the epoch's SSTs.
"""

from __future__ import annotations

from dataclasses import dataclass

from piestream.common.epoch import pure_epoch
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.run_search import BatchRun
from piestream.storage.hummock.sstable import (
    COMPRESSION_NONE,
    DEFAULT_BLOCK_SIZE,
    Block,
    build_sstable,
    split_at_user_keys,
)
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import SstableInfo, TableWatermark


@dataclass(frozen=True)
class StorageOptions:
    """Write-path knobs (defaults as RisingWave's system parameters where they exist)."""

    block_size: int = DEFAULT_BLOCK_SIZE
    sstable_size: int = 64 << 20
    compression: int = COMPRESSION_NONE
    bloom_bits_per_key: int = 10


class Imm:
    """An immutable sorted batch in the shared buffer, written at `epoch` (with spill offset)."""

    __slots__ = ("batch", "block", "epoch", "nbytes", "run")

    def __init__(self, epoch: int, batch: KvBatch) -> None:
        self.epoch = epoch
        self.batch = batch
        self.nbytes = batch.nbytes()
        # search structures of the read path, built on first use and kept while the imm lives
        self.block: Block | None = None
        self.run: BatchRun | None = None


class SharedBuffer:
    """Uncommitted data of one process: buffered imms, synced-but-uncommitted SSTs, watermarks.
    Not thread-safe on its own: `HummockStorage` serializes calls."""

    def __init__(self, sstables: SstableStore, options: StorageOptions) -> None:
        self.sstables = sstables
        self.options = options
        self.imms: list[Imm] = []  # newest last
        self.synced: list[tuple[int, list[SstableInfo]]] = []  # (epoch, ssts), newest last
        self.watermarks: dict[int, TableWatermark] = {}  # uncommitted, per table

    def add(self, batch: KvBatch, epoch: int) -> None:
        self.imms.append(Imm(epoch, batch))

    def buffered_bytes(self) -> int:
        return sum(i.nbytes for i in self.imms)

    def build_and_upload(self, batch: KvBatch) -> list[SstableInfo]:
        """SSTs of a sorted batch, cut at about `sstable_size` between user keys, uploaded."""
        o = self.options
        return [
            self.sstables.upload(
                build_sstable(
                    part,
                    block_size=o.block_size,
                    compression=o.compression,
                    bits_per_key=o.bloom_bits_per_key,
                )
            )
            for part in split_at_user_keys(batch, o.sstable_size)
        ]

    def sync(self, epoch: int) -> list[SstableInfo]:
        """Build and upload SSTs from everything buffered at epochs <= `epoch`."""
        todo = [i for i in self.imms if pure_epoch(i.epoch) <= epoch]
        if not todo:
            return []
        # newest first, so on equal full keys the newer write wins the merge
        infos = self.build_and_upload(KvBatch.merge([i.batch for i in reversed(todo)]))
        done = {id(i) for i in todo}
        self.imms = [i for i in self.imms if id(i) not in done]
        self.synced.append((epoch, infos))
        return infos

    def forget_committed(self, max_committed_epoch: int) -> None:
        self.synced = [(e, s) for e, s in self.synced if e > max_committed_epoch]

    def add_watermark(self, table_id: int, watermark: TableWatermark) -> None:
        cur = self.watermarks.get(table_id)
        self.watermarks[table_id] = cur.merged(watermark) if cur else watermark

    def take_watermarks(self) -> dict[int, TableWatermark]:
        out, self.watermarks = self.watermarks, {}
        return out

    def clear(self) -> None:
        self.imms.clear()
        self.synced.clear()
        self.watermarks.clear()
