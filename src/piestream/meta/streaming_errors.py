"""The errors streaming jobs survived, as users see them (``rw_catalog.rw_streaming_errors``).

Actors report the data errors and inconsistent ops they survived with each epoch
(`StreamErrorRecord`); the barrier manager adds the reports of every *committed* epoch here (one
report per actor, so a retried task is not counted twice), and a job that failed is recorded
too. Entries are grouped by (job, fragment, kind, executor, SQLSTATE, message) with a count, a
sample row, and the times of the first and the last error. The log keeps the most recent
`max_entries` groups in memory (errors are a diagnostic, not data: a restart starts afresh; a
failed job's status is durable in the catalog). Each group is logged at most once per
`log_interval` seconds, with the count since its last line.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from piestream.common.errors import PiestreamError
from piestream.stream.errors import StreamErrorRecord

log = logging.getLogger(__name__)

JOB_FAILED = "job failed"


@dataclass
class ErrorEntry:
    job_id: int
    fragment_id: int
    kind: str  # "expression" | "consistency" | "job failed"
    executor: str
    sqlstate: str
    message: str
    count: int
    sample: str
    first_seen: dt.datetime
    last_seen: dt.datetime


_Key = tuple[int, int, str, str, str, str]


class StreamingErrorLog:
    def __init__(self, max_entries: int = 1000, log_interval: float = 10.0) -> None:
        self.max_entries = max_entries
        self.log_interval = log_interval
        self._entries: dict[_Key, ErrorEntry] = {}
        self._logged: dict[_Key, tuple[float, int]] = {}  # key -> (last log time, count then)
        self._lock = threading.Lock()
        self.version = 0  # grows with every change (readers rebuild their copies)

    def add_records(self, records: Iterable[StreamErrorRecord], job_of_fragment: Mapping[int, int]) -> None:
        """Add the error records of one committed epoch's reports."""
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            for r in records:
                job = job_of_fragment.get(r.fragment_id, -1)
                self._add(
                    (job, r.fragment_id, r.kind, r.executor, r.sqlstate, r.message), r.count, r.sample, now
                )

    def add_job_failure(self, job_id: int, fragment_id: int | None, error: PiestreamError) -> None:
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            key = (job_id, fragment_id or -1, JOB_FAILED, "", error.sqlstate, error.message)
            self._add(key, 1, "", now)

    def add_source_fault(
        self, job_id: int, fragment_id: int, executor: str, sqlstate: str, message: str
    ) -> None:
        """A source paused because its upstream was unreachable (the barrier manager's)."""
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            self._add((job_id, fragment_id, "source", executor, sqlstate, message), 1, "", now)

    def forget_job(self, job_id: int) -> None:
        """A dropped or rebuilt job's errors go with it."""
        with self._lock:
            for k in [k for k in self._entries if k[0] == job_id]:
                del self._entries[k]
                self._logged.pop(k, None)
            self.version += 1

    def entries(self) -> list[ErrorEntry]:
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: e.last_seen, reverse=True)

    def _add(self, key: _Key, count: int, sample: str, now: dt.datetime) -> None:
        e = self._entries.get(key)
        if e is None:
            if len(self._entries) >= self.max_entries:
                oldest = min(self._entries, key=lambda k: self._entries[k].last_seen)
                del self._entries[oldest]
                self._logged.pop(oldest, None)
            job, fragment, kind, executor, sqlstate, message = key
            e = ErrorEntry(job, fragment, kind, executor, sqlstate, message, 0, sample, now, now)
            self._entries[key] = e
        e.count += count
        e.last_seen = now
        self.version += 1
        self._log(key, e)

    def _log(self, key: _Key, e: ErrorEntry) -> None:
        """One log line per group at most every `log_interval` seconds."""
        t = time.monotonic()
        last = self._logged.get(key)
        if last is not None and t - last[0] < self.log_interval:
            return
        since = e.count - (last[1] if last is not None else 0)
        self._logged[key] = (t, e.count)
        log.warning(
            "streaming job %d fragment %d: %s error %s: %s (%d since the last report, %d in all; sample %s)",
            e.job_id,
            e.fragment_id,
            e.kind,
            e.sqlstate,
            e.message,
            since,
            e.count,
            e.sample or "-",
        )
