"""The inbox: rows written from outside the server (Spark jobs) enter tables exactly once.

External writers cannot call `submit_dml` — Spark executors and Spark's commit step run in other
processes, maybe other machines — so they hand rows over through files in the data directory::

    <data dir>/inbox/staging/<write id>/part-<partition>-<attempt>-<nonce>.arrow   executors
    <data dir>/inbox/ready/<write id>.json                                         the commit
    <data dir>/inbox/failed/<write id>.json                                        rejected ones
    <data dir>/inbox/alive                                                         touched per epoch

Executors stage Arrow IPC files already cast to the table's column types (fresh names per
attempt, written to a temporary name and renamed, so a retried or replayed task never rewrites a
file someone listed). The commit publishes a *manifest* listing the successful parts; publishing
is an atomic create-if-absent, so when a streaming batch is replayed the first manifest of its
write id wins.

A running `Database` collects ready manifests at the start of every epoch: their rows become DML
chunks of that epoch, and the manifest ids are recorded as consumed (namespace
``inbox.consumed`` of the meta store's kv table) in the same meta-store transaction that commits
the epoch. Hence:

* crash before the commit: nothing was recorded, the manifest is still ready, the next epoch
  (after reopening) ingests it — nothing lost;
* crash after the commit, before the files were removed: the id is recorded, the next collect
  drops the manifest without ingesting it — nothing twice;
* a replayed batch publishes the same id again: already consumed, dropped.

A manifest that cannot be ingested (table dropped, schema changed, unreadable file, an epoch
that kept failing with it) moves to ``failed/`` with the error, so it never blocks the epochs of
everyone else.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from piestream.common.chunk import StreamChunk
    from piestream.frontend.catalog import Relation
    from piestream.meta.catalog_store import CatalogStore
    from piestream.meta.store import MetaStore

log = logging.getLogger(__name__)

CONSUMED_NS = "inbox.consumed"
#: The int8 column of a staged file holding each row's `Op` (present when the writer had an op column).
OP_FIELD = "__piestream_op"
#: A server whose heartbeat is older than this is taken for not running.
ALIVE_WITHIN_SEC = 30.0
#: Staging directories without a manifest, untouched this long, are garbage.
STAGING_RETENTION_SEC = 24 * 3600.0
#: An epoch holding a manifest failed this many times: the manifest is set aside.
MAX_FAILED_EPOCHS = 3
#: Rows one epoch ingests at most (whole manifests; at least one).
MAX_ROWS_PER_EPOCH = 1 << 20


# -- layout ---------------------------------------------------------------------------------------


def inbox_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "inbox"


def staging_dir(data_dir: str | Path, write_id: str) -> Path:
    return inbox_dir(data_dir) / "staging" / write_id


def ready_path(data_dir: str | Path, write_id: str) -> Path:
    return inbox_dir(data_dir) / "ready" / f"{write_id}.json"


def _check_id(write_id: str) -> str:
    if not write_id or not all(ch.isalnum() or ch in "-_." for ch in write_id) or write_id[0] == ".":
        raise ValueError(f"invalid write id {write_id!r}")
    return write_id


@dataclass(frozen=True)
class Part:
    path: str  # relative to the inbox directory
    rows: int


@dataclass
class Manifest:
    """One write (a batch `save()` or one micro-batch of a streaming query) ready to ingest."""

    id: str
    table: str
    table_id: int  # the relation id the writer checked: a re-created table does not take it
    columns: list[str]  # the table columns the parts hold (others are NULL)
    has_ops: bool  # parts carry OP_FIELD (deletes); else every row is an insert
    parts: list[Part]
    created_ns: int = field(default_factory=time.time_ns)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Manifest:
        return cls(
            id=_check_id(d["id"]),
            table=d["table"],
            table_id=int(d["table_id"]),
            columns=list(d["columns"]),
            has_ops=bool(d["has_ops"]),
            parts=[Part(p["path"], int(p["rows"])) for p in d["parts"]],
            created_ns=int(d["created_ns"]),
        )


# -- the writer side (Spark executors and the commit) --------------------------------------------


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def stage_part(
    data_dir: str | Path, write_id: str, stem: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]
) -> Part | None:
    """Write `batches` as one staged Arrow file (None if there were no rows). The file appears
    under its final name only once complete and synced."""
    d = staging_dir(data_dir, _check_id(write_id))
    d.mkdir(parents=True, exist_ok=True)
    name = f"{stem}-{secrets.token_hex(4)}.arrow"
    tmp = d / f".{name}.tmp"
    rows = 0
    try:
        with open(tmp, "wb") as f:
            with pa.ipc.new_file(f, schema) as w:
                for b in batches:
                    if b.num_rows:
                        w.write_batch(b)
                        rows += b.num_rows
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if not rows:
        tmp.unlink()
        return None
    os.replace(tmp, d / name)
    _fsync_dir(d)
    return Part(str((d / name).relative_to(inbox_dir(data_dir))), rows)


def publish(data_dir: str | Path, manifest: Manifest) -> bool:
    """Make a manifest ready, atomically; False if one with the same id already is (first wins)."""
    final = ready_path(data_dir, _check_id(manifest.id))
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{manifest.id}.{secrets.token_hex(4)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest.to_json(), f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    _fsync_dir(final.parent)
    return True


def discard_staging(data_dir: str | Path, write_id: str, paths: Iterable[str] | None = None) -> None:
    """Remove staged files of an aborted write (`paths`, relative to the inbox) or its whole
    staging directory (None: only safe when no manifest of the id can exist)."""
    if paths is None:
        shutil.rmtree(staging_dir(data_dir, _check_id(write_id)), ignore_errors=True)
        return
    root = inbox_dir(data_dir)
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            (root / p).unlink()


def _read_only_query(data_dir: str | Path, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    path = Path(data_dir) / "meta.db"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return list(conn.execute(sql, params).fetchall())
    finally:
        conn.close()


def is_consumed(data_dir: str | Path, write_id: str) -> bool:
    """Whether a committed epoch ingested the write (read-only look at the meta store)."""
    rows = _read_only_query(
        data_dir, "SELECT 1 FROM kv WHERE ns = ? AND key = ?", (CONSUMED_NS, _check_id(write_id))
    )
    return bool(rows)


def server_alive(data_dir: str | Path, within: float = ALIVE_WITHIN_SEC) -> bool:
    """Whether a Database on this data directory ran an epoch recently."""
    try:
        age = time.time() - (inbox_dir(data_dir) / "alive").stat().st_mtime
    except FileNotFoundError:
        return False
    return age < within


def wait_consumed(data_dir: str | Path, write_id: str, timeout: float, poll: float = 0.1) -> bool:
    """Poll until the write is ingested (True) or `timeout` passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if is_consumed(data_dir, write_id):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
        poll = min(poll * 1.5, 1.0)


