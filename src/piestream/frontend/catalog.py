"""Catalog objects as the frontend sees them: tables, MVs, views, indexes, sources, sinks.

The binder resolves names through a `CatalogReader`; meta owns the persistent catalog and hands
the frontend a snapshot. Every relation that stores rows (a table, an MV, an index) carries the
`TableDesc` of its storage; hidden columns (a table's `_row_id`, stream-key columns an MV keeps
that the query did not select) are listed but not shown to users.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from piestream.common.errors import UndefinedTable
from piestream.common.schema import Schema
from piestream.common.types import DataType, Field, parse_type
from piestream.storage.table.desc import TableDesc

DEFAULT_SCHEMA = "public"


class RelationKind(enum.Enum):
    TABLE = "table"
    MATERIALIZED_VIEW = "materialized view"
    VIEW = "view"
    INDEX = "index"
    SOURCE = "source"
    SINK = "sink"


@dataclass(frozen=True)
class ColumnCatalog:
    name: str
    data_type: DataType
    hidden: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": str(self.data_type), "hidden": self.hidden}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ColumnCatalog:
        return cls(d["name"], parse_type(d["type"]), d["hidden"])


@dataclass(frozen=True)
class Relation:
    """One named catalog object."""

    id: int
    name: str
    kind: RelationKind
    columns: tuple[ColumnCatalog, ...]
    definition: str = ""  # the SQL that created it
    table: TableDesc | None = None  # storage, for tables / MVs / indexes
    depends_on: tuple[int, ...] = ()  # relation ids this one reads
    job_id: int | None = None  # the streaming job maintaining it (tables, MVs, indexes, sinks)
    append_only: bool = False
    properties: dict[str, str] = field(default_factory=dict)  # WITH (...) options
    extra: dict[str, Any] = field(default_factory=dict)  # kind-specific (conflict, index columns, ...)
    schema_name: str = DEFAULT_SCHEMA

    @property
    def visible_columns(self) -> list[ColumnCatalog]:
        return [c for c in self.columns if not c.hidden]

    @property
    def schema(self) -> Schema:
        return Schema(tuple(Field(c.name, c.data_type) for c in self.columns))

    @property
    def stores_rows(self) -> bool:
        return self.table is not None

    def column_index(self, name: str) -> int | None:
        for i, c in enumerate(self.columns):
            if c.name == name:
                return i
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind.value,
            "columns": [c.to_json() for c in self.columns],
            "definition": self.definition,
            "table": None if self.table is None else self.table.to_json(),
            "depends_on": list(self.depends_on),
            "job_id": self.job_id,
            "append_only": self.append_only,
            "properties": self.properties,
            "extra": self.extra,
            "schema": self.schema_name,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Relation:
        return cls(
            id=d["id"],
            name=d["name"],
            kind=RelationKind(d["kind"]),
            columns=tuple(ColumnCatalog.from_json(c) for c in d["columns"]),
            definition=d["definition"],
            table=None if d["table"] is None else TableDesc.from_json(d["table"]),
            depends_on=tuple(d["depends_on"]),
            job_id=d["job_id"],
            append_only=d["append_only"],
            properties=dict(d["properties"]),
            extra=dict(d["extra"]),
            schema_name=d.get("schema", DEFAULT_SCHEMA),
        )


class CatalogReader(Protocol):
    """What the binder and planner need from the catalog."""

    def get_relation(self, name: str) -> Relation | None: ...

    def relations(self) -> Iterable[Relation]: ...

    def next_id(self) -> int: ...


@dataclass
class CatalogSnapshot:
    """An in-memory catalog (tests, and the frontend's view of meta's catalog)."""

    by_name: dict[str, Relation] = field(default_factory=dict)
    _next: int = 1000

    def get_relation(self, name: str) -> Relation | None:
        return self.by_name.get(name)

    def relations(self) -> Iterable[Relation]:
        return list(self.by_name.values())

    def next_id(self) -> int:
        self._next += 1
        return self._next

    def add(self, rel: Relation) -> None:
        self.by_name[rel.name] = rel
        self._next = max(self._next, rel.id)

    def require(self, name: str, position: int | None = None) -> Relation:
        rel = self.get_relation(name)
        if rel is None:
            raise UndefinedTable(f'relation "{name}" does not exist', position=position)
        return rel

    def dependents(self, rel_id: int) -> list[Relation]:
        return [r for r in self.by_name.values() if rel_id in r.depends_on]

    def indexes_of(self, rel_id: int) -> list[Relation]:
        """The indexes created on a table or MV (batch scans may read them instead)."""
        return [
            r
            for r in self.by_name.values()
            if r.kind is RelationKind.INDEX and r.extra.get("index_of") == rel_id
        ]
