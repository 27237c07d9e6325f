"""The barrier manager (seed 001 "Checkpointing in Streaming"; reference §6.10).

Every `barrier_interval` it injects a barrier: the epoch's DML and sources run through every
fragment of every running job as one job (`EpochRunner`), each actor reports the SSTs it
uploaded, and once every actor has reported ("collected") the epoch is committed in one
meta-store transaction: a batch read then sees all MVs at that epoch or none of it. DML statements
are acknowledged after the epoch holding them commits; `flush()` forces a barrier and waits.

If an epoch fails (a task failed beyond Spark's retries, an actor did not report), nothing of it
is committed: its uploads become orphans for GC, its DML stays queued and the epoch is retried
from the same committed state — so nothing is lost and nothing is applied twice.

A transaction block's COMMIT hands all its changes (every table's, and the tables it created) to
the queue as one `TransactionCommit`: an epoch takes it whole or refuses it. It is refused with
40001 when its writes overlap those of an epoch committed after its snapshot, or of changes queued
before it in the same epoch (first committer wins, `write_conflicts`).

Data errors normally never fail an epoch (actors turn them into NULLs and error records, which
the reports carry to `errors`); in strict mode one does, and is not retried (the same input fails
every attempt): the epoch's DML fails with it. A job whose epochs keep failing for another reason
(a bug, an exhausted resource) is *isolated*: after `MAX_EPOCH_ATTEMPTS` failed attempts blamed
on one of its fragments, it and the jobs downstream of it are marked failed (`on_job_failed`:
the catalog records it), removed from the running graph, and the epoch runs again without them,
so the rest of the database keeps committing and its sources keep advancing.

The running graph is an immutable `StreamGraph` swapped whole under the manager's lock, which
also spans every epoch: a graph change (`add_fragments`, `remove_job`, or several inside
`paused()`) happens between epochs, and an epoch plans from the snapshot it took, encoded in the
plan format, never from objects other threads may touch while Spark serializes the plan.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochGenerator, EpochPair, epoch_from_ms, epoch_to_unix_ms
from piestream.common.errors import PiestreamError, SerializationFailure, is_data_error
from piestream.common.metrics import FragmentTotals, Histogram
from piestream.common.scalar import constant_array
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.streaming_errors import StreamingErrorLog
from piestream.meta.write_conflicts import CommittedWrites, chunk_keys, overlaps
from piestream.plan.fragment import ACTOR_INDEX_BITS, Fragment, StreamGraph
from piestream.plan.node import DmlNode
from piestream.plan.serde import encode_fragment
from piestream.plan.source import SourceNode, SourceSpec
from piestream.runtime.data_plane import ChannelStats
from piestream.runtime.epoch_plan import EpochPlan, plan_epoch
from piestream.runtime.exchange import ActorReport
from piestream.runtime.runners import EpochRunner, epoch_error
from piestream.storage.hummock.store import StorageOptions
from piestream.storage.hummock.version import HummockVersion, TableWatermark
from piestream.storage.table.desc import TableDesc
from piestream.stream.connector import CURRENT_SPLITS, source_connector, unavailable_source
from piestream.stream.executor import StreamingConfig
from piestream.stream.message import Barrier, BarrierKind

log = logging.getLogger(__name__)

MAX_EPOCH_ATTEMPTS = 3
#: a source whose upstream was unreachable is paused this long, doubling per failure
SOURCE_BACKOFF_S = 0.5
MAX_SOURCE_BACKOFF_S = 8.0


@dataclass(frozen=True)
class EpochFailure:
    """One failed attempt of an epoch (the dashboard's failures view)."""

    epoch: int
    attempt: int
    error: str
    at: float  # unix seconds


@dataclass
class EpochStats:
    epoch: int
    seconds: float
    actors: int
    ssts: int
    rows_in: float
    block_cache_hit_rate: float
    cache_warm_actors: int = 0  # actors that ran in a worker holding their caches (valid)
    cache_hits: int = 0  # keys the operator caches answered (HashAgg groups, join keys, pks ...)
    cache_misses: int = 0  # ... and keys they sent to the state store
    cache_bytes: int = 0  # the operator caches' size after the epoch (all workers)
    #: exchange payload (chunks from one actor to another) that passed through the driver
    #: process, all bytes on the driver's wire to its tasks, and the bytes the tasks sent each
    #: other on the leased runner's data plane (`EpochRunner.wire_stats`)
    driver_exchange_bytes: int = 0
    driver_wire_bytes: int = 0
    peer_exchange_bytes: int = 0
    #: the data plane's channels (sender slot -> receiver slot) in this epoch: rows, bytes,
    #: time the sender spent sending and the receiver's reader waited for credit (back-pressure)
    channels: tuple[ChannelStats, ...] = ()

    @property
    def cache_hit_rate(self) -> float:
        """Share of operator-cache lookups answered from the cache (1.0 when none were made)."""
        n = self.cache_hits + self.cache_misses
        return self.cache_hits / n if n else 1.0


#: the actor report numbers summed per fragment for /metrics (see runtime.actor_task)
REPORTED_TOTALS = (
    *("rows_in", "rows_out", "cache_hits", "cache_misses"),
    *("rows.source", "rows.mview", "rows.sink"),  # counted by those executors (ActorContext.count)
)


@dataclass
class BarrierMetrics:
    """What the barrier loop measures for monitoring, updated once per epoch (never per row)."""

    #: an epoch from the barrier's injection to its commit (RisingWave's meta_barrier_duration)
    barrier_latency: Histogram = field(default_factory=Histogram)
    #: the run of the epoch's actors (the Spark job(s), retries included)
    job_seconds: Histogram = field(default_factory=Histogram)
    #: the meta-store commit of an epoch (SSTs made durable, the new version written)
    commit_seconds: Histogram = field(default_factory=Histogram)
    fragments: FragmentTotals = field(default_factory=FragmentTotals)
    epochs_committed: int = 0
    epoch_failures: int = 0  # failed attempts (each retried or the job isolated)
    dml_rows: int = 0  # rows of INSERT/UPDATE/DELETE and inbox changes the epochs took in


def _wire_stats(runner: object) -> dict[str, Any]:
    """The runner's driver traffic of the epoch it ran last (none for runners without a wire)."""
    stats = getattr(runner, "wire_stats", None)
    return dict(stats()) if callable(stats) else {}


class EpochInput(Protocol):
    """Changes from outside the DML queue (the Spark inbox) an epoch takes in at its start and
    commits atomically: `record` runs inside the epoch's meta-store commit transaction."""

    dml: dict[int, list[StreamChunk]]

    def record(self, conn: Any) -> None: ...

    def committed(self) -> None: ...


def _recorder(records: list[Callable[[Any], None]]) -> Callable[[Any], None]:
    def record(conn: Any) -> None:
        for fn in records:
            fn(conn)

    return record


@dataclass
class _Dml:
    table_id: int
    chunk: StreamChunk
    done: Future[int] = field(default_factory=Future)


@dataclass
class TransactionCommit:
    """A transaction block's changes, committed in one epoch or not at all.

    `keys` is its write set (memcomparable pks by table id), checked against epochs committed
    after `snapshot_epoch`. `fragments` are the jobs of tables it created (they join the graph
    with the epoch that commits it); `record` writes their catalog entries inside the epoch's
    meta-store transaction, and `committed` runs once that transaction committed."""

    dml: dict[int, list[StreamChunk]]
    keys: dict[int, pa.Array]
    snapshot_epoch: int
    names: dict[int, str] = field(default_factory=dict)  # table names, for error messages
    fragments: list[Fragment] = field(default_factory=list)
    record: Callable[[Any], None] | None = None
    committed: Callable[[], None] | None = None
    done: Future[int] = field(default_factory=Future)


_Queued = _Dml | TransactionCommit


def _widened(chunk: StreamChunk, desc: TableDesc | None) -> StreamChunk:
    """Rows an outside writer (the Spark inbox) built for a table's columns before ALTER TABLE ADD
    COLUMN appended more: the added columns' defaults (NULL if none), as an INSERT omitting them
    writes — the writer cannot be refused, its batch commits with this epoch or is retried."""
    if desc is None or len(chunk.columns) >= len(desc.columns):
        return chunk
    n = chunk.capacity
    extra = [constant_array(c.missing, c.data_type, n) for c in desc.columns[len(chunk.columns) :]]
    return chunk.with_columns([*chunk.columns, *extra])


def _schema_changed(d: _Queued, descs: dict[int, TableDesc]) -> PiestreamError | None:
    """40001 for rows built for a table's columns before an ALTER TABLE changed them (a statement
    that bound before it, a transaction block that wrote before it): none of them is applied."""
    chunks = {d.table_id: [d.chunk]} if isinstance(d, _Dml) else d.dml
    for table_id, cs in chunks.items():
        desc = descs.get(table_id)
        if desc is not None and any(len(c.columns) != len(desc.columns) for c in cs):
            name = desc.name if isinstance(d, _Dml) else d.names.get(table_id, desc.name)
            return SerializationFailure(
                "could not serialize access due to concurrent update",
                detail=f'Table "{name}" was altered after these rows were written.',
            )
    return None


class _EpochWrites:
    """The keys the changes taken into one epoch write, computed when something asks."""

    def __init__(self, graph: StreamGraph) -> None:
        self.descs = {t.table_id: t for t in graph.all_tables()}
        self._pending: dict[int, list[StreamChunk]] = {}
        self._keys: dict[int, list[pa.Array]] = {}

    def add(self, d: _Queued) -> None:
        if isinstance(d, _Dml):
            self._pending.setdefault(d.table_id, []).append(d.chunk)
        else:
            for t, k in d.keys.items():
                self._keys.setdefault(t, []).append(k)

    def add_chunks(self, dml: dict[int, list[StreamChunk]]) -> None:
        for t, chunks in dml.items():
            self._pending.setdefault(t, []).extend(chunks)

    def keys(self, table_id: int) -> list[pa.Array]:
        chunks = self._pending.pop(table_id, [])
        desc = self.descs.get(table_id)
        if chunks and desc is not None:
            self._keys.setdefault(table_id, []).extend(chunk_keys(desc, c) for c in chunks)
        return self._keys.get(table_id, [])

    def all(self) -> dict[int, list[pa.Array]]:
        return {t: self.keys(t) for t in {*self._pending, *self._keys}}


class JobNotRunning(PiestreamError):
    sqlstate = "55000"  # object_not_in_prerequisite_state


def _tables_of(d: _Queued) -> set[int]:
    return {d.table_id} if isinstance(d, _Dml) else set(d.dml)


def _chunks_of(d: _Queued) -> dict[int, list[StreamChunk]]:
    return {d.table_id: [d.chunk]} if isinstance(d, _Dml) else d.dml


def dml_tables(graph: StreamGraph) -> set[int]:
    """The tables whose DML the graph takes."""
    return {n.table_id for f in graph.fragments.values() for n in f.root.walk() if isinstance(n, DmlNode)}


def downstream_jobs(graph: StreamGraph, job_id: int) -> set[int]:
    """`job_id` and every job reading it, directly or through others."""
    jobs = {job_id}
    todo = [f for f in graph.fragments.values() if f.job_id == job_id]
    while todo:
        f = todo.pop()
        for e in f.outputs:
            d = graph.fragments.get(e.downstream_fragment_id)
            if d is not None and d.job_id not in jobs:
                jobs.add(d.job_id)
                todo.extend(g for g in graph.fragments.values() if g.job_id == d.job_id)
    return jobs


class BarrierManager:
    """Drives epochs over the running stream graph."""

    def __init__(
        self,
        hummock: HummockManager,
        runner: EpochRunner,
        store_url: str,
        *,
        barrier_interval: float = 1.0,
        config: StreamingConfig | None = None,
        storage_options: StorageOptions | None = None,
    ) -> None:
        self.hummock = hummock
        self.runner = runner
        self.store_url = store_url
        self.barrier_interval = barrier_interval
        self.config = config or StreamingConfig()
        self.storage_options = storage_options or StorageOptions()
        self._graph = StreamGraph()
        self._encoded: dict[int, tuple[Fragment, bytes]] = {}  # the plan format of each fragment
        self.epochs = EpochGenerator()
        self.epochs.advance_past(hummock.max_committed_epoch)
        self._data_epoch = self.epochs.next()
        self._lock = threading.RLock()  # one epoch at a time; graph changes between epochs
        self._queue_lock = threading.Lock()
        self._dml: list[_Queued] = []
        self.writes = CommittedWrites()  # keys of recent epochs, for transactions' commit checks
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats: list[EpochStats] = []
        #: WatermarkFilter tables' global watermarks as of epoch `_watermarks_epoch` (committed),
        #: learnt from the actors' reports and sent in the plans so actors skip the tables' scans
        #: (`stream.watermark`); a table none reported on is read from storage, and learnt then
        self._watermarks: dict[int, bytes] = {}
        self._watermarks_epoch = -1
        self.metrics = BarrierMetrics()
        self.on_commit: list[Callable[[int], None]] = []
        self.epoch_inputs: list[Callable[[], EpochInput | None]] = []  # asked at each epoch's start
        #: called by the background loop before each epoch, holding no lock (changes it makes
        #: land between two epochs: ADAPTIVE jobs following the cluster's slots)
        self.between_epochs: list[Callable[[], object]] = []
        self.last_error: BaseException | None = None
        self.failures: deque[EpochFailure] = deque(maxlen=200)
        self.errors = StreamingErrorLog()  # errors jobs survived (rw_catalog.rw_streaming_errors)
        #: called (job ids, error, fragment) under the lock when jobs are isolated as failed
        self.on_job_failed: list[Callable[[list[int], PiestreamError, int | None], None]] = []
        self.failed_jobs: dict[int, PiestreamError] = {}  # isolated since this process started
        #: isolate a job that keeps failing (False: the epoch gives up its input instead)
        self.isolate_failing_jobs = True
        #: sources paused after their upstream was unreachable: name -> (failures, until when)
        self.paused_sources: dict[str, tuple[int, float]] = {}
        #: splits sources gained after they were planned (new Kafka partitions), by source
        #: name, only ever growing: asked of the connector (on this driver) at each epoch's
        #: start and fixed in that epoch's plan, so every attempt of it reads the same splits
        self.source_splits: dict[str, tuple[str, ...]] = {}
        self._split_readers: dict[str, tuple[SourceSpec, object]] = {}  # by source name

    # -- graph ----------------------------------------------------------------------------------
    @property
    def graph(self) -> StreamGraph:
        """The running graph (an immutable snapshot)."""
        return self._graph

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No epoch runs inside this block: changes made in it (graph and catalog) land together
        between two epochs. Re-entrant."""
        with self._lock:
            yield

    def add_fragments(self, fragments: Iterable[Fragment]) -> None:
        """Run these fragments from the next epoch; one of an existing id replaces it (new edges)."""
        with self._lock:
            self._graph = self._graph.with_fragments(fragments)

    def remove_job(self, job_id: int) -> list[Fragment]:
        """Stop a job's fragments (and the edges into them) from the next epoch; returns them."""
        with self._lock:
            self._graph, gone = self._graph.without_job(job_id)
            return gone

    def _encode(self, graph: StreamGraph) -> dict[int, bytes]:
        """The plan format of every fragment of `graph` (each encoded once while it runs)."""
        out = {}
        for fid, f in graph.fragments.items():
            cached = self._encoded.get(fid)
            if cached is None or cached[0] is not f:
                cached = (f, encode_fragment(f))
                self._encoded[fid] = cached
            out[fid] = cached[1]
        for fid in set(self._encoded) - set(graph.fragments):
            del self._encoded[fid]
        return out

    # -- DML ------------------------------------------------------------------------------------
    def submit_dml(self, table_id: int, chunk: StreamChunk) -> Future[int]:
        """Queue rows for a table; the future resolves to the epoch that committed them."""
        d = _Dml(table_id, chunk)
        with self._queue_lock:
            self._dml.append(d)
        return d.done

    def submit_transaction(self, t: TransactionCommit) -> Future[int]:
        """Queue a transaction's changes; the future resolves to the epoch that committed all of
        them, or fails (40001 on a write conflict) with none of them applied."""
        with self._queue_lock:
            self._dml.append(t)
        return t.done

    def pending_dml(self) -> int:
        with self._queue_lock:
            return len(self._dml)

    # -- epochs ---------------------------------------------------------------------------------
    @property
    def committed_epoch(self) -> int:
        return self.hummock.max_committed_epoch

    def run_epoch(self) -> int:
        """Inject one barrier, run the epoch to completion and commit it; returns the epoch."""
        with self._lock:
            inputs = [x for x in (fn() for fn in self.epoch_inputs) if x is not None]
            with self._queue_lock:
                queued = list(self._dml)
            graph, batch, writes = self._admit(queued)
            txns = [d for d in batch if isinstance(d, TransactionCommit)]
            dml: dict[int, list[StreamChunk]] = {}
            for d in batch:
                if isinstance(d, _Dml):
                    dml.setdefault(d.table_id, []).append(d.chunk)
                else:
                    for t, chunks in d.dml.items():
                        dml.setdefault(t, []).extend(chunks)
            for x in inputs:
                x_dml = {t: [_widened(c, writes.descs.get(t)) for c in cs] for t, cs in x.dml.items()}
                writes.add_chunks(x_dml)
                for t, chunks in x_dml.items():
                    dml.setdefault(t, []).extend(chunks)
            data_epoch = self._data_epoch
            # row ids of this epoch use its milliseconds and, for large DML, a few after: the
            # next epoch starts past them (RowIdGen)
            rows = sum(c.cardinality for chunks in dml.values() for c in chunks)
            self.epochs.advance_past(epoch_from_ms(epoch_to_unix_ms(data_epoch) + rows // 4096))
            next_epoch = self.epochs.next()
            # pinned while the epoch runs: compaction must not vacuum the SSTs its actors read
            vpin, version = self.hummock.pin_version()
            barrier = Barrier(EpochPair(next_epoch, data_epoch), BarrierKind.CHECKPOINT)
            started = time.perf_counter()
            try:
                reports, graph, batch = self._run_with_retries(
                    data_epoch, barrier, version, graph, dml, batch, inputs
                )
            finally:
                self.hummock.unpin_version(vpin)
            ran = time.perf_counter()
            txns = [d for d in batch if isinstance(d, TransactionCommit)]  # those still in it
            ssts = [s for r in reports for s in r.ssts]
            watermarks: dict[int, TableWatermark] = {}
            for r in reports:
                for t, w in r.watermarks.items():
                    watermarks[t] = watermarks[t].merged(w) if t in watermarks else w
            tables = {t.table_id for t in graph.all_tables()}
            records = [x.record for x in inputs] + [tc.record for tc in txns if tc.record is not None]
            with self.writes.lock:  # a transaction's snapshot is either before this or sees it
                self.hummock.commit_epoch(
                    data_epoch,
                    ssts,
                    tables,
                    new_watermarks=watermarks,
                    extra=_recorder(records) if records else None,
                )
                if self.writes.tracking:
                    self.writes.record(data_epoch, writes.all())
            committed = time.perf_counter()
            self._learn_watermarks(version.max_committed_epoch, data_epoch, reports, tables)
            self._graph = graph  # with the jobs of tables the committed transactions created
            for x in inputs:
                x.committed()
            for tc in txns:
                if tc.committed is not None:
                    tc.committed()
            self._data_epoch = next_epoch
            self._record(data_epoch, started, reports, len(ssts))
            self._measure(started, ran, committed, reports, rows)
            with self._queue_lock:
                done = {id(d) for d in batch}
                self._dml = [d for d in self._dml if id(d) not in done]
            for d in batch:
                d.done.set_result(data_epoch)
            self.errors.add_records(
                (e for r in reports for e in r.errors), {fid: f.job_id for fid, f in graph.fragments.items()}
            )
            for fn in self.on_commit:
                fn(data_epoch)
            return data_epoch

    def _admit(self, queued: list[_Queued]) -> tuple[StreamGraph, list[_Queued], _EpochWrites]:
        """What of the queue this epoch takes, in queue order, and the graph it runs: each
        transaction is checked against epochs committed after its snapshot and the changes
        taken before it; a conflicting one is refused at once (40001), with none of it applied."""
        graph = self._graph
        writes = _EpochWrites(graph)
        batch: list[_Queued] = []
        refused: list[tuple[_Queued, PiestreamError]] = []
        for d in queued:
            changed = _schema_changed(d, writes.descs)
            if changed is not None:
                refused.append((d, changed))
                continue
            if isinstance(d, TransactionCommit):
                with_new = graph.with_fragments(d.fragments) if d.fragments else graph
                err = self._conflict(d, with_new, writes)
                if err is not None:
                    refused.append((d, err))
                    continue
                if d.fragments:
                    graph = with_new
                    writes.descs.update((t.table_id, t) for f in d.fragments for t in f.tables())
            writes.add(d)
            batch.append(d)
        if refused:
            with self._queue_lock:
                gone = {id(d) for d, _ in refused}
                self._dml = [d for d in self._dml if id(d) not in gone]
            for d, err in refused:
                d.done.set_exception(err)
        return graph, batch, writes

    def _conflict(
        self, t: TransactionCommit, graph: StreamGraph, writes: _EpochWrites
    ) -> PiestreamError | None:
        def name(table_id: int) -> str:
            return t.names.get(table_id, str(table_id))

        running = {d.table_id for d in graph.all_tables()}
        for table_id in t.dml:
            if table_id not in running:
                return SerializationFailure(
                    "could not serialize access due to concurrent update",
                    detail=f'Table "{name(table_id)}" was dropped after this transaction began.',
                )
        hit = self.writes.conflict(t.snapshot_epoch, t.keys)
        if hit is None:
            hit = next(
                (tid for tid, k in t.keys.items() if any(overlaps(k, w) for w in writes.keys(tid))), None
            )
        if hit is None:
            return None
        if hit == -1:
            detail = "Too many writes committed since this transaction began to check it against them."
        else:
            detail = (
                f'A row of table "{name(hit)}" that this transaction changed was changed by another '
                "transaction that committed after this one began."
            )
        return SerializationFailure(
            "could not serialize access due to concurrent update",
            detail=detail,
            hint="Retry the transaction.",
        )

    def _plan(
        self,
        graph: StreamGraph,
        data_epoch: int,
        barrier: Barrier,
        version: HummockVersion,
        paused: tuple[str, ...] = (),
        splits: tuple[tuple[str, tuple[str, ...]], ...] = (),
    ) -> EpochPlan:
        config = replace(self.config, paused_sources=paused, source_splits=splits)
        known = self._watermarks if self._watermarks_epoch == version.max_committed_epoch else {}
        return plan_epoch(
            graph,
            self._encode(graph),
            data_epoch=data_epoch,
            barrier=barrier,
            committed_epoch=version.max_committed_epoch,
            version=version,
            store_url=self.store_url,
            config=config,
            storage_options=self.storage_options,
            global_watermarks=known,
        )

    def _learn_watermarks(
        self, before: int, epoch: int, reports: Sequence[ActorReport], tables: AbstractSet[int]
    ) -> None:
        """The filter tables' global watermarks once `epoch` committed over committed epoch
        `before`: the max of what its actors reported (each report holds the committed value it
        read, raised by its own filter), over what was known at `before` for tables no actor
        reported on (unchanged: a filter raises only after reading). Known values of another
        committed epoch are dropped; only one commit path exists, but a stale value would be a
        wrong watermark, so the epochs are checked rather than assumed."""
        known = dict(self._watermarks) if self._watermarks_epoch == before else {}
        seen: dict[int, bytes] = {}
        for r in reports:
            for t, w in r.global_watermarks.items():
                seen[t] = max(seen.get(t, b""), w)  # memcomparable: byte order is value order
        known.update(seen)
        self._watermarks = {t: w for t, w in known.items() if t in tables}
        self._watermarks_epoch = epoch

    def _epoch_splits(self, graph: StreamGraph) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The splits each source of `graph` reads this epoch beyond its planned ones, from its
        connector's ``current_splits()`` (which never waits on the upstream). A connector that
        cannot answer keeps what was found before: the list only grows."""
        out: dict[str, tuple[str, ...]] = {}
        seen: set[str] = set()
        for f in graph.fragments.values():
            for n in f.root.walk():
                if not isinstance(n, SourceNode) or n.source_name in seen:
                    continue
                seen.add(n.source_name)
                extra = self._new_splits(n)
                if extra:
                    out[n.source_name] = extra
        for name in [k for k in self._split_readers if k not in seen]:
            self._forget_splits(name)  # dropped: a new source of that name starts afresh
        return tuple(sorted(out.items()))

    def _forget_splits(self, name: str) -> None:
        self.source_splits.pop(name, None)
        cached = self._split_readers.pop(name, None)
        close = getattr(cached[1], "close", None) if cached is not None else None
        if close is not None:
            with contextlib.suppress(Exception):  # only the split lookup's own client
                close()

    def _new_splits(self, node: SourceNode) -> tuple[str, ...]:
        name = node.source_name
        known: tuple[str, ...] = ()
        try:
            cached = self._split_readers.get(name)
            if cached is None or cached[0] != node.spec:
                # another source under this name (dropped and created again, or altered): the
                # splits found for the old one are not its
                self._forget_splits(name)
                cached = self._split_readers[name] = (
                    node.spec,
                    source_connector(node.connector)(node.spec)[0],
                )
            known = self.source_splits.get(name, ())
            current = getattr(cached[1], CURRENT_SPLITS, None)
            if current is None:
                return known
            planned = set(node.split_ids) | set(known)
            new = tuple(s for s in current() if s not in planned)
        except Exception as e:  # never fails the epoch: the splits found so far are read
            log.warning("source %s: new splits not asked: %s", name, e)
            return known
        if new:
            self.source_splits[name] = known = (*known, *new)
        return tuple(s for s in known if s not in node.split_ids)

    def _pause_source(
        self, source: str, err: PiestreamError, graph: StreamGraph, fragment: int | None
    ) -> None:
        """Pause `source` (its upstream unreachable) for a back-off doubling per failure, and
        record the fault in rw_streaming_errors."""
        failures = self.paused_sources.get(source, (0, 0.0))[0] + 1
        delay = min(MAX_SOURCE_BACKOFF_S, SOURCE_BACKOFF_S * 2 ** (failures - 1))
        self.paused_sources[source] = (failures, time.monotonic() + delay)
        frag = graph.fragments.get(fragment) if fragment is not None else None
        self.errors.add_source_fault(
            -1 if frag is None else frag.job_id,
            -1 if fragment is None else fragment,
            f"Source {source}",
            err.sqlstate,
            f"{err.message} (source paused, retrying in {delay:.1f}s)",
        )
        log.warning("source %s paused for %.1fs: %s", source, delay, err.message)

    def _run_with_retries(
        self,
        data_epoch: int,
        barrier: Barrier,
        version: HummockVersion,
        graph: StreamGraph,
        dml: dict[int, list[StreamChunk]],
        batch: list[_Queued],
        inputs: list[EpochInput],
    ) -> tuple[list[ActorReport], StreamGraph, list[_Queued]]:
        """Run the epoch until it succeeds; returns its reports, the graph it ran and the queued
        changes it applied. Isolates a job that keeps failing (see the module docstring); gives
        up (raising the cause) on a data error in strict mode or a failure no job can be blamed
        for."""
        graph, dml, batch = self._without_stray(graph, dml, batch, inputs, None)
        now = time.monotonic()
        # fixed for every attempt of the epoch: a paused source reads nothing in all of them
        paused = tuple(sorted(s for s, (_, until) in self.paused_sources.items() if until > now))
        splits = self._epoch_splits(graph)  # also fixed for every attempt of the epoch
        plan = self._plan(graph, data_epoch, barrier, version, paused, splits)
        last: BaseException | None = None
        attempt = 0
        while True:
            try:
                reports = self.runner.run(plan, dml)
                for s in [s for s in self.paused_sources if s not in paused]:
                    del self.paused_sources[s]  # read in full this epoch: reachable again
                return reports, graph, batch
            except Exception as e:  # a failed epoch commits nothing; retry from the same state
                last = e
                self.last_error = e
                err, fragment = epoch_error(e)
                source = unavailable_source(err)
                if source is not None and source not in paused:
                    # the upstream unreachable: rerun the epoch (not counted) with the source
                    # paused, so other jobs and DML commit and no attempt emits partial reads
                    self.failures.append(EpochFailure(data_epoch, attempt + 1, err.message, time.time()))
                    self._pause_source(source, err, graph, fragment)
                    paused = tuple(sorted({*paused, source}))
                    plan = self._plan(graph, data_epoch, barrier, version, paused, splits)
                    continue
                attempt += 1
                self.failures.append(EpochFailure(data_epoch, attempt, err.message, time.time()))
                self.metrics.epoch_failures += 1
                log.warning("epoch %d attempt %d failed: %s", data_epoch, attempt, err)
                deterministic = is_data_error(err)  # strict mode: every attempt fails alike
                if attempt < MAX_EPOCH_ATTEMPTS and not deterministic:
                    continue
                culprit = graph.fragments.get(fragment) if fragment is not None else None
                if culprit is None or deterministic or not self.isolate_failing_jobs:
                    break
                graph, dml, batch = self._isolate(graph, culprit.job_id, err, fragment, dml, batch, inputs, e)
                plan = self._plan(graph, data_epoch, barrier, version, paused, splits)
                attempt = 0
        # give up on this epoch's DML so later statements can proceed; report the error to them:
        # its cause's SQLSTATE and message; the traceback only goes to the log
        assert last is not None
        err, _fragment = epoch_error(last)
        log.error("epoch %d failed %d times; giving up its input", data_epoch, attempt, exc_info=last)
        self._fail_dml(batch, err)
        # abandon the epoch's number too: the next epoch runs other input, and an executor cache
        # some attempt of this one left in a worker (caches are keyed by epoch) must never pass
        # for the committed state of a later epoch with the same number
        self._data_epoch = self.epochs.next()
        raise err

    def _fail_dml(self, batch: list[_Queued], err: PiestreamError) -> None:
        with self._queue_lock:
            done = {id(d) for d in batch}
            self._dml = [d for d in self._dml if id(d) not in done]
        for d in batch:
            d.done.set_exception(err)

    def _without_stray(
        self,
        graph: StreamGraph,
        dml: dict[int, list[StreamChunk]],
        batch: list[_Queued],
        inputs: list[EpochInput],
        err: PiestreamError | None,
    ) -> tuple[StreamGraph, dict[int, list[StreamChunk]], list[_Queued]]:
        """The epoch without the queued changes for tables `graph` does not run (a table whose
        job failed, or was dropped, takes no rows: they would be lost). They fail with `err`; a
        transaction touching such a table fails whole."""
        tables = dml_tables(graph)
        stray = [d for d in batch if not _tables_of(d) <= tables]
        if not stray:
            return graph, dml, batch
        self._fail_dml(
            stray, err or JobNotRunning("the table's streaming job is not running (it failed or was dropped)")
        )
        batch = [d for d in batch if _tables_of(d) <= tables]
        dml = {}
        for d in batch:
            for t, chunks in _chunks_of(d).items():
                dml.setdefault(t, []).extend(chunks)
        for x in inputs:
            for t, chunks in x.dml.items():
                if t in tables:
                    dml.setdefault(t, []).extend(chunks)
        return graph, dml, batch

    def _isolate(
        self,
        graph: StreamGraph,
        job_id: int,
        err: PiestreamError,
        fragment: int | None,
        dml: dict[int, list[StreamChunk]],
        batch: list[_Queued],
        inputs: list[EpochInput],
        cause: BaseException,
    ) -> tuple[StreamGraph, dict[int, list[StreamChunk]], list[_Queued]]:
        """Mark `job_id` and every job downstream of it failed and take them out of the graph;
        changes for a table among them fail with `err`, the rest of the epoch's stay."""
        jobs = downstream_jobs(graph, job_id)
        log.error(
            "streaming job %d keeps failing (%s); marking it%s failed and running without it",
            job_id,
            err,
            f" and its downstream jobs {sorted(jobs - {job_id})}" if len(jobs) > 1 else "",
            exc_info=cause,
        )
        running = self._graph
        for j in sorted(jobs):
            graph = graph.without_job(j)[0]
            running = running.without_job(j)[0]
        self._graph = running  # (the epoch's graph may hold jobs of uncommitted transactions)
        self.failed_jobs.update((j, err) for j in jobs)
        self.errors.add_job_failure(job_id, fragment, err)
        for fn in self.on_job_failed:
            fn(sorted(jobs), err, fragment)
        return self._without_stray(graph, dml, batch, inputs, err)

    def _record(self, epoch: int, started: float, reports: list[ActorReport], nssts: int) -> None:
        rows = sum(r.stats.get("rows_in", 0.0) for r in reports)
        hit = [r.stats.get("block_cache_hit_rate", 0.0) for r in reports]

        def total(name: str) -> int:
            return int(sum(r.stats.get(name, 0.0) for r in reports))

        self.stats.append(
            EpochStats(
                epoch,
                time.perf_counter() - started,
                len(reports),
                nssts,
                rows,
                sum(hit) / max(len(hit), 1),
                cache_warm_actors=total("executor_cache_warm"),
                cache_hits=total("cache_hits"),
                cache_misses=total("cache_misses"),
                cache_bytes=total("cache_bytes"),
                **_wire_stats(self.runner),
            )
        )
        del self.stats[:-1000]

    def _measure(
        self, started: float, ran: float, committed: float, reports: list[ActorReport], rows: int
    ) -> None:
        m = self.metrics
        m.barrier_latency.observe(time.perf_counter() - started)
        m.job_seconds.observe(ran - started)
        m.commit_seconds.observe(committed - ran)
        for r in reports:  # one per actor
            m.fragments.add(r.actor_id >> ACTOR_INDEX_BITS, r.stats, REPORTED_TOTALS)
        m.epochs_committed += 1
        m.dml_rows += rows

    def flush(self) -> int:
        """Force a barrier now and wait until it is committed (SQL FLUSH)."""
        return self.run_epoch()

    # -- background barriers --------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="piestream-barriers", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                for fn in self.between_epochs:
                    fn()
                self.run_epoch()
            except Exception:
                log.exception("barrier failed")
            delay = self.barrier_interval - (time.monotonic() - started)
            if delay > 0 and not self._wake.is_set():
                self._wake.wait(delay)
            self._wake.clear()

    def wake(self) -> None:
        """Start the next barrier now instead of at the next interval (DML waiting on it)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
