"""Joins: hash join on equi keys, nested-loop join without them, every SQL join kind.

Both work on row-index pairs: candidate pairs (same key, or all pairs) are produced in blocks,
the residual condition is evaluated over the gathered rows of each block (NULL = no match), and
the pairs that survive decide everything else: inner output = those pairs; outer joins add the
rows no surviving pair touched, NULL-padded (so a left row whose key matches but whose every
pair fails the condition is padded, as in PostgreSQL); semi keeps left rows with a surviving
pair, anti those without one (NOT EXISTS semantics). Gathering by index with `take` works for
every Arrow type (decimal, interval, list, struct), which Acero's hash join does not.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from piestream.batch.chunks import concat_chunks, eval_expr, null_columns, take_rows, true_mask
from piestream.batch.context import BatchContext
from piestream.batch.keys import join_key_codes
from piestream.batch.plan import BatchAsOfJoin, BatchHashJoin, BatchNestedLoopJoin
from piestream.common.chunk import DataChunk
from piestream.common.errors import InternalError
from piestream.common.types import BIGINT, DOUBLE, NUMERIC, DataType, TypeKind
from piestream.expr.expr import Expr
from piestream.expr.functions.cast import cast_array
from piestream.stream.executors.join.asof import asof_match
from piestream.stream.executors.join.kernels import take_or_null

#: Candidate pairs gathered at once (bounds the memory of a many-to-many or cross join).
PAIR_BLOCK = 1 << 20

Pairs = tuple[np.ndarray, np.ndarray]


def execute_hash_join(node: BatchHashJoin, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    left, right = inputs
    ltypes, rtypes = node.left.schema.types, node.right.schema.types
    lcols, rcols, ktypes = [], [], []
    for lk, rk in zip(node.left_keys, node.right_keys, strict=True):
        lc, rc, t = _unify(left.columns[lk], ltypes[lk], right.columns[rk], rtypes[rk])
        lcols.append(lc)
        rcols.append(rc)
        ktypes.append(t)
    nl, nr = left.capacity, right.capacity
    if nl == 0 or nr == 0:
        lcodes, rcodes, count = np.full(nl, -1, np.int64), np.full(nr, -1, np.int64), 0
    else:
        lcodes, rcodes, count = join_key_codes(lcols, rcols, ktypes, node.null_safe_flags)
    # right rows by key: the rows of code k are r_order[r_starts[k]:r_starts[k + 1]]
    r_rows = np.flatnonzero(rcodes >= 0)
    r_order = r_rows[np.argsort(rcodes[r_rows], kind="stable")]
    r_counts = np.bincount(rcodes[r_rows], minlength=count)
    r_starts = np.concatenate([[0], np.cumsum(r_counts)]).astype(np.int64)
    l_ok = lcodes >= 0
    l_code = np.where(l_ok, lcodes, 0)
    lens = np.where(l_ok, r_counts[l_code] if count else 0, 0).astype(np.int64)
    if node.condition is None and node.kind in ("left_semi", "left_anti"):
        hit = lens > 0  # no residual: a key match is a match, no pairs needed
        return take_rows(left, np.flatnonzero(hit if node.kind == "left_semi" else ~hit))
    blocks = _key_pairs(lens, l_code, r_order, r_starts)
    return _finish(node.kind, left, right, ltypes, rtypes, blocks, node.condition)


def execute_asof_join(node: BatchAsOfJoin, inputs: list[DataChunk], ctx: BatchContext) -> DataChunk:
    """The streaming AsOf join's kernel over both inputs whole (`asof_match`)."""
    left, right = inputs
    lt, rt = node.left.schema.types, node.right.schema.types
    m = asof_match(
        [left.columns[k] for k in node.left_keys],
        [right.columns[k] for k in node.right_keys],
        [lt[k] for k in node.left_keys],
        left.columns[node.left_col],
        right.columns[node.right_col],
        lt[node.left_col],
        node.op,
    )
    if not node.outer:
        hit = np.flatnonzero(m >= 0)
        left, m = take_rows(left, hit), m[hit]
    rcols = [take_or_null(c, m, t.arrow) for c, t in zip(right.columns, rt, strict=True)]
    return DataChunk([*left.columns, *rcols], length=left.capacity)


