"""The ``postgres-cdc`` source connector: a PostgreSQL table followed through logical replication
(the built-in ``pgoutput`` plugin), snapshot first, then its change stream, exactly once.

One split per table, with its own replication slot. The split's offset (`CdcOffset`) is state.

- **Snapshot.** The first read creates the slot inside a REPEATABLE READ transaction with
  ``USE_SNAPSHOT``: that transaction sees the table exactly as of the slot's consistent point C,
  and the slot streams every transaction committing at or after C, so the copy and the stream
  meet with no gap and no duplicate. The copy is chunked by primary key (keyset pagination,
  ``COPY (SELECT ... WHERE pk > cursor ORDER BY pk LIMIT n)``), one chunk per epoch, the cursor
  in the offset. The snapshot lives in this process's connection; after a restart (or a move to
  another process) the copy goes on from the cursor in a fresh snapshot (a temporary slot's, at
  L > C). The stream still starts at C: changes of [C, L) replay over rows already at L, which
  the table's upsert semantics (a primary key, ON CONFLICT overwrite) turn into the same final
  rows, and keys copied before the restart get their changes from C on. Never a re-snapshot.
  While the pipeline processes a chunk, the next one is copied in the background in the same
  snapshot (`ChunkAhead`): the upstream's COPY overlaps the epoch rather than opening the next.
- **Stream.** ``pg_logical_slot_peek_binary_changes`` (repeatable: a retried epoch reads the
  same changes) from the committed LSN; the slot is advanced (``pg_replication_slot_advance``,
  the feedback) only to an offset whose epoch is durable (`PgCdcReader.ack`), so the slot keeps
  the WAL piestream has not committed and any restart resumes exactly.
- Inserts and updates become upserts (INSERT of the new row), deletes a DELETE of the key; an
  update that changes the key deletes the old one. A TOASTed column the upstream did not resend
  is taken from the old row (REPLICA IDENTITY FULL) or an earlier change of the same read.
- **Stream decode.** A peek comes aggregated upstream (the messages end to end and their
  lengths, two ``string_agg``: no Python object per message). Its messages decode column-wise
  (`pgoutput.Batch`): the control messages one by one, the row messages' tuples per column for
  all at once, their text values gathered into Arrow strings; a read with an upstream TRUNCATE
  of the table, its relation sent twice or a TOASTed value not sent decodes message by message
  instead.
- **Faults.** The upstream down (or the connection lost mid-read): the read raises
  `SourceUnavailable` (the error is logged and kept for the operations view), the barrier
  manager pauses the source and retries with back-off, other jobs commit; the slot gone while
  the offset says it was created: the job fails with a clear error.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from piestream.common.chunk import Op
from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.types import DataType
from piestream.connectors.cdc import pgoutput as po
from piestream.connectors.cdc.common import (
    HEALTH,
    CdcConnector,
    CdcError,
    CdcReader,
    CdcStatus,
    Changes,
    ChunkAhead,
    Health,
    Snapshots,
    UpstreamUnavailable,
    lag_seconds,
)
from piestream.connectors.cdc.offset import CdcOffset, lsn_text, parse_lsn
from piestream.connectors.options import InvalidOption, parse_bool, parse_int, source_limits
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.stream.connector import ReadResult, SourceReader

log = logging.getLogger(__name__)

#: Session settings of every connection: the text forms the decoder and the copy parse.
_SESSION = (
    "-c TimeZone=UTC -c DateStyle=ISO,MDY -c IntervalStyle=postgres -c extra_float_digits=3 "
    "-c bytea_output=hex"
)
_REQUIRED = ("hostname", "username", "database.name")


@dataclass(frozen=True)
class PgCdcConfig:
    """A postgres-cdc table's options (RisingWave's names)."""

    host: str
    port: int
    user: str
    password: str
    database: str
    schema: str
    table: str
    slot: str
    publication: str
    publication_create: bool

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    def connect(self, *, replication: bool = False, timeout: int = 5) -> Any:
        import psycopg2
        import psycopg2.extras

        kwargs: dict[str, Any] = {}
        if replication:
            kwargs["connection_factory"] = psycopg2.extras.LogicalReplicationConnection
        try:
            conn = psycopg2.connect(
                host=self.host, port=self.port, user=self.user, password=self.password,
                dbname=self.database, connect_timeout=timeout, options=_SESSION,
                application_name="piestream-cdc", **kwargs,
            )  # fmt: skip
        except psycopg2.OperationalError as e:
            raise UpstreamUnavailable(
                f"postgres-cdc: cannot connect to PostgreSQL at {self.host}:{self.port} "
                f'(database "{self.database}", user "{self.user}"): {str(e).strip()}'
            ) from None
        if not replication:
            conn.autocommit = True
        return conn


def pg_config(spec: SourceSpec) -> PgCdcConfig:
    o = spec.options
    for k in _REQUIRED:
        if not o.get(k):
            raise InvalidOption(f"postgres-cdc needs the option {k}")
    table = o.get("table.name") or ""
    schema = o.get("schema.name") or "public"
    if "." in table:  # 'schema.table'
        schema, table = table.split(".", 1)
    if not table:
        raise InvalidOption(
            "postgres-cdc needs table.name (or CREATE TABLE ... FROM source TABLE 'schema.table')"
        )
    slot = o.get("slot.name") or f"piestream_{schema}_{table}"
    if not slot.replace("_", "").isalnum() or not slot.islower() or len(slot) > 63:
        raise InvalidOption(f'slot.name "{slot}": lower-case letters, digits and _ only, at most 63')
    return PgCdcConfig(
        host=o["hostname"],
        port=parse_int("port", o.get("port") or "5432", minimum=1),
        user=o["username"],
        password=o.get("password") or "",
        database=o["database.name"],
        schema=schema,
        table=table,
        slot=slot,
        publication=o.get("publication.name") or "piestream_publication",
        publication_create=parse_bool(
            "publication.create.enable", o.get("publication.create.enable") or "true"
        ),
    )


# -- upstream catalog ------------------------------------------------------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class UpstreamTable:
    columns: dict[str, tuple[int, str]]  # name -> (type oid, format_type text)
    pk: tuple[str, ...]
    replica_identity: str


def upstream_table(cur: Any, cfg: PgCdcConfig) -> UpstreamTable:
    cur.execute(
        "SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (cfg.schema, cfg.table),
    )
    row = cur.fetchone()
    if row is None:
        raise CdcError(f'postgres-cdc: upstream table "{cfg.qualified}" does not exist', sqlstate="42P01")
    oid, ident = row
    cur.execute(
        "SELECT attname, atttypid, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,),
    )
    cols = {r[0]: (int(r[1]), str(r[2])) for r in cur.fetchall()}
    cur.execute(
        "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(att, pos) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.att "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.pos",
        (oid,),
    )
    return UpstreamTable(cols, tuple(r[0] for r in cur.fetchall()), str(ident))


def check_source(spec: SourceSpec) -> None:
    """CREATE SOURCE of a shared CDC source: the server answers with these credentials, has
    ``wal_level = logical``, and the publication exists or may be created (it is, empty)."""
    cfg = pg_config(replace(spec, options={"table.name": "source", **spec.options}))  # its tables name theirs
    conn = cfg.connect()
    try:
        cur = conn.cursor()
        _check_wal_level(cur)
        if not _publication(cur, cfg) and cfg.publication_create:
            cur.execute(f"CREATE PUBLICATION {_quote(cfg.publication)}")
    finally:
        conn.close()


def _check_wal_level(cur: Any) -> None:
    cur.execute("SHOW wal_level")
    if cur.fetchone()[0] != "logical":
        raise CdcError("postgres-cdc: the upstream needs wal_level = logical")


def _publication(cur: Any, cfg: PgCdcConfig) -> tuple[bool] | None:
    """The publication's (puballtables,), None when it does not exist; refused when it does not
    exist and may not be created."""
    cur.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s", (cfg.publication,))
    pub = cur.fetchone()
    if pub is None and not cfg.publication_create:
        raise CdcError(
            f'postgres-cdc: publication "{cfg.publication}" does not exist '
            "(publication.create.enable = false)",
            sqlstate="42704",
        )
    return None if pub is None else (bool(pub[0]),)


def check_upstream(spec: SourceSpec, pk: Sequence[str]) -> PgCdcConfig:
    """What CREATE TABLE checks before anything is made: the server answers with these
    credentials, ``wal_level = logical``, the table exists with a primary key equal to the
    declared one and a followed type for every declared column, the slot is not someone
    else's; then the publication includes the table, or (``publication.create.enable``) is
    created or extended to it — the last step, so a refused CREATE makes nothing upstream."""
    cfg = pg_config(spec)
    if not pk:
        raise InvalidOption(f'a postgres-cdc table needs a PRIMARY KEY ("{spec.name}" has none)')
    conn = cfg.connect()
    try:
        cur = conn.cursor()
        _check_wal_level(cur)
        up = upstream_table(cur, cfg)
        for name, t in spec.columns:
            if name not in up.columns:
                raise CdcError(
                    f'postgres-cdc: column "{name}" does not exist in upstream table "{cfg.qualified}"'
                )
            oid, text = up.columns[name]
            if not po.compatible(oid, t):
                known = oid in po.PG_TYPES or oid in po.PG_ARRAYS
                raise FeatureNotSupported(
                    f'postgres-cdc: column "{name}" has upstream type {text}, '
                    + (f"which does not map to {t}" if known else "which is not supported")
                )
        if tuple(pk) != up.pk:
            raise InvalidOption(
                f"postgres-cdc: the PRIMARY KEY ({', '.join(pk)}) must be the upstream table's "
                f"({', '.join(up.pk) or 'none'})"
            )
        cur.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot,))
        if cur.fetchone() is not None:
            raise CdcError(f'postgres-cdc: replication slot "{cfg.slot}" already exists', sqlstate="42710")
        pub = _publication(cur, cfg)
        target = f"{_quote(cfg.schema)}.{_quote(cfg.table)}"
        if pub is None:
            cur.execute(f"CREATE PUBLICATION {_quote(cfg.publication)} FOR TABLE {target}")
        elif not pub[0]:
            cur.execute(
                "SELECT 1 FROM pg_publication_tables "
                "WHERE pubname = %s AND schemaname = %s AND tablename = %s",
                (cfg.publication, cfg.schema, cfg.table),
            )
            if cur.fetchone() is None:
                if not cfg.publication_create:
                    raise CdcError(
                        f'postgres-cdc: publication "{cfg.publication}" does not include '
                        f'table "{cfg.qualified}"',
                        sqlstate="42704",
                    )
                cur.execute(f"ALTER PUBLICATION {_quote(cfg.publication)} ADD TABLE {target}")
    finally:
        conn.close()
    return cfg


def drop_slot(cfg: PgCdcConfig) -> bool:
    """Drop the table's slot (DROP TABLE / SOURCE); False when it is not there."""
    conn = cfg.connect()
    try:
        cur = conn.cursor()
        cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (cfg.slot,))
        row = cur.fetchone()
        if row is None:
            return False
        if row[0] is not None:
            cur.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        cur.execute("SELECT pg_drop_replication_slot(%s)", (cfg.slot,))
        return True
    finally:
        conn.close()


