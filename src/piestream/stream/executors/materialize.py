"""Materialize: write a change stream into a table or MV and forward it (reference §6.4).

Conflict handling by pk:

- NoCheck: the input is a consistent change stream (MVs); write and forward it as is.
- Overwrite: an upsert stream (a table with a pk, seed 003 "upsert stream"): an insert of an
  existing key becomes U-(stored row) U+(new row), a delete carries the *stored* row, a delete of a
  missing key is dropped. The result is a consistent change stream.
- IgnoreConflict: an insert of an existing key is dropped (ON CONFLICT DO NOTHING).
- DoUpdateIfNotNull: like Overwrite, but the new row's NULL columns keep the stored values
  (RisingWave's ON CONFLICT DO UPDATE IF NOT NULL, for partial updates that widen a row). As in
  RisingWave, an UPDATE's U-/U+ pair merges the same way, so an UPDATE cannot set a column to
  NULL in such a table.

A chunk with a source's new-keys hint (`StreamChunk.new_keys`, a CDC snapshot's chunk: inserts of
keys the stream never had, into a table only that stream writes) has no conflict to resolve: it
is written as it is, without the lookup of its keys.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import EpochPair
from piestream.encoding import memcomparable
from piestream.encoding.ragged import Ragged
from piestream.plan.materialize import ConflictBehavior, MaterializeNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.agg.arrays import take_merged


class MaterializeExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: MaterializeNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.desc = node.table
        self.conflict = node.conflict
        self.state = self.table(node.table)
        # the table's rows by pk, kept in the worker across epochs for the conflict check
        # (write-through: every row written is put, every row deleted leaves)
        self.cache = (
            ctx.cache.keyed(f"materialize:{node.table.table_id}", [t.arrow for t in node.table.types])
            if node.conflict is not ConflictBehavior.NO_CHECK and node.table.pk
            else None
        )

    def init(self, epoch: EpochPair) -> None:
        super().init(epoch)
        if self.cache is not None and self.cache.complete is None:  # a new cache, nothing written yet
            # complete if the table holds nothing yet (a new table, a bulk load into an empty
            # one), then kept complete by the write-through: a miss is a key not stored, so the
            # conflict check reads no state. Decided from metadata (`surely_empty`), as a scan
            # for one row would merge every run of the LSM; an eviction makes it incomplete.
            self.cache.complete = self.state.surely_empty()

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity:
            return []
        known: _Keys | None = None  # the pks of `c` when known distinct
        if self.conflict is not ConflictBehavior.NO_CHECK:
            c, known = self._resolve_conflicts(c)
            if not c.capacity:
                return []
        self.state.write_chunk(c)
        if self.cache is not None:
            self._write_through(c, known)
        self.ctx.count("rows.mview", c.cardinality)  # for /metrics, per chunk
        return [c]

    def _pk_keys(self, c: StreamChunk) -> Ragged:
        d = self.desc
        return memcomparable.encode_columns([c.columns[i] for i in d.pk], d.pk_types, list(d.pk_orders))

    def _stored_rows(
        self, pk_cols: list[pa.Array], key_r: Ragged, hashes: np.ndarray | None
    ) -> tuple[np.ndarray, list[pa.Array]]:
        """(found, the stored rows, NULL where not found): the cache where it holds the key,
        one `get_rows` for the rest (none when the cache is complete). `hashes`: the keys'
        cache hashes."""
        if self.cache is None:
            found, chunk = self.state.get_rows(pk_cols)
            return found, chunk.columns
        hit, rows = self.cache.get(key_r, hashes=hashes)
        if hit.all() or self.cache.complete:  # a complete cache knows every stored key
            return hit, rows
        miss = np.flatnonzero(~hit)
        mask = pa.array(~hit)
        found_m, chunk_m = self.state.get_rows([k.filter(mask) for k in pk_cols])
        if not hit.any():
            return found_m, chunk_m.columns
        rows = [take_merged(r, miss, m.cast(r.type)) for r, m in zip(rows, chunk_m.columns, strict=True)]
        found = hit.copy()
        found[miss] = found_m
        return found, rows

    def _write_through(self, c: StreamChunk, known: _Keys | None) -> None:
        """Each key's last change of the chunk: its row put in the cache, or the key removed.
        `known`: the chunk's pks, when the conflict check found them distinct."""
        assert self.cache is not None
        if known is not None and known.uncached and (c.ops == Op.INSERT).all():
            # inserts of keys the cache's lookup just missed, each once: added without a search
            self.cache.put(known.keys, c.columns, hashes=known.hashes, distinct=True, uncached=True)
            self.ctx.charge_caches()
            return
        keys = known.keys if known is not None else self._pk_keys(c)
        n = keys.n
        if known is not None or _distinct(keys):  # each key once (bulk and upsert case)
            last = np.arange(n)
        else:
            # the last row of each key: the first occurrence among the reversed keys
            rev = keys.to_arrow().take(pa.array(np.arange(n - 1, -1, -1)))
            ids = pc.dictionary_encode(rev)
            _, first_rev = np.unique(
                np.asarray(ids.indices.to_numpy(zero_copy_only=False)), return_index=True
            )
            last = np.sort(n - 1 - first_rev)
        ins = c.ops[last] == Op.INSERT
        ins |= c.ops[last] == Op.UPDATE_INSERT
        put, gone = last[ins], last[~ins]
        if len(gone):
            self.cache.remove(keys.take(gone))
        if len(put) == n:  # every row: no gather
            hashes = known.hashes if known is not None else None
            self.cache.put(keys, c.columns, hashes=hashes, distinct=True)
        elif len(put):
            idx = pa.array(put)
            hashes = known.hashes[put] if known is not None and known.hashes is not None else None
            # `last` holds one row per key, so the keys put are distinct: no search for repeats
            self.cache.put(keys.take(put), [col.take(idx) for col in c.columns], hashes=hashes, distinct=True)
        self.ctx.charge_caches()

    @staticmethod
    def _inserts_of_distinct_keys(
        c: StreamChunk,
        key_r: Ragged,
        hashes: np.ndarray | None,
        found: np.ndarray,
        stored: list[pa.Array],
        overwrite: bool,
    ) -> tuple[StreamChunk, _Keys | None] | None:
        """The common bulk case, vectorized: only inserts, each key once in the chunk. A key not
        stored is inserted; a stored one is overwritten (U-, U+) or the insert dropped. Also
        the output's pks when it holds each key once (inserts only)."""
        if not (c.ops == Op.INSERT).all():
            return None
        if not _distinct(key_r, hashes):
            return None
        if not found.any():  # none stored, so none cached either
            return c, _Keys(key_r, hashes, uncached=hashes is not None)
        n = c.capacity
        if not overwrite:
            keep = pa.array(~found)
            out = StreamChunk(
                c.ops[~found], [col.filter(keep) for col in c.columns], length=int((~found).sum())
            )
            new = np.flatnonzero(~found)
            return out, _Keys(key_r.take(new), hashes[new] if hashes is not None else None)
        # each found row becomes U-(stored), U+(input); the others stay inserts
        reps = np.where(found, 2, 1)
        out_n = int(reps.sum())
        row = np.repeat(np.arange(n), reps)
        first = np.ones(out_n, np.bool_)
        first[1:] = row[1:] != row[:-1]
        is_old = found[row] & first
        ops = np.where(found[row], np.where(is_old, Op.UPDATE_DELETE, Op.UPDATE_INSERT), Op.INSERT).astype(
            np.int8
        )
        gather = pa.array(np.where(is_old, n + row, row))
        cols = [
            pa.concat_arrays([a, b.cast(a.type)]).take(gather) for a, b in zip(c.columns, stored, strict=True)
        ]
        return StreamChunk(ops, cols, length=out_n), None

    def _resolve_conflicts(self, c: StreamChunk) -> tuple[StreamChunk, _Keys | None]:
        """The chunk with conflicts resolved, and its pks if it is known to hold each once."""
        d = self.desc
        pk_cols = [c.columns[i] for i in d.pk]
        key_r = self._pk_keys(c)
        # the keys' cache hashes, once for the lookup, the distinct check and the write-through
        hashes = self.cache.hashes(key_r) if self.cache is not None else None
        if c.new_keys and (c.ops == Op.INSERT).all() and _distinct(key_r, hashes):
            # the source's hint (a CDC snapshot chunk): none of these keys is stored, so there
            # is nothing to look up; the distinct check guards the write-through's premise
            return c, _Keys(key_r, hashes)
        found, stored = self._stored_rows(pk_cols, key_r, hashes)
        merge = self.conflict is ConflictBehavior.DO_UPDATE_IF_NOT_NULL
        overwrite = merge or self.conflict is ConflictBehavior.OVERWRITE
        if not (merge and found.any()):  # a merge needs the general path
            fast = self._inserts_of_distinct_keys(c, key_r, hashes, found, stored, overwrite)
            if fast is not None:
                return fast
        keys = key_r.to_list()
        # A row is (source, index): an input row, a stored row, or a merged row (DO UPDATE IF NOT
        # NULL: an input row over the row it updates, `merged[index]` = (that row, input index)).
        INPUT, STORED, MERGED = 0, 1, 2
        # Per-row Python: several ops on one key within a chunk must see each other's effect.
        current: dict[bytes, tuple[int, int] | None] = {}
        for i, k in enumerate(keys):
            if k not in current:
                current[k] = (STORED, i) if found[i] else None
        merged: list[tuple[tuple[int, int], int]] = []
        src: list[int] = []
        idx: list[int] = []
        ops: list[int] = []

        def emit(where: tuple[int, int], op: Op) -> None:
            src.append(where[0])
            idx.append(where[1])
            ops.append(op)

        op_list = c.ops.tolist()
        for i, (op, k) in enumerate(zip(op_list, keys, strict=True)):
            cur = current[k]
            if op in (Op.INSERT, Op.UPDATE_INSERT):
                if cur is None:
                    emit((INPUT, i), Op.INSERT)
                    current[k] = (INPUT, i)
                elif overwrite:
                    new = (INPUT, i)
                    if merge:
                        merged.append((cur, i))
                        new = (MERGED, len(merged) - 1)
                    emit(cur, Op.UPDATE_DELETE)
                    emit(new, Op.UPDATE_INSERT)
                    current[k] = new
            elif overwrite and op == Op.UPDATE_DELETE and i + 1 < len(keys) and keys[i + 1] == k:
                continue  # the following U+ of the same key overwrites (or merges into) the row
            elif cur is not None:
                emit(cur, Op.DELETE)
                current[k] = None
        if not ops:
            return StreamChunk(np.zeros(0, np.int8), [col.slice(0, 0) for col in c.columns], length=0), None
        n = c.capacity
        base = [pa.concat_arrays([a, b.cast(a.type)]) for a, b in zip(c.columns, stored, strict=True)]
        if merged:
            extra = _merge_rows(base, merged, n)
            base = [pa.concat_arrays([col, m]) for col, m in zip(base, extra, strict=True)]
        # gather from [input rows ; stored rows ; merged rows] in one take per column
        offset = np.array([0, n, 2 * n], np.int64)
        gather = pa.array(offset[np.array(src, np.int64)] + np.array(idx, np.int64))
        return StreamChunk(np.array(ops, np.int8), [col.take(gather) for col in base], length=len(ops)), None


