"""A piestream instance: storage, meta, the streaming graph on Spark, and SQL sessions.

Opening a data directory recovers: the Hummock version and the catalog come back from the meta
store, every streaming job's fragments go back into the barrier manager, and the next epoch
continues from the last committed one (sources from their committed offsets, MVs from their
committed state). Nothing acknowledged is lost; nothing is applied twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piestream.common.errors import PiestreamError
from piestream.common.vnode import VNODE_COUNT
from piestream.connectors import ensure_registered
from piestream.meta.barrier_manager import BarrierManager
from piestream.meta.catalog_store import CatalogStore, JobStatus
from piestream.meta.ddl_controller import DdlController
from piestream.meta.ddl_progress import DdlProgressTracker
from piestream.meta.hummock_manager import CompactorThread, HummockManager
from piestream.meta.inbox import Inbox
from piestream.meta.roles import RoleCatalog
from piestream.meta.store import MetaStore
from piestream.runtime.leased import check_runner_kind, spark_runner
from piestream.runtime.runners import DEFAULT_SLOTS, EpochRunner, LocalRunner
from piestream.server.locks import LockManager
from piestream.server.sink_publisher import attach as attach_sink_publisher
from piestream.server.source_acker import attach as attach_source_acker
from piestream.server.system_tables import RwCatalog
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
_NS_SYSTEM = "system"  # ALTER SYSTEM settings in the meta store
SLOT_CHECK_SECONDS = 1.0  # how often the barrier loop asks the cluster for its task slots


@dataclass
class DatabaseConfig:
    barrier_interval: float = 1.0
    #: actors per fragment of a new streaming job (FIXED); None: ADAPTIVE, following the
    #: cluster's task slots (RisingWave's default)
    parallelism: int | None = None
    object_store_url: str | None = None  # default: <data dir>/objects
    #: "spark" (one Spark job of one stage per epoch, its tasks run every stage and exchange
    #: directly with each other: `runtime.leased` with leases of one epoch), "spark-shuffle" (one Spark
    #: job per epoch with a Spark shuffle per exchange: `runtime.runners.SparkRunner`),
    #: "spark-leased" (one Spark job serves the epochs of `lease_seconds`) or "local"
    #: (in-process, for tests and debugging)
    runner: str = "spark"
    #: with runner "spark-leased": seconds a lease holds Spark's task slots at most (the lease
    #: also ends when another Spark job is seen waiting, or after a second without an epoch)
    lease_seconds: float = 30.0
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    storage: StorageOptions = field(default_factory=StorageOptions)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    background_compaction: bool = True
    #: seconds between NOTICEs telling a client how far its CREATE MATERIALIZED VIEW's backfill is
    progress_notice_interval: float = 5.0
    # stale SSTs stay this long: Spark tasks reading a snapshot (other processes) cannot pin
    vacuum_retention_sec: float = 300.0


class DataDirectoryInUse(PiestreamError):
    sqlstate = "55006"  # object_in_use


class _DataDirLock:
    """An exclusive flock on <data dir>/LOCK: two processes writing one meta store and object
    directory would corrupt both. Readers that only open it (the Spark data source) don't lock."""

    def __init__(self, data_dir: Path) -> None:
        self._f = open(data_dir / "LOCK", "a+")  # noqa: SIM115 - held open for the lock's lifetime
        try:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._f.close()
            raise DataDirectoryInUse(f"{data_dir} is in use by another piestream process") from None

    def release(self) -> None:
        if not self._f.closed:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_UN)
            self._f.close()


class ObjectStoreMismatch(PiestreamError):
    sqlstate = "55000"  # object_not_in_prerequisite_state


