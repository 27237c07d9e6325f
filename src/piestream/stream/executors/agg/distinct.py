"""DISTINCT aggregates: the dedup table counts each (group, value) per distinct call.

A value contributes to its call when its count goes 0 -> n and retracts when it goes n -> 0;
every other change is absorbed here (reference §6.1 "distinct dedup table"). Counts move per
call because each call has its own FILTER. The epoch's count deltas are reduced per
(group, value) like any dirty group, then looked up, updated and written in one vectorized pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.common.errors import StateConsistencyError
from piestream.common.types import DataType
from piestream.plan.hash_agg import DistinctTable
from piestream.storage.table.state_table import StateTable
from piestream.stream.executors.agg.arrays import change_rows, np_int
from piestream.stream.executors.agg.dirty import DirtyGroups
from piestream.stream.executors.agg.states import DeltaSpec


@dataclass
class Contributions:
    """Rows (group key, value) whose count crossed zero, with +1 / -1 / 0 per distinct call."""

    key_cols: list[pa.Array]
    value: pa.Array
    signs: list[np.ndarray]


class DistinctDedup:
    def __init__(
        self, desc: DistinctTable, table: StateTable, group_types: Sequence[DataType], value_type: DataType
    ) -> None:
        self.desc = desc
        self.table = table
        self.g = len(group_types)
        specs = [DeltaSpec(pa.int64(), "sum")] * len(desc.calls)
        self.counts = DirtyGroups([*group_types, value_type], specs)

    def add(
        self, key_cols: Sequence[pa.Array], value: pa.Array, signs: np.ndarray, masks: Sequence[np.ndarray]
    ) -> None:
        """Buffer the count changes of a chunk's rows (those some distinct call aggregates)."""
        rows = np.logical_or.reduce(masks)
        if not rows.any():
            return
        idx = pa.array(np.flatnonzero(rows))
        cols = [c.take(idx) for c in (*key_cols, value)]
        deltas = [pa.array((signs * m)[rows]) for m in masks]
        self.counts.add(cols, deltas, len(idx))

    def flush(self) -> Contributions | None:
        """Apply the epoch's count changes to the dedup table; return the zero crossings."""
        groups = self.counts.take()
        if groups is None:
            return None
        found, stored_chunk = self.table.get_rows(groups.key_cols)
        stored = stored_chunk.columns
        k = self.g + 1
        signs = []
        new_counts = []
        changed = np.zeros(groups.n, np.bool_)
        for i, delta in enumerate(groups.deltas):
            d = np_int(delta)
            old = np_int(stored[k + i])
            new = old + d
            if (new < 0).any():
                raise StateConsistencyError(
                    "distinct count went negative: a retracted row was never inserted"
                )
            signs.append(np.where((old == 0) & (new > 0), 1, np.where((old > 0) & (new == 0), -1, 0)))
            new_counts.append(pa.array(new))
            changed |= d != 0
        alive = np.logical_or.reduce([np_int(c) > 0 for c in new_counts])
        ops, cols = change_rows(stored, [*groups.key_cols, *new_counts], found, alive, changed)
        if len(ops):
            self.table.write_chunk(StreamChunk(ops, cols))
        crossed = pa.array(np.flatnonzero(np.logical_or.reduce([s != 0 for s in signs])))
        keys = [c.take(crossed) for c in groups.key_cols]
        idx = crossed.to_numpy()
        return Contributions(keys[: self.g], keys[self.g], [s[idx] for s in signs])
