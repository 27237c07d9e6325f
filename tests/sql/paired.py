"""The scaffolding of the SQL suite's differential tests against DuckDB, in one place.

* `open_db` / `Paired`: a local-runner piestream Database (barriers running, so a DML statement
  returns once committed) beside a DuckDB connection, every statement run on both.
* `DmlGen`: random INSERT / UPDATE / DELETE statements on a table ``(id INT PRIMARY KEY, ...)``
  of the columns it is given, tracking the live ids so updates and deletes hit rows.
* `Model`, `random_rows`, `FileHarness`, `rows_table`: watermarked file sources read one JSON
  file per epoch, so the watermark after each epoch (and which rows it accepted) is known
  exactly; DuckDB gets the accepted rows as Arrow tables.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqldiff import norm_rows

from piestream.server.database import Database, DatabaseConfig
from piestream.storage.table.storage_table import StorageTable


def open_db(path: Path) -> Database:
    """A local-runner database whose barriers run: a DML statement returns once committed."""
    cfg = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2, background_compaction=False)
    return Database(path, config=cfg)


def plan_nodes(db: Database, name: str) -> list[Any]:
    """Every plan node of relation `name`'s streaming job."""
    rel = db.catalog.get(name)
    assert rel is not None and rel.job_id is not None
    return [n for f in db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]


def table_rows(db: Database, desc: Any) -> list[tuple[Any, ...]]:
    """The rows of state (or any) table `desc` at the committed epoch."""
    storage, epoch, vpin, spin = db.snapshot_storage()
    try:
        return list(StorageTable(desc, storage, epoch).iter_rows())
    finally:
        db.release_snapshot(vpin, spin)


class Paired:
    """The same statements on piestream and DuckDB; `restart` reopens piestream's directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = open_db(path)
        self.duck = duckdb.connect()

    def run(self, sql: str) -> None:
        self.db.execute(sql)
        self.duck.execute(sql)

    def start(self, create: str, dml: DmlGen, mvs: dict[str, str], backfilled: int = 3) -> None:
        """Table `create` on both, `backfilled` random statements, then the MVs over those rows
        (so the MVs begin with a backfill)."""
        self.run(create)
        for _ in range(backfilled):
            self.run(dml.statement())
        for name, q in mvs.items():
            self.db.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")

    def rows(self, sql: str) -> Counter[tuple[Any, ...]]:
        """piestream's answer to `sql`, as a multiset."""
        return Counter(self.db.execute(sql)[0].rows)

    def duck_rows(self, sql: str) -> Counter[tuple[Any, ...]]:
        """DuckDB's answer to `sql`, as a multiset."""
        return Counter(self.duck.execute(sql).fetchall())

    def restart(self) -> Database:
        self.db.close()
        self.db = open_db(self.path)
        return self.db

    def close(self) -> None:
        self.db.close()
        self.duck.close()


def literal(x: object) -> str:
    """`x` as a SQL literal."""
    if x is None:
        return "NULL"
    return f"'{x}'" if isinstance(x, str) else str(x)


class DmlGen:
    """Random statements on `table` (``id INT PRIMARY KEY`` then `columns`): an INSERT of 1-4 rows
    half of the time (always while fewer than 3 rows live), else an UPDATE (30%) setting one of
    `updates` (a column to a new random value, or a fixed ``SET`` expression) or a DELETE (20%)
    of 1-3 live rows. `columns` maps each column to its random value (None for NULL); tables
    that share `ids` draw their ids from one counter."""

    def __init__(
        self,
        rng: random.Random,
        table: str,
        columns: dict[str, Callable[[], object]],
        updates: Sequence[str],
        ids: Iterable[int] | None = None,
    ) -> None:
        self.rng = rng
        self.table = table
        self.columns = columns
        self.updates = updates
        self.live: set[int] = set()
        self.ids = iter(ids) if ids is not None else itertools.count()

    def statement(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.5 or len(self.live) < 3:
            rows = []
            for _ in range(rng.randint(1, 4)):
                i = next(self.ids)
                self.live.add(i)
                rows.append(f"({', '.join([str(i), *(literal(v()) for v in self.columns.values())])})")
            return f"INSERT INTO {self.table} VALUES {', '.join(rows)}"
        picked = rng.sample(sorted(self.live), min(len(self.live), rng.randint(1, 3)))
        where = f"id IN ({', '.join(map(str, picked))})"
        if r < 0.8:
            u = rng.choice(self.updates)
            sets = f"{u} = {literal(self.columns[u]())}" if u in self.columns else u
            return f"UPDATE {self.table} SET {sets} WHERE {where}"
        self.live.difference_update(picked)
        return f"DELETE FROM {self.table} WHERE {where}"


# -- watermarked file sources ---------------------------------------------------------------------

Row = tuple[int, int, dt.datetime]


class Model:
    """One source's rows and its watermark (the max of ``ts - delay`` over earlier files), file by
    file: a file's rows below the watermark before it are late (dropped), the rest accepted."""

    def __init__(self, delay: dt.timedelta) -> None:
        self.delay = delay
        self.watermark: dt.datetime | None = None
        self.accepted: list[Row] = []
        self.all: list[Row] = []
        self.late = 0

    def epoch(self, rows: list[Row]) -> None:
        w = self.watermark
        self.all += rows
        for r in rows:
            if w is None or r[2] >= w:
                self.accepted.append(r)
            else:
                self.late += 1
        top = max(r[2] for r in rows) - self.delay
        self.watermark = top if w is None else max(w, top)


def random_rows(
    rng: random.Random, base: dt.datetime, n: int, keys: int, values: tuple[int, int], late_ms: int
) -> list[Row]:
    """`n` rows `(k in 0..keys, v in values, ts)`, ts mostly near `base` (up to 4 s early, 2 s
    late), a tenth `late_ms` to 30 s behind it (late rows)."""
    out = []
    for _ in range(n):
        if rng.random() < 0.1:
            ts = base - dt.timedelta(milliseconds=rng.randint(late_ms, 30_000))
        else:
            ts = base + dt.timedelta(milliseconds=rng.randint(-4_000, 2_000))
        out.append((rng.randint(0, keys), rng.randint(*values), ts))
    return out


def rows_table(rows: Sequence[Row], time_col: str = "ts") -> pa.Table:
    """`(k, v, time)` rows as an Arrow table for DuckDB."""
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int32()),
            "v": pa.array([r[1] for r in rows], pa.int32()),
            time_col: pa.array([r[2] for r in rows], pa.timestamp("us")),
        }
    )


