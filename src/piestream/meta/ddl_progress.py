"""How far a new streaming job's backfill has come (RisingWave's ``rw_ddl_progress``).

The backfill actors keep, per upstream vnode, whether it is done and how many snapshot rows
they emitted, in their state tables; the progress is read from those tables at the committed
epoch, so it is the same after a restart and needs no report path from the actors. The total is
an estimate until the backfill is done (then it is the rows done): rows hash evenly over vnodes,
so once some vnodes are done it is their rows per vnode times all vnodes; before that the
upstream table's key count in SST metadata (as RisingWave; it counts versions not yet compacted).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from piestream.common.errors import PiestreamError
from piestream.plan.backfill import LEGACY_STATE_COLUMNS, BackfillNode
from piestream.plan.fragment import Fragment
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.hummock.version import HummockVersion
from piestream.storage.table.storage_table import StorageTable


@dataclass(frozen=True)
class BackfillProgress:
    rows_done: int
    rows_total: int  # estimated while running; exact when done
    vnodes_done: int
    vnodes_total: int

    @property
    def done(self) -> bool:
        return self.vnodes_done >= self.vnodes_total

    @property
    def percent(self) -> float:
        if self.done:
            return 100.0
        return min(99.99, 100.0 * self.rows_done / self.rows_total) if self.rows_total else 0.0

    def describe(self) -> str:
        return f"{self.rows_done:,} of ~{self.rows_total:,} rows ({self.percent:.1f}%)"


def backfill_nodes(fragments: Sequence[Fragment]) -> list[BackfillNode]:
    return [n for f in fragments for n in f.root.walk() if isinstance(n, BackfillNode)]


def table_key_counts(version: HummockVersion) -> dict[int, int]:
    """Keys per table id in the version's SSTs (an SST's count split among its tables)."""
    keys: dict[int, int] = defaultdict(int)
    for sst in version.all_ssts():
        n = max(1, len(sst.table_ids))
        for t in sst.table_ids:
            keys[t] += sst.key_count // n
    return dict(keys)


def read_progress(
    storage: HummockStorage, epoch: int, nodes: Sequence[BackfillNode], key_counts: dict[int, int]
) -> BackfillProgress | None:
    """The progress of a job's backfills at `epoch` (None: the job backfills nothing)."""
    if not nodes:
        return None
    rows_done = vnodes_done = vnodes_total = total = 0
    for n in nodes:
        vnodes = n.upstream.vnode_count
        vnodes_total += vnodes
        rows = np.zeros(0, np.int64)
        done = np.zeros(0, bool)
        for chunk in StorageTable(n.state_table, storage, epoch).scan():  # a row per vnode at most
            done = np.concatenate([done, chunk.columns[1].fill_null(False).to_numpy(zero_copy_only=False)])
            if len(n.state_table.columns) > LEGACY_STATE_COLUMNS:
                counts = chunk.columns[2].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            else:
                counts = np.zeros(chunk.capacity, np.int64)
            rows = np.concatenate([rows, counts])
        n_done = int(done.sum())
        vnodes_done += n_done
        rows_done += int(rows.sum())
        if n_done:
            estimate = int(rows[done].sum()) * vnodes // n_done
        else:
            estimate = key_counts.get(n.upstream.table_id, 0)
        total += max(int(rows.sum()), estimate)
    p = BackfillProgress(rows_done, total, vnodes_done, vnodes_total)
    return BackfillProgress(rows_done, rows_done, vnodes_done, vnodes_total) if p.done else p


def backfill_finished(storage: HummockStorage, epoch: int, fragments: Sequence[Fragment]) -> bool:
    """Whether a job's rows at `epoch` are all its query's: every backfill in it is done there.
    The state tables commit with the epoch, so this holds for any reader of the committed
    version, including one in another process (the Spark data source) or after a restart."""
    p = read_progress(storage, epoch, backfill_nodes(fragments), {})
    return p is None or p.done


def still_creating(kind: str, name: str) -> PiestreamError:
    """The error for reading (or building on) a relation whose backfill is not done: its
    committed rows are only part of its query's (RisingWave hides a creating MV the same way)."""
    return PiestreamError(
        f'{kind} "{name}" is still being created: its backfill is not done',
        sqlstate="55000",  # object_not_in_prerequisite_state
        hint="See rw_catalog.rw_ddl_progress; it can be read once the backfill finished.",
    )


@dataclass(frozen=True)
class DdlJob:
    """A job created by a statement still running (or recovered mid-backfill)."""

    job_id: int
    name: str
    statement: str
    started_at: dt.datetime


class DdlProgressTracker:
    """Reads backfill progress from a database snapshot; remembers when each DDL started."""

    def __init__(
        self,
        snapshot: Callable[[], tuple[HummockStorage, int, int, int]],
        release: Callable[[int, int], None],
        fragments_of: Callable[[int], Sequence[Fragment]],
    ) -> None:
        self._snapshot = snapshot
        self._release = release
        self._fragments_of = fragments_of
        self._lock = threading.Lock()
        self.started: dict[int, DdlJob] = {}
        #: jobs backfilling with no statement waiting (resumed after a restart)
        self.resumed: set[int] = set()

    def start(self, job_id: int, name: str, statement: str) -> None:
        with self._lock:
            self.started[job_id] = DdlJob(job_id, name, statement, dt.datetime.now(dt.UTC))

    def finish(self, job_id: int, *, done: bool = True) -> None:
        """The statement ended; a job it left not `done` (a failed rebuild) stays refused."""
        with self._lock:
            self.started.pop(job_id, None)
            if not done:
                self.resumed.add(job_id)

    def backfilling(self, job_id: int) -> bool:
        """Whether the job's rows may still be incomplete (a batch read of it is refused)."""
        with self._lock:
            return job_id in self.started or job_id in self.resumed

    def resume(self, job_ids: Sequence[int]) -> None:
        """At open: remember the jobs whose backfill a restart interrupted."""
        progress = self.read([(j, self._fragments_of(j)) for j in job_ids])
        with self._lock:
            self.resumed = {j for j, p in progress.items() if not p.done}

    def on_commit(self, epoch: int) -> None:
        """After each commit while resumed backfills run: forget the ones now done."""
        with self._lock:
            jobs = sorted(self.resumed)
        if not jobs:
            return
        progress = self.read([(j, self._fragments_of(j)) for j in jobs])
        with self._lock:
            self.resumed -= {j for j in jobs if j not in progress or progress[j].done}

    def read(self, jobs: Sequence[tuple[int, Sequence[Fragment]]]) -> dict[int, BackfillProgress]:
        """Progress of each (job id, its fragments) that backfills, at the committed epoch."""
        wanted = [(j, backfill_nodes(frags)) for j, frags in jobs]
        wanted = [(j, nodes) for j, nodes in wanted if nodes]
        if not wanted:
            return {}
        storage, epoch, vpin, spin = self._snapshot()
        try:
            counts = table_key_counts(storage.version)
            out = {}
            for j, nodes in wanted:
                p = read_progress(storage, epoch, nodes, counts)
                if p is not None:
                    out[j] = p
            return out
        finally:
            self._release(vpin, spin)


class NoticeTimer:
    """When to tell a waiting client how far its statement is: every `interval` seconds."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = time.monotonic() + interval

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        return True
