"""Statements the parser hands to the binder and the session.

Every statement is a frozen dataclass. Expressions inside them (queries, WHERE clauses, default
and generated column expressions, watermarks) stay sqlglot trees, because the binder binds sqlglot
expressions; everything a DDL statement *declares* (names, types, options, keys) is already plain
Python here, so no consumer has to walk sqlglot's DDL nodes.

Conventions:
- Names are normalized the PostgreSQL way: unquoted identifiers are lower-cased (ASCII only),
  quoted ones keep their spelling. Qualified names are joined with "." (``public.t``).
- Column types are `piestream.common.types.DataType`s.
- Query trees are sqlglot `Select` / `Union` / `Intersect` / `Except` / `Values` (a parenthesized
  query with ORDER BY / LIMIT stays a `Subquery`). Their unquoted identifiers are lower-cased and
  array subscripts are kept as written (1-based, PostgreSQL semantics).
- `text` is the statement's original SQL (from its first to its last token, comments around it
  excluded); `sql_text` fields hold the text of an embedded query, for catalogs that store it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from piestream.common.types import DataType

OnConflict = Literal["do_nothing", "do_update_full", "do_update_if_not_null"]
ObjectKind = Literal["table", "materialized view", "view", "index", "source", "sink", "subscription"]
ShowKind = Literal[
    "tables",
    "materialized views",
    "views",
    "sources",
    "sinks",
    "subscriptions",
    "indexes",
    "columns",
    "schemas",
    "databases",
    "parameters",
]


@dataclass(frozen=True)
class Statement:
    """Base of all statements; `text` is the statement's SQL as the user wrote it."""

    text: str = field(default="", kw_only=True, compare=False, repr=False)


# ---------------------------------------------------------------------------------------------
# Pieces of statements
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnDef:
    """One column of CREATE TABLE / CREATE SOURCE.

    `type` is None only for a generated column written without a type (``c AS a + 1``); its type
    is the expression's. `generated` is the ``AS expr`` expression, `default` the DEFAULT one.
    """

    name: str
    type: DataType | None
    not_null: bool = False
    primary_key: bool = False
    default: exp.Expression | None = None
    generated: exp.Expression | None = None


class Watermark(NamedTuple):
    """``WATERMARK FOR column AS expr``."""

    column: str
    expr: exp.Expression


class IndexColumn(NamedTuple):
    """A key column of CREATE INDEX."""

    name: str
    desc: bool = False


class Assignment(NamedTuple):
    """``column = value`` of UPDATE ... SET."""

    column: str
    value: exp.Expression


@dataclass(frozen=True)
class Include:
    """``INCLUDE key | partition | offset | timestamp | header 'name' [AS column]`` of a message
    source (RisingWave's): a column filled from each message's metadata."""

    kind: str  # key | partition | offset | timestamp | header
    column: str | None = None  # AS column; None = the connector's default name
    header: str | None = None  # the header's name (kind header)


@dataclass(frozen=True)
class FormatEncode:
    """``FORMAT PLAIN ENCODE JSON (options)`` of sources, tables with connectors and sinks."""

    format: str
    encode: str
    options: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Queries and DML
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query(Statement):
    """SELECT / VALUES / set operations / WITH ... SELECT."""

    query: exp.Expression


@dataclass(frozen=True)
class Insert(Statement):
    """``INSERT INTO table [(columns)] {VALUES ... | query} [RETURNING ...]``.

    `source` is an `exp.Values` or a query; `returning` is empty without RETURNING.

    `param_rows` is set for ``VALUES ($1, $2), ($3, $4), ...`` made of bare parameters only (what
    drivers send for a batch of rows; `parse_one` only): the 0-based parameter index of every
    entry, one row per VALUES row. `source` then holds the first row alone: such a list is not
    parsed into a tree (65,535 parameters took seconds in the parser and again in the binder).
    """

    table: str
    columns: list[str] | None
    source: exp.Expression
    returning: list[exp.Expression] = field(default_factory=list)
    param_rows: npt.NDArray[np.int64] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Update(Statement):
    """``UPDATE table [AS alias] SET col = expr, ... [WHERE cond] [RETURNING ...]``."""

    table: str
    assignments: list[Assignment]
    where: exp.Expression | None = None
    returning: list[exp.Expression] = field(default_factory=list)
    alias: str | None = None


