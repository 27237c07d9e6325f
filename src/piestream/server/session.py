"""A SQL session: parses statements and runs them against a `Database`.

Statement semantics follow PostgreSQL and RisingWave: DDL changes the catalog and the running
stream graph atomically (a failed statement changes nothing), DML becomes change chunks for the
table's streaming job and — by default — returns once the epoch holding it is committed, SELECT
reads one committed snapshot. Errors are `PiestreamError`s carrying SQLSTATEs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from piestream.common.errors import FeatureNotSupported, InternalError, PiestreamError
from piestream.frontend.parser import ast, parse
from piestream.server import ddl, dml, query, utility
from piestream.server.database import Database
from piestream.server.results import QueryResult, command

DEFAULT_SETTINGS: dict[str, str] = {
    "application_name": "",
    "client_encoding": "UTF8",
    "client_min_messages": "notice",
    "datestyle": "ISO, MDY",
    "default_transaction_isolation": "read committed",
    "extra_float_digits": "1",
    "implicit_flush": "true",
    "integer_datetimes": "on",
    "intervalstyle": "postgres",
    "is_superuser": "on",
    "search_path": "public",
    "server_encoding": "UTF8",
    "server_version": "13.14.0",
    "server_version_num": "130014",
    "standard_conforming_strings": "on",
    "statement_timeout": "0",
    "streaming_parallelism": "",
    "timezone": "UTC",
    "transaction_isolation": "read committed",
}


class Session:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.settings = dict(DEFAULT_SETTINGS)
        self.settings["streaming_parallelism"] = str(db.config.parallelism)
        self.in_transaction = False

    # -- settings -------------------------------------------------------------------------------
    def setting(self, name: str) -> str:
        return self.settings.get(name.lower(), "")

    @property
    def parallelism(self) -> int:
        v = self.settings.get("streaming_parallelism") or str(self.db.config.parallelism)
        return max(1, int(v)) if v.isdigit() else self.db.config.parallelism

    @property
    def implicit_flush(self) -> bool:
        return self.settings.get("implicit_flush", "true").lower() in ("true", "on", "1", "yes")

    # -- execution ------------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[QueryResult]:
        """Run every statement of a script; stops at the first error (earlier ones stand)."""
        return [self.execute_statement(s, params) for s in parse(sql)]

    def execute_one(self, sql: str, params: Sequence[Any] = ()) -> QueryResult:
        results = self.execute(sql, params)
        if len(results) != 1:
            raise PiestreamError(f"expected one statement, got {len(results)}", sqlstate="42601")
        return results[0]

    def execute_statement(self, stmt: ast.Statement, params: Sequence[Any] = ()) -> QueryResult:
        try:
            return self._dispatch(stmt, params)
        except PiestreamError:
            raise
        except Exception as e:  # a bug must still reach the client as an error, not kill it
            raise InternalError(f"internal error: {type(e).__name__}: {e}") from e

    def _dispatch(self, stmt: ast.Statement, params: Sequence[Any]) -> QueryResult:
        if isinstance(stmt, ast.Query):
            return query.run_select(self, stmt, params)
        if isinstance(stmt, ast.Insert):
            return dml.insert(self, stmt, params)
        if isinstance(stmt, ast.Update):
            return dml.update(self, stmt, params)
        if isinstance(stmt, ast.Delete):
            return dml.delete(self, stmt, params)
        if isinstance(stmt, ast.CreateTable):
            return ddl.create_table(self, stmt)
        if isinstance(stmt, ast.CreateMaterializedView):
            return ddl.create_materialized_view(self, stmt)
        if isinstance(stmt, ast.CreateView):
            return ddl.create_view(self, stmt)
        if isinstance(stmt, ast.CreateIndex):
            return ddl.create_index(self, stmt)
        if isinstance(stmt, ast.Drop):
            return ddl.drop(self, stmt)
        if isinstance(stmt, ast.Flush):
            self.db.barriers.flush()
            return command("FLUSH")
        if isinstance(stmt, ast.Explain):
            return utility.explain(self, stmt, params)
        if isinstance(stmt, ast.SetVariable | ast.ResetAll | ast.ShowVariable):
            return utility.variables(self, stmt)
        if isinstance(stmt, ast.ShowObjects | ast.ShowCreate | ast.Describe):
            return utility.show(self, stmt)
        if isinstance(stmt, ast.Begin):
            self.in_transaction = True
            return command("BEGIN")
        if isinstance(stmt, ast.Commit):
            self.in_transaction = False
            return command("COMMIT")
        if isinstance(stmt, ast.Rollback):
            self.in_transaction = False
            return command("ROLLBACK")
        if isinstance(stmt, ast.Discard):
            self.settings = dict(DEFAULT_SETTINGS)
            return command("DISCARD ALL")
        if isinstance(stmt, ast.CreateSource | ast.CreateSink):
            return ddl.create_connector_object(self, stmt)
        raise FeatureNotSupported(f"{type(stmt).__name__} is not supported")
