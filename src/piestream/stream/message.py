"""What flows between executors besides chunks: barriers (seed 001 "Checkpointing in Streaming").

A barrier closes an epoch: data before it was written with `epoch.prev`; on receiving it each
stateful executor commits its state tables and moves to `epoch.curr`. In piestream one barrier is
one Spark job: an actor's task processes the epoch's input, then the barrier.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from piestream.common.epoch import EpochPair


class BarrierKind(enum.Enum):
    INITIAL = "initial"  # a job (re)starts from its committed epoch
    BARRIER = "barrier"  # seals the epoch without a checkpoint
    CHECKPOINT = "checkpoint"  # seals and checkpoints


@dataclass(frozen=True)
class Barrier:
    epoch: EpochPair
    kind: BarrierKind = BarrierKind.CHECKPOINT

    @property
    def is_checkpoint(self) -> bool:
        return self.kind is not BarrierKind.BARRIER
