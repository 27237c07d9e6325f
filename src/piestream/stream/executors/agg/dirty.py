"""Dirty groups: per-group deltas accumulated over an epoch (reference §6.1).

Each chunk contributes rows of (group key, deltas); they are reduced per group with one Arrow
hash aggregation (`pa.Table.group_by`) over the group key's memcomparable bytes, which is also
the state table's key, so values SQL considers equal (e.g. -0.0 and 0.0) share a group. Rows are
buffered and reduced when the buffer grows and when the epoch's barrier takes the groups.

Arrow sums decimal128 columns several times slower than int64 ones, and sum(BIGINT) deltas are
decimal128(38, 0) (64-bit values could overflow): such a column is buffered as two int64 columns,
the value's high 32 bits (signed) and low 32 bits, summed separately (no overflow below 2^31 rows)
and put back together, exactly, when the groups are taken.
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
        # sum columns of decimal128(p, 0) buffered as (high, low) int64 halves (module docstring)
        self._split = {
            i
            for i, s in enumerate(self.specs)
            if s.how == "sum" and pa.types.is_decimal(s.arrow) and s.arrow.scale == 0
        }
        self._names = ["_g"] + [f"k{i}" for i in range(len(self.key_types))]
        for i in range(len(self.specs)):
            self._names += [f"d{i}", f"d{i}_lo"] if i in self._split else [f"d{i}"]

    def _key(self, key_cols: Sequence[pa.Array], n: int) -> pa.Array:
        if not key_cols:
            return pa.array(np.zeros(n, np.int8))
        return memcomparable.encode_columns_arrow(list(key_cols), self.key_types, [ASC] * len(key_cols))

    def add(self, key_cols: Sequence[pa.Array], deltas: Sequence[pa.Array], n: int) -> None:
        """Buffer `n` rows of deltas (one array per spec) for the groups in `key_cols`."""
        if not n:
            return
        halves: dict[int, list[pa.Array]] = {}
        if self._split:
            try:
                halves = {i: _halves(deltas[i]) for i in self._split}
            except pa.ArrowInvalid:  # beyond 64 bits: only -(-2^63) can be (a retracted minimum)
                self._unsplit()
                halves = {}
        cols = [self._key(key_cols, n), *key_cols]
        for i, d in enumerate(deltas):
            cols += halves.get(i, [d])
        self._parts.append(pa.Table.from_arrays(cols, names=self._names))
        self._rows += n
        if self._rows >= self._limit:
            self._parts = [self._reduce()]
            self._rows = self._parts[0].num_rows
            self._limit = max(_REDUCE_AT, 2 * self._rows)

    def _reduce(self) -> pa.Table:
        t = pa.concat_tables(self._parts).combine_chunks()
        t = t.append_column("_i", pa.array(np.arange(t.num_rows, dtype=np.int64)))
        deltas = self._names[1 + len(self.key_types) :]
        aggs = [("_i", "min")] + [(d, self.specs[int(d[1:].split("_")[0])].how) for d in deltas]
        r = t.group_by("_g", use_threads=False).aggregate(aggs)
        first = r.column("_i_min")
        cols = [r.column("_g")]
        cols += [t.column(f"k{i}").take(first) for i in range(len(self.key_types))]
        cols += [r.column(f"{d}_{how}") for d, (_, how) in zip(deltas, aggs[1:], strict=True)]
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
        deltas = [
            (_joined(col(f"d{i}"), col(f"d{i}_lo")) if i in self._split else col(f"d{i}")).cast(s.arrow)
            for i, s in enumerate(self.specs)
        ]
        return Groups(keys, deltas, t.num_rows)

    def _unsplit(self) -> None:
        """Stop splitting: the buffered halves become decimal columns again (a value beyond 64
        bits arrived)."""
        split, self._split = self._split, set()
        self._names = (
            ["_g"] + [f"k{i}" for i in range(len(self.key_types))] + [f"d{i}" for i in range(len(self.specs))]
        )
        parts = []
        for t in self._parts:
            cols = [t.column(c) for c in ["_g"] + [f"k{i}" for i in range(len(self.key_types))]]
            for i in range(len(self.specs)):
                c = t.column(f"d{i}").combine_chunks()
                cols.append(_joined(c, t.column(f"d{i}_lo").combine_chunks()) if i in split else c)
            parts.append(pa.Table.from_arrays(cols, names=self._names))
        self._parts = parts


def _halves(d: pa.Array) -> list[pa.Array]:
    """A decimal(p, 0) column of 64-bit values as int64 (high 32 bits, signed; low 32 bits)."""
    x = np.asarray(pc.fill_null(d, 0).cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    mask = None if d.null_count == 0 else np.asarray(d.is_null().to_numpy(zero_copy_only=False), np.bool_)
    return [pa.array(x >> 32, mask=mask), pa.array(x & 0xFFFFFFFF, mask=mask)]


_HIGH = pa.scalar(1 << 32, pa.decimal128(11, 0))


def _joined(hi: pa.Array, lo: pa.Array) -> pa.Array:
    """The summed halves as one decimal128(38, 0) column: hi * 2^32 + lo, exactly."""
    wide = pa.decimal128(19, 0)
    return pc.add(pc.multiply(hi.cast(wide), _HIGH), lo.cast(wide)).cast(pa.decimal128(38, 0))
