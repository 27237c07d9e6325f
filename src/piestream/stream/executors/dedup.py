"""AppendOnlyDedup: the first row of each dedup key passes, later ones are dropped (reference §6.5).

Planned for ``DISTINCT ON`` without ORDER BY and for a group-by-only aggregation over an
append-only input. Because the input never retracts, the first row seen for a key stays the answer
forever: the state table remembers it (pk = dedup columns), and the output is append-only with the
dedup columns as its stream key. A retractable input needs a GroupTopN with limit 1 instead (the
rows behind the first must be kept to replace it), so it is rejected here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.chunk import Op, StreamChunk
from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.common.vnode import VNODE_COUNT
from piestream.encoding import memcomparable
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.stream.executor import ActorContext, Executor
from piestream.stream.nodes import StreamNode


def dedup_table(
    table_id: int,
    input_columns: Sequence[tuple[str, DataType] | ColumnDesc],
    dedup_cols: Sequence[int],
    *,
    name: str = "",
) -> TableDesc:
    """AppendOnlyDedup state: all input columns; pk = dedup columns ASC, distributed by them."""
    cols = tuple(c if isinstance(c, ColumnDesc) else ColumnDesc(c[0], c[1]) for c in input_columns)
    return TableDesc(
        table_id=table_id,
        columns=cols,
        pk=tuple(dedup_cols),
        pk_orders=(ASC,) * len(dedup_cols),
        dist_key=tuple(dedup_cols),
        vnode_count=VNODE_COUNT if dedup_cols else 1,
        read_prefix_len_hint=len(dedup_cols),
        name=name,
    )


@dataclass(frozen=True, kw_only=True)
class DedupNode(StreamNode):
    """Append-only dedup of `input` on `dedup_cols`; output = input columns, stream key =
    dedup columns, append-only. Build it with `build_dedup`."""

    child_fields = ("input",)

    input: StreamNode
    dedup_cols: tuple[int, ...]
    state_table: TableDesc

    def __post_init__(self) -> None:
        if not self.input.append_only:
            raise FeatureNotSupported(
                "AppendOnlyDedup needs an append-only input; "
                "plan a GroupTopN with limit 1 grouped by the dedup columns for a retractable one"
            )
        if self.state_table.pk != self.dedup_cols:
            raise InternalError("dedup state table pk must be the dedup columns")
        if self.stream_key != self.dedup_cols:
            raise InternalError("dedup stream key must be the dedup columns")

    def build(self, ctx: ActorContext) -> Executor:
        return AppendOnlyDedupExecutor(ctx, self)

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        names = self.schema.names
        return f"AppendOnlyDedup {{ dedup_cols: [{', '.join(names[c] for c in self.dedup_cols)}] }}"


def build_dedup(input: StreamNode, dedup_cols: Sequence[int], *, table_id: int, name: str = "") -> DedupNode:
    """The planner's entry point: a DedupNode over an append-only `input` with its state table."""
    schema = input.schema
    return DedupNode(
        schema=schema,
        stream_key=tuple(dedup_cols),
        append_only=True,
        input=input,
        dedup_cols=tuple(dedup_cols),
        state_table=dedup_table(table_id, [(f.name, f.data_type) for f in schema], dedup_cols, name=name),
    )


class AppendOnlyDedupExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: DedupNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, True)
        self.state = self.table(node.state_table)
        self.cols = list(node.dedup_cols)
        self.key_types = [node.schema.types[i] for i in self.cols]

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        n = c.capacity
        if not n:
            return []
        if not (c.ops == Op.INSERT).all():
            raise InternalError("AppendOnlyDedup received a retraction from an append-only input")
        if not self.cols:  # one key for all rows: only the very first row ever passes
            if self.state.exists(()):
                return []
            out = c.take(np.zeros(1, np.int64))
            self.state.insert_row(out.to_rows()[0])  # write_chunk cannot encode an empty pk
            return [out]
        # the first row of each key within the chunk (NULLs compare equal, as in DISTINCT)
        keys = memcomparable.encode_columns_arrow(
            [c.columns[i] for i in self.cols], self.key_types, [ASC] * len(self.cols)
        )
        t = pa.table({"k": keys, "i": pa.array(np.arange(n, dtype=np.int64))})
        first = t.group_by("k", use_threads=False).aggregate([("i", "min")]).column("i_min")
        firsts = c.take(np.sort(np.asarray(first.to_numpy(), np.int64)))
        # ... that no earlier chunk or epoch has seen (point gets, read-your-writes)
        found, _ = self.state.get_rows([firsts.columns[i] for i in self.cols])
        if found.all():
            return []
        out = firsts.take(np.flatnonzero(~found)) if found.any() else firsts
        self.state.write_chunk(out)
        return [out]
