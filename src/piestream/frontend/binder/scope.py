"""Name resolution: which input column a column reference means.

A scope lists the columns of the relation being bound (FROM items side by side, each with its
table alias); a subquery's scope has its enclosing query's scope as parent, and a reference that
resolves there becomes an `OuterRef` (a correlated reference the subquery rewrite removes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.errors import PiestreamError, UndefinedColumn
from piestream.common.types import DataType
from piestream.expr.expr import Expr


class AmbiguousColumn(PiestreamError):
    sqlstate = "42702"


class GroupingError(PiestreamError):
    sqlstate = "42803"


@dataclass(frozen=True)
class ScopeColumn:
    """One column a name can resolve to. `hidden` columns (row ids, subquery results) are never
    expanded by `*`. A `merged` column is an input of JOIN ... USING / NATURAL JOIN: the join's
    merged column stands for it unqualified and in `*`, so only `alias.name` and `alias.*` reach it
    (PostgreSQL's rule)."""

    qualifier: str | None
    name: str
    data_type: DataType
    hidden: bool = False
    merged: bool = False


@dataclass(frozen=True)
class OuterRef(Expr):
    """A reference to column `index` of the scope `depth` levels up (correlated subqueries)."""

    depth: int
    index: int
    return_type: DataType

    def eval(self, chunk: DataChunk) -> pa.Array:
        raise PiestreamError("correlated reference left in a plan", sqlstate="XX000")

    def __str__(self) -> str:
        return f"outer{self.depth}.${self.index}"


@dataclass
class Scope:
    columns: list[ScopeColumn] = field(default_factory=list)
    parent: Scope | None = None

    @classmethod
    def of(cls, columns: Sequence[ScopeColumn], parent: Scope | None = None) -> Scope:
        return cls(list(columns), parent)

    def concat(self, other: Scope) -> Scope:
        return Scope(self.columns + other.columns, self.parent)

    def requalified(self, qualifier: str | None, names: Sequence[str] | None = None) -> Scope:
        """The same columns under one table alias (FROM (...) AS q(a, b))."""
        cols = []
        for i, c in enumerate(self.columns):
            name = names[i] if names is not None and i < len(names) else c.name
            cols.append(ScopeColumn(qualifier, name, c.data_type, c.hidden, c.merged))
        return Scope(cols, self.parent)

    def find(self, qualifier: str | None, name: str, position: int | None = None) -> int | None:
        """Index of the column in this scope only (None if absent)."""
        hits = [
            i
            for i, c in enumerate(self.columns)
            if c.name == name and (c.qualifier == qualifier if qualifier is not None else not c.merged)
        ]
        if len(hits) > 1:
            shown = f"{qualifier}.{name}" if qualifier else name
            raise AmbiguousColumn(f'column reference "{shown}" is ambiguous', position=position)
        return hits[0] if hits else None

    def resolve(self, qualifier: str | None, name: str, position: int | None = None) -> tuple[int, int]:
        """(depth, index): depth 0 is this scope, 1 its parent, ..."""
        scope: Scope | None = self
        depth = 0
        while scope is not None:
            i = scope.find(qualifier, name, position)
            if i is not None:
                return depth, i
            scope = scope.parent
            depth += 1
        shown = f"{qualifier}.{name}" if qualifier else name
        raise UndefinedColumn(f'column "{shown}" does not exist', position=position)

    def has_qualifier(self, qualifier: str) -> bool:
        return any(c.qualifier == qualifier for c in self.columns)

    def visible(self, qualifier: str | None = None) -> list[int]:
        """The columns `*` (or `qualifier.*`) stands for, in order."""
        return [
            i
            for i, c in enumerate(self.columns)
            if not c.hidden and (c.qualifier == qualifier if qualifier is not None else not c.merged)
        ]
