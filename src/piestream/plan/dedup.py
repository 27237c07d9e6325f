"""AppendOnlyDedup: the first row of each dedup key passes, later ones are dropped (reference
§6.5); the input must be append-only, the output is append-only keyed by the dedup columns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from piestream.common.errors import FeatureNotSupported, InternalError
from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.common.vnode import VNODE_COUNT
from piestream.plan.node import StreamNode, node_kind
from piestream.plan.watermark import ColumnWatermark
from piestream.storage.table.desc import ColumnDesc, TableDesc


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


@node_kind("AppendOnlyDedup")
@dataclass(frozen=True, kw_only=True)
class DedupNode(StreamNode):
    """Append-only dedup of `input` on `dedup_cols`; output = input columns, stream key =
    dedup columns, append-only. Build it with `build_dedup`."""

    child_fields = ("input",)

    input: StreamNode
    dedup_cols: tuple[int, ...]
    state_table: TableDesc
    #: the watermark of dedup column 0 (plan format 3): keys below it are cleaned from the
    #: state table (a Hummock table watermark on its first pk column)
    watermark: ColumnWatermark | None = field(default=None, metadata={"since_format": 3})

    def __post_init__(self) -> None:
        if self.watermark is not None and self.state_table.watermark_col != self.dedup_cols[0]:
            raise InternalError("a watermarked dedup needs its state table cleaned by dedup column 0")
        if not self.input.append_only:
            raise FeatureNotSupported(
                "AppendOnlyDedup needs an append-only input; "
                "plan a GroupTopN with limit 1 grouped by the dedup columns for a retractable one"
            )
        if self.state_table.pk != self.dedup_cols:
            raise InternalError("dedup state table pk must be the dedup columns")
        if self.stream_key != self.dedup_cols:
            raise InternalError("dedup stream key must be the dedup columns")

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        names = self.schema.names
        return f"AppendOnlyDedup {{ dedup_cols: [{', '.join(names[c] for c in self.dedup_cols)}] }}"


def build_dedup(
    input: StreamNode,
    dedup_cols: Sequence[int],
    *,
    table_id: int,
    name: str = "",
    watermark: ColumnWatermark | None = None,
) -> DedupNode:
    """The planner's entry point: a DedupNode over an append-only `input` with its state table
    (cleaned by `watermark`, dedup column 0's, if given)."""
    schema = input.schema
    table = dedup_table(table_id, [(f.name, f.data_type) for f in schema], dedup_cols, name=name)
    if watermark is not None:
        table = replace(table, watermark_col=table.pk[0])
    return DedupNode(
        watermark=watermark,
        schema=schema,
        stream_key=tuple(dedup_cols),
        append_only=True,
        input=input,
        dedup_cols=tuple(dedup_cols),
        state_table=table,
    )
