"""A hash table from 64-bit key hashes to entry ids, probed for a whole batch at once.

Operator caches look up the keys of a chunk (often 100K of them) and insert as many at a
barrier. A Python dict costs a call per key and ~100 bytes per entry; this table is two numpy
arrays (hash, entry id) with open addressing and linear probing, so a batch is a few vector
passes: every pending key probes its next slot in the same pass, and most keys are settled in
the first one or two (the table is kept at most half full).

Slots hold the key's hash (0 = empty, 1 = deleted) and the entry id. The table stores hashes,
not keys: two different keys with the same 64-bit hash share a slot, so callers compare the key
bytes of the entry they find (`KeyedRows` does) and treat a mismatch as a miss.
"""

from __future__ import annotations

import numpy as np

_EMPTY = np.uint64(0)
_DELETED = np.uint64(1)
_MIN_CAPACITY = 1 << 10


def normalized(hashes: np.ndarray) -> np.ndarray:
    """Hashes as stored: 0 and 1 mark empty and deleted slots, so they move to 2 and 3."""
    h = np.asarray(hashes, np.uint64)
    return np.where(h < np.uint64(2), h + np.uint64(2), h)


class HashIndex:
    """Normalized 64-bit hash -> entry id, at most one entry per hash."""

    def __init__(self, capacity: int = _MIN_CAPACITY) -> None:
        cap = _MIN_CAPACITY
        while cap < capacity:
            cap <<= 1
        self._h = np.zeros(cap, np.uint64)
        self._v = np.full(cap, -1, np.int64)
        self.live = 0  # slots holding an entry
        self._used = 0  # live + deleted slots (deleted ones lengthen probe runs until a rebuild)

    def __len__(self) -> int:
        return self.live

    @property
    def nbytes(self) -> int:
        return int(self._h.nbytes + self._v.nbytes)

    @property
    def capacity(self) -> int:
        return len(self._h)

    def find(self, hashes: np.ndarray) -> np.ndarray:
        """The slot of each (normalized) hash, -1 where the table has none."""
        n = len(hashes)
        out = np.full(n, -1, np.int64)
        if not n or not self.live:
            return out
        mask = np.uint64(len(self._h) - 1)
        pend = np.arange(n, dtype=np.int64)
        want = hashes
        pos = (hashes & mask).astype(np.int64)
        while len(pend):  # one pass per probe step; each pass settles most pending keys
            got = self._h[pos]
            hit = got == want
            if hit.any():
                out[pend[hit]] = pos[hit]
            go_on = ~hit & (got != _EMPTY)
            pend, want = pend[go_on], want[go_on]
            pos = (pos[go_on] + 1) & int(mask)
        return out

    def entries(self, slots: np.ndarray) -> np.ndarray:
        """The entry ids in `slots` (all >= 0)."""
        return self._v[slots]

    def set_entries(self, slots: np.ndarray, ids: np.ndarray) -> None:
        """Point existing slots at other entries (a key's entry replaced)."""
        self._v[slots] = ids

    def insert(self, hashes: np.ndarray, ids: np.ndarray) -> None:
        """Add hashes the table does not hold yet (distinct among themselves), with distinct
        entry ids."""
        n = len(hashes)
        if not n:
            return
        if 2 * (self._used + n) > len(self._h):
            self._grow(self.live + n)
        mask = len(self._h) - 1
        pend = np.arange(n, dtype=np.int64)
        pos = (hashes & np.uint64(mask)).astype(np.int64)
        while len(pend):
            free = self._h[pos] <= _DELETED
            placed = np.zeros(len(pend), np.bool_)
            if free.any():
                # several keys may reach one free slot in a pass: all write, one write lands,
                # and reading the slot back tells who won (no sort); the ids are distinct, so
                # the entry id settles it even for equal hashes. The others probe on, as a
                # lookup will see the slot taken.
                cand = np.flatnonzero(free)
                cslots = pos[cand]
                was_deleted = self._h[cslots] == _DELETED
                cids = ids[pend[cand]]
                self._v[cslots] = cids
                won = self._v[cslots] == cids
                winners = cand[won]
                self._h[pos[winners]] = hashes[pend[winners]]
                self._used += len(winners) - int(was_deleted[won].sum())
                placed[winners] = True
            keep = ~placed
            pend = pend[keep]
            pos = (pos[keep] + 1) & mask
        self.live += n

    def remove(self, slots: np.ndarray) -> None:
        """Delete the entries in `slots` (distinct, all live)."""
        if not len(slots):
            return
        self._h[slots] = _DELETED
        self._v[slots] = -1
        self.live -= len(slots)

    def rebuild(self, hashes: np.ndarray, ids: np.ndarray) -> None:
        """Start over with exactly these (distinct) hashes."""
        cap = _MIN_CAPACITY
        while cap < 4 * len(hashes):
            cap <<= 1
        self._h = np.zeros(cap, np.uint64)
        self._v = np.full(cap, -1, np.int64)
        self.live = self._used = 0
        self.insert(hashes, ids)

    def _grow(self, want_live: int) -> None:
        live = np.flatnonzero(self._h > _DELETED)
        hashes, ids = self._h[live], self._v[live]
        cap = _MIN_CAPACITY
        while cap < 4 * max(want_live, 1):
            cap <<= 1
        self._h = np.zeros(cap, np.uint64)
        self._v = np.full(cap, -1, np.int64)
        self.live = self._used = 0
        if len(hashes):
            self.insert(hashes, ids)