# -- the reader ------------------------------------------------------------------------------------


@dataclass
class _Snapshot:
    """An open REPEATABLE READ transaction holding an exported snapshot (this process only)."""

    conn: Any
    lsn: int
    ahead: ChunkAhead = field(default_factory=ChunkAhead)  # the next chunk, copied meanwhile

    def close(self) -> None:
        self.ahead.wait()  # the connection is the background copy's until it ends
        with suppress(Exception):
            self.conn.close()  # ends the transaction; a temporary slot goes with it


_SNAPSHOTS = Snapshots()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class PgCdcReader(CdcReader):
    cfg: PgCdcConfig
    columns: tuple[tuple[str, DataType], ...]
    _pk: list[tuple[str, ...]] = field(default_factory=list, compare=False)
    connector = "postgres-cdc"

    @property
    def key(self) -> str:
        return self.cfg.slot

    @property
    def qualified(self) -> str:
        return self.cfg.qualified

    def transient(self) -> tuple[type[BaseException], ...]:
        import psycopg2

        return (UpstreamUnavailable, psycopg2.OperationalError, psycopg2.InterfaceError)

    def reset(self) -> None:
        _SNAPSHOTS.drop(self.cfg.slot)
        _drop_sql_conn(self.cfg)

    def end_snapshot(self) -> None:
        _SNAPSHOTS.drop(self.cfg.slot)

    # -- snapshot -------------------------------------------------------------------------------

    def start(self) -> CdcOffset:
        """Create the slot in a transaction that keeps its snapshot (its consistent point C)."""
        import psycopg2

        conn = self.cfg.connect(replication=True)
        cur = conn.cursor()
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        try:
            cur.execute(f"CREATE_REPLICATION_SLOT {self.cfg.slot} LOGICAL pgoutput USE_SNAPSHOT")
        except psycopg2.errors.DuplicateObject:
            # an earlier attempt of this first epoch created it (the slot name is this table's):
            # stream from its start, copy in a fresh snapshot
            conn.close()
            start = self._slot_lsn(required=True)
            assert start is not None
            return CdcOffset("snapshot", start)
        lsn = parse_lsn(cur.fetchone()[1])
        _SNAPSHOTS.keep(self.cfg.slot, _Snapshot(conn, lsn))
        return CdcOffset("snapshot", lsn)

    def _snapshot(self) -> _Snapshot:
        snap: _Snapshot | None = _SNAPSHOTS.get(self.cfg.slot)
        if snap is not None:
            return snap
        self._slot_lsn(required=True)  # the stream must still be there to copy for it
        conn = self.cfg.connect(replication=True)
        cur = conn.cursor()
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        name = f"{self.cfg.slot[:40]}_snap_{int(time.time() * 1000) % 10**9}"
        cur.execute(f"CREATE_REPLICATION_SLOT {name} TEMPORARY LOGICAL pgoutput USE_SNAPSHOT")
        snap = _Snapshot(conn, parse_lsn(cur.fetchone()[1]))
        _SNAPSHOTS.keep(self.cfg.slot, snap)
        return snap

    def pk(self, cur: Any) -> tuple[str, ...]:
        if not self._pk:
            self._pk.append(upstream_table(cur, self.cfg).pk)
        return self._pk[0]

    def snapshot_chunk(self, off: CdcOffset, budget: int) -> ReadResult:
        snap = self._snapshot()
        key = (off.cursor, budget)
        chunk = snap.ahead.take(key)  # copied in the background during the last epoch
        batches, n, last = chunk if chunk is not None else self._copy(snap, off.cursor, budget)
        result = self.chunk_result(off, batches, n, budget, lambda: last)
        if n == budget:  # the copy goes on: the next chunk is copied while this one is processed
            snap.ahead.start((last, budget), lambda: self._copy(snap, last, budget))
        return result

    def _copy(
        self, snap: _Snapshot, cursor: tuple[str, ...] | None, budget: int
    ) -> tuple[list[pa.RecordBatch], int, tuple[str, ...]]:
        """The chunk of up to `budget` rows after `cursor` in the snapshot: its batches, its
        rows and its last key (text)."""
        cur = snap.conn.cursor()
        up = upstream_table(cur, self.cfg)
        pk = self.pk(cur)
        names = [n for n, _ in self.columns]
        sel = ", ".join(_quote(n) for n in names)
        keys = ", ".join(_quote(k) for k in pk)
        where = ""
        if cursor is not None:
            lits = ", ".join(
                cur.mogrify("%s::" + up.columns[k][1], (v,)).decode() for k, v in zip(pk, cursor, strict=True)
            )
            where = f" WHERE ({keys}) > ({lits})"
        table = f"{_quote(self.cfg.schema)}.{_quote(self.cfg.table)}"
        buf = io.BytesIO()
        cur.copy_expert(
            f"COPY (SELECT {sel} FROM {table}{where} ORDER BY {keys} LIMIT {int(budget)}) "
            "TO STDOUT WITH (FORMAT csv, FORCE_QUOTE *)",
            buf,
        )
        text = _csv_columns(buf.getvalue(), names)
        n = text.num_rows
        cols = [po.to_arrow(text.column(i).combine_chunks(), t) for i, (_, t) in enumerate(self.columns)]
        batches = [pa.RecordBatch.from_arrays(cols, names=names)] if n else []
        last = tuple(str(text.column(names.index(k))[n - 1].as_py()) for k in pk) if n else ()
        return batches, n, last

    # -- stream ---------------------------------------------------------------------------------

    def _slot_lsn(self, *, required: bool) -> int | None:
        """The slot's confirmed LSN; a missing slot is fatal when `required`."""
        with self._sql() as cur:
            cur.execute(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (self.cfg.slot,)
            )
            row = cur.fetchone()
        if row is None:
            if required:
                raise CdcError(
                    f'postgres-cdc: replication slot "{self.cfg.slot}" of table "{self.cfg.qualified}" '
                    "no longer exists upstream: the changes since the last commit are lost, so the "
                    "table cannot resume (it is never copied again silently); drop and recreate it",
                    sqlstate="55000",
                )
            return None
        return parse_lsn(row[0]) if row[0] else None

    @contextmanager
    def _sql(self) -> Iterator[Any]:
        conn = _sql_conn(self.cfg)
        try:
            yield conn.cursor()
        except Exception:
            _drop_sql_conn(self.cfg)
            raise

    def stream(self, off: CdcOffset, budget: int) -> ReadResult:
        limit = budget + 1000
        while True:
            batch = self._peek(limit)
            changes = _Changes(self, off, budget)
            if not changes.feed_batch(batch):  # a TRUNCATE, a TOASTed value, a new relation
                changes = _Changes(self, off, budget)
                changes.feed(batch.message(i) for i in range(len(batch)))
            if changes.full or len(batch) < limit:
                return changes.result()
            limit *= 4

    def _peek(self, limit: int) -> po.Batch:
        """The slot's next changes (not consumed), aggregated upstream into one buffer and their
        lengths (`string_agg`: both aggregates see the rows in the function's order), so no
        Python object is made per message; a peek past PostgreSQL's 1 GB value limit is fetched
        row by row instead. The driver's ack advances the same slot and holds it for a moment:
        a peek that meets it waits and tries again."""
        import psycopg2

        peek = (
            "pg_logical_slot_peek_binary_changes(%s, NULL, %s, 'proto_version', '1', 'publication_names', %s)"
        )
        args = (self.cfg.slot, limit, self.cfg.publication)
        e_ = psycopg2.errors
        too_big = (e_.ProgramLimitExceeded, e_.OutOfMemory, e_.InternalError_)
        for attempt in range(5):
            try:
                with self._sql() as cur:
                    try:
                        cur.execute(
                            "SELECT string_agg(data, ''::bytea), string_agg(int4send(octet_length(data)), "
                            f"''::bytea) FROM {peek}",
                            args,
                        )
                        data, lens = cur.fetchone()
                        return po.Batch.of_buffer(
                            bytes(data or b""), np.frombuffer(bytes(lens or b""), ">i4")
                        )
                    except too_big:  # over 1 GB aggregated (54000), or its hex text (XX000)
                        cur.execute(f"SELECT data FROM {peek}", args)
                        return po.Batch.of([bytes(r[0]) for r in cur.fetchall()])  # per message: too big
            except psycopg2.errors.UndefinedObject as e:
                if "replication slot" in str(e):
                    self._slot_lsn(required=True)
                raise CdcError(f"postgres-cdc {self.cfg.qualified}: {str(e).strip()}") from None
            except psycopg2.errors.ObjectInUse:
                time.sleep(0.05 * (attempt + 1))
        raise UpstreamUnavailable(f'replication slot "{self.cfg.slot}" is in use by another process')

    # -- ack ------------------------------------------------------------------------------------

    def ack(self, split: str, committed_offset: str) -> None:
        """Confirm to PostgreSQL what a durable epoch committed (the slot may free its WAL)."""
        import psycopg2

        off = CdcOffset.from_json(committed_offset)
        if off.phase != "stream":
            return  # the slot keeps everything since its consistent point until the copy is done
        try:
            self._advance(off)
        except (UpstreamUnavailable, psycopg2.Error) as e:  # the next ack confirms it
            log.info("postgres-cdc %s: the ack waits: %s", self.cfg.qualified, str(e).strip())

    def _advance(self, off: CdcOffset) -> None:
        with self._sql() as cur:
            cur.execute(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (self.cfg.slot,)
            )
            row = cur.fetchone()
            if row is None or parse_lsn(row[0]) >= off.lsn:
                return
            cur.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.cfg.slot, lsn_text(off.lsn))
            )
        HEALTH.setdefault(self.cfg.slot, Health()).confirmed_lsn = off.lsn


