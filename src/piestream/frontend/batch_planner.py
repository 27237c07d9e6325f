"""From a logical plan to batch executors for SELECT (and the reads of UPDATE / DELETE).

Scans push down what the pk allows: equality predicates on the leading pk columns become a
pk prefix (a point get when they cover the whole pk, one vnode when they cover the distribution
key); the remaining predicates stay in a filter above. Joins use their equi-conditions as hash
keys, other joins run as nested loops; a scalar subquery's side is checked to have one row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from piestream.batch.plan import (
    BatchAggCall,
    BatchAsOfJoin,
    BatchExpand,
    BatchFilter,
    BatchHashAgg,
    BatchHashJoin,
    BatchHopWindow,
    BatchMaxOneRow,
    BatchNestedLoopJoin,
    BatchOverWindow,
    BatchPlanNode,
    BatchProject,
    BatchProjectSet,
    BatchScan,
    BatchSort,
    BatchTopN,
    BatchUnion,
    BatchValues,
)
from piestream.common.errors import FeatureNotSupported
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.frontend.catalog import Relation, RelationKind
from piestream.frontend.logical import (
    Agg,
    AsOfJoin,
    Expand,
    Filter,
    HopWindow,
    Join,
    JoinKind,
    OverWindow,
    PlanNode,
    Project,
    ProjectSet,
    Scan,
    Sort,
    TopN,
    Union,
    Values,
)
from piestream.frontend.optimizer import and_all, conjuncts
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.key_range import Bound

#: The indexes (catalog relations of kind INDEX) of a table, by the table's relation id.
IndexLookup = Callable[[int], list[Relation]]

_JOIN = {
    JoinKind.INNER: "inner",
    JoinKind.LEFT: "left",
    JoinKind.RIGHT: "right",
    JoinKind.FULL: "full",
    JoinKind.LEFT_SEMI: "left_semi",
    JoinKind.LEFT_ANTI: "left_anti",
}


def to_batch(node: PlanNode, indexes: IndexLookup | None = None) -> BatchPlanNode:
    """The batch plan of an optimized logical plan; `indexes` lets scans use a table's indexes."""
    if any(isinstance(n, Scan) and n.as_of_proctime for n in node.walk()):
        raise FeatureNotSupported(  # RisingWave's text
            "do not support temporal join for batch queries",
            hint="please use temporal join in streaming queries",
        )
    return _Planner(indexes).plan(node)


class _Planner:
    def __init__(self, indexes: IndexLookup | None) -> None:
        self.indexes = indexes

    def plan(self, node: PlanNode) -> BatchPlanNode:
        return _to_batch(node, self)


def _to_batch(node: PlanNode, pl: _Planner) -> BatchPlanNode:
    if isinstance(node, Filter) and isinstance(node.input, Scan):
        return _scan_with_predicates(node.input, conjuncts(node.predicate), pl.indexes)
    if isinstance(node, Scan):
        return BatchScan(schema=node.schema, table=_table(node), output_indices=tuple(node.column_indices))
    if isinstance(node, Values):
        return BatchValues(schema=node.schema, rows=tuple(tuple(r) for r in node.rows))
    if isinstance(node, Filter):
        return BatchFilter(input=pl.plan(node.input), predicate=node.predicate)
    if isinstance(node, Project):
        return BatchProject(schema=node.schema, input=pl.plan(node.input), exprs=tuple(node.exprs))
    if isinstance(node, ProjectSet):
        return BatchProjectSet(schema=node.schema, input=pl.plan(node.input), items=tuple(node.items))
    if isinstance(node, Join):
        return _join(node, pl)
    if isinstance(node, AsOfJoin):
        return BatchAsOfJoin(
            left=pl.plan(node.left),
            right=pl.plan(node.right),
            left_keys=node.left_keys,
            right_keys=node.right_keys,
            left_col=node.left_col,
            right_col=node.right_col,
            op=node.op,
            outer=node.outer,
        )
    if isinstance(node, Agg):
        calls = tuple(
            BatchAggCall(c.kind, c.args, c.return_type, c.distinct, c.filter, tuple(c.order_by), c.delimiter)
            for c in node.calls
        )
        return BatchHashAgg(
            schema=node.schema, input=pl.plan(node.input), group_key=tuple(node.group_key), calls=calls
        )
    if isinstance(node, TopN):
        return BatchTopN(
            input=pl.plan(node.input),
            order=tuple(node.order),
            limit=node.limit,
            offset=node.offset,
            group_key=tuple(node.group_key),
            with_ties=node.with_ties,
        )
    if isinstance(node, Sort):
        return BatchSort(input=pl.plan(node.input), order=tuple(node.order))
    if isinstance(node, Union):
        return BatchUnion(schema=node.schema, inputs=tuple(pl.plan(i) for i in node.union_inputs))
    if isinstance(node, Expand):
        return BatchExpand(
            input=pl.plan(node.input), subsets=tuple(node.subsets), key_cols=tuple(node.key_cols)
        )
    if isinstance(node, HopWindow):
        return BatchHopWindow(
            input=pl.plan(node.input),
            time_col=node.time_col,
            slide_usecs=node.slide_usecs,
            size_usecs=node.size_usecs,
            offset_usecs=node.offset_usecs,
        )
    if isinstance(node, OverWindow):
        return BatchOverWindow(
            input=pl.plan(node.input),
            partition_by=tuple(node.partition_by),
            order_by=tuple(node.order_by),
            calls=tuple(node.calls),
        )
    raise FeatureNotSupported(f"{type(node).__name__} is not supported in queries")


