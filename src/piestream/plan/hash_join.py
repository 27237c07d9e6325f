"""HashJoin plan node and its planner helpers (reference §6.2 state tables, §7 stream key).

The executor lives in `piestream.stream.executors.join`: it keeps each input's rows in a
state table keyed by join key | input stream key, and, for the sides whose rows are emitted on
their own (outer padding, semi, anti), a degree table counting each row's matches on the other
side. Everything lives in state tables, so an actor rebuilt from storage each epoch joins on.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from piestream.common.schema import Schema
from piestream.common.types import DataType
from piestream.expr.expr import Expr
from piestream.plan.node import StreamNode, node_kind
from piestream.plan.watermark import ColumnWatermark, WatermarkStep
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.schemas import join_degree_table, join_table


class SideKind(enum.Enum):
    """How one side's rows appear in the output apart from joined rows."""

    PLAIN = "plain"  # only inside joined rows (or not at all, for the probe side of semi/anti)
    OUTER = "outer"  # NULL-padded while it has no match
    SEMI = "semi"  # emitted while it has at least one match
    ANTI = "anti"  # emitted while it has no match

    @property
    def needs_degree(self) -> bool:
        """Degrees (match counts) drive this side's own emission (reference §6.2)."""
        return self is not SideKind.PLAIN


class JoinType(enum.Enum):
    INNER = "inner"
    LEFT_OUTER = "left_outer"
    RIGHT_OUTER = "right_outer"
    FULL_OUTER = "full_outer"
    LEFT_SEMI = "left_semi"
    LEFT_ANTI = "left_anti"
    RIGHT_SEMI = "right_semi"
    RIGHT_ANTI = "right_anti"

    @property
    def emits_joined_rows(self) -> bool:
        """Inner and outer joins output left ++ right rows; semi/anti output one side only."""
        return self in (JoinType.INNER, JoinType.LEFT_OUTER, JoinType.RIGHT_OUTER, JoinType.FULL_OUTER)

    def side_kind(self, side: int) -> SideKind:
        """The kind of side 0 (left) or 1 (right)."""
        return _SIDE_KINDS[self][side]

    @property
    def output_side(self) -> int | None:
        """For semi/anti the one side whose columns are output (0 / 1); None: left ++ right."""
        if self in (JoinType.LEFT_SEMI, JoinType.LEFT_ANTI):
            return 0
        if self in (JoinType.RIGHT_SEMI, JoinType.RIGHT_ANTI):
            return 1
        return None


_P, _O, _S, _A = SideKind.PLAIN, SideKind.OUTER, SideKind.SEMI, SideKind.ANTI
_SIDE_KINDS: dict[JoinType, tuple[SideKind, SideKind]] = {
    JoinType.INNER: (_P, _P),
    JoinType.LEFT_OUTER: (_O, _P),
    JoinType.RIGHT_OUTER: (_P, _O),
    JoinType.FULL_OUTER: (_O, _O),
    JoinType.LEFT_SEMI: (_S, _P),
    JoinType.LEFT_ANTI: (_A, _P),
    JoinType.RIGHT_SEMI: (_P, _S),
    JoinType.RIGHT_ANTI: (_P, _A),
}


@dataclass(frozen=True)
class IntervalBand:
    """An interval join's time band, derived from the ON condition (RisingWave's interval join):
    ``right.t - left.t`` lies in [`lower_usecs`, `upper_usecs`] for every matching pair (None:
    unbounded that way), between two watermarked time columns. The band stays in the join's
    residual condition (it decides matches); it only tells which rows can never match again.

    A left row is dead once no future right row can reach it: future right times are >= W_r, a
    match needs ``right.t <= left.t + upper``, so left rows with ``left.t < W_r - upper`` are
    cleaned (`clean_left`); symmetrically right rows with ``right.t < W_l + lower``
    (`clean_right`). An input that is not append-only is cleaned only below its own watermark
    too (a row below it is never retracted), so a retraction always finds its row.
    Cleaning is silent: a cleaned row's output (joined or NULL-padded) stays as it was."""

    left_col: int  # the left input's time column
    right_col: int  # the right input's time column (an index into the right input)
    lower_usecs: int | None
    upper_usecs: int | None
    clean_left: ColumnWatermark | None  # left rows whose time is below this bound are dead
    clean_right: ColumnWatermark | None


