"""A columnar operator cache: key -> the run of rows stored under it (reference §6, "caches").

RisingWave's executors keep LRU maps in front of the state store; here one structure serves
them all, kept as columns so a chunk's keys are answered with a few vector passes:

- keys are memcomparable byte strings (equal SQL values give equal bytes); `HashIndex` maps
  their XXH64 hashes to entries, and the entry's stored key is compared with the query, so a
  hash collision is a miss, never a wrong row;
- an entry is a run of `count` consecutive rows of the row pool (Arrow arrays, one per column):
  one row for a HashAgg group or a Materialize pk, all rows of a join key, a group's top rows;
- replacing a key's run appends the new rows and leaves the old ones as garbage; a compaction
  takes the live rows when garbage outweighs them (amortized, never per key);
- every entry carries the tick of its last use; `evict_before` drops the least recently used
  ones when the worker's budget (`CacheRegistry`) is exceeded.

What a cache holds must equal the state table it fronts at the moment it is read: executors
update it wherever they write the table, and the runtime hands an actor its caches only when
they reflect the committed epoch (`registry`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.encoding.hashing import xxh64_ragged
from piestream.encoding.ragged import Ragged
from piestream.stream.cache.hash_index import HashIndex, normalized

Clock = Callable[[], int]


def _zero_clock() -> int:
    return 0


class _Growing:
    """A numpy column appended to in batches (capacity doubles), read up to its length."""

    def __init__(self, dtype: type | np.dtype) -> None:
        self.a = np.zeros(1024, dtype)
        self.n = 0

    def append(self, values: np.ndarray) -> None:
        k = len(values)
        if self.n + k > len(self.a):
            cap = len(self.a)
            while cap < self.n + k:
                cap <<= 1
            bigger = np.zeros(cap, self.a.dtype)
            bigger[: self.n] = self.a[: self.n]
            self.a = bigger
        self.a[self.n : self.n + k] = values
        self.n += k

    @property
    def view(self) -> np.ndarray:
        return self.a[: self.n]

    def reset(self, values: np.ndarray) -> None:
        self.a = np.zeros(max(1024, len(values)), self.a.dtype)
        self.a[: len(values)] = values
        self.n = len(values)


def _key_bytes(keys: Ragged | pa.Array) -> pa.Array:
    return keys.to_arrow(large=True) if isinstance(keys, Ragged) else keys.cast(pa.large_binary())


class _Parts:
    """Columns appended in parts and read by global row number. Appending never copies what is
    there: the last parts are merged only while the newest is at least half its predecessor
    (O(log n) parts, each row copied O(log n) times), and a read takes from each part it
    touches, so an epoch's reads and writes cost what they touch, not the cache's size."""

    def __init__(self, types: Sequence[pa.DataType]) -> None:
        self.types = list(types)
        self.parts: list[list[pa.Array]] = []
        self.sizes: list[int] = []
        self.nbytes = 0

    def __len__(self) -> int:
        return sum(self.sizes)

    def append(self, cols: Sequence[pa.Array]) -> None:
        n = len(cols[0]) if cols else 0
        if not n:
            return
        self.parts.append(list(cols))
        self.sizes.append(n)
        self.nbytes += sum(c.nbytes for c in cols)
        while len(self.parts) > 1 and self.sizes[-1] * 2 >= self.sizes[-2]:
            b, a = self.parts.pop(), self.parts.pop()
            nb, na = self.sizes.pop(), self.sizes.pop()
            self.parts.append([pa.concat_arrays([x, y]) for x, y in zip(a, b, strict=True)])
            self.sizes.append(na + nb)

    def take(self, idx: np.ndarray) -> list[pa.Array]:
        """The rows at global positions `idx`, in that order."""
        if not len(idx) or not self.parts:
            return [pa.nulls(0, t) for t in self.types]
        if len(self.parts) == 1:
            t = pa.array(idx, pa.int64())
            return [c.take(t) for c in self.parts[0]]
        bounds = np.cumsum([0, *self.sizes])
        part = np.searchsorted(bounds, idx, side="right") - 1
        order = np.argsort(part, kind="stable")
        cuts = np.searchsorted(part[order], np.arange(len(self.parts) + 1))
        pieces: list[list[pa.Array]] = [[] for _ in self.types]
        for p in range(len(self.parts)):  # per part (O(log n) of them), never per row
            lo, hi = int(cuts[p]), int(cuts[p + 1])
            if lo == hi:
                continue
            local = pa.array(idx[order[lo:hi]] - bounds[p], pa.int64())
            for j, c in enumerate(self.parts[p]):
                pieces[j].append(c.take(local))
        inv = np.empty(len(order), np.int64)
        inv[order] = np.arange(len(order))
        back = pa.array(inv)
        return [pa.concat_arrays(ps).take(back) for ps in pieces]

    def reset(self, cols: Sequence[pa.Array]) -> None:
        self.parts, self.sizes, self.nbytes = [], [], 0
        self.append(cols)


class KeyedRows:
    """Memcomparable key -> a run of rows; see the module docstring."""

    def __init__(self, types: Sequence[pa.DataType], clock: Clock = _zero_clock) -> None:
        self.types = list(types)
        self.clock = clock
        self.index = HashIndex()
        # entries (appended; dead ones linger until a compaction)
        self._hash = _Growing(np.uint64)
        self._start = _Growing(np.int64)
        self._count = _Growing(np.int64)
        self._tick = _Growing(np.int64)
        self._alive = _Growing(np.bool_)
        self._keys = _Parts([pa.large_binary()])  # the entries' keys, by entry number
        # rows (appended; rows of dead or replaced entries are garbage)
        self._rows = _Parts(self.types)  # by row number
        self._n_rows = 0
        self._live_rows = 0
        self.hits = 0
        self.misses = 0
        #: whether the cache holds every key of the state table it fronts (in the actor's
        #: vnodes), so a miss means "not stored": None until its owner decides (a new cache over an
        #: empty table is complete); an eviction makes it False for good
        self.complete: bool | None = None
        #: rows its owner wrote through (beside `hits` and `misses`: what keeping it costs
        #: against what it saves), and whether the owner gave up on it (it then holds nothing)
        self.written = 0
        self.retired = False

    # -- size -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.index)

    @property
    def live_rows(self) -> int:
        return self._live_rows

    @property
    def nbytes(self) -> int:
        entries = self._hash.a.nbytes * 5  # hash, start, count, tick (8 bytes), alive (1, rounded)
        return int(self._rows.nbytes + self._keys.nbytes + entries + self.index.nbytes)

    # -- lookups ----------------------------------------------------------------------------------
    @staticmethod
    def hashes(keys: Ragged | pa.Array) -> np.ndarray:
        """The keys' hashes as the index stores them: a caller that reads and then writes the
        same keys computes them once and passes them to both (`hashes=`)."""
        r = keys if isinstance(keys, Ragged) else Ragged.from_arrow(keys)
        return normalized(xxh64_ragged(r))

    def _entries_of(self, keys: Ragged | pa.Array, hashes: np.ndarray | None = None) -> np.ndarray:
        """The live entry of each key, or -1 (a key whose hash leads to another key is a miss)."""
        r = keys if isinstance(keys, Ragged) else Ragged.from_arrow(keys)
        n = r.n
        if not n or not len(self.index):
            return np.full(n, -1, np.int64)
        slots = self.index.find(hashes if hashes is not None else self.hashes(r))
        found = slots >= 0
        ent = np.full(n, -1, np.int64)
        if not found.any():
            return ent
        cand = self.index.entries(slots[found])
        stored = self._keys.take(cand)[0]
        query = _key_bytes(r).filter(pa.array(found))
        same = np.asarray(pc.equal(stored, query).to_numpy(zero_copy_only=False), np.bool_)
        rows = np.flatnonzero(found)
        ent[rows[same]] = cand[same]
        return ent

    def _touch(self, ent: np.ndarray) -> None:
        if len(ent):
            self._tick.a[ent] = self.clock()

    def _take_rows(self, starts: np.ndarray, counts: np.ndarray) -> list[pa.Array]:
        total = int(counts.sum())
        if not total:
            return [pa.nulls(0, t) for t in self.types]
        idx = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total, dtype=np.int64)
        return self._rows.take(idx)

    def get(
        self, keys: Ragged | pa.Array, *, hashes: np.ndarray | None = None
    ) -> tuple[np.ndarray, list[pa.Array]]:
        """(hit mask, one row per key: the cached row where hit, NULL elsewhere) for a cache of
        one row per key. `hashes`: `hashes(keys)`, if the caller has them."""
        ent = self._entries_of(keys, hashes)
        hit = ent >= 0
        n = len(ent)
        self._count_use(hit)
        if not hit.any():
            return hit, [pa.nulls(n, t) for t in self.types]
        e = ent[hit]
        self._touch(e)
        rows = self._take_rows(self._start.a[e], np.ones(len(e), np.int64))
        if hit.all():
            return hit, rows
        where = np.full(n, -1, np.int64)
        where[hit] = np.arange(len(e))
        take = pa.array(where, mask=~hit)
        return hit, [r.take(take) for r in rows]

    def get_runs(self, keys: Ragged | pa.Array) -> tuple[np.ndarray, np.ndarray, list[pa.Array]]:
        """(hit mask, rows per key (0 for misses), the hit keys' rows concatenated in key order)."""
        ent = self._entries_of(keys)
        hit = ent >= 0
        self._count_use(hit)
        counts = np.zeros(len(ent), np.int64)
        e = ent[hit]
        self._touch(e)
        counts[hit] = self._count.a[e]
        return hit, counts, self._take_rows(self._start.a[e], counts[hit])

    def _count_use(self, hit: np.ndarray) -> None:
        h = int(hit.sum())
        self.hits += h
        self.misses += len(hit) - h

    # -- updates ----------------------------------------------------------------------------------
    def put(
        self,
        keys: Ragged | pa.Array,
        rows: Sequence[pa.Array],
        *,
        hashes: np.ndarray | None = None,
        distinct: bool = False,
        uncached: bool = False,
    ) -> None:
        """Set each key's run to its one row (a key given twice keeps its last row)."""
        n = len(keys)
        self.put_runs(keys, np.ones(n, np.int64), rows, hashes=hashes, distinct=distinct, uncached=uncached)

    def put_runs(
        self,
        keys: Ragged | pa.Array,
        counts: np.ndarray,
        rows: Sequence[pa.Array],
        *,
        hashes: np.ndarray | None = None,
        distinct: bool = False,
        uncached: bool = False,
    ) -> None:
        """Set each key's run to its `counts[i]` rows (consecutive in `rows`, in key order); a
        key given twice keeps its last run. `hashes`: `hashes(keys)`, if the caller has them;
        `distinct`: the caller knows each key is given once (no search for repeats);
        `uncached`: the caller knows the cache holds none of the keys (a `get` of them all just
        missed, nothing changed the cache since), so their old entries are not searched for."""
        r = keys if isinstance(keys, Ragged) else Ragged.from_arrow(keys)
        n = r.n
        if not n:
            return
        counts = np.asarray(counts, np.int64)
        starts = np.cumsum(counts) - counts
        key_arr = _key_bytes(r)
        if hashes is None:
            hashes = self.hashes(r)
        if distinct:
            keep = np.arange(n, dtype=np.int64)
        else:
            # the last occurrence of each hash wins (a later run of the same key replaces an earlier)
            rev = hashes[::-1]
            _, last_rev = np.unique(rev, return_index=True)
            keep = np.sort(n - 1 - last_rev)
        if len(keep) < n:
            hashes, counts, starts = hashes[keep], counts[keep], starts[keep]
            key_arr = key_arr.take(pa.array(keep))
        if uncached:
            slots, old = np.zeros(0, np.int64), np.zeros(len(hashes), np.bool_)
        else:
            slots = self.index.find(hashes)
            old = slots >= 0
        if old.any():
            self._kill(self.index.entries(slots[old]))
        # new rows and entries at the end
        base_row = self._n_rows
        total = int(counts.sum())
        cols = [c if c.type == t else c.cast(t) for c, t in zip(rows, self.types, strict=True)]
        if len(keep) < n:  # only the kept runs' rows
            take = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total, dtype=np.int64)
            cols = [c.take(pa.array(take)) for c in cols]
        if total:
            self._rows.append(cols)
            self._n_rows += total
            self._live_rows += total
        first_entry = self._hash.n
        m = len(hashes)
        self._hash.append(hashes)
        self._start.append(base_row + np.cumsum(counts) - counts)
        self._count.append(counts)
        self._tick.append(np.full(m, self.clock(), np.int64))
        self._alive.append(np.ones(m, np.bool_))
        self._keys.append([key_arr])
        ids = np.arange(first_entry, first_entry + m, dtype=np.int64)
        if old.any():
            self.index.set_entries(slots[old], ids[old])
        self.index.insert(hashes[~old], ids[~old])
        self._maybe_compact()

    def remove(self, keys: Ragged | pa.Array, *, hashes: np.ndarray | None = None) -> None:
        """Forget these keys (those not cached are ignored)."""
        ent = self._entries_of(keys, hashes)
        ent = np.unique(ent[ent >= 0])
        if not len(ent):
            return
        slots = self.index.find(self._hash.a[ent])
        self.index.remove(slots)
        self._kill(ent)
        self._maybe_compact()

    def remove_below(self, bound: bytes) -> int:
        """Forget every key that sorts below `bound` (memcomparable bytes: a watermark on the
        keys' first column); returns how many. One vector compare over the live entries."""
        live = np.flatnonzero(self._alive.view)
        if not len(live):
            return 0
        keys = self._keys.take(live)[0]
        below = np.asarray(
            pc.less(keys, pa.scalar(bound, pa.large_binary())).to_numpy(zero_copy_only=False), np.bool_
        )
        old = live[below]
        if not len(old):
            return 0
        slots = self.index.find(self._hash.a[old])
        mine = slots >= 0
        mine[mine] = self.index.entries(slots[mine]) == old[mine]
        self.index.remove(slots[mine])
        self._kill(old)
        self._maybe_compact()
        return len(old)

    def _kill(self, ent: np.ndarray) -> None:
        self._alive.a[ent] = False
        self._live_rows -= int(self._count.a[ent].sum())

    def clear(self) -> None:
        """Forget every entry (the hit and miss counters stay)."""
        hits, misses = self.hits, self.misses
        self.__init__(self.types, self.clock)  # type: ignore[misc]
        self.hits, self.misses = hits, misses

    # -- eviction ---------------------------------------------------------------------------------
    def ticks(self) -> tuple[np.ndarray, np.ndarray]:
        """(last-use tick, rows) of every live entry, for the worker's LRU."""
        live = np.flatnonzero(self._alive.view)
        return self._tick.a[live], self._count.a[live]

    def evict_before(self, tick: int, extra: int = 0) -> None:
        """Drop entries last used before `tick`, and `extra` more of those used at `tick`."""
        alive = self._alive.view
        ticks = self._tick.view
        old = np.flatnonzero(alive & (ticks < tick))
        if extra > 0:
            at = np.flatnonzero(alive & (ticks == tick))[:extra]
            old = np.concatenate([old, at])
        if not len(old):
            return
        self.complete = False
        slots = self.index.find(self._hash.a[old])
        mine = slots >= 0
        mine[mine] = self.index.entries(slots[mine]) == old[mine]
        self.index.remove(slots[mine])
        self._kill(old)
        self._compact()  # eviction is meant to free memory: drop the garbage now

    def _maybe_compact(self) -> None:
        dead_rows = self._n_rows - self._live_rows
        dead_entries = self._hash.n - len(self.index)
        if dead_rows > self._live_rows + 4096 or dead_entries > len(self.index) + 4096:
            self._compact()

    def _compact(self) -> None:
        """Keep the live entries and their rows only, renumbered from 0."""
        live = np.flatnonzero(self._alive.view)
        counts = self._count.a[live]
        starts = self._start.a[live]
        self._rows.reset(self._take_rows(starts, counts))
        self._keys.reset(self._keys.take(live))
        self._n_rows = self._live_rows = int(counts.sum())
        hashes = self._hash.a[live]
        self._hash.reset(hashes)
        self._start.reset(np.cumsum(counts) - counts)
        self._count.reset(counts)
        self._tick.reset(self._tick.a[live])
        self._alive.reset(np.ones(len(live), np.bool_))
        self.index.rebuild(hashes, np.arange(len(live), dtype=np.int64))
