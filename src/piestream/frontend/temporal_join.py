"""Planning a temporal (lookup) join: ``stream [LEFT] JOIN dim FOR SYSTEM_TIME AS OF
PROCTIME() ON ...`` becomes a `TemporalJoinNode` over the stream side alone; the dimension is
not streamed, it is looked up by its primary key at the committed epoch (plan/temporal_join).

RisingWave's rules, with its texts: the left input must be append-only; the ON condition's
equalities must cover the dimension's key (piestream looks up the whole primary key, which is
also its distribution key). The rest of ON is evaluated on the matched row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from piestream.common.errors import FeatureNotSupported
from piestream.expr.expr import Expr, FuncCall, InputRef
from piestream.frontend.binder.rewrite import remap_refs
from piestream.frontend.logical import Join, JoinKind, Scan
from piestream.frontend.stream_piece import Piece, and_exprs, conjuncts, refs
from piestream.plan.temporal_join import TemporalJoinNode

if TYPE_CHECKING:
    from piestream.frontend.stream_planner import StreamPlanner


def is_temporal_join(node: Join) -> bool:
    return isinstance(node.right, Scan) and node.right.as_of_proctime


def plan_temporal_join(pl: StreamPlanner, node: Join) -> Piece:
    scan = node.right
    assert isinstance(scan, Scan)
    desc = scan.relation.table
    assert desc is not None, "a table or materialized view has a table descriptor"
    lp = pl.plan(node.left)
    if not lp.node.append_only:
        raise FeatureNotSupported(
            "Temporal join requires an append-only left input",
            hint="Please ensure your left input is append-only",
        )
    nl, nr = len(node.left.schema), len(node.right.schema)
    # equalities `left expression = dim column` on the dimension's pk columns become the lookup
    by_pk: dict[int, Expr] = {}
    rest: list[Expr] = []
    for c in conjuncts(node.condition):
        pair = _lookup_pair(c, nl)
        if pair is not None:
            left_expr, right_col = pair
            table_col = scan.column_indices[right_col - nl]
            if table_col in desc.pk and table_col not in by_pk:
                by_pk[table_col] = left_expr
                continue
        rest.append(c)
    if not desc.pk or set(by_pk) != set(desc.pk):
        raise FeatureNotSupported(  # RisingWave's text
            "Temporal join requires the equivalence join condition includes the key columns that form "
            "the distribution key of the lookup table",
            hint="Use DESCRIBE <table_name> to view the table's key information.",
        )
    # left key expressions that are not plain columns become hidden columns of the left side
    wl = len(lp.schema)
    extra = [e for p in desc.pk if not isinstance(e := by_pk[p], InputRef)]
    if extra:
        exprs = [*refs(lp.schema), *extra]
        names = [*lp.schema.names, *(f"_lookup_key{i}" for i in range(len(extra)))]
        lp = pl.project(lp, exprs, names, lp.width)
    keys: list[int] = []
    at = wl
    for p in desc.pk:
        e = by_pk[p]
        if isinstance(e, InputRef):
            keys.append(e.index)
        else:
            keys.append(at)
            at += 1
    wl = len(lp.schema)
    right_cols = tuple(scan.column_indices)
    # ON's other conjuncts over the node's output: left piece columns, then the dim's
    mapping = {i: i for i in range(nl)} | {nl + j: wl + j for j in range(nr)}
    cond = and_exprs([remap_refs(c, mapping) for c in rest])
    tj = TemporalJoinNode(
        schema=lp.schema.concat(scan.schema),
        stream_key=lp.stream_key,
        append_only=True,
        input=lp.node,
        table=desc,
        left_keys=tuple(keys),
        right_cols=right_cols,
        outer=node.kind is JoinKind.LEFT,
        condition=cond,
    )
    piece = Piece(tj, lp.dist, len(tj.schema), lp.non_null, lp.watermarks)
    # logical order: the left's logical columns, the dimension's, then the left's hidden ones
    return pl.reorder(piece, [*range(nl), *range(wl, wl + nr)])


def _lookup_pair(c: Expr, nl: int) -> tuple[Expr, int] | None:
    """(left expression, right column) of ``<expr over the left> = right.col`` of equal types."""
    if not (isinstance(c, FuncCall) and c.name in ("equal", "=") and len(c.args) == 2):
        return None
    for a, b in (c.args, c.args[::-1]):
        if isinstance(b, InputRef) and b.index >= nl and a.return_type == b.return_type:
            used = a.input_refs()
            if used and max(used) < nl:
                return a, b.index
    return None