class _Keys(NamedTuple):
    """A chunk's pks, each once: their bytes, their cache hashes (if there is a cache), and
    whether the cache's lookup of this chunk missed every one (so a put need not search)."""

    keys: Ragged
    hashes: np.ndarray | None
    uncached: bool = False


def _distinct(keys: Ragged, hashes: np.ndarray | None = None) -> bool:
    """Whether every key of a chunk differs from the others. Distinct 64-bit hashes (of the
    keys' bytes) settle it without the bytes, by one numpy sort (~10x faster than Arrow's
    `unique` of them); equal hashes may still be a collision, so then the bytes decide
    (Arrow's `unique` hashes them once; its `count_distinct` is ~10x slower on binary)."""
    if hashes is not None:
        s = np.sort(hashes)
        if not (s[1:] == s[:-1]).any():
            return True
    return len(pc.unique(keys.to_arrow())) == keys.n


def _merge_rows(base: list[pa.Array], merged: list[tuple[tuple[int, int], int]], n: int) -> list[pa.Array]:
    """The columns of DO UPDATE IF NOT NULL's merged rows: each column takes the input row's value
    unless it is NULL, then the value of the row it updates (itself perhaps a merged row of an
    earlier insert of the same key in this chunk). `base` holds [input rows ; stored rows]."""
    # each merged row's candidates, newest first, as positions in `base` (-1 pads short chains)
    chains: list[list[int]] = []
    for (src, j), i in merged:  # per merged row: chains are as long as a key repeats in a chunk
        chains.append([i] + (chains[j] if src == 2 else [j if src == 0 else n + j]))
    width = max(len(ch) for ch in chains)
    cand = np.full((len(chains), width), -1, np.int64)
    for r, ch in enumerate(chains):
        cand[r, : len(ch)] = ch
    out = []
    for col in base:
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        ok = (cand >= 0) & valid[np.maximum(cand, 0)]
        first = np.where(ok.any(axis=1), ok.argmax(axis=1), 0)  # no value anywhere: NULL stays
        out.append(col.take(pa.array(cand[np.arange(len(chains)), first])))
    return out
