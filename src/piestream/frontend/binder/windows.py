"""Binding window functions: ``f(...) OVER (PARTITION BY ... ORDER BY ... frame)``, named windows
(``WINDOW w AS (...)``, ``OVER w``, ``OVER (w ORDER BY ...)``), into OverWindow nodes.

While the select list binds, each window call becomes a placeholder; afterwards the calls are
grouped by (PARTITION BY, ORDER BY) and each group is one OverWindow over a projection holding
the partition, order and argument expressions. The function kinds and frames are
`piestream.expr.window`'s; PostgreSQL's rules and errors apply: a frame cannot start at
UNBOUNDED FOLLOWING (42P20), RANGE offsets need exactly one ORDER BY column (42P20) of a type with
an offset arithmetic, offsets must not be negative (22013), a referenced window's PARTITION BY and
ORDER BY cannot be overridden (42P20). Not supported (0A000): GROUPS frames, EXCLUDE, DISTINCT or
ORDER BY inside a window aggregate, and string_agg / array_agg / statistics as window functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.types import (
    BIGINT,
    DOUBLE,
    INTERVAL,
    NUMERIC,
    TIMESTAMP,
    DataType,
    Field,
    TypeKind,
    without_typmod,
)
from piestream.expr.bind import agg_signature, bind_call, coerce_to, common_type, fold_constants
from piestream.expr.expr import Expr, InputRef, Literal
from piestream.expr.window import (
    AGGREGATES,
    CURRENT_ROW,
    DEFAULT_FRAME,
    FOLLOWING,
    PRECEDING,
    UNBOUNDED_FOLLOWING,
    UNBOUNDED_PRECEDING,
    WHOLE_PARTITION,
    FrameBound,
    WindowFrame,
    WindowFunctionCall,
)
from piestream.frontend.binder.expr_binder import AGG_FUNCS, AGG_NAMES, ExprBinder, position
from piestream.frontend.binder.rewrite import replace_exprs
from piestream.frontend.binder.scope import Scope, ScopeColumn
from piestream.frontend.logical import OverWindow, Project

if TYPE_CHECKING:
    from piestream.frontend.binder.query import QueryBinder


class WindowingError(PiestreamError):
    sqlstate = "42P20"


@dataclass(frozen=True)
class WindowRef(Expr):
    """Placeholder for window call `slot` until its OverWindow exists."""

    slot: int
    return_type: Any

    def eval(self, chunk: Any) -> Any:
        raise PiestreamError("window reference left in a plan")


_NAMED_FUNCS: dict[type[exp.Expression], str] = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
    exp.Lag: "lag",
    exp.Lead: "lead",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
    exp.NthValue: "nth_value",
}
_ANON = {"row_number", "rank", "dense_rank", "lag", "lead", "first_value", "last_value", "nth_value"}


@dataclass
class _Spec:
    partition: list[exp.Expression]
    order: list[exp.Ordered]
    frame: exp.WindowSpec | None


@dataclass
class _Pending:
    kind: str
    args: list[Expr]  # bound over the query's scope
    filter: Expr | None
    offset: int
    spec: _Spec
    return_type: DataType
    node: exp.Expression


class WindowBinding:
    """The window calls of one SELECT level.

    In a grouped query (`on_agg` given) the windows run over the groups, after HAVING, as in
    PostgreSQL: their arguments, PARTITION BY and ORDER BY are bound with the aggregate hook
    before the Agg exists (`bind_definitions`), then rewritten onto its output (`rewrite`)."""

    def __init__(self, qb: QueryBinder, select: exp.Expression, on_agg: Any = None) -> None:
        self.qb = qb
        self.on_agg = on_agg
        self.definitions: dict[int, tuple[list[Expr], list[tuple[Expr, OrderType]]]] = {}
        self.named: dict[str, exp.Window] = {}
        for w in select.args.get("windows") or []:
            name = w.this.name if isinstance(w.this, exp.Expression) else str(w.this)
            if name in self.named:
                raise WindowingError(f'window "{name}" is already defined', position=position(w))
            self.named[name] = w
        self.pending: list[_Pending] = []

    # -- the expression binder's hook ----------------------------------------------------------------
    def hook(self, node: exp.Expression, eb: ExprBinder) -> Expr:
        assert isinstance(node, exp.Window)
        spec = self._spec(node, set())
        fn = node.this
        filt = None
        if isinstance(fn, exp.Filter):
            filt = fn.expression.this
            fn = fn.this
        kind = self._kind(fn, node)
        args_nodes = self._arg_nodes(fn, kind, node)
        ab = ExprBinder(
            self.qb.scope, on_agg=self.on_agg, params=self.qb.params, context="window function calls"
        )
        args = [ab.bind(a) for a in args_nodes]
        filter_expr = None
        if filt is not None:
            if kind not in AGGREGATES:
                raise FeatureNotSupported(
                    "FILTER is not implemented for non-aggregate window functions", position=position(node)
                )
            filter_expr = ab.bind(filt)
            if filter_expr.return_type.kind is not TypeKind.BOOLEAN:
                raise PiestreamError(
                    "argument of FILTER must be type boolean", sqlstate="42804", position=position(filt)
                )
        kind, args, offset, ret = self._typed(kind, args, node)
        self.pending.append(_Pending(kind, args, filter_expr, offset, spec, ret, node))
        return WindowRef(len(self.pending) - 1, ret)

    def _spec(self, node: exp.Window, seen: set[str]) -> _Spec:
        """The window's own clauses merged over the named window it references."""
        own = _Spec(
            list(node.args.get("partition_by") or []),
            list(node.args["order"].expressions) if node.args.get("order") is not None else [],
            node.args.get("spec"),
        )
        ref = node.args.get("alias")
        if ref is None:
            return own
        name = ref.name if isinstance(ref, exp.Expression) else str(ref)
        base_node = self.named.get(name)
        if base_node is None:
            raise PiestreamError(f'window "{name}" does not exist', sqlstate="42704", position=position(node))
        if name in seen:
            raise WindowingError(f'window "{name}" refers to itself', position=position(node))
        base = self._spec(base_node, seen | {name})
        if own.partition:
            raise WindowingError(
                f'cannot override PARTITION BY clause of window "{name}"', position=position(node)
            )
        if own.order and base.order:
            raise WindowingError(
                f'cannot override ORDER BY clause of window "{name}"', position=position(node)
            )
        if base.frame is not None and (own.order or own.frame is not None):
            raise WindowingError(
                f'cannot copy window "{name}" because it has a frame clause', position=position(node)
            )
        return _Spec(
            base.partition, own.order or base.order, own.frame if own.frame is not None else base.frame
        )

    def _kind(self, fn: exp.Expression, node: exp.Expression) -> str:
        if type(fn) in _NAMED_FUNCS:
            return _NAMED_FUNCS[type(fn)]
        if type(fn) in AGG_FUNCS:
            return AGG_FUNCS[type(fn)]
        if isinstance(fn, exp.Anonymous):
            name = str(fn.this).lower()
            if name in _ANON:
                return name
            if name in AGG_NAMES:
                return "bool_and" if name == "every" else name
        shown = fn.sql_name().lower() if isinstance(fn, exp.Func) else type(fn).__name__
        raise FeatureNotSupported(f"window function {shown} is not supported", position=position(node))

    def _arg_nodes(self, fn: exp.Expression, kind: str, node: exp.Expression) -> list[exp.Expression]:
        if isinstance(fn, exp.Anonymous):
            args = list(fn.expressions)
        elif isinstance(fn, exp.RowNumber | exp.Rank | exp.DenseRank):
            args = list(fn.args.get("expressions") or []) + ([fn.this] if fn.this is not None else [])
        else:
            args = [fn.this] if fn.this is not None else []
            for key in ("offset", "default"):
                if fn.args.get(key) is not None and key in fn.arg_types:
                    args.append(fn.args[key])
        if args and isinstance(args[0], exp.Order):
            raise FeatureNotSupported(
                "aggregate ORDER BY is not implemented for window functions", position=position(node)
            )
        if args and isinstance(args[0], exp.Distinct):
            raise FeatureNotSupported(
                "DISTINCT is not implemented for window functions", position=position(node)
            )
        if kind == "count" and (not args or isinstance(args[0], exp.Star)):
            return []
        return args

    def _typed(
        self, kind: str, args: list[Expr], node: exp.Expression
    ) -> tuple[str, list[Expr], int, DataType]:
        """(kind, coerced args, offset, return type), PostgreSQL's signatures."""
        pos = position(node)
        if kind in ("row_number", "rank", "dense_rank"):
            if args:
                raise PiestreamError(
                    f"function {kind}() takes no arguments as a window function",
                    sqlstate="42883",
                    position=pos,
                )
            return kind, [], 1, BIGINT
        if kind in ("lag", "lead"):
            if not 1 <= len(args) <= 3:
                raise PiestreamError(
                    f"function {kind} takes 1 to 3 arguments", sqlstate="42883", position=pos
                )
            offset = _const_int(args[1], f"the offset of {kind}", pos) if len(args) > 1 else 1
            if offset < 0:  # lag(x, -n) is lead(x, n)
                kind, offset = ("lead" if kind == "lag" else "lag"), -offset
            value = args[0]
            if len(args) == 3:
                t = common_type([value, args[2]], kind, position=pos)
                return kind, [coerce_to(value, t), coerce_to(args[2], t)], offset, t
            return kind, [value], offset, without_typmod(value.return_type, keep_scale=True)
        if kind in ("first_value", "last_value"):
            if len(args) != 1:
                raise PiestreamError(f"function {kind} takes 1 argument", sqlstate="42883", position=pos)
            return kind, args, 1, without_typmod(args[0].return_type, keep_scale=True)
        if kind == "nth_value":
            if len(args) != 2:
                raise PiestreamError("function nth_value takes 2 arguments", sqlstate="42883", position=pos)
            n = _const_int(args[1], "the position of nth_value", pos)
            if n <= 0:
                raise PiestreamError(
                    "argument of nth_value must be greater than zero", sqlstate="2201W", position=pos
                )
            return kind, [args[0]], n, without_typmod(args[0].return_type, keep_scale=True)
        if kind == "count" and not args:
            kind = "count_star"
        if kind not in AGGREGATES:
            raise FeatureNotSupported(f"{kind} as a window function is not supported", position=pos)
        ret, arg_types = agg_signature(kind, [a.return_type for a in args])
        return kind, [coerce_to(a, t) for a, t in zip(args, arg_types, strict=True)], 1, ret

    # -- planning ----------------------------------------------------------------------------------
    def bind_definitions(self) -> None:
        """Bind every pending call's PARTITION BY and ORDER BY over the current scope."""
        from piestream.frontend.binder.query import nulls_first_of

        qb = self.qb
        ob = ExprBinder(qb.scope, on_agg=self.on_agg, params=qb.params, context="window definitions")
        for slot, p in enumerate(self.pending):
            if slot in self.definitions:
                continue
            parts = [ob.bind(e) for e in p.spec.partition]
            orders = [
                (ob.bind(o.this), OrderType.of(bool(o.args.get("desc")), nulls_first_of(o)))
                for o in p.spec.order
            ]
            self.definitions[slot] = (parts, orders)

    def rewrite(self, fn: Callable[[Expr], Expr]) -> None:
        """Map every bound argument, filter and definition through `fn` (onto the Agg's output)."""
        self.bind_definitions()
        for p in self.pending:
            p.args = [fn(a) for a in p.args]
            p.filter = fn(p.filter) if p.filter is not None else None
        self.definitions = {
            slot: ([fn(e) for e in parts], [(fn(e), o) for e, o in orders])
            for slot, (parts, orders) in self.definitions.items()
        }

    def apply(self, exprs: list[Expr]) -> list[Expr]:
        """One OverWindow per (PARTITION BY, ORDER BY); the placeholders become its columns."""
        if not self.pending:
            return exprs
        qb = self.qb
        assert qb.plan is not None
        self.bind_definitions()
        groups: dict[tuple[Any, ...], list[int]] = {}
        for slot in range(len(self.pending)):
            parts, orders = self.definitions[slot]
            groups.setdefault((tuple(parts), tuple(orders)), []).append(slot)
        mapping: dict[Any, Expr] = {}
        for (parts_t, orders_t), slots in groups.items():
            parts, orders = list(parts_t), list(orders_t)
            base: list[Expr] = [InputRef(i, c.data_type) for i, c in enumerate(qb.scope.columns)]
            cols = _Columns(base)
            part_idx = [cols.add(e) for e in parts]
            order_idx = [(cols.add(e), o) for e, o in orders]
            calls = []
            for slot in slots:
                p = self.pending[slot]
                frame = self._frame(p, order_idx, cols.exprs)
                filt = cols.add(p.filter) if p.filter is not None else None
                arg_idx = tuple(cols.add(a) for a in p.args)
                calls.append(WindowFunctionCall(p.kind, p.return_type, arg_idx, frame, p.offset, filt))
            exprs_ = cols.exprs
            names = [c.name for c in qb.scope.columns] + [f"_w{i}" for i in range(len(exprs_) - len(base))]
            fields = tuple(Field(n, e.return_type) for n, e in zip(names, exprs_, strict=True))
            proj = Project(Schema(fields), qb.plan, exprs_)
            win_fields = [Field(f"_window{s}", self.pending[s].return_type) for s in slots]
            qb.plan = OverWindow(Schema((*proj.schema.fields, *win_fields)), proj, part_idx, order_idx, calls)
            extra = [
                ScopeColumn(None, n, e.return_type, True)
                for n, e in zip(names[len(base) :], exprs_[len(base) :], strict=True)
            ]
            win_cols = [ScopeColumn(None, f.name, f.data_type, True) for f in win_fields]
            first_win = len(exprs_)
            qb.scope = Scope.of([*qb.scope.columns, *extra, *win_cols], qb.scope.parent)
            for k, slot in enumerate(slots):
                mapping[WindowRef(slot, self.pending[slot].return_type)] = InputRef(
                    first_win + k, self.pending[slot].return_type
                )
        return [replace_exprs(e, mapping) for e in exprs]

    def _frame(
        self, p: _Pending, order_idx: list[tuple[int, OrderType]], cols: list[Expr]
    ) -> WindowFrame | None:
        if p.kind in ("row_number", "rank", "dense_rank", "lag", "lead"):
            return None
        spec = p.spec.frame
        if spec is None:
            return DEFAULT_FRAME if order_idx else WHOLE_PARTITION
        pos = position(p.node)
        mode = str(spec.args.get("kind") or "").lower()
        if mode == "groups":
            raise FeatureNotSupported("GROUPS frames are not supported", position=pos)
        if mode == "session":
            return _session_frame(spec.args["start"], order_idx, cols, pos)
        if mode not in ("rows", "range"):
            raise FeatureNotSupported(f"window frame {mode.upper()} is not supported", position=pos)
        start = _bound_parts(spec.args.get("start"), spec.args.get("start_side"))
        end = (
            _bound_parts(spec.args.get("end"), spec.args.get("end_side"))
            if spec.args.get("end")
            else (CURRENT_ROW, None)
        )
        _check_frame(start[0], end[0], pos)
        offsets = [b for b in (start, end) if b[0] in (PRECEDING, FOLLOWING)]
        if mode == "rows":
            bounds = [
                FrameBound(k, _rows_offset(e, which, pos) if e is not None else 0)
                for (k, e), which in ((start, "starting"), (end, "ending"))
            ]
            return WindowFrame("rows", bounds[0], bounds[1])
        if not offsets:
            return WindowFrame("range", FrameBound(start[0]), FrameBound(end[0]))
        if len(order_idx) != 1:
            raise WindowingError(
                "RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column", position=pos
            )
        key_col, order = order_idx[0]
        key_expr = cols[key_col]
        key, bounds_exprs = _range_bounds(key_expr, [b for b in (start, end)], order, pos)
        fb = [
            FrameBound(k) if v is None else FrameBound(k, 0, v)
            for (k, _), v in zip((start, end), bounds_exprs, strict=True)
        ]
        return WindowFrame("range", fb[0], fb[1], key, order)


