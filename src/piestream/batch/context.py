"""What one batch query runs against: a storage reader pinned at one committed epoch."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from piestream.storage.hummock.store import HummockStorage


@dataclass(frozen=True)
class BatchContext:
    """Every scan of a query reads `storage` at `epoch`, so a SELECT over several tables and MVs
    sees one consistent snapshot (DESIGN "Epoch atomicity"). The caller pins the epoch (and the
    version holding it) for the query's lifetime; `now` is the statement time the planner froze
    into ``now()`` calls, kept here for executors that need it."""

    storage: HummockStorage
    epoch: int
    now: dt.datetime | None = None
    chunk_rows: int = 65536  # rows per output chunk of `execute_to_chunks`
