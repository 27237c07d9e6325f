"""One client connection: startup, authentication, and the simple and extended query protocols.

A connection has its own thread (reading messages, writing results) and its own `Session`.
Statements run on a second, per-connection worker thread so that the connection thread can give
up waiting when the client cancels (CancelRequest) or `statement_timeout` passes: the client gets
57014 at once, while the statement itself runs to its end in the background (the engine has no
preemption points; a cancelled INSERT may still be applied). The next statement of that
connection waits for it, so a `Session` only ever runs one statement at a time.

Transactions are accepted and tracked for the status byte of ReadyForQuery, but each statement
applies on its own: ROLLBACK undoes nothing (a notice says so when writes happened). As in
PostgreSQL, after an error inside a transaction block every statement but COMMIT / ROLLBACK fails
with 25P02 until the block ends, so client libraries see the states they expect.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from piestream.common.errors import FeatureNotSupported, InternalError, PiestreamError
from piestream.common.types import DataType
from piestream.expr.expr import Literal
from piestream.frontend.parser import ast
from piestream.server.catalog import CatalogContext, CatalogViews
from piestream.server.pgwire import auth, codec, params
from piestream.server.pgwire.protocol import (
    CANCEL_REQUEST,
    GSSENC_REQUEST,
    PROTOCOL_V3,
    SSL_REQUEST,
    Channel,
    ClientGone,
    FieldDescription,
    MessageReader,
    ProtocolViolation,
    cstr,
    data_row,
    error_fields,
    int16,
    int32,
    parameter_status,
    row_description,
)
from piestream.server.pgwire.statements import Prepared, max_parameter, prepare_one, prepare_script
from piestream.server.query import bind as bind_query
from piestream.server.results import QueryResult
from piestream.server.session import Session

if TYPE_CHECKING:
    from piestream.server.pgwire.server import PgServer

log = logging.getLogger(__name__)

#: Settings reported to the client in ParameterStatus (PostgreSQL's GUC_REPORT ones), by wire name.
REPORTED = {
    "application_name": "application_name",
    "client_encoding": "client_encoding",
    "datestyle": "DateStyle",
    "integer_datetimes": "integer_datetimes",
    "intervalstyle": "IntervalStyle",
    "is_superuser": "is_superuser",
    "server_encoding": "server_encoding",
    "server_version": "server_version",
    "session_authorization": "session_authorization",
    "standard_conforming_strings": "standard_conforming_strings",
    "timezone": "TimeZone",
}
_ROW_STATEMENTS = (ast.ShowVariable, ast.ShowObjects, ast.ShowCreate, ast.Describe, ast.Explain)
_WRITE_STATEMENTS = (ast.Insert, ast.Update, ast.Delete)


class QueryCanceled(PiestreamError):
    sqlstate = "57014"


class InFailedTransaction(PiestreamError):
    sqlstate = "25P02"


class Terminate(Exception):
    """The client said goodbye (or the server is shutting down): close the connection."""


@dataclass
class PreparedStatement:
    prepared: Prepared
    oids: list[int]  # declared parameter type oids (0 = unspecified), one per $n
    types: list[DataType | None]  # declared or inferred
    described: list[tuple[str, DataType]] | None = None


@dataclass
class Portal:
    statement: PreparedStatement
    params: list[Any]
    formats: list[int]  # result format codes as sent
    result: QueryResult | None = None
    sent: int = 0  # rows already sent by Execute
    columns: list[tuple[str, DataType]] = field(default_factory=list)


def _timeout_seconds(value: str) -> float:
    """statement_timeout: milliseconds, or a number with a unit (ms, s, min, h); 0 disables."""
    text = value.strip().lower().strip("'")
    units = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)].strip()) * units[unit]
            except ValueError:
                return 0.0
    try:
        return float(text) / 1000.0
    except ValueError:
        return 0.0


class Connection:
    """The server side of one client connection."""

    def __init__(self, server: PgServer, sock: socket.socket, address: Any, pid: int) -> None:
        self.server = server
        self.sock = sock
        self.address = address
        self.channel = Channel(sock)
        self.pid = pid
        self.secret = secrets.randbits(31)
        self.user = ""
        self.database = ""
        self.session: Session | None = None
        self.catalog = CatalogViews(lambda: server.database.catalog.snapshot().relations())
        self.statements: dict[str, PreparedStatement] = {}
        self.portals: dict[str, Portal] = {}
        self.skip_until_sync = False
        self.txn_failed = False
        self.txn_wrote = False
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"piestream-stmt-{pid}")
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._busy = False
        self.closing = False  # server shutdown asked this connection to end
        self.started = time.time()
        self.query_started: float | None = None
        self.current_query = ""
        self.state = "starting"

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
            self.channel.send(b"E", error_fields("FATAL", sqlstate, message))
            self.channel.flush()

    def _close(self) -> None:
        self.state = "closed"
        self._worker.shutdown(wait=False, cancel_futures=True)
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
        if idle:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RD)  # wakes the blocked read

    def force_close(self) -> None:
        self._cancel.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    # -- startup --------------------------------------------------------------------------------
    def _startup(self) -> bool:
        ch = self.channel
        while True:
            code, r = ch.read_startup()
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                ch.send_raw(b"N")  # no TLS / GSS encryption: the client goes on in the clear
                ch.flush()
                continue
            if code == CANCEL_REQUEST:
                pid, secret = r.int32(), r.int32()
                self.server.cancel(pid, secret)
                return False
            break
        if code >> 16 != 3:
            raise ProtocolViolation(
                f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: server supports 3.0 to 3.0",
                sqlstate="0A000",
            )
        startup: dict[str, str] = {}
        unknown_options: list[str] = []
        while r.remaining():
            name = r.cstring()
            if not name:
                break
            value = r.cstring()
            if name.startswith("_pq_."):
                unknown_options.append(name)
            else:
                startup[name] = value
        if code != PROTOCOL_V3 or unknown_options:
            body = int32(0) + int32(len(unknown_options)) + b"".join(cstr(n) for n in unknown_options)
            ch.send(b"v", body)  # NegotiateProtocolVersion: we speak 3.0
        self.user = startup.get("user", "")
        if not self.user:
            raise PiestreamError("no PostgreSQL user name specified in startup packet", sqlstate="28000")
        self.database = startup.get("database") or self.user
        if self.server.too_many_connections():
            raise PiestreamError("sorry, too many clients already", sqlstate="53300")
        self._authenticate()
        self.session = self.server.database.session()
        settings = self.session.settings
        settings["session_authorization"] = self.user
        for name, value in startup.items():
            key = name.lower()
            if key in ("user", "database", "replication", "client_encoding"):
                continue
            if key == "options":
                for opt_name, opt_value in _parse_options(value):
                    settings[opt_name.lower()] = opt_value
                continue
            settings[key] = value
        settings["client_encoding"] = "UTF8"  # the only encoding spoken; clients adapt to the report
        for key, wire in REPORTED.items():
            ch.send(b"S", parameter_status(wire, settings.get(key, "")))
        ch.send(b"K", int32(self.pid) + int32(self.secret))
        self._reported = {k: settings.get(k, "") for k in REPORTED}
        self.state = "idle"
        self._ready()
        return True

    def _authenticate(self) -> None:
        ch = self.channel
        authenticator = self.server.authenticator
        if authenticator is None:
            ch.send(b"R", int32(0))
            return
        if authenticator.method == auth.MD5:
            salt = secrets.token_bytes(4)
            ch.send(b"R", int32(5) + salt)
            ch.flush()
            kind, r = ch.read_message()
            if kind != b"p":
                raise ProtocolViolation(f"expected password response, got message type {kind!r}")
            authenticator.check_md5(self.user, salt, r.cstring())
        else:
            ch.send(b"R", int32(10) + cstr("SCRAM-SHA-256") + b"\0")
            ch.flush()
            kind, r = ch.read_message()
            if kind != b"p":
                raise ProtocolViolation(f"expected SASL response, got message type {kind!r}")
            mechanism = r.cstring()
            if mechanism != "SCRAM-SHA-256":
                raise auth.AuthFailed(
                    f"client selected an invalid SASL authentication mechanism: {mechanism}", sqlstate="28000"
                )
            n = r.int32()
            exchange = authenticator.scram(self.user)
            first = exchange.server_first_message(r.bytes_(n).decode("utf-8", "replace"))
            ch.send(b"R", int32(11) + first.encode())
            ch.flush()
            kind, r = ch.read_message()
            if kind != b"p":
                raise ProtocolViolation(f"expected SASL response, got message type {kind!r}")
            final = exchange.server_final_message(r.rest().decode("utf-8", "replace"))
            ch.send(b"R", int32(12) + final.encode())
        ch.send(b"R", int32(0))

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
                    log.exception("connection %s: error handling message %r", self.address, kind)
                    raise InternalError(f"internal error: {type(bug).__name__}: {bug}") from bug
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
            self._parse(r)
        elif kind == b"B":
            self._bind(r)
        elif kind == b"D":
            self._describe(r)
        elif kind == b"E":
            self._execute(r)
        elif kind == b"S":
            self.skip_until_sync = False
            self.portals.pop("", None)
            self._ready()
        elif kind == b"H":
            self.channel.flush()
        elif kind == b"C":
            self._close_object(r)
        elif kind in (b"d", b"c", b"f"):
            pass  # CopyData / CopyDone / CopyFail outside COPY: PostgreSQL ignores them too
        else:
            raise ProtocolViolation(f"invalid frontend message type {kind[0]}")

    def _ready(self) -> None:
        status = b"I"
        if self.session is not None and self.session.in_transaction:
            status = b"E" if self.txn_failed else b"T"
        self.channel.send(b"Z", status)
        self.channel.flush()

    def _send_error(self, e: PiestreamError) -> None:
        if self.session is not None and self.session.in_transaction:
            self.txn_failed = True
        self.channel.send(
            b"E",
            error_fields("ERROR", e.sqlstate, e.message, detail=e.detail, hint=e.hint, position=e.position),
        )

    def _notice(self, message: str) -> None:
        self.channel.send(b"N", error_fields("NOTICE", "00000", message))

    # -- running statements ---------------------------------------------------------------------
    def _run(self, p: Prepared, values: Sequence[Any]) -> QueryResult:
        """Run one statement on the worker thread, answering cancel and statement_timeout."""
        assert self.session is not None
        stmt = p.stmt
        if p.deallocate is not None:
            if p.deallocate:
                if self.statements.pop(p.deallocate, None) is None:
                    raise PiestreamError(
                        f'prepared statement "{p.deallocate}" does not exist', sqlstate="26000"
                    )
            else:
                self.statements = {k: v for k, v in self.statements.items() if k == ""}
            return QueryResult("DEALLOCATE ALL" if not p.deallocate else "DEALLOCATE")
        if p.savepoint is not None:
            if p.savepoint == "ROLLBACK":
                self.txn_failed = False  # ROLLBACK TO SAVEPOINT recovers a failed block
            elif self.txn_failed:
                raise InFailedTransaction(
                    "current transaction is aborted, commands ignored until end of transaction block"
                )
            return QueryResult(p.savepoint)
        if self.txn_failed and not isinstance(stmt, ast.Commit | ast.Rollback):
            raise InFailedTransaction(
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
        try:
            result = self._wait(fn)
        finally:
            self.state = "idle"
        if isinstance(stmt, ast.Commit | ast.Rollback):
            if self.txn_failed and isinstance(stmt, ast.Commit):
                result = QueryResult("ROLLBACK")
            if self.txn_wrote and isinstance(stmt, ast.Rollback):
                result.notices.append(
                    "ROLLBACK does not undo writes: piestream applies each statement when it runs"
                )
            self.txn_failed = self.txn_wrote = False
        elif isinstance(stmt, _WRITE_STATEMENTS) and self.session.in_transaction:
            self.txn_wrote = True
        return result

    def _wait(self, fn: Callable[[], QueryResult]) -> QueryResult:
        assert self.session is not None
        timeout = _timeout_seconds(self.session.settings.get("statement_timeout", "0"))
        self._cancel.clear()
        done = threading.Event()
        future: Future[QueryResult] = self._worker.submit(fn)
        future.add_done_callback(lambda _: done.set())
        deadline = time.monotonic() + timeout if timeout > 0 else None
        while not done.is_set():
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            if done.wait(wait):
                break
            if self._cancel.is_set():
                raise QueryCanceled("canceling statement due to user request")
            if deadline is not None and time.monotonic() >= deadline:
                raise QueryCanceled("canceling statement due to statement timeout")
        return future.result()

    def _catalog_context(self) -> CatalogContext:
        assert self.session is not None
        return CatalogContext(
            user=self.user,
            database=self.database,
            settings=dict(self.session.settings),
            pid=self.pid,
            activity=self.server.activity(),
        )

    def _is_user_relation(self, name: str) -> bool:
        return self.server.database.catalog.get(name) is not None

    def _lookup(self, name: str) -> Any:
        return self.server.database.catalog.get(name)

    def _send_result(
        self, result: QueryResult, formats: Sequence[int], start: int = 0, limit: int = 0
    ) -> int:
        """DataRows from `start` (at most `limit`, 0 = all); returns how many were sent."""
        columns = result.columns
        encoders = [self._encoder(t, _format_of(formats, i)) for i, (_, t) in enumerate(columns)]
        rows = result.rows
        end = len(rows) if limit <= 0 else min(len(rows), start + limit)
        send = self.channel.send
        for row in rows[start:end]:
            send(
                b"D", data_row([None if v is None else enc(v) for enc, v in zip(encoders, row, strict=False)])
            )
        return end - start

    @staticmethod
    def _encoder(t: DataType, fmt: int) -> Callable[[Any], bytes]:
        if fmt == 1:
            if not codec.supports_binary(t):
                raise FeatureNotSupported(f"binary output of type {t} is not supported; use text format")
            return lambda v: codec.encode_binary(v, t)
        return lambda v: codec.encode_text(v, t)

    def _row_description(self, columns: Sequence[tuple[str, DataType]], formats: Sequence[int]) -> bytes:
        return row_description(
            [
                FieldDescription(name, t.pg_oid, t.pg_typlen, codec.type_modifier(t), _format_of(formats, i))
                for i, (name, t) in enumerate(columns)
            ]
        )

    def _complete(self, result: QueryResult, tag: str | None = None) -> None:
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

    # -- simple query ---------------------------------------------------------------------------
    def _simple_query(self, sql: str) -> None:
        self.skip_until_sync = False
        self.portals.pop("", None)
        try:
            prepared = prepare_script(sql, self._is_user_relation)
            if not prepared:
                self.channel.send(b"I")
            for p in prepared:
                if p.empty:
                    self.channel.send(b"I")
                    continue
                result = self._run(p, ())
                if result.returns_rows or p.returns_rows:
                    self.channel.send(b"T", self._row_description(result.columns, ()))
                    self._send_result(result, ())
                self._complete(result)
        except PiestreamError as e:
            if isinstance(e, ProtocolViolation):
                raise
            self._send_error(e)
        self._ready()

    # -- extended query -------------------------------------------------------------------------
    def _parse(self, r: MessageReader) -> None:
        name = r.cstring()
        sql = r.cstring()
        n = r.int16()
        oids = [r.int32() for _ in range(max(n, 0))]
        if name and name in self.statements:
            raise PiestreamError(f'prepared statement "{name}" already exists', sqlstate="42P05")
        for oid in oids:
            if not codec.is_known_oid(oid):
                raise FeatureNotSupported(f"parameter type oid {oid} is not supported")
        p = prepare_one(sql, self._is_user_relation)
        count = max(len(oids), max_parameter(sql))
        oids += [0] * (count - len(oids))
        inferred = params.infer_types(p.stmt, count, self._lookup)
        types = [
            codec.type_for_oid(o) if o not in (0, codec.UNKNOWN_OID) else inferred[i]
            for i, o in enumerate(oids)
        ]
        p.param_types = types
        statement = PreparedStatement(p, oids, types)
        if isinstance(p.stmt, ast.Query):
            # like PostgreSQL, report unknown relations / columns / functions at Parse time
            try:
                self._statement_columns(statement)
            except PiestreamError as e:
                if e.sqlstate in ("42P01", "42703", "42883"):
                    raise
        self.statements[name] = statement
        self.channel.send(b"1")

    def _bind(self, r: MessageReader) -> None:
        portal_name = r.cstring()
        stmt_name = r.cstring()
        nformats = r.int16()
        formats = [r.int16() for _ in range(max(nformats, 0))]
        nvalues = r.int16()
        raw: list[bytes | None] = []
        for _ in range(max(nvalues, 0)):
            n = r.int32()
            raw.append(None if n < 0 else r.bytes_(n))
        nresult = r.int16()
        result_formats = [r.int16() for _ in range(max(nresult, 0))]
        statement = self.statements.get(stmt_name)
        if statement is None:
            raise PiestreamError(f'prepared statement "{stmt_name}" does not exist', sqlstate="26000")
        if portal_name and portal_name in self.portals:
            raise PiestreamError(f'portal "{portal_name}" already exists', sqlstate="42P03")
        expected = len(statement.oids)
        if len(raw) != expected:
            raise ProtocolViolation(
                f'bind message supplies {len(raw)} parameters, but prepared statement "{stmt_name}" '
                f"requires {expected}"
            )
        if nformats not in (0, 1) and nformats != len(raw):
            raise ProtocolViolation(
                f"bind message has {nformats} parameter formats but {len(raw)} parameters"
            )
        values = params.bind_values(raw, formats, statement.oids, statement.types)
        self.portals[portal_name] = Portal(statement, values, result_formats)
        self.channel.send(b"2")

    def _describe(self, r: MessageReader) -> None:
        what = r.byte()
        name = r.cstring()
        if what == b"S":
            statement = self.statements.get(name)
            if statement is None:
                raise PiestreamError(f'prepared statement "{name}" does not exist', sqlstate="26000")
            self.channel.send(
                b"t",
                int16(len(statement.types))
                + b"".join(int32(params.reported_oid(t)) for t in statement.types),
            )
            columns = self._statement_columns(statement)
            if columns is None:
                self.channel.send(b"n")
            else:
                self.channel.send(b"T", self._row_description(columns, ()))
        elif what == b"P":
            portal = self.portals.get(name)
            if portal is None:
                raise PiestreamError(f'portal "{name}" does not exist', sqlstate="34000")
            p = portal.statement.prepared
            if p.empty or not (p.returns_rows or p.catalog):
                self.channel.send(b"n")
                return
            if portal.result is None:
                portal.result = self._run(p, portal.params)
            self.channel.send(b"T", self._row_description(portal.result.columns, portal.formats))
        else:
            raise ProtocolViolation(f"invalid DESCRIBE message subtype {what[0]}")

    def _statement_columns(self, statement: PreparedStatement) -> list[tuple[str, DataType]] | None:
        """The result columns of a prepared statement, without its parameters' values."""
        p = statement.prepared
        if p.empty or not p.returns_rows:
            return None
        if statement.described is not None:
            return statement.described
        assert self.session is not None
        dummies = [Literal(None, t) if t is not None else None for t in statement.types]
        if isinstance(p.stmt, ast.Query):
            bound = bind_query(self.session, p.stmt.query, dummies)
            columns = list(zip(bound.names, bound.types, strict=True))
        else:  # SHOW / EXPLAIN / DESCRIBE / catalog queries: side-effect free, so just run them
            columns = self._run(p, dummies).columns
        statement.described = columns
        return columns

    def _execute(self, r: MessageReader) -> None:
        name = r.cstring()
        limit = r.int32()
        portal = self.portals.get(name)
        if portal is None:
            raise PiestreamError(f'portal "{name}" does not exist', sqlstate="34000")
        p = portal.statement.prepared
        if p.empty:
            self.channel.send(b"I")
            return
        if portal.result is None:
            portal.result = self._run(p, portal.params)
        result = portal.result
        if not (result.returns_rows or p.returns_rows):
            self._complete(result)
            return
        n = self._send_result(result, portal.formats, portal.sent, limit)
        portal.sent += n
        if limit > 0 and portal.sent < len(result.rows):
            self.channel.send(b"s")  # PortalSuspended
            return
        tag = result.tag
        if tag.startswith("SELECT"):
            tag = f"SELECT {n}"
        self._complete(result, tag)

    def _close_object(self, r: MessageReader) -> None:
        what = r.byte()
        name = r.cstring()
        if what == b"S":
            self.statements.pop(name, None)
        elif what == b"P":
            self.portals.pop(name, None)
        else:
            raise ProtocolViolation(f"invalid CLOSE message subtype {what[0]}")
        self.channel.send(b"3")


