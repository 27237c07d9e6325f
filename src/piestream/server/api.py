"""The Python API: ``piestream.connect()`` for scripts and notebooks.

A thin layer over `Database` and `Session`: a `Connection` is one SQL session on a database
opened in this process, a `Result` is one statement's outcome with rows as Python values and
conversions to Arrow and pandas. Opening the same data directory twice in one process shares
the open `Database` (two would both write its meta store and run barriers) — re-running a
notebook cell that calls `connect()` just works.

    import piestream
    with piestream.connect("./data", runner="local") as conn:
        conn.sql("CREATE TABLE t (k int PRIMARY KEY, v varchar)")
        conn.sql("INSERT INTO t VALUES ($1, $2)", (1, "a"))
        conn.sql("SELECT * FROM t").to_pandas()
        with conn.transaction():  # COMMIT at the end of the block, ROLLBACK on an exception
            conn.sql("INSERT INTO t VALUES (2, 'b')")
            conn.sql("UPDATE t SET v = 'c' WHERE k = 1")

Statements run in autocommit mode unless a transaction is open (`transaction()`, `begin()`, or
SQL BEGIN), as in psql.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import pyarrow as pa

from piestream.common.errors import PiestreamError, client_error
from piestream.common.types import DataType
from piestream.server import remote
from piestream.server.database import DEFAULT_DATA_DIR, Database, DatabaseConfig
from piestream.server.remote import ServerAddress, is_url
from piestream.server.results import QueryResult
from piestream.server.subscriptions import ChangeBatch

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from piestream.server.pgwire.client import SimpleClient
    from piestream.server.session import Session

#: Rows a Result's repr shows (a notebook cell stays small).
REPR_ROWS = 20

_lock = threading.Lock()
_open: dict[Path, tuple[Database, int]] = {}  # data dir -> (database, connections using it)


def connect(
    data_dir: str | Path | None = None,
    spark: SparkSession | None = None,
    *,
    user: str | None = None,
    password: str | None = None,
    **config: Any,
) -> Connection | RemoteConnection:
    """Open (or join) the database in `data_dir` (default ``./piestream-data``), or log in to
    a running server when `data_dir` is a URL (``postgresql://alice@host:4566/dev``).

    Embedded (a data directory): this process owns the database and acts as its superuser;
    nothing is privilege-checked. A server URL: a `RemoteConnection` of role `user` (or the
    URL's), authenticated as any pgwire client, every statement checked by the server.

    `spark`: a SparkSession to run the streaming jobs on (default: piestream's local-mode
    session). `config`: `DatabaseConfig` fields, e.g. ``runner="local"``, ``barrier_interval=0.5``
    — they apply when this call opens the database, not when it joins an open one.
    """
    if is_url(data_dir):
        if spark is not None or config:
            raise TypeError("spark and config apply to an embedded database, not to a server URL")
        return RemoteConnection(ServerAddress.parse(str(data_dir), user, password))
    if user is not None or password is not None:
        raise TypeError("user and password are for a server URL (postgresql://host:port/dev)")
    fields = {f.name for f in dataclasses.fields(DatabaseConfig)}
    unknown = sorted(set(config) - fields)
    if unknown:
        raise TypeError(f"unknown config {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    path = Path(data_dir or DEFAULT_DATA_DIR).resolve()
    with _lock:
        entry = _open.get(path)
        if entry is None:
            db = Database(path, spark=spark, config=DatabaseConfig(**config))
            entry = (db, 0)
        _open[path] = (entry[0], entry[1] + 1)
        return Connection(entry[0])


def _release(db: Database) -> None:
    with _lock:
        entry = _open.get(db.data_dir)
        if entry is None or entry[0] is not db:
            return
        if entry[1] > 1:
            _open[db.data_dir] = (db, entry[1] - 1)
            return
        del _open[db.data_dir]
    db.close()


def _clean(e: PiestreamError) -> PiestreamError:
    """The error as the caller sees it: its SQLSTATE and message, without piestream's internal
    frames or chained causes (those went to the log where they matter)."""
    return client_error(e).with_traceback(None)


class _Transactions:
    """Transaction control shared by `Connection` and `RemoteConnection`: everything is SQL
    (BEGIN, COMMIT, SAVEPOINT ...) sent through one `_run` primitive, so the in-process and the
    remote session behave alike — the session, not the wrapper, tracks the transaction state."""

    _savepoints: Iterator[int]

    def _run(self, sql: str) -> None:
        """Run one transaction-control statement on the session."""
        raise NotImplementedError

    @property
    def in_transaction(self) -> bool:
        raise NotImplementedError

    def begin(self) -> None:
        """Open a transaction block (SQL BEGIN)."""
        self._run("BEGIN")

    def commit(self) -> None:
        """Commit the open transaction: all its changes land in one epoch, durable on return."""
        self._run("COMMIT")

    def rollback(self) -> None:
        """Discard the open transaction's changes."""
        self._run("ROLLBACK")

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """A transaction block for a ``with`` statement: it commits when the block ends and rolls
        back if an exception leaves it. Inside an open transaction it is a savepoint instead, so
        blocks nest (the inner one undoes only its own changes)."""
        if self.in_transaction:
            name = f"piestream_sp_{next(self._savepoints)}"
            self._run(f"SAVEPOINT {name}")
            try:
                yield self
            except BaseException:
                self._run(f"ROLLBACK TO SAVEPOINT {name}")
                self._run(f"RELEASE SAVEPOINT {name}")
                raise
            self._run(f"RELEASE SAVEPOINT {name}")
            return
        self.begin()
        try:
            yield self
        except BaseException:
            if self.in_transaction:
                self.rollback()
            raise
        if self.in_transaction:  # (unless the block ended it itself)
            self.commit()


class Connection(_Transactions):
    """One SQL session on an open database (settings such as SET persist across calls)."""

    def __init__(self, db: Database) -> None:
        self.database = db
        self._session: Session | None = db.session()
        self._savepoints = itertools.count(1)

    @property
    def session(self) -> Session:
        if self._session is None:
            raise RuntimeError("the connection is closed")
        return self._session

    @property
    def spark(self) -> SparkSession | None:
        """The SparkSession the database runs on (None with the local runner)."""
        return self.database.spark

    @property
    def data_dir(self) -> Path:
        return self.database.data_dir

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[Result]:
        """Run a SQL script; one Result per statement (stops at the first error)."""
        try:
            return [Result(r) for r in self.session.execute(query, params)]
        except PiestreamError as e:
            raise _clean(e) from None

    def sql(self, query: str, params: Sequence[Any] = ()) -> Result:
        """Run a SQL script and return the last statement's Result."""
        results = self.execute(query, params)
        return results[-1] if results else Result(QueryResult("EMPTY"))

    def function(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        args: Sequence[str] | None = None,
        returns: str | None = None,
        vectorized: bool = False,
        strict: bool = False,
        replace: bool = False,
    ) -> Any:
        """Decorator registering a Python function for SQL (``CREATE FUNCTION ... LANGUAGE
        python`` with the function's source; see `piestream.server.python_functions`).

            @conn.function(returns="int")
            def count_char(s: str, c: str) -> int: ...

        `vectorized=True`: called once per chunk with pyarrow arrays. `strict=True`: not called
        for rows with a NULL argument (the result is NULL)."""
        from piestream.server.python_functions import register

        options = dict(
            name=name, args=args, returns=returns, vectorized=vectorized, strict=strict, replace=replace
        )
        if fn is not None:
            return register(self.session, fn, **options)
        return lambda f: register(self.session, f, **options)

    def insert(self, table: str, data: pa.Table | pd.DataFrame | dict[str, Any]) -> int:
        """Bulk-insert rows given as columns (an Arrow table, a pandas DataFrame or a dict of
        column name -> values); like INSERT, committed when this returns. Returns the row count."""
        from piestream.server import dml

        if isinstance(data, dict):
            data = pa.table(data)
        elif not isinstance(data, pa.Table):
            data = pa.Table.from_pandas(data, preserve_index=False)
        dml.insert_arrow(self.session, table, data)
        return data.num_rows

    def subscribe(
        self,
        name: str,
        *,
        since: str = "now",
        retention: str = "1 day",
        idle_timeout: float | None = None,
    ) -> Iterator[ChangeBatch]:
        """Follow the changes of table / MV `name` (or of subscription `name`): one `ChangeBatch`
        (Arrow table of the visible columns, ``op`` and ``epoch``; ``.to_pandas()``) per committed
        epoch that changed it, as epochs commit.

        `since`: ``"now"`` (changes after this call), ``"full"`` (the current rows as inserts
        first), ``"begin"`` (every retained change) or an epoch already consumed (resume exactly
        after it). Without a subscription on `name`, this creates ``<name>_changes`` keeping
        changes for `retention`. The iterator ends after `idle_timeout` seconds without a commit
        (default: never).
        """
        from piestream.server.subscriptions import follow, subscription_for

        sub = subscription_for(self.session, name, retention)
        return follow(self.database, sub, str(since), idle_timeout=idle_timeout)

    def flush(self) -> int:
        """Commit an epoch now (pending DML, Spark writes in the inbox); returns the epoch."""
        try:
            return self.database.barriers.flush()
        except PiestreamError as e:
            raise _clean(e) from None

    # -- transactions (begin/commit/rollback/transaction come from _Transactions) --------------
    def _run(self, sql: str) -> None:
        self.session.execute(sql)

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction block is open (its writes are buffered until `commit`)."""
        return self.session.in_transaction

    def close(self) -> None:
        """Close this connection (an open transaction is rolled back); the database closes with
        the last one."""
        if self._session is None:
            return
        session, self._session = self._session, None
        session.close()
        _release(self.database)

    @property
    def closed(self) -> bool:
        return self._session is None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<piestream.Connection {self.data_dir} ({state})>"


class Result:
    """A statement's outcome: `tag` (``SELECT 3``, ``INSERT 0 2``), column names and types, rows."""

    def __init__(self, result: QueryResult) -> None:
        self._r = result

    @property
    def tag(self) -> str:
        return self._r.tag

    @property
    def columns(self) -> list[str]:
        return self._r.names

    @property
    def types(self) -> list[DataType]:
        return [t for _, t in self._r.columns]

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        return self._r.rows

    @property
    def notices(self) -> list[str]:
        return self._r.notices

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._r.rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._r.rows[0] if self._r.rows else None

    def scalar(self) -> Any:
        """The first column of the first row (None if there is none)."""
        row = self.fetchone()
        return row[0] if row else None

    def to_arrow(self) -> pa.Table:
        """The rows as an Arrow table (columns in piestream's Arrow layout of their SQL types)."""
        if self._r.arrow is not None:
            t = self._r.arrow
            return t.rename_columns(self.columns) if t.column_names != self.columns else t
        from piestream.common.scalar import to_arrow

        cols = [to_arrow([r[i] for r in self.rows], t) for i, t in enumerate(self.types)]
        return pa.table(cols, names=self.columns) if cols else pa.table({})

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._r.rows)

    def __len__(self) -> int:
        return len(self._r.rows)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        return self._r.rows[i]

    # -- display ----------------------------------------------------------------------------------
    def _text_rows(self, limit: int) -> list[list[str]]:
        from piestream.common.text import format_datum

        return [
            ["NULL" if v is None else format_datum(v, t) for v, t in zip(row, self.types, strict=True)]
            for row in self.rows[:limit]
        ]

    def _footer(self) -> str:
        n = len(self.rows)
        more = f", showing {REPR_ROWS}" if n > REPR_ROWS else ""
        return f"({n} row{'s' if n != 1 else ''}{more})"

    def __repr__(self) -> str:
        if not self._r.returns_rows:
            return self.tag
        # psql's layout: centered headers, numbers right-aligned, everything else left-aligned
        cells = self._text_rows(REPR_ROWS)
        widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(self.columns)]
        right = [t.is_numeric for t in self.types]
        head = "|".join(f" {h.center(w)} " for h, w in zip(self.columns, widths, strict=True))
        rule = "+".join("-" * (w + 2) for w in widths)
        body = [
            "|".join(
                f" {c.rjust(w) if r else c.ljust(w)} " for c, w, r in zip(row, widths, right, strict=True)
            ).rstrip()
            for row in cells
        ]
        return "\n".join([head.rstrip(), rule, *body, self._footer()])

    def _repr_html_(self) -> str:
        if not self._r.returns_rows:
            return f"<pre>{html.escape(self.tag)}</pre>"
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
            for r in self._text_rows(REPR_ROWS)
        )
        return (
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p>{html.escape(self._footer())}</p>"
        )


