"""Views created before per-value-scale NUMERIC keep the NUMERIC rules they were created with.

A stored plan of format <= 2 (`piestream.plan.serde.PLAN_FORMAT`) was planned when every
NUMERIC was decimal128(38, 10): results rounded to 10 fraction digits, shown without trailing
zeros, and sum / avg state tables without per-scale counts. Its view's rows were computed that
way, so new rows must be too: a view stays consistent with itself. This is the one place that
decides it; `keep_decimal_rules` rewrites such a plan when it is loaded:

- every call returning NUMERIC is wrapped in `numeric_decimal_rules` (round to 10 digits, no
  trailing zeros), NUMERIC division becomes `divide_decimal_rules` (rounded once, at 10);
- every aggregate call gets `decimal_rules=True`: sum / avg of NUMERIC keep the old state layout
  (`LegacyNumericSumState`), other NUMERIC results (avg of integers) are rounded the old way.

Recreating the view gives PostgreSQL's rules (README, "Upgrading"). Window functions over
NUMERIC in such a view are not rewritten (they recompute whole partitions; README lists it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from piestream.common.types import TypeKind
from piestream.expr.expr import FuncCall
from piestream.expr.functions.numeric_rules import DECIMAL_RULES, DIVIDE_DECIMAL_RULES
from piestream.plan.agg_call import AggCall

_OURS = (DECIMAL_RULES, DIVIDE_DECIMAL_RULES)


def keep_decimal_rules(v: Any) -> Any:
    """`v` (fragments, nodes, expressions, nested in tuples / lists / dicts) under the old
    NUMERIC rules; idempotent (a rewritten plan is left as it is)."""
    if isinstance(v, FuncCall):
        if v.name in _OURS:
            return v
        args = tuple(keep_decimal_rules(a) for a in v.args)
        if v.return_type.kind is not TypeKind.NUMERIC:
            return dataclasses.replace(v, args=args)
        if v.name == "divide":
            return dataclasses.replace(v, name=DIVIDE_DECIMAL_RULES, args=args)
        return FuncCall(DECIMAL_RULES, (dataclasses.replace(v, args=args),), v.return_type)
    if isinstance(v, AggCall):
        return dataclasses.replace(v, decimal_rules=True, filter=keep_decimal_rules(v.filter))
    if isinstance(v, tuple):
        return tuple(keep_decimal_rules(x) for x in v)
    if isinstance(v, list):
        return [keep_decimal_rules(x) for x in v]
    if isinstance(v, dict):
        return {k: keep_decimal_rules(x) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and _is_plan_value(v):
        changes = {}
        for f in dataclasses.fields(v):
            if not f.init:
                continue
            old = getattr(v, f.name)
            new = keep_decimal_rules(old)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(v, **changes) if changes else v
    return v


def _is_plan_value(v: Any) -> bool:
    """Plan nodes and the plan's own dataclasses (not storage descriptors, types or schemas)."""
    from piestream.plan.serde import PLAN_CLASSES  # serde loads plans through this module

    return type(v) in PLAN_CLASSES
