"""Planning a logical join as a stream HashJoin (reference §6.2 state, §7 stream key).

Equi-conditions between plain columns of equal type become the hash keys (both inputs are
shuffled by them); everything else is the residual condition. The output stream key is the
inputs' keys plus the join-key columns of the side(s) the join type preserves
(`join_stream_key_internal`).

A FULL join emits NULL-padded rows of both sides. A left row padded on the right and a right row
padded on the left share their stream key when each side's key columns are NULL in that row:
`SELECT DISTINCT` outputs (a NULL group key) or no key at all (a scalar aggregate). Unless one
side's stream key has a column that is never NULL in its real rows, the left side carries a hidden
presence flag (TRUE in its real rows, NULL in padding) that joins the stream key. The same flag
keeps a padded side's generated row id from being the whole key: a NULL row id has no vnode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from piestream.common.types import BOOLEAN, TypeKind
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.frontend.binder.rewrite import remap_refs
from piestream.frontend.interval_join import derive_band
from piestream.frontend.logical import Join, JoinKind
from piestream.frontend.stream_piece import ANY, SINGLE, Dist, Piece, and_exprs, conjuncts, refs, upstreams
from piestream.frontend.temporal_join import is_temporal_join, plan_temporal_join
from piestream.frontend.watermark_derive import Watermarks
from piestream.plan.hash_join import IntervalBand, JoinType, build_hash_join, join_stream_key_internal

if TYPE_CHECKING:
    from piestream.frontend.stream_planner import StreamPlanner

JOIN_TYPES = {
    JoinKind.INNER: JoinType.INNER,
    JoinKind.LEFT: JoinType.LEFT_OUTER,
    JoinKind.RIGHT: JoinType.RIGHT_OUTER,
    JoinKind.FULL: JoinType.FULL_OUTER,
    JoinKind.LEFT_SEMI: JoinType.LEFT_SEMI,
    JoinKind.LEFT_ANTI: JoinType.LEFT_ANTI,
}

_EQ_NAMES = {"equal": False, "=": False, "is_not_distinct_from": True}

#: name of the hidden presence flag of a padded join side
PRESENT = "_present"


def equi_pair(c: Expr, nl: int) -> tuple[int, int, bool] | None:
    """(left column, right column, null-safe) of ``left.col = right.col`` with equal types."""
    if not (isinstance(c, FuncCall) and c.name in _EQ_NAMES and len(c.args) == 2):
        return None
    a, b = c.args
    if not (isinstance(a, InputRef) and isinstance(b, InputRef)) or a.return_type != b.return_type:
        return None
    if a.index < nl <= b.index:
        return a.index, b.index, _EQ_NAMES[c.name]
    if b.index < nl <= a.index:
        return b.index, a.index, _EQ_NAMES[c.name]
    return None


def _has_non_null_key(p: Piece) -> bool:
    return any(k in p.non_null for k in p.stream_key)


def padding_flags(
    jt: JoinType, lp: Piece, rp: Piece, left_keys: list[int], right_keys: list[int]
) -> tuple[bool, bool]:
    """Which sides need a presence flag in the output stream key (see the module docstring)."""
    padded = (
        jt in (JoinType.RIGHT_OUTER, JoinType.FULL_OUTER),
        jt in (JoinType.LEFT_OUTER, JoinType.FULL_OUTER),
    )
    flags = [False, False]
    if jt is JoinType.FULL_OUTER and not _has_non_null_key(lp) and not _has_non_null_key(rp):
        flags[0] = True
    lw = len(lp.schema)
    sk = join_stream_key_internal(lp.stream_key, rp.stream_key, lw, jt, left_keys, right_keys)
    if len(sk) == 1:
        side = 0 if sk[0] < lw else 1
        col = sk[0] if side == 0 else sk[0] - lw
        p = lp if side == 0 else rp
        if padded[side] and p.schema[col].data_type.kind is TypeKind.SERIAL:
            flags[side] = True
    return flags[0], flags[1]


def with_presence_flag(pl: StreamPlanner, p: Piece) -> Piece:
    """`p` with a hidden TRUE column that joins its stream key."""
    flag = len(p.schema)
    exprs = [*refs(p.schema), Literal(True, BOOLEAN)]
    names = [*p.schema.names, PRESENT]
    return pl.project(p, exprs, names, p.width, extra_key=[flag])


def plan_join(pl: StreamPlanner, node: Join) -> Piece:
    if is_temporal_join(node):
        return plan_temporal_join(pl, node)
    lp = pl.plan(node.left)
    rp = pl.plan(node.right)
    nl, nr = len(node.left.schema), len(node.right.schema)
    left_keys: list[int] = []
    right_keys: list[int] = []
    null_safe: list[bool] = []
    residual_logical: list[Expr] = []
    for c in conjuncts(node.condition):
        pair = equi_pair(c, nl)
        # a column already used as a key on its side stays a residual check: duplicate key
        # columns would hash differently in the exchange and in the join's state tables
        if pair is not None and pair[0] not in left_keys and pair[1] - nl not in right_keys:
            a, b, safe = pair
            left_keys.append(a)
            right_keys.append(b - nl)
            null_safe.append(safe)
        else:
            residual_logical.append(c)
    # a key pair watermarked on both sides goes first: every state table's pk then starts with
    # it, and the lower of the two watermarks cleans them (`HashJoinNode.watermark`)
    wm_pair = next(
        (
            j
            for j, (a, b) in enumerate(zip(left_keys, right_keys, strict=True))
            if a in lp.watermarks and b in rp.watermarks
        ),
        None,
    )
    watermark = None
    if wm_pair is not None:
        left_keys.insert(0, left_keys.pop(wm_pair))
        right_keys.insert(0, right_keys.pop(wm_pair))
        null_safe.insert(0, null_safe.pop(wm_pair))
        watermark = lp.watermarks[left_keys[0]].lower_with(rp.watermarks[right_keys[0]])
    # an interval join: a time band between two watermarked columns cleans both sides' state
    band = derive_band(
        residual_logical,
        nl,
        lp.watermarks,
        rp.watermarks,
        left_append_only=lp.node.append_only,
        right_append_only=rp.node.append_only,
    )
    if left_keys:
        lp = pl.require(lp, Dist("hash", tuple(left_keys)))
        rp = pl.require(rp, Dist("hash", tuple(right_keys)))
    else:
        lp, rp = pl.require(lp, SINGLE), pl.require(rp, SINGLE)
    if left_keys and (lp.dist.kind == "single") != (rp.dist.kind == "single"):
        # a singleton side "satisfies" any distribution, but both sides share the join's
        # fragment: its parallelism would clash with the other side's. Shuffle it by the keys.
        if lp.dist.kind == "single":
            lp = pl.shuffle(lp, Dist("hash", tuple(left_keys)))
        else:
            rp = pl.shuffle(rp, Dist("hash", tuple(right_keys)))
    if upstreams(lp.node) & upstreams(rp.node):
        # both sides would read one upstream fragment's change stream in the same fragment
        # (a self-join already partitioned by its key): an actor has one input port per
        # upstream fragment, so each side would get both copies. Shuffle one side.
        rp = pl.shuffle(rp, rp.dist)
    jt = JOIN_TYPES[node.kind]
    flag_l, flag_r = padding_flags(jt, lp, rp, left_keys, right_keys)
    if flag_l:
        lp = with_presence_flag(pl, lp)
    if flag_r:
        rp = with_presence_flag(pl, rp)
    lw = len(lp.schema)
    # positions in the physical left ++ right layout
    phys = {i: i for i in range(nl)}
    phys.update({nl + j: lw + j for j in range(nr)})
    residual = [remap_refs(c, phys) for c in residual_logical]
    if node.kind.keeps_left_only:
        logical = list(range(nl))
    else:
        logical = [*range(nl), *range(lw, lw + nr)]
    sk = join_stream_key_internal(lp.stream_key, rp.stream_key, lw, jt, left_keys, right_keys)
    out = logical + [k for k in sk if k not in logical]
    n = build_hash_join(
        lp.node,
        rp.node,
        jt,
        left_keys,
        right_keys,
        next_table_id=pl.next_table_id,
        condition=and_exprs(residual),
        null_safe=null_safe,
        output_indices=out,
        watermark=watermark,
        interval=band,
    )
    if not left_keys or (lp.dist.kind == "single" and rp.dist.kind == "single"):
        dist = SINGLE
    elif node.kind is JoinKind.FULL:
        dist = ANY
    elif node.kind is JoinKind.RIGHT:
        dist = Dist("hash", tuple(out.index(lw + k) for k in right_keys))
    else:
        dist = Dist("hash", tuple(out.index(k) for k in left_keys))
    # columns never NULL in the output: those of the sides that are never padded
    kept: set[int] = set()
    if jt in (JoinType.INNER, JoinType.LEFT_OUTER) or node.kind.keeps_left_only:
        kept |= lp.non_null
    if jt in (JoinType.INNER, JoinType.RIGHT_OUTER):
        kept |= {lw + c for c in rp.non_null}
    non_null = frozenset(i for i, c in enumerate(out) if c in kept)
    # every output row is caused by an input row at or above its side's watermark, so the
    # equi-key columns are bounded by the lower of the two
    wms = {}
    if watermark is not None:
        side = jt.output_side  # semi / anti output one side's columns only
        key_cols = {None: (left_keys[0], lw + right_keys[0]), 0: (left_keys[0],), 1: (right_keys[0],)}[side]
        for col in key_cols:
            if col in out:
                wms[out.index(col)] = watermark
    if band is not None:
        wms.update(_band_watermarks(band, jt, lp, rp, out))
    return Piece(n, dist, len(logical), non_null, wms)


def _band_watermarks(band: IntervalBand, jt: JoinType, lp: Piece, rp: Piece, out: list[int]) -> Watermarks:
    """The time columns' watermarks of an interval join's output. A future output row comes from
    a future row of one side (at or above its watermark) joined to, or un-padding, rows of the
    other side within the band, so a left time is >= min(W_l, W_r - upper): the lower of the
    left watermark and `clean_left` (right times symmetrically). Only sides never NULL-padded
    carry one."""
    lw = len(lp.schema)
    out_wms: Watermarks = {}
    side = jt.output_side
    keeps_left = side == 0 or jt in (JoinType.INNER, JoinType.LEFT_OUTER)
    keeps_right = side == 1 or jt in (JoinType.INNER, JoinType.RIGHT_OUTER)
    own = lp.watermarks.get(band.left_col)
    if keeps_left and band.clean_left is not None and own is not None and band.left_col in out:
        out_wms[out.index(band.left_col)] = own.lower_with(band.clean_left)
    rcol = band.right_col if side == 1 else lw + band.right_col
    own = rp.watermarks.get(band.right_col)
    if keeps_right and band.clean_right is not None and own is not None and rcol in out:
        out_wms[out.index(rcol)] = own.lower_with(band.clean_right)
    return out_wms
