"""The hash join's columnar cache of one side: join key -> that side's rows of the key.

A chunk arriving on side A reads side B's rows of every join key in it. Through the state store
that is a prefix scan per chunk over every run of the LSM (a range search per key in each), a
fixed cost of several milliseconds per call that dominates small epochs (Nexmark q3/q8 carry a
few thousand rows per epoch). The cache answers those reads from memory (`KeyedRows`: a key's
rows are one run, in pk order, exactly what the prefix scan returns):

- a read looks up all keys at once; misses go to storage with one prefix scan and are cached,
  keys without rows too. A cache that holds every key of the table (started on an empty table,
  never evicted: `KeyedRows.complete`) sends nothing to storage;
- writes go through: after a chunk of side A is written to A's state table, each cached (or, in a
  complete cache, any) key of the chunk gets its new run, old run plus the chunk's inserts minus
  its deletes, resolved by pk in chunk order and laid out in pk order (storage order), so a warm
  and a cold actor read the same rows in the same order;
- keys below a committed watermark are dropped with the rows storage stops returning.

A side written far more than it is read (Nexmark q7's bids, looked up only by each window's
top price) is not worth keeping: its write-through grows a cache nothing reads. Once its rows
written exceed WRITE_READ_RATIO times its keys read (plus WRITE_GRACE_ROWS) the cache is
retired: emptied, and the side reads and writes storage only.

Only sides without a degree table are cached (inner joins, and sides whose degrees are recomputed
from the other side); the runtime hands the cache over only when it reflects the committed epoch
and the worker's budget evicts from it (`stream.cache.registry`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.scalar import Datum
from piestream.encoding import memcomparable
from piestream.encoding.ragged import Ragged
from piestream.storage.table.state_table import StateTable
from piestream.stream.executor import ActorContext
from piestream.stream.executors.join.kernels import as_type

#: a side's cache is retired once its rows written exceed this many times its keys read ...
WRITE_READ_RATIO = 4
#: ... plus this many rows (a new cache's first epochs are all writes)
WRITE_GRACE_ROWS = 100_000


def cacheable(state: StateTable, keys: Sequence[int]) -> bool:
    """Whether a side's state table can be cached by join key: its pk starts with the join keys."""
    return bool(keys) and list(state.desc.pk[: len(keys)]) == list(keys)