@dataclass(frozen=True)
class Delete(Statement):
    """``DELETE FROM table [AS alias] [WHERE cond] [RETURNING ...]``."""

    table: str
    where: exp.Expression | None = None
    returning: list[exp.Expression] = field(default_factory=list)
    alias: str | None = None


# ---------------------------------------------------------------------------------------------
# DDL
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateTable(Statement):
    """CREATE TABLE, with RisingWave's APPEND ONLY / ON CONFLICT / connector options.

    `primary_key` collects both column-level and table-level PRIMARY KEY, in key order.
    `as_query` (with `as_query_text`) is set for CREATE TABLE ... AS query.
    """

    name: str
    columns: list[ColumnDef]
    primary_key: list[str] = field(default_factory=list)
    append_only: bool = False
    on_conflict: OnConflict | None = None
    with_options: dict[str, str] = field(default_factory=dict)
    as_query: exp.Expression | None = None
    as_query_text: str | None = None
    if_not_exists: bool = False
    watermarks: list[Watermark] = field(default_factory=list)
    format_encode: FormatEncode | None = None
    row_format: str | None = None
    temporary: bool = False  # CREATE TEMP TABLE: in the session's pg_temp schema, gone with it
    includes: list[Include] = field(default_factory=list)
    from_source: str | None = None  # CREATE TABLE ... FROM source TABLE 'upstream' (a CDC source)
    from_table: str | None = None


@dataclass(frozen=True)
class CreateSource(Statement):
    """CREATE SOURCE: a connector's stream, not stored (columns may come from a schema registry)."""

    name: str
    columns: list[ColumnDef]
    with_options: dict[str, str] = field(default_factory=dict)
    if_not_exists: bool = False
    watermarks: list[Watermark] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)
    format_encode: FormatEncode | None = None
    row_format: str | None = None
    includes: list[Include] = field(default_factory=list)


@dataclass(frozen=True)
class CreateMaterializedView(Statement):
    """CREATE MATERIALIZED VIEW; `sql_text` is the query's text as written (the catalog keeps it)."""

    name: str
    query: exp.Expression
    sql_text: str
    if_not_exists: bool = False
    columns: list[str] | None = None
    with_options: dict[str, str] = field(default_factory=dict)
    #: ``EMIT ON WINDOW CLOSE``: aggregations emit a window's row once, when it closes
    emit_on_window_close: bool = False


@dataclass(frozen=True)
class CreateView(Statement):
    """CREATE [OR REPLACE] VIEW; the catalog stores `sql_text` and re-binds it on every use."""

    name: str
    columns: list[str] | None
    query: exp.Expression
    sql_text: str
    or_replace: bool = False
    if_not_exists: bool = False
    temporary: bool = False  # CREATE TEMP VIEW: in the session's pg_temp schema


@dataclass(frozen=True)
class CreateIndex(Statement):
    """CREATE INDEX name ON table (cols) [INCLUDE (cols)] [DISTRIBUTED BY (cols)]."""

    name: str
    table: str
    columns: list[IndexColumn]
    include: list[str] = field(default_factory=list)
    distributed_by: list[str] = field(default_factory=list)
    if_not_exists: bool = False


@dataclass(frozen=True)
class CreateSink(Statement):
    """CREATE SINK name [INTO table] {FROM relation | AS query} WITH (...).

    Exactly one of `from_relation` and `query` is set; `sql_text` is the query's text.
    """

    name: str
    from_relation: str | None
    query: exp.Expression | None
    with_options: dict[str, str] = field(default_factory=dict)
    if_not_exists: bool = False
    sql_text: str | None = None
    into_table: str | None = None
    format_encode: FormatEncode | None = None
    #: ``AS query EMIT ON WINDOW CLOSE``: the query planned in EOWC mode, as for an MV
    emit_on_window_close: bool = False


@dataclass(frozen=True)
class FunctionArg:
    """One argument of CREATE FUNCTION: its name ("" when only the type is written) and type."""

    name: str
    type: DataType


