"""A SQL session: parses statements and runs them against a `Database`.

Statement semantics follow PostgreSQL and RisingWave: DDL changes the catalog and the running
stream graph atomically (a failed statement changes nothing), DML becomes change chunks for the
table's streaming job and — by default — returns once the epoch holding it is committed, SELECT
reads one committed snapshot. Errors are `PiestreamError`s carrying SQLSTATEs.

Inside a transaction block (`server.transaction`) writes are buffered and COMMIT lands them in one
epoch; an error puts the block in the failed state (25P02 for every statement but ROLLBACK /
ROLLBACK TO SAVEPOINT, as in PostgreSQL); DDL other than CREATE TABLE is refused there (25001).

Each statement kind has one handler (`HANDLERS`, a table like the parser dialect's), so adding a
statement is adding a row, not another branch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from piestream.common.errors import (
    ActiveSqlTransaction,
    FeatureNotSupported,
    InFailedSqlTransaction,
    NoActiveSqlTransaction,
    PiestreamError,
    client_error,
)
from piestream.frontend.catalog import CatalogSnapshot
from piestream.frontend.parser import ast, parse
from piestream.server import (
    connector_handlers,
    copy,
    cursors,
    ddl_handlers,
    dml,
    function_handlers,
    query,
    subscriptions,
    utility,
)
from piestream.server.results import QueryResult, command
from piestream.server.settings import DEFAULT_SETTINGS
from piestream.server.transaction import Transaction, parse_bytes

if TYPE_CHECKING:
    from piestream.server.database import Database

log = logging.getLogger(__name__)


class Session:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.settings = dict(DEFAULT_SETTINGS)
        self.settings["streaming_parallelism"] = str(db.config.parallelism)
        self.txn: Transaction | None = None  # the open transaction block
        self.cursors: dict[str, cursors.Cursor] = {}
        #: sends a NOTICE to the client at once, while a statement still runs (pgwire sets it)
        self.notice: Callable[[str], None] | None = None

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

    @property
    def buffer_limit(self) -> int:
        """transaction_buffer_limit in bytes (0: no limit)."""
        return parse_bytes(self.setting("transaction_buffer_limit"), "transaction_buffer_limit")

    # -- transaction state --------------------------------------------------------------------------
    @property
    def in_transaction(self) -> bool:
        return self.txn is not None

    @property
    def transaction_status(self) -> str:
        """ReadyForQuery's status: "I" idle, "T" in a transaction block, "E" in a failed one."""
        if self.txn is None:
            return "I"
        return "E" if self.txn.failed else "T"

    def fail_transaction(self) -> None:
        """An error happened (here or in the protocol layer): the block only takes ROLLBACK now."""
        if self.txn is not None:
            self.txn.failed = True

    def catalog(self) -> CatalogSnapshot:
        """The catalog this session sees: the committed one plus the tables its transaction created."""
        snap = self.db.catalog.snapshot()
        if self.txn is not None:
            for rel in self.txn.created:
                snap.add(rel)
        return snap

    def close(self) -> None:
        """The client left: an open transaction is rolled back."""
        self._end_transaction()

    def _end_transaction(self, *, committed: bool = False) -> None:
        txn, self.txn = self.txn, None
        if txn is not None:
            txn.close()
            cursors.end_of_block(self.cursors, committed)

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
            if self.txn is not None:
                _check_in_block(self.txn, stmt)
            handler = HANDLERS.get(type(stmt))
            if handler is None:
                raise FeatureNotSupported(f"{type(stmt).__name__} is not supported")
            return handler(self, stmt, params)
        except PiestreamError:
            self.fail_transaction()
            raise
        except Exception as e:  # a bug must still reach the client as an error, not kill it
            self.fail_transaction()
            err = client_error(e)
            if err.sqlstate == "XX000":  # not a statement too deep to bind (54001)
                log.exception("statement failed with an internal error")
            raise err from e

    # -- session-level statements ---------------------------------------------------------------
    def _flush(self, stmt: ast.Statement, params: Sequence[Any]) -> QueryResult:
        self.db.barriers.flush()
        return command("FLUSH")

    def _begin(self, stmt: ast.Begin, params: Sequence[Any]) -> QueryResult:
        if self.txn is not None:
            return _notice(command("BEGIN"), "there is already a transaction in progress")
        read_only = self.setting("default_transaction_read_only").lower() in ("on", "true", "1", "yes")
        txn = Transaction(self.db, read_only=read_only)
        _check_isolation(self.setting("default_transaction_isolation"))
        _apply_modes(txn, stmt.modes)
        self.txn = txn
        return command("BEGIN")

    def _set_transaction(self, stmt: ast.SetTransaction, params: Sequence[Any]) -> QueryResult:
        if self.txn is None:
            return _notice(command("SET"), "SET TRANSACTION can only be used in transaction blocks")
        _apply_modes(self.txn, stmt.modes)
        return command("SET")

    def _commit(self, stmt: ast.Commit, params: Sequence[Any]) -> QueryResult:
        txn = self.txn
        if txn is None:
            return _notice(command("COMMIT"), "there is no transaction in progress")
        committed = False
        try:
            if txn.failed:
                return command("ROLLBACK")  # PostgreSQL: COMMIT of a failed block rolls it back
            txn.commit()
            committed = True
            return command("COMMIT")
        finally:
            self._end_transaction(committed=committed)  # committed, refused or failed: the block is over

    def _rollback(self, stmt: ast.Rollback, params: Sequence[Any]) -> QueryResult:
        if self.txn is None:
            return _notice(command("ROLLBACK"), "there is no transaction in progress")
        self._end_transaction()
        return command("ROLLBACK")

    def _savepoint(self, stmt: ast.Savepoint, params: Sequence[Any]) -> QueryResult:
        self._block("SAVEPOINT").savepoint(stmt.name)
        return command("SAVEPOINT")

    def _release(self, stmt: ast.ReleaseSavepoint, params: Sequence[Any]) -> QueryResult:
        self._block("RELEASE SAVEPOINT").release(stmt.name)
        return command("RELEASE")

    def _rollback_to(self, stmt: ast.RollbackToSavepoint, params: Sequence[Any]) -> QueryResult:
        self._block("ROLLBACK TO SAVEPOINT").rollback_to(stmt.name)
        return command("ROLLBACK")

    def _block(self, what: str) -> Transaction:
        if self.txn is None:
            raise NoActiveSqlTransaction(f"{what} can only be used in transaction blocks")
        return self.txn

    def _discard(self, stmt: ast.Statement, params: Sequence[Any]) -> QueryResult:
        self.settings = dict(DEFAULT_SETTINGS)
        return command("DISCARD ALL")