class _Changes(Changes):
    """One read's changes of the followed table from pgoutput messages: skips what the offset
    says is applied, stops after `budget` changes, and converts the rows column-wise at the end."""

    def __init__(self, reader: PgCdcReader, off: CdcOffset, budget: int) -> None:
        super().__init__(off, budget)
        self.reader = reader
        self.names = [n for n, _ in reader.columns]
        self.rows = po.RowBuffer(len(self.names))
        self.lsn = off.lsn
        self.full = False
        self._oid: int | None = None
        self._map: list[int] = []  # upstream column index per piestream column
        self._key: list[int] = []  # piestream column indexes of the key
        self._skip = True
        self._seen = 0  # changes of the current transaction so far
        self._last: dict[tuple[object, ...], list[str | None]] = {}  # rows by key in this read
        self._width = 0  # the upstream relation's columns
        self._cols: list[pa.Array] | None = None  # the rows' text columns (`feed_batch`)

    def feed(self, messages: Iterator[po.Message]) -> None:
        for m in messages:  # per message: the log is a sequence
            if isinstance(m, po.Begin):
                self._skip = m.final_lsn < self.lsn
                self._seen = 0
            elif isinstance(m, po.Commit):
                if not self._skip:
                    self.lsn, self.applied, self.commit_ts = m.end_lsn, 0, m.commit_ts_us
            elif isinstance(m, po.Relation):  # also in a skipped transaction: sent once per peek
                if (m.namespace, m.name) == (self.reader.cfg.schema, self.reader.cfg.table):
                    self._relation(m)
            elif self._skip:
                continue
            elif isinstance(m, po.Insert | po.Update | po.Delete):
                if m.oid != self._oid:
                    continue
                self._seen += 1
                if self._seen <= self.applied:
                    continue  # applied by an earlier epoch
                if self.used >= self.budget:
                    self.full = True
                    return
                self._change(m)
                self.used += 1
                self.applied = self._seen
            elif isinstance(m, po.Truncate) and self._oid in m.oids:
                self._seen += 1  # a change of its transaction, as a row is (a budget may cut it)
                if self._seen <= self.applied:
                    continue
                if self.used >= self.budget:
                    self.full = True
                    return
                self.truncate()  # every row goes, here in the sequence
                self._last.clear()
                self.applied = self._seen

    def feed_batch(self, b: po.Batch) -> bool:
        """`feed` with the row messages decoded column-wise: the control messages (Begin,
        Commit, Relation, ...: a few per transaction) one by one, each run of row messages
        between them at once, then every taken row's columns in one pass (`_columns`). False
        when the read needs the per-message `feed` instead (this object is then spent): an
        upstream TRUNCATE of the table, its relation sent twice (a schema change), a value not
        sent (TOAST)."""
        rows = np.isin(b.tags, _ROW_TAGS)
        taken: list[np.ndarray] = []
        relations = 0
        prev = 0
        for i in [*np.flatnonzero(~rows).tolist(), len(b.tags)]:  # per control message
            if i > prev and not self._skip and self._oid is not None:
                run = np.arange(prev, i)
                run = run[b.be_u32(b.starts[run] + 1) == self._oid]  # the followed table's
                k = len(run)
                skip = min(k, max(0, self.applied - self._seen))  # applied by an earlier epoch
                take = min(k - skip, self.budget - self.used)
                if take:
                    taken.append(run[skip : skip + take])
                    self.used += take
                    self.applied = self._seen + skip + take
                self._seen += k
                if skip + take < k:
                    self.full = True
                    break
            prev = i + 1
            if i == len(b.tags):
                break
            m = b.message(i)
            if isinstance(m, po.Begin):
                self._skip = m.final_lsn < self.lsn
                self._seen = 0
            elif isinstance(m, po.Commit):
                if not self._skip:
                    self.lsn, self.applied, self.commit_ts = m.end_lsn, 0, m.commit_ts_us
            elif isinstance(m, po.Relation):
                if (m.namespace, m.name) == (self.reader.cfg.schema, self.reader.cfg.table):
                    relations += 1
                    if relations > 1:
                        return False
                    self._relation(m)
            elif isinstance(m, po.Truncate) and self._oid in m.oids and not self._skip:
                return False
        if taken:
            return self._columns(b, np.concatenate(taken))
        return True

    def _columns(self, b: po.Batch, idx: np.ndarray) -> bool:
        """The rows of row messages `idx` (in log order) as columns and ops, as `_change` makes
        them one by one: an Insert and an Update its new row (an upsert), a Delete its old key,
        an Update that changes the key also a Delete of the old one first."""
        st, en, tag = b.starts[idx], b.ends[idx], b.tags[idx]
        kind = b.data[st + 5]
        is_d = tag == ord("D")
        with_old = (tag == ord("U")) & np.isin(kind, (ord("K"), ord("O")))
        ok = np.where(tag == ord("I"), kind == ord("N"), True)
        ok &= np.where(tag == ord("U"), with_old | (kind == ord("N")), True)
        ok &= np.where(is_d, np.isin(kind, (ord("K"), ord("O"))), True)
        if not ok.all():
            raise po.PgOutputError("pgoutput row message without its tuple")
        first = b.tuples(st + 5 + 1, en, self._width)  # the new row, or the old one if sent
        uo = np.flatnonzero(with_old)
        if len(uo) and (b.data[first.end[uo]] != ord("N")).any():
            raise po.PgOutputError("pgoutput Update without its new tuple")
        second = b.tuples(first.end[uo] + 1, en[uo], self._width)  # updates' new rows
        if (first.unchanged() & ~is_d & ~with_old).any() or second.unchanged().any():
            return False  # a TOASTed value to take from elsewhere: `_emit` resolves it
        n = len(idx)
        a = [first.column(u) for u in self._map]
        both = [pa.concat_arrays([x, second.column(u)]) for x, u in zip(a, self._map, strict=True)]
        changed = np.zeros(n, np.bool_)  # an update that changes the key
        for i in self._key:
            old_k, new_k = a[i].take(pa.array(uo)), both[i].slice(n)
            diff = pc.fill_null(pc.not_equal(old_k, new_k), True)
            diff = pc.or_(diff, pc.xor(old_k.is_null(), new_k.is_null()))
            changed[uo] |= np.asarray(diff.to_numpy(zero_copy_only=False), np.bool_)
        new_pos = np.arange(n)
        new_pos[uo] = n + np.arange(len(uo))
        has = np.stack([is_d | changed, ~is_d], axis=1).ravel()
        src = np.stack([np.arange(n), new_pos], axis=1).ravel()[has]
        ops = np.tile(np.array([Op.DELETE, Op.INSERT], np.int8), n)[has]
        gather = pa.array(src)
        self._cols = [col.take(gather) for col in both]
        self.ops = ops.tolist()
        return True

    def _relation(self, m: po.Relation) -> None:
        up = {c.name: i for i, c in enumerate(m.columns)}
        missing = [n for n in self.names if n not in up]
        if missing:
            raise CdcError(
                f'postgres-cdc: upstream table "{m.qualified}" no longer has column "{missing[0]}"'
            )
        self._oid = m.oid
        self._width = len(m.columns)
        self._map = [up[n] for n in self.names]
        pk = self.reader._pk[0] if self.reader._pk else tuple(c.name for c in m.columns if c.is_key)
        self._key = [self.names.index(k) for k in pk]

    def _pick(self, tup: tuple[po.TupleValue, ...]) -> list[Any]:
        return [tup[i] for i in self._map]

    def _emit(self, op: int, row: list[Any]) -> None:
        key = tuple(row[i] for i in self._key)
        if op == Op.INSERT and any(v is po.UNCHANGED for v in row):
            prev = self._last.get(key)
            for i, v in enumerate(row):
                if v is po.UNCHANGED:
                    if prev is None:
                        raise CdcError(
                            "postgres-cdc: upstream did not resend the unchanged TOASTed column "
                            f'"{self.names[i]}" '
                            f'of "{self.reader.cfg.qualified}"',
                            hint=f"ALTER TABLE {self.reader.cfg.qualified} REPLICA IDENTITY FULL upstream",
                        )
                    row[i] = prev[i]
        self._last[key] = row
        self.rows.append(row)
        self.ops.append(op)

    def _change(self, m: po.Insert | po.Update | po.Delete) -> None:
        if isinstance(m, po.Insert):
            self._emit(Op.INSERT, self._pick(m.new))
            return
        if isinstance(m, po.Delete):
            row = self._pick(m.old)
            self._emit(Op.DELETE, [None if v is po.UNCHANGED else v for v in row])
            return
        new = self._pick(m.new)
        if m.old is not None:
            old = self._pick(m.old)
            if m.old_kind == "O":
                for i, v in enumerate(new):
                    if v is po.UNCHANGED:
                        new[i] = old[i]
            if any(old[i] != new[i] for i in self._key):  # the key changed: the old key goes
                self._emit(Op.DELETE, [None if v is po.UNCHANGED else v for v in old])
        self._emit(Op.INSERT, new)

    def position(self) -> CdcOffset:
        return CdcOffset("stream", self.lsn, None, self.applied, self.off.snapshot_rows, self.commit_ts)

    def batch(self, errors: list[tuple[str, str]]) -> pa.RecordBatch:
        types = [t for _, t in self.reader.columns]
        texts = self._cols if self._cols is not None else self.rows.columns
        cols = [po.to_arrow(c, t) for c, t in zip(texts, types, strict=True)]
        return pa.RecordBatch.from_arrays(cols, names=self.names)