class JoinSideCache:
    """One side's rows by join key (see the module docstring)."""

    def __init__(
        self, ctx: ActorContext, state: StateTable, types: Sequence[pa.DataType], n_keys: int
    ) -> None:
        self.state = state
        self.types = list(types)
        self.m = n_keys
        desc = state.desc
        self.key_types = desc.pk_types[:n_keys]
        self.key_orders = list(desc.pk_orders[:n_keys])
        self.pk = list(desc.pk)
        self.rows = ctx.cache.keyed(f"hash_join:{desc.table_id}", self.types)

    @property
    def active(self) -> bool:
        """Whether reads and writes go through the cache (not retired)."""
        return not self.rows.retired

    def init(self) -> None:
        """Before the epoch's first chunk (state initialised, nothing written yet): a new cache
        is complete iff the table holds no row. Decided from metadata (no run of the storage holds
        the table), not by a scan: a cold actor (a new worker process) would pay a merge over every
        run of the LSM for it, ~20 ms a side; a table of tombstones only is taken as not empty,
        which just leaves the cache incomplete (misses go to storage)."""
        if self.rows.complete is None:
            self.rows.complete = self.state.surely_empty()

    def _keys(self, key_columns: Sequence[pa.Array]) -> tuple[list[pa.Array], Ragged]:
        cols = [as_type(c, t.arrow) for c, t in zip(key_columns, self.key_types, strict=True)]
        return cols, memcomparable.encode_columns(cols, self.key_types, self.key_orders)

    def read(self, key_columns: Sequence[pa.Array]) -> tuple[list[pa.Array], np.ndarray]:
        """(the rows of every key, concatenated key by key in the given order; rows per key)."""
        cols, kr = self._keys(key_columns)
        hit, counts, hit_rows = self.rows.get_runs(kr)
        miss = np.flatnonzero(~hit)
        if not len(miss) or self.rows.complete:
            return hit_rows, counts  # misses of a complete cache hold no rows
        take = pa.array(miss, pa.int64())
        chunk, got = self.state.scan_prefix_columns([c.take(take) for c in cols])
        miss_rows = [as_type(c, t) for c, t in zip(chunk.columns, self.types, strict=True)]
        self.rows.put_runs(kr.take(miss), got, miss_rows)
        counts[miss] = got
        if not int(got.sum()):
            return hit_rows, counts
        # lay the hits' and the misses' runs out in key order: one take over both blocks
        n_hit_rows = int(counts[hit].sum())
        start = np.zeros(len(counts), np.int64)
        start[hit] = np.cumsum(counts[hit]) - counts[hit]
        start[miss] = n_hit_rows + np.cumsum(got) - got
        total = int(counts.sum())
        idx = np.repeat(start - (np.cumsum(counts) - counts), counts) + np.arange(total, dtype=np.int64)
        both = pa.array(idx, pa.int64())
        return [pa.concat_arrays([h, m]).take(both) for h, m in zip(hit_rows, miss_rows, strict=True)], counts

    def write(
        self, signs: np.ndarray, columns: Sequence[pa.Array], gid: np.ndarray, keys: Sequence[pa.Array]
    ) -> None:
        """Apply a chunk just written to the state table (rows with `gid` -1 were not written;
        `keys` holds one row per group) to the cached keys it touches."""
        n_groups = len(keys[0]) if keys else 0
        if not n_groups:
            return
        cache = self.rows
        cache.written += len(signs)
        if cache.written > WRITE_READ_RATIO * (cache.hits + cache.misses) + WRITE_GRACE_ROWS:
            cache.clear()
            cache.complete, cache.retired = False, True
            return
        _, kr = self._keys(keys)
        hits, misses = self.rows.hits, self.rows.misses  # bookkeeping reads, not lookups
        hit, counts, old = self.rows.get_runs(kr)
        self.rows.hits, self.rows.misses = hits, misses
        known = hit | bool(self.rows.complete)
        if not known.any():
            return
        rows = np.flatnonzero(gid >= 0)
        rows = rows[known[gid[rows]]]
        groups = np.concatenate([np.repeat(np.flatnonzero(hit), counts[hit]), gid[rows]])
        n_old = int(counts[hit].sum())
        # event order: the old rows first, then the chunk's rows in chunk order
        seq = np.arange(len(groups), dtype=np.int64)
        present = np.concatenate([np.ones(n_old, np.bool_), signs[rows] > 0])
        take = pa.array(rows, pa.int64())
        cols = [
            pa.concat_arrays([o, as_type(c, t).take(take)])
            for o, c, t in zip(old, columns, self.types, strict=True)
        ]
        pk_bytes = memcomparable.encode_columns(
            [cols[p] for p in self.pk], self.state.desc.pk_types, list(self.state.desc.pk_orders)
        ).to_arrow()
        table = pa.table({"g": groups, "pk": pk_bytes, "s": seq})
        order = pc.sort_indices(table, [("g", "ascending"), ("pk", "ascending"), ("s", "ascending")])
        order_np = order.to_numpy()
        g_sorted = groups[order_np]
        pk_sorted = pk_bytes.take(order)
        # the last event of each (group, pk) decides whether the row is there, and which row
        last = np.ones(len(order_np), np.bool_)
        if len(order_np) > 1:
            same_pk = np.asarray(
                pc.equal(pk_sorted[1:], pk_sorted[:-1]).to_numpy(zero_copy_only=False), np.bool_
            )
            last[:-1] = ~((g_sorted[1:] == g_sorted[:-1]) & same_pk)
        keep = order_np[last & present[order_np]]
        new_counts = np.bincount(groups[keep], minlength=n_groups).astype(np.int64)
        kept = pa.array(keep, pa.int64())
        touched = np.flatnonzero(known)
        self.rows.put_runs(kr.take(touched), new_counts[touched], [c.take(kept) for c in cols])

    def clean_below(self, watermark: Datum) -> None:
        """Drop the keys whose first column is below the committed watermark (state hides them)."""
        bound = memcomparable.encode_datum(watermark, self.key_types[0], self.key_orders[0])
        self.rows.remove_below(bound)