@dataclass(frozen=True)
class CreateFunction(Statement):
    """``CREATE [OR REPLACE] FUNCTION name(args) RETURNS type LANGUAGE lang AS $$body$$``.

    `body` is the text between the dollar quotes (or ``SELECT expr`` for a ``RETURN expr``
    body); `language` is lower-cased; `with_options` holds ``WITH (vectorized = true)``.
    """

    name: str
    args: list[FunctionArg]
    return_type: DataType
    language: str
    body: str
    or_replace: bool = False
    strict: bool = False
    with_options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DropFunction(Statement):
    """``DROP FUNCTION [IF EXISTS] name [(types)], ... [CASCADE | RESTRICT]``.

    Each target is a name and the argument types written, or None when no list was given
    (PostgreSQL then requires the name to be unique).
    """

    targets: list[tuple[str, list[DataType] | None]]
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class CreateSchema(Statement):
    """``CREATE SCHEMA [IF NOT EXISTS] name``."""

    name: str
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropSchema(Statement):
    """``DROP SCHEMA [IF EXISTS] name, ... [CASCADE | RESTRICT]``."""

    names: Sequence[str]
    if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class Drop(Statement):
    """DROP kind [IF EXISTS] name, ... [CASCADE | RESTRICT]."""

    kind: ObjectKind
    names: Sequence[str]
    if_exists: bool = False
    cascade: bool = False


# ---------------------------------------------------------------------------------------------
# Utility statements
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateSubscription(Statement):
    """CREATE SUBSCRIPTION name FROM relation WITH (retention = '...')."""

    name: str
    from_relation: str
    with_options: dict[str, str] = field(default_factory=dict)
    if_not_exists: bool = False


@dataclass(frozen=True)
class DeclareSubscriptionCursor(Statement):
    """DECLARE name SUBSCRIPTION CURSOR FOR subscription [SINCE start | FULL].

    `since` is "now" (the default; also ``now()`` / ``proctime()``), "begin" (``begin()``: the
    oldest change still retained), "full" (the snapshot, then its changes) or a number (a
    ``rw_timestamp`` in Unix milliseconds or an epoch, from a row already consumed).
    """

    name: str
    subscription: str
    since: str = "now"


@dataclass(frozen=True)
class DeclareCursor(Statement):
    """DECLARE name [BINARY] [NO SCROLL] CURSOR [WITH HOLD | WITHOUT HOLD] FOR query."""

    name: str
    query: exp.Expression
    binary: bool = False
    hold: bool = False


@dataclass(frozen=True)
class Fetch(Statement):
    """FETCH | MOVE [NEXT | [FORWARD] count | [FORWARD] ALL] {FROM | IN} cursor [WITH (timeout = '...')].

    `all` is FETCH ALL (then `count` is unused); `move` is MOVE (the rows are skipped, not sent)."""

    cursor: str
    count: int = 1
    with_options: dict[str, str] = field(default_factory=dict)
    all: bool = False
    move: bool = False


@dataclass(frozen=True)
class CloseCursor(Statement):
    """CLOSE name | CLOSE ALL (`name` None)."""

    name: str | None


@dataclass(frozen=True)
class Copy(Statement):
    """COPY table [(cols)] FROM STDIN | COPY {table [(cols)] | (query)} TO STDOUT [[WITH] (options)].

    `options`: format (text | csv), header, delimiter, null, as written (lower-case keys)."""

    table: str | None
    columns: list[str]
    query: exp.Expression | None
    to_client: bool  # TO STDOUT (else FROM STDIN)
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Flush(Statement):
    """FLUSH: wait until every write so far is visible to reads (a checkpoint barrier)."""


@dataclass(frozen=True)
class SetVariable(Statement):
    """SET [SESSION | LOCAL] name {TO | =} value; `value` None means DEFAULT (also RESET name).

    A list value (``SET search_path = a, b``) is joined with ", " as PostgreSQL shows it.
    """

    name: str
    value: str | None
    local: bool = False


@dataclass(frozen=True)
class AlterSourceRateLimit(Statement):
    """ALTER SOURCE | TABLE name SET source_rate_limit {TO | =} n | DEFAULT (RisingWave's)."""

    kind: str  # "source" | "table"
    name: str
    value: str | None  # None = DEFAULT


@dataclass(frozen=True)
class AlterParallelism(Statement):
    """ALTER {TABLE | MATERIALIZED VIEW | SINK | SOURCE} name SET PARALLELISM {TO | =} n |
    ADAPTIVE | DEFAULT (RisingWave's); `value` as written (the handler checks it)."""

    kind: str  # "table" | "materialized view" | "sink" | "source"
    name: str
    value: str


