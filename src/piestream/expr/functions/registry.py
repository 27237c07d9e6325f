"""The registry of vectorized scalar functions and how a `FuncCall` is evaluated.

A plain function receives its evaluated argument arrays (already of the types the binder chose,
casts inserted; a kernel reads the SQL types from ``call.args[i].return_type``) and returns one
array. A *special form* (CASE, COALESCE, AND, OR) receives the unevaluated call and the chunk,
so it can evaluate a branch only on the rows that take it.

Errors are PostgreSQL's: Arrow's overflow and division errors are turned into 22003 / 22012 here,
and any other Arrow failure becomes a PiestreamError too, so `eval_non_strict` can catch them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.errors import (
    DivisionByZero,
    InternalError,
    NumericOutOfRange,
    PiestreamError,
    UndefinedFunction,
)
from piestream.expr.expr import Expr, FuncCall, Literal

FunctionImpl = Callable[[FuncCall, list[pa.Array], int], pa.Array]
SpecialForm = Callable[[FuncCall, DataChunk], pa.Array]

_REGISTRY: dict[str, FunctionImpl] = {}
_SPECIAL: dict[str, SpecialForm] = {}


def register(*names: str) -> Callable[[FunctionImpl], FunctionImpl]:
    """Register a strict-or-not vectorized kernel under one or more names."""

    def deco(fn: FunctionImpl) -> FunctionImpl:
        for n in names:
            _REGISTRY[n] = fn
        return fn

    return deco


def register_special(*names: str) -> Callable[[SpecialForm], SpecialForm]:
    """Register a form that evaluates its own arguments (lazily, per selected rows)."""

    def deco(fn: SpecialForm) -> SpecialForm:
        for n in names:
            _SPECIAL[n] = fn
        return fn

    return deco


def is_registered(name: str) -> bool:
    _load()
    return name in _REGISTRY or name in _SPECIAL


def evaluate_call(call: FuncCall, chunk: DataChunk) -> pa.Array:
    """Evaluate `call` over every physical row of `chunk`."""
    _load()
    special = _SPECIAL.get(call.name)
    if special is not None:
        return _finish(call, _guard(call, lambda: special(call, chunk)), chunk.capacity)
    if any(isinstance(a, Literal) for a in call.args):
        arrays: list[pa.Array] = LazyArgs(call.args, chunk)
    else:
        arrays = [a.eval(chunk) for a in call.args]
    return call_function(call, arrays, chunk.capacity)


class LazyArgs(list):
    """Argument arrays where literals become n-row arrays only if the kernel reads them.

    Kernels that take a pattern, field name or length as a literal read it from
    ``call.args`` (see `vec.constant_arg`) and never touch its array, so e.g. the
    pattern of a LIKE is not copied a million times.
    """

    def __init__(self, args: tuple[Expr, ...], chunk: DataChunk) -> None:
        super().__init__(None if isinstance(a, Literal) else a.eval(chunk) for a in args)
        self._args = args
        self._chunk = chunk

    def _get(self, i: int) -> pa.Array:
        v = list.__getitem__(self, i)
        if v is None:
            v = self._args[i].eval(self._chunk)
            list.__setitem__(self, i, v)
        return v

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(len(self)))]
        return self._get(i if i >= 0 else len(self) + i)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (self._get(i) for i in range(len(self)))


def call_function(call: FuncCall, args: list[pa.Array], n: int) -> pa.Array:
    """Apply the kernel registered for ``call.name`` to already evaluated arguments."""
    _load()
    fn = _REGISTRY.get(call.name)
    if fn is None:
        raise UndefinedFunction(f"function {call.name} does not exist")
    return _finish(call, _guard(call, lambda: fn(call, args, n)), n)


def _guard(call: FuncCall, run: Callable[[], pa.Array | pa.ChunkedArray]) -> pa.Array:
    """Run a kernel, translating Arrow errors into PostgreSQL's."""
    try:
        out = run()
    except PiestreamError:
        raise
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        msg = str(e).lower()
        if "divide by zero" in msg:
            raise DivisionByZero("division by zero") from e
        if "overflow" in msg or "out of range" in msg or "not in range" in msg or "fit in" in msg:
            raise NumericOutOfRange(f"{type_label(call)} out of range") from e
        raise InternalError(f"{call.name}: {e}") from e
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    return out


def _finish(call: FuncCall, out: pa.Array, n: int) -> pa.Array:
    if len(out) != n:  # a kernel bug must not silently misalign rows
        raise InternalError(f"{call.name} returned {len(out)} rows for {n}")
    if out.type != call.return_type.arrow:
        out = out.cast(call.return_type.arrow)
    return out


def type_label(call: FuncCall) -> str:
    """PostgreSQL's word for the result type in "... out of range" messages."""
    from piestream.expr.coercion import type_name

    return type_name(call.return_type)


_LOADED = False
_LOAD_LOCK = threading.Lock()


def _load() -> None:
    """Import the kernel modules (they register themselves) on first use.

    `_LOADED` turns true only once every module has registered: sessions bind on several threads
    at once, and one that saw the flag while another was still importing found the registry half
    full ("function equal does not exist", 42883, seen by the chaos soak after a restart)."""
    global _LOADED
    if _LOADED:
        return
    with _LOAD_LOCK:
        if _LOADED:
            return
        from piestream.expr.functions import (  # noqa: F401
            arithmetic,
            cast,
            comparison,
            conditional,
            datetime,
            jsonb,
            logic,
            math,
            numeric_rules,
            ordered_set,
            regexp,
            string,
            struct_array,
            to_char,
        )

        _LOADED = True


def eval_rows(expr: Expr, chunk: DataChunk, rows: np.ndarray) -> pa.Array:
    """Evaluate `expr` on the physical rows `rows` of `chunk` only (for lazy branches).

    Only the columns the expression reads are gathered; the others become NULL placeholders.
    """
    n = chunk.capacity
    if len(rows) == n:
        return expr.eval(chunk)
    refs = expr.input_refs()
    idx = pa.array(rows, pa.int64())
    cols = [c.take(idx) if i in refs else pa.nulls(len(rows), c.type) for i, c in enumerate(chunk.columns)]
    return expr.eval(DataChunk(cols, length=len(rows)))
