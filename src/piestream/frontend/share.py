"""Common sub-plan sharing: an aggregation a query spells out twice is planned once (RisingWave's
StreamShare). Nexmark q5 groups the bids by (auction, window) twice, once for the counts and once
for their per-window maximum; planned twice, every event is read, windowed (x5 rows), shuffled
and counted twice, into two state tables holding the same rows.

Only `Agg` subtrees are shared: they hold state, so their repetition is what costs, and their
output does not depend on who reads it. A subtree with a volatile call (random(), a user function)
is never shared: two evaluations of it are two different relations.

The stream planner plans a shared subtree once and hands the same stream node to each consumer;
each consumer must reach it through an exchange (`PlannerBase.shuffle` puts the exchange right
above the shared node, below column-picking projections), so the fragmenter cuts there once and
dispatches the fragment's output to every consumer. A plan where a consumer reads it without an
exchange fails `consumers_exchange` and is planned again without sharing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from piestream.expr.expr import Expr, FuncCall, InputRef, Literal
from piestream.expr.signatures import VOLATILE
from piestream.frontend.logical import Agg, PlanNode
from piestream.frontend.stream_piece import ExchangeMarker
from piestream.plan.node import StreamNode


def same_plan(a: PlanNode, b: PlanNode) -> bool:
    """Whether two logical subtrees compute the same relation (same node kinds, fields, inputs)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    kids = set(a.child_fields)
    for f in dataclasses.fields(a):
        if f.name in kids:
            continue
        if getattr(a, f.name) != getattr(b, f.name):
            return False
    ca, cb = a.children(), b.children()
    return len(ca) == len(cb) and all(same_plan(x, y) for x, y in zip(ca, cb, strict=True))


def _exprs(v: Any) -> Iterable[Expr]:
    if isinstance(v, Expr):
        yield v
    elif isinstance(v, list | tuple):
        for x in v:
            yield from _exprs(x)
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):
        for f in dataclasses.fields(v):
            yield from _exprs(getattr(v, f.name))


def _deterministic(node: PlanNode) -> bool:
    """No volatile or unknown calls anywhere in the subtree's expressions."""
    for n in node.walk():
        for f in dataclasses.fields(n):
            if f.name in n.child_fields:
                continue
            for e in _exprs(getattr(n, f.name)):
                for x in e.walk():
                    if isinstance(x, FuncCall):
                        if x.name in VOLATILE:
                            return False
                    elif not isinstance(x, InputRef | Literal):
                        return False  # a user function, a subquery, ...: not known to be pure
    return True


def repeated_aggs(root: PlanNode) -> list[PlanNode]:
    """One representative of each aggregation subtree that occurs more than once in `root`."""
    aggs = [n for n in root.walk() if isinstance(n, Agg)]
    reps: list[PlanNode] = []
    for i, a in enumerate(aggs):
        if any(same_plan(r, a) for r in reps):
            continue
        if any(same_plan(a, b) for b in aggs[i + 1 :]) and _deterministic(a):
            reps.append(a)
    return reps


def consumers_exchange(root: StreamNode, shared: set[int]) -> bool:
    """Whether every shared node read by more than one parent is read only through exchanges."""
    parents: dict[int, list[StreamNode]] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        for c in n.children():
            parents.setdefault(id(c), []).append(n)
            if id(c) not in seen:
                seen.add(id(c))
                stack.append(c)
    return all(
        all(isinstance(p, ExchangeMarker) for p in ps)
        for k, ps in parents.items()
        if k in shared and len(ps) > 1
    )