class RemoteConnection(_Transactions):
    """One session of a role on a running server (the `Connection` API without `function`,
    `subscribe` and `spark`, which need the database in this process)."""

    def __init__(self, address: ServerAddress) -> None:
        self.address = address
        self._client: SimpleClient | None = address.login("piestream python")
        self._savepoints = itertools.count(1)

    @property
    def client(self) -> SimpleClient:
        if self._client is None:
            raise RuntimeError("the connection is closed")
        return self._client

    @property
    def user(self) -> str:
        return self.address.user

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run a SQL script on the server; one Result per statement (stops at the first error).
        With `params` the script must be one statement (``$1`` ... bind them)."""
        results = self.client.query(query, remote.param_texts(params))
        return [Result(remote.typed_result(r)) for r in results]

    def sql(self, query: str, params: Sequence[Any] = ()) -> Any:
        """Run a SQL script and return the last statement's Result."""
        results = self.execute(query, params)
        return results[-1] if results else Result(QueryResult("EMPTY"))

    def insert(self, table: str, data: pa.Table | pd.DataFrame | dict[str, Any]) -> int:
        """Bulk-insert rows given as columns, as one binary ``COPY table (columns) FROM STDIN``
        (INSERT on the table is checked by the server). Returns the row count."""
        if isinstance(data, dict):
            data = pa.table(data)
        elif not isinstance(data, pa.Table):
            data = pa.Table.from_pandas(data, preserve_index=False)
        return remote.insert_arrow(self.client, table, data)

    def flush(self) -> None:
        """FLUSH on the server: every write so far is committed and visible."""
        self.client.query("FLUSH")

    def _run(self, sql: str) -> None:
        self.client.query(sql)

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction block is open on the server (from its ReadyForQuery status)."""
        return self.client.in_transaction

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()

    @property
    def closed(self) -> bool:
        return self._client is None

    def __enter__(self) -> RemoteConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        a = self.address
        state = "closed" if self.closed else "open"
        return f"<piestream.RemoteConnection {a.user}@{a.host}:{a.port}/{a.database} ({state})>"


def register_spark(spark: SparkSession) -> None:
    """Make ``spark.read.format("piestream")`` / ``df.write.format("piestream")`` available
    (on a data directory, or through a server as a role with option ``url``)."""
    from piestream.server.spark_source import register

    register(spark)
