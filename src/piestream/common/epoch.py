"""Epochs: the logical clock of checkpoints (reference §3.2, seed 001).

An epoch is ``(milliseconds since 2021-04-01 UTC) << 16``. The low 16 bits are the *spill offset*:
when a MemTable spills several times inside one barrier epoch, the spills are written with
epoch+1, +2, ... so later writes shadow earlier ones. Barrier epochs always have the low bits 0.

Epochs only grow. The previous epoch of a barrier is carried explicitly in an `EpochPair`; never
derive a neighbour epoch by arithmetic (seed 001: "we cannot simply use +1 -1").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

#: 2021-04-01T00:00:00Z in Unix seconds.
PIESTREAM_EPOCH_UNIX_SEC = 1_617_235_200
EPOCH_PHYSICAL_SHIFT_BITS = 16
EPOCH_SPILL_MASK = (1 << EPOCH_PHYSICAL_SHIFT_BITS) - 1
MAX_SPILL_OFFSET = EPOCH_SPILL_MASK
#: Reads at MAX_EPOCH see everything.
MAX_EPOCH = 2**64 - 1
INVALID_EPOCH = 0


def epoch_from_ms(unix_ms: int) -> int:
    """The barrier epoch of a wall-clock instant (Unix milliseconds)."""
    physical = unix_ms - PIESTREAM_EPOCH_UNIX_SEC * 1000
    if physical < 0:
        raise ValueError("wall clock is before 2021-04-01")
    return physical << EPOCH_PHYSICAL_SHIFT_BITS


def physical_ms(epoch: int) -> int:
    """Milliseconds since 2021-04-01 of an epoch."""
    return epoch >> EPOCH_PHYSICAL_SHIFT_BITS


def epoch_to_unix_ms(epoch: int) -> int:
    return physical_ms(epoch) + PIESTREAM_EPOCH_UNIX_SEC * 1000


def pure_epoch(epoch: int) -> int:
    """The barrier epoch of an epoch-with-spill-offset."""
    return epoch & ~EPOCH_SPILL_MASK


def spill_offset(epoch: int) -> int:
    return epoch & EPOCH_SPILL_MASK


def with_spill(epoch: int, offset: int) -> int:
    """The epoch a MemTable's `offset`-th spill inside barrier `epoch` is written with."""
    if not 0 <= offset <= MAX_SPILL_OFFSET:
        raise ValueError(f"spill offset {offset} out of range")
    if spill_offset(epoch):
        raise ValueError("with_spill needs a barrier epoch (low bits 0)")
    return epoch | offset


@dataclass(frozen=True)
class EpochPair:
    """A barrier's epochs: data after it is written with `curr`; data before it had `prev`."""

    curr: int
    prev: int

    def __post_init__(self) -> None:
        if self.prev != INVALID_EPOCH and self.curr <= self.prev:
            raise ValueError(f"epoch pair must advance: prev={self.prev} curr={self.curr}")

    @classmethod
    def initial(cls, curr: int) -> EpochPair:
        """The first barrier of a job: nothing came before."""
        return cls(curr, INVALID_EPOCH)

    def next(self, curr: int) -> EpochPair:
        """The pair of the following barrier with epoch `curr`."""
        return EpochPair(curr, self.curr)


class EpochGenerator:
    """Hands out barrier epochs from the wall clock, strictly increasing even if the clock goes back.

    If the clock stands still or goes backwards the generator advances one millisecond past the
    last epoch instead of waiting (RisingWave spins; a clock jump back would stall it for as long).
    """

    def __init__(self, last: int = INVALID_EPOCH, clock_ms: object = None) -> None:
        self._last = last
        self._lock = threading.Lock()
        self._clock = clock_ms if callable(clock_ms) else (lambda: time.time_ns() // 1_000_000)

    @property
    def last(self) -> int:
        return self._last

    def next(self) -> int:
        with self._lock:
            now = epoch_from_ms(int(self._clock()))
            floor = pure_epoch(self._last) + (1 << EPOCH_PHYSICAL_SHIFT_BITS) if self._last else 0
            epoch = max(now, floor)
            self._last = epoch
            return epoch

    def advance_past(self, epoch: int) -> None:
        """Never hand out an epoch <= `epoch` (after recovery from a stored epoch)."""
        with self._lock:
            self._last = max(self._last, epoch)
