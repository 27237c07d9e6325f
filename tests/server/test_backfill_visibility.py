"""No reader sees a materialized view whose backfill is not done (chunked backfill leaves partial
MVs in committed epochs). A backfill resumed after a restart has no statement holding the DDL
lock, so every reader must check: psycopg's SELECT, CREATE SUBSCRIPTION, CREATE MATERIALIZED VIEW
and CREATE INDEX on it, and the Python API's reads and ``subscribe`` get 55000; once the backfill
is done they all work and a FULL subscription cursor returns exactly the MV's query."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from piestream.common.errors import PiestreamError
from piestream.server import api
from piestream.server.pgwire import PgServer
from piestream.stream.executor import StreamingConfig

ROWS = 8000
QUERY = "SELECT g, count(*) AS n, sum(v) AS s FROM a GROUP BY g"

CHILD = r"""
import json, sys
from piestream.server.database import Database, DatabaseConfig
from piestream.stream.executor import StreamingConfig
db = Database(sys.argv[1], config=DatabaseConfig(runner="local", barrier_interval=0.02, parallelism=2,
              streaming=StreamingConfig(backfill_rows_per_epoch=100), progress_notice_interval=0.05))
s = db.session()
s.execute("CREATE TABLE a (k int PRIMARY KEY, g int, v int)")
s.execute("INSERT INTO a SELECT x, x %% 7, x FROM generate_series(0, %d) AS s(x)" % (int(sys.argv[2]) - 1))
# progress NOTICEs: 'materialized view "m" backfill: 1,200 of ~8,000 rows (15.0%)'
s.notice = lambda m: print(json.dumps({"rows_done": int(m.split(": ")[1].split()[0].replace(",", ""))}))
s.execute("CREATE MATERIALIZED VIEW m AS %s" % sys.argv[3])
print(json.dumps({"created": True}), flush=True)
"""


def _killed_mid_backfill(path: Path) -> None:
    """A process creating MV m over `ROWS` rows, SIGKILLed once its backfill committed 1,000."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(ROWS), QUERY], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    try:
        for line in child.stdout:
            event = json.loads(line)
            assert "created" not in event, "the backfill finished before the kill"
            if event["rows_done"] >= 1000:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def _sqlstate(fn: Callable[[], object]) -> str | None:
    try:
        fn()
    except psycopg.Error as e:
        assert "still being created" in str(e), e
        return e.sqlstate
    except PiestreamError as e:
        assert "still being created" in str(e), e
        return e.sqlstate
    return None


def test_readers_refuse_a_resumed_backfill_until_done(tmp_path: Path) -> None:
    _killed_mid_backfill(tmp_path)
    conn = api.connect(tmp_path, runner="local", barrier_interval=0.05, parallelism=2,
                       streaming=StreamingConfig(backfill_rows_per_epoch=15))  # fmt: skip
    srv = PgServer(conn.database, port=0, shutdown_timeout=5).start()
    dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
    try:
        with psycopg.connect(dsn, autocommit=True) as pg:
            progress = pg.execute("SELECT rows_done FROM rw_catalog.rw_ddl_progress").fetchall()
            assert progress and progress[0][0] < ROWS, progress  # still backfilling
            refused = {
                "select": _sqlstate(lambda: pg.execute("SELECT * FROM m")),
                "subscription": _sqlstate(lambda: pg.execute("CREATE SUBSCRIPTION s FROM m")),
                "mv on mv": _sqlstate(lambda: pg.execute("CREATE MATERIALIZED VIEW m2 AS SELECT g FROM m")),
                "mv via view": _sqlstate(
                    lambda: (
                        pg.execute("CREATE VIEW v AS SELECT * FROM m"),
                        pg.execute("CREATE MATERIALIZED VIEW m3 AS SELECT g FROM v"),
                    )
                ),
                "index": _sqlstate(lambda: pg.execute("CREATE INDEX i ON m (n)")),
                "sink": _sqlstate(lambda: pg.execute("CREATE SINK sk FROM m WITH (connector = 'blackhole')")),
                "api sql": _sqlstate(lambda: conn.sql("SELECT count(*) FROM m")),
                "api subscribe": _sqlstate(lambda: conn.subscribe("m", since="full", idle_timeout=1)),
            }
            assert pg.execute("SELECT rows_done FROM rw_catalog.rw_ddl_progress").fetchall(), (
                "the backfill ended before every reader was tried: lower backfill_rows_per_epoch"
            )
            assert refused == dict.fromkeys(refused, "55000"), refused
            # nothing was created by the refused statements
            names = {r[0] for r in pg.execute("SELECT relname FROM pg_catalog.pg_class").fetchall()}
            assert not names & {"s", "m2", "m3", "i", "sk"}, names

            deadline = time.monotonic() + 180
            while pg.execute("SELECT * FROM rw_catalog.rw_ddl_progress").fetchall():
                assert time.monotonic() < deadline, "the resumed backfill did not finish"
                time.sleep(0.2)
            want = sorted(pg.execute(QUERY).fetchall())
            assert sorted(pg.execute("SELECT * FROM m").fetchall()) == want
            pg.execute("CREATE SUBSCRIPTION s FROM m WITH (retention = '1h')")
            pg.execute("CREATE MATERIALIZED VIEW m2 AS SELECT g, n FROM m")
            pg.execute("CREATE INDEX i ON m (n)")
            assert sorted(pg.execute("SELECT * FROM m2").fetchall()) == [(g, n) for g, n, _ in want]
            with pg.transaction():
                pg.execute("DECLARE c SUBSCRIPTION CURSOR FOR s FULL")
                full = pg.execute("FETCH 100 FROM c").fetchall()
            assert sorted(r[:3] for r in full) == want
            assert {r[3] for r in full} == {"insert"}
        assert sorted(conn.sql("SELECT * FROM m").rows) == want
        first = next(iter(conn.subscribe("m", since="full", idle_timeout=1)))
        assert sorted(first.table.select(["g", "n", "s"]).to_pylist(), key=lambda r: r["g"]) == [
            {"g": g, "n": n, "s": s} for g, n, s in want
        ]
    finally:
        srv.stop()
        conn.close()


