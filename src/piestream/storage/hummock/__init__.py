"""Hummock: the LSM state store on object storage (seed 001)."""

from piestream.storage.hummock.kv_batch import KvBatch, put_value
from piestream.storage.hummock.sstable_store import SstableStore, process_sstable_store
from piestream.storage.hummock.store import HummockStorage, StorageOptions
from piestream.storage.hummock.version import HummockVersion, SstableInfo, TableWatermark, VersionDelta

__all__ = [
    "HummockStorage",
    "HummockVersion",
    "KvBatch",
    "SstableInfo",
    "SstableStore",
    "StorageOptions",
    "TableWatermark",
    "VersionDelta",
    "process_sstable_store",
    "put_value",
]
