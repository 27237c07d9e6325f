"""PostgreSQL identifier normalization.

Unquoted identifiers fold to lower case, ASCII letters only (PostgreSQL leaves other letters
alone); quoted identifiers are taken verbatim. Every name the parser hands out goes through here,
so catalog lookups can compare names with ``==``.
"""

from __future__ import annotations

import re

from sqlglot import exp

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """Fold an unquoted identifier the way PostgreSQL does."""
    return name.translate(_ASCII_LOWER)


#: The schema every database has, where relations go by default (PostgreSQL's).
DEFAULT_SCHEMA = "public"

_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")


def quote_ident(name: str) -> str:
    """`name` as an identifier that reads back as itself (PostgreSQL's quote_ident)."""
    return name if _PLAIN_NAME.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def identifier_name(node: exp.Expression | None) -> str:
    """The normalized name of an identifier (or of a column / table reference's last part)."""
    if isinstance(node, exp.Identifier):
        return node.name if node.quoted else fold(node.name)
    if isinstance(node, (exp.Column, exp.Table)):
        return identifier_name(node.this)
    if node is None:
        return ""
    return fold(node.name)


class ObjectName(str):
    """A relation's name as written: one, two or three parts (``t``, ``s.t``, ``db.s.t``).

    The string itself is the object's own name (the last part): what the catalog stores as a
    relation's name and what messages quote, so code that only needs the name reads it as a
    ``str``. `schema` and `database` are the qualifiers the user wrote (None: not written); the
    catalog (`CatalogSnapshot.get_relation`) resolves an unqualified name through search_path.
    """

    schema: str | None
    database: str | None

    def __new__(cls, name: str, schema: str | None = None, database: str | None = None) -> ObjectName:
        obj = super().__new__(cls, name)
        obj.schema = schema
        obj.database = database
        return obj

    @classmethod
    def of(cls, parts: list[str]) -> ObjectName:
        """From the normalized parts as written (1 to 3)."""
        if not 1 <= len(parts) <= 3:
            from piestream.common.errors import SyntaxError_

            raise SyntaxError_(f"improper qualified name (too many dotted names): {'.'.join(parts)}")
        *quals, name = parts
        return cls(name, quals[-1] if quals else None, quals[0] if len(quals) == 2 else None)

    @property
    def qualified(self) -> str:
        """The name with the qualifiers written (for messages: ``s.t``)."""
        return ".".join(p for p in (self.database, self.schema, str(self)) if p is not None)

    def to_table(self) -> exp.Table:
        """A FROM item naming it exactly (quoted parts: the names are normalized already)."""
        parts = [
            exp.to_identifier(p, quoted=True) if p is not None else None for p in (self.database, self.schema)
        ]
        return exp.table_(exp.to_identifier(str(self), quoted=True), parts[1], parts[0])

    def __reduce__(self) -> tuple[object, ...]:
        return (ObjectName, (str(self), self.schema, self.database))


def object_name(name: str) -> ObjectName:
    """`name` as an `ObjectName` (a plain string is an unqualified name)."""
    return name if isinstance(name, ObjectName) else ObjectName(name)


def schema_of(name: str) -> str | None:
    """The schema written with `name` (None for a plain string or an unqualified name)."""
    return object_name(name).schema


def table_name(node: exp.Table) -> ObjectName:
    """A table reference's normalized name with its qualifiers."""
    parts = [node.args.get(k) for k in ("catalog", "db", "this")]
    return ObjectName.of([identifier_name(p) for p in parts if p is not None])
