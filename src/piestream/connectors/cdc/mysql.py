"""The ``mysql-cdc`` source connector: a MySQL / MariaDB table followed through its binlog (ROW
format, full row images, full row metadata), snapshot first, then its changes, exactly once.

One split per table, read by a binlog client of its own (``server.id``). The offset (`CdcOffset`)
is state: the binlog file and position of the next transaction to apply, committed with the epoch.

- **Snapshot.** The first read opens ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and reads the
  binlog position of exactly that snapshot C: lock-free on MariaDB (its ``binlog_snapshot_file`` /
  ``binlog_snapshot_position`` status, maintained by the server for this purpose), on MySQL under
  a brief ``FLUSH TABLES WITH READ LOCK`` around the START TRANSACTION and ``SHOW MASTER STATUS``
  (what Debezium does). The stream from C then holds every transaction that committed after the
  snapshot: no gap, no duplicate, and no per-chunk watermarks or buffering as RisingWave's
  backfill merge needs. The copy is chunked by primary key (keyset pagination, ``WHERE (pk) >
  cursor ORDER BY pk LIMIT n``), one chunk per epoch, the cursor in the offset. The snapshot
  lives in this process's connection; after a restart the copy goes on from the cursor in a
  fresh snapshot at L > C, while the stream still starts at C: the changes of [C, L) replay over
  rows copied at L, which the table's upsert semantics (its primary key, ON CONFLICT overwrite)
  turn into the upstream's final rows. Never a re-snapshot.
- **Stream.** A non-blocking ``COM_BINLOG_DUMP`` from the committed position (through
  ``mysql-replication``), repeatable: the binlog does not change under a position, so a retried
  epoch reads the same changes. Positions advance only at transaction ends (XID / COMMIT, or a
  DDL statement); `applied` counts the changes of a transaction already applied when one spans
  epochs. MySQL keeps no per-client position: nothing is acknowledged upstream, the binlog must
  simply outlive piestream's lag (a purged file fails the job, never a silent re-copy).
- Inserts and updates become upserts, deletes a DELETE of the key; an update that changes the
  key also deletes the old key. Upstream TRUNCATE deletes every row of the table (the source
  executor's `ReadResult.truncate_at`).
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common.chunk import Op
from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.types import DataType, TypeKind
from piestream.connectors.cdc.common import (
    CdcConnector,
    CdcError,
    CdcReader,
    CdcStatus,
    Changes,
    Snapshots,
    UpstreamUnavailable,
    lag_seconds,
)
from piestream.connectors.cdc.offset import CdcOffset
from piestream.connectors.options import InvalidOption, parse_int, source_limits
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.stream.connector import ReadResult, SourceReader

log = logging.getLogger(__name__)

_REQUIRED = ("hostname", "username", "database.name")
#: client error codes that mean "the server is not reachable now" (the source pauses, retried)
_UNREACHABLE = frozenset({2003, 2006, 2013, 2055, 1040, 1053, 1927, 2002, 2026})


@dataclass(frozen=True)
class MySqlCdcConfig:
    """A mysql-cdc table's options (RisingWave's names)."""

    host: str
    port: int
    user: str
    password: str
    database: str
    table: str
    server_id: int
    ssl_mode: str = "disabled"

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def key(self) -> str:
        return f"mysql:{self.host}:{self.port}:{self.server_id}"

    def settings(self, timeout: int = 5) -> dict[str, Any]:
        """PyMySQL connection settings: UTC session time zone (TIMESTAMP values read as UTC, as
        the binlog has them), utf8mb4, TLS as ``ssl.mode`` says (PyMySQL's own default, TLS if the
        server offers it, builds a certificate context per connection: 0.4 s here, per read)."""
        tls: dict[str, Any] = {}
        if self.ssl_mode == "disabled":
            tls["ssl_disabled"] = True
        elif self.ssl_mode == "required":
            tls["ssl"] = {"verify_mode": False}  # encrypted, the certificate not checked
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "connect_timeout": timeout,
            "charset": "utf8mb4",
            "init_command": "SET time_zone = '+00:00'",
            **tls,
        }

    def connect(self, timeout: int = 5) -> Any:
        import pymysql

        try:
            return pymysql.connect(
                **self.settings(timeout), database=self.database, autocommit=True, read_timeout=60
            )
        except pymysql.err.MySQLError as e:
            raise _classify(e, self) from None


def _classify(e: Exception, cfg: MySqlCdcConfig) -> PiestreamError:
    code = e.args[0] if e.args and isinstance(e.args[0], int) else None
    text = str(e.args[1] if len(e.args) > 1 else e).strip()
    where = f'MySQL at {cfg.host}:{cfg.port} (database "{cfg.database}", user "{cfg.user}")'
    if code in _UNREACHABLE or code == 1045:  # 1045: access denied; 2026: TLS refused
        return UpstreamUnavailable(f"mysql-cdc: cannot connect to {where}: {text}")
    if code == 1236:  # the binlog position is gone (purged)
        return CdcError(
            f"mysql-cdc {cfg.qualified}: the binlog position piestream committed is no longer on the "
            f"server ({text}): the changes since then are lost, so the table cannot resume (it is "
            "never copied again silently); drop and recreate it"
        )
    return CdcError(f"mysql-cdc {cfg.qualified}: {text}")


def mysql_config(spec: SourceSpec) -> MySqlCdcConfig:
    o = spec.options
    for k in _REQUIRED:
        if not o.get(k):
            raise InvalidOption(f"mysql-cdc needs the option {k}")
    database = o["database.name"]
    table = o.get("table.name") or ""
    if "." in table:  # 'db.table'
        database, table = table.split(".", 1)
    if not table:
        raise InvalidOption("mysql-cdc needs table.name (or CREATE TABLE ... FROM source TABLE 'db.table')")
    qualified = f"{database}.{table}"
    sid = o.get("server.id")
    server_id = (
        parse_int("server.id", sid, minimum=1)
        if sid
        else 10000 + zlib.crc32(f"{spec.name}/{qualified}".encode()) % (1 << 30)
    )
    if server_id >= 1 << 32:
        raise InvalidOption("server.id must be below 2^32")
    ssl_mode = (o.get("ssl.mode") or "disabled").strip().lower()
    if ssl_mode not in ("disabled", "preferred", "required"):
        raise InvalidOption(f"ssl.mode must be disabled, preferred or required (not {ssl_mode!r})")
    return MySqlCdcConfig(
        host=o["hostname"],
        port=parse_int("port", o.get("port") or "3306", minimum=1),
        user=o["username"],
        password=o.get("password") or "",
        database=database,
        table=table,
        server_id=server_id,
        ssl_mode=ssl_mode,
    )


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- upstream catalog and types -------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamColumn:
    name: str
    data_type: str  # information_schema DATA_TYPE: int, decimal, varchar, longtext, ...
    column_type: str  # COLUMN_TYPE: int(10) unsigned, tinyint(1), binary(4), ...
    precision: int | None
    scale: int | None
    octets: int | None  # CHARACTER_OCTET_LENGTH (binary(n): n)
    is_json: bool  # MySQL json, or MariaDB's json (longtext CHECK (json_valid(c)))

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type


_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"})
_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_SIMPLE = {
    "float": TypeKind.REAL,
    "double": TypeKind.DOUBLE,
    "date": TypeKind.DATE,
    "time": TypeKind.TIME,
    "datetime": TypeKind.TIMESTAMP,
    "timestamp": TypeKind.TIMESTAMPTZ,
}


def followed_kinds(col: UpstreamColumn) -> frozenset[TypeKind]:
    """The piestream types a column of this upstream type can feed (RisingWave's mapping); empty
    when the type is not followed."""
    d = col.data_type
    if d == "tinyint":
        if col.column_type.startswith("tinyint(1)"):  # MySQL's BOOL
            return frozenset({TypeKind.BOOLEAN, TypeKind.SMALLINT})
        return frozenset({TypeKind.SMALLINT})
    if d == "smallint":
        return frozenset({TypeKind.INT if col.unsigned else TypeKind.SMALLINT})
    if d in ("mediumint", "int"):
        return frozenset({TypeKind.BIGINT if col.unsigned and d == "int" else TypeKind.INT})
    if d == "bigint":
        return frozenset({TypeKind.NUMERIC if col.unsigned else TypeKind.BIGINT})
    if d == "decimal":  # piestream's NUMERIC holds 28 digits: a wider column is refused
        ok = (col.precision or 0) <= 28 and (col.scale or 0) <= nm.NUMERIC_MAX_SCALE
        return frozenset({TypeKind.NUMERIC}) if ok else frozenset()
    if col.is_json:
        return frozenset({TypeKind.JSONB, TypeKind.VARCHAR})
    if d in _TEXT:
        return frozenset({TypeKind.VARCHAR})
    if d in _BINARY:
        return frozenset({TypeKind.BYTEA})
    kind = _SIMPLE.get(d)
    return frozenset({kind}) if kind is not None else frozenset()


@dataclass(frozen=True)
class UpstreamTable:
    columns: dict[str, UpstreamColumn]
    pk: tuple[str, ...]
    engine: str


def upstream_table(cur: Any, cfg: MySqlCdcConfig) -> UpstreamTable:
    cur.execute(
        "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (cfg.database, cfg.table),
    )
    row = cur.fetchone()
    if row is None:
        raise CdcError(f'mysql-cdc: upstream table "{cfg.qualified}" does not exist', sqlstate="42P01")
    engine = str(row[0] or "")
    json_cols: set[str] = set()
    with suppress(Exception):  # MariaDB's JSON is LONGTEXT with a json_valid check (10.2+)
        cur.execute(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
            (cfg.database, cfg.table),
        )
        for (clause,) in cur.fetchall():
            m = re.fullmatch(r"json_valid\(`((?:[^`]|``)+)`\)", str(clause).strip())
            if m:
                json_cols.add(m.group(1).replace("``", "`"))
    cur.execute(
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
        "CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (cfg.database, cfg.table),
    )
    cols = {}
    for name, dtype, ctype, prec, scale, octets in cur.fetchall():
        d = str(dtype).lower()
        cols[str(name)] = UpstreamColumn(
            str(name), d, str(ctype).lower(),
            None if prec is None else int(prec), None if scale is None else int(scale),
            None if octets is None else int(octets), d == "json" or str(name) in json_cols,
        )  # fmt: skip
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
        (cfg.database, cfg.table),
    )
    return UpstreamTable(cols, tuple(str(r[0]) for r in cur.fetchall()), engine)


def _check_binlog(cur: Any) -> None:
    """The server logs what the connector needs: ROW events with full images and column names."""
    cur.execute(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
        "('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata')"
    )
    v = {str(k).lower(): str(val).upper() for k, val in cur.fetchall()}
    need = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
    for name, want in {**need, "binlog_row_metadata": "FULL"}.items():
        if v.get(name) != want:
            raise CdcError(
                f"mysql-cdc: the upstream needs {name} = {want} (it has {v.get(name, 'no such variable')})"
            )


def check_source(spec: SourceSpec) -> None:
    """CREATE SOURCE of a shared CDC source: the server answers with these credentials and logs
    its binlog as the connector needs."""
    cfg = mysql_config(replace(spec, options={"table.name": "source", **spec.options}))
    conn = cfg.connect()
    try:
        _check_binlog(conn.cursor())
    finally:
        conn.close()


def check_upstream(spec: SourceSpec, pk: Sequence[str]) -> MySqlCdcConfig:
    """What CREATE TABLE checks before anything is made: credentials, the binlog settings, a
    transactional table with the declared primary key, a followed type for every declared
    column, a server id that is not the server's own."""
    cfg = mysql_config(spec)
    if not pk:
        raise InvalidOption(f'a mysql-cdc table needs a PRIMARY KEY ("{spec.name}" has none)')
    conn = cfg.connect()
    try:
        cur = conn.cursor()
        _check_binlog(cur)
        up = upstream_table(cur, cfg)
        if up.engine.lower() != "innodb":
            raise FeatureNotSupported(
                f'mysql-cdc: upstream table "{cfg.qualified}" uses {up.engine}: only InnoDB tables '
                "have the consistent snapshot the copy needs"
            )
        for name, t in spec.columns:
            col = up.columns.get(name)
            if col is None:
                raise CdcError(
                    f'mysql-cdc: column "{name}" does not exist in upstream table "{cfg.qualified}"'
                )
            kinds = followed_kinds(col)
            kind = TypeKind.BIGINT if t.kind is TypeKind.SERIAL else t.kind
            if kind not in kinds:
                raise FeatureNotSupported(
                    f'mysql-cdc: column "{name}" has upstream type {col.column_type}, '
                    + (f"which does not map to {t}" if kinds else "which is not supported")
                )
        if tuple(pk) != up.pk:
            raise InvalidOption(
                f"mysql-cdc: the PRIMARY KEY ({', '.join(pk)}) must be the upstream table's "
                f"({', '.join(up.pk) or 'none'})"
            )
        cur.execute("SELECT @@server_id")
        if int(cur.fetchone()[0]) == cfg.server_id:
            raise InvalidOption(f"mysql-cdc: server.id {cfg.server_id} is the upstream server's own")
    finally:
        conn.close()
    return cfg


# -- values -> Arrow, per column ------------------------------------------------------------------


@dataclass
class _Column:
    """A followed column: its piestream type and what the upstream says about it."""

    name: str
    type: DataType
    up: UpstreamColumn


def to_arrow(values: Sequence[Any], col: _Column, errors: list[tuple[str, str]]) -> pa.Array:
    """One column's Python values (PyMySQL's for the snapshot, mysql-replication's for the
    binlog: the same types) as an Arrow column of the piestream type, in one conversion; a value
    piestream cannot hold (a TIME beyond 24 h, a zero date) is NULL with an error record."""
    t = col.type
    k = t.kind
    if k is TypeKind.BOOLEAN:
        return pc.not_equal(_array(values, pa.int64(), col, errors), 0)
    if k is TypeKind.NUMERIC:
        return _numeric(values, col, errors)
    if k is TypeKind.JSONB:
        from piestream.expr.functions.cast import from_text

        texts = [v if v is None or isinstance(v, str) else json.dumps(_plain_json(v)) for v in values]
        return from_text(pa.array(texts, pa.string()), t)  # the per-value reason: MySQL's JSON
    if k is TypeKind.TIME:
        us = _array(values, pa.duration("us"), col, errors).cast(pa.int64())
        bad = pc.or_(pc.less(us, 0), pc.greater_equal(us, 86_400_000_000))
        if pc.any(bad).as_py():
            errors.append(("22008", f'mysql-cdc: a TIME value of "{col.name}" beyond 00:00..24:00 is NULL'))
            us = pc.if_else(bad, pa.scalar(None, pa.int64()), us)
        return us.cast(pa.time64("us"))
    if k is TypeKind.TIMESTAMPTZ:  # naive UTC datetimes (the session's and the binlog's zone)
        return _array(values, pa.timestamp("us"), col, errors).cast(t.arrow)
    arr = _array(values, t.arrow, col, errors)
    if k is TypeKind.BYTEA and col.up.data_type == "binary" and col.up.octets:
        n = col.up.octets  # the binlog drops BINARY(n)'s trailing zero bytes: pad them back
        lens = pc.binary_length(arr)
        if len(arr) and pc.any(pc.less(lens, n)).as_py():
            arr = pa.array([None if v is None else v.ljust(n, b"\0") for v in arr.to_pylist()], pa.binary())
    return arr


def _plain_json(v: Any) -> Any:
    """MySQL's binary JSON as mysql-replication decodes it (bytes keys and strings) as JSON."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {_plain_json(a): _plain_json(b) for a, b in v.items()}
    if isinstance(v, list | tuple):
        return [_plain_json(x) for x in v]
    return v


def _array(values: Sequence[Any], typ: pa.DataType, col: _Column, errors: list[tuple[str, str]]) -> pa.Array:
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = []
    for v in values:  # per value only after the column's conversion failed: find the bad ones
        try:
            pa.array([v], typ)
            out.append(v)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            out.append(None)
    errors.append(("22P02", f'mysql-cdc: a value of "{col.name}" that {col.type} cannot hold is NULL'))
    return pa.array(out, typ)


def _numeric(values: Sequence[Any], col: _Column, errors: list[tuple[str, str]]) -> pa.Array:
    """DECIMAL(p, s) (a fixed scale) or BIGINT UNSIGNED as piestream NUMERIC, column-wise: the
    values as decimal128(38, s), whose unscaled integers are the storage's as they are."""
    scale = (col.up.scale or 0) if col.up.data_type == "decimal" else 0
    arr = _array(values, pa.decimal128(38, scale), col, errors)
    unscaled = arr.view(pa.decimal128(38, 0))
    scales = pa.array(np.full(len(arr), scale, np.int8))
    mask = arr.is_null() if arr.null_count else None
    return nm.wrap(pa.StructArray.from_arrays([unscaled, scales], fields=list(nm.NUMERIC_STORAGE), mask=mask))


def _batch(
    columns: list[_Column], cols: Sequence[Sequence[Any]], errors: list[tuple[str, str]]
) -> pa.RecordBatch:
    arrays = [to_arrow(v, c, errors) for v, c in zip(cols, columns, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=[c.name for c in columns])


# -- the reader -----------------------------------------------------------------------------------


@dataclass
class _Snapshot:
    """An open consistent-snapshot transaction (this process only)."""

    conn: Any

    def close(self) -> None:
        with suppress(Exception):
            self.conn.close()


_SNAPSHOTS = Snapshots()


def consistent_snapshot(cfg: MySqlCdcConfig, *, lock_free: bool = True) -> tuple[Any, str, int]:
    """A connection in ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and the binlog position
    (file, position) of exactly that snapshot. MariaDB reports it lock-free; MySQL (or
    `lock_free` False) takes it under a brief global read lock."""
    conn = cfg.connect()
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if lock_free:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            st = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            if st.get("binlog_snapshot_file") and st.get("binlog_snapshot_position"):
                return conn, st["binlog_snapshot_file"], int(st["binlog_snapshot_position"])
            cur.execute("ROLLBACK")  # MySQL: no such status, take the lock
        cur.execute("FLUSH TABLES WITH READ LOCK")
        try:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
        finally:
            cur.execute("UNLOCK TABLES")
        if row is None:
            raise CdcError("mysql-cdc: the upstream has no binlog (log_bin is off)")
        return conn, str(row[0]), int(row[1])
    except BaseException:
        conn.close()
        raise


def _binlogs(cur: Any) -> list[tuple[str, int]]:
    cur.execute("SHOW BINARY LOGS")
    return [(str(r[0]), int(r[1])) for r in cur.fetchall()]


@dataclass(frozen=True)
class MySqlCdcReader(CdcReader):
    cfg: MySqlCdcConfig
    columns: tuple[tuple[str, DataType], ...]
    _up: list[UpstreamTable] = field(default_factory=list, compare=False)
    connector = "mysql-cdc"

    @property
    def key(self) -> str:
        return self.cfg.key

    @property
    def qualified(self) -> str:
        return self.cfg.qualified

    def transient(self) -> tuple[type[BaseException], ...]:
        return (UpstreamUnavailable,)

    def reset(self) -> None:
        _SNAPSHOTS.drop(self.cfg.key)

    def end_snapshot(self) -> None:
        _SNAPSHOTS.drop(self.cfg.key)

    def _columns(self, cur: Any | None = None) -> list[_Column]:
        """The followed columns with their upstream types (read once per reader)."""
        if not self._up:
            if cur is not None:
                self._up.append(upstream_table(cur, self.cfg))
            else:
                conn = self.cfg.connect()
                try:
                    self._up.append(upstream_table(conn.cursor(), self.cfg))
                finally:
                    conn.close()
        up = self._up[0]
        return [_Column(n, t, up.columns[n]) for n, t in self.columns]

    def _pk(self) -> tuple[str, ...]:
        if not self._up:
            self._columns()
        return self._up[0].pk

    # -- snapshot -------------------------------------------------------------------------------

    def start(self) -> CdcOffset:
        import pymysql

        try:
            conn, file, pos = consistent_snapshot(self.cfg)
        except pymysql.err.MySQLError as e:
            raise _classify(e, self.cfg) from None
        _SNAPSHOTS.keep(self.cfg.key, _Snapshot(conn))
        return CdcOffset("snapshot", pos, file=file)

    def _snapshot(self, off: CdcOffset) -> _Snapshot:
        snap: _Snapshot | None = _SNAPSHOTS.get(self.cfg.key)
        if snap is not None:
            return snap
        conn = self.cfg.connect()
        try:  # the stream must still be there to copy for it
            files = [f for f, _ in _binlogs(conn.cursor())]
        finally:
            conn.close()
        if off.file not in files:
            raise _classify(Exception(1236, f"binlog file {off.file} was purged"), self.cfg)
        conn, _, _ = consistent_snapshot(self.cfg)
        snap = _Snapshot(conn)
        _SNAPSHOTS.keep(self.cfg.key, snap)
        return snap

    def snapshot_chunk(self, off: CdcOffset, budget: int) -> ReadResult:
        import pymysql

        try:
            snap = self._snapshot(off)
            cur = snap.conn.cursor()
            columns = self._columns(cur)
            pk = self._pk()
            sel = ", ".join(_quote(c.name) for c in columns)
            keys = ", ".join(_quote(k) for k in pk)
            where = ""
            params: tuple[Any, ...] = ()
            if off.cursor is not None:
                kinds = {c.name: c.type.kind for c in columns}
                params = tuple(
                    bytes.fromhex(v) if kinds.get(k) is TypeKind.BYTEA else v
                    for k, v in zip(pk, off.cursor, strict=True)
                )
                where = f" WHERE ({keys}) > ({', '.join(['%s'] * len(pk))})"
            table = f"{_quote(self.cfg.database)}.{_quote(self.cfg.table)}"
            cur.execute(f"SELECT {sel} FROM {table}{where} ORDER BY {keys} LIMIT {int(budget)}", params)
            rows = cur.fetchall()
        except pymysql.err.MySQLError as e:
            raise _classify(e, self.cfg) from None
        n = len(rows)
        errors: list[tuple[str, str]] = []
        batches = []
        if n:
            cols = list(zip(*rows, strict=True))  # the rows transposed to columns (in C)
            batches.append(_batch(columns, cols, errors))
        names = [c.name for c in columns]

        def last() -> tuple[str, ...]:
            return tuple(_cursor_text(rows[-1][names.index(k)]) for k in pk)

        return self.chunk_result(off, batches, n, budget, last, errors)

    # -- stream ---------------------------------------------------------------------------------

    def stream(self, off: CdcOffset, budget: int) -> ReadResult:
        import pymysql
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        changes = _Changes(self, off, budget)
        stream = BinLogStreamReader(
            connection_settings={**self.cfg.settings(), "read_timeout": 60},
            server_id=self.cfg.server_id,
            resume_stream=True,
            log_file=off.file,
            log_pos=off.lsn,
            blocking=False,
            only_events=[
                RotateEvent, GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent,
                WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent,
            ],
            only_schemas=[self.cfg.database],
            only_tables=[self.cfg.table],
            enable_logging=False,
        )  # fmt: skip
        try:
            changes.feed(stream)
        except pymysql.err.MySQLError as e:
            raise _classify(e, self.cfg) from None
        finally:
            stream.close()
        return changes.result()


def _cursor_text(v: Any) -> str:
    """A key value as the offset's text (bytes in hex; MySQL parses the others' str)."""
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, Decimal):
        return format(v, "f")
    return str(v)


_TRUNCATE = re.compile(r"^\s*TRUNCATE\s+(?:TABLE\s+)?(?:`?(?P<db>[^`.\s]+)`?\.)?`?(?P<t>[^`\s;]+)`?", re.I)


class _Changes(Changes):
    """One read's changes of the followed table from binlog events: skips what the offset says
    is applied, stops after `budget` changes, and converts the rows column-wise at the end."""

    def __init__(self, reader: MySqlCdcReader, off: CdcOffset, budget: int) -> None:
        super().__init__(off, budget)
        self.reader = reader
        self.file = off.file
        self.pos = off.lsn
        self.rows: list[dict[str, Any]] = []
        self._in_group = False
        self._began = False
        self._seen = 0
        self._checked = False

    def feed(self, stream: Any) -> None:
        from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

        for ev in stream:  # per event: the binlog is a sequence
            if isinstance(ev, RotateEvent):
                if not self._in_group:
                    self.file, self.pos = ev.next_binlog, ev.position
            elif isinstance(ev, MariadbGtidEvent | GtidEvent):
                self._in_group, self._began, self._seen = True, False, 0
            elif isinstance(ev, QueryEvent):
                q = ev.query.strip().upper() if isinstance(ev.query, str) else ""
                if q == "BEGIN":
                    self._in_group, self._began = True, True
                elif q == "COMMIT" or not self._began:  # a commit, or a DDL statement of its own
                    if self._truncates_table(ev):
                        if self.used >= self.budget:
                            return  # the next read starts before it
                        # a statement of its own (an implicit commit): the position moves past
                        # it with `_end`, so a read from before it sees it, one from after never
                        self.truncate()
                    self._end(stream, ev)
            elif isinstance(ev, XidEvent):
                self._end(stream, ev)
            elif (ev.schema, ev.table) == (self.reader.cfg.database, self.reader.cfg.table):
                kind = (
                    "update" if isinstance(ev, UpdateRowsEvent)
                    else "delete" if isinstance(ev, DeleteRowsEvent) else "insert"
                )  # fmt: skip
                if not self._rows(ev, kind):
                    return

    def _truncates_table(self, ev: Any) -> bool:
        m = _TRUNCATE.match(ev.query)
        if m is None:
            return False
        db = m.group("db") or (ev.schema.decode() if isinstance(ev.schema, bytes) else str(ev.schema))
        return (db, m.group("t")) == (self.reader.cfg.database, self.reader.cfg.table)

    def _end(self, stream: Any, ev: Any) -> None:
        self.file, self.pos = stream.log_file, ev.packet.log_pos
        self.applied, self.commit_ts = 0, int(ev.timestamp) * 1_000_000
        self._in_group = self._began = False
        self._seen = 0

    def _rows(self, ev: Any, kind: str) -> bool:
        """Take a rows event's changes (after those already applied, up to the budget); False
        when the budget is spent."""
        rows = ev.rows
        skip = max(0, self.applied - self._seen)
        self._seen += len(rows)
        todo = rows[skip:]
        if not todo:
            return True
        if not self._checked:
            self._check_columns(todo[0]["after_values" if kind == "update" else "values"])
        room = self.budget - self.used
        if room <= 0:
            return False
        take = todo[:room]
        self.used += len(take)
        if kind == "insert":
            self.rows.extend(r["values"] for r in take)
            self.ops.extend([Op.INSERT] * len(take))
        elif kind == "delete":
            self.rows.extend(r["values"] for r in take)
            self.ops.extend([Op.DELETE] * len(take))
        else:
            pk = self.reader._pk()
            for r in take:  # per row: a key change deletes the old key first, in the rows' order
                old, new = r["before_values"], r["after_values"]
                if any(old[k] != new[k] for k in pk):
                    self.rows.append(old)
                    self.ops.append(Op.DELETE)
                self.rows.append(new)
                self.ops.append(Op.INSERT)
        self.applied = self._seen - (len(todo) - len(take))
        return len(take) == len(todo)

    def _check_columns(self, row: Mapping[str, Any]) -> None:
        missing = [n for n, _ in self.reader.columns if n not in row]
        if missing:
            raise CdcError(
                f'mysql-cdc: the binlog rows of "{self.reader.cfg.qualified}" have no column '
                f'"{missing[0]}" (dropped upstream, or binlog_row_metadata is not FULL)'
            )
        self._checked = True

    def position(self) -> CdcOffset:
        return CdcOffset(
            "stream", self.pos, None, self.applied, self.off.snapshot_rows, self.commit_ts, self.file
        )

    def batch(self, errors: list[tuple[str, str]]) -> pa.RecordBatch:
        columns = self.reader._columns()
        cols = [[r[c.name] for r in self.rows] for c in columns]  # one pass per column
        return _batch(columns, cols, errors)


def mysql_cdc_connector(spec: SourceSpec) -> tuple[SourceReader, SourceLimits]:
    cfg = mysql_config(spec)
    if spec.generated:
        raise InvalidOption("generated columns are not supported in a mysql-cdc table")
    return MySqlCdcReader(cfg, tuple(spec.columns)), source_limits(spec)


# -- what the DDL handlers and the operations view ask --------------------------------------------


def _table_options(source: dict[str, str], table: str) -> dict[str, str]:
    """A table from a shared source reads the binlog with a client id of its own: the source's
    ``server.id`` plus a number of the table's name (two clients of one id would cut each other
    off)."""
    opts = dict(source)
    base = source.get("server.id")
    if base:
        offset = 1 + zlib.crc32(table.lower().encode()) % 1_000_000
        opts["server.id"] = str(parse_int("server.id", base, minimum=1) + offset)
    return opts


def _cfg(options: Mapping[str, str], name: str) -> MySqlCdcConfig:
    return mysql_config(SourceSpec(name, "mysql-cdc", (), dict(options)))


def _drop(options: Mapping[str, str], name: str) -> None:
    _SNAPSHOTS.drop(_cfg(options, name).key)  # nothing upstream: MySQL keeps no client state


def position_text(off: CdcOffset) -> str:
    return f"{off.file}:{off.lsn}"


def _status(options: Mapping[str, str], name: str, off: CdcOffset | None) -> CdcStatus:
    cfg = _cfg(options, name)
    lag = None
    if off is not None and off.phase == "stream" and off.file:
        try:
            conn = cfg.connect(timeout=2)
            try:
                logs = _binlogs(conn.cursor())
            finally:
                conn.close()
            lag = sum(size for f, size in logs if f > off.file)
            lag += sum(max(0, size - off.lsn) for f, size in logs if f == off.file)
        except PiestreamError:
            lag = None  # unreachable: the error column says so
    return CdcStatus(
        upstream_table=cfg.qualified,
        slot_name=f"server.id={cfg.server_id}",
        committed=position_text(off) if off is not None and off.file else None,
        confirmed=None,
        lag_bytes=lag,
        lag_seconds=lag_seconds(off, lag),
    )


def _estimate_rows(options: Mapping[str, str], name: str) -> int | None:
    """information_schema.TABLES.TABLE_ROWS (InnoDB's estimate)."""
    cfg = _cfg(options, name)
    conn = cfg.connect(timeout=2)
    try:
        cur = conn.cursor()
        cur.execute(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (cfg.database, cfg.table),
        )
        row = cur.fetchone()
    finally:
        conn.close()
    return int(row[0]) if row is not None and row[0] is not None else None


CONNECTOR = CdcConnector(
    check_source=check_source,
    check_table=check_upstream,
    table_options=_table_options,
    drop=_drop,
    status=_status,
    estimate_rows=_estimate_rows,
)
