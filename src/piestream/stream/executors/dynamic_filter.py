"""DynamicFilter: ``left.key <op> (scalar subquery)`` with a changing right-hand side (reference §6.7).

The right input (input 1) is a single-row stream, e.g. a SimpleAgg's output or ``now()``: Insert,
then U-/U+ pairs. Its committed value lives in a one-row singleton table; the left rows live in a
table ordered by the compared key, so a moving RHS is a range scan rather than a full re-filter.

- Left chunks are stored (rows with a NULL key never pass, so they are not stored) and filtered
  against the *committed* RHS: the output so far is exactly "stored rows passing the committed RHS".
- On the barrier, if the RHS changed this epoch, the rows between the old and the new value (in
  every owned vnode) enter or leave the condition: they are emitted as Inserts or Deletes, then the
  new RHS is committed. A NULL (or absent) RHS lets nothing pass.

Comparisons use the memcomparable bytes of the key type, the very order the range scan follows,
so the per-chunk filter and the barrier's scan can never disagree (NaN, -0.0, intervals...).
The RHS is broadcast to every actor; only the actor owning vnode 0 writes the shared singleton
table, the others keep the value they saw in memory until the next epoch reads it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import Op, StreamChunk, filter_mask
from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import ASC
from piestream.common.scalar import Datum
from piestream.common.types import DataType
from piestream.common.vnode import VNODE_COUNT
from piestream.encoding import memcomparable
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.key_range import Bound, SubRange
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.executors.filter import fix_update_pairs
from piestream.stream.message import Barrier
from piestream.stream.nodes import StreamNode

COMPARATORS = ("<", "<=", ">", ">=")
_ARROW_CMP = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def dynamic_filter_left_table(
    table_id: int,
    left_columns: Sequence[tuple[str, DataType] | ColumnDesc],
    key_col: int,
    left_stream_key: Sequence[int],
    dist_key: Sequence[int] | None = None,
    *,
    name: str = "",
) -> TableDesc:
    """Left state: all left columns; pk = key column ++ left stream key (ASC), prefix hint 0.

    `dist_key` (left column indices, inside the pk) must be how the left input is sharded over
    actors; it defaults to the left stream key (a singleton table if that is empty)."""
    cols = tuple(c if isinstance(c, ColumnDesc) else ColumnDesc(c[0], c[1]) for c in left_columns)
    pk = (key_col, *(c for c in left_stream_key if c != key_col))
    dist = tuple(left_stream_key) if dist_key is None else tuple(dist_key)
    return TableDesc(
        table_id=table_id,
        columns=cols,
        pk=pk,
        pk_orders=(ASC,) * len(pk),
        dist_key=dist,
        vnode_count=VNODE_COUNT if dist else 1,
        read_prefix_len_hint=0,
        name=name,
    )


def dynamic_filter_right_table(table_id: int, rhs_type: DataType, *, name: str = "") -> TableDesc:
    """Right state: a singleton table of one row, the committed RHS value (pk = ())."""
    return TableDesc(table_id, (ColumnDesc("rhs", rhs_type),), pk=(), pk_orders=(), name=name)


@dataclass(frozen=True, kw_only=True)
class DynamicFilterNode(StreamNode):
    """``left[key_col] <comparator> right[right_col]``; output = left columns, stream key = left's.
    Build it with `build_dynamic_filter`."""

    child_fields = ("left", "right")

    left: StreamNode
    right: StreamNode
    key_col: int
    comparator: str  # one of COMPARATORS
    right_col: int = 0
    left_table: TableDesc
    right_table: TableDesc

    def __post_init__(self) -> None:
        if self.comparator not in COMPARATORS:
            raise FeatureNotSupported(f"dynamic filter comparator {self.comparator!r} is not supported")
        lt = self.left.schema[self.key_col].data_type
        rt = self.right.schema[self.right_col].data_type
        if lt != rt:
            raise InternalError(f"dynamic filter compares {lt} with {rt}: the planner must cast the RHS")
        if self.left_table.pk[:1] != (self.key_col,):
            raise InternalError("dynamic filter left table pk must start with the key column")
        if self.stream_key != self.left.stream_key:
            raise InternalError("dynamic filter stream key must be the left stream key")

    def build(self, ctx: ActorContext) -> Executor:
        return DynamicFilterExecutor(ctx, self)

    def tables(self) -> list[TableDesc]:
        return [self.left_table, self.right_table]

    def explain(self) -> str:
        return f"DynamicFilter {{ predicate: ${self.key_col} {self.comparator} $expr{self.right_col} }}"


def build_dynamic_filter(
    left: StreamNode,
    right: StreamNode,
    *,
    key_col: int,
    comparator: str,
    right_col: int = 0,
    left_table_id: int,
    right_table_id: int,
    left_dist_key: Sequence[int] | None = None,
) -> DynamicFilterNode:
    """The planner's entry point: a DynamicFilterNode with both state tables."""
    ls = left.schema
    return DynamicFilterNode(
        schema=ls,
        stream_key=tuple(left.stream_key),
        append_only=False,
        left=left,
        right=right,
        key_col=key_col,
        comparator=comparator,
        right_col=right_col,
        left_table=dynamic_filter_left_table(
            left_table_id,
            [(f.name, f.data_type) for f in ls],
            key_col,
            left.stream_key,
            left_dist_key,
            name="dynamic_filter_left",
        ),
        right_table=dynamic_filter_right_table(
            right_table_id, right.schema[right_col].data_type, name="dynamic_filter_right"
        ),
    )


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
        self.left.write_chunk(c if valid.all() else c.take(np.flatnonzero(valid)))
        rhs = self.committed_rhs
        if rhs is None:
            return []
        keys = memcomparable.encode_columns_arrow([key], [self.key_type], [ASC])
        keep = valid & filter_mask(_ARROW_CMP[self.op](keys, pa.scalar(self._enc(rhs), keys.type)))
        if not keep.any():
            return []
        if keep.all():
            return [c]
        return [StreamChunk(fix_update_pairs(c.ops, keep), c.columns, keep, c.capacity).compact()]

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
                out.extend(
                    StreamChunk(np.full(data.capacity, op, np.int8), data.columns)
                    for data in self.left.iter_chunks_with_prefix((), sub)
                )
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
