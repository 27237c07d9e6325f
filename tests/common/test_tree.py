"""The tree protocol every plan and expression tree uses (`piestream.common.tree`)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from piestream.common.tree import TreeNode
from piestream.common.types import INT
from piestream.expr.expr import FuncCall, InputRef, Literal


@dataclass(frozen=True)
class Leaf(TreeNode):
    name: str


@dataclass(frozen=True)
class Pair(TreeNode):
    child_fields = ("left", "right")

    name: str
    left: TreeNode
    right: TreeNode | None


@dataclass(frozen=True)
class Many(TreeNode):
    child_fields = ("items",)

    name: str
    items: tuple[TreeNode, ...]


def names(nodes: object) -> list[str]:
    return [n.name for n in nodes]  # type: ignore[attr-defined]


def tree() -> Many:
    return Many("root", (Pair("p", Leaf("a"), None), Leaf("b"), Pair("q", Leaf("c"), Leaf("d"))))


def test_children_follow_declared_fields_and_skip_none() -> None:
    t = tree()
    assert names(t.children()) == ["p", "b", "q"]
    assert names(t.items[0].children()) == ["a"]
    assert Leaf("x").children() == ()


def test_with_children_rebuilds_only_what_changed() -> None:
    t = tree()
    assert t.with_children(t.children()) is t
    new = t.with_children([Leaf("z"), *t.children()[1:]])
    assert names(new.children()) == ["z", "b", "q"]
    assert new.items[1] is t.items[1] and new.items[2] is t.items[2]
    with pytest.raises(ValueError, match="more children"):
        Leaf("x").with_children([Leaf("y")])


def test_walk_is_depth_first_parents_first() -> None:
    assert names(tree().walk()) == ["root", "p", "a", "b", "q", "c", "d"]


def test_transform_is_bottom_up() -> None:
    seen: list[str] = []

    def rule(n: TreeNode) -> TreeNode:
        seen.append(n.name)  # type: ignore[attr-defined]
        return Leaf(n.name.upper()) if isinstance(n, Leaf) else n  # type: ignore[attr-defined]

    out = tree().transform(rule)
    assert seen == ["a", "p", "b", "c", "d", "q", "root"]
    assert names(out.walk()) == ["root", "p", "A", "B", "q", "C", "D"]


def test_transform_down_replaces_a_subtree_without_visiting_it() -> None:
    seen: list[str] = []

    def rule(n: TreeNode) -> TreeNode | None:
        seen.append(n.name)  # type: ignore[attr-defined]
        return Leaf("P") if n.name == "p" else None  # type: ignore[attr-defined]

    out = tree().transform_down(rule)
    assert seen == ["root", "p", "b", "q", "c", "d"]  # "a" under the replaced "p" is not visited
    assert names(out.walk()) == ["root", "P", "b", "q", "c", "d"]


def test_expressions_use_the_protocol() -> None:
    e = FuncCall("add", (InputRef(0, INT), FuncCall("negate", (InputRef(2, INT),), INT)), INT)
    assert [type(x).__name__ for x in e.walk()] == ["FuncCall", "InputRef", "FuncCall", "InputRef"]
    assert e.input_refs() == {0, 2}
    shifted = e.transform(lambda x: InputRef(x.index + 1, x.return_type) if isinstance(x, InputRef) else x)
    assert shifted.input_refs() == {1, 3}
    folded = e.transform_down(
        lambda x: Literal(1, INT) if isinstance(x, FuncCall) and x.name == "negate" else None
    )
    assert str(folded) == "add($0, 1)"
