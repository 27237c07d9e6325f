"""From a logical plan to batch executors for SELECT (and the reads of UPDATE / DELETE).

Scans push down what the pk allows: equality predicates on the leading pk columns become a
pk prefix (a point get when they cover the whole pk, one vnode when they cover the distribution
key); the remaining predicates stay in a filter above. Joins use their equi-conditions as hash
keys, other joins run as nested loops; a scalar subquery's side is checked to have one row.
"""

from __future__ import annotations

from piestream.batch.plan import (
    BatchAggCall,
    BatchFilter,
    BatchHashAgg,
    BatchHashJoin,
    BatchHopWindow,
    BatchMaxOneRow,
    BatchNestedLoopJoin,
    BatchOverWindow,
    BatchPlanNode,
    BatchProject,
    BatchScan,
    BatchSort,
    BatchTopN,
    BatchUnion,
    BatchValues,
)
from piestream.common.errors import FeatureNotSupported
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.frontend.catalog import RelationKind
from piestream.frontend.logical import (
    Agg,
    Filter,
    HopWindow,
    Join,
    JoinKind,
    OverWindow,
    PlanNode,
    Project,
    Scan,
    Sort,
    TopN,
    Union,
    Values,
)
from piestream.frontend.optimizer import and_all, conjuncts

_JOIN = {
    JoinKind.INNER: "inner",
    JoinKind.LEFT: "left",
    JoinKind.RIGHT: "right",
    JoinKind.FULL: "full",
    JoinKind.LEFT_SEMI: "left_semi",
    JoinKind.LEFT_ANTI: "left_anti",
}


def to_batch(node: PlanNode) -> BatchPlanNode:
    if isinstance(node, Filter) and isinstance(node.input, Scan):
        return _scan_with_predicates(node.input, conjuncts(node.predicate))
    if isinstance(node, Scan):
        return BatchScan(schema=node.schema, table=_table(node), output_indices=tuple(node.column_indices))
    if isinstance(node, Values):
        return BatchValues(schema=node.schema, rows=tuple(tuple(r) for r in node.rows))
    if isinstance(node, Filter):
        return BatchFilter(input=to_batch(node.input), predicate=node.predicate)
    if isinstance(node, Project):
        return BatchProject(schema=node.schema, input=to_batch(node.input), exprs=tuple(node.exprs))
    if isinstance(node, Join):
        return _join(node)
    if isinstance(node, Agg):
        calls = tuple(
            BatchAggCall(c.kind, c.args, c.return_type, c.distinct, c.filter, tuple(c.order_by))
            for c in node.calls
        )
        return BatchHashAgg(
            schema=node.schema, input=to_batch(node.input), group_key=tuple(node.group_key), calls=calls
        )
    if isinstance(node, TopN):
        return BatchTopN(
            input=to_batch(node.input),
            order=tuple(node.order),
            limit=node.limit,
            offset=node.offset,
            group_key=tuple(node.group_key),
            with_ties=node.with_ties,
        )
    if isinstance(node, Sort):
        return BatchSort(input=to_batch(node.input), order=tuple(node.order))
    if isinstance(node, Union):
        return BatchUnion(schema=node.schema, inputs=tuple(to_batch(i) for i in node.union_inputs))
    if isinstance(node, HopWindow):
        return BatchHopWindow(
            input=to_batch(node.input),
            time_col=node.time_col,
            slide_usecs=node.slide_usecs,
            size_usecs=node.size_usecs,
            offset_usecs=node.offset_usecs,
        )
    if isinstance(node, OverWindow):
        return BatchOverWindow(
            input=to_batch(node.input),
            partition_by=tuple(node.partition_by),
            order_by=tuple(node.order_by),
            calls=tuple((c.kind, c.return_type) for c in node.calls),
        )
    raise FeatureNotSupported(f"{type(node).__name__} is not supported in queries")


def _table(scan: Scan):  # type: ignore[no-untyped-def]
    desc = scan.relation.table
    if desc is None and scan.relation.kind is RelationKind.SOURCE:
        raise FeatureNotSupported("cannot query a source directly; create a materialized view or table")
    if desc is None:
        raise FeatureNotSupported(f'cannot read "{scan.relation.name}"')
    return desc


def _scan_with_predicates(scan: Scan, preds: list[Expr]) -> BatchPlanNode:
    """Equality predicates on the leading pk columns -> a pk prefix; the rest filter above."""
    desc = _table(scan)
    out_of = {ci: i for i, ci in enumerate(scan.column_indices)}  # table column -> scan output
    prefix = []
    used: set[int] = set()
    for pk_col in desc.pk:
        if pk_col not in out_of:
            break
        hit = None
        for i, p in enumerate(preds):
            v = _eq_const(p, out_of[pk_col], desc.columns[pk_col].data_type)
            if v is not None and i not in used:
                hit = (i, v)
                break
        if hit is None:
            break
        used.add(hit[0])
        prefix.append(hit[1])
    rest = [p for i, p in enumerate(preds) if i not in used]
    node: BatchPlanNode = BatchScan(
        schema=scan.schema,
        table=desc,
        output_indices=tuple(scan.column_indices),
        pk_prefix=tuple(prefix),
        point_get=len(prefix) == len(desc.pk) and bool(prefix),
    )
    pred = and_all(rest)
    return node if pred is None else BatchFilter(input=node, predicate=pred)


def _eq_const(p: Expr, col: int, t: object) -> object:
    """The constant of ``col = constant`` (non-NULL, the column's exact type), else None."""
    if not (isinstance(p, FuncCall) and p.name in ("equal", "=") and len(p.args) == 2):
        return None
    a, b = p.args
    if isinstance(b, InputRef):
        a, b = b, a
    if (
        isinstance(a, InputRef)
        and a.index == col
        and isinstance(b, Literal)
        and b.value is not None
        and b.return_type == t
    ):
        return b.value
    return None


def _join(node: Join) -> BatchPlanNode:
    left, right = to_batch(node.left), to_batch(node.right)
    nl = len(node.left.types)
    lk, rk, safe, residual = [], [], [], []
    for c in conjuncts(node.condition) if node.condition is not None else []:
        pair = _equi(c, nl)
        if pair is None:
            residual.append(c)
        else:
            lk.append(pair[0])
            rk.append(pair[1])
            safe.append(pair[2])
    kind = _JOIN[node.kind]
    cond = and_all(residual)
    if node.scalar_subquery:
        right = BatchMaxOneRow(input=right)  # a scalar subquery yields at most one row
    if lk:
        return BatchHashJoin(
            left=left,
            right=right,
            kind=kind,
            left_keys=tuple(lk),
            right_keys=tuple(rk),
            null_safe=tuple(safe),
            condition=cond,
        )
    return BatchNestedLoopJoin(left=left, right=right, kind=kind, condition=cond)


def _equi(c: Expr, nl: int) -> tuple[int, int, bool] | None:
    if not (
        isinstance(c, FuncCall) and c.name in ("equal", "=", "is_not_distinct_from") and len(c.args) == 2
    ):
        return None
    a, b = c.args
    if not (isinstance(a, InputRef) and isinstance(b, InputRef)) or a.return_type != b.return_type:
        return None
    safe = c.name == "is_not_distinct_from"
    if a.index < nl <= b.index:
        return a.index, b.index - nl, safe
    if b.index < nl <= a.index:
        return b.index, a.index - nl, safe
    return None