def _check_object_store(meta: MetaStore, url: str | None, data_dir: Path) -> None:
    """A data directory's meta store only makes sense with the object store holding its SSTs:
    the first open records which one (without credentials), later opens must name the same."""
    want = "" if url is None else url.partition("?")[0]
    if url is not None and "://" not in url:
        want = str(Path(url).resolve())
    stored = meta.get("database", "object_store")
    have = stored.decode() if isinstance(stored, bytes) else stored
    if have is None:  # a new data directory, or one from before this check
        meta.put("database", "object_store", want)
        return
    if have != want:
        where = have or "the data directory's objects/"
        raise ObjectStoreMismatch(
            f"{data_dir} keeps its tables in {where}, not in {want or 'its objects/ directory'}",
            hint=f"start it with --object-store {have}" if have else "start it without --object-store",
        )


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
        if runner is None:
            check_runner_kind(self.config.runner)
        ensure_registered()  # the built-in connectors, which plans name and actors build
        self.data_dir = Path(data_dir or DEFAULT_DATA_DIR).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = _DataDirLock(self.data_dir)
        self.store_url = self.config.object_store_url or str(self.data_dir / "objects")
        self.meta = MetaStore(self.data_dir / "meta.db")
        try:
            _check_object_store(self.meta, self.config.object_store_url, self.data_dir)
        except PiestreamError:
            self.meta.close()
            self._lock_file.release()
            raise
        self.sstables = process_sstable_store(open_object_store(self.store_url))
        self.hummock = HummockManager(
            self.meta,
            self.sstables,
            self.config.compaction,
            vacuum_retention_sec=self.config.vacuum_retention_sec,
        )
        self.catalog = CatalogStore(self.meta)
        self.roles = RoleCatalog(self.meta)  # users, relation owners, grants
        self.locks = LockManager()  # sessions' table locks (LOCK TABLE, DDL, DML, SELECT)
        self.spark = spark
        if runner is None:
            if self.config.runner == "local":
                runner = LocalRunner()
            else:
                if self.spark is None:
                    from piestream.runtime.spark import spark_session

                    self.spark = spark_session()
                cfg = self.config
                runner = spark_runner(self.spark, cfg.runner, cfg.lease_seconds, cfg.barrier_interval)
        self.barriers = BarrierManager(
            self.hummock,
            runner,
            self.store_url,
            barrier_interval=self.config.barrier_interval,
            config=self.config.streaming,
            storage_options=self.config.storage,
        )
        self._load_system_settings()
        # recovery: resume every job that had not failed
        self.barriers.add_fragments(self.catalog.all_fragments())
        for job_id in self.catalog.failed_jobs():
            self.barriers.remove_job(job_id)  # with the edges into it
        self.barriers.on_job_failed.append(self._jobs_failed)
        self.catalog.system_tables = RwCatalog(self)
        self.ddl = DdlController(self.catalog, self.barriers, self.hummock)
        self.ddl.progress = DdlProgressTracker(
            self.snapshot_storage, self.release_snapshot, self.catalog.job_fragments
        )
        self.ddl.progress.resume(
            [r.job_id for r in self.catalog.snapshot().relations() if r.job_id is not None]
        )
        self.barriers.on_commit.append(self.ddl.progress.on_commit)
        self._slots_checked = 0.0
        self.barriers.between_epochs.append(self.follow_slots)
        self.ddl.notice_interval = self.config.progress_notice_interval
        self.inbox = Inbox(self.data_dir, self.catalog, self.meta)  # writes from Spark jobs
        self.barriers.epoch_inputs.append(self.inbox.collect)
        self.compactor = CompactorThread(self.hummock) if self.config.background_compaction else None
        if self.compactor is not None:
            self.compactor.start()
        attach_sink_publisher(self)  # sink output of committed epochs gets published
        attach_source_acker(self)  # readers with ack() hear of their committed offsets
        self.barriers.start()
        from piestream.server.ddl_handlers import drop_temporary

        drop_temporary(self)  # temporary relations of sessions before a crash: gone with them
        self._closed = False

    # -- ADAPTIVE parallelism --------------------------------------------------------------------
    def cluster_slots(self) -> int:
        """The task slots ADAPTIVE jobs follow: the runner's view of the cluster (Spark: the
        tasks its executors run at once, `runtime.spark.cluster_task_slots`; in-process: 2),
        at most a fragment's vnode count."""
        fn = getattr(self.barriers.runner, "cluster_slots", None)
        slots = fn() if fn is not None else DEFAULT_SLOTS
        return max(1, min(int(slots), VNODE_COUNT))

    def follow_slots(self, force: bool = False) -> None:
        """Between epochs (the barrier loop; FLUSH with `force`), at most every
        SLOT_CHECK_SECONDS: ADAPTIVE jobs are rescaled to the cluster's current task slots."""
        now = time.monotonic()
        if not force and now - self._slots_checked < SLOT_CHECK_SECONDS:
            return
        self._slots_checked = now
        try:
            self.ddl.follow_slots(self.cluster_slots())
        except Exception:  # never stop the barrier loop: the next check tries again
            log.exception("ADAPTIVE jobs could not follow the cluster's slots")

    # -- streaming errors and system settings ---------------------------------------------------
    def _jobs_failed(self, job_ids: list[int], error: PiestreamError, fragment_id: int | None) -> None:
        """The barrier manager isolated failing jobs: the catalog records it (durably)."""
        since = dt.datetime.now(dt.UTC).isoformat()
        self.catalog.mark_failed(
            job_ids, JobStatus("failed", error.sqlstate, error.message, fragment_id, since)
        )

    def _load_system_settings(self) -> None:
        raw = self.meta.get(_NS_SYSTEM, "streaming_strict_mode")
        if raw is not None:
            on = (raw.decode() if isinstance(raw, bytes) else str(raw)) == "true"
            self.barriers.config = dataclasses.replace(self.barriers.config, strict_mode=on)
        raw = self.meta.get(_NS_SYSTEM, "source_rate_limits")
        if raw is not None:
            limits = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
            self.barriers.config = dataclasses.replace(
                self.barriers.config,
                source_rate_limits=tuple(sorted((str(k), float(v)) for k, v in limits.items())),
            )

    def set_source_rate_limit(self, name: str, rate: float | None) -> None:
        """``ALTER SOURCE name SET source_rate_limit``: rows per second (0 pauses; None: as
        created), from the next epoch on, and after restarts."""
        with self.barriers.paused():
            limits = dict(self.barriers.config.source_rate_limits)
            if rate is None:
                limits.pop(name, None)
            else:
                limits[name] = rate
            self.meta.put(_NS_SYSTEM, "source_rate_limits", json.dumps(limits, sort_keys=True))
            self.barriers.config = dataclasses.replace(
                self.barriers.config, source_rate_limits=tuple(sorted(limits.items()))
            )

    def set_strict_mode(self, on: bool) -> None:
        """``ALTER SYSTEM SET streaming_strict_mode``: from the next epoch on, and after restarts."""
        with self.barriers.paused():
            self.meta.put(_NS_SYSTEM, "streaming_strict_mode", "true" if on else "false")
            self.barriers.config = dataclasses.replace(self.barriers.config, strict_mode=on)

    @property
    def strict_mode(self) -> bool:
        return self.barriers.config.strict_mode

    # -- sessions -------------------------------------------------------------------------------
    def session(self) -> Session:
        from piestream.server.session import Session

        return Session(self)

    def execute(self, sql: str, params: Any = ()) -> list[Any]:
        """Run a SQL script in a fresh session (convenience for scripts and tests); a
        transaction block the script leaves open is rolled back."""
        session = self.session()
        try:
            return session.execute(sql, params)
        finally:
            session.close()

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
        close_runner = getattr(self.barriers.runner, "close", None)
        if close_runner is not None:
            close_runner()  # the SparkRunner's keep-alive thread, a leased runner's job and listener
        from piestream.stream.cache.registry import WORKER_CACHES

        WORKER_CACHES.drop_scope(self.barriers.store_url)  # this process's caches of the jobs
        self.inbox.close()
        if self.compactor is not None:
            self.compactor.stop()
        self.meta.close()
        self._lock_file.release()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
