"""Key ranges of state-table scans: a pk prefix plus an optional range over the next pk columns.

Bounds are in the pk's own order (a DESC column's "start" is its largest value), because they
are turned into memcomparable byte ranges, exactly like RisingWave's `prefixed_range_with_vnode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.scalar import Datum
from piestream.encoding.keys import next_key


@dataclass(frozen=True)
class Bound:
    """One end of a sub-range: `values` of the pk columns after the prefix, inclusive or not."""

    values: tuple[Datum, ...]
    inclusive: bool = True

    @classmethod
    def inc(cls, *values: Datum) -> Bound:
        return cls(tuple(values), True)

    @classmethod
    def exc(cls, *values: Datum) -> Bound:
        return cls(tuple(values), False)


SubRange = tuple[Bound | None, Bound | None]
UNBOUNDED: SubRange = (None, None)


def byte_range(
    prefix_key: bytes,
    sub_range: SubRange,
    encode_after_prefix: object,
) -> tuple[bytes, bytes | None]:
    """The [start, end) byte range of table keys that start with `prefix_key` and whose next pk
    columns lie in `sub_range`. `encode_after_prefix(values)` gives the bytes of those columns."""
    enc = encode_after_prefix
    lo, hi = sub_range
    if lo is None:
        start = prefix_key
    else:
        b = prefix_key + enc(lo.values)  # type: ignore[operator]
        start = b if lo.inclusive else (next_key(b) or b)
    if hi is None:
        end = next_key(prefix_key) if prefix_key else None
    else:
        b = prefix_key + enc(hi.values)  # type: ignore[operator]
        end = next_key(b) if hi.inclusive else b
    return start, end


def values_tuple(v: Sequence[Datum]) -> tuple[Datum, ...]:
    return tuple(v)
