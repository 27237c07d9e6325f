"""Backfill (StreamTableScan): a new MV reads an existing table's rows, then follows its changes.

The actor sits beside one actor of the upstream table (same vnode range, a no-shuffle edge).
Each epoch, before any of the epoch's upstream changes, it emits the next
`backfill_rows_per_epoch` rows of the upstream's committed snapshot (the state before this
epoch's changes), in table-key order over its vnodes, resuming after the last key it emitted.
Of the epoch's upstream changes it forwards only those at or below that position (RisingWave's
no-shuffle backfill rule): a row above it is not emitted yet, and a later epoch's snapshot read
will see the change applied. So downstream always holds exactly the upstream rows at or below
the position, and once every vnode is done it holds the table and just follows its changes.

Per vnode the state table keeps (done, rows emitted, last emitted key), written with the epoch,
so a restart resumes where the last committed epoch stopped; the rows feed
``rw_catalog.rw_ddl_progress``. Plans from before chunked backfill have a (vnode, done) state
table: they read the whole snapshot in one epoch, as they did.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk
from piestream.common.types import BIGINT, BOOLEAN, BYTEA, INT
from piestream.encoding.keys import VNODE_LEN
from piestream.encoding.ragged import Ragged
from piestream.plan.backfill import LEGACY_STATE_COLUMNS, BackfillNode
from piestream.storage.table.row_serde import RowSerde
from piestream.storage.table.storage_table import StorageTable
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier


@dataclass
class _Vnodes:
    """The progress of this actor's vnodes (arrays indexed like `vnodes`)."""

    vnodes: np.ndarray  # int64, ascending
    found: np.ndarray  # bool: has a state row
    done: np.ndarray  # bool
    rows: np.ndarray  # int64
    pos: list[bytes | None]  # last emitted table key


class BackfillExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: BackfillNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.node = node
        self.progress = self.table(node.state_table)
        self.legacy = len(node.state_table.columns) == LEGACY_STATE_COLUMNS
        self._own_vnodes = node.upstream.vnode_count == ctx.vnodes.count  # else the singleton's [0]
        self._started = False
        self._all_done = False
        self._state: _Vnodes | None = None  # after this epoch's snapshot read
        # the actor's cache is shared by its executors: a join of two scans has two backfills
        self._done_key = f"backfill_done:{node.state_table.table_id}"

    # built when first used, not with the actor every epoch: once the backfill is done (its
    # steady state) the executor only passes the upstream's changes on
    @functools.cached_property
    def vnodes(self) -> list[int]:
        """The upstream's vnodes this actor backfills."""
        return self.ctx.vnodes.vnodes().tolist() if self._own_vnodes else [0]

    @functools.cached_property
    def _serde(self) -> RowSerde:
        return RowSerde(self.node.upstream)

    # -- this epoch's snapshot read -------------------------------------------------------------
    def _read_state(self) -> _Vnodes:
        vn = np.asarray(self.vnodes, np.int64)
        found, rows = self.progress.get_rows([pa.array(vn, pa.int32())])  # one state call
        done = np.array(rows.columns[1].fill_null(False).to_numpy(zero_copy_only=False), bool)
        if self.legacy:
            return _Vnodes(vn, found, done, np.zeros(len(vn), np.int64), [None] * len(vn))
        counts = np.array(rows.columns[2].fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        return _Vnodes(vn, found, done, counts, rows.columns[3].to_pylist())

    def _start(self) -> list[StreamChunk]:
        """Once per epoch, before anything else: the next snapshot rows, as inserts."""
        if self._started:
            return []
        self._started = True
        if self.ctx.cache.get(self._done_key):  # valid: the cache reflects the committed epoch
            self._all_done = True
            return []
        st = self._read_state()
        if st.done.all():
            self._all_done = True
            self.ctx.cache[self._done_key] = True
            return []
        old = dataclasses.replace(st, done=st.done.copy(), rows=st.rows.copy(), pos=list(st.pos))
        budget = None if self.legacy else max(1, self.ctx.config.backfill_rows_per_epoch)
        emitted: list[DataChunk] = []
        if self.ctx.committed_epoch:  # before the first commit there is nothing to read
            emitted = self._read_snapshot(st, budget)
        else:
            st.done[:] = True
        self._write_state(old, st)
        self._state = st
        self._all_done = bool(st.done.all())
        out: list[StreamChunk] = []
        for c in emitted:
            out.extend(StreamChunk.inserts(c).split(self.ctx.config.chunk_size))
        return out

    def _runs(self, st: _Vnodes) -> list[tuple[int, int]]:
        """Index ranges [i, j) of pending vnodes that one key-range scan can cover: consecutive
        vnode numbers, a resumed vnode only at a run's start (a loop per vnode, not per row)."""
        runs: list[tuple[int, int]] = []
        i, n = 0, len(st.vnodes)
        while i < n:
            if st.done[i]:
                i += 1
                continue
            j = i + 1
            while j < n and not st.done[j] and st.vnodes[j] == st.vnodes[j - 1] + 1 and st.pos[j] is None:
                j += 1
            runs.append((i, j))
            i = j
        return runs

    def _read_snapshot(self, st: _Vnodes, budget: int | None) -> list[DataChunk]:
        snapshot = StorageTable(
            self.node.upstream, self.ctx.storage, self.ctx.committed_epoch, list(self.node.output_indices)
        )
        out: list[DataChunk] = []
        remaining = budget
        for i, j in self._runs(st):
            if remaining == 0:
                break
            # resume at the last emitted key and skip it (storage compares user key + epoch, so
            # "the key after it" is not a byte string to seek to)
            p = st.pos[i]
            start = p if p is not None else int(st.vnodes[i]).to_bytes(VNODE_LEN, "big")
            hi = int(st.vnodes[j - 1]) + 1
            end = hi.to_bytes(VNODE_LEN, "big") if hi < 2 ** (8 * VNODE_LEN) else None
            last_key: bytes | None = None
            for chunk, keys in snapshot.scan_keyed(start, end):
                if p is not None and len(keys) and keys[0].as_py() <= p:
                    after = np.flatnonzero(pc.greater(keys, pa.scalar(p, pa.binary())).to_numpy(False))
                    chunk, keys = chunk.take(after), keys.take(pa.array(after))
                if remaining is not None and chunk.capacity >= remaining:
                    chunk, keys = chunk.slice(0, remaining), keys.slice(0, remaining)
                self._count(st, keys)
                out.append(chunk)
                if remaining is not None:
                    remaining -= chunk.capacity
                if remaining == 0:
                    last_key = keys[len(keys) - 1].as_py()
                    break
            if last_key is None:  # the run's scan ended: all its vnodes are done
                st.done[i:j] = True
                continue
            # stopped inside vnode v: the ones before it are done, v resumes after last_key
            v = int.from_bytes(last_key[:VNODE_LEN], "big")
            k = i + int(np.searchsorted(st.vnodes[i:j], v))
            st.done[i:k] = True
            st.pos[k] = last_key
        return out

    def _count(self, st: _Vnodes, keys: pa.Array) -> None:
        """Add a chunk's rows to their vnodes' counts (vnode = the key's first two bytes)."""
        if not len(keys):
            return
        r = Ragged.from_arrow(keys)
        starts = r.offsets[:-1]
        vn = r.data[starts].astype(np.int64) * 256 + r.data[starts + 1]
        uniq, counts = np.unique(vn, return_counts=True)
        st.rows[np.searchsorted(st.vnodes, uniq)] += counts

    def _write_state(self, old: _Vnodes, st: _Vnodes) -> None:
        """The vnodes' new state rows: an update of an existing row, an insert of a new one."""
        ops: list[Op] = []
        rows: list[tuple[object, ...]] = []
        for idx in range(len(st.vnodes)):  # per vnode (at most 256), not per row
            new = self._row(st, idx)
            if old.found[idx]:
                prev = self._row(old, idx)
                if prev == new:
                    continue
                ops += [Op.UPDATE_DELETE, Op.UPDATE_INSERT]
                rows += [prev, new]
            else:
                ops.append(Op.INSERT)
                rows.append(new)
        if rows:
            types = [INT, BOOLEAN] if self.legacy else [INT, BOOLEAN, BIGINT, BYTEA]
            self.progress.write_chunk(StreamChunk.from_rows(list(zip(ops, rows, strict=True)), types))

    def _row(self, st: _Vnodes, idx: int) -> tuple[object, ...]:
        base = (int(st.vnodes[idx]), bool(st.done[idx]))
        return base if self.legacy else (*base, int(st.rows[idx]), st.pos[idx])

    # -- upstream changes -----------------------------------------------------------------------
    def _forward(self, chunk: StreamChunk) -> list[StreamChunk]:
        """The upstream changes at or below the position (all once every vnode is done)."""
        st = self._state
        if self._all_done or st is None:
            return [chunk.project(list(self.node.output_indices))]
        c = chunk.compact()
        if not c.capacity:
            return []
        keys, vn = self._serde.table_keys(c.columns)
        keep = st.done[np.searchsorted(st.vnodes, vn)]
        for idx in np.flatnonzero(~st.done & np.array([p is not None for p in st.pos])):  # partial vnodes
            p = st.pos[idx]
            below = pc.less_equal(keys.to_arrow(), pa.scalar(p, pa.binary())).to_numpy(zero_copy_only=False)
            keep |= (vn == st.vnodes[idx]) & below
        if keep.all():
            return [c.project(list(self.node.output_indices))]
        if not keep.any():
            return []
        ops = c.ops.copy()
        # a U-/U+ pair may lose one half (an update that moved the pk across the position):
        # the halves left become a plain delete / insert
        ops[ops == Op.UPDATE_DELETE] = Op.DELETE
        ops[ops == Op.UPDATE_INSERT] = Op.INSERT
        kept = StreamChunk(ops, c.columns, length=c.capacity).take(np.flatnonzero(keep))
        return [kept.project(list(self.node.output_indices))]

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        return [*self._start(), *self._forward(chunk)]

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out = self._start()
        if self._all_done:
            self.ctx.cache[self._done_key] = True
        self.commit_state(barrier)
        return out