def _table(scan: Scan):  # type: ignore[no-untyped-def]
    desc = scan.relation.table
    if desc is None and scan.relation.kind is RelationKind.SOURCE:
        raise FeatureNotSupported("cannot query a source directly; create a materialized view or table")
    if desc is None:
        raise FeatureNotSupported(f'cannot read "{scan.relation.name}"')
    return desc


def _scan_with_predicates(scan: Scan, preds: list[Expr], indexes: IndexLookup | None) -> BatchPlanNode:
    """Equality predicates on the leading pk columns -> a pk prefix, then comparisons on the next
    pk column -> a pk range; the rest filter above. An index of the table whose key the predicates
    match further (and that holds every column the scan reads) is scanned instead of the table."""
    desc = _table(scan)
    best = _key_access(desc, {ci: i for i, ci in enumerate(scan.column_indices)}, preds)
    best_out = tuple(scan.column_indices)
    for index in indexes(scan.relation.id) if indexes is not None else ():
        idesc = index.table
        if idesc is None:
            continue
        pos = {c.name: i for i, c in enumerate(index.columns)}
        names = [scan.relation.columns[ci].name for ci in scan.column_indices]
        if not all(n in pos for n in names):
            continue  # the index does not hold a column the query reads
        access = _key_access(idesc, {pos[n]: i for i, n in enumerate(names)}, preds)
        if access.score > best.score:
            best, best_out = access, tuple(pos[n] for n in names)
    node: BatchPlanNode = BatchScan(
        schema=scan.schema,
        table=best.desc,
        output_indices=best_out,
        pk_prefix=tuple(best.prefix),
        pk_range=best.range,
        point_get=len(best.prefix) == len(best.desc.pk) and bool(best.prefix),
    )
    pred = and_all([p for i, p in enumerate(preds) if i not in best.used])
    return node if pred is None else BatchFilter(input=node, predicate=pred)


@dataclass
class _KeyAccess:
    desc: TableDesc
    prefix: list[object]
    used: set[int]  # predicates the prefix answers exactly
    range: tuple[Bound | None, Bound | None]

    @property
    def score(self) -> tuple[bool, int, bool]:
        """Higher is fewer rows read: any point get (one key) beats prefixes, longer prefixes
        beat shorter ones, then a range beats none."""
        if len(self.prefix) == len(self.desc.pk) and self.prefix:
            return (True, 0, False)
        return (False, len(self.prefix), self.range != (None, None))


def _key_access(desc: TableDesc, out_of: dict[int, int], preds: list[Expr]) -> _KeyAccess:
    """What `preds` fix of `desc`'s pk; `out_of` maps table columns to the scan's outputs."""
    prefix: list[object] = []
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
    rng: tuple[Bound | None, Bound | None] = (None, None)
    if len(prefix) < len(desc.pk) and desc.pk[len(prefix)] in out_of:
        col = desc.pk[len(prefix)]
        rng = _range(preds, out_of[col], desc.columns[col].data_type, desc.pk_orders[len(prefix)].descending)
    return _KeyAccess(desc, prefix, used, rng)


_RANGE_OPS = {"greater_than": (True, False), "greater_than_or_equal": (True, True)}
_RANGE_OPS |= {"less_than": (False, False), "less_than_or_equal": (False, True)}
_FLIPPED = {"greater_than": "less_than", "greater_than_or_equal": "less_than_or_equal"}
_FLIPPED |= {v: k for k, v in _FLIPPED.items()}


def _range(preds: list[Expr], col: int, t: object, descending: bool) -> tuple[Bound | None, Bound | None]:
    """Bounds on `col` from ``col <op> constant`` predicates, in the key's order. The predicates
    stay in the filter above too (the range only prunes; NULLs sort inside some ranges)."""
    lower: Bound | None = None  # in value order
    upper: Bound | None = None
    for p in preds:
        if not (isinstance(p, FuncCall) and p.name in _RANGE_OPS and len(p.args) == 2):
            continue
        a, b = p.args
        name = p.name
        if isinstance(b, InputRef) and isinstance(a, Literal):
            a, b, name = b, a, _FLIPPED[name]
        if not (isinstance(a, InputRef) and a.index == col and isinstance(b, Literal)):
            continue
        if b.value is None or b.return_type != t:
            continue
        is_lower, inclusive = _RANGE_OPS[name]
        if is_lower and lower is None:
            lower = Bound((b.value,), inclusive)
        elif not is_lower and upper is None:
            upper = Bound((b.value,), inclusive)
    return (upper, lower) if descending else (lower, upper)


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


def _join(node: Join, pl: _Planner) -> BatchPlanNode:
    left, right = pl.plan(node.left), pl.plan(node.right)
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