def execute_nested_loop_join(
    node: BatchNestedLoopJoin, inputs: list[DataChunk], ctx: BatchContext
) -> DataChunk:
    left, right = inputs
    blocks = _all_pairs(left.capacity, right.capacity)
    return _finish(
        node.kind, left, right, node.left.schema.types, node.right.schema.types, blocks, node.condition
    )


def _key_pairs(
    lens: np.ndarray, l_code: np.ndarray, r_order: np.ndarray, r_starts: np.ndarray
) -> Iterator[Pairs]:
    """(left row, right row) pairs with equal keys, in left order, in blocks of ~PAIR_BLOCK."""
    cum = np.cumsum(lens)
    total = int(cum[-1]) if len(cum) else 0
    lo = 0
    while lo < len(lens) and total:
        done = int(cum[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(cum, done + PAIR_BLOCK, side="right")))
        seg = lens[lo:hi]
        n = int(seg.sum())
        if n:
            li = np.repeat(np.arange(lo, hi, dtype=np.int64), seg)
            within = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(seg) - seg, seg)
            ri = r_order[np.repeat(r_starts[l_code[lo:hi]], seg) + within]
            yield li, ri
        lo = hi


def _all_pairs(nl: int, nr: int) -> Iterator[Pairs]:
    """Every (left row, right row) pair, left-major, in blocks of ~PAIR_BLOCK."""
    if not nl or not nr:
        return
    step = max(1, PAIR_BLOCK // nr)
    for lo in range(0, nl, step):
        hi = min(nl, lo + step)
        yield (
            np.repeat(np.arange(lo, hi, dtype=np.int64), nr),
            np.tile(np.arange(nr, dtype=np.int64), hi - lo),
        )


def _finish(
    kind: str,
    left: DataChunk,
    right: DataChunk,
    ltypes: Sequence[DataType],
    rtypes: Sequence[DataType],
    blocks: Iterator[Pairs],
    condition: Expr | None,
) -> DataChunk:
    """Apply the residual to the candidate pairs and assemble the output of `kind`."""
    semi = kind in ("left_semi", "left_anti")
    l_hit = np.zeros(left.capacity, np.bool_)
    r_hit = np.zeros(right.capacity, np.bool_)
    parts: list[DataChunk] = []
    for li, ri in blocks:
        pair = DataChunk(take_rows(left, li).columns + take_rows(right, ri).columns, length=len(li))
        if condition is not None:
            mask = true_mask(eval_expr(condition, pair))
            keep = np.asarray(mask.to_numpy(zero_copy_only=False), np.bool_)
            li, ri = li[keep], ri[keep]
            if not semi:
                pair = DataChunk([c.filter(mask) for c in pair.columns], length=len(li))
        l_hit[li] = True
        r_hit[ri] = True
        if not semi:
            parts.append(pair)
    if kind == "left_semi":
        return take_rows(left, np.flatnonzero(l_hit))
    if kind == "left_anti":
        return take_rows(left, np.flatnonzero(~l_hit))
    if kind in ("left", "full"):
        pad = take_rows(left, np.flatnonzero(~l_hit))
        parts.append(DataChunk(pad.columns + null_columns(rtypes, pad.capacity), length=pad.capacity))
    if kind in ("right", "full"):
        pad = take_rows(right, np.flatnonzero(~r_hit))
        parts.append(DataChunk(null_columns(ltypes, pad.capacity) + pad.columns, length=pad.capacity))
    return concat_chunks(parts, [*ltypes, *rtypes])


def _unify(lc: pa.Array, lt: DataType, rc: pa.Array, rt: DataType) -> tuple[pa.Array, pa.Array, DataType]:
    """Join key columns of one comparable type (the planner casts; this covers numeric widening)."""
    if lt == rt or lt.arrow == rt.arrow:
        return lc, rc, lt
    if lt.is_numeric and rt.is_numeric:
        kinds = {lt.kind, rt.kind}
        if kinds & {TypeKind.REAL, TypeKind.DOUBLE}:
            t = DOUBLE
        elif TypeKind.NUMERIC in kinds:
            t = NUMERIC
        else:
            t = BIGINT
        if TypeKind.NUMERIC in kinds:  # the engine's casts build every NUMERIC layout
            return cast_array(lc, lt, t), cast_array(rc, rt, t), t
        return lc.cast(t.arrow), rc.cast(t.arrow), t
    raise InternalError(f"join keys of types {lt} and {rt} are not comparable")
