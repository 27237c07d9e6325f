"""DynamicFilter: ``left.key <op> (scalar subquery)`` with a changing right-hand side (reference §6.7).

The right input (input 1) is a single-row stream, e.g. a SimpleAgg's output or ``now()``: Insert,
then U-/U+ pairs. Its committed value lives in a one-row singleton table; the left rows live in a
table ordered by the compared key, so a moving RHS is a range scan rather than a full re-filter.

- Left chunks are stored (rows with a NULL key never pass, so they are not stored) and filtered
  against the *committed* RHS: the output so far is exactly "stored rows passing the committed RHS".
- A temporal filter's RHS (``now() - INTERVAL '1 hour'``) never decreases: then only rows whose
  outcome can still change are stored (for ``>``: the passing ones, which will leave; for ``<``:
  the failing ones, which will enter), and a barrier drops the rows it just settled for good.
- On the barrier, if the RHS changed this epoch, the rows between the old and the new value (in
  every owned vnode) enter or leave the condition: they are emitted as Inserts or Deletes, then the
  new RHS is committed. A NULL (or absent) RHS lets nothing pass.

Comparisons use the memcomparable bytes of the key type, the very order the range scan follows,
so the per-chunk filter and the barrier's scan can never disagree (NaN, -0.0, intervals...).
The RHS is broadcast to every actor; only the actor owning vnode 0 writes the shared singleton
table, the others keep the value they saw in memory until the next epoch reads it back.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk, Op, StreamChunk, filter_mask
from piestream.common.order import ASC
from piestream.common.scalar import Datum
from piestream.encoding import memcomparable
from piestream.plan.dynamic_filter import DynamicFilterNode
from piestream.storage.table.key_range import Bound, SubRange
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.filter import fix_update_pairs
from piestream.stream.message import Barrier

_ARROW_CMP = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


_UNCHANGED = object()  # no right-input row arrived this epoch


class DynamicFilterExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: DynamicFilterNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, False)
        self.left = self.table(node.left_table)
        self.right = self.table(node.right_table)
        self.key_col = node.key_col
        self.right_col = node.right_col
        self.op = node.comparator
        self.key_type = node.left.schema[node.key_col].data_type
        self.upper = node.comparator in (">", ">=")  # passing keys form an upper (else lower) ray
        self.inclusive = node.comparator in ("<=", ">=")
        self.non_decreasing = node.rhs_non_decreasing
        self.writes_rhs = 0 in ctx.vnodes  # one actor writes the broadcast RHS's shared table
        self._committed: Datum = _UNCHANGED  # read lazily from the right table
        self._staged: Datum = _UNCHANGED

    def _enc(self, value: Datum) -> bytes:
        return memcomparable.encode_datum(value, self.key_type, ASC)

    @property
    def committed_rhs(self) -> Datum:
        """The RHS as of the epoch start (None: NULL or no row yet, nothing passes)."""
        if self._committed is _UNCHANGED:
            row = self.right.get_row(())
            self._committed = None if row is None else row[0]
        return self._committed

    # -- input ----------------------------------------------------------------------------------
    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity:
            return []
        if input_idx == 1:
            # the single RHS row: whatever the chunk's last op leaves behind
            last = c.capacity - 1
            self._staged = c.columns[self.right_col][last].as_py() if Op(int(c.ops[last])).is_insert else None
            return []
        key = c.columns[self.key_col]
        valid = np.asarray(key.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        rhs = self.committed_rhs
        if rhs is None:
            self._store(c, valid)
            return []
        keys = memcomparable.encode_columns_arrow([key], [self.key_type], [ASC])
        keep = valid & filter_mask(_ARROW_CMP[self.op](keys, pa.scalar(self._enc(rhs), keys.type)))
        if not self.non_decreasing:
            self._store(c, valid)
        else:
            # an upper ray only shrinks: a row failing now fails forever; a lower ray only
            # grows: a row passing now passes forever. Neither needs its row stored.
            self._store(c, keep if self.upper else valid & ~keep)
        if not keep.any():
            return []
        if keep.all():
            return [c]
        return [StreamChunk(fix_update_pairs(c.ops, keep), c.columns, keep, c.capacity).compact()]

    def _store(self, c: StreamChunk, mask: np.ndarray) -> None:
        """Write the rows of `mask` to the left table (a broken update pair's half as I / D)."""
        if mask.all():
            self.left.write_chunk(c)
        elif mask.any():
            self.left.write_chunk(
                StreamChunk(fix_update_pairs(c.ops, mask), c.columns, mask, c.capacity).compact()
            )

    # -- barrier --------------------------------------------------------------------------------
    def _ray(self, value: Datum) -> SubRange:
        """The keys passing against `value`, as a sub-range of the left table's first pk column."""
        b = Bound((value,), self.inclusive)
        return (b, None) if self.upper else (None, b)

    def _changes(self, old: Datum, new: Datum) -> tuple[Op, SubRange] | None:
        """The rows whose outcome differs between RHS `old` and `new`: (entering/leaving, range)."""
        if old is None and new is None:
            return None
        if old is None:
            return Op.INSERT, self._ray(new)
        if new is None:
            return Op.DELETE, self._ray(old)
        o, n = self._enc(old), self._enc(new)
        if o == n:
            return None
        # an upper ray grows as its threshold falls, a lower ray as it rises
        grows = (n < o) if self.upper else (n > o)
        small, big = (old, new) if grows else (new, old)  # `big` passes more rows than `small`
        big_ray = self._ray(big)
        # big's ray minus small's ray: flip small's bound and put it on the other side
        cut = Bound((small,), not self.inclusive)
        sub: SubRange = (big_ray[0], cut) if self.upper else (cut, big_ray[1])
        return (Op.INSERT if grows else Op.DELETE), sub

    def barrier(self, barrier: Barrier) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        if self._staged is not _UNCHANGED:
            old, new = self.committed_rhs, self._staged
            change = self._changes(old, new)
            if change is not None:
                op, sub = change
                # all owned vnodes; the scan yields Arrow chunks, emitted as they are
                moved = list(self.left.iter_chunks_with_prefix((), sub))  # read all before writing
                out.extend(StreamChunk(np.full(d.capacity, op, np.int8), d.columns) for d in moved)
                if self.non_decreasing and new is not None:
                    self._clean(old, new, moved)
            if self.writes_rhs:
                row = self.right.get_row(())
                if row is None:
                    self.right.insert_row((new,))
                elif self._enc(row[0]) != self._enc(new):
                    self.right.update_row(row, (new,))
            self._committed = new
            self._staged = _UNCHANGED
        self.commit_state(barrier)
        return out

    def _clean(self, old: Datum, new: Datum, moved: list[DataChunk]) -> None:
        """Under a non-decreasing RHS, drop the stored rows whose outcome is now final: the rows
        that just moved (out of an upper ray, into a lower one), and on the first value of an
        upper ray the rows below it. Deleting only what moved keeps each scan off the older
        tombstones below the bound."""
        if self.upper and old is None:
            moved = list(self.left.iter_chunks_with_prefix((), (None, Bound((new,), not self.inclusive))))
        for data in moved:
            self.left.write_chunk(StreamChunk(np.full(data.capacity, Op.DELETE, np.int8), data.columns))
