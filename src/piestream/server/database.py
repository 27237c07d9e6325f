"""A piestream instance: storage, meta, the streaming graph on Spark, and SQL sessions.

Opening a data directory recovers: the Hummock version and the catalog come back from the meta
store, every streaming job's fragments go back into the barrier manager, and the next epoch
continues from the last committed one (sources from their committed offsets, MVs from their
committed state). Nothing acknowledged is lost; nothing is applied twice.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piestream.meta.barrier_manager import BarrierManager
from piestream.meta.catalog_store import CatalogStore
from piestream.meta.hummock_manager import CompactorThread, HummockManager
from piestream.meta.store import MetaStore
from piestream.runtime.runners import EpochRunner, LocalRunner, SparkRunner
from piestream.storage.hummock.compaction import CompactionConfig
from piestream.storage.hummock.sstable_store import process_sstable_store
from piestream.storage.hummock.store import HummockStorage, StorageOptions
from piestream.storage.object_store import open_object_store
from piestream.stream.executor import StreamingConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from piestream.server.session import Session

log = logging.getLogger(__name__)

DEFAULT_DATA_DIR = "./piestream-data"


@dataclass
class DatabaseConfig:
    barrier_interval: float = 1.0
    parallelism: int = 2
    object_store_url: str | None = None  # default: <data dir>/objects
    runner: str = "spark"  # "spark" or "local" (in-process, for tests and debugging)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    storage: StorageOptions = field(default_factory=StorageOptions)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    background_compaction: bool = True


class Database:
    """Everything of one data directory, shared by its sessions."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        spark: SparkSession | None = None,
        config: DatabaseConfig | None = None,
        *,
        runner: EpochRunner | None = None,
    ) -> None:
        self.config = config or DatabaseConfig()
        self.data_dir = Path(data_dir or DEFAULT_DATA_DIR).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store_url = self.config.object_store_url or str(self.data_dir / "objects")
        self.meta = MetaStore(self.data_dir / "meta.db")
        self.sstables = process_sstable_store(open_object_store(self.store_url))
        self.hummock = HummockManager(self.meta, self.sstables, self.config.compaction)
        self.catalog = CatalogStore(self.meta)
        self.spark = spark
        if runner is None:
            if self.config.runner == "local":
                runner = LocalRunner()
            else:
                if self.spark is None:
                    from piestream.runtime.spark import spark_session

                    self.spark = spark_session()
                runner = SparkRunner(self.spark)
        self.barriers = BarrierManager(
            self.hummock,
            runner,
            self.store_url,
            barrier_interval=self.config.barrier_interval,
            config=self.config.streaming,
            storage_options=self.config.storage,
        )
        self.barriers.add_fragments(self.catalog.all_fragments())  # recovery: resume every job
        self.ddl_lock = threading.RLock()
        self.compactor = CompactorThread(self.hummock) if self.config.background_compaction else None
        if self.compactor is not None:
            self.compactor.start()
        self.barriers.start()
        self._closed = False

    # -- sessions -------------------------------------------------------------------------------
    def session(self) -> Session:
        from piestream.server.session import Session

        return Session(self)

    def execute(self, sql: str, params: Any = ()) -> list[Any]:
        """Run a SQL script in a fresh session (convenience for scripts and tests)."""
        return self.session().execute(sql, params)

    # -- snapshots ------------------------------------------------------------------------------
    def snapshot_storage(self) -> tuple[HummockStorage, int, int, int]:
        """(storage at the latest committed version, epoch, version pin, snapshot pin)."""
        vpin, version = self.hummock.pin_version()
        spin = self.hummock.pin_snapshot()
        storage = HummockStorage(self.sstables, version, self.config.storage)
        return storage, version.max_committed_epoch, vpin, spin.pin_id

    def release_snapshot(self, vpin: int, spin: int) -> None:
        self.hummock.unpin_version(vpin)
        self.hummock.unpin_snapshot(spin)

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.barriers.stop()
        if self.compactor is not None:
            self.compactor.stop()
        self.meta.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