def _csv_columns(data: bytes, names: list[str]) -> pa.Table:
    """COPY CSV with FORCE_QUOTE *: every value quoted, NULL an unquoted empty field."""
    if not data:
        return pa.table({n: pa.array([], pa.string()) for n in names})
    return pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()),
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )


#: the row messages' tags: Insert, Update, Delete
_ROW_TAGS = np.array([ord("I"), ord("U"), ord("D")], np.uint8)

_CONNS: dict[PgCdcConfig, Any] = {}


def _sql_conn(cfg: PgCdcConfig) -> Any:
    with _LOCK:
        conn = _CONNS.get(cfg)
    if conn is None or conn.closed:
        conn = cfg.connect()
        with _LOCK:
            _CONNS[cfg] = conn
    return conn


def _drop_sql_conn(cfg: PgCdcConfig) -> None:
    with _LOCK:
        conn = _CONNS.pop(cfg, None)
    if conn is not None:
        with suppress(Exception):
            conn.close()


def postgres_cdc_connector(spec: SourceSpec) -> tuple[SourceReader, SourceLimits]:
    cfg = pg_config(spec)
    if spec.generated:
        raise InvalidOption("generated columns are not supported in a postgres-cdc table")
    limits = source_limits(spec)
    return PgCdcReader(cfg, tuple(spec.columns)), limits


