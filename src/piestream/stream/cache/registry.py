"""The operator caches of one worker process: which actor owns which, whether they are valid, and
the memory budget they share (DESIGN "Executor-side caches").

A Spark Python worker lives across epochs (spark-notes §4), so an actor that runs in the same
worker again finds the caches its executors filled last time. They are valid only if they
reflect exactly the committed epoch: `acquire` hands them out when the epoch the worker published
them for is the plan's committed epoch (and the actor still owns the same vnodes of the same
data directory); otherwise the actor starts with empty ones. While an actor runs, its caches are
marked in use, so an attempt that fails leaves nothing valid behind; `publish` marks them valid
for the epoch the run wrote, which is the committed epoch of the next plan only if it commits (a
failed epoch's number is never reused, meta/barrier_manager).

All caches of the process share one budget (`StreamingConfig.cache_budget_bytes`): when the
caches grow past it, the least recently used entries of all of them are evicted, whichever
actor they belong to, also in the middle of an epoch (executors never keep positions into a
cache across calls, so an eviction only turns later lookups into misses).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from piestream.stream.cache.keyed_rows import KeyedRows

#: Evicting stops once the caches fit in this share of the budget (room for the next epoch).
_EVICT_TO = 0.8


class ActorCaches(dict[str, Any]):
    """One actor's caches by name (small values, e.g. a source's offsets, and `KeyedRows`)."""

    def __init__(self, registry: CacheRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry if registry is not None else CacheRegistry()
        self._seen = (0, 0)  # hits and misses already reported

    def keyed(self, name: str, types: Sequence[pa.DataType]) -> KeyedRows:
        """The `KeyedRows` cache called `name` (created empty the first time)."""
        c = self.get(name)
        if not isinstance(c, KeyedRows) or c.types != list(types):
            c = KeyedRows(types, self.registry.clock)
            self[name] = c
        return c

    def keyed_rows(self) -> Iterator[KeyedRows]:
        return (c for c in self.values() if isinstance(c, KeyedRows))

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.keyed_rows())

    def take_counts(self) -> tuple[int, int]:
        """(hits, misses) since the last call, over all of the actor's caches."""
        hits = sum(c.hits for c in self.keyed_rows())
        misses = sum(c.misses for c in self.keyed_rows())
        h0, m0 = self._seen
        self._seen = (hits, misses)
        return max(0, hits - h0), max(0, misses - m0)

    def charge(self, budget: int) -> None:
        """Evict least recently used entries of the worker's caches if they exceed `budget`."""
        self.registry.enforce(budget, self)


class CacheRegistry:
    """Every actor's caches in this process, with the epoch they are valid for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (data directory, actor) -> (valid epoch or -1 while in use, vnodes, caches)
        self._actors: dict[tuple[str, int], tuple[int, bytes, ActorCaches]] = {}
        self._tick = 0
        self.evictions = 0  # entries evicted over the process's life

    def clock(self) -> int:
        """A counter that grows with every cache access (the caches' LRU order)."""
        self._tick += 1
        return self._tick

    def acquire(
        self, scope: str, actor: int, committed_epoch: int, vnodes: bytes
    ) -> tuple[ActorCaches, bool]:
        """The actor's caches and whether they are warm (valid at `committed_epoch`)."""
        key = (scope, actor)
        with self._lock:
            entry = self._actors.get(key)
            if entry is not None and entry[0] == committed_epoch and entry[1] == vnodes:
                self._actors[key] = (-1, vnodes, entry[2])
                return entry[2], True
            caches = ActorCaches(self)
            self._actors[key] = (-1, vnodes, caches)
            return caches, False

    def publish(self, scope: str, actor: int, epoch: int, caches: ActorCaches) -> None:
        """The actor's run that wrote `epoch` finished: its caches reflect that epoch."""
        with self._lock:
            entry = self._actors.get((scope, actor))
            if entry is not None and entry[2] is caches:
                self._actors[(scope, actor)] = (epoch, entry[1], caches)

    def drop_scope(self, scope: str) -> None:
        """Forget every actor's caches of one data directory (its database closed)."""
        with self._lock:
            for key in [k for k in self._actors if k[0] == scope]:
                del self._actors[key]

    def all_caches(self) -> list[ActorCaches]:
        with self._lock:
            return [e[2] for e in self._actors.values()]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.all_caches())

    def enforce(self, budget: int, current: ActorCaches | None = None) -> None:
        """Evict the least recently used entries of all caches until they fit in the budget."""
        caches = self.all_caches()
        if current is not None and all(c is not current for c in caches):
            caches.append(current)  # an actor context outside the registry (executor tests)
        rows = [c for a in caches for c in a.keyed_rows()]
        for _ in range(3):  # sizes are estimates (fixed overheads): re-check after a pass
            sizes = [c.nbytes for c in rows]
            total = sum(sizes)
            if total <= budget:
                return
            self._evict_lru(rows, sizes, total - _EVICT_TO * budget)
        if sum(c.nbytes for c in rows) > budget:  # a budget below the caches' fixed overheads
            for c in rows:
                self.evictions += len(c)
                c.clear()

    def _evict_lru(self, rows: list[KeyedRows], sizes: list[int], excess: float) -> None:
        """One LRU over every entry of every cache (an entry costs its share of its cache's
        bytes): evict the oldest until `excess` bytes are freed."""
        ticks, costs, owner = [], [], []
        for i, (c, size) in enumerate(zip(rows, sizes, strict=True)):
            t, counts = c.ticks()
            if not len(t):
                continue
            per_row = size / max(1, c.live_rows)
            ticks.append(t)
            costs.append(counts * per_row)
            owner.append(np.full(len(t), i, np.int64))
        if not ticks:
            return
        t_all = np.concatenate(ticks)
        order = np.argsort(t_all, kind="stable")
        freed = np.cumsum(np.concatenate(costs)[order])
        cut = min(int(np.searchsorted(freed, excess)), len(order) - 1)  # order[: cut + 1] go
        cutoff = int(t_all[order[cut]])
        # entries used at the cutoff tick itself: only as many as needed, per cache
        o_all = np.concatenate(owner)
        at_cut = order[: cut + 1][t_all[order[: cut + 1]] == cutoff]
        extra = np.bincount(o_all[at_cut], minlength=len(rows))
        for i, c in enumerate(rows):
            before = len(c)
            c.evict_before(cutoff, int(extra[i]))
            self.evictions += before - len(c)


#: This process's registry (a Spark Python worker's, or the driver's with the in-process runner).
WORKER_CACHES = CacheRegistry()
