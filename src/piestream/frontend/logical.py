"""The logical plan: relational algebra over bound expressions (seed 003 "SQL and relational algebra").

The binder turns a query into a tree of these nodes; the optimizer rewrites the tree; the stream
planner turns it into stream operators with stream keys, the batch planner into batch executors.
Columns are positional: every expression's `InputRef` indexes its node's input (a join's
condition indexes left ++ right).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.tree import TreeNode
from piestream.common.types import DataType, Field
from piestream.expr.expr import Expr
from piestream.expr.window import WindowFunctionCall
from piestream.frontend.catalog import Relation


class JoinKind(enum.Enum):
    INNER = "inner"
    LEFT = "left outer"
    RIGHT = "right outer"
    FULL = "full outer"
    LEFT_SEMI = "left semi"
    LEFT_ANTI = "left anti"

    @property
    def keeps_left_only(self) -> bool:
        return self in (JoinKind.LEFT_SEMI, JoinKind.LEFT_ANTI)


@dataclass(eq=False)
class PlanNode(TreeNode):
    """A node of the logical plan; its inputs are its tree children (`child_fields`)."""

    schema: Schema

    @property
    def types(self) -> list[DataType]:
        return self.schema.types

    def explain(self) -> str:
        return type(self).__name__


@dataclass(eq=False)
class Scan(PlanNode):
    """Columns `column_indices` of a stored relation (table, MV, index)."""

    relation: Relation
    column_indices: list[int]
    #: ``FOR SYSTEM_TIME AS OF PROCTIME()``: the right side of a temporal (lookup) join
    as_of_proctime: bool = False

    def explain(self) -> str:
        cols = ", ".join(self.relation.columns[i].name for i in self.column_indices)
        as_of = ", as_of: proctime" if self.as_of_proctime else ""
        return f"Scan {{ table: {self.relation.name}, columns: [{cols}]{as_of} }}"


@dataclass(eq=False)
class Values(PlanNode):
    rows: list[list[Expr]]
    system_table: str | None = None  # rows of rw_catalog.<name> at bind time (batch reads only)

    def explain(self) -> str:
        return f"Values {{ rows: {len(self.rows)} }}"


@dataclass(eq=False)
class Now(PlanNode):
    """One row, one TIMESTAMPTZ column: ``now()`` of the current epoch (a temporal filter's
    right side; streaming plans only, see `frontend.temporal_filter`)."""


@dataclass(eq=False)
class Filter(PlanNode):
    child_fields = ("input",)

    input: PlanNode
    predicate: Expr

    def explain(self) -> str:
        return f"Filter {{ predicate: {self.predicate} }}"


@dataclass(eq=False)
class Project(PlanNode):
    child_fields = ("input",)

    input: PlanNode
    exprs: list[Expr]

    def explain(self) -> str:
        return f"Project {{ exprs: [{', '.join(str(e) for e in self.exprs)}] }}"


@dataclass(eq=False)
class ProjectSet(PlanNode):
    """A select list with set-returning functions (`TableFunction` items, zipped to the longest
    per input row); output = one column per item, then `projected_row_id` (BIGINT, the output
    row's index within its input row)."""

    child_fields = ("input",)

    input: PlanNode
    items: list[Expr]

    def explain(self) -> str:
        return f"ProjectSet {{ items: [{', '.join(str(e) for e in self.items)}] }}"


@dataclass(eq=False)
class Join(PlanNode):
    child_fields = ("left", "right")

    left: PlanNode
    right: PlanNode
    kind: JoinKind
    condition: Expr | None  # over left ++ right columns
    scalar_subquery: bool = False  # the right side is an uncorrelated scalar subquery (<= 1 row)

    def explain(self) -> str:
        return f"Join {{ type: {self.kind.value}, on: {self.condition} }}"


@dataclass(eq=False)
class AsOfJoin(PlanNode):
    """``left ASOF [LEFT] JOIN right ON l.k = r.k AND ... AND l.t <op> r.t``: each left row
    joins the one right row of its keys nearest by the inequality column (RisingWave's AsOf
    join). Output left ++ right. Its own node, not a `Join`: no rule may push a filter into
    either side or split its condition (filtering the right side changes which row is nearest).
    """

    child_fields = ("left", "right")

    left: PlanNode
    right: PlanNode
    outer: bool  # ASOF LEFT JOIN: unmatched left rows are NULL-padded
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]  # of the right input
    left_col: int  # the inequality's left column
    right_col: int  # ... and right column (of the right input)
    op: str  # `left_col <op> right_col`: one of < <= > >=

    def explain(self) -> str:
        nl = len(self.left.schema)
        eqs = [f"${lk} = ${nl + rk}" for lk, rk in zip(self.left_keys, self.right_keys, strict=True)]
        kind = "left outer" if self.outer else "inner"
        on = " AND ".join([*eqs, f"${self.left_col} {self.op} ${nl + self.right_col}"])
        return f"AsOfJoin {{ type: {kind}, on: {on} }}"