@dataclass(frozen=True)
class SlotStatus:
    """A slot as the upstream sees it (the operations view)."""

    confirmed_lsn: int | None  # what piestream confirmed (advanced after durable epochs)
    current_lsn: int  # the upstream's WAL insert position
    active: bool


def slot_status(cfg: PgCdcConfig) -> SlotStatus | None:
    """The slot's upstream position; None when it does not exist."""
    conn = cfg.connect(timeout=2)
    try:
        cur = conn.cursor()
        cur.execute(
            "SELECT confirmed_flush_lsn, pg_current_wal_lsn(), active FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (cfg.slot,),
        )
        row = cur.fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    return SlotStatus(parse_lsn(row[0]) if row[0] else None, parse_lsn(row[1]), bool(row[2]))


def forget(cfg: PgCdcConfig) -> None:
    """Close this process's connections of a dropped table."""
    _SNAPSHOTS.drop(cfg.slot)
    _drop_sql_conn(cfg)
    HEALTH.pop(cfg.slot, None)


# -- what the DDL handlers and the operations view ask --------------------------------------------


def _table_options(source: dict[str, str], table: str) -> dict[str, str]:
    """A table from a shared source follows its upstream through a slot of its own."""
    return {**source, "slot.name": f"{source.get('slot.name') or 'piestream'}_{table}".lower()[:63]}


