"""Helpers for expression tests: bind a call over literal and column arguments, evaluate it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from piestream.common.chunk import DataChunk
from piestream.common.errors import PiestreamError
from piestream.common.scalar import from_arrow, to_arrow
from piestream.common.types import DataType
from piestream.expr import Expr, InputRef, bind_call, literal


@dataclass(frozen=True)
class Col:
    """A column argument: these values as an input column of type `t`."""

    values: Sequence[Any]
    t: DataType


Arg = Expr | Col | Any


def bind(name: str, *args: Arg) -> tuple[Expr, DataChunk]:
    """Bind `name` over the arguments (Col -> an input column, Expr as is, else a literal)."""
    cols: list[Col] = [a for a in args if isinstance(a, Col)]
    n = len(cols[0].values) if cols else 1
    exprs: list[Expr] = []
    arrays = []
    for a in args:
        if isinstance(a, Col):
            assert len(a.values) == n
            exprs.append(InputRef(len(arrays), a.t))
            arrays.append(to_arrow(list(a.values), a.t))
        elif isinstance(a, Expr):
            exprs.append(a)
        else:
            exprs.append(literal(a))
    chunk = DataChunk(arrays, length=n)
    return bind_call(name, exprs), chunk


def run(name: str, *args: Arg) -> list[Any]:
    """Values of ``name(args...)`` for every row."""
    e, chunk = bind(name, *args)
    return evaluate(e, chunk)


def one(name: str, *args: Arg) -> Any:
    """The single value of a call over literals only."""
    (v,) = run(name, *args)
    return v


def evaluate(e: Expr, chunk: DataChunk | None = None) -> list[Any]:
    chunk = chunk if chunk is not None else DataChunk([], length=1)
    arr = e.eval(chunk)
    assert arr.type == e.return_type.arrow, (arr.type, e.return_type)
    assert len(arr) == chunk.capacity
    return from_arrow(arr, e.return_type)


def fails(sqlstate: str, fn: Any, *args: Any, match: str | None = None, **kwargs: Any) -> PiestreamError:
    """Assert `fn(*args, **kwargs)` raises a PiestreamError with `sqlstate` (and a message
    containing `match`)."""
    with pytest.raises(PiestreamError) as info:
        fn(*args, **kwargs)
    assert info.value.sqlstate == sqlstate, (info.value.sqlstate, info.value.message)
    if match is not None:
        assert match in info.value.message, info.value.message
    return info.value
