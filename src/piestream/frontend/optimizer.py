"""Logical rewrites before planning: constant folding, predicate push-down, projection merging,
column pruning, and recognizing ``ROW_NUMBER() OVER (...) <= N`` as a group top-N.

Each rule maps a plan to an equivalent plan; `optimize` applies them in a fixed order. They keep
the planner's job simple (fewer columns cross exchanges, filters sit next to scans and joins get
their equi-conditions) without changing any result.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from piestream.common.errors import FeatureNotSupported
from piestream.common.schema import Schema
from piestream.common.types import TypeKind
from piestream.expr.bind import bind_call, fold_constants
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.expr.table_function import TableFunction
from piestream.expr.window import FrameBound
from piestream.frontend.binder.rewrite import remap_refs
from piestream.frontend.logical import (
    Agg,
    AggCall,
    Filter,
    Join,
    JoinKind,
    Now,
    OverWindow,
    PlanNode,
    Project,
    ProjectSet,
    Scan,
    TopN,
    Union,
    Values,
    WindowCall,
)

# ---------------------------------------------------------------------------------------------
# helpers


def conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, FuncCall) and e.name == "and":
        return [c for a in e.args for c in conjuncts(a)]
    return [e]


def and_all(exprs: list[Expr]) -> Expr | None:
    exprs = [e for e in exprs if not (isinstance(e, Literal) and e.value is True)]
    if not exprs:
        return None
    return exprs[0] if len(exprs) == 1 else bind_call("and", exprs)


def _map_node_exprs(node: PlanNode, fn: Any) -> PlanNode:
    """Apply `fn` to every expression a node holds (not its inputs)."""
    if isinstance(node, Filter):
        return replace(node, predicate=fn(node.predicate))
    if isinstance(node, Project):
        return replace(node, exprs=[fn(e) for e in node.exprs])
    if isinstance(node, ProjectSet):
        return replace(node, items=[fn(e) for e in node.items])
    if isinstance(node, Join) and node.condition is not None:
        return replace(node, condition=fn(node.condition))
    if isinstance(node, Values):
        return replace(node, rows=[[fn(e) for e in r] for r in node.rows])
    if isinstance(node, Agg):
        return replace(
            node, calls=[replace(c, filter=fn(c.filter)) if c.filter is not None else c for c in node.calls]
        )
    return node


# ---------------------------------------------------------------------------------------------
# constant folding


def fold(plan: PlanNode) -> PlanNode:
    def rule(n: PlanNode) -> PlanNode:
        n = _map_node_exprs(n, fold_constants)
        if isinstance(n, Filter) and isinstance(n.predicate, Literal) and n.predicate.value is True:
            return n.input
        return n

    return plan.transform(rule)


# ---------------------------------------------------------------------------------------------
# projection merge


def merge_projects(plan: PlanNode) -> PlanNode:
    def rule(n: PlanNode) -> PlanNode:
        if isinstance(n, Project) and isinstance(n.input, Project) and not _copies_per_row(n, n.input):
            inner = n.input
            subst = {i: e for i, e in enumerate(inner.exprs)}
            exprs = [
                e.transform_down(lambda x: subst[x.index] if isinstance(x, InputRef) else None)
                for e in n.exprs
            ]
            return Project(n.schema, inner.input, exprs)
        if isinstance(n, Project) and _is_identity(n):
            return n.input
        return n

    return plan.transform(rule)


def _copies_per_row(outer: Project, inner: Project) -> bool:
    """Merging would evaluate an inner random() / gen_random_uuid() item more than once per row
    (the outer projection reads it twice): one draw must give one value."""
    per_row = {i for i, e in enumerate(inner.exprs) if _per_row(e)}
    if not per_row:
        return False
    uses = [x.index for e in outer.exprs for x in e.walk() if isinstance(x, InputRef) and x.index in per_row]
    return len(uses) != len(set(uses))


def _per_row(e: Expr) -> bool:
    from piestream.expr.signatures import PER_ROW

    return any(isinstance(x, FuncCall) and x.name in PER_ROW for x in e.walk())


def _is_identity(p: Project) -> bool:
    inp = p.input.types
    return (
        len(p.exprs) == len(inp)
        and all(isinstance(e, InputRef) and e.index == i for i, e in enumerate(p.exprs))
        and [f.name for f in p.schema.fields] == [f.name for f in p.input.schema.fields]
    )


# ---------------------------------------------------------------------------------------------
# predicate push-down


def push_down_predicates(plan: PlanNode) -> PlanNode:
    if isinstance(plan, Filter):
        return _push_filter(push_down_predicates(plan.input), conjuncts(plan.predicate), plan.schema)
    node = plan.with_children([push_down_predicates(i) for i in plan.children()])
    if isinstance(node, Join) and node.kind is JoinKind.INNER and node.condition is not None:
        # single-side conjuncts of an inner join's condition filter that side first
        return _push_join(node, [])
    return node


def _wrap_filter(node: PlanNode, preds: list[Expr]) -> PlanNode:
    p = and_all(preds)
    return node if p is None else Filter(node.schema, node, p)


def _volatile(e: Expr) -> bool:
    """Not pushed through a projection (that would evaluate it again, with another value)."""
    return any(isinstance(x, FuncCall) and x.name in ("now", "gen_random_uuid", "random") for x in e.walk())


def _push_filter(node: PlanNode, preds: list[Expr], schema: Schema) -> PlanNode:
    if isinstance(node, Filter):
        return _push_filter(node.input, conjuncts(node.predicate) + preds, schema)
    if isinstance(node, Project):
        subst = {i: e for i, e in enumerate(node.exprs)}
        pushable: list[Expr] = []
        kept: list[Expr] = []
        for p in preds:
            mapped = p.transform_down(lambda x: subst[x.index] if isinstance(x, InputRef) else None)
            (kept if _volatile(mapped) or _volatile(p) else pushable).append(
                mapped if not _volatile(mapped) else p
            )
        inner = _push_filter(node.input, pushable, node.input.schema) if pushable else node.input
        return _wrap_filter(Project(node.schema, inner, node.exprs), kept)
    if isinstance(node, Join):
        return _push_join(node, preds)
    if isinstance(node, ProjectSet):
        return _push_through_project_set(node, preds)
    if isinstance(node, Union):
        return Union(node.schema, [_push_filter(i, list(preds), i.schema) for i in node.union_inputs])
    if isinstance(node, Agg):
        g = len(node.group_key)
        below, above = [], []
        for p in preds:
            refs = p.input_refs()
            if refs and all(r < g for r in refs):
                below.append(remap_refs(p, {i: node.group_key[i] for i in range(g)}))
            else:
                above.append(p)
        inner = _push_filter(node.input, below, node.input.schema) if below else node.input
        return _wrap_filter(replace(node, input=inner), above)
    return _wrap_filter(node, preds)


def _push_through_project_set(node: ProjectSet, preds: list[Expr]) -> PlanNode:
    """A predicate on a ProjectSet's scalar items holds for all of an input row's output rows or
    none, so it filters the input instead: ``FROM t, jsonb_each(t.j) WHERE jsonb_typeof(t.j) =
    'object'`` never calls jsonb_each on the rows the WHERE removes (PostgreSQL's order too, so
    no error record for them)."""
    n = len(node.items)
    scalar = {i: e for i, e in enumerate(node.items) if not isinstance(e, TableFunction) and not _volatile(e)}
    below: list[Expr] = []
    above: list[Expr] = []
    for p in preds:
        refs = p.input_refs()
        if refs and all(r < n and r in scalar for r in refs) and not _volatile(p):
            below.append(p.transform_down(lambda x: scalar[x.index] if isinstance(x, InputRef) else None))
        else:
            above.append(p)
    inner = _push_filter(node.input, below, node.input.schema) if below else node.input
    return _wrap_filter(replace(node, input=inner), above)


def _push_join(node: Join, preds: list[Expr]) -> PlanNode:
    nl = len(node.left.types)
    left_p: list[Expr] = []
    right_p: list[Expr] = []
    on: list[Expr] = []
    above: list[Expr] = []
    cond = conjuncts(node.condition) if node.condition is not None else []
    kind = node.kind
    # a temporal join's right side stays the table itself (it is looked up, not streamed):
    # conditions on it stay in the join
    lookup = isinstance(node.right, Scan) and node.right.as_of_proctime
    for p in preds:
        refs = p.input_refs()
        if kind.keeps_left_only:
            (left_p if refs and max(refs) < nl else above).append(p)
        elif refs and max(refs) < nl and kind in (JoinKind.INNER, JoinKind.LEFT):
            left_p.append(p)
        elif refs and min(refs) >= nl and kind in (JoinKind.INNER, JoinKind.RIGHT) and not lookup:
            right_p.append(remap_refs(p, {r: r - nl for r in refs}))
        elif kind is JoinKind.INNER:
            on.append(p)
        else:
            above.append(p)
    # an inner join's own single-side conditions filter its inputs
    keep_cond = []
    for c in cond:
        refs = c.input_refs()
        if (
            kind in (JoinKind.INNER, JoinKind.LEFT_SEMI)
            and refs
            and min(refs) >= nl
            and not _volatile(c)
            and not lookup
        ):
            right_p.append(remap_refs(c, {r: r - nl for r in refs}))
        elif kind is JoinKind.INNER and refs and max(refs) < nl and not _volatile(c):
            left_p.append(c)
        else:
            keep_cond.append(c)
    left = _push_filter(node.left, left_p, node.left.schema) if left_p else node.left
    right = _push_filter(node.right, right_p, node.right.schema) if right_p else node.right
    joined = Join(node.schema, left, right, kind, and_all(keep_cond + on), node.scalar_subquery)
    return _wrap_filter(joined, above)


# ---------------------------------------------------------------------------------------------
# ROW_NUMBER() <= N  ->  group TopN


def row_number_to_top_n(plan: PlanNode) -> PlanNode:
    """``Filter(rn <= N) over OverWindow(row_number)`` -> ``OverWindow(TopN(group=partition,
    limit=N))``: only the top N rows of a partition can pass, and their row numbers are the same
    (TopN ranks by the same order, ties broken by the same stream key). Column pruning removes the
    OverWindow again when the row number is not selected."""

    def rule(n: PlanNode) -> PlanNode:
        if not isinstance(n, Filter):
            return n
        ow, proj = n.input, None
        if isinstance(ow, Project) and isinstance(ow.input, OverWindow):
            proj, ow = ow, ow.input
        if not isinstance(ow, OverWindow) or len(ow.calls) != 1 or ow.calls[0].kind != "row_number":
            return n
        rn_col = len(ow.input.types)
        if proj is None:
            rn_out: int | None = rn_col
        else:
            rn_out = next(
                (i for i, e in enumerate(proj.exprs) if isinstance(e, InputRef) and e.index == rn_col), None
            )
        if rn_out is None:
            return n
        limit, rest = _rank_limit(conjuncts(n.predicate), rn_out)
        if limit is None:
            return n
        top = TopN(ow.input.schema, ow.input, list(ow.order_by), limit, 0, list(ow.partition_by))
        out: PlanNode = replace(ow, input=top)
        if proj is not None:
            out = Project(proj.schema, out, proj.exprs)
        return _wrap_filter(out, rest)

    return plan.transform(rule)


def _rank_limit(preds: list[Expr], col: int) -> tuple[int | None, list[Expr]]:
    """N from `rn <= N` / `rn < N+1` / `rn = 1` among `preds`, and the other predicates."""
    limit = None
    rest = []
    for p in preds:
        n = _compare_const(p, col)
        if n is not None and limit is None:
            limit = n
        else:
            rest.append(p)
    return limit, rest


def _compare_const(p: Expr, col: int) -> int | None:
    if not isinstance(p, FuncCall) or len(p.args) != 2:
        return None
    a, b = p.args
    if not (
        isinstance(a, InputRef) and a.index == col and isinstance(b, Literal) and isinstance(b.value, int)
    ):
        return None
    v = int(b.value)
    return {
        "less_than_or_equal": v,
        "less_than": v - 1,
        "equal": 1 if v == 1 else None,
    }.get(p.name)


# ---------------------------------------------------------------------------------------------
# column pruning


def prune_columns(plan: PlanNode) -> PlanNode:
    node, mapping = _prune(plan, set(range(len(plan.types))))
    if mapping != {i: i for i in range(len(plan.types))}:
        exprs: list[Expr] = [InputRef(mapping[i], t) for i, t in enumerate(plan.types)]
        node = Project(plan.schema, node, exprs)
    return node


def _prune(node: PlanNode, required: set[int]) -> tuple[PlanNode, dict[int, int]]:
    """A node producing at least the `required` columns, and where each of them went."""
    if isinstance(node, Scan):
        keep = sorted(required)
        new = Scan(
            node.schema.project(keep),
            node.relation,
            [node.column_indices[i] for i in keep],
            node.as_of_proctime,
        )
        return new, {c: i for i, c in enumerate(keep)}
    if isinstance(node, Project):
        keep = sorted(required)
        exprs = [node.exprs[i] for i in keep]
        need = set().union(*[e.input_refs() for e in exprs]) if exprs else set()
        child, m = _prune(node.input, need)
        new_exprs = [remap_refs(e, m) for e in exprs]
        return Project(node.schema.project(keep), child, new_exprs), {c: i for i, c in enumerate(keep)}
    if isinstance(node, ProjectSet):
        # every set-returning item decides how many rows there are: kept even if unread
        n = len(node.items)
        keep = [i for i, e in enumerate(node.items) if i in required or isinstance(e, TableFunction)]
        items = [node.items[i] for i in keep]
        need = set().union(*[e.input_refs() for e in items]) if items else set()
        child, m = _prune(node.input, need or ({0} if node.input.types else set()))
        fields = [node.schema.fields[i] for i in keep] + [node.schema.fields[n]]
        new_ps = ProjectSet(Schema(tuple(fields)), child, [remap_refs(e, m) for e in items])
        out = {c: i for i, c in enumerate(keep)}
        out[n] = len(keep)
        return new_ps, out
    if isinstance(node, Filter):
        need = set(required) | node.predicate.input_refs()
        child, m = _prune(node.input, need)
        return Filter(child.schema, child, remap_refs(node.predicate, m)), m
    if isinstance(node, Join):
        nl = len(node.left.types)
        cond_refs = node.condition.input_refs() if node.condition is not None else set()
        need = set(required) | cond_refs
        left, ml = _prune(node.left, {i for i in need if i < nl} or {0} if nl else set())
        right_need = {i - nl for i in need if i >= nl}
        if not right_need and node.right.types:
            right_need = {0}
        right, mr = _prune(node.right, right_need)
        m = dict(ml)
        new_nl = len(left.types)
        m.update({i + nl: j + new_nl for i, j in mr.items()})
        cond = remap_refs(node.condition, m) if node.condition is not None else None
        schema = (
            left.schema if node.kind.keeps_left_only else Schema(left.schema.fields + right.schema.fields)
        )
        if node.kind.keeps_left_only:
            m = dict(ml)
        return Join(schema, left, right, node.kind, cond, node.scalar_subquery), m
    if isinstance(node, Agg):
        g = len(node.group_key)
        keep_calls = [i for i in range(len(node.calls)) if g + i in required]
        calls = [node.calls[i] for i in keep_calls]
        need = set(node.group_key)
        for c in calls:
            need |= set(c.args) | {o for o, _ in c.order_by}
            if c.filter is not None:
                need |= c.filter.input_refs()
        child, m = _prune(node.input, need or ({0} if node.input.types else set()))
        new_calls = [
            AggCall(
                c.kind,
                tuple(m[a] for a in c.args),
                c.return_type,
                c.distinct,
                remap_refs(c.filter, m) if c.filter is not None else None,
                tuple((m[o], ot) for o, ot in c.order_by),
                c.delimiter,
            )
            for c in calls
        ]
        fields = [node.schema.fields[i] for i in range(g)] + [node.schema.fields[g + i] for i in keep_calls]
        agg = Agg(Schema(tuple(fields)), child, [m[k] for k in node.group_key], new_calls)
        out = {i: i for i in range(g)}
        out.update({g + old: g + new_i for new_i, old in enumerate(keep_calls)})
        return agg, out
    if isinstance(node, OverWindow):
        return _prune_over_window(node, required)
    # nodes whose columns all pass through: prune nothing below them, keep their order
    kids = [_prune(i, set(range(len(i.types))))[0] for i in node.children()]
    return node.with_children(kids), {i: i for i in range(len(node.types))}


def _prune_over_window(node: OverWindow, required: set[int]) -> tuple[PlanNode, dict[int, int]]:
    """Drop the window calls nobody reads (the whole window if none is read) and the input columns
    neither the output nor the windows need."""
    n_in = len(node.input.types)
    keep_calls = [k for k in range(len(node.calls)) if n_in + k in required]
    if not keep_calls:
        return _prune(node.input, required)
    calls = [node.calls[k] for k in keep_calls]
    need = {i for i in required if i < n_in} | set(node.partition_by) | {c for c, _ in node.order_by}
    for c in calls:
        need |= set(c.args) | ({c.filter} if c.filter is not None else set())
        for e in window_frame_exprs(c):
            need |= e.input_refs()
    child, m = _prune(node.input, need)
    new_calls = [remap_window_call(c, m) for c in calls]
    fields = list(child.schema.fields) + [node.schema.fields[n_in + k] for k in keep_calls]
    ow = OverWindow(
        Schema(tuple(fields)),
        child,
        [m[p] for p in node.partition_by],
        [(m[c], o) for c, o in node.order_by],
        new_calls,
    )
    out = dict(m)
    out.update({n_in + k: len(child.types) + j for j, k in enumerate(keep_calls)})
    return ow, out


def window_frame_exprs(c: WindowCall) -> list[Expr]:
    f = c.frame
    if f is None:
        return []
    return [e for e in (f.key, f.start.value, f.end.value, f.gap) if e is not None]


def remap_window_call(c: WindowCall, m: dict[int, int]) -> WindowCall:
    frame = c.frame
    if frame is not None and frame.key is not None:
        frame = replace(
            frame,
            key=remap_refs(frame.key, m),
            start=_remap_bound(frame.start, m),
            end=_remap_bound(frame.end, m),
            gap=remap_refs(frame.gap, m) if frame.gap is not None else None,
        )
    return replace(
        c,
        args=tuple(m[a] for a in c.args),
        filter=m[c.filter] if c.filter is not None else None,
        frame=frame,
    )


def _remap_bound(b: FrameBound, m: dict[int, int]) -> FrameBound:
    return b if b.value is None else replace(b, value=remap_refs(b.value, m))


# ---------------------------------------------------------------------------------------------


def optimize(plan: PlanNode, *, streaming: bool) -> PlanNode:
    """The rewrites in order. Streaming plans turn ROW_NUMBER filters into group TopNs (batch
    computes window functions directly)."""
    plan = fold(plan)
    plan = push_down_predicates(plan)
    plan = merge_projects(plan)
    if streaming:
        plan = row_number_to_top_n(plan)
    plan = prune_columns(plan)
    plan = merge_projects(plan)
    plan = fold(plan)
    if streaming:
        from piestream.frontend.temporal_filter import rewrite_temporal_filters

        plan = rewrite_temporal_filters(plan)
        check_no_volatile(plan)
        check_scalar_subqueries(plan)
    return plan


def check_scalar_subqueries(plan: PlanNode) -> None:
    """A scalar subquery that returns two rows is an error (21000) in a query; an MV cannot
    raise it later, when a second row arrives. So in an MV the subquery must return at most one
    row by construction: 0A000 otherwise."""
    for n in plan.walk():
        if isinstance(n, Join) and n.scalar_subquery and not at_most_one_row(n.right):
            raise FeatureNotSupported(
                "a scalar subquery in a materialized view must return at most one row by construction "
                "(an aggregate without GROUP BY, or LIMIT 1)"
            )


def at_most_one_row(n: PlanNode) -> bool:
    if isinstance(n, Agg):
        return not n.group_key
    if isinstance(n, TopN):
        return not n.group_key and n.limit is not None and n.limit <= 1
    if isinstance(n, Values):
        return len(n.rows) <= 1
    if isinstance(n, Now):
        return True
    if isinstance(n, Project | Filter):
        return at_most_one_row(n.input)
    if isinstance(n, Join) and n.kind in (JoinKind.LEFT_SEMI, JoinKind.LEFT_ANTI):
        return at_most_one_row(n.left)
    return False


def check_no_volatile(plan: PlanNode) -> None:
    from piestream.expr.signatures import PER_ROW

    """now() / current_timestamp would be evaluated once per row as it streams by, so the view
    would not equal its query a moment later: 0A000. (A temporal filter's now() is gone by now:
    `temporal_filter` turned it into a `Now` input.)"""
    from dataclasses import fields, is_dataclass

    def exprs_of(v: Any) -> list[Expr]:
        if isinstance(v, Expr):
            return [v]
        if isinstance(v, list | tuple):
            return [e for x in v for e in exprs_of(x)]
        if isinstance(v, AggCall) and v.filter is not None:
            return [v.filter]
        return []

    # the view's select list (the projections at the top): there a MaterializedExprs node
    # evaluates random() / gen_random_uuid() once per row and stores the values
    top: set[int] = set()
    n = plan
    while isinstance(n, Project):
        top.add(id(n))
        n = n.input
    for n in plan.walk():
        for f in fields(n) if is_dataclass(n) else ():
            for e in exprs_of(getattr(n, f.name)):
                if any(_volatile_call(x) for x in e.walk()):
                    raise FeatureNotSupported(
                        "now() / current_timestamp is not supported in materialized views"
                    )
                per_row = [x.name for x in e.walk() if isinstance(x, FuncCall) and x.name in PER_ROW]
                if per_row and id(n) not in top:
                    raise FeatureNotSupported(
                        f"{per_row[0]}() is not supported in materialized views outside the select "
                        "list: a view must equal its query, and each evaluation gives new values",
                        hint="Generate the values in the view's select list, or when inserting into "
                        "the table.",
                    )


def _volatile_call(e: Expr) -> bool:
    from piestream.expr.signatures import VOLATILE

    return isinstance(e, FuncCall) and e.name in VOLATILE


def is_boolean(e: Expr) -> bool:
    return e.return_type.kind is TypeKind.BOOLEAN