def interval_band(
    left_col: int,
    right_col: int,
    lower_usecs: int | None,
    upper_usecs: int | None,
    *,
    left_wm: ColumnWatermark,
    right_wm: ColumnWatermark,
    left_append_only: bool,
    right_append_only: bool,
) -> IntervalBand:
    """The band with its cleaning bounds (see `IntervalBand`) from the two time columns'
    watermarks."""
    clean_left = clean_right = None
    if upper_usecs is not None:
        clean_left = right_wm.then(WatermarkStep("add", -upper_usecs))
        if not left_append_only:
            clean_left = clean_left.lower_with(left_wm)
    if lower_usecs is not None:
        clean_right = left_wm.then(WatermarkStep("add", lower_usecs))
        if not right_append_only:
            clean_right = clean_right.lower_with(right_wm)
    return IntervalBand(left_col, right_col, lower_usecs, upper_usecs, clean_left, clean_right)


@node_kind("HashJoin")
@dataclass(frozen=True, kw_only=True)
class HashJoinNode(StreamNode):
    """An equi-join of two inputs (port 0 = left, 1 = right), output = `output_indices` of the
    internal row (left ++ right columns; for semi/anti only that side's columns). `condition` is
    the residual (non-equi) predicate over left ++ right; a pair matches only if it holds."""

    child_fields = ("left", "right")

    left: StreamNode
    right: StreamNode
    join_type: JoinType
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    null_safe: tuple[bool, ...]  # per key: IS NOT DISTINCT FROM (NULL matches NULL)
    condition: Expr | None
    output_indices: tuple[int, ...]
    left_table: TableDesc
    right_table: TableDesc
    left_degree_table: TableDesc
    right_degree_table: TableDesc
    #: the watermark of join key 0 on both sides (the lower of the two; plan format 3): rows
    #: below it never match nor change again, so all four tables are cleaned by it (Hummock
    #: table watermarks on their first pk column, join key 0)
    watermark: ColumnWatermark | None = field(default=None, metadata={"since_format": 3})
    #: an interval join's band: each side's rows below the other side's watermark minus the
    #: band are deleted at the barrier (added in format 4; left out of the document while None)
    interval: IntervalBand | None = field(default=None, metadata={"since_format": 4})

    def __post_init__(self) -> None:
        if self.watermark is not None and any(t.watermark_col != t.pk[0] for t in self.tables()):
            raise ValueError("a watermarked HashJoin needs every state table cleaned by join key 0")

    def tables(self) -> list[TableDesc]:
        """All four tables, as RisingWave's catalog declares them; the executor only opens the
        degree tables it needs (`uses_degree_table`)."""
        return [self.left_table, self.right_table, self.left_degree_table, self.right_degree_table]

    def uses_degree_table(self, side: int) -> bool:
        """A side keeps degrees in its table if its kind needs them and the other side may hold
        several rows per join key; otherwise the degree (0 or 1) is recomputed from that one row."""
        other = self.right if side == 0 else self.left
        other_keys = self.right_keys if side == 0 else self.left_keys
        return self.join_type.side_kind(side).needs_degree and not set(other.stream_key) <= set(other_keys)

    def explain(self) -> str:
        ln = len(self.left.schema)
        eqs = [
            f"${lk} {'IS NOT DISTINCT FROM' if ns else '='} ${ln + rk}"
            for lk, rk, ns in zip(self.left_keys, self.right_keys, self.null_safe, strict=True)
        ]
        if self.condition is not None:
            eqs.append(str(self.condition))
        pred = " AND ".join(eqs) or "true"
        out = ", ".join(f"${i}" for i in self.output_indices)
        wm = "" if self.watermark is None else f", cleaned_by: ${self.left_keys[0]} >= {self.watermark}"
        if self.interval is not None:
            band = self.interval
            rt = f"${ln + band.right_col}"
            lo = "" if band.lower_usecs is None else f"{band.lower_usecs:+d}us"
            hi = "" if band.upper_usecs is None else f"{band.upper_usecs:+d}us"
            wm += f", interval: {rt} - ${band.left_col} in [{lo or '-inf'}, {hi or '+inf'}]"
            if band.clean_left is not None:
                wm += f", clean_left: ${band.left_col} < {band.clean_left}"
            if band.clean_right is not None:
                wm += f", clean_right: {rt} < {band.clean_right}"
        name = "IntervalJoin" if self.interval is not None else "HashJoin"
        return f"{name} {{ type: {self.join_type.value}, predicate: {pred}, output: [{out}]{wm} }}"


# -- planner helpers ------------------------------------------------------------------------------


def internal_schema(left: Schema, right: Schema, join_type: JoinType) -> Schema:
    """The columns `output_indices` index: left ++ right, or one side for semi/anti."""
    side = join_type.output_side
    if side is None:
        return left.concat(right)
    return left if side == 0 else right