def _session_frame(
    gap: exp.Expression, order_idx: list[tuple[int, OrderType]], cols: list[Expr], pos: int | None
) -> WindowFrame:
    """RisingWave's ``SESSION WITH GAP gap``: one ascending ORDER BY column; the gap has RANGE's
    offset type for it (an interval for timestamps, an integer for integers)."""
    if len(order_idx) != 1:
        raise WindowingError("SESSION frame requires exactly one ORDER BY column", position=pos)
    key_col, order = order_idx[0]
    if order.descending:
        raise FeatureNotSupported("SESSION frame with a descending ORDER BY is not supported", position=pos)
    key, (reach,) = _range_bounds(cols[key_col], [(FOLLOWING, gap)], order, pos)
    whole = WHOLE_PARTITION
    return WindowFrame("session", whole.start, whole.end, key, order, gap=reach)


class _Columns:
    """The OverWindow's input projection: the query's columns, then each distinct expression the
    windows read (partition, order, arguments, filters)."""

    def __init__(self, base: list[Expr]) -> None:
        self.exprs = list(base)

    def add(self, e: Expr) -> int:
        if e not in self.exprs:
            self.exprs.append(e)
        return self.exprs.index(e)


def _bound_parts(value: Any, side: Any) -> tuple[str, exp.Expression | None]:
    """(bound kind, offset expression) of sqlglot's (start, start_side)."""
    side_s = str(side or "").upper()
    if isinstance(value, str):
        v = value.upper()
        if v == "CURRENT ROW":
            return CURRENT_ROW, None
        if v == "UNBOUNDED":
            return (UNBOUNDED_PRECEDING if side_s == "PRECEDING" else UNBOUNDED_FOLLOWING), None
        raise FeatureNotSupported(f"window frame bound {value} is not supported")
    return (PRECEDING if side_s == "PRECEDING" else FOLLOWING), value


