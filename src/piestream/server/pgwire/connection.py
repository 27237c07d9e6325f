"""One client connection: its thread, the message loop, simple queries and running statements.

Startup and authentication are in `startup`, the extended query protocol (Parse / Bind /
Describe / Execute / Close) in `extended`, and result rows on the wire in `rows`; this module
owns the connection's state and the statements' execution.

A connection has its own thread (reading messages, writing results) and its own `Session`.
Statements run on a second, per-connection worker thread so that the connection thread can give
up waiting when the client cancels (CancelRequest) or `statement_timeout` passes: the client gets
57014 at once, while the statement itself runs to its end in the background (the engine has no
preemption points; a cancelled INSERT may still be applied). The next statement of that
connection waits for it, so a `Session` only ever runs one statement at a time.

Transaction blocks live in the `Session` (`server.transaction`); ReadyForQuery reports its state
(I idle, T in a block, E in a failed block), and any error sent inside a block — the session's or
the protocol's (a failed Parse or Bind) — puts the block in the failed state, as in PostgreSQL.
COMMIT cannot be cancelled: its outcome must reach the client as it is, so the connection waits
for it. Closing the connection rolls an open block back.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from piestream.common.errors import (
    InFailedSqlTransaction,
    PiestreamError,
    QueryCanceled,
    clean_text,
    client_error,
)
from piestream.expr.expr import Literal
from piestream.frontend.catalog import CatalogSnapshot
from piestream.frontend.parser import ast
from piestream.server import copy
from piestream.server.catalog import CatalogContext, CatalogViews
from piestream.server.pgwire.auth import AuthFailed
from piestream.server.pgwire.extended import ExtendedQuery
from piestream.server.pgwire.protocol import (
    Channel,
    ClientGone,
    MessageReader,
    ProtocolViolation,
    cstr,
    error_fields,
    int16,
    int32,
    parameter_status,
)
from piestream.server.pgwire.rows import describe_columns, send_rows
from piestream.server.pgwire.startup import REPORTED, apply_startup_settings, authenticate, read_startup
from piestream.server.pgwire.statements import Prepared, prepare_script
from piestream.server.pgwire.tls import is_loopback, refuse_clear_text
from piestream.server.privileges import check_statement
from piestream.server.results import QueryResult
from piestream.server.session import Session
from piestream.server.settings import duration_seconds

if TYPE_CHECKING:
    from piestream.server.pgwire.server import PgServer

log = logging.getLogger(__name__)


class Terminate(Exception):
    """The client said goodbye (or the server is shutting down): close the connection."""


class Connection:
    """The server side of one client connection."""

    def __init__(self, server: PgServer, sock: socket.socket, address: Any, pid: int) -> None:
        self.server = server
        self.address = address
        self.channel = Channel(sock)
        self.pid = pid
        self.secret = secrets.randbits(31)
        self.user = ""
        self.database = ""
        self.session: Session | None = None
        self._progress: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.catalog = CatalogViews(lambda: self._catalog().relations())
        self.extended = ExtendedQuery(self)
        self.skip_until_sync = False
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"piestream-stmt-{pid}")
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._busy = False
        self.closing = False  # server shutdown asked this connection to end
        self.channel.stop_reading = lambda: self.closing
        self.started = time.time()
        self.query_started: float | None = None
        self.current_query = ""
        self.state = "starting"

    @property
    def sock(self) -> socket.socket:
        """The client's socket (TLS-wrapped after an accepted SSLRequest)."""
        return self.channel.sock

    def _shutdown(self, how: int) -> None:
        # socket.socket's own shutdown: ssl.SSLSocket.shutdown would drop the TLS state first and
        # a FATAL sent afterwards would leave in the clear
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, how)

    # -- lifecycle ------------------------------------------------------------------------------
    def run(self) -> None:
        """Thread target: serve the client until it leaves, breaks the protocol or the server stops."""
        try:
            if self._startup():
                self._loop()
        except (ClientGone, Terminate):
            pass
        except ProtocolViolation as e:
            log.info("connection %s: protocol violation: %s", self.address, e.message)
            self._fatal(e.sqlstate, e.message)
        except PiestreamError as e:
            self._fatal(e.sqlstate, e.message)
        except Exception:
            log.exception("connection %s failed", self.address)
            self._fatal("XX000", "internal error; the connection is closed")
        finally:
            self._close()

    def _fatal(self, sqlstate: str, message: str) -> None:
        with contextlib.suppress(ClientGone, OSError):
            self.channel.send(b"E", error_fields("FATAL", sqlstate, clean_text(message)))
            self.channel.flush()

    def _close(self) -> None:
        self.state = "closed"
        session = self.session
        if session is not None:
            # after the running statement (if any): a transaction block left open is rolled back
            with contextlib.suppress(RuntimeError):
                self._worker.submit(session.close)
        self._worker.shutdown(wait=False, cancel_futures=False)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.server._unregister(self)

    def request_cancel(self) -> None:
        """CancelRequest from another connection: stop waiting for the running statement, if any."""
        with self._lock:
            if self._busy:
                self._cancel.set()

    def request_close(self) -> None:
        """Server shutdown: end the connection once the running statement (if any) is answered."""
        with self._lock:
            self.closing = True
            idle = not self._busy
        if idle and not self.channel.encrypted:  # (over TLS the read polls `closing`)
            self._shutdown(socket.SHUT_RD)  # wakes the blocked read

    def force_close(self) -> None:
        self._cancel.set()
        self._shutdown(socket.SHUT_RDWR)

    # -- startup --------------------------------------------------------------------------------
    def _startup(self) -> bool:
        ch = self.channel
        packet = read_startup(ch, self.server.cancel, self.server.ssl_context)
        if packet is None:
            return False
        if self.server.require_ssl_remote and not ch.encrypted and not is_loopback(self.address):
            log.warning("refused a clear-text connection from %s (user %r)", self.address, packet.user)
            raise refuse_clear_text(self.address)
        self.user = packet.user
        self.database = packet.database
        if self.server.too_many_connections():
            raise PiestreamError("sorry, too many clients already", sqlstate="53300")
        try:
            authenticate(ch, self.server.authenticator, self.user)
        except AuthFailed as e:
            self._login_failed(e)
            raise
        role = self.server.database.roles.get(self.user)
        if role is None:  # trust mode (a password check fails unknown users before)
            raise PiestreamError(f'role "{self.user}" does not exist', sqlstate="28000")
        if not role.login:
            raise PiestreamError(f'role "{self.user}" is not permitted to log in', sqlstate="28000")
        self.session = self.server.database.session()
        self.session.database = self.database or self.user  # PostgreSQL's default: the user's
        self.session.user = self.user
        self.session.notice = self._progress.put  # from the statement's worker thread
        settings = self.session.settings
        apply_startup_settings(settings, packet)
        for key, wire in REPORTED.items():
            ch.send(b"S", parameter_status(wire, settings.get(key, "")))
        ch.send(b"K", int32(self.pid) + int32(self.secret))
        self._reported = {k: settings.get(k, "") for k in REPORTED}
        self.state = "idle"
        self._ready()
        return True

    def _login_failed(self, e: AuthFailed) -> None:
        """Log a failed login (never the password) and wait as the throttle says before the
        client hears of it, so guessing passwords from one host gets slower and slower."""
        host = self.address[0] if isinstance(self.address, tuple) else "local"
        n, delay = self.server.throttle.failed(str(host))
        self.server.metrics.auth_failures += 1
        log.warning(
            'authentication failed for user "%s" from %s: %s (%d failures from this host in 60 s%s)',
            self.user, host, e.message, n, f"; answering in {delay:.2f} s" if delay else "",
        )  # fmt: skip
        if delay:
            time.sleep(delay)

    # -- the message loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        ch = self.channel
        while True:
            with self._lock:
                self._busy = False
                if self.closing:
                    raise_shutdown = True
                else:
                    raise_shutdown = False
            if raise_shutdown:
                self._fatal("57P01", "terminating connection due to administrator command")
                raise Terminate
            try:
                kind, r = ch.read_message()
            except ClientGone:
                if self.closing:
                    self._fatal("57P01", "terminating connection due to administrator command")
                raise
            with self._lock:
                self._busy = True
            if kind == b"X":
                raise Terminate
            if self.skip_until_sync and kind != b"S":
                continue
            try:
                try:
                    self._dispatch(kind, r)
                except (ClientGone, Terminate, ProtocolViolation):
                    raise
                except PiestreamError:
                    raise
                except Exception as bug:  # a server bug answers this message; the connection goes on
                    err = client_error(bug)
                    if err.sqlstate == "XX000":  # not a statement too deep to parse (54001)
                        log.exception("connection %s: error handling message %r", self.address, kind)
                    raise err from bug
            except PiestreamError as e:
                if isinstance(e, ProtocolViolation):
                    raise
                self._send_error(e)
                if kind in (b"P", b"B", b"D", b"E", b"C", b"H"):
                    self.skip_until_sync = True
                else:
                    self._ready()

    def _dispatch(self, kind: bytes, r: MessageReader) -> None:
        if kind == b"Q":
            self._simple_query(r.cstring())
        elif kind == b"P":
            self.extended.parse(r)
        elif kind == b"B":
            self.extended.bind(r)
        elif kind == b"D":
            self.extended.describe(r)
        elif kind == b"E":
            self.extended.execute(r)
        elif kind == b"S":
            self.skip_until_sync = False
            self.extended.portals.pop("", None)
            self._ready()
        elif kind == b"H":
            self.channel.flush()
        elif kind == b"C":
            self.extended.close(r)
        elif kind in (b"d", b"c", b"f"):
            pass  # CopyData / CopyDone / CopyFail outside COPY: PostgreSQL ignores them too
        else:
            raise ProtocolViolation(f"invalid frontend message type {kind[0]}")

    def _ready(self) -> None:
        status = b"I" if self.session is None else self.session.transaction_status.encode()
        self.channel.send(b"Z", status)
        self.channel.flush()

    def _send_error(self, e: PiestreamError) -> None:
        if self.session is not None:
            self.session.fail_transaction()
        self.channel.send(
            b"E",
            # clean_text: the last guard that no traceback ever reaches a client (the cause is logged)
            error_fields(
                "ERROR",
                e.sqlstate,
                clean_text(e.message),
                detail=clean_text(e.detail) if e.detail else None,
                hint=e.hint,
                position=e.position,
            ),
        )

    def _notice(self, message: str) -> None:
        self.channel.send(b"N", error_fields("NOTICE", "00000", message))

    # -- running statements ---------------------------------------------------------------------
    def run_statement(self, p: Prepared, values: Sequence[Any]) -> QueryResult:
        """Run one statement on the worker thread, answering cancel and statement_timeout."""
        assert self.session is not None
        stmt = p.stmt
        if p.deallocate is not None:
            return self.extended.deallocate(p.deallocate)
        if p.sql_prepare is not None:
            return self.extended.sql_prepare(*p.sql_prepare)
        if p.sql_execute is not None:
            name, args = p.sql_execute
            return self.run_statement(self.extended.sql_prepared(name, len(args)), args)
        txn = self.session.txn
        if txn is not None and txn.failed and p.catalog:
            raise InFailedSqlTransaction(
                "current transaction is aborted, commands ignored until end of transaction block"
            )
        self.current_query = p.text
        self.query_started = time.time()
        self.state = "active"
        fn: Callable[[], QueryResult]
        if p.catalog:
            ctx = self._catalog_context()
            plain = [v.value if isinstance(v, Literal) else v for v in values]
            fn = lambda: _internal_errors(lambda: self.catalog.execute(p.text, plain, ctx))  # noqa: E731
        else:
            assert stmt is not None
            session = self.session
            fn = lambda: session.execute_statement(stmt, values)  # noqa: E731
        began = time.perf_counter()
        metrics = self.server.metrics
        try:
            return self._wait(fn, cancellable=not isinstance(stmt, ast.Commit))
        except PiestreamError:
            metrics.statement_errors += 1
            raise
        finally:
            self.state = "idle"
            kind = "catalog" if p.catalog or stmt is None else type(stmt).__name__.lower()
            metrics.statement_seconds.observe(kind, time.perf_counter() - began)

    def _wait(self, fn: Callable[[], QueryResult], *, cancellable: bool = True) -> QueryResult:
        assert self.session is not None
        timeout = duration_seconds(self.session.settings.get("statement_timeout", "0"))
        if not cancellable:
            timeout = 0.0
        self._cancel.clear()
        done = threading.Event()
        interrupt = threading.Event()  # this statement's: a lock wait gives up when it is set
        session = self.session

        def run() -> QueryResult:
            session.interrupt = interrupt
            return fn()

        future: Future[QueryResult] = self._worker.submit(run)
        future.add_done_callback(lambda _: done.set())
        deadline = time.monotonic() + timeout if timeout > 0 else None
        while not done.is_set():
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            if done.wait(wait):
                break
            self._send_progress()
            if self._cancel.is_set() and cancellable:
                interrupt.set()
                raise QueryCanceled("canceling statement due to user request")
            if deadline is not None and time.monotonic() >= deadline:
                interrupt.set()
                raise QueryCanceled("canceling statement due to statement timeout")
        self._send_progress()
        return future.result()

    def _send_progress(self) -> None:
        """NOTICEs a running statement sent (a long backfill's progress), to the client now."""
        sent = False
        while True:
            try:
                message = self._progress.get_nowait()
            except queue.Empty:
                break
            self._notice(message)
            sent = True
        if sent:
            self.channel.flush()

    def _catalog_context(self) -> CatalogContext:
        assert self.session is not None
        return CatalogContext(
            user=self.user,
            database=self.database,
            settings=dict(self.session.settings),
            schemas=self.session.schema_oids(),
            search_path=self.session.committed_catalog().search_path,
            pid=self.pid,
            activity=self.server.activity(),
            roles=self.server.database.roles.roles(),
            owners=self.server.database.roles.owners(),
            acls=self.server.database.roles.all_grants(),
            schema_owners=self.server.database.roles.schema_owners(),
            schema_acls=self.server.database.roles.schema_grants(),
            set_setting=self.session.set_config,
            functions=[f for fs in self.session.catalog().functions.values() for f in fs],
        )

    def _catalog(self) -> CatalogSnapshot:
        """The catalog this connection's session sees (with the tables its transaction created)."""
        if self.session is None:
            return self.server.database.catalog.snapshot()
        return self.session.catalog()

    def is_user_relation(self, name: str) -> bool:
        return self.lookup_relation(name) is not None

    def lookup_relation(self, name: str) -> Any:
        return self._catalog().get_relation(name)

    def complete(self, result: QueryResult, tag: str | None = None) -> None:
        """Notices, CommandComplete, and ParameterStatus for settings the statement changed."""
        for notice in result.notices:
            self._notice(notice)
        self.channel.send(b"C", cstr(tag or result.tag))
        self._report_settings()

    def _report_settings(self) -> None:
        assert self.session is not None
        settings = self.session.settings
        for key, wire in REPORTED.items():
            value = settings.get(key, "")
            if self._reported.get(key) != value:
                self._reported[key] = value
                self.channel.send(b"S", parameter_status(wire, value))

    # -- COPY -----------------------------------------------------------------------------------
    def copy(self, stmt: ast.Copy, params: Sequence[Any] = ()) -> QueryResult:
        """The COPY sub-protocol, of a simple query or an Execute: data in (CopyData ... CopyDone)
        or out (binary COPY: the rows as ready CopyData messages, encoded batch by batch while they
        are sent)."""
        session = self.session
        assert session is not None
        check_statement(session, stmt)  # not through Session.execute_statement
        if stmt.to_client:
            out: list[copy.CopyOut] = []
            result = self._wait(lambda: copy.run_copy_to(session, stmt, out, params))
            sent = out[0]
            self.channel.send(b"H", _copy_response(sent.ncols, binary=sent.binary))
            if sent.messages is not None:
                self.channel.send_buffers(sent.messages)
            for line in sent.lines:  # one CopyData per row, as PostgreSQL sends (clients parse per message)
                self.channel.send(b"d", line)
            self.channel.send(b"c")
            return result
        ncols, binary = copy.check_copy_from(session, stmt)
        self.channel.send(b"G", _copy_response(ncols, binary=binary))
        self.channel.flush()
        parts: list[bytes] = []
        while True:
            kind, r = self.channel.read_message()
            if kind == b"d":
                parts.append(r.rest())
            elif kind == b"c":
                break
            elif kind == b"f":
                raise QueryCanceled(f"COPY from stdin failed: {r.cstring()}")
            elif kind in (b"H", b"S"):
                continue  # Flush / Sync during COPY: ignored, like PostgreSQL
            else:
                raise ProtocolViolation(f"unexpected message type 0x{kind[0]:02x} during COPY from stdin")
        data = b"".join(parts)
        return self._wait(lambda: copy.copy_from(session, stmt, data))

    # -- simple query ---------------------------------------------------------------------------
    def _simple_query(self, sql: str) -> None:
        self.skip_until_sync = False
        self.extended.portals.pop("", None)
        try:
            prepared = prepare_script(sql, self.is_user_relation)
            if not prepared:
                self.channel.send(b"I")
            for p in prepared:
                if p.empty:
                    self.channel.send(b"I")
                    continue
                if isinstance(p.stmt, ast.Copy):
                    self.complete(self.copy(p.stmt))
                    continue
                result = self.run_statement(p, ())
                if result.returns_rows or p.returns_rows:
                    self.channel.send(b"T", describe_columns(result.columns, result.formats))
                    send_rows(self.channel, result, result.formats)
                self.complete(result)
        except PiestreamError as e:
            if isinstance(e, ProtocolViolation):
                raise
            self._send_error(e)
        self._ready()


def _copy_response(ncols: int, *, binary: bool = False) -> bytes:
    """CopyInResponse / CopyOutResponse body: the format of the whole copy and of each column."""
    code = 1 if binary else 0
    return bytes([code]) + int16(ncols) + int16(code) * ncols


def _internal_errors(fn: Callable[[], QueryResult]) -> QueryResult:
    """Run `fn`; anything but a PiestreamError is a bug, reported as XX000 (and logged)."""
    try:
        return fn()
    except PiestreamError:
        raise
    except Exception as e:
        err = client_error(e)
        if err.sqlstate == "XX000":
            log.exception("catalog query failed")
        raise err from e
