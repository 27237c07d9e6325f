"""Planning an ASOF [LEFT] JOIN as a stream `AsOfJoinNode`: both inputs hash-distributed by the
join key (each actor holds whole key groups), the output left ++ right with the right's hidden
columns after the logical ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from piestream.frontend.logical import AsOfJoin
from piestream.frontend.stream_piece import Dist, Piece, upstreams
from piestream.plan.asof_join import AsOfJoinNode
from piestream.storage.table.schemas import join_table

if TYPE_CHECKING:
    from piestream.frontend.stream_planner import StreamPlanner


def plan_asof_join(pl: StreamPlanner, node: AsOfJoin) -> Piece:
    lk, rk = list(node.left_keys), list(node.right_keys)
    lp = pl.require(pl.plan(node.left), Dist("hash", tuple(lk)))
    rp = pl.require(pl.plan(node.right), Dist("hash", tuple(rk)))
    if lp.dist.kind == "single" and rp.dist.kind != "single":
        lp = pl.shuffle(lp, Dist("hash", tuple(lk)))
    elif rp.dist.kind == "single" and lp.dist.kind != "single":
        rp = pl.shuffle(rp, Dist("hash", tuple(rk)))
    if upstreams(lp.node) & upstreams(rp.node):  # a self-join: one input port per upstream
        rp = pl.shuffle(rp, rp.dist)
    lw = len(lp.schema)
    nl, nr = len(node.left.schema), len(node.right.schema)
    lcols = [(f.name, f.data_type) for f in lp.schema.fields]
    rcols = [(f.name, f.data_type) for f in rp.schema.fields]
    key = list(dict.fromkeys([*lp.stream_key, *lk]))
    n = AsOfJoinNode(
        schema=lp.schema.concat(rp.schema),
        stream_key=tuple(key),
        append_only=False,
        left=lp.node,
        right=rp.node,
        left_keys=tuple(lk),
        right_keys=tuple(rk),
        left_col=node.left_col,
        right_col=node.right_col,
        op=node.op,
        outer=node.outer,
        left_table=join_table(pl.next_table_id(), lcols, lk, lp.stream_key, name="AsOfJoinLeft"),
        right_table=join_table(pl.next_table_id(), rcols, rk, rp.stream_key, name="AsOfJoinRight"),
    )
    dist = lp.dist if lp.dist.kind == "single" else Dist("hash", tuple(lk))
    non_null = lp.non_null if node.outer else lp.non_null | {lw + c for c in rp.non_null}
    piece = Piece(n, dist, len(n.schema), frozenset(non_null))
    return pl.reorder(piece, [*range(nl), *range(lw, lw + nr)])
