"""Small stream graphs built by hand (no SQL yet) for runtime tests."""

from __future__ import annotations

from piestream.common.order import ASC
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, BOOLEAN, INT
from piestream.expr.expr import FuncCall, InputRef, Literal
from piestream.plan.filter import FilterNode
from piestream.plan.fragment import DispatchEdge, DispatchKind, Fragment
from piestream.plan.materialize import ConflictBehavior, MaterializeNode
from piestream.plan.node import DmlNode, ExchangeNode
from piestream.plan.project import ProjectNode
from piestream.storage.table.schemas import mv_table

T = Schema.of(("k", INT), ("v", BIGINT))
TABLE = mv_table(1, [("k", INT), ("v", BIGINT)], pk=[0], pk_orders=[ASC], name="t")
MV = mv_table(2, [("k", INT), ("v2", BIGINT)], pk=[0], pk_orders=[ASC], name="mv")


def table_and_mv(parallelism: int = 2) -> list[Fragment]:
    """t(k int primary key, v bigint) with upsert semantics, and mv = SELECT k, v*2 FROM t WHERE v > 0."""
    dml = DmlNode(schema=T, stream_key=(0,), table_id=1, dist_key=(0,))
    table_root = MaterializeNode(
        schema=T, stream_key=(0,), input=dml, table=TABLE, conflict=ConflictBehavior.OVERWRITE
    )
    edge = DispatchEdge(2, DispatchKind.HASH, parallelism, (0,), (INT,))
    table_frag = Fragment(1, 1, table_root, parallelism, outputs=(edge,))
    ex = ExchangeNode(schema=T, stream_key=(0,), upstream_fragment_id=1)
    filt = FilterNode(
        schema=T,
        stream_key=(0,),
        input=ex,
        predicate=FuncCall("greater_than", (InputRef(1, BIGINT), Literal(0, BIGINT)), BOOLEAN),
    )
    proj = ProjectNode(
        schema=Schema.of(("k", INT), ("v2", BIGINT)),
        stream_key=(0,),
        input=filt,
        exprs=(InputRef(0, INT), FuncCall("multiply", (InputRef(1, BIGINT), Literal(2, BIGINT)), BIGINT)),
    )
    mv_root = MaterializeNode(schema=proj.schema, stream_key=(0,), input=proj, table=MV)
    return [table_frag, Fragment(2, 2, mv_root, parallelism)]
