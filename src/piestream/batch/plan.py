"""Batch plan nodes: plain, picklable descriptions of a SELECT's executors (DESIGN layer 6).

The frontend's batch planner builds a tree of these from its logical plan; `execute` runs it over
one snapshot. Columns are positional: an expression's `InputRef` indexes its node's input (a
join's condition indexes left ++ right). Every node has a `schema`; when the planner passes none
it is derived from the inputs (names included), and when it passes one its types must equal the
derived types, so a planner bug shows up at plan time, not as a wrongly typed Arrow column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from piestream.common.order import OrderType
from piestream.common.scalar import Datum
from piestream.common.schema import Schema
from piestream.common.tree import TreeNode
from piestream.common.types import BIGINT, TIMESTAMP, DataType, Field, TypeKind
from piestream.expr.expr import Expr, InputRef
from piestream.expr.window import KINDS, WindowFunctionCall
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.key_range import Bound

JOIN_KINDS: tuple[str, ...] = ("inner", "left", "right", "full", "left_semi", "left_anti")
OrderBy = tuple[tuple[int, OrderType], ...]

AGG_KINDS = frozenset(
    {
        "count",
        "count_star",
        "sum",
        "avg",
        "min",
        "max",
        "string_agg",
        "array_agg",
        "bool_and",
        "bool_or",
        "bit_and",
        "bit_or",
        "bit_xor",
        "stddev_pop",
        "stddev_samp",
        "var_pop",
        "var_samp",
    }
)
WINDOW_KINDS = KINDS

#: Marks "derive the schema" (compared by identity, so an explicit empty schema is still explicit).
_DERIVE = Schema(())


@dataclass(frozen=True, kw_only=True)
class BatchPlanNode(TreeNode):
    """One executor of a batch plan; its inputs are its tree children (`child_fields`)."""

    schema: Schema = field(default=_DERIVE)

    def __post_init__(self) -> None:
        self.validate()
        derived = self.derive_schema()
        if self.schema is _DERIVE:
            object.__setattr__(self, "schema", derived)
        elif self.schema.types != derived.types:
            raise ValueError(
                f"{type(self).__name__}: schema types {self.schema.types} differ from {derived.types}"
            )

    def validate(self) -> None:
        """Raise ValueError on arguments no executor can run."""

    def derive_schema(self) -> Schema:
        raise NotImplementedError(type(self).__name__)

    def explain(self) -> str:
        return type(self).__name__

    @property
    def types(self) -> list[DataType]:
        return self.schema.types


def explain_tree(node: BatchPlanNode, indent: int = 0) -> str:
    """EXPLAIN text: one line per node, children indented."""
    lines = ["  " * indent + node.explain()]
    lines += [explain_tree(i, indent + 1) for i in node.children()]
    return "\n".join(lines)


def _order_str(order: OrderBy) -> str:
    return "[" + ", ".join(f"${c} {o}" for c, o in order) + "]"


def _cols_str(cols: tuple[int, ...]) -> str:
    return "[" + ", ".join(f"${c}" for c in cols) + "]"


def _check_cols(node: str, cols: tuple[int, ...], width: int) -> None:
    if any(not 0 <= c < width for c in cols):
        raise ValueError(f"{node}: column index out of range in {cols} (input has {width} columns)")


# ---------------------------------------------------------------------------------------------
# Leaves
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchScan(BatchPlanNode):
    """Columns `output_indices` of a stored table at the query's epoch.

    `pk_prefix` fixes the first pk columns (matched by key equality, so a NULL matches NULL: the
    planner never pushes ``col = NULL``); `pk_range` bounds the next pk column(s), in the pk's
    own order (a DESC column's lower bound is its largest value). A prefix covering the
    distribution key reads one vnode; `point_get` (prefix = the whole pk) is one key lookup.
    `vnodes` = (start, end) restricts a scan to a vnode range, for splitting it across tasks.
    """

    table: TableDesc
    output_indices: tuple[int, ...]
    pk_prefix: tuple[Datum, ...] = ()
    pk_range: tuple[Bound | None, Bound | None] = (None, None)
    point_get: bool = False
    vnodes: tuple[int, int] | None = None

    def validate(self) -> None:
        _check_cols("BatchScan", self.output_indices, len(self.table.columns))
        npk = len(self.table.pk)
        if len(self.pk_prefix) > npk:
            raise ValueError("BatchScan: pk prefix longer than the pk")
        if self.point_get and (len(self.pk_prefix) != npk or self.pk_range != (None, None)):
            raise ValueError("BatchScan: a point get needs the whole pk as prefix and no range")
        for b in self.pk_range:
            if b is not None and len(self.pk_prefix) + len(b.values) > npk:
                raise ValueError("BatchScan: range bound longer than the rest of the pk")

    def derive_schema(self) -> Schema:
        cols = self.table.columns
        return Schema(tuple(Field(cols[i].name, cols[i].data_type) for i in self.output_indices))

    def explain(self) -> str:
        names = self.table.column_names
        out = f"BatchScan {{ table: {self.table.name or self.table.table_id}, columns: ["
        out += ", ".join(names[i] for i in self.output_indices) + "]"
        if self.point_get:
            out += f", point_get: {list(self.pk_prefix)}"
        elif self.pk_prefix:
            out += f", prefix: {list(self.pk_prefix)}"
        lo, hi = self.pk_range
        if lo is not None or hi is not None:
            lo_s = "-inf" if lo is None else ("[" if lo.inclusive else "(") + str(list(lo.values))
            hi_s = "+inf" if hi is None else str(list(hi.values)) + ("]" if hi.inclusive else ")")
            out += f", range: {lo_s}, {hi_s}"
        if self.vnodes is not None:
            out += f", vnodes: {self.vnodes[0]}..{self.vnodes[1]}"
        return out + " }"


@dataclass(frozen=True)
class BatchValues(BatchPlanNode):
    """Rows of constant expressions (``VALUES``, ``SELECT`` without FROM)."""

    rows: tuple[tuple[Expr, ...], ...]

    def validate(self) -> None:
        widths = {len(r) for r in self.rows}
        if len(widths) > 1:
            raise ValueError("BatchValues: rows of different widths")

    def derive_schema(self) -> Schema:
        if self.schema is not _DERIVE:  # the planner's types (each value is cast to them)
            return self.schema
        types = [e.return_type for e in self.rows[0]] if self.rows else []
        return Schema(tuple(Field(f"column{i + 1}", t) for i, t in enumerate(types)))

    def explain(self) -> str:
        return f"BatchValues {{ rows: {len(self.rows)} }}"


# ---------------------------------------------------------------------------------------------
# Row-wise
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchFilter(BatchPlanNode):
    """Rows where `predicate` is true (NULL counts as false)."""

    child_fields = ("input",)

    input: BatchPlanNode
    predicate: Expr

    def derive_schema(self) -> Schema:
        return self.input.schema

    def explain(self) -> str:
        return f"BatchFilter {{ predicate: {self.predicate} }}"


@dataclass(frozen=True)
class BatchProject(BatchPlanNode):
    child_fields = ("input",)

    input: BatchPlanNode
    exprs: tuple[Expr, ...]

    def derive_schema(self) -> Schema:
        names = self.input.schema.names
        fields = []
        for i, e in enumerate(self.exprs):
            name = names[e.index] if isinstance(e, InputRef) else f"expr{i}"
            fields.append(Field(name, e.return_type))
        return Schema(tuple(fields))

    def explain(self) -> str:
        return f"BatchProject {{ exprs: [{', '.join(str(e) for e in self.exprs)}] }}"


@dataclass(frozen=True)
class BatchProjectSet(BatchPlanNode):
    """Set-returning functions (`TableFunction` items) and scalar items per input row, zipped to
    the longest; output = one column per item, then projected_row_id (BIGINT)."""

    child_fields = ("input",)

    input: BatchPlanNode
    items: tuple[Expr, ...]

    def derive_schema(self) -> Schema:
        fields = [Field(f"expr{i}", e.return_type) for i, e in enumerate(self.items)]
        return Schema((*fields, Field("projected_row_id", BIGINT)))

    def explain(self) -> str:
        return f"BatchProjectSet {{ items: [{', '.join(str(e) for e in self.items)}] }}"


# ---------------------------------------------------------------------------------------------
# Joins
# ---------------------------------------------------------------------------------------------


def _join_schema(kind: str, left: BatchPlanNode, right: BatchPlanNode) -> Schema:
    if kind in ("left_semi", "left_anti"):
        return left.schema
    return left.schema.concat(right.schema)


@dataclass(frozen=True)
class BatchHashJoin(BatchPlanNode):
    """Equi-join on `left_keys` = `right_keys` (NULL keys match only where `null_safe`), then
    `condition` over left ++ right decides matching. Output: left ++ right (left only for
    semi / anti joins); outer joins NULL-pad the rows no pair matched."""

    child_fields = ("left", "right")

    left: BatchPlanNode
    right: BatchPlanNode
    kind: str  # one of JOIN_KINDS
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    null_safe: tuple[bool, ...] = ()  # () = no key is null-safe
    condition: Expr | None = None

    def validate(self) -> None:
        if self.kind not in JOIN_KINDS:
            raise ValueError(f"BatchHashJoin: unknown join kind {self.kind!r}")
        if len(self.left_keys) != len(self.right_keys) or not self.left_keys:
            raise ValueError("BatchHashJoin: needs equally many (>= 1) left and right keys")
        if self.null_safe and len(self.null_safe) != len(self.left_keys):
            raise ValueError("BatchHashJoin: null_safe must have one flag per key")
        _check_cols("BatchHashJoin", self.left_keys, len(self.left.schema))
        _check_cols("BatchHashJoin", self.right_keys, len(self.right.schema))

    @property
    def null_safe_flags(self) -> tuple[bool, ...]:
        return self.null_safe or (False,) * len(self.left_keys)

    def derive_schema(self) -> Schema:
        return _join_schema(self.kind, self.left, self.right)

    def explain(self) -> str:
        keys = ", ".join(
            f"${lk} {'IS NOT DISTINCT FROM' if ns else '='} ${rk + len(self.left.schema)}"
            for lk, rk, ns in zip(self.left_keys, self.right_keys, self.null_safe_flags, strict=True)
        )
        cond = f", condition: {self.condition}" if self.condition is not None else ""
        return f"BatchHashJoin {{ type: {self.kind}, keys: [{keys}]{cond} }}"


@dataclass(frozen=True)
class BatchAsOfJoin(BatchPlanNode):
    """``left ASOF [LEFT] JOIN right``: each left row with the right row of equal `left_keys` /
    `right_keys` nearest by ``left[left_col] <op> right[right_col]`` (none: dropped, or
    NULL-padded when `outer`). Output: left ++ right."""

    child_fields = ("left", "right")

    left: BatchPlanNode
    right: BatchPlanNode
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    left_col: int
    right_col: int
    op: str
    outer: bool = False

    def validate(self) -> None:
        if len(self.left_keys) != len(self.right_keys) or not self.left_keys:
            raise ValueError("BatchAsOfJoin: needs equally many (>= 1) left and right keys")
        _check_cols("BatchAsOfJoin", (*self.left_keys, self.left_col), len(self.left.schema))
        _check_cols("BatchAsOfJoin", (*self.right_keys, self.right_col), len(self.right.schema))

    def derive_schema(self) -> Schema:
        return self.left.schema.concat(self.right.schema)

    def explain(self) -> str:
        nl = len(self.left.schema)
        eqs = [f"${lk} = ${rk + nl}" for lk, rk in zip(self.left_keys, self.right_keys, strict=True)]
        eqs.append(f"${self.left_col} {self.op} ${self.right_col + nl}")
        kind = "left" if self.outer else "inner"
        return f"BatchAsOfJoin {{ type: {kind}, on: {' AND '.join(eqs)} }}"


@dataclass(frozen=True)
class BatchNestedLoopJoin(BatchPlanNode):
    """A join without equi keys: every pair is tested against `condition` (None = cross join)."""

    child_fields = ("left", "right")

    left: BatchPlanNode
    right: BatchPlanNode
    kind: str  # one of JOIN_KINDS
    condition: Expr | None = None

    def validate(self) -> None:
        if self.kind not in JOIN_KINDS:
            raise ValueError(f"BatchNestedLoopJoin: unknown join kind {self.kind!r}")

    def derive_schema(self) -> Schema:
        return _join_schema(self.kind, self.left, self.right)

    def explain(self) -> str:
        return f"BatchNestedLoopJoin {{ type: {self.kind}, condition: {self.condition} }}"


# ---------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchAggCall:
    """One aggregate: `args` index the input; `filter` is evaluated over the input rows;
    `order_by` orders the input of string_agg / array_agg."""

    kind: str
    args: tuple[int, ...]
    return_type: DataType
    distinct: bool = False
    filter: Expr | None = None
    order_by: OrderBy = ()
    delimiter: str | None = None  # string_agg's constant delimiter (then `args` is the value only)

    def __post_init__(self) -> None:
        if self.kind not in AGG_KINDS:
            raise ValueError(f"unknown aggregate {self.kind!r}")
        want = {"count_star": 0, "string_agg": 1 if self.delimiter is not None else 2}.get(self.kind, 1)
        if len(self.args) != want:
            raise ValueError(f"{self.kind} takes {want} argument(s), got {len(self.args)}")
        if self.kind in ("count", "count_star") and self.return_type.kind is not TypeKind.BIGINT:
            raise ValueError(f"{self.kind} returns bigint")

    def __str__(self) -> str:
        d = "distinct " if self.distinct else ""
        args = ", ".join(f"${a}" for a in self.args) or "*"
        order = f" order_by({_order_str(self.order_by)[1:-1]})" if self.order_by else ""
        f = f" filter({self.filter})" if self.filter is not None else ""
        return f"{self.kind}({d}{args}{order}){f}"


@dataclass(frozen=True)
class BatchHashAgg(BatchPlanNode):
    """GROUP BY `group_key`; output = group columns then one column per call. Without a group
    key there is exactly one output row, even for an empty input."""

    child_fields = ("input",)

    input: BatchPlanNode
    group_key: tuple[int, ...]
    calls: tuple[BatchAggCall, ...]

    def validate(self) -> None:
        width = len(self.input.schema)
        _check_cols("BatchHashAgg", self.group_key, width)
        for c in self.calls:
            _check_cols("BatchHashAgg", c.args, width)
            _check_cols("BatchHashAgg", tuple(col for col, _ in c.order_by), width)

    def derive_schema(self) -> Schema:
        keys = self.input.schema.project(self.group_key).fields
        return Schema(keys + tuple(Field(c.kind, c.return_type) for c in self.calls))

    def explain(self) -> str:
        calls = ", ".join(str(c) for c in self.calls)
        return f"BatchHashAgg {{ group_key: {_cols_str(self.group_key)}, aggs: [{calls}] }}"


# ---------------------------------------------------------------------------------------------
# Ordering
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchSort(BatchPlanNode):
    """ORDER BY (stable: rows with equal keys keep their input order)."""

    child_fields = ("input",)

    input: BatchPlanNode
    order: OrderBy

    def validate(self) -> None:
        _check_cols("BatchSort", tuple(c for c, _ in self.order), len(self.input.schema))

    def derive_schema(self) -> Schema:
        return self.input.schema

    def explain(self) -> str:
        return f"BatchSort {{ order: {_order_str(self.order)} }}"


@dataclass(frozen=True)
class BatchTopN(BatchPlanNode):
    """ORDER BY ... OFFSET `offset` LIMIT `limit`, over everything or per group of `group_key`.
    Ties are broken by input order (a stable sort), so the answer is deterministic for a given
    input; `with_ties` also keeps the rows that tie with the last one (FETCH ... WITH TIES)."""

    child_fields = ("input",)

    input: BatchPlanNode
    order: OrderBy
    limit: int | None
    offset: int = 0
    group_key: tuple[int, ...] = ()
    with_ties: bool = False

    def validate(self) -> None:
        width = len(self.input.schema)
        _check_cols("BatchTopN", tuple(c for c, _ in self.order), width)
        _check_cols("BatchTopN", self.group_key, width)
        if self.offset < 0 or (self.limit is not None and self.limit < 0):
            raise ValueError("BatchTopN: negative limit or offset")

    def derive_schema(self) -> Schema:
        return self.input.schema

    def explain(self) -> str:
        group = f", group_key: {_cols_str(self.group_key)}" if self.group_key else ""
        ties = ", with_ties: true" if self.with_ties else ""
        return (
            f"BatchTopN {{ order: {_order_str(self.order)}, limit: {self.limit}, "
            f"offset: {self.offset}{group}{ties} }}"
        )


@dataclass(frozen=True)
class BatchLimit(BatchPlanNode):
    """OFFSET / LIMIT without ORDER BY: the first rows in input order."""

    child_fields = ("input",)

    input: BatchPlanNode
    limit: int | None
    offset: int = 0

    def validate(self) -> None:
        if self.offset < 0 or (self.limit is not None and self.limit < 0):
            raise ValueError("BatchLimit: negative limit or offset")

    def derive_schema(self) -> Schema:
        return self.input.schema

    def explain(self) -> str:
        return f"BatchLimit {{ limit: {self.limit}, offset: {self.offset} }}"


# ---------------------------------------------------------------------------------------------
# Set operations, subqueries
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, init=False)
class BatchUnion(BatchPlanNode):
    """UNION ALL of inputs with identical column types (names from the first input).

    Built as ``BatchUnion(inputs)`` / ``BatchUnion(inputs=...)``; the field is `union_inputs`, as
    in the logical and the stream Union.
    """

    child_fields = ("union_inputs",)

    union_inputs: tuple[BatchPlanNode, ...]

    def __init__(
        self,
        inputs: Sequence[BatchPlanNode] = (),
        *,
        union_inputs: Sequence[BatchPlanNode] | None = None,
        schema: Schema = _DERIVE,
    ) -> None:
        object.__setattr__(self, "union_inputs", tuple(inputs if union_inputs is None else union_inputs))
        object.__setattr__(self, "schema", schema)
        self.__post_init__()

    def validate(self) -> None:
        if not self.union_inputs:
            raise ValueError("BatchUnion: no inputs")
        t0 = self.union_inputs[0].schema.types
        if any(i.schema.types != t0 for i in self.union_inputs[1:]):
            raise ValueError("BatchUnion: inputs have different column types")

    def derive_schema(self) -> Schema:
        return self.union_inputs[0].schema

    def explain(self) -> str:
        return "BatchUnion { all: true }"


@dataclass(frozen=True)
class BatchMaxOneRow(BatchPlanNode):
    """The input if it has at most one row, else error 21000 (a scalar subquery's guard). An
    empty input stays empty: the join above a scalar subquery supplies the NULL."""

    child_fields = ("input",)

    input: BatchPlanNode

    def derive_schema(self) -> Schema:
        return self.input.schema

    def explain(self) -> str:
        return "BatchMaxOneRow"


# ---------------------------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchHopWindow(BatchPlanNode):
    """Each row once per hopping window containing its time (NULL times belong to none);
    output = input columns, window_start, window_end (the time column's type)."""

    child_fields = ("input",)

    input: BatchPlanNode
    time_col: int
    slide_usecs: int
    size_usecs: int
    offset_usecs: int = 0

    def validate(self) -> None:
        _check_cols("BatchHopWindow", (self.time_col,), len(self.input.schema))
        if self.slide_usecs <= 0 or self.size_usecs <= 0:
            raise ValueError("BatchHopWindow: slide and size must be positive")
        if self.size_usecs % self.slide_usecs:
            raise ValueError("BatchHopWindow: size must be a multiple of the slide")

    def derive_schema(self) -> Schema:
        t = self.input.schema[self.time_col].data_type
        if t.kind is TypeKind.DATE:
            t = TIMESTAMP
        return self.input.schema.concat(Schema.of(("window_start", t), ("window_end", t)))

    def explain(self) -> str:
        return (
            f"BatchHopWindow {{ time_col: ${self.time_col}, slide: {self.slide_usecs}us, "
            f"size: {self.size_usecs}us, offset: {self.offset_usecs}us }}"
        )


@dataclass(frozen=True)
class BatchExpand(BatchPlanNode):
    """GROUPING SETS' row copier: each row once per set, the `key_cols` outside the set NULL,
    then the set's index (BIGINT flag); see `piestream.plan.expand`."""

    child_fields = ("input",)

    input: BatchPlanNode
    subsets: tuple[tuple[int, ...], ...]
    key_cols: tuple[int, ...]

    def validate(self) -> None:
        width = len(self.input.schema)
        _check_cols("BatchExpand", self.key_cols, width)
        for s in self.subsets:
            _check_cols("BatchExpand", s, width)

    def derive_schema(self) -> Schema:
        return self.input.schema.concat(Schema.of(("flag", BIGINT)))

    def explain(self) -> str:
        sets = ", ".join("[" + ", ".join(f"${c}" for c in s) + "]" for s in self.subsets)
        return f"BatchExpand {{ column_subsets: [{sets}] }}"


@dataclass(frozen=True)
class BatchOverWindow(BatchPlanNode):
    """Window functions (`piestream.expr.window`) per partition in `order_by` order; output =
    input columns then one column per call, rows in (partition, order) order."""

    child_fields = ("input",)

    input: BatchPlanNode
    partition_by: tuple[int, ...]
    order_by: OrderBy
    calls: tuple[WindowFunctionCall, ...]

    def validate(self) -> None:
        width = len(self.input.schema)
        _check_cols("BatchOverWindow", self.partition_by, width)
        _check_cols("BatchOverWindow", tuple(c for c, _ in self.order_by), width)
        for c in self.calls:
            if c.kind not in WINDOW_KINDS:
                raise ValueError(f"BatchOverWindow: unsupported window function {c.kind!r}")
            _check_cols("BatchOverWindow", c.args, width)

    def derive_schema(self) -> Schema:
        return self.input.schema.concat(Schema(tuple(Field(c.kind, c.return_type) for c in self.calls)))

    def explain(self) -> str:
        calls = ", ".join(str(c) for c in self.calls)
        return (
            f"BatchOverWindow {{ calls: [{calls}], partition_by: {_cols_str(self.partition_by)}, "
            f"order_by: {_order_str(self.order_by)} }}"
        )


__all__ = [
    "AGG_KINDS",
    "JOIN_KINDS",
    "WINDOW_KINDS",
    "BatchAggCall",
    "BatchExpand",
    "BatchFilter",
    "BatchHashAgg",
    "BatchHashJoin",
    "BatchHopWindow",
    "BatchLimit",
    "BatchMaxOneRow",
    "BatchNestedLoopJoin",
    "BatchOverWindow",
    "BatchPlanNode",
    "BatchProject",
    "BatchProjectSet",
    "BatchScan",
    "BatchSort",
    "BatchTopN",
    "BatchUnion",
    "BatchValues",
    "OrderBy",
    "explain_tree",
]
