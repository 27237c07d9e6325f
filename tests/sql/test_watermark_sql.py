"""Watermarks end to end (``WATERMARK FOR col AS expr``): late rows are dropped, the watermark
survives a restart, windowed state is cleaned below it, and every MV still equals DuckDB over
the rows the watermark accepted.

The source is a directory of JSON files, one file read per epoch, so the model is exact: the
file of epoch e is filtered by the watermark committed after epoch e-1 (the max of
``ts - 5 s`` over every earlier row), then raises it.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
from paired import T0, FileHarness, Model, new_model, rows_table, watermark_rows
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.common.errors import PiestreamError
from piestream.plan.hash_agg import HashAggNode
from piestream.plan.hash_join import HashJoinNode
from piestream.plan.watermark import WatermarkFilterNode
from piestream.server.database import Database, DatabaseConfig

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


def _check(h: FileHarness, model: Model, names: dict[str, str]) -> None:
    duck = duck_connect()
    duck.register("s_arrow", rows_table(model.accepted))
    duck.execute("CREATE TABLE s AS SELECT * FROM s_arrow")
    for name in ("m_agg", "m_q5", "m_keys"):
        duck.execute(f"CREATE VIEW {name} AS {duck_sql(MVS[name])}")
    for name, sql in names.items():
        got = h.query(f"SELECT * FROM {name}")
        want = norm_rows(duck.execute(duck_sql(sql)).fetchall())
        assert sum(want.values()) > 0, name
        assert got == want, f"{name}:\n{diff_text(got, want)}"


def test_late_rows_dropped_state_cleaned_and_mvs_equal_duckdb(h: FileHarness) -> None:
    rng = random.Random(12)
    for name, sql in MVS.items():
        h.db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    h.db.execute(f"CREATE MATERIALIZED VIEW m_mv AS {MV_ON_MV['m_mv']}")
    model = new_model()
    base = T0
    for e in range(24):
        model.epoch(rows := watermark_rows(rng, base, rng.randint(20, 60)))
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


def test_the_watermark_survives_a_restart(h: FileHarness) -> None:
    rng = random.Random(7)
    h.db.execute(f"CREATE MATERIALIZED VIEW m_agg AS {MVS['m_agg']}")
    model = new_model()
    base = T0
    for _ in range(6):
        model.epoch(rows := watermark_rows(rng, base, 40))
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
        model.epoch(rows := watermark_rows(rng, base, 40))
        h.feed(rows)
        base += dt.timedelta(seconds=3)
    _check(h, model, {"m_agg": MVS["m_agg"]})


def test_global_watermarks_come_from_the_plan_once_the_driver_knows_them(
    h: FileHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver learns each filter table's global watermark from the actors' reports and sends
    it in the next plans: after one epoch that read the tables, no actor scans them (a scan here
    fails the epoch), late rows are still dropped by the same value, and after a restart the
    tables are read from storage again (the new driver knows nothing yet)."""
    from piestream.stream import watermark

    rng = random.Random(5)
    h.db.execute(f"CREATE MATERIALIZED VIEW m_agg AS {MVS['m_agg']}")
    h.db.execute(f"CREATE MATERIALIZED VIEW m_left AS {MVS['m_left']}")
    model = new_model()
    base = T0

    def feed(n: int) -> None:
        nonlocal base
        for _ in range(n):
            model.epoch(rows := watermark_rows(rng, base, 40))
            h.feed(rows)
            base += dt.timedelta(seconds=rng.randint(1, 4))

    feed(3)
    filters = [n for name in ("m_agg", "m_left") for n in h.plans(name) if isinstance(n, WatermarkFilterNode)]
    assert len(filters) == 3
    known = h.db.barriers._watermarks
    for f in filters:  # what the driver knows is the committed max over the filter's rows
        want = max(r[1] for r in h.table_rows(f.state_table))
        got = watermark.decode_watermark(known[f.state_table.table_id], f.state_table)
        assert got == want == model.watermark
    scans = []

    def no_scan(table: object) -> None:
        scans.append(table)
        raise AssertionError("a filter table scanned although the plan holds its watermark")

    monkeypatch.setattr(watermark, "global_watermark", no_scan)
    watermark._PROCESS_MEMO.clear()
    feed(6)
    assert not scans and model.late > 0
    _check(h, model, {"m_agg": MVS["m_agg"], "m_left": MVS["m_left"]})
    monkeypatch.undo()
    read = []
    real = watermark.global_watermark
    monkeypatch.setattr(watermark, "global_watermark", lambda t: read.append(t) or real(t))
    watermark._PROCESS_MEMO.clear()
    h.restart()
    feed(2)
    assert read  # the restarted driver knew no watermark: the first epoch read them
    _check(h, model, {"m_agg": MVS["m_agg"], "m_left": MVS["m_left"]})


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
