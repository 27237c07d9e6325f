"""Virtual nodes: the unit of data distribution and ownership (reference §3.3).

Every row of a distributed table belongs to one of `vnode_count` vnodes (256 by default), chosen
by a stable hash of its distribution-key columns (see `piestream.encoding.distribution`). An
actor owns a set of vnodes, held as a `VnodeBitmap`; a fragment of parallelism P splits the
vnodes into P contiguous ranges, so rescaling remaps ranges instead of copying data.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

VNODE_COUNT = 256
#: Singleton tables (no distribution key) put every row in vnode 0 of a 1-vnode table.
SINGLETON_VNODE = 0
MAX_VNODE_COUNT = 32768


class VnodeBitmap:
    """Which vnodes of a table an actor owns."""

    __slots__ = ("bits",)

    def __init__(self, bits: np.ndarray) -> None:
        self.bits = np.asarray(bits, dtype=np.bool_)
        if not 1 <= len(self.bits) <= MAX_VNODE_COUNT:
            raise ValueError(f"vnode count {len(self.bits)} out of range")

    @classmethod
    def full(cls, count: int = VNODE_COUNT) -> VnodeBitmap:
        return cls(np.ones(count, np.bool_))

    @classmethod
    def from_range(cls, start: int, end: int, count: int = VNODE_COUNT) -> VnodeBitmap:
        bits = np.zeros(count, np.bool_)
        bits[start:end] = True
        return cls(bits)

    @classmethod
    def from_vnodes(cls, vnodes: list[int] | np.ndarray, count: int = VNODE_COUNT) -> VnodeBitmap:
        bits = np.zeros(count, np.bool_)
        bits[np.asarray(vnodes, dtype=np.int64)] = True
        return cls(bits)

    @property
    def count(self) -> int:
        """The table's vnode count (the bitmap's length)."""
        return len(self.bits)

    def __contains__(self, vnode: int) -> bool:
        return 0 <= vnode < len(self.bits) and bool(self.bits[vnode])

    def owns(self, vnodes: np.ndarray) -> np.ndarray:
        """Vectorized membership test."""
        return self.bits[np.asarray(vnodes, dtype=np.int64)]

    def vnodes(self) -> np.ndarray:
        """The owned vnodes, ascending."""
        return np.flatnonzero(self.bits)

    def __iter__(self) -> Iterator[int]:
        return iter(self.vnodes().tolist())

    def __len__(self) -> int:
        return int(self.bits.sum())

    def ranges(self) -> list[tuple[int, int]]:
        """Owned vnodes as maximal half-open ranges [start, end)."""
        padded = np.concatenate([[False], self.bits, [False]]).astype(np.int8)
        d = np.diff(padded)
        starts = np.flatnonzero(d == 1)
        ends = np.flatnonzero(d == -1)
        return list(zip(starts.tolist(), ends.tolist(), strict=True))

    def to_bytes(self) -> bytes:
        return len(self.bits).to_bytes(2, "big") + np.packbits(self.bits).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> VnodeBitmap:
        count = int.from_bytes(data[:2], "big")
        return cls(np.unpackbits(np.frombuffer(data[2:], np.uint8))[:count].astype(np.bool_))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VnodeBitmap) and np.array_equal(self.bits, other.bits)

    def __hash__(self) -> int:
        return hash(self.to_bytes())

    def __repr__(self) -> str:
        return f"VnodeBitmap({self.ranges()} of {self.count})"


def split_vnodes(parallelism: int, count: int = VNODE_COUNT) -> list[VnodeBitmap]:
    """Split `count` vnodes into `parallelism` contiguous, nearly equal ranges (one per actor)."""
    if not 1 <= parallelism <= count:
        raise ValueError(f"parallelism {parallelism} must be in 1..{count}")
    bounds = [i * count // parallelism for i in range(parallelism + 1)]
    return [VnodeBitmap.from_range(bounds[i], bounds[i + 1], count) for i in range(parallelism)]


def actor_vnodes(parallelism: int, index: int, count: int = VNODE_COUNT) -> VnodeBitmap:
    """`split_vnodes(parallelism, count)[index]`, without building every actor's bitmap (each
    actor asks for its own, every epoch)."""
    if not 1 <= parallelism <= count:
        raise ValueError(f"parallelism {parallelism} must be in 1..{count}")
    if not 0 <= index < parallelism:
        raise IndexError(f"actor index {index} of parallelism {parallelism}")
    return VnodeBitmap.from_range(index * count // parallelism, (index + 1) * count // parallelism, count)


def actor_of_vnodes(vnodes: np.ndarray, parallelism: int, count: int = VNODE_COUNT) -> np.ndarray:
    """For each vnode, the index of the actor owning it under `split_vnodes` (vectorized)."""
    v = np.asarray(vnodes, dtype=np.int64)
    # actor a owns [a*count//P, (a+1)*count//P): invert by search over the bounds
    bounds = np.array([i * count // parallelism for i in range(1, parallelism + 1)], dtype=np.int64)
    return np.searchsorted(bounds, v, side="right").astype(np.int64)
