"""Evaluation helpers around the tree: constant folding, non-strict (streaming) evaluation,
and freezing the statement time into ``now()``."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.errors import PiestreamError, is_data_error
from piestream.common.scalar import from_arrow
from piestream.expr.expr import Expr, FuncCall, Literal
from piestream.expr.signatures import PER_ROW, VOLATILE


def _has_volatile(e: Expr) -> bool:
    if isinstance(e, FuncCall) and e.name in VOLATILE and e.option("statement_time") is None:
        return True
    if isinstance(e, FuncCall) and e.name in PER_ROW:
        return True
    return any(_has_volatile(c) for c in e.children())


def fold_constants(e: Expr) -> Expr:
    """Replace sub-trees without column references (and without volatile calls such as an
    unfrozen ``now()``) by Literals. A constant sub-tree whose evaluation fails is left as it is:
    it then fails at run time only if a row really evaluates it (``CASE WHEN x > 0 THEN 1 / 0``
    does not fail for a table without positive x)."""
    if not isinstance(e, FuncCall):
        return e
    args = tuple(fold_constants(a) for a in e.args)
    node = e if args == e.args else dataclasses.replace(e, args=args)
    if not all(isinstance(a, Literal) for a in args) or _has_volatile(node):
        return node
    try:
        arr = node.eval(DataChunk([], length=1))
    except PiestreamError:
        return node
    return Literal(from_arrow(arr, node.return_type)[0], node.return_type)


def eval_non_strict(e: Expr, chunk: DataChunk) -> tuple[pa.Array, list[tuple[int, PiestreamError]]]:
    """Evaluate for a streaming executor (RisingWave's non-strict mode): a row whose evaluation
    raises a data error (`is_data_error`: division by zero, overflow, a bad cast, invalid
    function input, a failing UDF) gets NULL instead, and (row, error) is returned, so one bad
    row does not stop the stream. Any other error (a bug) is raised.

    The whole chunk is evaluated vectorized first; only if that raises is it split in halves
    recursively to find the failing rows: O(k log n) evaluations of slices for k bad rows, and
    one evaluation per row only for a chunk where nearly every row fails (this per-slice loop
    runs for failing chunks only, and kernels raise per call, not per row).
    """
    try:
        return e.eval(chunk), []
    except PiestreamError as err:
        if not is_data_error(err):
            raise
    errors: list[tuple[int, PiestreamError]] = []
    parts: list[pa.Array] = []
    stack = [(0, chunk.capacity)]
    while stack:
        lo, hi = stack.pop()
        try:
            parts.append(e.eval(chunk.slice(lo, hi - lo)))
            continue
        except PiestreamError as err:
            if not is_data_error(err):
                raise
            if hi - lo == 1:
                errors.append((lo, err))
                parts.append(pa.nulls(1, e.return_type.arrow))
                continue
        mid = (lo + hi) // 2
        stack.append((mid, hi))  # popped after the lower half: parts stay in row order
        stack.append((lo, mid))
    out = pa.concat_arrays(
        [p.cast(e.return_type.arrow) if p.type != e.return_type.arrow else p for p in parts]
    )
    return out, errors


def bind_statement_time(e: Expr, ts: dt.datetime) -> Expr:
    """Freeze `ts` as the value of every ``now()`` in `e` (PostgreSQL: one value per statement;
    also makes the value travel with the expression to Spark workers)."""
    if not isinstance(e, FuncCall):
        return e
    args = tuple(bind_statement_time(a, ts) for a in e.args)
    if e.name in VOLATILE:
        frozen = ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)
        opts = (*((k, v) for k, v in e.options if k != "statement_time"), ("statement_time", frozen))
        return dataclasses.replace(e, args=args, options=opts)
    return e if args == e.args else dataclasses.replace(e, args=args)
