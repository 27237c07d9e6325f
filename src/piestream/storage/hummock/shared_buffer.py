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

import numpy as np

from piestream.common.epoch import pure_epoch
from piestream.storage.hummock.epoch_keys import EpochKeys
from piestream.storage.hummock.kv_batch import KvBatch
from piestream.storage.hummock.run_search import BatchRun
from piestream.storage.hummock.sstable import COMPRESSION_NONE, DEFAULT_BLOCK_SIZE, Block
from piestream.storage.hummock.sstable_builder import build_sstable, entry_filter_hashes, split_at_user_keys
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import SstableInfo, TableWatermark


@dataclass(frozen=True)
class StorageOptions:
    """Write-path knobs (defaults as RisingWave's system parameters where they exist)."""

    block_size: int = DEFAULT_BLOCK_SIZE
    sstable_size: int = 64 << 20
    compression: int = COMPRESSION_NONE
    bloom_bits_per_key: int = 10
    #: (table id, block size) of tables whose blocks are not `block_size`: point-lookup tables
    #: read fewer bytes per key with small blocks (`sstable_builder.block_bounds`)
    table_block_sizes: tuple[tuple[int, int], ...] = ()


class Imm:
    """An immutable sorted batch in the shared buffer, written at `epoch` (with spill offset)."""

    __slots__ = ("batch", "block", "epoch", "hashes", "nbytes", "run", "unfiltered")

    def __init__(self, epoch: int, batch: KvBatch) -> None:
        self.epoch = epoch
        self.batch = batch
        self.nbytes = batch.nbytes()
        # filter-key hashes per entry: the epoch's key index now, the SST Bloom filter at sync
        self.hashes, self.unfiltered = entry_filter_hashes(batch)
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
        # per barrier epoch: the filter keys its imms hold (replaced, never changed in place)
        self.epoch_keys: dict[int, EpochKeys] = {}

    def add(self, batch: KvBatch, epoch: int) -> None:
        imm = Imm(epoch, batch)
        self.imms.append(imm)
        e = pure_epoch(epoch)
        keys = self.epoch_keys.get(e, EpochKeys())
        self.epoch_keys[e] = keys.add(imm.hashes[batch.filter_lens > 0], imm.unfiltered)

    def buffered_bytes(self) -> int:
        return sum(i.nbytes for i in self.imms)

    def build_and_upload(
        self,
        batch: KvBatch,
        hashes: tuple[np.ndarray, set[int]] | None = None,
        *,
        durable: bool = True,
    ) -> list[SstableInfo]:
        """SSTs of a sorted batch, cut at about `sstable_size` between user keys, uploaded.
        `hashes`: the batch's `entry_filter_hashes`, if known; `durable`: see `SstableStore.upload`."""
        o = self.options
        out = []
        lo = 0
        parts = split_at_user_keys(batch, o.sstable_size)
        for part in parts:  # per SST
            part_hashes = None
            # (unfiltered tables are the part's own: with several parts the builder finds them)
            if hashes is not None and (not hashes[1] or len(parts) == 1):
                part_hashes = (hashes[0][lo : lo + len(part)], hashes[1])
            lo += len(part)
            built = build_sstable(
                part,
                block_size=o.block_size,
                compression=o.compression,
                bits_per_key=o.bloom_bits_per_key,
                hashes=part_hashes,
                table_block_sizes=dict(o.table_block_sizes),
            )
            out.append(self.sstables.upload(built, durable=durable))
        return out

    def sync(self, epoch: int, *, durable: bool = True) -> list[SstableInfo]:
        """Build and upload SSTs from everything buffered at epochs <= `epoch`."""
        todo = [i for i in self.imms if pure_epoch(i.epoch) <= epoch]
        if not todo:
            return []
        # newest first, so on equal full keys the newer write wins the merge
        newest_first = todo[::-1]
        merged, pos = KvBatch.merge_with_positions([i.batch for i in newest_first])
        hashes = np.concatenate([i.hashes for i in newest_first])[pos]
        unfiltered = set().union(*(i.unfiltered for i in todo))
        infos = self.build_and_upload(merged, (hashes, unfiltered), durable=durable)
        done = {id(i) for i in todo}
        self.imms = [i for i in self.imms if id(i) not in done]
        self.epoch_keys = {e: k for e, k in self.epoch_keys.items() if e > epoch}
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
        self.epoch_keys.clear()
        self.synced.clear()
        self.watermarks.clear()
