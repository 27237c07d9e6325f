"""Generic rewriting of bound expression trees (they are frozen dataclasses)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass, replace
from typing import Any

from piestream.expr.expr import Expr, InputRef


def children_of(e: Expr) -> Iterator[Expr]:
    if not is_dataclass(e):
        return
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            yield v
        elif isinstance(v, tuple):
            yield from (x for x in v if isinstance(x, Expr))


def walk(e: Expr) -> Iterator[Expr]:
    """`e` and every sub-expression, parents first."""
    yield e
    for c in children_of(e):
        yield from walk(c)


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild `e` top-down: where `fn` returns an expression, it replaces that whole subtree."""
    out = fn(e)
    if out is not None:
        return out
    if not is_dataclass(e):
        return e
    changes: dict[str, Any] = {}
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            nv = transform(v, fn)
            if nv is not v:
                changes[f.name] = nv
        elif isinstance(v, tuple) and any(isinstance(x, Expr) for x in v):
            nt = tuple(transform(x, fn) if isinstance(x, Expr) else x for x in v)
            if any(a is not b for a, b in zip(nt, v, strict=True)):
                changes[f.name] = nt
    return replace(e, **changes) if changes else e


def replace_exprs(e: Expr, mapping: dict[Any, Expr]) -> Expr:
    """Replace subtrees equal to a key of `mapping`."""
    return transform(e, lambda x: mapping.get(x) if _hashable(x) else None)


def shift_refs(e: Expr, offset: int) -> Expr:
    """Every InputRef's index plus `offset` (an expression over the right side of a join)."""
    return transform(
        e, lambda x: InputRef(x.index + offset, x.return_type) if isinstance(x, InputRef) else None
    )


def remap_refs(e: Expr, mapping: dict[int, int]) -> Expr:
    """InputRef indices through `mapping` (column pruning, projection merging)."""
    return transform(
        e, lambda x: InputRef(mapping[x.index], x.return_type) if isinstance(x, InputRef) else None
    )


def input_refs(e: Expr) -> set[int]:
    return {x.index for x in walk(e) if isinstance(x, InputRef)}


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True
