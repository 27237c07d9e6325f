"""PostgreSQL's overload resolution (parse_func.c func_select_candidate, parse_oper.c).

Given candidate signatures and the argument types (None for an unknown-typed literal), pick
one signature or none:

1. an exact match (for a binary operator with one unknown side, the unknown is assumed to have
   the other side's type);
2. otherwise keep the candidates every argument converts to implicitly, then, while more than
   one is left: the most exact type matches; the most preferred types where a conversion is
   needed; a category for each unknown argument (string if any candidate takes one there, else
   the one category all candidates agree on, preferring preferred types); and finally, if the
   known arguments share one type, candidates accepting that type at the unknown positions.
"""

from __future__ import annotations

from collections.abc import Sequence

from piestream.common.types import DataType
from piestream.expr.coercion import can_coerce, category, is_preferred
from piestream.expr.signatures import Signature

ArgType = DataType | None


class Ambiguous(Exception):
    """More than one candidate is equally good."""


def resolve(cands: Sequence[Signature], types: Sequence[ArgType], *, operator: bool) -> Signature | None:
    cands = [c for c in cands if len(c.args) == len(types)]
    if not cands:
        return None
    probe = list(types)
    if operator and len(types) == 2 and (types[0] is None) != (types[1] is None):
        known = types[0] if types[0] is not None else types[1]
        probe = [known, known]
    if all(t is not None for t in probe):
        for c in cands:
            if list(c.args) == probe:
                return c
    cands = [c for c in cands if all(can_coerce(t, f) for t, f in zip(types, c.args, strict=True))]
    if len(cands) <= 1:
        return cands[0] if cands else None

    def keep_max(score: list[int]) -> None:
        nonlocal cands
        best = max(score)
        cands = [c for c, s in zip(cands, score, strict=True) if s == best]

    keep_max([sum(1 for t, f in zip(types, c.args, strict=True) if t is not None and t == f) for c in cands])
    if len(cands) == 1:
        return cands[0]
    keep_max(
        [
            sum(1 for t, f in zip(types, c.args, strict=True) if t is not None and t != f and is_preferred(f))
            for c in cands
        ]
    )
    if len(cands) == 1:
        return cands[0]
    unknown_pos = [i for i, t in enumerate(types) if t is None]
    if unknown_pos:
        cands = _resolve_unknowns(cands, unknown_pos)
        if len(cands) == 1:
            return cands[0]
        known_types = {t for t in types if t is not None}
        if len(known_types) == 1:
            (kt,) = known_types
            fits = [c for c in cands if all(can_coerce(kt, c.args[i]) for i in unknown_pos)]
            if len(fits) == 1:
                return fits[0]
    raise Ambiguous()


def _resolve_unknowns(cands: list[Signature], positions: list[int]) -> list[Signature]:
    """Choose a type category for each unknown argument and keep the candidates that agree
    (no filtering at all if some position has conflicting non-string categories)."""
    slots: dict[int, tuple[str, bool]] = {}
    for i in positions:
        slot_cat: str | None = None
        has_pref = conflict = False
        for c in cands:
            cat, pref = category(c.args[i]), is_preferred(c.args[i])
            if slot_cat is None:
                slot_cat, has_pref = cat, pref
            elif cat == slot_cat:
                has_pref |= pref
            elif cat == "S":
                slot_cat, has_pref = cat, pref
            else:
                conflict = True
        if slot_cat is None or (conflict and slot_cat != "S"):
            return cands
        slots[i] = (slot_cat, has_pref)
    kept = [
        c
        for c in cands
        if all(
            category(c.args[i]) == cat and (not pref or is_preferred(c.args[i]))
            for i, (cat, pref) in slots.items()
        )
    ]
    return kept or cands