# -- the server side ------------------------------------------------------------------------------


class InboxError(Exception):
    """A manifest that cannot be ingested."""


class InboxBatch:
    """What one epoch ingests: DML chunks per table id, committed with the epoch."""

    def __init__(self, inbox: Inbox, dml: dict[int, list[StreamChunk]], manifests: list[Manifest]) -> None:
        self.inbox = inbox
        self.dml = dml
        self.manifests = manifests

    @property
    def rows(self) -> int:
        return sum(m.rows for m in self.manifests)

    def record(self, conn: Any) -> None:
        """Mark the manifests consumed — runs inside the epoch's meta-store commit transaction."""
        now = json.dumps({"at": time.time()})
        conn.executemany(
            "INSERT OR REPLACE INTO kv (ns, key, value) VALUES (?, ?, ?)",
            [(CONSUMED_NS, m.id, now) for m in self.manifests],
        )

    def committed(self) -> None:
        """After the commit: the consumed files can go."""
        self.inbox._committed(self.manifests)


class Inbox:
    """Collects ready manifests of one data directory into epochs (`BarrierManager.epoch_inputs`)."""

    def __init__(
        self,
        data_dir: str | Path,
        catalog: CatalogStore,
        meta: MetaStore,
        *,
        max_rows_per_epoch: int = MAX_ROWS_PER_EPOCH,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.root = inbox_dir(data_dir)
        self.catalog = catalog
        self.meta = meta
        self.max_rows_per_epoch = max_rows_per_epoch
        self._in_flight: set[str] = set()
        self._failures: dict[str, int] = {}
        self._last_gc = 0.0
        for sub in ("staging", "ready", "failed"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # -- per epoch --------------------------------------------------------------------------------
    def collect(self) -> InboxBatch | None:
        """The ready manifests (oldest first, up to the row budget) as this epoch's input."""
        try:
            return self._collect()
        except Exception:  # the inbox must never stop the epochs (a full disk, a vanished dir)
            log.exception("inbox: collecting ready writes failed")
            return None

    def _collect(self) -> InboxBatch | None:
        self._heartbeat()
        self._maybe_gc()
        for mid in self._in_flight:  # the previous epoch with them did not commit
            self._failures[mid] = self._failures.get(mid, 0) + 1
        self._in_flight = set()
        dml: dict[int, list[StreamChunk]] = {}
        taken: list[Manifest] = []
        rows = 0
        for m in self._ready():
            if self.meta.get(CONSUMED_NS, m.id) is not None:
                self._remove(m)  # committed before a crash, or a replayed batch
                continue
            if self._failures.get(m.id, 0) >= MAX_FAILED_EPOCHS:
                self._reject(m, f"{MAX_FAILED_EPOCHS} epochs ingesting it failed")
                continue
            if taken and rows + m.rows > self.max_rows_per_epoch:
                break
            try:
                table_id, chunks = self._load(m)
            except Exception as e:  # a bad manifest must not block the epoch
                self._reject(m, str(e))
                continue
            dml.setdefault(table_id, []).extend(chunks)
            taken.append(m)
            rows += m.rows
        if not taken:
            return None
        self._in_flight = {m.id for m in taken}
        return InboxBatch(self, dml, taken)

    def _committed(self, manifests: list[Manifest]) -> None:
        self._in_flight -= {m.id for m in manifests}
        for m in manifests:
            self._failures.pop(m.id, None)
            self._remove(m)

    # -- manifests --------------------------------------------------------------------------------
    def _ready(self) -> list[Manifest]:
        out = []
        for p in (self.root / "ready").glob("*.json"):
            try:
                out.append(Manifest.from_json(json.loads(p.read_text(encoding="utf-8"))))
            except FileNotFoundError:
                continue
            except Exception as e:
                log.error("inbox: unreadable manifest %s: %s", p.name, e)
                self._move_failed(p, str(e))
        out.sort(key=lambda m: (m.created_ns, m.id))
        return out

    def _load(self, m: Manifest) -> tuple[int, list[StreamChunk]]:
        from piestream.common.chunk import Op, StreamChunk
        from piestream.common.scalar import constant_array
        from piestream.frontend.catalog import RelationKind

        rel = self.catalog.get(m.table)
        if rel is None or rel.id != m.table_id or rel.table is None:
            raise InboxError(f'table "{m.table}" (id {m.table_id}) no longer exists')
        if rel.kind is not RelationKind.TABLE or rel.properties.get("connector"):
            raise InboxError(f'"{m.table}" does not accept writes')
        expected = expected_schema(rel, m.columns, m.has_ops)
        positions = {name: k for k, name in enumerate(m.columns)}
        chunks = []
        for part in m.parts:
            path = self.root / part.path
            with pa.memory_map(str(path)) as src:
                table = pa.ipc.open_file(src).read_all()
            if table.num_rows != part.rows:
                raise InboxError(f"{part.path}: {table.num_rows} rows, the manifest says {part.rows}")
            if not table.schema.equals(expected):
                raise InboxError(f"{part.path}: schema {table.schema} differs from {expected}")
            for batch in table.to_batches():
                n = batch.num_rows
                # a column the write omits (or one added by ALTER TABLE after the write was
                # planned) holds its DEFAULT, else NULL, as an INSERT omitting it
                cols = [
                    batch.column(positions[c.name])
                    if c.name in positions
                    else constant_array(c.default, c.data_type, n)
                    for c in rel.columns
                ]
                if m.has_ops:
                    ops = np.asarray(batch.column(len(m.columns)).to_numpy(zero_copy_only=False), np.int8)
                else:
                    ops = np.full(n, Op.INSERT, np.int8)
                _check_rows(rel, cols, ops)
                chunks.append(StreamChunk(ops, cols, length=n))
        return rel.table.table_id, chunks

    def _remove(self, m: Manifest) -> None:
        shutil.rmtree(staging_dir(self.data_dir, m.id), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            ready_path(self.data_dir, m.id).unlink()

    def _reject(self, m: Manifest, error: str) -> None:
        log.error("inbox: write %s into %s rejected: %s", m.id, m.table, error)
        self._failures.pop(m.id, None)
        self._move_failed(ready_path(self.data_dir, m.id), error)

    def _move_failed(self, path: Path, error: str) -> None:
        """Set a manifest aside with its error (its staged files stay for inspection)."""
        try:
            doc: dict[str, Any] = {"manifest": path.read_text(encoding="utf-8")}
        except FileNotFoundError:
            return
        doc["error"] = error
        (self.root / "failed" / path.name).write_text(json.dumps(doc), encoding="utf-8")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    # -- housekeeping -----------------------------------------------------------------------------
    def close(self) -> None:
        """The server stops: writers must not wait for it."""
        with contextlib.suppress(FileNotFoundError):
            (self.root / "alive").unlink()

    def _heartbeat(self) -> None:
        alive = self.root / "alive"
        try:
            os.utime(alive)
        except FileNotFoundError:
            alive.write_text(str(os.getpid()), encoding="utf-8")

    def _maybe_gc(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if now - self._last_gc < 600:
            return
        self._last_gc = now
        self.gc_staging(now=now)

    def gc_staging(self, retention_sec: float = STAGING_RETENTION_SEC, now: float | None = None) -> int:
        """Remove staging directories no manifest refers to that nothing wrote for a long time
        (writes that crashed before their commit, or parts of replayed batches)."""
        now = time.time() if now is None else now
        ready = {p.stem for p in (self.root / "ready").glob("*.json")}
        removed = 0
        for d in (self.root / "staging").iterdir():
            if d.name in ready or not d.is_dir():
                continue
            try:
                newest = max([d.stat().st_mtime, *(f.stat().st_mtime for f in d.iterdir())])
            except FileNotFoundError:
                continue
            if now - newest >= retention_sec:
                shutil.rmtree(d, ignore_errors=True)
                removed += 1
        return removed


def _check_rows(rel: Relation, cols: list[pa.Array], ops: np.ndarray) -> None:
    """What the table's DML path would refuse: NULL keys, deletes a table cannot match."""
    from piestream.common.chunk import Op

    assert rel.table is not None
    if rel.row_id_index is not None or rel.append_only:
        if bool((ops != Op.INSERT).any()):
            raise InboxError(
                f'table "{rel.name}" has no primary key (or is append-only): it takes no deletes'
            )
        return
    for i in rel.table.pk:
        if cols[i].null_count:
            raise InboxError(f'null value in column "{rel.columns[i].name}" violates not-null constraint')


def expected_schema(rel: Relation, columns: list[str], has_ops: bool) -> pa.Schema:
    """The Arrow schema of a staged file holding `columns` of `rel` (and the op column)."""
    fields = []
    for name in columns:
        i = rel.column_index(name)
        if i is None or rel.columns[i].hidden:
            raise InboxError(f'column "{name}" of relation "{rel.name}" does not exist')
        fields.append(pa.field(name, rel.columns[i].data_type.arrow))
    if has_ops:
        fields.append(pa.field(OP_FIELD, pa.int8()))
    return pa.schema(fields)
