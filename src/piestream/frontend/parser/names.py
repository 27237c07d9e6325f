"""PostgreSQL identifier normalization.

Unquoted identifiers fold to lower case, ASCII letters only (PostgreSQL leaves other letters
alone); quoted identifiers are taken verbatim. Every name the parser hands out goes through here,
so catalog lookups can compare names with ``==``.
"""

from __future__ import annotations

from sqlglot import exp

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """Fold an unquoted identifier the way PostgreSQL does."""
    return name.translate(_ASCII_LOWER)


def identifier_name(node: exp.Expression | None) -> str:
    """The normalized name of an identifier (or of a column / table reference's last part)."""
    if isinstance(node, exp.Identifier):
        return node.name if node.quoted else fold(node.name)
    if isinstance(node, (exp.Column, exp.Table)):
        return identifier_name(node.this)
    if node is None:
        return ""
    return fold(node.name)


def table_name(node: exp.Table) -> str:
    """A table reference's normalized, dot-joined name (``public.t``)."""
    parts = [node.args.get(k) for k in ("catalog", "db", "this")]
    return ".".join(identifier_name(p) for p in parts if p is not None)
