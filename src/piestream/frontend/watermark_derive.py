"""Watermark derivation: which columns of a planned piece carry a watermark (plan/watermark).

A column carries a `ColumnWatermark` when every value any future row can bring is at least a
monotonic function of a WatermarkFilter's watermark. The stream planner tracks them per piece
(`Piece.watermarks`) the way RisingWave's ``watermark_columns`` are derived:

- the filtered time column itself (bound: W);
- passthrough columns (Filter, exchanges, Project's ``InputRef``);
- monotonic Project expressions of one watermarked column: ``col ± interval`` (no months),
  ``tumble_start(col, size[, offset])``, ``date_trunc`` to a fixed-width unit;
- HopWindow's window_start / window_end of a watermarked time column;
- HashAgg group keys that carry one;
- equi-join keys whose both sides carry one (bounded by the lower of the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from piestream.common.errors import DatatypeMismatch, FeatureNotSupported, UndefinedColumn
from piestream.common.interval import Interval
from piestream.common.types import TIMESTAMP, TIMESTAMPTZ, DataType
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.frontend.catalog import WatermarkInfo
from piestream.plan.watermark import ColumnWatermark, WatermarkStep

Watermarks = dict[int, ColumnWatermark]

_US = {"microseconds": 1, "milliseconds": 1_000, "second": 1_000_000, "minute": 60_000_000}
_US |= {"hour": 3_600_000_000, "day": 86_400_000_000}

#: types whose watermarks piestream keeps
WATERMARK_TYPES = (TIMESTAMP, TIMESTAMPTZ)


def fixed_usecs(e: Expr, t: DataType) -> int | None:
    """A literal interval's width in microseconds, if it is fixed for values of type `t`
    (months never are; days only for TIMESTAMP, where a day is always 24 hours)."""
    if not isinstance(e, Literal) or not isinstance(e.value, Interval):
        return None
    iv = e.value
    if iv.months or (iv.days and t != TIMESTAMP):
        return None
    return iv.days * _US["day"] + iv.usecs


def derive_expr(e: Expr, wms: Watermarks) -> ColumnWatermark | None:
    """The watermark of expression `e` over columns with watermarks `wms`, if it has one."""
    if isinstance(e, InputRef):
        return wms.get(e.index)
    if not isinstance(e, FuncCall) or e.return_type not in WATERMARK_TYPES:
        return None
    t = e.return_type
    args = e.args
    if e.name in ("add", "subtract") and len(args) == 2:
        a, b = args
        if e.name == "add" and isinstance(a, Literal):
            a, b = b, a
        us = fixed_usecs(b, t)
        inner = derive_expr(a, wms)
        if us is None or inner is None:
            return None
        return inner.then(WatermarkStep("add", us if e.name == "add" else -us))
    if e.name == "tumble_start" and len(args) in (2, 3):
        size = fixed_usecs(args[1], t)
        offset = fixed_usecs(args[2], t) if len(args) == 3 else 0
        inner = derive_expr(args[0], wms)
        if not size or size <= 0 or offset is None or inner is None:
            return None
        return inner.then(WatermarkStep("floor", size, offset))
    if e.name == "date_trunc" and len(args) == 2 and isinstance(args[0], Literal):
        unit = str(args[0].value).lower()
        width = _US.get(unit)
        if width is None or (unit == "day" and t != TIMESTAMP):
            return None
        inner = derive_expr(args[1], wms)
        return None if inner is None else inner.then(WatermarkStep("floor", width))
    return None


def derive_project(exprs: list[Expr], wms: Watermarks) -> Watermarks:
    out: Watermarks = {}
    if not wms:
        return out
    for i, e in enumerate(exprs):
        w = derive_expr(e, wms)
        if w is not None:
            out[i] = w
    return out


def hop_window_watermarks(
    wm: ColumnWatermark, slide: int, size: int, offset: int
) -> tuple[ColumnWatermark, ...]:
    """(window_start, window_end) bounds: a row at t >= W lies in windows starting at
    ``tumble_start(t - (size - slide), slide)`` or later (the HopWindow executor's formula)."""
    start = wm.then(WatermarkStep("add", -(size - slide)), WatermarkStep("floor", slide, offset))
    return start, start.then(WatermarkStep("add", size))


# -- DDL ------------------------------------------------------------------------------------------


def bind_watermark(
    watermarks: Sequence[Any], columns: Sequence[tuple[str, DataType]], *, append_only: bool, what: str
) -> WatermarkInfo | None:
    """``WATERMARK FOR col AS expr`` of a CREATE SOURCE / TABLE, bound over its columns, or the
    PostgreSQL-style error saying why piestream refuses it (RisingWave's rules: one watermark,
    an append-only relation, the expression of the column's own type)."""
    from piestream.frontend.binder.expr_binder import ExprBinder
    from piestream.frontend.binder.scope import Scope, ScopeColumn

    if not watermarks:
        return None
    if len(watermarks) > 1:
        raise FeatureNotSupported(f"{what} may define only one WATERMARK")
    if not append_only:
        raise FeatureNotSupported(
            f"WATERMARK needs an append-only {what}",
            hint="Declare the table APPEND ONLY (a watermark drops late rows, which an updatable "
            "table cannot do), or use a source.",
        )
    wm = watermarks[0]
    names = [n for n, _ in columns]
    if wm.column not in names:
        raise UndefinedColumn(f'column "{wm.column}" named in WATERMARK does not exist')
    col = names.index(wm.column)
    t = columns[col][1]
    if t not in WATERMARK_TYPES:
        raise DatatypeMismatch(
            f'WATERMARK column "{wm.column}" is of type {t}; it must be a timestamp or timestamptz'
        )
    scope = Scope.of([ScopeColumn(None, n, ct) for n, ct in columns])
    expr = ExprBinder(scope, context="WATERMARK").bind(wm.expr)
    if expr.return_type != t:
        raise DatatypeMismatch(
            f"WATERMARK expression is of type {expr.return_type}; it must be {t} like its column"
        )
    return WatermarkInfo(col, expr)
