"""A SQL session: parses statements and runs them against a `Database`.

Statement semantics follow PostgreSQL and RisingWave: DDL changes the catalog and the running
stream graph atomically (a failed statement changes nothing), DML becomes change chunks for the
table's streaming job and — by default — returns once the epoch holding it is committed, SELECT
reads one committed snapshot. Errors are `PiestreamError`s carrying SQLSTATEs.

Inside a transaction block (`server.transaction`) writes are buffered and COMMIT lands them in one
epoch; an error puts the block in the failed state (25P02 for every statement but ROLLBACK /
ROLLBACK TO SAVEPOINT, as in PostgreSQL). CREATE TABLE in a block lands at COMMIT with its rows;
other DDL cannot be rolled back (it starts or stops streaming jobs), so it first commits the
block's changes so far, runs on its own, and the block goes on as a new one (`_outside_block`).

Each statement kind has one handler (`HANDLERS`, a table like the parser dialect's), so adding a
statement is adding a row, not another branch.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from piestream.common.errors import (
    ActiveSqlTransaction,
    FeatureNotSupported,
    InFailedSqlTransaction,
    NoActiveSqlTransaction,
    PiestreamError,
    QueryCanceled,
    ReadOnlySqlTransaction,
    client_error,
)
from piestream.frontend.catalog import (
    DEFAULT_DATABASE,
    DEFAULT_SCHEMA,
    TEMP_SCHEMA,
    CatalogSnapshot,
    parse_search_path,
)
from piestream.frontend.parser import ast, parse
from piestream.frontend.parser.names import quote_ident
from piestream.frontend.planner import PlannedJob
from piestream.meta.rescale import can_rescale
from piestream.server import (
    alter_handlers,
    cdc_handlers,
    connector_handlers,
    copy,
    cursors,
    ddl_handlers,
    dml,
    function_handlers,
    locks,
    privileges,
    query,
    subscriptions,
    utility,
)
from piestream.server.ddl_handlers import drop_temporary
from piestream.server.results import QueryResult, command
from piestream.server.settings import DEFAULT_SETTINGS, parallelism_setting
from piestream.server.transaction import Transaction, parse_bytes

if TYPE_CHECKING:
    from piestream.server.database import Database

log = logging.getLogger(__name__)


class Session:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.settings = dict(DEFAULT_SETTINGS)
        fixed = db.config.parallelism
        self.settings["streaming_parallelism"] = "adaptive" if fixed is None else str(fixed)
        self.txn: Transaction | None = None  # the open transaction block
        #: the role the session runs as (pgwire sets it at login); None: the embedded owner of the
        #: data directory (Python API), who may do everything
        self.user: str | None = None
        self.pending_owned: list[str] = []  # relations created in the open block (owned at COMMIT)
        self.cursors: dict[str, cursors.Cursor] = {}
        self.database = DEFAULT_DATABASE  # the client's (pgwire sets it): three-part names name it
        #: where CREATE TEMP TABLE / VIEW put relations; they are dropped when the session ends
        self.temp_schema = f"{TEMP_SCHEMA}_{uuid.uuid4().hex[:12]}"
        #: sends a NOTICE to the client at once, while a statement still runs (pgwire sets it)
        self.notice: Callable[[str], None] | None = None
        #: set when the client cancels the running statement (pgwire sets it per statement): a
        #: statement waiting for a table lock gives up
        self.interrupt: threading.Event | None = None

    # -- settings -------------------------------------------------------------------------------
    def setting(self, name: str) -> str:
        return self.settings.get(name.lower(), "")

    def set_config(self, name: str, value: str) -> None:
        """set_config(name, value, false) from a catalog query: as ``SET name = 'value'``."""
        # search_path's value is a list: 'a, b' names two schemas, as SET search_path = a, b
        parts = [p.strip() for p in value.split(",")] if name.lower() == "search_path" else [value]
        literals = ", ".join("'" + p.replace("'", "''") + "'" for p in parts)
        utility.variables(self, parse(f"SET {quote_ident(name.lower())} = {literals}")[0], ())

    @property
    def adaptive(self) -> bool:
        """Whether a streaming job created now is ADAPTIVE (RisingWave's default): unless
        `streaming_parallelism` is set to a number in the session, or the server was started with
        ``--parallelism`` (`DatabaseConfig.parallelism`) and the session leaves it unset."""
        return self._fixed_parallelism() is None

    @property
    def parallelism(self) -> int:
        """The actors a streaming job created now gets: the fixed number, or for an ADAPTIVE
        one the cluster's task slots (`Database.cluster_slots`)."""
        fixed = self._fixed_parallelism()
        return fixed if fixed is not None else self.db.cluster_slots()

    def with_policy(self, planned: PlannedJob, adaptive: bool | None = None) -> PlannedJob:
        """`planned` with its relation ADAPTIVE if jobs created now are (`adaptive`; or the
        statement says so) and its fragments can be rescaled at all
        (`meta.rescale.can_rescale`), else FIXED."""
        adaptive = (self.adaptive if adaptive is None else adaptive) and can_rescale(planned.job.fragments)
        planned.relation = replace(planned.relation, adaptive=adaptive)
        return planned

    def _fixed_parallelism(self) -> int | None:
        v = self.settings.get("streaming_parallelism", "")
        if v.strip():
            return parallelism_setting(v)
        return self.db.config.parallelism

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

    def interrupted(self) -> PiestreamError | None:
        """The error a waiting statement ends with when the client cancelled it, else None."""
        if self.interrupt is not None and self.interrupt.is_set():
            return QueryCanceled("canceling statement due to user request")
        return None

    def fail_transaction(self) -> None:
        """An error happened (here or in the protocol layer): the block only takes ROLLBACK now."""
        if self.txn is not None:
            self.txn.failed = True

    def committed_catalog(self) -> CatalogSnapshot:
        """The committed catalog, resolving names as this session does (its search_path and
        database): what a new streaming job binds against."""
        snap = self.db.catalog.snapshot()
        snap.database = self.database
        path = parse_search_path(self.setting("search_path"), self.user or "")
        snap.search_path = privileges.usable_search_path(self, path)
        snap.temp_schema = self.temp_schema
        snap.schemas.add(self.temp_schema)
        return snap

    def schema_oids(self) -> dict[str, int]:
        """The database's schemas by name, with their pg_namespace oids (public's is 2200)."""
        from piestream.server.catalog.objects import OID_OFFSET, PUBLIC_NS, TEMP_NAMESPACE_OIDS

        oids = {DEFAULT_SCHEMA: PUBLIC_NS} | {c.name: c.id + OID_OFFSET for c in self.db.catalog.schemas()}
        temp = sorted({r.schema_name for r in self.db.catalog.snapshot().relations()} - set(oids))
        return oids | {name: TEMP_NAMESPACE_OIDS + i for i, name in enumerate(temp)}  # sessions

    def catalog(self) -> CatalogSnapshot:
        """The catalog this session sees: the committed one plus the tables its transaction created."""
        snap = self.committed_catalog()
        if self.txn is not None:
            for rel in self.txn.created:
                snap.add(rel)
        return snap

    def close(self) -> None:
        """The client left: an open transaction is rolled back, its temporary relations go."""
        self._end_transaction()
        self.db.locks.release(id(self))
        drop_temporary(self.db, self.temp_schema)

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
            committed = None
            if self.txn is not None:
                _check_in_block(self.txn, stmt)
                committed = self._outside_block(stmt)
            handler = HANDLERS.get(type(stmt))
            if handler is None:
                raise FeatureNotSupported(f"{type(stmt).__name__} is not supported")
            privileges.check_statement(self, stmt)
            implicit = locks.implicit_locks(stmt)
            if implicit is not None:
                locks.take(self, *implicit)
            existed = privileges.existing(self, stmt)
            result = handler(self, stmt, params)
            privileges.after_statement(self, stmt, existed)
            if committed is not None:
                result.notices.insert(0, committed)
            return result
        except PiestreamError:
            self.fail_transaction()
            raise
        except Exception as e:  # a bug must still reach the client as an error, not kill it
            self.fail_transaction()
            err = client_error(e)
            if err.sqlstate == "XX000":  # not a statement too deep to bind (54001)
                log.exception("statement failed with an internal error")
            raise err from e
        finally:
            self.db.locks.release(id(self), statement_only=True)

    def _outside_block(self, stmt: ast.Statement) -> str | None:
        """DDL that cannot be part of a transaction inside a block: COMMIT what the block did so
        far (one epoch, as COMMIT does: nothing is lost, nothing lands half), then the DDL runs
        on its own and a new block (same modes) takes the statements after it. PostgreSQL runs
        DDL in the transaction; drivers (psycopg2, dbt, pandas, SQLAlchemy) open a block before
        every statement, so refusing it would refuse their DDL. Returns the notice saying that
        changes were committed (None if the block had none)."""
        txn = self.txn
        what = _DDL_COMMITS_BLOCK.get(type(stmt))
        if (
            what is None
            and isinstance(stmt, ast.CreateTable)
            and (stmt.with_options.get("connector") or stmt.from_source)
        ):
            what = "CREATE TABLE with a connector"
        if txn is None or what is None:
            return None
        if txn.read_only:
            raise ReadOnlySqlTransaction(f"cannot execute {what} in a read-only transaction")
        pending = txn.has_changes
        txn.commit()
        self._end_transaction()
        self.txn = Transaction(self.db)
        return f"{what} committed the transaction block's earlier changes first" if pending else None

    # -- session-level statements ---------------------------------------------------------------
    def _flush(self, stmt: ast.Statement, params: Sequence[Any]) -> QueryResult:
        self.db.follow_slots(force=True)  # as the barrier loop does between epochs
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
            self.db.locks.release(id(self))

    def _rollback(self, stmt: ast.Rollback, params: Sequence[Any]) -> QueryResult:
        if self.txn is None:
            return _notice(command("ROLLBACK"), "there is no transaction in progress")
        self._end_transaction()
        self.db.locks.release(id(self))
        return command("ROLLBACK")

    def _lock(self, stmt: ast.LockTable, params: Sequence[Any]) -> QueryResult:
        """LOCK TABLE: held until the block ends (`server.locks`); only inside a block, as in
        PostgreSQL (a lock that ended with its statement would protect nothing)."""
        self._block("LOCK TABLE")
        locks.take(self, stmt.mode, list(stmt.names), block=True, nowait=stmt.nowait, missing_ok=False)
        return command("LOCK TABLE")

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

#: DDL that cannot be part of a transaction: it starts or stops streaming jobs (or drops
#: objects) on its own, so ROLLBACK could not undo it. Inside a block it commits the block first
#: (`Session._outside_block`). CREATE TABLE can be part of one (it lands at COMMIT).
_DDL_COMMITS_BLOCK: dict[type[ast.Statement], str] = {
    **{k: tag for k, tag in ddl_handlers.CREATE_TAGS.items() if k is not ast.CreateTable},
    ast.CreateSchema: "CREATE SCHEMA",
    ast.DropSchema: "DROP SCHEMA",
    ast.Drop: "DROP",
    ast.RebuildJob: "ALTER MATERIALIZED VIEW",
    ast.AlterAddColumn: "ALTER TABLE",
    ast.AlterDropColumn: "ALTER TABLE",
    ast.AlterRename: "ALTER",
    ast.AlterParallelism: "ALTER",
    ast.CommentOn: "COMMENT",
    ast.CreateRole: "CREATE ROLE",
    ast.AlterRole: "ALTER ROLE",
    ast.DropRole: "DROP ROLE",
    ast.Grant: "GRANT / REVOKE",
    ast.AlterOwner: "ALTER ... OWNER TO",
}

#: Statements refused inside a block, as PostgreSQL refuses them.
_NOT_IN_BLOCK: dict[type[ast.Statement], str] = {ast.Discard: "DISCARD ALL"}


def _check_in_block(txn: Transaction, stmt: ast.Statement) -> None:
    if txn.failed and not isinstance(stmt, _END_FAILED):
        raise InFailedSqlTransaction(
            "current transaction is aborted, commands ignored until end of transaction block"
        )
    what = _NOT_IN_BLOCK.get(type(stmt))
    if what is not None:
        raise ActiveSqlTransaction(f"{what} cannot run inside a transaction block")


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
    if stmt.from_source is not None:
        stmt = cdc_handlers.table_from_source(s, stmt)
    if stmt.with_options.get("connector"):
        return connector_handlers.create_connector_table(s, stmt, params)
    if stmt.includes:
        raise FeatureNotSupported("INCLUDE is not supported on a table without a connector")
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
    ast.CreateSchema: ddl_handlers.create_schema,
    ast.DropSchema: ddl_handlers.drop_schema,
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
    ast.AlterSourceRateLimit: utility.alter_source_rate_limit,
    ast.RebuildJob: ddl_handlers.rebuild,
    ast.AlterAddColumn: alter_handlers.add_column,
    ast.AlterRename: alter_handlers.rename,
    ast.AlterParallelism: alter_handlers.set_parallelism,
    ast.AlterDropColumn: alter_handlers.drop_column,
    ast.Truncate: alter_handlers.truncate,
    ast.CommentOn: alter_handlers.comment_on,
    ast.Begin: Session._begin,
    ast.SetTransaction: Session._set_transaction,
    ast.Commit: Session._commit,
    ast.Rollback: Session._rollback,
    ast.Savepoint: Session._savepoint,
    ast.ReleaseSavepoint: Session._release,
    ast.RollbackToSavepoint: Session._rollback_to,
    ast.Discard: Session._discard,
    ast.LockTable: Session._lock,
    ast.CreateRole: privileges.create_role,
    ast.AlterRole: privileges.alter_role,
    ast.DropRole: privileges.drop_role,
    ast.Grant: privileges.grant,
    ast.AlterOwner: privileges.alter_owner,
}