def _internal_errors(fn: Callable[[], QueryResult]) -> QueryResult:
    """Run `fn`; anything but a PiestreamError is a bug, reported as XX000 (and logged)."""
    try:
        return fn()
    except PiestreamError:
        raise
    except Exception as e:
        log.exception("catalog query failed")
        raise InternalError(f"internal error: {type(e).__name__}: {e}") from e


def _format_of(formats: Sequence[int], i: int) -> int:
    if not formats:
        return 0
    if len(formats) == 1:
        return formats[0]
    return formats[i] if i < len(formats) else 0


def _parse_options(options: str) -> list[tuple[str, str]]:
    """The startup ``options`` string: ``-c name=value`` and ``--name=value`` (backslash escapes spaces)."""
    words: list[str] = []
    current = ""
    escape = False
    for ch in options:
        if escape:
            current += ch
            escape = False
        elif ch == "\\":
            escape = True
        elif ch.isspace():
            if current:
                words.append(current)
            current = ""
        else:
            current += ch
    if current:
        words.append(current)
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        w = words[i]
        setting = None
        if w == "-c" and i + 1 < len(words):
            setting = words[i + 1]
            i += 1
        elif w.startswith("-c") or w.startswith("--"):
            setting = w[2:]
        if setting and "=" in setting:
            k, v = setting.split("=", 1)
            out.append((k.replace("-", "_"), v))
        i += 1
    return out