Handler = Callable[[Session, Any, Sequence[Any]], QueryResult]

#: Statements a failed transaction block still takes.
_END_FAILED = (ast.Commit, ast.Rollback, ast.RollbackToSavepoint)

#: Statements that cannot be part of a transaction: they start or stop streaming jobs (or drop
#: objects) on their own, so ROLLBACK could not undo them. CREATE TABLE can (it lands at COMMIT).
_NOT_IN_BLOCK: dict[type[ast.Statement], str] = {
    ast.CreateMaterializedView: "CREATE MATERIALIZED VIEW",
    ast.CreateView: "CREATE VIEW",
    ast.CreateIndex: "CREATE INDEX",
    ast.CreateSource: "CREATE SOURCE",
    ast.CreateSink: "CREATE SINK",
    ast.Drop: "DROP",
    ast.Discard: "DISCARD",
}


def _check_in_block(txn: Transaction, stmt: ast.Statement) -> None:
    if txn.failed and not isinstance(stmt, _END_FAILED):
        raise InFailedSqlTransaction(
            "current transaction is aborted, commands ignored until end of transaction block"
        )
    what = _NOT_IN_BLOCK.get(type(stmt))
    if what is None and isinstance(stmt, ast.CreateTable) and stmt.with_options.get("connector"):
        what = "CREATE TABLE with a connector"
    if what is not None:
        raise ActiveSqlTransaction(
            f"{what} cannot run inside a transaction block",
            hint="Run it outside BEGIN ... COMMIT (with autocommit on): piestream cannot roll it "
            "back. Inside a transaction block, CREATE TABLE and INSERT / UPDATE / DELETE are atomic.",
        )


def _check_isolation(level: str) -> None:
    """READ UNCOMMITTED / READ COMMITTED / REPEATABLE READ all run as REPEATABLE READ (stricter is
    allowed by the SQL standard); SERIALIZABLE would be weaker than asked, so it is refused."""
    if level.strip("'").lower() == "serializable":
        raise FeatureNotSupported(
            "SERIALIZABLE isolation is not supported",
            hint="Transactions run at REPEATABLE READ (snapshot isolation, first committer wins).",
        )


def _apply_modes(txn: Transaction, modes: Sequence[str]) -> None:
    for mode in modes:
        if mode.startswith("isolation level "):
            _check_isolation(mode.removeprefix("isolation level "))
        elif mode == "read only":
            txn.read_only = True
        elif mode == "read write":
            txn.read_only = False


def _notice(result: QueryResult, message: str) -> QueryResult:
    result.notices.append(message)
    return result


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
    ast.CreateSubscription: subscriptions.create_subscription,
    ast.DeclareSubscriptionCursor: subscriptions.declare_cursor,
    ast.DeclareCursor: cursors.declare,
    ast.Fetch: cursors.fetch,
    ast.CloseCursor: subscriptions.close_cursor,
    ast.Copy: copy.copy_statement,
    ast.Drop: ddl_handlers.drop,
    ast.CreateFunction: function_handlers.create_function,
    ast.DropFunction: function_handlers.drop_function,
    ast.Explain: utility.explain,
    ast.SetVariable: utility.variables,
    ast.ResetAll: utility.variables,
    ast.ShowVariable: utility.variables,
    ast.ShowObjects: utility.show,
    ast.ShowCreate: utility.show,
    ast.Describe: utility.show,
    ast.Flush: Session._flush,
    ast.AlterSystem: utility.alter_system,
    ast.RebuildJob: ddl_handlers.rebuild,
    ast.Begin: Session._begin,
    ast.SetTransaction: Session._set_transaction,
    ast.Commit: Session._commit,
    ast.Rollback: Session._rollback,
    ast.Savepoint: Session._savepoint,
    ast.ReleaseSavepoint: Session._release,
    ast.RollbackToSavepoint: Session._rollback_to,
    ast.Discard: Session._discard,
}