def _cfg(options: Mapping[str, str], name: str) -> PgCdcConfig:
    return pg_config(SourceSpec(name, "postgres-cdc", (), dict(options)))


def _drop(options: Mapping[str, str], name: str) -> None:
    cfg = _cfg(options, name)
    forget(cfg)
    drop_slot(cfg)


def _status(options: Mapping[str, str], name: str, off: CdcOffset | None) -> CdcStatus:
    cfg = _cfg(options, name)
    try:
        st = slot_status(cfg)
    except PiestreamError:
        st = None  # unreachable: the error column says so
    lag = None
    if st is not None and off is not None and off.phase == "stream":
        lag = max(0, st.current_lsn - off.lsn)
    return CdcStatus(
        upstream_table=cfg.qualified,
        slot_name=cfg.slot,
        committed=lsn_text(off.lsn) if off is not None else None,
        confirmed=lsn_text(st.confirmed_lsn) if st is not None and st.confirmed_lsn is not None else None,
        lag_bytes=lag,
        lag_seconds=lag_seconds(off, lag),
    )


def _estimate_rows(options: Mapping[str, str], name: str) -> int | None:
    """pg_class.reltuples (what the last VACUUM / ANALYZE counted; -1: never counted)."""
    cfg = _cfg(options, name)
    conn = cfg.connect(timeout=2)
    try:
        cur = conn.cursor()
        cur.execute(
            "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (cfg.schema, cfg.table),
        )
        row = cur.fetchone()
    finally:
        conn.close()
    return int(row[0]) if row is not None and row[0] is not None and row[0] >= 0 else None


CONNECTOR = CdcConnector(
    check_source=check_source,
    check_table=check_upstream,
    table_options=_table_options,
    drop=_drop,
    status=_status,
    estimate_rows=_estimate_rows,
)
