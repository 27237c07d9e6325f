"""Watermarks as plan data: the WatermarkFilter node and how a column's watermark derives from it.

``WATERMARK FOR col AS expr`` on an append-only source or table puts a `WatermarkFilterNode`
right after the rows enter the job. Its watermark W is the largest ``expr`` over every row of
the committed epochs, the same for all actors (RisingWave's global max watermark), kept in a
singleton state table that commits with the epoch; in epoch e the filter drops rows whose
``col < W_e`` (late rows), so every row any downstream executor sees in epoch e or later has
``col >= W_e``.

Watermarks travel through the plan as *derivations*, not as messages: a column whose every
future value is bounded below by a monotonic function of W carries a `ColumnWatermark` (which
filter table, which steps). A stateful executor reads W from the filter's committed table at
its barrier (every actor of the epoch reads the same committed value), applies the steps and
cleans the state below the bound (the stream planner derives them, see
`piestream.frontend.watermark_derive`). The steps are monotonic non-decreasing maps of one
timestamp: add a fixed interval, floor to a slide (tumble / hop window starts).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from piestream.common.order import ASC
from piestream.common.scalar import Datum
from piestream.common.types import INT, DataType
from piestream.expr.expr import Expr
from piestream.plan.node import StreamNode, node_kind
from piestream.storage.table.desc import ColumnDesc, TableDesc

_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_AWARE = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def watermark_state_table(table_id: int, data_type: DataType, name: str = "watermark") -> TableDesc:
    """One row per filter actor (its index, the largest watermark it has seen), singleton: each
    actor writes only its own row, and the global watermark is the max over all rows."""
    return TableDesc(
        table_id,
        (ColumnDesc("actor", INT), ColumnDesc("watermark", data_type)),
        pk=(0,),
        pk_orders=(ASC,),
        name=name,
    )


@dataclass(frozen=True)
class WatermarkStep:
    """``add``: + `usecs`; ``floor``: down to a multiple of `usecs` after `offset_usecs`."""

    op: str
    usecs: int
    offset_usecs: int = 0

    def __post_init__(self) -> None:
        if self.op not in ("add", "floor"):
            raise ValueError(f"unknown watermark step {self.op!r}")
        if self.op == "floor" and self.usecs <= 0:
            raise ValueError("a floor step needs a positive width")

    def apply(self, v: dt.datetime) -> dt.datetime:
        if self.op == "add":
            return v + dt.timedelta(microseconds=self.usecs)
        base = _EPOCH_AWARE if v.tzinfo is not None else _EPOCH_NAIVE
        us = (v - base) // dt.timedelta(microseconds=1)
        floored = us - (us - self.offset_usecs) % self.usecs
        return base + dt.timedelta(microseconds=floored)

    def __str__(self) -> str:
        if self.op == "add":
            return f"{self.usecs:+d}us"
        return f"floor({self.usecs}us)"


@dataclass(frozen=True)
class WatermarkSource:
    """The watermark of one filter (its state table), mapped through `steps`."""

    table: TableDesc
    steps: tuple[WatermarkStep, ...] = ()

    def derive(self, w: Datum) -> Datum:
        if w is None:
            return None
        if not isinstance(w, dt.datetime):
            raise TypeError(f"watermark of {type(w).__name__}: only timestamps carry watermarks")
        for s in self.steps:
            w = s.apply(w)
        return w

    def then(self, *steps: WatermarkStep) -> WatermarkSource:
        return WatermarkSource(self.table, (*self.steps, *steps))


@dataclass(frozen=True)
class ColumnWatermark:
    """Every future value of a column is >= min over `sources` of their derived watermarks (a
    column built from two inputs, e.g. a join key, is bounded by the lower of the two)."""

    sources: tuple[WatermarkSource, ...]

    def bound(self, globals_: dict[int, Datum]) -> Datum:
        """The bound, given each filter table's global watermark; None while any is unknown."""
        values = [s.derive(globals_.get(s.table.table_id)) for s in self.sources]
        if not values or any(v is None for v in values):
            return None
        return min(values)

    def then(self, *steps: WatermarkStep) -> ColumnWatermark:
        return ColumnWatermark(tuple(s.then(*steps) for s in self.sources))

    def lower_with(self, other: ColumnWatermark) -> ColumnWatermark:
        return ColumnWatermark(tuple(dict.fromkeys((*self.sources, *other.sources))))

    def __str__(self) -> str:
        parts = []
        for s in self.sources:
            steps = "".join(f" {st}" for st in s.steps)
            parts.append(f"wm(table {s.table.table_id}){steps}")
        return " min ".join(parts)


@node_kind("WatermarkFilter")
@dataclass(frozen=True, kw_only=True)
class WatermarkFilterNode(StreamNode):
    """Drops rows whose `time_col` is below the committed global watermark; raises the watermark
    to the largest `expr` of the epoch's rows at the barrier. Output = input (append-only)."""

    child_fields = ("input",)

    input: StreamNode
    time_col: int
    expr: Expr
    state_table: TableDesc

    def tables(self) -> list[TableDesc]:
        return [self.state_table]

    def explain(self) -> str:
        return f"WatermarkFilter {{ column: ${self.time_col}, watermark: {self.expr} }}"