def _check_frame(start: str, end: str, pos: int | None) -> None:
    if start == UNBOUNDED_FOLLOWING:
        raise WindowingError("frame start cannot be UNBOUNDED FOLLOWING", position=pos)
    if end == UNBOUNDED_PRECEDING:
        raise WindowingError("frame end cannot be UNBOUNDED PRECEDING", position=pos)
    if start == CURRENT_ROW and end == PRECEDING:
        raise WindowingError("frame starting from current row cannot have preceding rows", position=pos)
    if start == FOLLOWING and end in (PRECEDING, CURRENT_ROW):
        raise WindowingError("frame starting from following row cannot have preceding rows", position=pos)


def _const(node: exp.Expression, construct: str, pos: int | None) -> Literal:
    """A frame offset (`construct`: ROWS or RANGE), which PostgreSQL evaluates once per query."""
    what = f"argument of {construct}"
    if node.find(exp.Column) is not None:
        raise PiestreamError(f"{what} must not contain variables", sqlstate="42P10", position=pos)
    e = fold_constants(ExprBinder(Scope(), context=what).bind(node))
    if not isinstance(e, Literal):
        raise FeatureNotSupported(f"{what} must be a constant", position=pos)
    return e


def _const_int(e: Expr, what: str, pos: int | None) -> int:
    f = fold_constants(e)
    if not isinstance(f, Literal) or not (f.return_type.is_integer or f.value is None):
        raise FeatureNotSupported(f"{what} must be a constant integer", position=pos)
    if f.value is None:
        raise FeatureNotSupported(f"{what} must not be NULL", position=pos)
    return int(f.value)


