"""Watermarks end to end (``WATERMARK FOR col AS expr``): late rows are dropped, the watermark
survives a restart, windowed state is cleaned below it, and every MV still equals DuckDB over
the rows the watermark accepted.

The source is a directory of JSON files, one file read per epoch, so the model is exact: the
file of epoch e is filtered by the watermark committed after epoch e-1 (the max of
``ts - 5 s`` over every earlier row), then raises it.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.common.errors import PiestreamError
from piestream.plan.hash_agg import HashAggNode
from piestream.plan.hash_join import HashJoinNode
from piestream.plan.watermark import WatermarkFilterNode
from piestream.server.database import Database, DatabaseConfig
from piestream.storage.table.storage_table import StorageTable

DELAY = dt.timedelta(seconds=5)
T0 = dt.datetime(2024, 1, 1)

SOURCE = (
    "CREATE SOURCE s (k INT, v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) "
    "WITH (connector = 'file', path = '{path}', file.split.num = '2') FORMAT PLAIN ENCODE JSON"
)
# the same files without a watermark: counts what arrived, to know an epoch has read its file
ALL = "CREATE SOURCE s_all (k INT) WITH (connector = 'file', path = '{path}') FORMAT PLAIN ENCODE JSON"

_TUMBLE = "TUMBLE(s, ts, INTERVAL '10' SECOND)"
_HOP = "HOP(s, ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND)"
_DUCK = {
    _TUMBLE: "(SELECT *, time_bucket(INTERVAL '10 seconds', ts) AS window_start FROM s)",
    _HOP: "(SELECT s.*, time_bucket(INTERVAL '2 seconds', ts) - r.i * INTERVAL '2 seconds' AS window_start "
    "FROM s CROSS JOIN range(0, 3) r(i))",
}
MVS = {
    # the watermarked key is not the first group key: the planner puts it first
    "m_agg": f"SELECT k, window_start, count(*) AS c, sum(v) AS sv FROM {_TUMBLE} GROUP BY k, window_start",
    # Nexmark q5's shape: two HOP counts joined on window_start, a max over a retractable input
    "m_q5": f"""SELECT a.k, a.num FROM (
        SELECT k, count(*) AS num, window_start AS st FROM {_HOP} GROUP BY k, window_start) a
    JOIN (
        SELECT max(c.num) AS maxn, c.st2 FROM (
            SELECT count(*) AS num, window_start AS st2 FROM {_HOP} GROUP BY k, window_start) c
        GROUP BY c.st2) b
    ON a.st = b.st2 AND a.num >= b.maxn""",
    # no watermarked column read: late rows are dropped all the same
    "m_keys": "SELECT k, count(*) AS c, sum(v) AS sv FROM s GROUP BY k",
    # outer and semi joins on a watermarked window key clean their state too
    "m_left": f"""SELECT a.k, a.ws, a.c, b.top FROM (
        SELECT k, window_start AS ws, count(*) AS c FROM {_TUMBLE} GROUP BY k, window_start) a
    LEFT JOIN (
        SELECT window_start AS ws2, max(v) AS top FROM {_TUMBLE} WHERE v > 40 GROUP BY window_start) b
    ON a.ws = b.ws2""",
    "m_semi": f"""SELECT a.k, a.ws, a.c FROM (
        SELECT k, window_start AS ws, count(*) AS c FROM {_TUMBLE} GROUP BY k, window_start) a
    WHERE a.ws IN (SELECT window_start FROM {_TUMBLE} WHERE v > 45)""",
}
# MV on MV: m_agg's rows (kept after its state is cleaned) aggregated again
MV_ON_MV = {"m_mv": "SELECT window_start, sum(c) AS total, count(*) AS keys FROM m_agg GROUP BY window_start"}


def duck_sql(sql: str) -> str:
    for pg, duck in _DUCK.items():
        sql = sql.replace(pg, duck)
    return sql


class Model:
    """The accepted rows and the watermark, epoch by epoch (one file per epoch)."""

    def __init__(self) -> None:
        self.watermark: dt.datetime | None = None
        self.accepted: list[tuple[int, int, dt.datetime]] = []
        self.late = 0

    def epoch(self, rows: list[tuple[int, int, dt.datetime]]) -> None:
        w = self.watermark
        for r in rows:
            if w is None or r[2] >= w:
                self.accepted.append(r)
            else:
                self.late += 1
        top = max(r[2] for r in rows) - DELAY
        self.watermark = top if w is None else max(w, top)


def _rows(rng: random.Random, base: dt.datetime, n: int) -> list[tuple[int, int, dt.datetime]]:
    """Mostly near `base` (up to 4 s early, 2 s late), a tenth far behind it (late rows)."""
    out = []
    for _ in range(n):
        if rng.random() < 0.1:
            ts = base - dt.timedelta(milliseconds=rng.randint(6_000, 30_000))
        else:
            ts = base + dt.timedelta(milliseconds=rng.randint(-4_000, 2_000))
        out.append((rng.randint(0, 6), rng.randint(-50, 50), ts))
    return out


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "in"
        self.dir.mkdir()
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

    def feed(self, rows: list[tuple[int, int, dt.datetime]]) -> None:
        """One file, read whole by one epoch (the epoch before it only lists it)."""
        name = self.dir / f"{self.files:05d}.json"
        text = "".join(json.dumps({"k": k, "v": v, "ts": ts.isoformat(sep=" ")}) + "\n" for k, v, ts in rows)
        name.write_text(text)
        self.files += 1
        self.sent += len(rows)
        for _ in range(20):
            self.db.execute("FLUSH")
            if self.db.execute("SELECT n FROM arrived")[0].rows == [(self.sent,)]:
                return
        raise AssertionError("the file was not read")

    def query(self, sql: str) -> Any:
        return norm_rows(self.db.execute(sql)[0].rows)

    def plans(self, name: str) -> list[Any]:
        rel = self.db.catalog.get(name)
        assert rel is not None and rel.job_id is not None
        return [n for f in self.db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]

    def table_rows(self, desc: Any) -> list[tuple[Any, ...]]:
        storage, epoch, vpin, spin = self.db.snapshot_storage()
        try:
            return list(StorageTable(desc, storage, epoch).iter_rows())
        finally:
            self.db.release_snapshot(vpin, spin)

    def committed_watermarks(self) -> dict[int, Any]:
        storage, _, vpin, spin = self.db.snapshot_storage()
        try:
            return dict(storage.version.table_watermarks)
        finally:
            self.db.release_snapshot(vpin, spin)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    harness.db.execute(SOURCE.format(path=harness.dir))
    harness.db.execute(ALL.format(path=harness.dir))
    harness.db.execute("CREATE MATERIALIZED VIEW arrived AS SELECT count(*) AS n FROM s_all")
    yield harness
    harness.db.close()


def _check(h: Harness, model: Model, names: dict[str, str]) -> None:
    duck = duck_connect()
    table = pa.table(
        {
            "k": pa.array([r[0] for r in model.accepted], pa.int32()),
            "v": pa.array([r[1] for r in model.accepted], pa.int32()),
            "ts": pa.array([r[2] for r in model.accepted], pa.timestamp("us")),
        }
    )
    duck.register("s_arrow", table)
    duck.execute("CREATE TABLE s AS SELECT * FROM s_arrow")
    for name in ("m_agg", "m_q5", "m_keys"):
        duck.execute(f"CREATE VIEW {name} AS {duck_sql(MVS[name])}")
    for name, sql in names.items():
        got = h.query(f"SELECT * FROM {name}")
        want = norm_rows(duck.execute(duck_sql(sql)).fetchall())
        assert sum(want.values()) > 0, name
        assert got == want, f"{name}:\n{diff_text(got, want)}"


def test_late_rows_dropped_state_cleaned_and_mvs_equal_duckdb(h: Harness) -> None:
    rng = random.Random(12)
    for name, sql in MVS.items():
        h.db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    h.db.execute(f"CREATE MATERIALIZED VIEW m_mv AS {MV_ON_MV['m_mv']}")
    model = Model()
    base = T0
    for e in range(24):
        model.epoch(rows := _rows(rng, base, rng.randint(20, 60)))
        h.feed(rows)
        base += dt.timedelta(seconds=rng.randint(1, 4))
        if e in (5, 17):
            _check(h, model, MVS | MV_ON_MV)
    assert model.late > 20
    _check(h, model, MVS | MV_ON_MV)
    h.db.execute("FLUSH")  # executors clean by the watermark committed before their epoch

    # the committed watermark is the model's, in every MV's filter
    wm = model.watermark
    assert wm is not None
    filters = [n for name in MVS for n in h.plans(name) if isinstance(n, WatermarkFilterNode)]
    # m_left and m_semi read the source twice; m_q5 too, but through one shared aggregation
    assert len(filters) == 7
    for f in filters:
        assert max(r[1] for r in h.table_rows(f.state_table)) == wm

    # every watermarked state table holds only rows at or above its bound, and fewer rows
    # than the MV it feeds: the windows behind the watermark were cleaned
    stateful = [n for name in ("m_agg", "m_q5", "m_left", "m_semi") for n in h.plans(name)]
    cleaned = [n for n in stateful if isinstance(n, HashAggNode | HashJoinNode)]
    assert all(n.watermark is not None for n in cleaned)
    joins = {n.join_type.value for n in cleaned if isinstance(n, HashJoinNode)}
    assert joins == {"inner", "left_outer", "left_semi"}
    committed = h.committed_watermarks()
    for n in cleaned:
        assert n.watermark is not None
        bound = n.watermark.bound({f.state_table.table_id: wm for f in filters})
        assert bound is not None and bound > T0
        for t in n.tables():
            rows = h.table_rows(t)
            assert all(r[t.pk[0]] >= bound for r in rows), (n.kind, t.name)
            if rows or t.name.startswith("agg"):
                assert t.table_id in committed, (n.kind, t.name)  # a Hummock table watermark
    agg_state = next(n for n in h.plans("m_agg") if isinstance(n, HashAggNode)).state_tables.value
    groups_alive = len(h.table_rows(agg_state))
    groups_total = len(h.db.execute("SELECT * FROM m_agg")[0].rows)
    assert groups_alive < groups_total / 2, (groups_alive, groups_total)

    # m_keys has no window: nothing to clean, but the late rows were dropped all the same
    assert not any(isinstance(n, HashAggNode) and n.watermark for n in h.plans("m_keys"))


def test_the_watermark_survives_a_restart(h: Harness) -> None:
    rng = random.Random(7)
    h.db.execute(f"CREATE MATERIALIZED VIEW m_agg AS {MVS['m_agg']}")
    model = Model()
    base = T0
    for _ in range(6):
        model.epoch(rows := _rows(rng, base, 40))
        h.feed(rows)
        base += dt.timedelta(seconds=3)
    before = model.watermark
    assert before is not None
    h.restart()
    # right after the restart: rows between the old watermark's past and it are late
    late_after_restart = [(1, 1, before - dt.timedelta(seconds=1)), (2, 2, before + dt.timedelta(seconds=1))]
    model.epoch(late_after_restart)
    h.feed(late_after_restart)
    assert late_after_restart[0] not in model.accepted and late_after_restart[1] in model.accepted
    for _ in range(4):
        model.epoch(rows := _rows(rng, base, 40))
        h.feed(rows)
        base += dt.timedelta(seconds=3)
    _check(h, model, {"m_agg": MVS["m_agg"]})


def test_append_only_table_with_a_watermark_stores_only_accepted_rows(tmp_path: Path) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2, background_compaction=False)
    db = Database(tmp_path / "db", config=cfg)  # barriers run: an INSERT returns once committed
    try:
        res = db.execute(
            "CREATE TABLE t (v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '10' SECOND) APPEND ONLY"
        )
        assert not res[0].notices  # no "not supported yet" any more
        db.execute("INSERT INTO t VALUES (1, '2024-01-01 00:01:00'), (2, '2024-01-01 00:00:10')")
        db.execute("FLUSH")
        # watermark now 00:00:50: 00:00:49 is late, 00:00:50 is not, a NULL is below any watermark
        db.execute("INSERT INTO t VALUES (3, '2024-01-01 00:00:49'), (4, '2024-01-01 00:00:50'), (5, NULL)")
        db.execute("FLUSH")
        assert sorted(db.execute("SELECT v FROM t")[0].rows) == [(1,), (2,), (4,)]
    finally:
        db.close()


@pytest.mark.parametrize(
    ("ddl", "sqlstate", "message"),
    [
        (
            "CREATE TABLE r (v INT PRIMARY KEY, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
            "0A000",
            "WATERMARK needs an append-only table",
        ),
        (
            "CREATE TABLE r (v INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
            "0A000",
            "WATERMARK needs an append-only table",
        ),
        ("CREATE TABLE r (v INT, WATERMARK FOR v AS v - 1) APPEND ONLY", "42804", "must be a timestamp"),
        (
            "CREATE TABLE r (v INT, ts TIMESTAMP, WATERMARK FOR nope AS ts) APPEND ONLY",
            "42703",
            'column "nope" named in WATERMARK does not exist',
        ),
        (
            "CREATE TABLE r (ts TIMESTAMP, WATERMARK FOR ts AS ts::DATE) APPEND ONLY",
            "42804",
            "WATERMARK expression is of type date",
        ),
        (
            "CREATE TABLE r (ts TIMESTAMP, WATERMARK FOR ts AS ts, WATERMARK FOR ts AS ts) APPEND ONLY",
            "0A000",
            "only one WATERMARK",
        ),
    ],
)
def test_watermarks_piestream_refuses(tmp_path: Path, ddl: str, sqlstate: str, message: str) -> None:
    db = Database(tmp_path / "db", config=DatabaseConfig(runner="local", barrier_interval=3600))
    try:
        with pytest.raises(PiestreamError, match=message) as err:
            db.execute(ddl)
        assert err.value.sqlstate == sqlstate
        assert db.catalog.get("r") is None
    finally:
        db.close()
