"""Schema evolution planned as plan rewrites: what ALTER TABLE changes in a running table's job
and in the jobs that read it, without rewriting a stored row (issue 31).

ADD COLUMN appends the column to the table (after every existing one, hidden ``_row_id``
included, so no existing column index moves):

- the table's own job (DML -> [WatermarkFilter] -> [RowIdGen] -> Materialize) carries the wider
  rows and its Materialize writes them with the wider storage descriptor, whose
  `TableDesc.value_required` says that values stored before hold fewer columns (they read the
  column's default or NULL: PostgreSQL's ``attmissingval``, no SST is rewritten);
- every edge from the table's job to another job keeps the columns it was planned for
  (`DispatchEdge.output_indices`, RisingWave's dispatcher projection), so a running MV, index,
  sink or subscription sees exactly the chunks it saw before: an MV's ``SELECT *`` keeps its
  columns, as in PostgreSQL and RisingWave;
- a backfill still reading the table's snapshot (`BackfillNode.upstream`) decodes it with the
  wider descriptor (its output columns stay).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from piestream.common.errors import FeatureNotSupported
from piestream.common.schema import Schema
from piestream.common.types import Field
from piestream.frontend.catalog import ColumnCatalog, Relation
from piestream.plan.backfill import BackfillNode
from piestream.plan.fragment import Fragment
from piestream.plan.materialize import MaterializeNode
from piestream.plan.node import DmlNode, ExchangeNode, StreamNode
from piestream.plan.row_id_gen import RowIdGenNode
from piestream.plan.watermark import WatermarkFilterNode
from piestream.storage.table.desc import ColumnDesc, TableDesc

#: The node kinds of a DML table's job: each passes the table's rows through unchanged in layout.
_TABLE_CHAIN = (DmlNode, WatermarkFilterNode, RowIdGenNode, MaterializeNode, ExchangeNode)


def add_column(
    rel: Relation, column: ColumnCatalog, fragments: Iterable[Fragment]
) -> tuple[Relation, list[Fragment]]:
    """`rel` (a table) with `column` appended, and the running fragments that change: the table's
    job's and the backfills of other jobs reading its storage. `fragments`: the running graph's."""
    assert rel.table is not None and rel.job_id is not None
    desc = rel.table.with_added_column(ColumnDesc(column.name, column.data_type, missing=column.default))
    field = Field(column.name, column.data_type)
    old_width = len(rel.columns)
    frags = list(fragments)
    own = {f.fragment_id for f in frags if f.job_id == rel.job_id}

    def widen(node: StreamNode) -> StreamNode:
        if not isinstance(node, _TABLE_CHAIN):
            raise FeatureNotSupported(f"ALTER TABLE ADD COLUMN on a table whose job has a {node.kind} node")
        if isinstance(node, ExchangeNode) and node.upstream_fragment_id not in own:
            raise FeatureNotSupported("ALTER TABLE ADD COLUMN on a table that reads another job")
        schema = Schema((*node.schema.fields, field))
        if isinstance(node, MaterializeNode) and node.table.table_id == desc.table_id:
            return replace(node, schema=schema, table=desc)
        return replace(node, schema=schema)

    changed: list[Fragment] = []
    for f in frags:
        if f.job_id == rel.job_id:
            outputs = tuple(
                e
                if e.downstream_fragment_id in own or e.output_indices is not None
                else replace(e, output_indices=tuple(range(old_width)))
                for e in f.outputs
            )
            changed.append(replace(f, root=f.root.transform(widen), outputs=outputs))
            continue
        root = with_upstream_desc(f.root, desc)
        if root is not f.root:
            changed.append(replace(f, root=root))
    new = replace(rel, columns=(*rel.columns, column), table=desc)
    return new, changed


def with_upstream_desc(root: StreamNode, desc: TableDesc) -> StreamNode:
    """`root` with every backfill of table `desc` reading its storage through `desc`."""

    def fix(node: StreamNode) -> StreamNode:
        if isinstance(node, BackfillNode) and node.upstream.table_id == desc.table_id:
            return replace(node, upstream=desc)
        return node

    return root.transform(fix)


def with_table_desc(fragments: Iterable[Fragment], desc: TableDesc) -> list[Fragment]:
    """The fragments that hold table `desc` (its Materialize, backfills reading it), with the
    new version of it (RENAME COLUMN: names only, the layout stays)."""

    def fix(node: StreamNode) -> StreamNode:
        if isinstance(node, MaterializeNode) and node.table.table_id == desc.table_id:
            return replace(node, table=desc)
        if isinstance(node, BackfillNode) and node.upstream.table_id == desc.table_id:
            return replace(node, upstream=desc)
        return node

    out = []
    for f in fragments:
        root = f.root.transform(fix)
        if root is not f.root:
            out.append(replace(f, root=root))
    return out


def renamed_columns(columns: tuple[ColumnCatalog, ...], old: str, new: str) -> tuple[ColumnCatalog, ...]:
    return tuple(replace(c, name=new) if c.name == old else c for c in columns)
