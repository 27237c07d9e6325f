"""TopN / GroupTopN: per group, the rows ranked [offset, offset + limit) (reference §6.3).

Rows rank by the state table's pk order: group key, then ORDER BY, then the rest of the input
stream key, so ties in ORDER BY are broken deterministically by the stream key and a re-run task
computes the same ranking. WITH TIES keeps every row tied (in ORDER BY) with the last one.

Retractable input keeps **all** rows in the state table: a deleted top row is replaced by the next
one, which only the table knows. Append-only input without ties runs in `AppendOnlyTopNExecutor`
(top_n_append_only.py); with ties it runs here, and since it can never bring a row back, rows that
fall out of the top range are deleted from state and rows arriving below it are never written.

Output is computed per epoch, not per row: the first time a chunk touches a group in an epoch the
executor reads the group's current range from the table (that is what it has emitted so far); on
the barrier it re-reads the range of every group a change may have reached and emits the
difference (Deletes before Inserts, so the output stream key alternates). Each of these reads is
one scan for all the groups at once (`group_scan.read_groups`), never one per group: a chunk
costs a constant number of state calls. The scan reads the groups' whole rows and cuts each to its
range (and ties) with vector operations; only the rows in range become Python rows, for the diff.
A change ranked below the range's last row (`_Group.bound`) cannot alter the range, so such
groups are not re-read.
The low/middle/high cache of reference §6.3 is an optimization over this: each epoch reads the
committed state, which is what survives a Spark task re-run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import InternalError
from piestream.common.scalar import Row
from piestream.encoding import memcomparable
from piestream.plan.top_n import TopNNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.group_ids import group_ids
from piestream.stream.executors.group_scan import GroupRows, read_groups
from piestream.stream.message import Barrier


@dataclass
class _Group:
    """One group touched this epoch: its range as of the epoch start (= what was emitted)."""

    pos: int  # the group's row in the epoch's prefix columns (`TopNExecutor._prefixes`)
    rows: list[Row]  # ranks [0, offset + limit) (+ ties) at the epoch start
    bound: bytes | None  # rank key of the last row read; None = the group has fewer rows (no bound)
    dirty: bool = False  # some change ranked at or above `bound`


@dataclass
class _Ranges:
    """The ranges of several groups, read with one state call."""

    rows: list[list[Row]]  # per group: ranks [0, offset + limit) (+ ties)
    bounds: list[bytes | None]  # per group: rank key of the range's last row, None if not full
    below: StreamChunk | None  # the rows ranked after each full range, as deletes


class TopNExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: TopNNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, False)
        self.node = node
        self.state = self.table(node.state_table)
        self.desc = node.state_table
        self.append_only_input = node.input.append_only
        self.types = node.schema.types
        self.group_key = list(node.group_key)
        self.n_group = len(node.group_key)
        self.limit = node.limit
        self.offset = node.offset
        self.k = node.offset + node.limit  # rows to read per group
        self.with_ties = node.with_ties and node.limit > 0
        # pk columns up to the end of ORDER BY (top_n_table drops ORDER BY columns already in the pk)
        seen = set(node.group_key)
        n_order = 0
        for col, _ in node.order_by:
            if col not in seen:
                seen.add(col)
                n_order += 1
        self.n_rank = self.n_group + n_order
        # what decides whether a change can reach the range: the full pk, or with ties only ORDER BY
        self.n_bound = self.n_rank if self.with_ties else len(self.desc.pk)
        self.groups: dict[bytes, _Group] = {}
        self._prefixes: list[list[pa.Array]] = []  # the group key columns of the epoch's groups

    # -- keys -----------------------------------------------------------------------------------
    def _bound_keys(self, columns: Sequence[pa.Array]) -> np.ndarray:
        """Per row, the memcomparable key compared with a group's bound (object array of bytes)."""
        n = len(columns[0])
        if self.n_bound == 0:
            return np.full(n, b"", dtype=object)
        pk = self.desc.pk[: self.n_bound]
        keys = memcomparable.encode_columns(
            [columns[i] for i in pk],
            self.desc.pk_types[: self.n_bound],
            list(self.desc.pk_orders[: self.n_bound]),
        )
        return np.array(keys.to_list(), dtype=object)

    # -- reading the groups' ranges -------------------------------------------------------------
    def _read_ranges(self, prefix_cols: list[pa.Array], n_groups: int) -> _Ranges:
        """Ranks [0, offset + limit) of each group (+ rows tied with the last one) and the
        bounds, from one scan of the groups' rows."""
        g = read_groups(self.state, prefix_cols, n_groups)
        ends = g.starts + np.minimum(g.counts, self.k)
        full = g.counts >= self.k
        n = g.chunk.capacity
        keys = self._bound_keys(g.chunk.columns) if full.any() else None
        if self.with_ties and keys is not None:
            # extend each full range over the rows tied with its last one: runs of equal rank keys
            # (a group's first row always starts a run), the range ends where its last row's run does
            new_run = np.ones(n, np.bool_)
            new_run[1:] = keys[1:] != keys[:-1]
            new_run[g.starts[g.counts > 0]] = True
            run_id = np.cumsum(new_run) - 1
            run_end = np.append(np.flatnonzero(new_run)[1:], n)
            ends[full] = run_end[run_id[ends[full] - 1]]
        lens = ends - g.starts
        # Python rows only for the rows in range: the barrier diffs them row by row
        flat = g.chunk.take(g.slices(ends)).to_rows(self.types)
        cuts = np.cumsum(lens)
        rows = [flat[a:b] for a, b in zip((cuts - lens).tolist(), cuts.tolist(), strict=True)]
        bounds = [
            keys[e - 1] if f and keys is not None else None
            for e, f in zip(ends.tolist(), full.tolist(), strict=True)
        ]
        below = None
        if self.append_only_input and full.any():
            # append-only: rows ranked after a full range can never re-enter it
            past = GroupRows(g.chunk, ends, g.counts - lens).slices(g.starts + g.counts)
            if len(past):
                data = g.chunk.take(past)
                below = StreamChunk(np.full(len(past), Op.DELETE, np.int8), data.columns)
        return _Ranges(rows, bounds, below)

    def _prefix_cols(self, c: StreamChunk, rows: np.ndarray) -> list[pa.Array]:
        idx = pa.array(rows, pa.int64())
        return [c.columns[i].take(idx) for i in self.group_key]

    # -- input ----------------------------------------------------------------------------------
    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n or self.k == 0:  # LIMIT 0 never emits, so nothing needs to be kept
            return []
        if self.append_only_input and not (c.ops == Op.INSERT).all():
            raise InternalError("append-only TopN received a retraction")
        # group ids per row (vectorized); a singleton TopN has one group
        ids, uniq = group_ids([c.columns[i] for i in self.group_key], self.desc.pk_types[: self.n_group], n)
        # first touch of a group this epoch: read the ranges of all new groups, before this
        # chunk's writes, with one state call
        new = [g for g, key in enumerate(uniq) if key not in self.groups]
        if new:
            _, first = np.unique(ids, return_index=True)
            prefix_cols = self._prefix_cols(c, first[new])
            ranges = self._read_ranges(prefix_cols, len(new))
            pos = sum(len(p[0]) for p in self._prefixes) if self.n_group else len(self.groups)
            self._prefixes.append(prefix_cols)
            for j, g in enumerate(new):
                self.groups[uniq[g]] = _Group(pos + j, ranges.rows[j], ranges.bounds[j])
        groups = [self.groups[key] for key in uniq]
        # does each row rank at or above its group's bound? (one object-array compare)
        unbounded = np.array([g.bound is None for g in groups], np.bool_)
        bounds = np.array([g.bound or b"" for g in groups], dtype=object)
        reaches = unbounded[ids] | (self._bound_keys(c.columns) <= bounds[ids]).astype(np.bool_)
        for g in np.unique(ids[reaches]).tolist():
            groups[g].dirty = True
        if self.append_only_input and not reaches.all():
            c = c.take(np.flatnonzero(reaches))  # below the range forever: never stored
            ids = ids[reaches]
        self.state.write_chunk(c)
        return []

    # -- barrier --------------------------------------------------------------------------------
    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        records: list[tuple[Op, Row]] = []
        dirty = [g for g in self.groups.values() if g.dirty]
        # every dirty group's new range with one state call
        ranges = self._read_ranges(self._dirty_prefixes(dirty), len(dirty))
        new_rows = ranges.rows
        if ranges.below is not None:
            self.state.write_chunk(ranges.below)
        for g, rows in zip(dirty, new_rows, strict=True):
            # per-row loop over the rows in range of a group whose range may have changed
            old = g.rows[self.offset :]
            new = rows[self.offset :]
            new_set = {_key(r) for r in new}
            old_set = {_key(r) for r in old}
            records.extend((Op.DELETE, r) for r in old if _key(r) not in new_set)
            records.extend((Op.INSERT, r) for r in new if _key(r) not in old_set)
        self.groups = {}
        self._prefixes = []
        self.commit_state(barrier)
        if not records:
            return []
        return StreamChunk.from_rows(records, self.types).split(self.ctx.config.chunk_size)

    def _dirty_prefixes(self, dirty: list[_Group]) -> list[pa.Array]:
        if not self.n_group or not dirty:
            return []
        cols = [pa.concat_arrays([p[j] for p in self._prefixes]) for j in range(self.n_group)]
        idx = pa.array([g.pos for g in dirty], pa.int64())
        return [col.take(idx) for col in cols]


def _key(v: object) -> object:
    """A hashable stand-in for a row (array and struct values are lists / dicts)."""
    if isinstance(v, list | tuple):
        return tuple(_key(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _key(x)) for k, x in v.items())
    return v
