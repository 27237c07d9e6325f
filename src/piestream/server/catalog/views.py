"""CatalogViews: one connection's catalog queries, run by SQLite over a copy of the catalogs.

The copy is an in-memory SQLite database built from the piestream catalog (``rows.py``) with
the system functions registered (``sqlite_functions.py``), rebuilt whenever the relations or the
session context change. A query is parsed by sqlglot, typed (``result_types.py``), rewritten for
SQLite (``rewrite.py``) and run; its rows come back in the engine's types.

A catalog query that SQLite cannot run (a column or function the emulation lacks, an SRF beside
GROUP BY, ...) is refused with 0A000, never answered with no rows: "no rows" is what clients
read as "no primary key" or "no index". Set-returning functions (``unnest``,
``generate_subscripts``) in select lists and FROM become ``json_each`` joins (``rewrite``).
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlglot
from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, SyntaxError_
from piestream.frontend.catalog import Relation
from piestream.server.catalog.pg_types import TypeRegistry
from piestream.server.catalog.result_types import convert, describe
from piestream.server.catalog.rewrite import rewrite_for_sqlite
from piestream.server.catalog.rows import CatalogContext, CatalogRows
from piestream.server.catalog.sqlite_functions import SystemFunctions
from piestream.server.catalog.tables import INFO_TABLES, TABLES, create_tables, table_columns
from piestream.server.results import QueryResult

log = logging.getLogger(__name__)

#: ``::regtype[]`` (pgcli's completion queries): sqlglot parses it only schema-qualified
_OID_ARRAY_CAST = re.compile(r"::\s*(regtype|regclass|regproc|regnamespace|regrole)\s*\[\s*\]", re.IGNORECASE)


class CatalogViews:
    """Runs catalog queries for one connection (its own SQLite connection, rebuilt on DDL)."""

    def __init__(self, relations: Callable[[], Iterable[Relation]]) -> None:
        self._relations = relations
        self._conn: sqlite3.Connection | None = None
        self._key: tuple[Any, ...] | None = None
        self.ctx = CatalogContext()
        self.types = TypeRegistry.builtin()
        self._functions = SystemFunctions([], self.types, self.ctx)

    # -- public ---------------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = (), ctx: CatalogContext | None = None) -> QueryResult:
        """Run one catalog query (PostgreSQL SQL text); `params` bind ``$1`` ... as text or values."""
        if ctx is not None:
            self.ctx = ctx
        try:
            tree = sqlglot.parse_one(_OID_ARRAY_CAST.sub(r"::pg_catalog.\1[]", sql), read="postgres")
        except sqlglot.errors.SqlglotError as e:  # ParseError, TokenError (an unterminated string)
            raise SyntaxError_(f"syntax error in catalog query: {str(e).splitlines()[0]}") from None
        if tree is None:
            return QueryResult("SELECT 0")
        if isinstance(tree, exp.Command) or not isinstance(tree, exp.Query):
            raise SyntaxError_("only SELECT is supported over pg_catalog")
        conn = self._connection()
        names, types = describe(tree)
        rewritten = rewrite_for_sqlite(tree)
        self._functions.error = None
        try:
            text = rewritten.sql(dialect="sqlite")
            cur = conn.execute(text, _sqlite_params(params))
            raw_rows = cur.fetchall()
            if cur.description is not None:
                names = [
                    _column_name(d[0], n)
                    for d, n in zip(cur.description, [*names, *[None] * 99], strict=False)
                ]
        except (sqlite3.Error, sqlglot.errors.SqlglotError, ValueError, OverflowError) as e:
            if self._functions.error is not None:
                raise self._functions.error from None
            log.info("catalog query refused (%s): %s", e, sql)
            raise FeatureNotSupported(
                f"this query over pg_catalog is not supported by piestream's catalog emulation ({e})"
            ) from None
        width = len(names)
        types = (types + [None] * width)[:width]
        columns, rows = convert(names, types, raw_rows, self._functions)
        return QueryResult(f"SELECT {len(rows)}", columns, rows)

    # -- building the catalog -------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        rels = sorted(self._relations(), key=lambda r: r.id)
        key = (
            tuple((r.id, r.schema_name, r.name) for r in rels),
            tuple(self.ctx.schemas.items()),
            self.ctx.search_path,
            self.ctx.user,
            self.ctx.database,
            tuple(sorted(self.ctx.settings.items())),
            tuple(self.ctx.activity),
            tuple(f.id for f in self.ctx.functions),
        )
        if self._conn is not None and key == self._key:
            return self._conn
        if self._conn is not None:
            self._conn.close()
        self._conn = self._build(rels)
        self._key = key
        return self._conn

    def _build(self, rels: list[Relation]) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute("ATTACH DATABASE ':memory:' AS pg_catalog")
        conn.execute("ATTACH DATABASE ':memory:' AS information_schema")
        conn.execute("PRAGMA case_sensitive_like = ON")
        create_tables(conn)
        self._functions = SystemFunctions(rels, self.types, self.ctx)
        self._functions.register(conn)
        rows = CatalogRows(rels, self.types, self.ctx)
        for table, data in rows.all().items():
            schema = "information_schema" if table in INFO_TABLES and table not in TABLES else "pg_catalog"
            if data:
                width = len(table_columns(table))
                if len(data[0]) < width:  # the columns after the ones rows.py fills are NULL
                    data = [(*row, *[None] * (width - len(row))) for row in data]
                marks = ",".join("?" * width)
                conn.executemany(f"INSERT INTO {schema}.{table} VALUES ({marks})", data)
        self.types = rows.types
        return conn


def _column_name(sqlite_name: str, parsed: str | None) -> str:
    return parsed if parsed is not None else sqlite_name


def _sqlite_params(params: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for p in params:
        if isinstance(p, bool):
            out.append(int(p))
        elif isinstance(p, int | float | str | bytes) or p is None:
            out.append(p)
        elif isinstance(p, list | tuple):
            out.append("{" + ",".join(str(x) for x in p) + "}")
        else:
            out.append(str(p))
    return out
