"""The Hummock manager (seed 001 "Transaction Management with Hummock Manager"; reference §5.3, §5.5).

It owns the sequence of versions. `commit_epoch` adds a checkpoint's SSTs as a new L0 sub-level and
advances the committed epochs; compaction results replace their inputs. Each change is a
`VersionDelta` written to the meta store in one transaction (with a full checkpoint every few
deltas), so after a restart the last committed version is exactly what is read.

Readers pin versions (their SSTs are not deleted while pinned) and snapshots (compaction keeps the
versions they read). Vacuum deletes objects no pinned version references once they have been
unreferenced for `vacuum_retention_sec` (readers in other processes — Spark tasks reading a
snapshot — cannot pin, so the retention time protects them); full GC lists the object store and
deletes unreferenced objects older than a retention time — the leftovers of failed or retried
writers.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from piestream.meta.store import MetaStore
from piestream.storage.hummock.compaction import (
    CompactionCancelled,
    CompactionConfig,
    CompactTask,
    pick_compaction,
    result_levels,
    run_compaction,
)
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.version import (
    HummockVersion,
    Level,
    SstableInfo,
    TableWatermark,
    VersionDelta,
    object_id_of_path,
)

log = logging.getLogger(__name__)

CHECKPOINT_EVERY_DELTAS = 32
DEFAULT_GC_RETENTION_SEC = 6 * 3600.0


def load_version(meta: MetaStore) -> HummockVersion:
    """The last committed version a meta store holds: its newest checkpoint plus the deltas after
    it (call inside a transaction for a version consistent with other reads)."""
    rows = meta.query("SELECT id, payload FROM hummock_version_checkpoint ORDER BY id DESC LIMIT 1")
    version = HummockVersion.from_json(json.loads(str(rows[0][1]))) if rows else HummockVersion(id=0)
    for _, payload in meta.query(
        "SELECT id, payload FROM hummock_version_delta WHERE id > ? ORDER BY id", (version.id,)
    ):
        version = version.apply(VersionDelta.from_json(json.loads(str(payload))))
    return version


@dataclass(frozen=True)
class PinnedSnapshot:
    pin_id: int
    epoch: int


class HummockManager:
    """Versions, commits, pins and compaction of one Hummock instance."""

    def __init__(
        self,
        meta: MetaStore,
        sstables: SstableStore,
        compaction: CompactionConfig | None = None,
        *,
        vacuum_retention_sec: float = 0.0,
    ) -> None:
        self.meta = meta
        self.sstables = sstables
        self.compaction_config = compaction or CompactionConfig()
        self.vacuum_retention_sec = vacuum_retention_sec
        self._add_removed_at_column()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pin_ids = itertools.count(1)
        self._pinned_versions: dict[int, int] = {}  # pin id -> version id
        self._pinned_snapshots: dict[int, int] = {}  # pin id -> epoch
        self._task_ids = itertools.count(1)
        self._running_task: CompactTask | None = None
        self._version = self._load()
        self._dropped_tables: set[int] = self._load_dropped()
        self._listeners: list[Callable[[HummockVersion], None]] = []

    # -- persistence ----------------------------------------------------------------------------
    def _load(self) -> HummockVersion:
        return load_version(self.meta)

    def _add_removed_at_column(self) -> None:
        """Stale objects remember when they were removed (older meta stores lack the column)."""
        cols = {str(r[1]) for r in self.meta.query("PRAGMA table_info(hummock_stale_object)")}
        if "removed_at" not in cols:
            with self.meta.transaction() as c:
                c.execute("ALTER TABLE hummock_stale_object ADD COLUMN removed_at REAL NOT NULL DEFAULT 0")

    def _load_dropped(self) -> set[int]:
        raw = self.meta.get("hummock", "dropped_tables")
        return set(json.loads(raw)) if raw else set()

    def _apply(self, delta: VersionDelta, extra: Callable[[object], None] | None = None) -> HummockVersion:
        """Persist and install a delta (one meta-store transaction, with `extra` writes in it)."""
        with self._lock:
            new = self._version.apply(delta)
            with self.meta.transaction() as c:
                c.execute(
                    "INSERT INTO hummock_version_delta (id, payload) VALUES (?, ?)",
                    (delta.id, json.dumps(delta.to_json())),
                )
                now = time.time()
                c.executemany(
                    "INSERT OR REPLACE INTO hummock_stale_object (object_id, removed_in_version, removed_at) "
                    "VALUES (?, ?, ?)",
                    [(oid, delta.id, now) for oid in delta.removed_object_ids],
                )
                if new.id % CHECKPOINT_EVERY_DELTAS == 0:
                    c.execute(
                        "INSERT OR REPLACE INTO hummock_version_checkpoint (id, payload) VALUES (?, ?)",
                        (new.id, json.dumps(new.to_json())),
                    )
                    c.execute("DELETE FROM hummock_version_delta WHERE id <= ?", (new.id,))
                    c.execute("DELETE FROM hummock_version_checkpoint WHERE id < ?", (new.id,))
                if extra is not None:
                    extra(c)
            self._version = new
            self._changed.notify_all()
            listeners = list(self._listeners)
        for fn in listeners:
            fn(new)
        return new

    # -- versions and epochs --------------------------------------------------------------------
    @property
    def version(self) -> HummockVersion:
        with self._lock:
            return self._version

    @property
    def max_committed_epoch(self) -> int:
        return self.version.max_committed_epoch

    def on_new_version(self, fn: Callable[[HummockVersion], None]) -> None:
        with self._lock:
            self._listeners.append(fn)

    def commit_epoch(
        self,
        epoch: int,
        ssts: Iterable[SstableInfo],
        table_ids: Iterable[int] = (),
        *,
        new_watermarks: dict[int, TableWatermark] | None = None,
        extra: Callable[[object], None] | None = None,
    ) -> HummockVersion:
        """Make `epoch` committed: its SSTs become the newest L0 sub-level, the committed epoch of
        every table in `table_ids` (and of the tables the SSTs touch) becomes `epoch`.

        The SSTs are made durable first: actors upload them without fsyncs (`put_deferred`) and
        this is the one place they are synced, all at once, before any version refers to them."""
        ssts = tuple(ssts)
        self.sstables.store.make_durable([s.path for s in ssts])
        with self._lock:
            cur = self._version
            if epoch <= cur.max_committed_epoch:
                raise ValueError(f"epoch {epoch} is not after the committed epoch {cur.max_committed_epoch}")
            tables = set(table_ids) | {t for s in ssts for t in s.table_ids}
            delta = VersionDelta(
                id=cur.id + 1,
                prev_id=cur.id,
                new_l0_sub_levels=(Level(0, ssts, cur.next_sub_level_id),) if ssts else (),
                table_committed_epoch={t: epoch for t in tables},
                max_committed_epoch=epoch,
                new_table_watermarks=dict(new_watermarks or {}),
            )
            return self._apply(delta, extra)

    def wait_epoch(self, epoch: int, timeout: float | None = None) -> bool:
        """Block until the current version holds `epoch` (True) or the timeout passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._version.max_committed_epoch < epoch:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def drop_tables(self, table_ids: Iterable[int]) -> None:
        """Forget tables: their committed epochs and watermarks go now, their keys at compaction."""
        ids = set(table_ids)
        with self._lock:
            self._dropped_tables |= ids
            cur = self._version
            delta = VersionDelta(id=cur.id + 1, prev_id=cur.id, removed_table_ids=tuple(sorted(ids)))
            dropped = json.dumps(sorted(self._dropped_tables))
            self._apply(
                delta,
                lambda c: c.execute(  # type: ignore[attr-defined]
                    "INSERT OR REPLACE INTO kv (ns, key, value) VALUES ('hummock', 'dropped_tables', ?)",
                    (dropped,),
                ),
            )

    # -- pins -----------------------------------------------------------------------------------
    def pin_version(self) -> tuple[int, HummockVersion]:
        """Pin the current version: its SSTs stay until `unpin_version`."""
        with self._lock:
            pin = next(self._pin_ids)
            self._pinned_versions[pin] = self._version.id
            return pin, self._version

    def unpin_version(self, pin_id: int) -> None:
        with self._lock:
            self._pinned_versions.pop(pin_id, None)

    def pin_snapshot(self) -> PinnedSnapshot:
        """Pin the committed epoch: compaction keeps every version a read at it needs."""
        with self._lock:
            pin = next(self._pin_ids)
            epoch = self._version.max_committed_epoch
            self._pinned_snapshots[pin] = epoch
            return PinnedSnapshot(pin, epoch)

    def unpin_snapshot(self, pin_id: int) -> None:
        with self._lock:
            self._pinned_snapshots.pop(pin_id, None)

    def low_watermark(self) -> int:
        """The oldest epoch some reader may still read at."""
        with self._lock:
            pins = list(self._pinned_snapshots.values())
            return min([*pins, self._version.max_committed_epoch])

    def min_pinned_version_id(self) -> int:
        with self._lock:
            return min([*self._pinned_versions.values(), self._version.id])

    # -- compaction -----------------------------------------------------------------------------
    def get_compact_task(self) -> CompactTask | None:
        with self._lock:
            if self._running_task is not None:
                return None
            task = pick_compaction(
                self._version,
                self.compaction_config,
                task_id=next(self._task_ids),
                watermark=self.low_watermark(),
                dropped_table_ids=self._dropped_tables,
            )
            self._running_task = task
            return task

    def report_compact_task(self, task: CompactTask, outputs: list[SstableInfo] | None) -> bool:
        """Commit a finished task's outputs (None = the task failed). False if it no longer applies."""
        with self._lock:
            if self._running_task is None or self._running_task.task_id != task.task_id:
                return False
            self._running_task = None
            if outputs is None:
                return False
            cur = self._version
            present = cur.object_ids()
            if not set(task.input_object_ids()) <= present:
                self.sstables.delete_objects([s.object_id for s in outputs])
                return False
            new_l0, added = result_levels(task, outputs)
            self._apply(
                VersionDelta(
                    id=cur.id + 1,
                    prev_id=cur.id,
                    new_l0_sub_levels=tuple(new_l0),
                    added_to_levels=added,
                    removed_object_ids=tuple(task.input_object_ids()),
                )
            )
            return True

    def compact_once(self, should_stop: Callable[[], bool] | None = None) -> bool:
        """Pick, run and report one task in this thread (True if a task was committed).

        A task cancelled through `should_stop` is reported as failed and False returned."""
        task = self.get_compact_task()
        if task is None:
            return False
        try:
            outputs = run_compaction(self.sstables, task, should_stop)
        except CompactionCancelled:
            self.report_compact_task(task, None)
            return False
        except Exception:
            self.report_compact_task(task, None)
            raise
        return self.report_compact_task(task, outputs)

    def compact_until_idle(self, max_tasks: int = 1000) -> int:
        n = 0
        while n < max_tasks and self.compact_once():
            n += 1
        return n

    # -- garbage collection ---------------------------------------------------------------------
    def vacuum(self, min_retention_sec: float | None = None, now: float | None = None) -> int:
        """Delete objects that compaction replaced, that no pinned version still references and
        that have been unreferenced for `min_retention_sec` (default `vacuum_retention_sec`)."""
        retention = self.vacuum_retention_sec if min_retention_sec is None else min_retention_sec
        now = time.time() if now is None else now
        min_pinned = self.min_pinned_version_id()
        rows = self.meta.query(
            "SELECT object_id FROM hummock_stale_object WHERE removed_in_version <= ? AND removed_at <= ?",
            (min_pinned, now - retention),
        )
        ids = [int(str(r[0])) for r in rows]
        if not ids:
            return 0
        self.sstables.delete_objects(ids)
        with self.meta.transaction() as c:
            c.executemany("DELETE FROM hummock_stale_object WHERE object_id = ?", [(i,) for i in ids])
        return len(ids)

    def full_gc(self, retention_sec: float = DEFAULT_GC_RETENTION_SEC, now: float | None = None) -> int:
        """Delete SST objects referenced by no version that are older than `retention_sec`
        (written by failed or retried writers; the age protects uploads still in flight)."""
        now = time.time() if now is None else now
        with self._lock:
            live = self._version.object_ids()
            stale = {int(str(r[0])) for r in self.meta.query("SELECT object_id FROM hummock_stale_object")}
        doomed = []
        for obj in self.sstables.store.list("hummock/sst/"):
            oid = object_id_of_path(obj.path)
            if oid is None or oid in live or oid in stale:
                continue
            if now - obj.last_modified >= retention_sec:
                doomed.append(oid)
        if doomed:
            self.sstables.delete_objects(doomed)
        return len(doomed)


class CompactorThread:
    """Runs compaction and vacuum in the background (the embedded mode's compactor node)."""

    def __init__(self, manager: HummockManager, interval: float = 0.5) -> None:
        self.manager = manager
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="piestream-compactor", daemon=True)
        self.errors: list[BaseException] = []

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.manager.compact_once(self._stop.is_set)
                if self._stop.is_set():
                    break
                self.manager.vacuum()
            except Exception as e:  # keep compacting: a failed task is reported and retried later
                log.exception("compaction failed")
                self.errors.append(e)
                worked = False
            if not worked:
                self._stop.wait(self.interval)

    def stop(self) -> None:
        """Stop and wait: a running task is cancelled at its next output SST, so the wait is short
        and the meta store it reports to is still open (closing it under a running task logged
        "compaction failed ... Cannot operate on a closed database")."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