@dataclass(frozen=True)
class AggCall:
    """One aggregate of an `Agg` node (args index the Agg's input)."""

    kind: str  # count, count_star, sum, avg, min, max, string_agg, array_agg, bool_and, bool_or
    args: tuple[int, ...]
    return_type: DataType
    distinct: bool = False
    filter: Expr | None = None
    order_by: tuple[tuple[int, OrderType], ...] = ()
    delimiter: str | None = None  # string_agg's constant delimiter (then `args` is the value only)

    def __str__(self) -> str:
        d = "distinct " if self.distinct else ""
        args = ", ".join(f"${a}" for a in self.args) or "*"
        if self.delimiter is not None:
            args += f", {self.delimiter!r}"
        f = f" filter({self.filter})" if self.filter is not None else ""
        return f"{self.kind}({d}{args}){f}"


@dataclass(eq=False)
class Agg(PlanNode):
    """GROUP BY `group_key` computing `calls`; output = group columns then one column per call."""

    child_fields = ("input",)

    input: PlanNode
    group_key: list[int]
    calls: list[AggCall]

    def explain(self) -> str:
        keys = ", ".join(f"${g}" for g in self.group_key)
        return f"Agg {{ group_key: [{keys}], aggs: [{', '.join(str(c) for c in self.calls)}] }}"


@dataclass(eq=False)
class Expand(PlanNode):
    """GROUPING SETS' row copier (RisingWave's Expand): each input row once per grouping set
    `i`, with the `key_cols` not in `subsets[i]` set to NULL; output = input columns, then the
    set's index `flag` (BIGINT). An Agg grouped by (key columns, flag) above it computes every
    set at once, and retracts like any Agg."""

    child_fields = ("input",)

    input: PlanNode
    subsets: list[tuple[int, ...]]
    key_cols: tuple[int, ...]

    def explain(self) -> str:
        sets = ", ".join("[" + ", ".join(f"${c}" for c in s) + "]" for s in self.subsets)
        return f"Expand {{ column_subsets: [{sets}] }}"


@dataclass(eq=False)
class TopN(PlanNode):
    """ORDER BY ... LIMIT/OFFSET, per group (ROW_NUMBER() <= N) or over everything."""

    child_fields = ("input",)

    input: PlanNode
    order: list[tuple[int, OrderType]]
    limit: int | None
    offset: int = 0
    group_key: list[int] = field(default_factory=list)
    with_ties: bool = False

    def explain(self) -> str:
        order = ", ".join(f"${c} {o}" for c, o in self.order)
        group = f", group_key: [{', '.join(f'${g}' for g in self.group_key)}]" if self.group_key else ""
        return f"TopN {{ order: [{order}], limit: {self.limit}, offset: {self.offset}{group} }}"


@dataclass(eq=False)
class Sort(PlanNode):
    """ORDER BY without LIMIT (batch output order; an MV's pk order)."""

    child_fields = ("input",)

    input: PlanNode
    order: list[tuple[int, OrderType]]

    def explain(self) -> str:
        return f"Sort {{ order: [{', '.join(f'${c} {o}' for c, o in self.order)}] }}"


@dataclass(eq=False)
class Union(PlanNode):
    """UNION ALL of inputs with identical column types."""

    child_fields = ("union_inputs",)

    union_inputs: list[PlanNode]

    def explain(self) -> str:
        return "Union { all: true }"


@dataclass(eq=False)
class HopWindow(PlanNode):
    """Each row once per hopping window containing its time; output = input, window_start, window_end."""

    child_fields = ("input",)

    input: PlanNode
    time_col: int
    slide_usecs: int
    size_usecs: int
    offset_usecs: int = 0

    def explain(self) -> str:
        return (
            f"HopWindow {{ time_col: ${self.time_col}, slide: {self.slide_usecs}us, "
            f"size: {self.size_usecs}us }}"
        )


#: One window function of an OverWindow (its args index the OverWindow's input).
WindowCall = WindowFunctionCall


@dataclass(eq=False)
class OverWindow(PlanNode):
    """Window functions over partitions; output = input columns then one per call."""

    child_fields = ("input",)

    input: PlanNode
    partition_by: list[int]
    order_by: list[tuple[int, OrderType]]
    calls: list[WindowCall]

    def explain(self) -> str:
        return (
            f"OverWindow {{ calls: [{', '.join(str(c) for c in self.calls)}], "
            f"partition_by: [{', '.join(f'${p}' for p in self.partition_by)}], "
            f"order_by: [{', '.join(f'${c} {o}' for c, o in self.order_by)}] }}"
        )


def schema_of(names: Sequence[str], types: Sequence[DataType]) -> Schema:
    return Schema(tuple(Field(n, t) for n, t in zip(names, types, strict=True)))


def explain_tree(node: PlanNode, indent: int = 0) -> str:
    lines = ["  " * indent + node.explain()]
    lines += [explain_tree(i, indent + 1) for i in node.children()]
    return "\n".join(lines)
