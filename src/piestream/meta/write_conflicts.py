"""Write conflicts between transactions: first committer wins (snapshot isolation).

A transaction reads one snapshot (the committed epoch when it began) and buffers its writes.
When it commits, its write set (table, primary key) must not overlap the writes of any epoch
committed after its snapshot — nor those of changes taken into the same epoch before it —
otherwise the commit fails with 40001 (PostgreSQL's REPEATABLE READ: "could not serialize access
due to concurrent update") and the client retries. `CommittedWrites` keeps the keys each
committed epoch wrote, but only while a transaction that began before that epoch is open, and
within a memory budget: past it the oldest epochs are forgotten, and a transaction that began
before them fails its commit (it cannot be checked, so it is not let through).

Keys are the memcomparable primary key of each written row (`batch.overlay.pk_keys`), the hidden
``_row_id`` for tables without a primary key; inserts into such tables get fresh row ids and
conflict with nothing.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from piestream.batch.overlay import pk_keys
from piestream.common.chunk import StreamChunk
from piestream.storage.table.desc import TableDesc

#: Bytes of committed keys kept for open transactions before the oldest epochs are forgotten.
DEFAULT_BUDGET = 64 << 20


def chunk_keys(desc: TableDesc, chunk: StreamChunk) -> pa.Array:
    """The keys of the rows a change chunk writes (new rows without a row id yet write none)."""
    c = chunk.compact()
    cols = [c.columns[i] for i in desc.pk]
    if cols and any(col.null_count for col in cols):
        mask = cols[0].is_valid()
        for col in cols[1:]:
            mask = pc.and_(mask, col.is_valid())
        cols = [col.filter(mask) for col in cols]
    if not cols or not len(cols[0]):
        return pa.array([], pa.large_binary())
    return pk_keys(desc, cols)


class CommittedWrites:
    """The keys written by recently committed epochs, for the commit check of open transactions.

    `lock` makes "take a snapshot and register it" atomic with "commit an epoch and record its
    keys": a transaction whose snapshot misses an epoch always finds that epoch's keys here.
    """

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.lock = threading.RLock()
        self.budget = budget
        self._open: dict[int, int] = {}  # token -> snapshot epoch
        self._ids = itertools.count(1)
        self._log: list[tuple[int, dict[int, pa.Array]]] = []  # (epoch, table id -> keys), ascending
        self._bytes = 0
        self._forgotten_through = 0  # writes of epochs <= this were dropped over budget

    # -- transactions -------------------------------------------------------------------------------
    def begin(self, snapshot_epoch: int) -> int:
        """Register an open transaction reading `snapshot_epoch` (call under `lock`, with the
        snapshot taken under it); returns its token for `end`."""
        with self.lock:
            token = next(self._ids)
            self._open[token] = snapshot_epoch
            return token

    def end(self, token: int) -> None:
        with self.lock:
            self._open.pop(token, None)
            self._prune()

    @property
    def tracking(self) -> bool:
        """Whether a transaction is open (committed epochs must record their keys)."""
        return bool(self._open)

    # -- epochs -------------------------------------------------------------------------------------
    def record(self, epoch: int, writes: Mapping[int, Iterable[pa.Array]]) -> None:
        """The keys `epoch` wrote (call under `lock`, with the epoch's commit)."""
        with self.lock:
            if not self._open:
                return
            merged = {}
            for table_id, arrays in writes.items():
                parts = [a for a in arrays if len(a)]
                if parts:
                    merged[table_id] = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
            if merged:
                self._log.append((epoch, merged))
                self._bytes += sum(a.nbytes for a in merged.values())
            self._prune()

    def _prune(self) -> None:
        oldest = min(self._open.values(), default=None)
        keep = []
        for epoch, keys in self._log:
            if oldest is not None and epoch > oldest:
                keep.append((epoch, keys))
            else:
                self._bytes -= sum(a.nbytes for a in keys.values())
        while keep and self._bytes > self.budget:
            epoch, keys = keep.pop(0)
            self._bytes -= sum(a.nbytes for a in keys.values())
            self._forgotten_through = max(self._forgotten_through, epoch)
        self._log = keep
        if not self._open:
            self._forgotten_through = 0

    # -- the commit check ---------------------------------------------------------------------------
    def conflict(self, snapshot_epoch: int, keys: Mapping[int, pa.Array]) -> int | None:
        """A table whose keys in `keys` an epoch after `snapshot_epoch` wrote (None: no conflict;
        -1: writes after the snapshot were forgotten over budget, so it cannot be checked)."""
        with self.lock:
            if not any(len(k) for k in keys.values()):
                return None
            if snapshot_epoch < self._forgotten_through:
                return -1
            for epoch, written in self._log:
                if epoch <= snapshot_epoch:
                    continue
                for table_id, mine in keys.items():
                    theirs = written.get(table_id)
                    if theirs is not None and overlaps(mine, theirs):
                        return table_id
            return None


def overlaps(a: pa.Array, b: pa.Array) -> bool:
    """Whether two key arrays share a key."""
    if not len(a) or not len(b):
        return False
    small, big = (a, b) if len(a) <= len(b) else (b, a)
    return bool(pc.any(pc.is_in(small, value_set=big)).as_py())