def test_ddl_on_an_in_flight_create_waits_for_it(tmp_path: Path) -> None:
    """While a CREATE runs (holding the DDL lock) an MV on it waits and then sees it whole."""
    import threading

    conn = api.connect(tmp_path, runner="local", barrier_interval=0.02, parallelism=2,
                       streaming=StreamingConfig(backfill_rows_per_epoch=100))  # fmt: skip
    try:
        conn.execute("CREATE TABLE a (k int PRIMARY KEY, g int, v int)")
        conn.execute(f"INSERT INTO a SELECT x, x % 7, x FROM generate_series(0, {ROWS - 1}) AS s(x)")
        create = f"CREATE MATERIALIZED VIEW m AS {QUERY}"
        creating = threading.Thread(target=lambda: conn.database.execute(create))
        creating.start()
        other = api.connect(tmp_path)
        deadline = time.monotonic() + 60
        while not other.sql("SELECT * FROM rw_catalog.rw_ddl_progress").rows:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert _sqlstate(lambda: other.sql("SELECT * FROM m")) == "55000"
        other.sql("CREATE MATERIALIZED VIEW m2 AS SELECT g, n FROM m")  # waits for m's CREATE
        creating.join()
        want = sorted(other.sql(QUERY).rows)
        assert sorted(other.sql("SELECT * FROM m2").rows) == [(g, n) for g, n, _ in want]

        # while CREATE INDEX runs, a SELECT of its table answers from the table, not the index
        indexing = threading.Thread(target=lambda: conn.database.execute("CREATE INDEX ag ON a (g)"))
        indexing.start()
        while not other.sql("SELECT * FROM rw_catalog.rw_ddl_progress").rows:
            assert time.monotonic() < deadline + 60
            time.sleep(0.01)
        point = "SELECT count(*), sum(v) FROM a WHERE g = 3"
        plan = "\n".join(r[0] for r in other.sql(f"EXPLAIN {point}").rows)
        during = other.sql(point).rows
        assert other.sql("SELECT * FROM rw_catalog.rw_ddl_progress").rows, "the index finished too soon"
        assert "table: ag" not in plan and "table: a," in plan, plan
        indexing.join()
        assert during == other.sql(point).rows == [(len(range(3, ROWS, 7)), sum(range(3, ROWS, 7)))]
        assert "table: ag" in "\n".join(r[0] for r in other.sql(f"EXPLAIN {point}").rows)
        other.close()
    finally:
        conn.close()


def test_a_rebuild_is_refused_for_reads_until_its_backfill_is_done(tmp_path: Path) -> None:
    """REBUILD drops a failed MV's rows and backfills them again: reads are refused until it is done."""
    import threading

    from test_clean_errors import FailWhileFlagged

    from piestream.runtime.runners import LocalRunner
    from piestream.server.database import Database, DatabaseConfig

    flag = tmp_path / "fail"
    config = DatabaseConfig(
        runner="local",
        barrier_interval=0.02,
        parallelism=2,
        streaming=StreamingConfig(backfill_rows_per_epoch=50),
    )
    db = Database(tmp_path / "db", config=config, runner=LocalRunner(hook=FailWhileFlagged(str(flag))))
    try:
        db.execute("CREATE TABLE a (k int PRIMARY KEY, g int, v int)")
        db.execute(f"INSERT INTO a SELECT x, x % 7, x FROM generate_series(0, {ROWS - 1}) AS s(x)")
        db.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
        jobs = dict(db.execute("SELECT name, job_id FROM rw_catalog.rw_streaming_jobs")[0].rows)
        flag.write_text(str(jobs["m"]))
        db.execute("INSERT INTO a VALUES (-1, 0, 0)")
        flag.unlink()
        rebuilding = threading.Thread(target=lambda: db.execute("ALTER MATERIALIZED VIEW m REBUILD"))
        rebuilding.start()
        deadline = time.monotonic() + 60
        while not db.execute("SELECT * FROM rw_catalog.rw_ddl_progress")[0].rows:
            assert time.monotonic() < deadline, "the rebuild's backfill did not show"
            time.sleep(0.01)
        assert _sqlstate(lambda: db.execute("SELECT * FROM m")) == "55000"
        rebuilding.join()
        assert sorted(db.execute("SELECT * FROM m")[0].rows) == sorted(db.execute(QUERY)[0].rows)
    finally:
        db.close()
