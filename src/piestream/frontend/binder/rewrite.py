"""Rewrites of bound expression trees the binder and the optimizer share (column remapping,
subtree replacement), written with the tree protocol's `transform_down` (`piestream.common.tree`)."""

from __future__ import annotations

from typing import Any

from piestream.expr.expr import Expr, InputRef


def replace_exprs(e: Expr, mapping: dict[Any, Expr]) -> Expr:
    """Replace subtrees equal to a key of `mapping`."""
    return e.transform_down(lambda x: mapping.get(x) if _hashable(x) else None)


def shift_refs(e: Expr, offset: int) -> Expr:
    """Every InputRef's index plus `offset` (an expression over the right side of a join)."""
    return e.transform_down(
        lambda x: InputRef(x.index + offset, x.return_type) if isinstance(x, InputRef) else None
    )


def remap_refs(e: Expr, mapping: dict[int, int]) -> Expr:
    """InputRef indices through `mapping` (column pruning, projection merging)."""
    return e.transform_down(
        lambda x: InputRef(mapping[x.index], x.return_type) if isinstance(x, InputRef) else None
    )


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True
