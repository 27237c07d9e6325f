"""A bytes-bounded LRU cache for SST metas and blocks (reference §5.5).

Each Python process (the driver, every Spark Python worker) keeps one meta cache and one block
cache; SSTs are immutable, so an entry never goes stale, it only gets evicted. Hit and miss counts
are kept so benchmarks and tests can report hit rates.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class LruCache(Generic[V]):
    """Least-recently-used eviction once the summed entry sizes exceed `capacity_bytes`."""

    def __init__(self, capacity_bytes: int, size_of: Callable[[V], int]) -> None:
        self.capacity = capacity_bytes
        self._size_of = size_of
        self._data: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return item[0]

    def peek(self, key: Hashable) -> V | None:
        """The entry without counting a hit or a miss or refreshing its recency."""
        item = self._data.get(key)
        return None if item is None else item[0]

    def touch(self, key: Hashable) -> None:
        """Mark an entry as just used (one atomic OrderedDict call, no lock: the hot path of
        every single-key read)."""
        with contextlib.suppress(KeyError):  # evicted meanwhile
            self._data.move_to_end(key)

    def count(self, *, hits: int = 0, misses: int = 0) -> None:
        """Record hits and misses of a cache whose entries hold many items (blocks of an SST)."""
        self.hits += hits
        self.misses += misses

    def put(self, key: Hashable, value: V) -> None:
        size = self._size_of(value)
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._used -= old[1]
            if size > self.capacity:
                return
            self._data[key] = (value, size)
            self._used += size
            while self._used > self.capacity:
                _, (_, s) = self._data.popitem(last=False)
                self._used -= s

    def get_or_load(self, key: Hashable, load: Callable[[], V]) -> V:
        value = self.get(key)
        if value is None:
            value = load()
            self.put(key, value)
        return value

    def evict_where(self, pred: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for k in [k for k in self._data if pred(k)]:
                _, s = self._data.pop(k)
                self._used -= s

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._used = 0

    @property
    def used_bytes(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._data)

    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
