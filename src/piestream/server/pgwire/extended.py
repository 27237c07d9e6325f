"""The extended query protocol: Parse, Bind, Describe, Execute and Close.

Parse makes a named (or the unnamed) prepared statement, with its parameters' types declared by
the client or inferred from the statement; Bind makes a portal of a statement and parameter
values; Describe reports parameter and result types; Execute runs a portal, all at once or
``limit`` rows at a time (PortalSuspended in between). A portal runs its statement once: Describe
of a portal runs it, and Execute sends the rows it kept. Errors make the connection skip
messages until Sync (`Connection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.types import DataType
from piestream.expr.expr import Literal
from piestream.frontend.parser import ast
from piestream.server import cursors
from piestream.server.pgwire import codec, params
from piestream.server.pgwire.protocol import (
    MessageReader,
    ProtocolViolation,
    count16,
    int32,
)
from piestream.server.pgwire.rows import describe_columns, send_rows
from piestream.server.pgwire.statements import Prepared, max_parameter, prepare_one
from piestream.server.privileges import check_names
from piestream.server.query import bind as bind_query
from piestream.server.results import QueryResult

if TYPE_CHECKING:
    from piestream.server.pgwire.connection import Connection


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


class ExtendedQuery:
    """One connection's prepared statements and portals, and the messages that use them."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.statements: dict[str, PreparedStatement] = {}
        self.portals: dict[str, Portal] = {}

    def deallocate(self, name: str) -> QueryResult:
        """SQL ``DEALLOCATE name``, or ``DEALLOCATE ALL`` for an empty name."""
        if name:
            if self.statements.pop(name, None) is None:
                raise PiestreamError(f'prepared statement "{name}" does not exist', sqlstate="26000")
        else:
            self.statements = {k: v for k, v in self.statements.items() if k == ""}
        return QueryResult("DEALLOCATE ALL" if not name else "DEALLOCATE")

    def sql_prepare(self, name: str, p: Prepared) -> QueryResult:
        """SQL ``PREPARE name AS query`` (a catalog query): a statement EXECUTE runs."""
        if name in self.statements:
            raise PiestreamError(f'prepared statement "{name}" already exists', sqlstate="42P05")
        n = max_parameter(p.text)
        self.statements[name] = PreparedStatement(p, [0] * n, [None] * n)
        return QueryResult("PREPARE")

    def sql_prepared(self, name: str, nargs: int) -> Prepared:
        """The statement SQL ``EXECUTE name (...)`` runs, checked against its argument count."""
        statement = self.statements.get(name)
        if statement is None:
            raise PiestreamError(f'prepared statement "{name}" does not exist', sqlstate="26000")
        if len(statement.oids) != nargs:
            raise PiestreamError(
                f'wrong number of parameters for prepared statement "{name}"', sqlstate="42601"
            )
        return statement.prepared

    def parse(self, r: MessageReader) -> None:
        """Parse: a prepared statement, its parameter types declared or inferred."""
        name = r.cstring()
        sql = r.cstring()
        n = r.count16()
        oids = [r.int32() for _ in range(n)]
        if name and name in self.statements:
            raise PiestreamError(f'prepared statement "{name}" already exists', sqlstate="42P05")
        for oid in oids:
            if not codec.is_known_oid(oid):
                raise FeatureNotSupported(f"parameter type oid {oid} is not supported")
        p = prepare_one(sql, self.conn.is_user_relation)
        rows = p.stmt.param_rows if isinstance(p.stmt, ast.Insert) else None
        count = max(len(oids), int(rows.max()) + 1 if rows is not None else max_parameter(sql))
        oids += [0] * (count - len(oids))
        inferred = params.infer_types(p.stmt, count, self.conn.lookup_relation)
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
                if e.sqlstate in ("42P01", "42703", "42883", "42501"):
                    raise
        self.statements[name] = statement
        self.conn.channel.send(b"1")

    def bind(self, r: MessageReader) -> None:
        """Bind: a portal of a prepared statement and parameter values."""
        portal_name = r.cstring()
        stmt_name = r.cstring()
        nformats = r.count16()
        formats = [r.int16() for _ in range(nformats)]
        nvalues = r.count16()
        raw: list[bytes | None] = []
        for _ in range(nvalues):
            n = r.int32()
            raw.append(None if n < 0 else r.bytes_(n))
        nresult = r.count16()
        result_formats = [r.int16() for _ in range(nresult)]
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
        self.conn.channel.send(b"2")

    def describe(self, r: MessageReader) -> None:
        """Describe: a statement's parameter and result types, or a portal's result columns."""
        what = r.byte()
        name = r.cstring()
        if what == b"S":
            statement = self.statements.get(name)
            if statement is None:
                raise PiestreamError(f'prepared statement "{name}" does not exist', sqlstate="26000")
            self.conn.channel.send(
                b"t",
                count16(len(statement.types))
                + b"".join(int32(params.reported_oid(t)) for t in statement.types),
            )
            columns = self._statement_columns(statement)
            if columns is None:
                self.conn.channel.send(b"n")
            else:
                self.conn.channel.send(b"T", describe_columns(columns, ()))
        elif what == b"P":
            portal = self.portals.get(name)
            if portal is None:
                assert self.conn.session is not None
                columns = cursors.portal_columns(self.conn.session, name) if name else None
                if columns is None:
                    raise PiestreamError(f'portal "{name}" does not exist', sqlstate="34000")
                self.conn.channel.send(b"T", describe_columns(columns, ()))  # a DECLAREd cursor
                return
            p = portal.statement.prepared
            if p.empty or not (p.returns_rows or p.catalog):
                self.conn.channel.send(b"n")
                return
            if portal.result is None:
                portal.result = self.conn.run_statement(p, portal.params)
            self.conn.channel.send(b"T", describe_columns(portal.result.columns, portal.formats))
        else:
            raise ProtocolViolation(f"invalid DESCRIBE message subtype {what[0]}")

    def _statement_columns(self, statement: PreparedStatement) -> list[tuple[str, DataType]] | None:
        """The result columns of a prepared statement, without its parameters' values."""
        p = statement.prepared
        if p.empty or not p.returns_rows:
            return None
        if statement.described is not None:
            return statement.described
        assert self.conn.session is not None
        dummies = [Literal(None, t) if t is not None else None for t in statement.types]
        if isinstance(p.stmt, ast.Query):
            check_names(self.conn.session, p.stmt)  # before its columns are bound
            bound = bind_query(self.conn.session, p.stmt.query, dummies)
            columns = list(zip(bound.names, bound.types, strict=True))
        elif isinstance(p.stmt, ast.Fetch):  # describing must not consume the cursor's rows
            columns = cursors.fetch_columns(self.conn.session, p.stmt)
        else:  # SHOW / EXPLAIN / DESCRIBE / catalog queries: side-effect free, so just run them
            columns = self.conn.run_statement(p, dummies).columns
        statement.described = columns
        return columns

    def execute(self, r: MessageReader) -> None:
        """Execute: a portal's rows (at most `limit` of them; the rest on the next Execute)."""
        name = r.cstring()
        limit = r.int32()
        portal = self.portals.get(name)
        if portal is None:
            raise PiestreamError(f'portal "{name}" does not exist', sqlstate="34000")
        p = portal.statement.prepared
        if p.empty:
            self.conn.channel.send(b"I")
            return
        if isinstance(p.stmt, ast.Copy):  # the COPY sub-protocol, then CommandComplete
            if portal.result is None:
                portal.result = self.conn.copy(p.stmt, portal.params)
            self.conn.complete(portal.result)
            return
        if portal.result is None:
            portal.result = self.conn.run_statement(p, portal.params)
        result = portal.result
        if not (result.returns_rows or p.returns_rows):
            self.conn.complete(result)
            return
        n = send_rows(self.conn.channel, result, portal.formats, portal.sent, limit)
        portal.sent += n
        if limit > 0 and portal.sent < len(result.rows):
            self.conn.channel.send(b"s")  # PortalSuspended
            return
        tag = result.tag
        if tag.startswith("SELECT"):
            tag = f"SELECT {n}"
        self.conn.complete(result, tag)

    def close(self, r: MessageReader) -> None:
        """Close: forget a prepared statement or portal (no error when there is none)."""
        what = r.byte()
        name = r.cstring()
        if what == b"S":
            self.statements.pop(name, None)
        elif what == b"P":
            self.portals.pop(name, None)
        else:
            raise ProtocolViolation(f"invalid CLOSE message subtype {what[0]}")
        self.conn.channel.send(b"3")
