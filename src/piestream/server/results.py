"""What executing a statement returns: rows with typed columns, or a command tag."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from piestream.common.scalar import Row
from piestream.common.types import DataType


@dataclass
class QueryResult:
    """One statement's outcome. `tag` is PostgreSQL's command tag (``SELECT 3``, ``INSERT 0 2``)."""

    tag: str
    columns: list[tuple[str, DataType]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    arrow: pa.Table | None = None
    notices: list[str] = field(default_factory=list)
    #: result format codes a simple query sends the rows in (a BINARY cursor's FETCH: (1,))
    formats: tuple[int, ...] = ()

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.columns]

    @property
    def returns_rows(self) -> bool:
        return bool(self.columns) or self.tag.startswith(("SELECT", "SHOW", "EXPLAIN", "DESCRIBE"))


def command(tag: str) -> QueryResult:
    return QueryResult(tag)
