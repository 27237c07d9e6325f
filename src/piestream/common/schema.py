"""Schemas: named, typed columns (seed 004: "a list of named, strong-typed columns")."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from piestream.common.types import DataType, Field


@dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...]

    @classmethod
    def of(cls, *cols: tuple[str, DataType] | Field) -> Schema:
        return cls(tuple(c if isinstance(c, Field) else Field(c[0], c[1]) for c in cols))

    @classmethod
    def from_types(cls, types: Sequence[DataType], prefix: str = "c") -> Schema:
        return cls(tuple(Field(f"{prefix}{i}", t) for i, t in enumerate(types)))

    @property
    def types(self) -> list[DataType]:
        return [f.data_type for f in self.fields]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __getitem__(self, i: int) -> Field:
        return self.fields[i]

    def project(self, indices: Sequence[int]) -> Schema:
        return Schema(tuple(self.fields[i] for i in indices))

    def concat(self, other: Schema) -> Schema:
        return Schema(self.fields + other.fields)

    def arrow(self) -> pa.Schema:
        """Arrow schema with each field's SQL type in its metadata (so JSONB etc. survive)."""
        return pa.schema(
            [
                pa.field(f.name, f.data_type.arrow, metadata={b"sql_type": str(f.data_type).encode()})
                for f in self.fields
            ]
        )

    def __str__(self) -> str:
        return "(" + ", ".join(str(f) for f in self.fields) + ")"
