"""Boolean logic: Kleene AND / OR / NOT and the IS [NOT] TRUE / FALSE / NULL predicates.

AND and OR evaluate all operands at once; only if that raises do they fall back to PostgreSQL's
left-to-right short circuit, evaluating an operand just on the rows the earlier ones left
undecided (so ``x <> 0 AND 10 / x > 1`` does not divide by zero).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import DataChunk
from piestream.common.errors import PiestreamError
from piestream.expr.expr import FuncCall
from piestream.expr.functions.registry import eval_rows, register, register_special
from piestream.expr.functions.vec import scatter


def _junction(call: FuncCall, chunk: DataChunk, *, is_and: bool) -> pa.Array:
    kernel = pc.and_kleene if is_and else pc.or_kleene
    try:
        arrays = [a.eval(chunk) for a in call.args]
    except PiestreamError:
        return _lazy_junction(call, chunk, is_and=is_and)
    out = arrays[0]
    for x in arrays[1:]:
        out = kernel(out, x)
    return out


def _lazy_junction(call: FuncCall, chunk: DataChunk, *, is_and: bool) -> pa.Array:
    """Left to right; a row leaves once an operand decides it (FALSE for AND, TRUE for OR)."""
    kernel = pc.and_kleene if is_and else pc.or_kleene
    decided_by = not is_and
    n = chunk.capacity
    rows = np.arange(n)
    acc = call.args[0].eval(chunk)
    done: list[tuple[np.ndarray, pa.Array]] = []
    for arg in call.args[1:]:
        decisive = np.asarray(
            pc.equal(acc, decided_by).fill_null(False).to_numpy(zero_copy_only=False), np.bool_
        )
        if decisive.any():
            keep = pa.array(decisive)
            done.append((rows[decisive], acc.filter(keep)))
            rows = rows[~decisive]
            acc = acc.filter(pc.invert(keep))
        if not len(rows):
            break
        acc = kernel(acc, eval_rows(arg, chunk, rows))
    done.append((rows, acc))
    return scatter(n, done, pa.bool_())


@register_special("and")
def _and(call: FuncCall, chunk: DataChunk) -> pa.Array:
    return _junction(call, chunk, is_and=True)


@register_special("or")
def _or(call: FuncCall, chunk: DataChunk) -> pa.Array:
    return _junction(call, chunk, is_and=False)


@register("not")
def _not(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.invert(a[0])


@register("is_null")
def _is_null(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.is_null(a[0])


@register("is_not_null")
def _is_not_null(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.is_valid(a[0])


@register("is_true")
def _is_true(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.fill_null(a[0], False)


@register("is_not_true")
def _is_not_true(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.invert(pc.fill_null(a[0], False))


@register("is_false")
def _is_false(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.fill_null(pc.invert(a[0]), False)


@register("is_not_false")
def _is_not_false(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.fill_null(a[0], True)
