"""A SQL session: parses statements and runs them against a `Database`.

Statement semantics follow PostgreSQL and RisingWave: DDL changes the catalog and the running
stream graph atomically (a failed statement changes nothing), DML becomes change chunks for the
table's streaming job and — by default — returns once the epoch holding it is committed, SELECT
reads one committed snapshot. Errors are `PiestreamError`s carrying SQLSTATEs.

Each statement kind has one handler (`HANDLERS`, a table like the parser dialect's), so adding a
statement is adding a row, not another branch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from piestream.common.errors import FeatureNotSupported, PiestreamError, client_error
from piestream.frontend.parser import ast, parse
from piestream.server import connector_handlers, ddl_handlers, dml, query, utility
from piestream.server.results import QueryResult, command
from piestream.server.settings import DEFAULT_SETTINGS

if TYPE_CHECKING:
    from piestream.server.database import Database

log = logging.getLogger(__name__)


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
            handler = HANDLERS.get(type(stmt))
            if handler is None:
                raise FeatureNotSupported(f"{type(stmt).__name__} is not supported")
            return handler(self, stmt, params)
        except PiestreamError:
            raise
        except Exception as e:  # a bug must still reach the client as an error, not kill it
            err = client_error(e)
            if err.sqlstate == "XX000":  # not a statement too deep to bind (54001)
                log.exception("statement failed with an internal error")
            raise err from e

    # -- session-level statements ---------------------------------------------------------------
    def _flush(self, stmt: ast.Statement, params: Sequence[Any]) -> QueryResult:
        self.db.barriers.flush()
        return command("FLUSH")

    def _transaction(self, stmt: ast.Statement, params: Sequence[Any]) -> QueryResult:
        """BEGIN / COMMIT / ROLLBACK: statements run in autocommit; the flag is for clients."""
        self.in_transaction = isinstance(stmt, ast.Begin)
        return command({ast.Begin: "BEGIN", ast.Commit: "COMMIT", ast.Rollback: "ROLLBACK"}[type(stmt)])

    def _discard(self, stmt: ast.Statement, params: Sequence[Any]) -> QueryResult:
        self.settings = dict(DEFAULT_SETTINGS)
        return command("DISCARD ALL")


Handler = Callable[[Session, Any, Sequence[Any]], QueryResult]


def _create_table(s: Session, stmt: ast.CreateTable, params: Sequence[Any]) -> QueryResult:
    if stmt.with_options.get("connector"):
        return connector_handlers.create_connector_table(s, stmt, params)
    return ddl_handlers.create_table(s, stmt, params)


#: The handler of each statement kind.
HANDLERS: dict[type[ast.Statement], Handler] = {
    ast.Query: query.run_select,
    ast.Insert: dml.insert,
    ast.Update: dml.update,
    ast.Delete: dml.delete,
    ast.CreateTable: _create_table,
    ast.CreateMaterializedView: ddl_handlers.create_materialized_view,
    ast.CreateView: ddl_handlers.create_view,
    ast.CreateIndex: ddl_handlers.create_index,
    ast.CreateSource: connector_handlers.create_source,
    ast.CreateSink: connector_handlers.create_sink,
    ast.Drop: ddl_handlers.drop,
    ast.Explain: utility.explain,
    ast.SetVariable: utility.variables,
    ast.ResetAll: utility.variables,
    ast.ShowVariable: utility.variables,
    ast.ShowObjects: utility.show,
    ast.ShowCreate: utility.show,
    ast.Describe: utility.show,
    ast.Flush: Session._flush,
    ast.Begin: Session._transaction,
    ast.Commit: Session._transaction,
    ast.Rollback: Session._transaction,
    ast.Discard: Session._discard,
}
