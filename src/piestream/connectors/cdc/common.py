"""What the CDC connectors (``postgres-cdc``, ``mysql-cdc``) share: their errors, an unreachable
upstream as `SourceUnavailable` (the barrier manager pauses the source), the process-local
snapshot transactions, the read's snapshot / stream dispatch, and what the DDL handlers and
the operations view ask of a connector (`CdcConnector`).

Each connector follows one upstream table per split, snapshot first (a consistent snapshot whose
position is where the stream starts), then its change log; the split's offset (`CdcOffset`) is
state, committed with the epoch's rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from piestream.common.chunk import NEW_KEYS_METADATA, Op
from piestream.common.epoch import EpochPair
from piestream.common.errors import PiestreamError
from piestream.connectors.cdc.offset import CdcOffset
from piestream.plan.source import SourceSpec
from piestream.stream.connector import ReadResult, SourceUnavailable

log = logging.getLogger(__name__)


class CdcError(PiestreamError):
    """The upstream refused or lost something piestream needs (the job cannot go on)."""

    sqlstate = "55000"  # object_not_in_prerequisite_state


class UpstreamUnavailable(PiestreamError):
    """The upstream cannot be reached (at CREATE: the statement's error; in a read: the source
    pauses, `SourceUnavailable`)."""

    sqlstate = "08001"


@dataclass
class Health:
    """What the operations view shows of one followed table (this process's view)."""

    last_error: str | None = None
    last_error_at: float | None = None
    failures: int = 0  # consecutive failed reads
    rows: int = 0
    confirmed_lsn: int | None = None


#: per followed table (its slot / binlog client name)
HEALTH: dict[str, Health] = {}


class Snapshot(Protocol):
    """An open consistent-snapshot transaction of this process (the copy runs in it)."""

    def close(self) -> None: ...


class Snapshots:
    """This process's open snapshot transactions by table key: a snapshot lives in a connection,
    so it is reused by the next epochs' chunks here; elsewhere (a restart, another process) the
    copy goes on in a fresh one (the connectors' docstrings say why that is still exact)."""

    def __init__(self) -> None:
        self._open: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            return self._open.get(key)

    def keep(self, key: str, snap: Snapshot) -> None:
        with self._lock:
            old = self._open.pop(key, None)
            self._open[key] = snap
        if old is not None and old is not snap:
            old.close()

    def drop(self, key: str) -> None:
        with self._lock:
            old = self._open.pop(key, None)
        if old is not None:
            old.close()


class ChunkAhead:
    """The next snapshot chunk, copied in the background while the pipeline processes this one:
    the upstream's COPY (its wall time is the upstream's work and the network's, the GIL free
    meanwhile) overlaps the epoch instead of lengthening the next. Exact by construction: the
    copy runs in the same snapshot transaction, with the same cursor and budget, so it is the
    chunk a read of that offset would copy; a read of any other offset or budget (a retried
    epoch, a smaller budget) waits for it, drops it and copies its own. One copy at a time on
    the snapshot's connection: `take` and `wait` join the background one first."""

    def __init__(self) -> None:
        self._key: object = None
        self._thread: threading.Thread | None = None
        self._value: Any = None
        self._error: BaseException | None = None

    def start(self, key: object, copy: Callable[[], Any]) -> None:
        """Copy the chunk `key` names in the background (`copy()`, on the snapshot's connection)."""
        self.wait()

        def run() -> None:
            try:
                self._value = copy()
            except BaseException as e:  # handed to the read that takes this chunk
                self._error = e

        self._key, self._value, self._error = key, None, None
        self._thread = threading.Thread(target=run, name="cdc-chunk-ahead", daemon=True)
        self._thread.start()

    def take(self, key: object) -> Any | None:
        """The chunk copied ahead if it is `key`'s (its error raised here, as a read's own would
        be), else None; either way nothing runs in the background after this."""
        self.wait()
        found, value, error = self._key == key and self._key is not None, self._value, self._error
        self._key, self._value, self._error = None, None, None
        if not found:
            return None
        if error is not None:
            raise error
        return value

    def wait(self) -> None:
        """Wait for the background copy (before the connection is used or closed)."""
        t, self._thread = self._thread, None
        if t is not None:
            t.join()


class CdcReader:
    """The read of a CDC split: one snapshot chunk or one batch of the change stream. An
    unreachable upstream raises `SourceUnavailable` (08006), as Kafka's reader does, rather than
    returning less than the committed offset says exists: the barrier manager reruns the epoch
    with the source paused and backs off, so other jobs keep committing and every attempt of an
    epoch reads the source fully or not at all. Subclasses give the connector's steps."""

    connector: str = "cdc"
    hints_new_keys = True  # snapshot chunks carry NEW_KEYS_METADATA (stream.connector.HINTS_NEW_KEYS)

    @property
    def key(self) -> str:
        """The followed table's name in this process's registries (HEALTH, snapshots)."""
        raise NotImplementedError

    @property
    def qualified(self) -> str:
        raise NotImplementedError

    def transient(self) -> tuple[type[BaseException], ...]:
        """Errors meaning the upstream is (momentarily) unreachable: the source pauses."""
        return (UpstreamUnavailable,)

    def splits(self) -> list[str]:
        """One split: the followed table (RisingWave's CDC source has one split too)."""
        return [self.qualified]

    def reset(self) -> None:
        """Forget this process's connections after a lost one."""

    def end_snapshot(self) -> None:
        """Close this process's snapshot transaction (the copy is complete)."""

    def start(self) -> CdcOffset:
        """The first read: the consistent snapshot and where the stream starts."""
        raise NotImplementedError

    def snapshot_chunk(self, off: CdcOffset, budget: int) -> ReadResult:
        raise NotImplementedError

    def stream(self, off: CdcOffset, budget: int) -> ReadResult:
        raise NotImplementedError

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        health = HEALTH.setdefault(self.key, Health())
        try:
            off = self.start() if not offset else CdcOffset.from_json(offset)
            result = self.snapshot_chunk(off, budget) if off.phase == "snapshot" else self.stream(off, budget)
        except self.transient() as e:
            # a lost connection mid-read is the same fault: this attempt fails, the source pauses
            self._failed(health, e)
            self.reset()
            raise SourceUnavailable(health.last_error or "") from None
        health.failures = 0
        health.rows += result.consumed
        return result

    def chunk_result(
        self,
        off: CdcOffset,
        batches: list[pa.RecordBatch],
        n: int,
        budget: int,
        last_key: Callable[[], tuple[str, ...]],
        errors: list[tuple[str, str]] | None = None,
    ) -> ReadResult:
        """A snapshot chunk's result: `n` rows copied (inserts) after `off`'s cursor. A chunk
        shorter than the budget ends the copy (the stream starts at the snapshot's position,
        which `off` keeps); else the cursor moves to the chunk's last key (`last_key()`, text).

        The batches carry the new-keys hint (`NEW_KEYS_METADATA`: the table's Materialize skips
        its conflict lookup). It holds because while the copy runs the table holds exactly the
        rows copied so far, every one with a key up to the cursor: the stream is read only once
        the copy is done (the phase), the committed cursor commits with the rows it covers (a
        restart or a retried epoch resumes from both alike, a fresh snapshot copying only keys
        after it), a connector's table takes no DML, COPY or sink, and the chunk's keys are
        after the cursor in the upstream's order and unique there (its primary key)."""
        hint = {NEW_KEYS_METADATA: b"1"}
        batches = [b.replace_schema_metadata({**(b.schema.metadata or {}), **hint}) for b in batches]
        if n < budget:
            self.end_snapshot()
            new = replace(off, phase="stream", cursor=None, snapshot_rows=off.snapshot_rows + n)
        else:
            new = replace(off, cursor=last_key(), snapshot_rows=off.snapshot_rows + n)
        ops = [np.full(n, Op.INSERT, np.int8)] if n else []
        return ReadResult(batches, new.to_json(), n, ops=ops, errors=errors or [])

    def _failed(self, health: Health, e: BaseException) -> None:
        health.failures += 1
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        health.last_error = f"{self.connector} {self.qualified}: {first}"
        health.last_error_at = time.time()
        log.warning("%s", health.last_error)


@dataclass(frozen=True)
class CdcStatus:
    """One CDC table's row of ``rw_cdc_sources`` as its connector sees it upstream."""

    upstream_table: str
    slot_name: str  # PostgreSQL: the replication slot; MySQL: the binlog client's server id
    committed: str | None  # the committed position, in the upstream's notation
    confirmed: str | None  # what the upstream was told is durable (PostgreSQL only)
    lag_bytes: int | None
    lag_seconds: float | None


@dataclass(frozen=True)
class CdcConnector:
    """What the DDL handlers and the operations view ask of a CDC connector."""

    #: CREATE SOURCE: the upstream answers and is set up for CDC
    check_source: Callable[[SourceSpec], None]
    #: CREATE TABLE: everything checked upstream before the table exists
    check_table: Callable[[SourceSpec, Sequence[str]], object]
    #: the options of a table ``FROM`` a shared source (its own slot / client id)
    table_options: Callable[[dict[str, str], str], dict[str, str]]
    #: after DROP TABLE: free what piestream made upstream
    drop: Callable[[Mapping[str, str], str], None]
    #: the operations view's row
    status: Callable[[Mapping[str, str], str, CdcOffset | None], CdcStatus]
    #: the upstream's estimate of the table's rows (the snapshot's progress), None if unknown
    estimate_rows: Callable[[Mapping[str, str], str], int | None]


class Changes:
    """One stream read's changes of the followed table, what both change logs keep alike: the
    budget (upstream changes taken, `used`; a key change is one change but two ops), the changes
    of the current transaction already applied (`applied`: a transaction larger than a budget
    spans reads), the ops in log order and the upstream TRUNCATEs among them. A connector's
    subclass feeds it its log and says where the log stands (`position`) and how its rows
    become columns (`batch`)."""

    def __init__(self, off: CdcOffset, budget: int) -> None:
        self.off = off
        self.budget = budget
        self.applied = off.applied
        self.commit_ts = off.commit_ts_us
        self.ops: list[int] = []
        self.truncates: list[int] = []  # upstream TRUNCATEs, as positions among the ops
        self.used = 0

    def truncate(self) -> None:
        """An upstream TRUNCATE of the table here in the log: every row goes."""
        self.truncates.append(len(self.ops))
        self.used += 1

    def position(self) -> CdcOffset:
        """The offset after the changes taken."""
        raise NotImplementedError

    def batch(self, errors: list[tuple[str, str]]) -> pa.RecordBatch:
        """The rows of `ops`, converted column-wise (a value that does not fit: `errors`)."""
        raise NotImplementedError

    def result(self) -> ReadResult:
        off = self.position().to_json()
        if not self.used:
            return ReadResult([], off, 0)
        errors: list[tuple[str, str]] = []
        batch = self.batch(errors) if self.ops else None
        ops = np.asarray(self.ops, np.int8)
        return changes_result(batch, ops, self.truncates, off, self.used, errors)


def changes_result(
    batch: pa.RecordBatch | None,
    ops: np.ndarray,
    truncates: Sequence[int],
    offset: str,
    consumed: int,
    errors: list[tuple[str, str]] | None = None,
) -> ReadResult:
    """A stream read's result: the changes `batch` with their `ops`, and the upstream TRUNCATEs
    of the table at row positions `truncates` (the batch is cut there: ``truncate_at`` names
    batches). `consumed`: the upstream changes taken (a TRUNCATE is one, as a row's change is; an
    update that changes the key is one change but two ops)."""
    n = len(ops)
    batches: list[pa.RecordBatch] = []
    op_list: list[np.ndarray] = []
    at: list[int] = []
    start = 0
    for cut in [*truncates, n]:
        if cut > start:
            assert batch is not None
            batches.append(batch.slice(start, cut - start))
            op_list.append(ops[start:cut])
            start = cut
        if len(at) < len(truncates):
            at.append(len(batches))
    return ReadResult(batches, offset, consumed, ops=op_list, errors=errors or [], truncate_at=at)


def lag_seconds(off: CdcOffset | None, lag_bytes: int | None) -> float | None:
    """Seconds since the upstream committed the last applied transaction while log is pending
    (0 when none is)."""
    if off is None or off.phase != "stream" or lag_bytes is None:
        return None
    if not lag_bytes:
        return 0.0
    if off.commit_ts_us is None:
        return None
    return max(0.0, time.time() - off.commit_ts_us / 1e6)
