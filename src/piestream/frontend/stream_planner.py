"""From a logical plan to stream operators (seed 003: classic operators -> stream operators).

Planning is bottom-up. Every piece of the result tracks its stream key and its distribution; a
node that needs its input partitioned differently (an aggregation by its group key, a join by its
join keys, a materialize by its stream key, a singleton for a simple aggregation) gets an
exchange marker below it, where the fragmenter later cuts the fragments.

Column positions stay those of the logical plan: hidden columns a piece needs for its stream key
(reference §7: a projection that drops key columns keeps them hidden) come after the logical
ones, and nodes that append columns (windows, joins) are followed by a reordering projection.
"""

from __future__ import annotations

from collections.abc import Callable

from piestream.common.errors import FeatureNotSupported
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, INT, SERIAL, TIMESTAMPTZ, Field
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.expr.signatures import PER_ROW
from piestream.frontend.asof_join import plan_asof_join
from piestream.frontend.binder.rewrite import remap_refs
from piestream.frontend.catalog import Relation, RelationKind, WatermarkInfo
from piestream.frontend.dynamic_filter_rule import DynamicFilterMatch, match_dynamic_filter
from piestream.frontend.emit_on_window_close import (
    check_over_window_order,
    emits_final_rows,
    eowc_sort_column,
    eowc_window_column,
)
from piestream.frontend.logical import (
    Agg,
    AsOfJoin,
    Expand,
    Filter,
    HopWindow,
    Join,
    Now,
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
from piestream.frontend.share import consumers_exchange, repeated_aggs, same_plan
from piestream.frontend.source_spec import relation_proctime, source_spec
from piestream.frontend.stream_join import plan_join
from piestream.frontend.stream_piece import (
    ANY,
    SINGLE,
    Dist,
    Piece,
    PlannerBase,
    and_exprs,
    keep_stream_key,
    refs,
    upstreams,
)
from piestream.frontend.watermark_derive import Watermarks, hop_window_watermarks
from piestream.plan.agg_call import AggCall as StreamAggCall
from piestream.plan.backfill import BackfillNode, backfill_state_table
from piestream.plan.dedup import build_dedup
from piestream.plan.dynamic_filter import build_dynamic_filter
from piestream.plan.eowc_sort import build_eowc_sort
from piestream.plan.expand import ExpandNode
from piestream.plan.filter import FilterNode
from piestream.plan.general_over_window import build_general_over_window
from piestream.plan.hash_agg import hash_agg_node
from piestream.plan.hop_window import HopWindowNode
from piestream.plan.materialized_exprs import build_materialized_exprs
from piestream.plan.node import ExchangeNode, StreamNode
from piestream.plan.now import NowNode, now_state_table
from piestream.plan.project import ProjectNode
from piestream.plan.project_set import build_project_set
from piestream.plan.row_id_gen import RowIdGenNode
from piestream.plan.top_n import build_top_n
from piestream.plan.union import UnionNode
from piestream.plan.values import ValuesNode, values_state_table
from piestream.plan.watermark import (
    ColumnWatermark,
    WatermarkFilterNode,
    WatermarkSource,
    watermark_state_table,
)
from piestream.stream.connector import plan_source_node


class StreamPlanner(PlannerBase):
    """Plans one streaming job's logical plan into a tree of stream nodes."""

    def __init__(self, next_table_id: Callable[[], int], *, emit_on_window_close: bool = False) -> None:
        super().__init__(next_table_id)
        #: EMIT ON WINDOW CLOSE: every aggregation an EOWC HashAgg (`frontend.emit_on_window_close`)
        self.eowc = emit_on_window_close
        self._repeated: list[PlanNode] = []  # logical subtrees to plan once (`frontend.share`)
        self._planned: list[tuple[PlanNode, Piece]] = []

    # -- planning -------------------------------------------------------------------------------
    def plan_job(self, root: PlanNode) -> Piece:
        """A whole job's plan, each repeated aggregation planned once and shared; if some reader
        of a shared subtree would read it without an exchange, the job is planned again without
        sharing (every reader its own copy, as written)."""
        self._repeated = repeated_aggs(root)
        piece = self.plan(root)
        if self._repeated and not consumers_exchange(piece.node, self.shared):
            self._repeated, self._planned = [], []
            self.shared = set()
            piece = self.plan(root)
        if self.eowc and not emits_final_rows(piece.node):
            piece = self.eowc_sort(piece, eowc_sort_column(piece.watermarks, piece.width))
        return piece

    def eowc_sort(self, p: Piece, col: int) -> Piece:
        """An EowcSort over `p` by its watermarked column `col` (hash-distributed by the stream
        key where `p` has no distribution, which is what a materialized view above wants)."""
        if p.dist.kind not in ("hash", "single"):
            p = self.require(p, Dist("hash", tuple(p.stream_key)) if p.stream_key else SINGLE)
        keys = p.dist.keys if p.dist.kind == "hash" else ()
        node = build_eowc_sort(p.node, col, p.watermarks[col], keys, table_id=self.next_table_id())
        return Piece(node, p.dist, p.width, p.non_null, p.watermarks)

    def plan(self, node: PlanNode) -> Piece:
        rep = next((r for r in self._repeated if same_plan(r, node)), None)
        if rep is not None:
            done = next((p for r, p in self._planned if r is rep), None)
            if done is not None:
                return done
        method = getattr(self, f"_plan_{type(node).__name__.lower()}", None)
        if method is None:
            raise FeatureNotSupported(f"{type(node).__name__} is not supported in materialized views")
        piece: Piece = method(node)
        if rep is not None:
            self._planned.append((rep, piece))
            self.shared.add(id(piece.node))
        return piece

    def _plan_scan(self, node: Scan) -> Piece:
        rel: Relation = node.relation
        if rel.kind is RelationKind.SOURCE:
            return self._plan_source(node)
        desc = rel.table
        frag = rel.fragment_id
        if desc is None or frag is None:
            raise FeatureNotSupported(f'cannot stream from "{rel.name}"')
        cols = list(node.column_indices)
        for k in desc.pk:  # the stream key must be read too (hidden if not selected)
            if k not in cols:
                cols.append(k)
        upstream = ExchangeNode(
            schema=Schema(tuple(Field(c.name, c.data_type) for c in desc.columns)),
            stream_key=desc.pk,
            append_only=rel.append_only,
            upstream_fragment_id=frag,
        )
        schema = Schema(tuple(Field(desc.columns[i].name, desc.columns[i].data_type) for i in cols))
        key = tuple(cols.index(k) for k in desc.pk)
        scan = BackfillNode(
            schema=schema,
            stream_key=key,
            append_only=rel.append_only,
            input=upstream,
            upstream=desc,
            output_indices=tuple(cols),
            state_table=backfill_state_table(self.next_table_id()),
        )
        dist = Dist("hash", tuple(cols.index(k) for k in desc.dist_key)) if desc.dist_key else SINGLE
        if rel.parallelism == 1:
            dist = SINGLE  # e.g. a TopN's MV: keyed by k, but all of it in one actor
        # a table's primary key (or row id) is never NULL; an MV's key may be
        non_null = frozenset(key) if rel.kind is RelationKind.TABLE else frozenset()
        return Piece(scan, dist, len(node.column_indices), non_null)

    def _plan_source(self, node: Scan) -> Piece:
        """A SOURCE read by a streaming job: a `SourceNode` leaf of its own (own splits and
        offsets), then RowIdGen for the hidden `_row_id` stream key (reference §7)."""
        rel: Relation = node.relation
        if not rel.columns:  # a shared CDC source: its tables read it, each its own upstream table
            raise FeatureNotSupported(
                f'source "{rel.name}" has no columns: a CDC source feeds tables, '
                f"CREATE TABLE t (...) FROM {rel.name} TABLE 'schema.t'"
            )
        cols = list(node.column_indices) or [0]  # read one column even for count(*)
        wm = rel.watermark
        if wm is not None:  # late rows are dropped whatever the query reads: read what the filter needs
            cols += sorted(({wm.column} | wm.expr.input_refs()) - set(cols))
        fields = [Field(rel.columns[i].name, rel.columns[i].data_type) for i in cols]
        schema = Schema((*fields, Field("_row_id", SERIAL)))
        key = (len(cols),)
        # AS PROCTIME() columns: not the connector's; a Project right above computes them
        proctime = relation_proctime(rel)
        read = [i for i in cols if rel.columns[i].name not in proctime]
        if not read:  # only proctime columns read: the connector still yields the rows
            read = [next(i for i, c in enumerate(rel.columns) if c.name not in proctime)]
        read_schema = Schema(
            (*(Field(rel.columns[i].name, rel.columns[i].data_type) for i in read), Field("_row_id", SERIAL))
        )
        read_key = (len(read),)
        src = plan_source_node(
            source_spec(rel, read),
            schema=read_schema,
            stream_key=read_key,
            state_table_id=self.next_table_id(),
            dead_letter=rel.source.dead_letter if rel.source else None,
        )
        top: StreamNode = RowIdGenNode(
            schema=read_schema, stream_key=read_key, append_only=True, input=src, row_id_index=read_key[0]
        )
        if read != cols:
            at = {c: j for j, c in enumerate(read)}
            exprs: list[Expr] = [
                InputRef(at[i], rel.columns[i].data_type)
                if i in at
                else FuncCall("proctime", (), TIMESTAMPTZ)
                for i in cols
            ]
            exprs.append(InputRef(read_key[0], SERIAL))
            top = ProjectNode(schema=schema, stream_key=key, append_only=True, input=top, exprs=tuple(exprs))
        watermarks: Watermarks = {}
        if wm is not None:
            pos = {c: i for i, c in enumerate(cols)}
            local = WatermarkInfo(pos[wm.column], remap_refs(wm.expr, pos))
            f = watermark_filter_node(top, local, self.next_table_id(), rel.name)
            watermarks[local.column] = ColumnWatermark((WatermarkSource(f.state_table),))
            top = f
        return Piece(top, Dist("hash", key), len(node.column_indices), frozenset(key), watermarks)

    def _plan_values(self, node: Values) -> Piece:
        from piestream.expr.bind import fold_constants

        if node.system_table is not None:
            raise FeatureNotSupported(
                f"a streaming job cannot read the system relation rw_catalog.{node.system_table}"
            )

        rows = []
        for i, r in enumerate(node.rows):
            vals = []
            for e in r:
                f = fold_constants(e)
                if not isinstance(f, Literal):
                    raise FeatureNotSupported("VALUES in a materialized view must be constants")
                vals.append(f.value)
            rows.append((*vals, i))
        schema = Schema((*node.schema.fields, Field("_row_index", BIGINT)))
        width = len(node.schema)
        v = ValuesNode(
            schema=schema,
            stream_key=(width,),
            append_only=True,
            rows=tuple(rows),
            state_table=values_state_table(self.next_table_id()),
        )
        return Piece(v, SINGLE, width, frozenset([width]))

    def _plan_now(self, node: Now) -> Piece:
        """A temporal filter's bound: one row, in one actor (broadcast by the DynamicFilter)."""
        n = NowNode(schema=node.schema, stream_key=(), state_table=now_state_table(self.next_table_id()))
        return Piece(n, SINGLE, 1, frozenset([0]))

    def _plan_filter(self, node: Filter) -> Piece:
        p = self.plan(node.input)
        f = FilterNode(
            schema=p.schema,
            stream_key=p.stream_key,
            append_only=p.node.append_only,
            input=p.node,
            predicate=node.predicate,
        )
        return Piece(f, p.dist, p.width, p.non_null, p.watermarks)

    def _plan_project(self, node: Project) -> Piece:
        needed = set().union(*(e.input_refs() for e in node.exprs))
        m = match_dynamic_filter(node.input, needed) if isinstance(node.input, Filter) else None
        p = self._plan_dynamic_filter(m) if m is not None else self.plan(node.input)
        p, exprs = self._materialize_impure(p, list(node.exprs))
        return self.project(p, exprs, node.schema.names, len(node.exprs))

    def _materialize_impure(self, p: Piece, exprs: list[Expr]) -> tuple[Piece, list[Expr]]:
        """Select-list items calling random() / gen_random_uuid() are evaluated once per row by a
        MaterializedExprs node below the projection, which then reads the stored values (the
        optimizer allows them only in an MV's top projections: `check_no_volatile`)."""
        impure = [
            i
            for i, e in enumerate(exprs)
            if any(isinstance(x, FuncCall) and x.name in PER_ROW for x in e.walk())
        ]
        if not impure:
            return p, exprs
        sk = p.stream_key
        if not sk:
            raise FeatureNotSupported(
                f"{exprs[impure[0]]} in a materialized view needs an input with a stream key"
            )
        # the state table's distribution key must lie inside its pk (the stream key)
        if p.dist.kind == "single":
            dist_key: tuple[int, ...] = ()
        elif p.dist.kind == "hash" and set(p.dist.keys) <= set(sk):
            dist_key = p.dist.keys
        else:
            p = self.shuffle(p, Dist("hash", sk))
            dist_key = sk
        node = build_materialized_exprs(
            p.node, [exprs[i] for i in impure], dist_key, table_id=self.next_table_id()
        )
        width = len(p.schema)
        out = list(exprs)
        for j, i in enumerate(impure):
            out[i] = InputRef(width + j, exprs[i].return_type)
        return Piece(node, p.dist, p.width, p.non_null, p.watermarks), out

    def _plan_projectset(self, node: ProjectSet) -> Piece:
        """Items, then the input's stream-key columns (hidden, where no item passes them), then
        the projected row id: the stream key is input key ++ projected row id (reference §7)."""
        p = self.plan(node.input)
        items = list(node.items)
        names = list(node.schema.names[: len(items)])
        pos, key_items = keep_stream_key(p, items, names)
        ps = build_project_set(p.node, items, names, key_items)
        non_null = frozenset([len(items)]) | {pos[c] for c in p.non_null if c in pos}
        piece = Piece(ps, p.dist.mapped(pos), len(node.items) + 1, non_null)
        # logical order: the items, the projected row id, then the hidden key columns
        return self.reorder(piece, [*range(len(node.items)), len(items)])

    def _plan_dynamic_filter(self, m: DynamicFilterMatch) -> Piece:
        """Left rows stay where they are; the one-row subquery is broadcast to every actor."""
        lp = self.plan(m.join.left)
        nl = len(m.join.left.schema)
        if isinstance(m.left_expr, InputRef):
            key = m.left_expr.index
        else:  # the compared value becomes a hidden column the state table is ordered by
            key = len(lp.schema)
            lp = self.project(lp, [*refs(lp.schema), m.left_expr], [*lp.schema.names, "_dyn_key"], lp.width)
        # the left state table's distribution key must lie inside its pk (key, stream key)
        sk = lp.stream_key
        if lp.dist.kind == "single":
            dist_key: tuple[int, ...] = ()
        elif lp.dist.kind == "hash" and set(lp.dist.keys) <= {key, *sk}:
            dist_key = lp.dist.keys
        elif sk:
            lp = self.shuffle(lp, Dist("hash", sk))
            dist_key = sk
        else:
            lp = self.require(lp, SINGLE)
            dist_key = ()
        rp = self.plan(m.join.right)
        rhs = remap_refs(m.right_expr, {nl: 0})
        rp = self.project(rp, [rhs], ["_rhs"], 1)
        if lp.dist.kind == "single":
            rp = self.require(rp, SINGLE)
            if upstreams(lp.node) & upstreams(rp.node):
                rp = self.shuffle(rp, SINGLE)
        else:
            rp = self.shuffle(rp, Dist("broadcast"))
        df = build_dynamic_filter(
            lp.node,
            rp.node,
            key_col=key,
            comparator=m.comparator,
            left_table_id=self.next_table_id(),
            right_table_id=self.next_table_id(),
            left_dist_key=dist_key,
            # `temporal_filter` allows only now() ± constant: the bound never falls
            rhs_non_decreasing=isinstance(m.join.right, Now),
        )
        piece = Piece(df, lp.dist, nl, lp.non_null)
        if not m.rest:
            return piece
        f = FilterNode(
            schema=df.schema,
            stream_key=df.stream_key,
            append_only=False,
            input=df,
            predicate=and_exprs(list(m.rest)),  # type: ignore[arg-type]
        )
        return Piece(f, lp.dist, nl, lp.non_null)

    def _plan_sort(self, node: Sort) -> Piece:
        return self.plan(node.input)  # order inside a streaming query has no effect

    def _plan_agg(self, node: Agg) -> Piece:
        p = self.plan(node.input)
        g = list(node.group_key)
        # a watermarked group key goes first, so every state table's pk starts with it and the
        # watermark cleans them by Hummock table watermarks; a Project restores the order above
        eowc = self.eowc and not (not any(k in p.watermarks for k in g) and emits_final_rows(p.node))
        if eowc:
            closing = eowc_window_column(g, p.watermarks)
            first = g.index(closing)
        else:
            first = next((j for j, k in enumerate(g) if k in p.watermarks), 0)
        perm = [first] + [j for j in range(len(g)) if j != first] if g else []
        g = [g[j] for j in perm]
        p = self.require(p, Dist("hash", tuple(g)) if g else SINGLE)
        if g and not node.calls and p.node.append_only and not eowc:
            # DISTINCT / GROUP BY without aggregates over an append-only input: the first row of
            # a key stays the answer forever, so keep only the keys (no row counts), and the
            # output stays append-only for the operators above (reference §6.5)
            wm0 = p.watermarks.get(g[0])
            d = build_dedup(p.node, g, table_id=self.next_table_id(), name="dedup", watermark=wm0)
            keys = [InputRef(i, p.schema[i].data_type) for i in node.group_key]
            # its output rows are input rows: their columns keep their watermarks
            piece = Piece(d, p.dist, p.width, p.non_null, p.watermarks)
            return self.project(piece, keys, node.schema.names, len(g))
        in_types = p.schema.types
        calls = [
            StreamAggCall.create(
                c.kind,
                c.args,
                in_types,
                distinct=c.distinct,
                filter=c.filter,
                order_by=c.order_by,
                delimiter=c.delimiter,
            )
            for c in node.calls
        ]
        names = [node.schema.names[j] for j in perm] + node.schema.names[len(g) :]
        wm = p.watermarks.get(g[0]) if g else None
        n = hash_agg_node(
            p.node,
            g,
            calls,
            self.next_table_id,
            output_names=names,
            watermark=wm,
            emit_on_window_close=eowc,
        )
        # a single-actor input stays single (it needed no shuffle): claiming hash(g) would let a
        # join put this fragment of one actor next to a parallel one
        single = not g or p.dist.kind == "single"
        non_null = frozenset(i for i, k in enumerate(g) if k in p.non_null)
        wms = {i: p.watermarks[k] for i, k in enumerate(g) if k in p.watermarks}
        dist = SINGLE if single else Dist("hash", tuple(range(len(g))))
        piece = Piece(n, dist, len(node.schema), non_null, wms)
        if perm == list(range(len(g))):
            return piece
        at = {j: i for i, j in enumerate(perm)}  # logical group column -> agg output position
        order = [at[j] for j in range(len(g))] + list(range(len(g), len(n.schema)))
        exprs: list[Expr] = [InputRef(i, n.schema[i].data_type) for i in order]
        return self.project(piece, exprs, node.schema.names, len(node.schema))

    def _plan_topn(self, node: TopN) -> Piece:
        if node.limit is None:
            raise FeatureNotSupported("OFFSET without LIMIT is not supported in materialized views")
        p = self.plan(node.input)
        g = list(node.group_key)
        p = self.require(p, Dist("hash", tuple(g)) if g else SINGLE)
        n = build_top_n(
            p.node,
            group_key=g,
            order_by=node.order,
            limit=node.limit,
            offset=node.offset,
            with_ties=node.with_ties,
            table_id=self.next_table_id(),
        )
        return Piece(n, p.dist, p.width, p.non_null)

    def _plan_expand(self, node: Expand) -> Piece:
        p = self.plan(node.input)
        w = len(p.schema)
        nulled = set(node.key_cols)
        keep = [k for k in p.stream_key if k in nulled]  # key columns the copies may NULL
        copy_at = {k: w + 1 + i for i, k in enumerate(keep)}
        fields = [
            *p.schema.fields,
            Field("flag", BIGINT),
            *(Field(f"_{p.schema[k].name}", p.schema[k].data_type) for k in keep),
        ]
        expand = ExpandNode(
            schema=Schema(tuple(fields)),
            stream_key=(*(copy_at.get(k, k) for k in p.stream_key), w),
            append_only=p.node.append_only,
            input=p.node,
            subsets=tuple(tuple(s) for s in node.subsets),
            key_cols=tuple(node.key_cols),
            keep=tuple(keep),
        )
        dist = p.dist.mapped({i: i for i in range(w) if i not in nulled})
        non_null = frozenset(c for c in p.non_null if c not in nulled) | {w}
        piece = Piece(expand, dist, len(fields), non_null)
        # logical order: input's logical columns, flag, then hidden
        return self.reorder(piece, [*range(p.width), w])

    def _plan_hopwindow(self, node: HopWindow) -> Piece:
        p = self.plan(node.input)
        w = len(p.schema)
        t = p.schema[node.time_col].data_type
        schema = Schema((*p.schema.fields, Field("window_start", t), Field("window_end", t)))
        hop = HopWindowNode(
            schema=schema,
            stream_key=(*p.stream_key, w),
            append_only=p.node.append_only,
            input=p.node,
            time_col=node.time_col,
            slide_usecs=node.slide_usecs,
            size_usecs=node.size_usecs,
            offset_usecs=node.offset_usecs,
        )
        wms = dict(p.watermarks)
        time_wm = wms.get(node.time_col)
        if time_wm is not None:
            wms[w], wms[w + 1] = hop_window_watermarks(
                time_wm, node.slide_usecs, node.size_usecs, node.offset_usecs
            )
        piece = Piece(hop, p.dist, w + 2, p.non_null, wms)
        # logical order: input's logical columns, window_start, window_end, then hidden
        return self.reorder(piece, [*range(p.width), w, w + 1])

    def _plan_overwindow(self, node: OverWindow) -> Piece:
        p = self.plan(node.input)
        g = list(node.partition_by)
        p = self.require(p, Dist("hash", tuple(g)) if g else SINGLE)
        if self.eowc:  # RisingWave's EOWC over-window: computed over the final rows, in order
            p = self.eowc_sort(p, check_over_window_order(node.order_by, p.watermarks))
        elif any(c.frame is not None and c.frame.mode == "session" for c in node.calls):
            raise FeatureNotSupported(
                "Session frame is not yet supported in general streaming mode. "
                "Please consider using Emit-On-Window-Close mode."
            )
        w = len(p.schema)
        n_in = len(node.input.schema)
        ow = build_general_over_window(
            p.node,
            partition_by=g,
            order_by=node.order_by,
            calls=node.calls,
            names=node.schema.names[n_in:],
            table_id=self.next_table_id(),
        )
        piece = Piece(ow, p.dist, w + len(node.calls), p.non_null)
        # logical order: input's logical columns, the window values, then hidden
        return self.reorder(piece, [*range(p.width), *range(w, w + len(node.calls))])

    def _plan_asofjoin(self, node: AsOfJoin) -> Piece:
        return plan_asof_join(self, node)

    def _plan_join(self, node: Join) -> Piece:
        return plan_join(self, node)

    def _plan_union(self, node: Union) -> Piece:
        pieces = [self.plan(i) for i in node.union_inputs]
        width = len(node.schema)
        # merged key section: every branch's stream key columns, NULL in the other branches' rows,
        # and the branch index, so rows of different branches never share a key (reference §7)
        key_types = [[p.schema[k].data_type for k in p.stream_key] for p in pieces]
        total = sum(len(k) for k in key_types)
        branches = []
        offset = 0
        for b, p in enumerate(pieces):
            # the Union's (common) types: a typmod differing between branches is -1 (select_common_typmod)
            exprs: list[Expr] = [InputRef(i, node.schema[i].data_type) for i in range(width)]
            slot = 0
            for bb, kts in enumerate(key_types):
                for j, t in enumerate(kts):
                    if bb == b:
                        exprs.append(InputRef(p.stream_key[j], t))
                    else:
                        exprs.append(Literal(None, t))
                    slot += 1
            exprs.append(Literal(b, INT))
            names = [*node.schema.names, *[f"_union_key{i}" for i in range(total)], "_union_branch"]
            schema = Schema(tuple(Field(n, e.return_type) for n, e in zip(names, exprs, strict=True)))
            key = tuple(range(width, width + total + 1))
            proj = ProjectNode(
                schema=schema,
                stream_key=key,
                append_only=p.node.append_only,
                input=p.node,
                exprs=tuple(exprs),
            )
            branches.append(self.require(Piece(proj, ANY, width, frozenset([key[-1]])), Dist("hash", key)))
            offset += len(key_types[b])
        first = branches[0].node
        union = UnionNode(
            schema=first.schema,
            stream_key=first.stream_key,
            append_only=all(b.node.append_only for b in branches),
            union_inputs=tuple(b.node for b in branches),
        )
        return Piece(union, Dist("hash", first.stream_key), width, frozenset([len(first.schema) - 1]))


def watermark_filter_node(
    input: StreamNode, wm: WatermarkInfo, table_id: int, name: str
) -> WatermarkFilterNode:
    """The WatermarkFilter right after a source's or table's rows enter a job."""
    t = input.schema[wm.column].data_type
    return WatermarkFilterNode(
        schema=input.schema,
        stream_key=input.stream_key,
        append_only=True,
        input=input,
        time_col=wm.column,
        expr=wm.expr,
        state_table=watermark_state_table(table_id, t, f"{name}_watermark"),
    )