@dataclass(frozen=True)
class AlterAddColumn(Statement):
    """ALTER TABLE [IF EXISTS] name ADD [COLUMN] [IF NOT EXISTS] column_def."""

    kind: str  # "table" | "source"
    name: str
    column: ColumnDef
    if_exists: bool = False
    if_not_exists: bool = False
    column_text: str = ""  # the column definition as written (for the table's definition)


@dataclass(frozen=True)
class AlterDropColumn(Statement):
    """ALTER TABLE [IF EXISTS] name DROP [COLUMN] [IF EXISTS] column [CASCADE | RESTRICT]."""

    name: str
    column: str
    if_exists: bool = False
    column_if_exists: bool = False
    cascade: bool = False


@dataclass(frozen=True)
class AlterRename(Statement):
    """ALTER {TABLE | MATERIALIZED VIEW | VIEW | SOURCE | SINK | INDEX} [IF EXISTS] name RENAME TO
    new, or ALTER TABLE name RENAME [COLUMN] column TO new (`column` set)."""

    kind: str  # "table" | "materialized view" | "view" | "source" | "sink" | "index"
    name: str
    new_name: str
    column: str | None = None
    if_exists: bool = False


@dataclass(frozen=True)
class Truncate(Statement):
    """TRUNCATE [TABLE] name [, ...]: every row deleted, in one epoch."""

    names: tuple[str, ...]


#: LOCK TABLE's modes, weakest first (PostgreSQL's table-level lock modes)
LOCK_MODES: tuple[str, ...] = (
    "ACCESS SHARE",
    "ROW SHARE",
    "ROW EXCLUSIVE",
    "SHARE UPDATE EXCLUSIVE",
    "SHARE",
    "SHARE ROW EXCLUSIVE",
    "EXCLUSIVE",
    "ACCESS EXCLUSIVE",
)


@dataclass(frozen=True)
class LockTable(Statement):
    """LOCK [TABLE] [ONLY] name [, ...] [IN mode MODE] [NOWAIT]; `mode` as
    `LOCK_MODES` spells it (ACCESS EXCLUSIVE when not given, as in PostgreSQL)."""

    names: tuple[str, ...]
    mode: str = "ACCESS EXCLUSIVE"
    nowait: bool = False


@dataclass(frozen=True)
class CommentOn(Statement):
    """COMMENT ON {TABLE | MATERIALIZED VIEW | VIEW | SOURCE | SINK | INDEX | COLUMN} name IS
    'text' | NULL; `column` set for COLUMN (name is then the relation)."""

    kind: str
    name: str
    column: str | None
    comment: str | None


@dataclass(frozen=True)
class AlterSystem(Statement):
    """ALTER SYSTEM SET name {TO | =} value: a database-wide setting, kept across restarts;
    `value` None means DEFAULT."""

    name: str
    value: str | None


@dataclass(frozen=True)
class RebuildJob(Statement):
    """ALTER MATERIALIZED VIEW name REBUILD: replace a failed MV's streaming job by a new one
    backfilled from its upstream's current snapshot."""

    kind: str
    name: str


@dataclass(frozen=True)
class ResetAll(Statement):
    """RESET ALL: every session variable back to its default."""


@dataclass(frozen=True)
class ShowVariable(Statement):
    """SHOW name; `name` is "all" for SHOW ALL."""

    name: str


@dataclass(frozen=True)
class ShowObjects(Statement):
    """SHOW TABLES / MATERIALIZED VIEWS / ... [FROM schema] [LIKE pattern]; SHOW COLUMNS FROM t.

    `from_` is the schema, or the relation for "columns" and "indexes".
    """

    kind: ShowKind
    from_: str | None = None
    like: str | None = None


@dataclass(frozen=True)
class ShowCreate(Statement):
    """SHOW CREATE {TABLE | MATERIALIZED VIEW | VIEW | INDEX | SOURCE | SINK} name."""

    kind: ObjectKind
    name: str


@dataclass(frozen=True)
class Describe(Statement):
    """DESCRIBE name: columns, keys and indexes of a relation."""

    name: str


