"""Which filter keys the shared buffer's imms of one barrier epoch hold: sorted hash tiers.

A batched point lookup searches every imm, newest first. A bulk load spills a MemTable every few
MiB, so one epoch buffers tens of imms of one table, and the conflict check of every later chunk
(Materialize on a table with a pk) searched all of them for keys that are nearly never there (a
fresh insert): the cost grew with the square of the load. Here the shared buffer keeps, per
barrier epoch, the XXH64 filter-key hashes of every imm entry (the hashes SST Bloom filters are
built from, computed once per imm and reused by `sync`'s SST build) in a few sorted tiers; a
lookup whose hash is in no tier skips every imm of that epoch with one vector search per tier.

Exact up to hash equality: a matching hash only means "search the imms", so a collision costs a
search, never a wrong answer. A query without a filter key (hash 0) or of a table with unfiltered
entries is always searched. Immutable: `add` returns a new index, so a read view keeps the one
that matches the imms it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EpochKeys:
    """Sorted uint64 filter-key hashes of one epoch's imms (tiers of falling size)."""

    tiers: tuple[np.ndarray, ...] = ()
    unfiltered: frozenset[int] = frozenset()  # tables with entries that have no filter key

    def add(self, hashes: np.ndarray, unfiltered: set[int] | frozenset[int]) -> EpochKeys:
        """A new index that also holds `hashes` (one imm's filter-key hashes, any order).
        Tiers merge like a binary counter: O(log n) tiers, each hash moved O(log n) times."""
        new = np.sort(np.asarray(hashes, np.uint64))
        tiers = list(self.tiers)
        while tiers and len(tiers[-1]) <= len(new):
            old = tiers.pop()
            new = np.insert(old, np.searchsorted(old, new), new)  # a linear merge of sorted arrays
        if len(new):
            tiers.append(new)
        return EpochKeys(tuple(tiers), self.unfiltered | frozenset(unfiltered))

    def __len__(self) -> int:
        return sum(len(t) for t in self.tiers)

    def may_hold(self, hashes: np.ndarray, table_ids: np.ndarray | None) -> np.ndarray:
        """Per query: False where its key is certainly in none of the epoch's imms. `hashes` are
        the queries' filter-key hashes (0: no filter key, always True); `table_ids` are needed
        when some table has unfiltered entries."""
        out = hashes == 0
        if self.unfiltered:
            assert table_ids is not None
            out |= np.isin(table_ids, np.fromiter(self.unfiltered, np.int64))
        check = np.flatnonzero(~out)
        if len(check) and self.tiers:
            h = hashes[check]
            order = np.argsort(h)
            sh = h[order]  # sorted queries: each tier's search walks memory in order
            hit = np.zeros(len(sh), np.bool_)
            for t in self.tiers:
                p = np.searchsorted(t, sh)
                np.minimum(p, len(t) - 1, out=p)
                hit |= t[p] == sh
            out[check[order[hit]]] = True
        return out
