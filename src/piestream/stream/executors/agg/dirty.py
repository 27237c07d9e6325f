"""Dirty groups: per-group deltas accumulated over an epoch (reference §6.1).

Each chunk contributes rows of (group key, deltas); they are reduced per group with one Arrow
hash aggregation (`pa.Table.group_by`) over the group key's memcomparable bytes, which is also
the state table's key, so values SQL considers equal (e.g. -0.0 and 0.0) share a group. Rows are
buffered and reduced when the buffer grows and when the epoch's barrier takes the groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.encoding import memcomparable
from piestream.stream.executors.agg.states import DeltaSpec

_REDUCE_AT = 1 << 16


@dataclass
class Groups:
    """Distinct groups in key order with their summed deltas."""

    key_cols: list[pa.Array]
    deltas: list[pa.Array]
    n: int


class DirtyGroups:
    def __init__(self, key_types: Sequence[DataType], specs: Sequence[DeltaSpec]) -> None:
        self.key_types = list(key_types)
        self.specs = list(specs)
        self._parts: list[pa.Table] = []
        self._rows = 0
        self._limit = _REDUCE_AT  # grows with the number of groups, so reducing stays amortized
        self._names = (
            ["_g"] + [f"k{i}" for i in range(len(self.key_types))] + [f"d{i}" for i in range(len(specs))]
        )

    def _key(self, key_cols: Sequence[pa.Array], n: int) -> pa.Array:
        if not key_cols:
            return pa.array(np.zeros(n, np.int8))
        return memcomparable.encode_columns_arrow(list(key_cols), self.key_types, [ASC] * len(key_cols))

    def add(self, key_cols: Sequence[pa.Array], deltas: Sequence[pa.Array], n: int) -> None:
        """Buffer `n` rows of deltas (one array per spec) for the groups in `key_cols`."""
        if not n:
            return
        cols = [self._key(key_cols, n), *key_cols, *deltas]
        self._parts.append(pa.Table.from_arrays(cols, names=self._names))
        self._rows += n
        if self._rows >= self._limit:
            self._parts = [self._reduce()]
            self._rows = self._parts[0].num_rows
            self._limit = max(_REDUCE_AT, 2 * self._rows)

    def _reduce(self) -> pa.Table:
        t = pa.concat_tables(self._parts).combine_chunks()
        t = t.append_column("_i", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        aggs = [("_i", "min")] + [(f"d{i}", s.how) for i, s in enumerate(self.specs)]
        r = t.group_by("_g", use_threads=False).aggregate(aggs)
        first = r.column("_i_min")
        cols = [r.column("_g")]
        cols += [t.column(f"k{i}").take(first) for i in range(len(self.key_types))]
        cols += [r.column(f"d{i}_{s.how}") for i, s in enumerate(self.specs)]
        return pa.Table.from_arrays(cols, names=self._names).combine_chunks()

    def take(self) -> Groups | None:
        """The epoch's dirty groups in key order (None if no row arrived); empties the buffer."""
        if not self._parts:
            return None
        t = self._reduce()
        self._parts, self._rows, self._limit = [], 0, _REDUCE_AT
        t = t.take(pc.sort_indices(t.column("_g")))

        def col(name: str) -> pa.Array:
            return t.column(name).combine_chunks()

        keys = [col(f"k{i}") for i in range(len(self.key_types))]
        deltas = [col(f"d{i}").cast(s.arrow) for i, s in enumerate(self.specs)]
        return Groups(keys, deltas, t.num_rows)
