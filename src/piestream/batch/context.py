"""What one batch query runs against: a storage reader pinned at one committed epoch."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from piestream.batch.overlay import TableOverlay
from piestream.storage.hummock.store import HummockStorage


@dataclass(frozen=True)
class BatchContext:
    """Every scan of a query reads `storage` at `epoch`, so a SELECT over several tables and MVs
    sees one consistent snapshot (DESIGN "Epoch atomicity"). The caller pins the epoch (and the
    version holding it) for the query's lifetime; `now` is the statement time the planner froze
    into ``now()`` calls, kept here for executors that need it. Inside a transaction block,
    `overlays` (by table id) are its uncommitted changes: scans of those tables merge them over
    the snapshot, so the transaction reads its own writes."""

    storage: HummockStorage
    epoch: int
    now: dt.datetime | None = None
    chunk_rows: int = 65536  # rows per output chunk of `execute_to_chunks`
    overlays: Mapping[int, TableOverlay] = field(default_factory=dict)
