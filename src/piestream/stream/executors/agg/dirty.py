"""Dirty groups: per-group deltas accumulated over an epoch (reference §6.1).

Each chunk contributes rows of (group key, deltas). Rows are buffered and reduced per group when
the buffer grows and when the epoch's barrier takes the groups. Groups are told apart by the
group key's memcomparable bytes, which is also the state table's key, so values SQL considers
equal (e.g. -0.0 and 0.0) share a group.

A reduction is one sort of the keys' bytes (`sorted_runs`: a numpy sort of 8-byte words, no
per-key Python), which also leaves the groups in key order; summed int64 deltas are then
`np.add.reduceat` over the sorted runs (decimals too, as int64, when no sum can overflow),
other deltas (decimals, min/max of keys, ...) one Arrow
hash aggregation keyed by the run number. The groups' key bytes are kept, so the executor does
not encode the keys again for its cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.encoding import memcomparable
from piestream.encoding.ragged import Ragged
from piestream.storage.hummock.key_index import padded_ragged
from piestream.storage.table.mem_table import sorted_runs
from piestream.stream.executors.agg.arrays import decimal_as_int64, int64_as_decimal
from piestream.stream.executors.agg.states import DeltaSpec

_REDUCE_AT = 1 << 16


@dataclass
class Groups:
    """Distinct groups in key order with their summed deltas (and their memcomparable keys, all
    columns ascending, when there is a group key)."""

    key_cols: list[pa.Array]
    deltas: list[pa.Array]
    n: int
    keys: Ragged | None = None


@dataclass
class _Part:
    keys: pa.Array  # memcomparable bytes (binary); int8 zeros without a group key
    key_cols: list[pa.Array]
    deltas: list[pa.Array]

    def __len__(self) -> int:
        return len(self.keys)


class DirtyGroups:
    def __init__(self, key_types: Sequence[DataType], specs: Sequence[DeltaSpec]) -> None:
        self.key_types = list(key_types)
        self.specs = list(specs)
        self._parts: list[_Part] = []
        self._rows = 0
        self._limit = _REDUCE_AT  # grows with the number of groups, so reducing stays amortized
        self._reduced = False  # `_parts` is one part, already reduced

    def _key(self, key_cols: Sequence[pa.Array], n: int) -> pa.Array:
        if not key_cols:
            return pa.array(np.zeros(n, np.int8))
        return memcomparable.encode_columns_arrow(list(key_cols), self.key_types, [ASC] * len(key_cols))

    def add(self, key_cols: Sequence[pa.Array], deltas: Sequence[pa.Array], n: int) -> None:
        """Buffer `n` rows of deltas (one array per spec) for the groups in `key_cols`."""
        if not n:
            return
        self._parts.append(_Part(self._key(key_cols, n), list(key_cols), list(deltas)))
        self._rows += n
        self._reduced = False
        if self._rows >= self._limit:
            self._parts = [self._reduce()]
            self._reduced = True
            self._rows = len(self._parts[0])
            self._limit = max(_REDUCE_AT, 2 * self._rows)

    def _reduce(self) -> _Part:
        """The buffered rows as one row per group, in key order."""
        parts = self._parts
        keys = pa.concat_arrays([p.keys for p in parts])
        key_cols = [pa.concat_arrays([p.key_cols[i] for p in parts]) for i in range(len(self.key_types))]
        deltas = [pa.concat_arrays([p.deltas[i] for p in parts]) for i in range(len(self.specs))]
        n = len(keys)
        if self.key_types:
            data, starts, lens = padded_ragged(Ragged.from_arrow(keys))
            order, new_group = sorted_runs(data, starts, lens)  # stable: arrival order within a group
            runs = np.flatnonzero(new_group)
        else:  # SimpleAgg: one group
            order, runs = np.arange(n, dtype=np.int64), np.zeros(1, np.int64)
        if len(runs) == n and np.array_equal(order, np.arange(n)):
            return _Part(keys, key_cols, deltas)  # already one row per group, in order
        first = pa.array(order[runs], pa.int64())  # each group's first row
        sort = pa.array(order, pa.int64())
        return _Part(
            keys.take(first),
            [c.take(first) for c in key_cols],
            _reduce_runs([d.take(sort) for d in deltas], self.specs, runs),
        )

    def take(self) -> Groups | None:
        """The epoch's dirty groups in key order (None if no row arrived); empties the buffer."""
        if not self._parts:
            return None
        p = self._parts[0] if self._reduced else self._reduce()  # reduced by the last `add`
        self._parts, self._rows, self._limit, self._reduced = [], 0, _REDUCE_AT, False
        deltas = [d.cast(s.arrow) for d, s in zip(p.deltas, self.specs, strict=True)]
        keys = Ragged.from_arrow(p.keys) if self.key_types else None
        return Groups(p.key_cols, deltas, len(p), keys)


def _reduce_runs(
    sorted_deltas: list[pa.Array], specs: Sequence[DeltaSpec], runs: np.ndarray
) -> list[pa.Array]:
    """Each delta column reduced over the runs starting at `runs` (rows sorted by group)."""
    n = len(sorted_deltas[0]) if sorted_deltas else 0
    out: list[pa.Array | None] = [None] * len(specs)
    rest: list[int] = []
    for i, (d, s) in enumerate(zip(sorted_deltas, specs, strict=True)):
        if s.how == "sum" and pa.types.is_int64(d.type) and not d.null_count:
            # int64 wraps like Arrow's hash_sum; counts and 32-bit sums cannot reach it
            out[i] = pa.array(np.add.reduceat(d.to_numpy(), runs))
            continue
        v = decimal_as_int64(d) if s.how == "sum" and not d.null_count else None
        if v is not None and n and max(int(v.max()), -int(v.min())) < (1 << 62) // n:  # no sum overflows
            out[i] = int64_as_decimal(np.add.reduceat(v, runs), d.type)
        else:
            rest.append(i)
    if rest:
        run_id = np.zeros(n, np.int64)
        run_id[runs[1:]] = 1
        run_id = np.cumsum(run_id)
        cols = {"_r": pa.array(run_id)} | {f"d{i}": sorted_deltas[i] for i in rest}
        r = (
            pa.table(cols)
            .group_by("_r", use_threads=False)
            .aggregate([(f"d{i}", specs[i].how) for i in rest])
        )
        back = np.argsort(r.column("_r").to_numpy(), kind="stable")  # run order (usually already)
        take = None if np.array_equal(back, np.arange(len(back))) else pa.array(back)
        for i in rest:
            # Arrow's hash sum widens decimals (decimal256(75, s) -> (76, s)): back to the delta's
            # type (a checked cast), so a reduced part concatenates with the parts added after it
            col = r.column(f"d{i}_{specs[i].how}").combine_chunks().cast(sorted_deltas[i].type)
            out[i] = col if take is None else col.take(take)
    return [c for c in out if c is not None]
