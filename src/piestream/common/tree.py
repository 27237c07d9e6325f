"""One tree protocol for every tree piestream rewrites: bound expressions, logical plans, batch
plans and stream plan nodes.

A node class declares which of its dataclass fields hold children (`child_fields`, the way
SQLGlot's `Expression.arg_types` declares args); a child field holds one node, ``None``, or a
tuple/list of nodes. Everything else — listing children, rebuilding a node with new children,
walking and transforming a tree — is written once here, so a new node kind is one class with one
``child_fields`` line, and every tree is walked and rebuilt the same way.

Nodes are treated as immutable: `with_children` and the transforms build new nodes with
`dataclasses.replace` and keep untouched subtrees (and the node itself, if nothing changed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Self


class TreeNode:
    """Mixin for dataclass tree nodes with declared children."""

    #: Names of the dataclass fields that hold children, in child order.
    child_fields: ClassVar[tuple[str, ...]] = ()

    def children(self) -> tuple[Self, ...]:
        """The children, in the order of `child_fields` (a sequence field contributes each item)."""
        out: list[Self] = []
        for name in self.child_fields:
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, tuple | list):
                out.extend(v)
            else:
                out.append(v)
        return tuple(out)

    def with_children(self, children: Sequence[Self]) -> Self:
        """This node with its children replaced, in `children()` order (self if all are the same)."""
        it = iter(children)
        changes: dict[str, Any] = {}
        for name in self.child_fields:
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, tuple | list):
                new = [next(it) for _ in v]
                if any(a is not b for a, b in zip(new, v, strict=True)):
                    changes[name] = type(v)(new)
            else:
                c = next(it)
                if c is not v:
                    changes[name] = c
        if next(it, None) is not None:
            raise ValueError(f"{type(self).__name__}: more children given than it has")
        return dataclasses.replace(self, **changes) if changes else self  # type: ignore[type-var]

    def walk(self) -> Iterator[Self]:
        """This node and every node below it, parents first (depth-first, children in order)."""
        stack: list[Self] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children()))

    def transform(self, fn: Callable[[Self], Self]) -> Self:
        """Rebuild the tree bottom-up: children first, then `fn` of the node with its new children.

        The rewrite-rule form: `fn` returns the node itself where its rule does not apply."""
        kids = self.children()
        node = self.with_children([k.transform(fn) for k in kids]) if kids else self
        return fn(node)

    def transform_down(self, fn: Callable[[Self], Self | None]) -> Self:
        """Rebuild the tree top-down: where `fn` returns a node, it replaces that whole subtree
        (which is not visited further); where it returns None, the node's children are visited."""
        out = fn(self)
        if out is not None:
            return out
        kids = self.children()
        return self.with_children([k.transform_down(fn) for k in kids]) if kids else self
