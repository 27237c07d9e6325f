"""Calls of user-defined Python functions (``CREATE FUNCTION ... LANGUAGE python``).

A `PythonUdfCall` carries the function's *source text*, never a Python object, so it serializes
with the plan like any expression and is compiled again in whichever process evaluates it (the
frontend, a Spark worker); compiled functions are cached per process by (name, source).

Two calling conventions:
- row by row (the default): the function receives one Python value per argument (None for
  NULL) and returns one value; a STRICT function is not called for a row with a NULL argument;
- vectorized (``WITH (vectorized = true)``): the function receives one `pyarrow.Array` per
  argument for the whole chunk and returns an array (or a sequence) of the same length.

Whatever the function raises becomes an `ExternalRoutineException` (SQLSTATE 38000) with the
exception's type and message and no traceback. It is a `PiestreamError` like division by zero,
so batch queries fail with it and streaming's non-strict evaluation turns the row into NULL
plus an error record.
"""

from __future__ import annotations

import ast
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from piestream.common import numeric as nm
from piestream.common.chunk import DataChunk
from piestream.common.errors import ExternalRoutineException, PiestreamError
from piestream.common.scalar import from_arrow, to_arrow
from piestream.common.types import DataType
from piestream.expr.expr import Expr


class InvalidFunctionDefinition(PiestreamError):
    """42P13: the body of CREATE FUNCTION does not define a usable function."""

    sqlstate = "42P13"


_COMPILED: dict[tuple[str, str], Callable[..., Any]] = {}
_LOCK = threading.Lock()


def compile_function(name: str, source: str) -> Callable[..., Any]:
    """The function `name` that `source` defines (or its only top-level function), compiled once
    per process. Raises `InvalidFunctionDefinition` if the source does not define one."""
    key = (name, source)
    fn = _COMPILED.get(key)
    if fn is not None:
        return fn
    code = textwrap.dedent(source).strip("\n")
    try:
        tree = ast.parse(code, filename=f"<function {name}>")
    except SyntaxError as e:
        raise InvalidFunctionDefinition(
            f"syntax error in the Python body of function {name}: {e.msg} (line {e.lineno})"
        ) from None
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    target = name if name in defined else (defined[0] if len(defined) == 1 else None)
    if target is None:
        raise InvalidFunctionDefinition(
            f"the Python body of function {name} must define a function named {name}",
            hint=f"Write the body as: def {name}(...): ...",
        )
    namespace: dict[str, Any] = {"__name__": f"piestream_udf_{name}"}
    try:
        exec(compile(tree, f"<function {name}>", "exec"), namespace)  # the user's own code, by design
    except Exception as e:
        raise InvalidFunctionDefinition(
            f"the Python body of function {name} failed to load: {type(e).__name__}: {e}"
        ) from None
    fn = namespace[target]
    with _LOCK:
        _COMPILED[key] = fn
    return fn


def _raised(name: str, e: Exception) -> ExternalRoutineException:
    return ExternalRoutineException(
        f"{type(e).__name__}: {e}", detail=f'raised by the Python function "{name}"'
    )


@dataclass(frozen=True)
class PythonUdfCall(Expr):
    """A call of a user-defined Python function over the rows of a chunk."""

    child_fields = ("args",)

    name: str
    args: tuple[Expr, ...]
    return_type: DataType
    source: str
    vectorized: bool = False
    strict: bool = False

    def eval(self, chunk: DataChunk) -> pa.Array:
        fn = compile_function(self.name, self.source)
        arrays = [a.eval(chunk) for a in self.args]
        n = chunk.capacity
        out = self._call_vectorized(fn, arrays, n) if self.vectorized else self._call_rows(fn, arrays, n)
        if len(out) != n:
            raise ExternalRoutineException(f'function "{self.name}" returned {len(out)} values for {n} rows')
        return out

    def _call_rows(self, fn: Callable[..., Any], arrays: list[pa.Array], n: int) -> pa.Array:
        columns = [from_arrow(a, e.return_type) for a, e in zip(arrays, self.args, strict=True)]
        rows = zip(*columns, strict=True) if columns else [()] * n
        try:
            # per row: a row-by-row UDF is one Python call per row by its declaration
            values = [None if self.strict and None in row else fn(*row) for row in rows]
        except Exception as e:
            raise _raised(self.name, e) from None
        try:
            return to_arrow(values, self.return_type)
        except PiestreamError as e:
            raise ExternalRoutineException(
                f'function "{self.name}" returned a value that is not of type {self.return_type}',
                detail=e.message,
            ) from None

    def _call_vectorized(self, fn: Callable[..., Any], arrays: list[pa.Array], n: int) -> pa.Array:
        try:
            out = fn(*arrays)
        except Exception as e:
            raise _raised(self.name, e) from None
        try:
            if isinstance(out, pa.ChunkedArray):
                out = out.combine_chunks()
            if not isinstance(out, pa.Array):
                out = pa.array(out)
            if out.type != self.return_type.arrow:
                out = out.cast(self.return_type.arrow)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ExternalRoutineException(
                f'function "{self.name}" returned a value that is not of type {self.return_type}',
                detail=str(e),
            ) from None
        if self.strict and arrays:
            import pyarrow.compute as pc

            any_null = arrays[0].is_null()
            for a in arrays[1:]:
                any_null = pc.or_(any_null, a.is_null())
            out = nm.on_storage(pc.if_else, any_null, pa.scalar(None, out.type), out)
        return out

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(a) for a in self.args)})"
