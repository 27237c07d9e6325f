"""From SQL text to runnable statements: engine statements, catalog queries, or nothing.

A Query message may hold several statements; a Parse message holds at most one. Each becomes a
`Prepared`: an engine statement (`ast.Statement`, run by the `Session`), a catalog query (run by
`CatalogViews` over the emulated pg_catalog), or an empty statement. Catalog queries often use
PostgreSQL syntax piestream's parser does not take (psql's ``OPERATOR(pg_catalog.~)``), so when the
whole text does not parse, it is cut at top-level semicolons and each piece is tried on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError, SyntaxError_
from piestream.common.types import DataType
from piestream.frontend.parser import ast, parse, parse_one
from piestream.server.catalog import is_catalog_query, looks_like_catalog


@dataclass
class Prepared:
    """One statement ready to run."""

    text: str
    stmt: ast.Statement | None = None  # an engine statement
    catalog: bool = False  # answered from the emulated pg_catalog
    deallocate: str | None = None  # DEALLOCATE name (or "" for ALL): drops prepared statements
    #: SQL-level ``PREPARE name [(types)] AS query`` of a catalog query: (name, the query)
    sql_prepare: tuple[str, Prepared] | None = None
    #: SQL-level ``EXECUTE name [(literal, ...)]``: (name, the argument values)
    sql_execute: tuple[str, list[Any]] | None = None
    param_types: list[DataType | None] = field(default_factory=list)  # per $n: declared or inferred

    @property
    def empty(self) -> bool:
        return (
            self.stmt is None
            and not self.catalog
            and self.deallocate is None
            and self.sql_prepare is None
            and self.sql_execute is None
        )

    @property
    def returns_rows(self) -> bool:
        """Whether running it yields rows (known without running it)."""
        if self.catalog or self.sql_execute is not None:
            return True
        if isinstance(self.stmt, ast.Fetch):
            return not self.stmt.move
        return isinstance(
            self.stmt,
            ast.Query
            | ast.ShowVariable
            | ast.ShowObjects
            | ast.ShowCreate
            | ast.Describe
            | ast.Explain
            | ast.Fetch,
        )


_PREPARE = re.compile(r"^\s*prepare\s+\"?([\w$]+)\"?\s*(?:\([^)]*\))?\s*as\s+(.*?)\s*;?\s*$", re.I | re.S)
_EXECUTE = re.compile(r"^\s*execute\s+\"?([\w$]+)\"?\s*(?:\((.*)\))?\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_DEALLOCATE = re.compile(r"^\s*deallocate\s+(?:prepare\s+)?(?:(all)|\"?([\w$]+)\"?)\s*;?\s*$", re.IGNORECASE)


def _route(stmt: ast.Statement, text: str, is_user_relation: Callable[[str], bool]) -> Prepared:
    if isinstance(stmt, ast.Query) and is_catalog_query(stmt.query, is_user_relation):
        return Prepared(stmt.text or text, catalog=True)
    return Prepared(stmt.text or text, stmt)


def prepare_script(sql: str, is_user_relation: Callable[[str], bool]) -> list[Prepared]:
    """The statements of a simple-query string (all parsed before any runs, as PostgreSQL does)."""
    try:
        return [_route(s, s.text, is_user_relation) for s in parse(sql)]
    except PiestreamError as first_error:
        pieces = split_statements(sql)
        out: list[Prepared] = []
        for offset, piece in pieces:
            try:
                out.append(prepare_one(piece, is_user_relation))
            except PiestreamError as e:
                if e.position is not None:
                    e.position += offset
                raise e from first_error
        return out


def prepare_one(sql: str, is_user_relation: Callable[[str], bool]) -> Prepared:
    """One statement (Parse message, or one piece of a script); empty text is an empty statement."""
    stripped = strip_comments(sql)
    if not stripped.strip(" \t\r\n;"):
        return Prepared(sql)
    d = _DEALLOCATE.match(stripped)
    if d is not None:
        return Prepared(sql, deallocate="" if d.group(1) else d.group(2))
    sql_level = _sql_prepare_or_execute(sql, stripped, is_user_relation)
    if sql_level is not None:
        return sql_level
    try:
        stmt = parse_one(sql)
    except PiestreamError:
        if looks_like_catalog(sql):
            return Prepared(sql, catalog=True)
        raise
    return _route(stmt, sql, is_user_relation)


def _sql_prepare_or_execute(
    sql: str, stripped: str, is_user_relation: Callable[[str], bool]
) -> Prepared | None:
    """SQL-level PREPARE / EXECUTE, of catalog queries only (pg_dump prepares its per-function
    query); other statements stay 0A000 (the parser's refusal)."""
    m = _PREPARE.match(stripped)
    if m is not None:
        body = prepare_one(m.group(2), is_user_relation)
        if not body.catalog:
            raise FeatureNotSupported("PREPARE is supported for catalog queries only")
        return Prepared(sql, sql_prepare=(m.group(1).lower(), body))
    m = _EXECUTE.match(stripped)
    if m is None:
        return None
    values: list[Any] = []
    if m.group(2) and m.group(2).strip():
        try:
            args = sqlglot.parse_one(f"SELECT {m.group(2)}", read="postgres").expressions
        except sqlglot.errors.SqlglotError as e:
            raise SyntaxError_(f"syntax error in EXECUTE arguments: {str(e).splitlines()[0]}") from None
        for a in args:
            a = a.this if isinstance(a, exp.Cast) else a
            if isinstance(a, exp.Null):
                values.append(None)
            elif isinstance(a, exp.Literal):
                values.append(a.this if a.is_string else int(a.this) if a.this.isdigit() else float(a.this))
            else:
                raise FeatureNotSupported("EXECUTE arguments must be constants")
    return Prepared(sql, sql_execute=(m.group(1).lower(), values))


def strip_comments(sql: str) -> str:
    if "--" not in sql and "/*" not in sql:
        return sql  # nothing to strip: skip the lexer (a batch INSERT's text is long)
    return "".join(text for kind, text in _lex(sql) if kind != "comment")


def split_statements(sql: str) -> list[tuple[int, str]]:
    """Top-level ``;``-separated pieces with their offsets (quotes, comments, $$ respected)."""
    pieces: list[tuple[int, str]] = []
    start = 0
    pos = 0
    for kind, text in _lex(sql):
        if kind == "semicolon":
            piece = sql[start:pos]
            if strip_comments(piece).strip():
                pieces.append((start, piece))
            start = pos + 1
        pos += len(text)
    tail = sql[start:]
    if strip_comments(tail).strip():
        pieces.append((start, tail))
    return pieces


_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _lex(sql: str) -> list[tuple[str, str]]:
    """Coarse tokens: quoted strings / identifiers, comments, ``;`` and everything else."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(sql)
    plain_start = 0

    def flush_plain(end: int) -> None:
        if end > plain_start:
            out.append(("plain", sql[plain_start:end]))

    while i < n:
        ch = sql[i]
        end = -1
        kind = ""
        if ch in {"'", '"'}:
            escape = (
                ch == "'"
                and i > 0
                and sql[i - 1] in "eE"
                and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
            )
            j = i + 1
            while j < n:
                if escape and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:
                        j += 2
                        continue
                    break
                j += 1
            end, kind = min(j + 1, n), "quoted"
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            end, kind = (n if j < 0 else j), "comment"
        elif sql.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            end, kind = j, "comment"
        elif ch == "$" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            m = _DOLLAR.match(sql, i)
            if m is not None:
                close = sql.find(m.group(0), m.end())
                end, kind = (n if close < 0 else close + len(m.group(0))), "quoted"
        elif ch == ";":
            end, kind = i + 1, "semicolon"
        if kind:
            flush_plain(i)
            out.append((kind, sql[i:end]))
            i = end
            plain_start = i
        else:
            i += 1
    flush_plain(n)
    return out


# -- parameters -----------------------------------------------------------------------------------


def max_parameter(sql_or_tree: str | exp.Expression | None) -> int:
    """The highest ``$n`` a statement uses (its parameter count, as PostgreSQL counts it)."""
    if sql_or_tree is None:
        return 0
    if isinstance(sql_or_tree, str):
        text = "".join(t for kind, t in _lex(sql_or_tree) if kind == "plain")
        found = [int(m) for m in re.findall(r"\$(\d+)", text)]
        return max(found, default=0)
    return 0
