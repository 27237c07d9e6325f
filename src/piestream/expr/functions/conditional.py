"""CASE, COALESCE, NULLIF, GREATEST, LEAST.

CASE and COALESCE are special forms: a WHEN condition is evaluated only on the rows no earlier
branch took, and a branch value only on the rows that select it, so an error in a branch (a
division by zero, a bad cast) surfaces only for rows that really take that branch, as in
PostgreSQL's row-at-a-time executor.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common.chunk import DataChunk
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.expr.functions.comparison import compare
from piestream.expr.functions.registry import eval_rows, register, register_special
from piestream.expr.functions.vec import bool_values, scatter

#: Kernels that cannot raise on any input (so evaluating them on rows a branch does not select
#: is harmless, and CASE / COALESCE can evaluate everything at once).
_CANNOT_FAIL = frozenset(
    {
        "equal",
        "not_equal",
        "less_than",
        "less_than_or_equal",
        "greater_than",
        "greater_than_or_equal",
        "is_distinct_from",
        "is_not_distinct_from",
        "in",
        "and",
        "or",
        "not",
        "is_null",
        "is_not_null",
        "is_true",
        "is_not_true",
        "is_false",
        "is_not_false",
        "case",
        "coalesce",
        "nullif",
        "greatest",
        "least",
        "field",
        "array_access",
        "lower",
        "upper",
        "concat",
        "concat_op",
        "char_length",
        "octet_length",
        "now",
    }
)


def cannot_fail(e: Expr) -> bool:
    """True when evaluating `e` can never raise, whatever the input rows."""
    if isinstance(e, InputRef | Literal):
        return True
    return isinstance(e, FuncCall) and e.name in _CANNOT_FAIL and all(cannot_fail(a) for a in e.args)


@register_special("case")
def _case(call: FuncCall, chunk: DataChunk) -> pa.Array:
    """args = [cond1, value1, cond2, value2, ..., else_value]."""
    n = chunk.capacity
    args = call.args
    if all(cannot_fail(a) for a in args):  # no error to hide: one vectorized case_when
        conds = [a.eval(chunk) for a in args[:-1:2]]
        values = [a.eval(chunk) for a in (*args[1:-1:2], args[-1])]
        conds_struct = pc.make_struct(*conds, field_names=[str(i) for i in range(len(conds))])
        return nm.on_storage(pc.case_when, conds_struct, *values)
    remaining = np.arange(n)
    parts: list[tuple[np.ndarray, pa.Array]] = []
    for i in range(0, len(args) - 1, 2):
        if not len(remaining):
            break
        hit = bool_values(eval_rows(args[i], chunk, remaining))
        rows = remaining[hit]
        if len(rows):
            parts.append((rows, eval_rows(args[i + 1], chunk, rows)))
        remaining = remaining[~hit]
    if len(remaining):
        parts.append((remaining, eval_rows(args[-1], chunk, remaining)))
    return scatter(n, parts, call.return_type.arrow)


@register_special("coalesce")
def _coalesce(call: FuncCall, chunk: DataChunk) -> pa.Array:
    """The first non-NULL argument; later arguments run only on rows still NULL."""
    if all(cannot_fail(a) for a in call.args):
        return nm.on_storage(pc.coalesce, *[a.eval(chunk) for a in call.args])
    n = chunk.capacity
    rows = np.arange(n)
    parts: list[tuple[np.ndarray, pa.Array]] = []
    for arg in call.args:
        if not len(rows):
            break
        vals = eval_rows(arg, chunk, rows)
        present = np.asarray(vals.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        if present.any():
            parts.append((rows[present], vals.filter(pa.array(present))))
        rows = rows[~present]
    return scatter(n, parts, call.return_type.arrow)


@register("nullif")
def _nullif(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """args = [value, value = other]: NULL where the equality holds, else the value."""
    value, equal = a
    return nm.on_storage(pc.if_else, pc.fill_null(equal, False), pa.nulls(n, value.type), value)


def _extreme(call: FuncCall, a: list[pa.Array], op: str) -> pa.Array:
    """GREATEST / LEAST ignore NULLs; NULL only when every argument is NULL."""
    t = call.return_type
    out = a[0]
    for x in a[1:]:
        better = bool_values(compare(op, t, x, out))
        take = better | (
            out.is_null().to_numpy(zero_copy_only=False) & x.is_valid().to_numpy(zero_copy_only=False)
        )
        out = nm.on_storage(pc.if_else, pa.array(take), x, out)
    return out


@register("greatest")
def _greatest(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _extreme(call, a, "greater_than")


@register("least")
def _least(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _extreme(call, a, "less_than")