def join_stream_key_internal(
    left_stream_key: Sequence[int],
    right_stream_key: Sequence[int],
    left_len: int,
    join_type: JoinType,
    left_keys: Sequence[int],
    right_keys: Sequence[int],
) -> list[int]:
    """The output stream key over the internal columns (reference §7): left key ++ right key,
    plus the join-key columns of the side(s) the join type names (which keeps the join's
    distribution key inside the MV pk). Semi/anti: that side's key and join key."""
    side = join_type.output_side
    if side == 0:
        cols = [*left_stream_key, *left_keys]
    elif side == 1:
        cols = [*right_stream_key, *right_keys]
    else:
        cols = [*left_stream_key, *(left_len + c for c in right_stream_key)]
        if join_type in (JoinType.INNER, JoinType.LEFT_OUTER, JoinType.FULL_OUTER):
            cols += left_keys
        if join_type in (JoinType.RIGHT_OUTER, JoinType.FULL_OUTER):
            cols += [left_len + c for c in right_keys]
    return list(dict.fromkeys(cols))


def map_stream_key(internal_key: Sequence[int], output_indices: Sequence[int]) -> tuple[int, ...]:
    """Internal stream-key columns as output positions; each must be output (the planner adds
    missing ones as hidden columns, as for Project)."""
    missing = [c for c in internal_key if c not in output_indices]
    if missing:
        raise ValueError(f"join output must keep the stream-key columns {missing} (internal indices)")
    return tuple(list(output_indices).index(c) for c in internal_key)


def join_state_tables(
    left_schema: Schema,
    left_stream_key: Sequence[int],
    right_schema: Schema,
    right_stream_key: Sequence[int],
    left_keys: Sequence[int],
    right_keys: Sequence[int],
    next_table_id: Callable[[], int],
) -> tuple[TableDesc, TableDesc, TableDesc, TableDesc]:
    """(left state, right state, left degree, right degree) in reference §6.2's layouts."""
    lt = join_table(next_table_id(), _columns(left_schema), left_keys, left_stream_key, name="HashJoinLeft")
    rt = join_table(
        next_table_id(), _columns(right_schema), right_keys, right_stream_key, name="HashJoinRight"
    )
    ld = join_degree_table(next_table_id(), lt, name="HashJoinDegreeLeft")
    rd = join_degree_table(next_table_id(), rt, name="HashJoinDegreeRight")
    return lt, rt, ld, rd


def build_hash_join(
    left: StreamNode,
    right: StreamNode,
    join_type: JoinType,
    left_keys: Sequence[int],
    right_keys: Sequence[int],
    *,
    next_table_id: Callable[[], int],
    condition: Expr | None = None,
    null_safe: Sequence[bool] | None = None,
    output_indices: Sequence[int] | None = None,
    watermark: ColumnWatermark | None = None,
    interval: IntervalBand | None = None,
) -> HashJoinNode:
    """The planner's entry point: a HashJoinNode with its schema, stream key, append-only
    property and state tables derived from the inputs (`left.schema`, `left.stream_key`, ...).
    `output_indices` default to every internal column."""
    if len(left_keys) != len(right_keys):
        raise ValueError("left and right join keys differ in number")
    for lk, rk in zip(left_keys, right_keys, strict=True):
        lt, rt = left.schema[lk].data_type, right.schema[rk].data_type
        if lt != rt:
            raise ValueError(f"join key types differ: {lt} vs {rt} (the planner casts them to one type)")
    ns = tuple(null_safe) if null_safe is not None else (False,) * len(left_keys)
    if len(ns) != len(left_keys):
        raise ValueError("null_safe needs one flag per join key")
    internal = internal_schema(left.schema, right.schema, join_type)
    out = tuple(output_indices) if output_indices is not None else tuple(range(len(internal)))
    if any(not 0 <= i < len(internal) for i in out):
        raise ValueError("output index out of range")
    key = join_stream_key_internal(
        left.stream_key, right.stream_key, len(left.schema), join_type, left_keys, right_keys
    )
    tables = join_state_tables(
        left.schema, left.stream_key, right.schema, right.stream_key, left_keys, right_keys, next_table_id
    )
    if watermark is not None:  # every table's pk starts with join key 0
        if not left_keys:
            raise ValueError("a join without equi keys has no key to clean by")
        tables = tuple(replace(t, watermark_col=t.pk[0]) for t in tables)  # type: ignore[assignment]
    return HashJoinNode(
        watermark=watermark,
        interval=interval,
        schema=internal.project(out),
        stream_key=map_stream_key(key, out),
        # only an inner join of two append-only inputs never retracts
        append_only=join_type is JoinType.INNER and left.append_only and right.append_only,
        left=left,
        right=right,
        join_type=join_type,
        left_keys=tuple(left_keys),
        right_keys=tuple(right_keys),
        null_safe=ns,
        condition=condition,
        output_indices=out,
        left_table=tables[0],
        right_table=tables[1],
        left_degree_table=tables[2],
        right_degree_table=tables[3],
    )


def _columns(schema: Schema) -> list[tuple[str, DataType]]:
    return [(f.name, f.data_type) for f in schema]