def _rows_offset(node: exp.Expression, which: str, pos: int | None) -> int:
    lit = _const(node, "ROWS", pos)
    if lit.value is None or not lit.return_type.is_integer:
        raise PiestreamError("argument of ROWS must be type bigint", sqlstate="42804", position=pos)
    v = int(lit.value)
    if v < 0:
        raise PiestreamError(f"frame {which} offset must not be negative", sqlstate="22013", position=pos)
    return v


def _offset_type(key: DataType) -> tuple[DataType, DataType] | None:
    """(the key's type for the comparison, the offset's type), PostgreSQL's in_range support."""
    k = key.kind
    if k in (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT):
        return BIGINT, BIGINT
    if k is TypeKind.NUMERIC:
        return NUMERIC, NUMERIC
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        return DOUBLE, DOUBLE
    if k in (TypeKind.DATE, TypeKind.TIMESTAMP):
        return TIMESTAMP, INTERVAL
    if k in (TypeKind.TIMESTAMPTZ, TypeKind.TIME, TypeKind.INTERVAL):
        return key, INTERVAL
    return None


def _range_bounds(
    key_expr: Expr, bounds: list[tuple[str, exp.Expression | None]], order: OrderType, pos: int | None
) -> tuple[Expr, list[Expr | None]]:
    """The ORDER BY value in the comparison type and each offset bound's value expression."""
    types = _offset_type(key_expr.return_type)
    if types is None:
        raise FeatureNotSupported(
            f"RANGE with offset PRECEDING/FOLLOWING is not supported for column type {key_expr.return_type}",
            position=pos,
        )
    key_t, off_t = types
    key = coerce_to(key_expr, key_t) if key_expr.return_type != key_t else key_expr
    out: list[Expr | None] = []
    for kind, node in bounds:
        if node is None:
            out.append(None)
            continue
        lit = _const(node, "RANGE", pos)
        try:
            off = coerce_to(lit, off_t)
        except PiestreamError:
            raise PiestreamError(
                f"RANGE with offset PRECEDING/FOLLOWING is not supported for column type "
                f"{key_expr.return_type} and offset type {lit.return_type}",
                sqlstate="42883" if off_t.kind is not TypeKind.INTERVAL else "0A000",
                position=pos,
            ) from None
        value = fold_constants(off)
        if isinstance(value, Literal) and _negative(value):
            raise PiestreamError(
                "invalid preceding or following size in window function", sqlstate="22013", position=pos
            )
        subtract = (kind == PRECEDING) != order.descending
        out.append(bind_call("-" if subtract else "+", [key, off]))
    return key, out


def _negative(v: Literal) -> bool:
    x = v.value
    if x is None:
        return False
    if hasattr(x, "months"):
        return bool(x.months < 0 or x.days < 0 or x.usecs < 0)
    return bool(x < 0)
