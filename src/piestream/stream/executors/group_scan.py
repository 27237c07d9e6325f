"""Reading the state rows of many groups with one state call (a chunk's groups, an epoch's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.storage.table.state_table import StateTable


@dataclass
class GroupRows:
    """The rows of several groups, concatenated group by group (each group in pk order)."""

    chunk: DataChunk
    starts: np.ndarray  # first row of each group
    counts: np.ndarray  # rows per group

    def slices(self, ends: np.ndarray) -> np.ndarray:
        """Row indices [start, end) of every group, concatenated."""
        lens = ends - self.starts
        total = int(lens.sum())
        return np.repeat(self.starts - (np.cumsum(lens) - lens), lens) + np.arange(total, dtype=np.int64)


def read_groups(table: StateTable, prefix_cols: Sequence[pa.Array], n_groups: int) -> GroupRows:
    """Every row of each group (pk prefix given as columns, one row per group), in one scan.

    No prefix columns means one group: the whole table (every owned vnode)."""
    if not n_groups:
        return GroupRows(table_empty(table), np.zeros(0, np.int64), np.zeros(0, np.int64))
    if prefix_cols or table.desc.is_singleton:
        chunk, counts = table.scan_prefix_columns(prefix_cols)
    else:  # the one group of a table distributed over vnodes: one scan of all owned vnodes
        parts = list(table.iter_chunks_with_prefix(()))
        chunk = DataChunk.concat(parts) if parts else table_empty(table)
        counts = np.array([chunk.capacity], np.int64)
    return GroupRows(chunk, np.cumsum(counts) - counts, counts)


def table_empty(table: StateTable) -> DataChunk:
    """No rows, in the table's column types."""
    return DataChunk([pa.nulls(0, t.arrow) for t in table.desc.types], length=0)
