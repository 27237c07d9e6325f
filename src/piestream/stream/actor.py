"""An actor: one fragment's executor tree over one vnode range, run for one epoch.

The actor builds its executors from the fragment's plan tree, feeds each input port's chunks
(already ordered deterministically by the runtime) into the leaf executors, pushes every
emitted chunk up to the parent, and finally passes the barrier through the tree children first,
so each executor's held-back output reaches its parent before the parent sees the barrier.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.common.epoch import EpochPair
from piestream.plan.node import InputPortNode, StreamNode
from piestream.stream.build import build_executor
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.message import Barrier


@dataclass
class _Slot:
    executor: Executor
    parent: int  # index into Actor._slots, -1 for the root
    input_idx: int  # which input of the parent this is
    port: str | None  # input port name for leaves fed by the runtime


class Actor:
    """Executors of one fragment for one actor."""

    def __init__(self, ctx: ActorContext, root: StreamNode) -> None:
        self.ctx = ctx
        self.root = root
        self._slots: list[_Slot] = []
        self._build(root, -1, 0)
        self._ports: dict[str, list[int]] = {}
        for i, s in enumerate(self._slots):
            if s.port is not None:
                self._ports.setdefault(s.port, []).append(i)

    def _build(self, node: StreamNode, parent: int, input_idx: int) -> int:
        """Build children first (their executors exist before the parent's), return the slot index."""
        me = len(self._slots)
        port = node.port if isinstance(node, InputPortNode) else None
        self._slots.append(_Slot(None, parent, input_idx, port))  # type: ignore[arg-type]
        for k, child in enumerate(node.children()):
            self._build(child, me, k)
        self._slots[me].executor = build_executor(node, self.ctx)
        return me

    @property
    def executors(self) -> list[Executor]:
        return [s.executor for s in self._slots]

    @property
    def ports(self) -> list[str]:
        return sorted(self._ports)

    def init(self, epoch: EpochPair) -> None:
        for s in self._slots:
            s.executor.init(epoch)

    def _push(self, slot: int, chunks: Sequence[StreamChunk], out: list[StreamChunk]) -> None:
        """Deliver chunks emitted by `slot` to its parent (or to the actor's output)."""
        s = self._slots[slot]
        if len(chunks) > 1 and s.parent >= 0:
            # one call of the parent per up to 64K rows, not per piece: a source emits 1024-row
            # chunks and a HopWindow a chunk per window, and every executor call (an expression
            # evaluation, a HopWindow, a Project) costs a fixed overhead whatever the chunk's size
            chunks = list(coalesced(chunks))
        for c in chunks:
            if not c.cardinality:
                continue
            if s.parent < 0:
                out.append(c)
            else:
                parent = self._slots[s.parent]
                self._push(s.parent, parent.executor.process(c, s.input_idx), out)

    def feed(self, port: str, chunk: StreamChunk) -> list[StreamChunk]:
        """Push one input chunk arriving on `port`; returns the actor's output."""
        out: list[StreamChunk] = []
        for slot in self._ports.get(port, []):
            self._push(slot, [chunk], out)
        return out

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        """Pass the barrier through the tree, children before parents."""
        out: list[StreamChunk] = []
        # slots are numbered parents-first; reversed order visits every child before its parent
        for slot in reversed(range(len(self._slots))):
            emitted = self._slots[slot].executor.barrier(barrier)
            self._push(slot, emitted, out)
        return out

    def run_epoch(self, inputs: Mapping[str, Sequence[StreamChunk]], barrier: Barrier) -> list[StreamChunk]:
        """All of an epoch: every port's chunks in order (ports sorted by name), then the barrier."""
        return self.run_epoch_streamed(((port, inputs[port]) for port in sorted(inputs)), barrier)

    def run_epoch_streamed(
        self, inputs: Iterable[tuple[str, Iterable[StreamChunk]]], barrier: Barrier
    ) -> list[StreamChunk]:
        """`run_epoch` over input that arrives while it runs: ports in the order given (by
        name), each port's chunks as they come, then the barrier."""
        out: list[StreamChunk] = []
        for port, chunks in inputs:
            for chunk in coalesced(chunks):
                out += self.feed(port, chunk)
        out += self.barrier(barrier)
        return out


#: A port's consecutive chunks are fed as one of up to this many rows: an exchange delivers
#: each sender's output cut by the receiver's vnodes (a HopWindow's chunk becomes ~100-row
#: pieces), and every executor call costs a fixed overhead per chunk, whatever its size.
COALESCE_ROWS = 1 << 16


def coalesced(chunks: Iterable[StreamChunk]) -> Iterator[StreamChunk]:
    """`chunks` in order, consecutive small ones concatenated (same rows, same order: executors
    are functions of their input in arrival order, not of where chunks end)."""
    batch: list[StreamChunk] = []
    rows = 0
    for c in chunks:
        n = c.cardinality
        if batch and rows + n > COALESCE_ROWS:
            yield from _concat(batch)
            batch, rows = [], 0
        batch.append(c)
        rows += n
    if batch:
        yield from _concat(batch)


def _concat(batch: list[StreamChunk]) -> list[StreamChunk]:
    if len(batch) == 1:
        return batch
    try:
        return [StreamChunk.concat(batch)]
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # senders disagree on a column's Arrow type
        return batch
