"""Talking to a running server as a role: the Python API's `RemoteConnection`
(``piestream.connect("postgresql://user:pw@host:port/dev")``) and the Spark data source's
``url`` option.

An embedded `Connection` opens the data directory in this process and is its owner (a
superuser: nothing is checked, as the process can read every file anyway). A `RemoteConnection`
is a pgwire session of a role instead: it logs in as pgwire clients do (SCRAM-SHA-256, md5 or
trust, TLS with ``sslmode``), and every statement, `insert` (a binary ``COPY ... FROM STDIN``)
included, runs on the server through the same privilege checks as psql's — a role without
SELECT gets 42501 ``permission denied for table t``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

import pyarrow as pa

from piestream.common.errors import FeatureNotSupported, InvalidInput, PiestreamError
from piestream.common.text import parse_datum
from piestream.common.types import VARCHAR, DataType
from piestream.server.pgwire import codec, copy_binary
from piestream.server.pgwire.client import SimpleClient, TextResult
from piestream.server.results import QueryResult

if TYPE_CHECKING:
    pass

URL_SCHEMES = ("postgresql", "postgres", "piestream")


def is_url(target: object) -> bool:
    """Whether `connect`'s first argument names a server rather than a data directory."""
    return isinstance(target, str) and target.split("://", 1)[0] in URL_SCHEMES and "://" in target


@dataclass(frozen=True)
class ServerAddress:
    """Where and as whom to log in: a libpq-style URL's parts (``sslmode`` / ``sslrootcert``
    as query parameters; a password argument overrides the URL's)."""

    host: str = "127.0.0.1"
    port: int = 4566
    user: str = "root"
    database: str = "dev"
    password: str | None = None
    sslmode: str = "prefer"
    sslrootcert: str | None = None

    @classmethod
    def parse(cls, url: str, user: str | None = None, password: str | None = None) -> ServerAddress:
        parts = urlsplit(url)
        if parts.scheme not in URL_SCHEMES:
            raise InvalidInput(f"a server URL starts with postgresql://, not {url.split(':', 1)[0]}://")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = sorted(set(query) - {"sslmode", "sslrootcert", "user", "password"})
        if unknown:
            raise InvalidInput(f'invalid URL query parameter "{unknown[0]}"')
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 4566,
            user=user or query.get("user") or unquote(parts.username or "") or "root",
            database=unquote(parts.path.lstrip("/")) or "dev",
            password=password
            or query.get("password")
            or (unquote(parts.password) if parts.password else None),
            sslmode=query.get("sslmode", "prefer"),
            sslrootcert=query.get("sslrootcert"),
        )

    def login(self, application_name: str) -> SimpleClient:
        return SimpleClient(
            self.host,
            self.port,
            self.user,
            self.database,
            self.password,
            application_name=application_name,
            sslmode=self.sslmode,
            sslrootcert=self.sslrootcert,
        )


def param_texts(params: Sequence[Any]) -> list[str | None] | None:
    return [_param_text(v) for v in params] if params else None


def _param_text(v: Any) -> str | None:
    """A Python value as a text parameter (the server infers its type from the statement)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | Decimal | str):
        return str(v)
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat()
    if isinstance(v, dict):
        return json.dumps(v)
    raise FeatureNotSupported(f"a parameter of Python type {type(v).__name__} is not supported")


def typed_result(r: TextResult) -> QueryResult:
    """A text result with its columns' types (from their oids) and rows parsed into Python
    values as the embedded API returns them; columns of types it does not know stay text."""
    columns = [(name, codec.type_for_oid(oid) or VARCHAR) for name, oid in r.columns]
    rows = [
        tuple(None if v is None else parse_datum(v, t) for v, (_, t) in zip(row, columns, strict=True))
        for row in r.rows  # text from the wire: one parse per value, as any driver does
    ]
    return QueryResult(r.tag, columns=columns, rows=rows, notices=r.notices)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def relation_types(client: SimpleClient, relation: str, names: Sequence[str] | None = None) -> list[DataType]:
    """The types of `relation`'s columns (all visible ones in order, or `names`), as the
    server's catalog says; 42703 for a name it does not have."""
    (r,) = client.query(
        "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        [relation],
    )
    by_name: dict[str, DataType] = {}
    for name, oid in r.rows:
        assert name is not None and oid is not None
        t = codec.type_for_oid(int(oid))
        if t is None:
            raise FeatureNotSupported(
                f'column "{name}" has a type the piestream client cannot carry (oid {oid})'
            )
        by_name[name] = t
    if names is None:
        return list(by_name.values())
    missing = [n for n in names if n not in by_name]
    if missing:
        raise PiestreamError(
            f'column "{missing[0]}" of relation "{relation}" does not exist', sqlstate="42703"
        )
    return [by_name[n] for n in names]


def insert_arrow(client: SimpleClient, table: str, data: pa.Table) -> int:
    """`data`'s rows into `table` as one binary COPY (the server checks INSERT); its columns
    are matched by name and cast by Arrow to the column types. Returns the row count."""
    from piestream.server.dml import cast_to_column

    names = data.column_names
    types = relation_types(client, table, names)
    cols = [cast_to_column(data.column(i), t, n) for i, (n, t) in enumerate(zip(names, types, strict=True))]
    return copy_in(client, table, pa.table(cols, names=names), types)


def copy_in(client: SimpleClient, table: str, data: pa.Table, types: Sequence[DataType]) -> int:
    """`data` (columns already in their types' Arrow layout) COPYed into `table`."""
    cols = ", ".join(quote_ident(n) for n in data.column_names)
    body = copy_binary.encode_messages(data, types)
    (r,) = client.query(f"COPY {table} ({cols}) FROM STDIN WITH (FORMAT binary)", copy_in=body)
    return int(r.tag.split()[-1])