class FileHarness:
    """A database with its barriers stopped (epochs run at FLUSH) and a directory of JSON files
    per source, fed one file per source per epoch. The caller creates the sources and an MV
    ``arrived (n)`` counting the rows read from every directory (over sources without
    watermarks), which tells when an epoch has read the files."""

    def __init__(self, tmp: Path, sources: Sequence[str] = ("in",), time_col: str = "ts") -> None:
        self.dirs = {s: tmp / s for s in sources}
        for d in self.dirs.values():
            d.mkdir()
        self.dir = self.dirs[sources[0]]
        self.time_col = time_col
        self.db_path = tmp / "db"
        self.db = self.open()
        self.files = 0
        self.sent = 0

    def open(self) -> Database:
        cfg = DatabaseConfig(
            runner="local", barrier_interval=3600, parallelism=2, background_compaction=False
        )
        db = Database(self.db_path, config=cfg)
        db.barriers.stop()
        return db

    def restart(self) -> None:
        self.db.close()
        self.db = self.open()

    def feed(self, *files: list[Row]) -> None:
        """One file per source (in `sources` order), each read whole by one epoch (the epoch
        before it only lists it)."""
        for d, rows in zip(self.dirs.values(), files, strict=True):
            text = "".join(
                json.dumps({"k": k, "v": v, self.time_col: t.isoformat(sep=" ")}) + "\n" for k, v, t in rows
            )
            (d / f"{self.files:05d}.json").write_text(text)
            self.sent += len(rows)
        self.files += 1
        for _ in range(20):
            self.db.execute("FLUSH")
            # the compactor, in this thread (deterministic), as a running database has one: an
            # uncompacted L0 gains an SST per actor per epoch, and every read merges them all
            self.db.hummock.compact_until_idle()
            if self.db.execute("SELECT n FROM arrived")[0].rows == [(self.sent,)]:
                return
        raise AssertionError("the files were not read")

    def query(self, sql: str) -> Any:
        return norm_rows(self.db.execute(sql)[0].rows)

    def plans(self, name: str) -> list[Any]:
        return plan_nodes(self.db, name)

    def table_rows(self, desc: Any) -> list[tuple[Any, ...]]:
        return table_rows(self.db, desc)

    def committed_watermarks(self) -> dict[int, Any]:
        storage, _, vpin, spin = self.db.snapshot_storage()
        try:
            return dict(storage.version.table_watermarks)
        finally:
            self.db.release_snapshot(vpin, spin)


# the source of test_watermark_sql, test_eowc_sql and test_eowc_sort_sql (the `h` fixture)
DELAY = dt.timedelta(seconds=5)
T0 = dt.datetime(2024, 1, 1)
SOURCE = (
    "CREATE SOURCE s (k INT, v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
    "WITH (connector = 'file', path = '{path}', file.split.num = '2') FORMAT PLAIN ENCODE JSON"
)
# the same files without a watermark: counts what arrived, to know an epoch has read its file
ALL = "CREATE SOURCE s_all (k INT) WITH (connector = 'file', path = '{path}') FORMAT PLAIN ENCODE JSON"


def new_model() -> Model:
    """The model of source `s` (a 5 s watermark delay)."""
    return Model(DELAY)


def watermark_rows(rng: random.Random, base: dt.datetime, n: int) -> list[Row]:
    """Rows for source `s`: keys 0-6, values -50..50, late rows 6-30 s behind `base`."""
    return random_rows(rng, base, n, keys=6, values=(-50, 50), late_ms=6_000)


def watermarked(tmp: Path) -> FileHarness:
    """The harness with source `s` (watermarked), `s_all` (the same files) and `arrived`."""
    harness = FileHarness(tmp)
    harness.db.execute(SOURCE.format(path=harness.dir))
    harness.db.execute(ALL.format(path=harness.dir))
    harness.db.execute("CREATE MATERIALIZED VIEW arrived AS SELECT count(*) AS n FROM s_all")
    return harness