@dataclass(frozen=True)
class Explain(Statement):
    """EXPLAIN [ANALYZE] [VERBOSE] stmt, or EXPLAIN (option [value], ...) stmt.

    Options other than VERBOSE and ANALYZE (TRACE, TYPE, FORMAT, ...) land in `options`,
    lower-cased, with "true" for a bare option.
    """

    statement: Statement
    verbose: bool = False
    analyze: bool = False
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Begin(Statement):
    """BEGIN / START TRANSACTION [modes]: opens a transaction block; `modes` as written, lower-case
    (``isolation level repeatable read``, ``read only``, ``read write``, ``deferrable``)."""

    modes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SetTransaction(Statement):
    """SET TRANSACTION modes: the current block's isolation level and access mode."""

    modes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Commit(Statement):
    """COMMIT / END: the block's changes land together in one epoch."""


@dataclass(frozen=True)
class Rollback(Statement):
    """ROLLBACK / ABORT: the block's changes are discarded."""


@dataclass(frozen=True)
class Savepoint(Statement):
    """SAVEPOINT name: a point inside a transaction block to roll back to."""

    name: str


@dataclass(frozen=True)
class ReleaseSavepoint(Statement):
    """RELEASE [SAVEPOINT] name: forget a savepoint (and later ones); their changes stay."""

    name: str


@dataclass(frozen=True)
class RollbackToSavepoint(Statement):
    """ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name: undo the changes made after it."""

    name: str


@dataclass(frozen=True)
class Discard(Statement):
    """DISCARD {ALL | PLANS | SEQUENCES | TEMP}: drops session state."""

    target: str


#: Statements EXPLAIN accepts.
EXPLAINABLE = (Query, Insert, Update, Delete, CreateTable, CreateMaterializedView, CreateIndex, CreateSink)


# ---------------------------------------------------------------------------------------------
# Roles and privileges
# ---------------------------------------------------------------------------------------------

#: Privileges GRANT / REVOKE take on a relation, in PostgreSQL's ACL order.
RELATION_PRIVILEGES = ("INSERT", "SELECT", "UPDATE", "DELETE", "TRUNCATE")
SCHEMA_PRIVILEGES = ("USAGE", "CREATE")


@dataclass(frozen=True)
class RoleOptions:
    """The options of CREATE / ALTER USER | ROLE; None = not given. `password` "" = PASSWORD NULL."""

    superuser: bool | None = None
    login: bool | None = None
    createdb: bool | None = None
    createrole: bool | None = None
    password: str | None = None


@dataclass(frozen=True)
class CreateRole(Statement):
    """CREATE USER | ROLE name [[WITH] option ...] (USER implies LOGIN, ROLE NOLOGIN)."""

    name: str
    options: RoleOptions
    is_user: bool = True


@dataclass(frozen=True)
class AlterRole(Statement):
    """ALTER USER | ROLE name [[WITH] option ...] | ALTER USER | ROLE name RENAME TO new."""

    name: str
    options: RoleOptions
    rename_to: str | None = None


@dataclass(frozen=True)
class DropRole(Statement):
    """DROP USER | ROLE [IF EXISTS] name, ..."""

    names: list[str]
    if_exists: bool = False


@dataclass(frozen=True)
class Grant(Statement):
    """GRANT privileges ON [TABLE | ...] rel, ... TO role, ... (`revoke`: REVOKE ... FROM ...).

    `privileges` are upper-case names as written (ALL expands to RELATION_PRIVILEGES, or to
    SCHEMA_PRIVILEGES for a schema); the handler refuses those the object kind has not (0LP01).
    `kind` "schema": `relations` are schema names; "all tables in schema": every table, view,
    MV and source of the schemas named."""

    privileges: tuple[str, ...]
    relations: Sequence[str]  # `ObjectName`s, maybe schema-qualified
    grantees: list[str]
    revoke: bool = False
    kind: str | None = None  # the object kind written (TABLE, MATERIALIZED VIEW, ...), if any


@dataclass(frozen=True)
class AlterOwner(Statement):
    """ALTER {SCHEMA | TABLE | MATERIALIZED VIEW | VIEW | SOURCE | SINK} name OWNER TO role."""

    kind: str  # "schema" | "table" | "materialized view" | "view" | "source" | "sink"
    name: str
    owner: str  # a role name, or "current_user" / "session_user"
