"""OverWindow: ranking window functions (row_number, rank, dense_rank) over partitions, maintained
incrementally (reference §6 / §7: output = input columns ++ one column per call, stream key = input
stream key ++ partition columns).

The state table holds every input row, keyed by partition | ORDER BY | rest of the input stream key
(the same layout as a GroupTopN), so a partition's rows come back in window order and ties in
ORDER BY are broken by the stream key, deterministically. Output is computed per epoch, like TopN:
the first time a chunk touches a partition in an epoch the executor reads the partition (what it
has emitted so far is a function of those rows); on the barrier it re-reads every touched
partition, recomputes the window values and emits the difference, Deletes before Inserts. A row
whose rank moved is retracted with its old value and inserted with the new one.

Both reads are one scan for all the partitions concerned (`group_scan.read_groups`), so a chunk
costs a constant number of state calls. Cost per touched partition and epoch is its size: fine
for the partitions ROW_NUMBER() <= N leaves (the planner puts a GroupTopN below when the filter
allows) and for moderate ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.common.scalar import Row
from piestream.plan.over_window import OverWindowNode
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.group_ids import group_ids
from piestream.stream.executors.group_scan import read_groups
from piestream.stream.message import Barrier


def window_values(rows: Sequence[Row], order_cols: Sequence[int], calls: Sequence[str]) -> list[Row]:
    """Each row (in window order) with its window values appended."""
    out: list[Row] = []
    rank = dense = 0
    prev: tuple[object, ...] | None = None
    for i, r in enumerate(rows):
        peers = tuple(r[c] for c in order_cols)
        if prev is None or peers != prev:
            rank = i + 1
            dense += 1
            prev = peers
        vals = {"row_number": i + 1, "rank": rank, "dense_rank": dense}
        out.append((*r, *(vals[c] for c in calls)))
    return out


class OverWindowExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: OverWindowNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, False)
        self.state = self.table(node.state_table)
        self.desc = node.state_table
        self.partition_by = list(node.partition_by)
        self.n_part = len(node.partition_by)
        self.order_cols = [c for c, _ in node.order_by]
        self.calls = list(node.calls)
        self.in_types = node.input.schema.types
        self.types = node.schema.types
        self.parts: dict[bytes, list[Row]] = {}  # partition -> its rows at the epoch start
        self._prefixes: list[list[pa.Array]] = []  # partition key columns, in `parts` order

    def _read(self, prefix_cols: list[pa.Array], n: int) -> list[list[Row]]:
        """The rows of `n` partitions, in window order, with one state call."""
        g = read_groups(self.state, prefix_cols, n)
        # Python rows: the window values and the diff are computed row by row per partition
        flat = g.chunk.to_rows(self.desc.types)
        return [flat[a : a + k] for a, k in zip(g.starts.tolist(), g.counts.tolist(), strict=True)]

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        ids, uniq = group_ids([c.columns[i] for i in self.partition_by], self.desc.pk_types[: self.n_part], n)
        new = [g for g, key in enumerate(uniq) if key not in self.parts]
        if new:
            _, first = np.unique(ids, return_index=True)
            idx = pa.array(first[new], pa.int64())
            prefix_cols = [c.columns[i].take(idx) for i in self.partition_by]
            self._prefixes.append(prefix_cols)
            for g, rows in zip(new, self._read(prefix_cols, len(new)), strict=True):
                self.parts[uniq[g]] = rows
        self.state.write_chunk(c)
        return []

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        deletes: list[tuple[Op, Row]] = []
        inserts: list[tuple[Op, Row]] = []
        if self.parts:
            # every touched partition re-read with one state call
            cols = [pa.concat_arrays([p[j] for p in self._prefixes]) for j in range(self.n_part)]
            for old_rows, new_rows in zip(
                self.parts.values(), self._read(cols, len(self.parts)), strict=True
            ):
                old = window_values(old_rows, self.order_cols, self.calls)
                new = window_values(new_rows, self.order_cols, self.calls)
                old_set, new_set = {_key(r) for r in old}, {_key(r) for r in new}
                deletes.extend((Op.DELETE, r) for r in old if _key(r) not in new_set)
                inserts.extend((Op.INSERT, r) for r in new if _key(r) not in old_set)
        self.parts = {}
        self._prefixes = []
        self.commit_state(barrier)
        records = deletes + inserts
        if not records:
            return []
        return StreamChunk.from_rows(records, self.types).split(self.ctx.config.chunk_size)


def _key(v: object) -> object:
    """A hashable stand-in for a row (array and struct values are lists / dicts)."""
    if isinstance(v, list | tuple):
        return tuple(_key(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _key(x)) for k, x in v.items())
    return v
