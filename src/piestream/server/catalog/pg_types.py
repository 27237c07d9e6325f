"""pg_type: PostgreSQL's oids and names for piestream's types, as format_type spells them.

Scalar types and their arrays get PostgreSQL's built-in oids; types with no PostgreSQL
counterpart (each distinct STRUCT, lists of lists) get made-up oids on first sight, so every
column's ``atttypid`` resolves to a name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from piestream.common.types import SCALAR_TYPES, DataType, TypeKind, list_of
from piestream.server.catalog.objects import PG_CATALOG_NS, SUPERUSER_OID

#: PostgreSQL types that are not piestream types but appear in the catalogs: (oid, name, len, category)
_EXTRA_TYPES: list[tuple[int, str, int, str, str]] = [
    (19, "name", 64, "S", "name"),
    (25, "text", -1, "S", "text"),
    (18, "char", 1, "S", '"char"'),
    (26, "oid", 4, "N", "oid"),
    (22, "int2vector", -1, "A", "int2vector"),
    (30, "oidvector", -1, "A", "oidvector"),
    (114, "json", -1, "U", "json"),
    (705, "unknown", -2, "X", "unknown"),
    (1042, "bpchar", -1, "S", "character"),
    (2205, "regclass", 4, "N", "regclass"),
    (2206, "regtype", 4, "N", "regtype"),
    (24, "regproc", 4, "N", "regproc"),
    (2950, "uuid", 16, "U", "uuid"),
    (2277, "anyarray", -1, "P", "anyarray"),
    (2249, "record", -1, "P", "record"),
    (1009, "_text", -1, "A", "text[]"),
    (1003, "_name", -1, "A", "name[]"),
]
#: Types whose I/O functions PostgreSQL spells with an underscore (date_in, numeric_recv);
#: clients (ADBC's type resolver) pick their decoders by `typreceive`.
_UNDERSCORE_IO = frozenset(
    (
        "date",
        "time",
        "timestamp",
        "timestamptz",
        "interval",
        "numeric",
        "uuid",
        "json",
        "jsonb",
        "anyarray",
        "record",
    )
)


def _io_functions(name: str) -> tuple[str, str, str, str]:
    """(typinput, typoutput, typreceive, typsend) as PostgreSQL names them."""
    base = "array_" if name.startswith("_") else (f"{name}_" if name in _UNDERSCORE_IO else name)
    return f"{base}in", f"{base}out", f"{base}recv", f"{base}send"


_CATEGORY = {
    TypeKind.BOOLEAN: "B",
    TypeKind.VARCHAR: "S",
    TypeKind.BYTEA: "U",
    TypeKind.DATE: "D",
    TypeKind.TIME: "D",
    TypeKind.TIMESTAMP: "D",
    TypeKind.TIMESTAMPTZ: "D",
    TypeKind.INTERVAL: "T",
    TypeKind.JSONB: "U",
}


def with_typmod(name: str, typmod: int) -> str:
    """format_type(oid, typmod) for numeric and numeric[]: numeric(p,s), numeric(p,s)[]."""
    if typmod < 4 or name not in ("numeric", "numeric[]"):
        return name
    p, s = (typmod - 4) >> 16, (typmod - 4) & 0xFFFF
    return f"numeric({p},{s})" + name[len("numeric") :]


def _display_name(t: DataType) -> str:
    """format_type's spelling of a piestream type."""
    return str(t)


@dataclass
class TypeRegistry:
    """pg_type rows: PostgreSQL's built-in oids for scalar types and their arrays, and made-up
    oids for each distinct STRUCT / nested type so format_type can spell them."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # oid -> format_type text
    by_type: dict[DataType, int] = field(default_factory=dict)
    by_name: dict[str, int] = field(default_factory=dict)
    _next: int = 900_000

    @classmethod
    def builtin(cls) -> TypeRegistry:
        r = cls()
        for t in SCALAR_TYPES:
            if t.kind is TypeKind.SERIAL:
                continue
            arr = list_of(t)
            r._add(
                t.pg_oid,
                t.pg_typname,
                t.pg_typlen,
                _CATEGORY.get(t.kind, "N"),
                _display_name(t),
                arr.pg_oid,
                0,
            )
            r._add(arr.pg_oid, arr.pg_typname, -1, "A", _display_name(arr), 0, t.pg_oid)
            r.by_type[t] = t.pg_oid
            r.by_type[arr] = arr.pg_oid
        for oid, name, length, cat, display in _EXTRA_TYPES:
            r._add(oid, name, length, cat, display, 0, 0)
        for alias, oid in {
            "int": 23,
            "integer": 23,
            "smallint": 21,
            "bigint": 20,
            "real": 700,
            "float": 701,
            "double precision": 701,
            "boolean": 16,
            "varchar": 1043,
            "character varying": 1043,
            "timestamp": 1114,
            "timestamptz": 1184,
            "decimal": 1700,
            "character": 1042,
            "timestamp without time zone": 1114,
            "timestamp with time zone": 1184,
            "time": 1083,
            "time without time zone": 1083,
            "string": 1043,
        }.items():
            r.by_name.setdefault(alias, oid)
        return r

    def _add(self, oid: int, name: str, length: int, cat: str, display: str, array: int, elem: int) -> None:
        if oid in self.names:
            return
        self.names[oid] = display
        self.by_name.setdefault(name, oid)
        self.by_name.setdefault(display, oid)
        typtype = "p" if cat == "P" else "b"
        self.rows.append(
            (
                oid,
                name,
                PG_CATALOG_NS,
                SUPERUSER_OID,
                length,
                1 if 0 < length <= 8 else 0,
                typtype,
                cat,
                0,
                1,
                ",",
                0,
                elem,
                array,
                *_io_functions(name),
                0,
                -1,
                0,
                100 if cat == "S" else 0,
                0,
                None,
                "i",
                "p",
            )
        )

    def oid_of(self, t: DataType) -> int:
        oid = self.by_type.get(t)
        if oid is None:
            oid = self._next
            self._next += 1
            self._add(oid, str(t), -1, "C" if t.kind is TypeKind.STRUCT else "A", _display_name(t), 0, 0)
            self.by_type[t] = oid
        return oid
