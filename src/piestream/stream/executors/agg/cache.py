"""The HashAgg group cache: stored intermediate rows of recently written groups (reference §6.1).

Reading a dirty group's previous state from Hummock costs a filter probe and a block search per
group; a worker that ran the same actor at the previous epoch already holds those rows. The
cache is write-through (every state the executor writes at a barrier is put here, every group
that dies is removed), so at the committed epoch it equals the value table for every key it
holds. The runtime hands an actor its cache only when the cache reflects exactly the committed
epoch (`runtime.actor_task`); otherwise the executor starts with an empty one and reloads.

Rows are kept columnar: `index` maps a group's memcomparable key to a row of `columns`, which
grow by appending each barrier's written rows; superseded rows are garbage until a compaction
takes the live ones. Beyond `capacity` live groups the least recently written are evicted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from piestream.common.order import OrderType
from piestream.common.types import DataType
from piestream.encoding.memcomparable import encode_columns


class GroupStateCache:
    """Group key -> the group's stored value-table row, for the groups written most recently."""

    def __init__(
        self,
        key_types: Sequence[DataType],
        key_orders: Sequence[OrderType],
        row_types: Sequence[DataType],
        capacity: int,
    ) -> None:
        self.key_types = list(key_types)
        self.key_orders = list(key_orders)
        self.row_types = list(row_types)
        self.capacity = max(1, capacity)
        self.index: dict[bytes, int] = {}
        self._parts: list[list[pa.Array]] = []  # appended since the last concatenation
        self._columns: list[pa.Array] = [pa.array([], t.arrow) for t in self.row_types]
        self._size = 0  # rows in `_columns` + `_parts`, live or superseded
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self.index)

    def encode(self, key_cols: Sequence[pa.Array]) -> list[bytes]:
        """The group keys as hashable bytes (memcomparable, so equal values give equal bytes)."""
        n = len(key_cols[0]) if key_cols else 0
        return encode_columns(list(key_cols), self.key_types, self.key_orders, num_rows=n).to_list()

    def lookup(self, keys: Sequence[bytes]) -> np.ndarray:
        """Each key's row in the cache, or -1. Counts hits and misses."""
        get = self.index.get
        # one dict probe per group: neither numpy nor Arrow has a hash map over byte strings
        pos = np.fromiter((get(k, -1) for k in keys), np.int64, len(keys))
        hit = int((pos >= 0).sum())
        self.hits += hit
        self.misses += len(keys) - hit
        return pos

    def rows(self, pos: np.ndarray) -> list[pa.Array]:
        """The cached rows at `pos` (all >= 0), as columns."""
        self._concat()
        idx = pa.array(pos, pa.int64())
        return [c.take(idx) for c in self._columns]

    def put(self, keys: Sequence[bytes], alive: np.ndarray, row_cols: Sequence[pa.Array]) -> None:
        """Record the rows written at a barrier: live groups' new rows; dead groups leave."""
        index = self.index
        dead = np.flatnonzero(~alive)
        for i in dead.tolist():  # per dead group: dict removal (a hash map op, no vector form)
            index.pop(keys[int(i)], None)
        live = np.flatnonzero(alive)
        if len(live):
            mask = pa.array(alive)
            self._parts.append([c.filter(mask) for c in row_cols])
            start = self._size
            # per live group: dict insertion (a hash map op, no vector form)
            index.update(zip([keys[i] for i in live.tolist()], range(start, start + len(live)), strict=True))
            self._size += len(live)
        if len(index) > self.capacity:
            self._compact(keep=self.capacity // 2 or 1)
        elif self._size > 2 * len(index) + 1024:
            self._compact(keep=len(index))

    def _concat(self) -> None:
        if self._parts:
            self._columns = [
                pa.concat_arrays([c, *(p[j] for p in self._parts)]) for j, c in enumerate(self._columns)
            ]
            self._parts = []

    def _compact(self, keep: int) -> None:
        """Keep the `keep` most recently written live rows, renumbered from 0."""
        self._concat()
        keys = list(self.index)
        pos = np.fromiter(self.index.values(), np.int64, len(keys))
        order = np.argsort(pos, kind="stable")[-keep:]
        taken = pa.array(pos[order], pa.int64())
        self._columns = [c.take(taken) for c in self._columns]
        self.index = {keys[i]: j for j, i in enumerate(order.tolist())}
        self._size = len(order)
