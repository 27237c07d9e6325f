"""A long CREATE MATERIALIZED VIEW tells the client how far its backfill is, as NOTICEs sent
while it runs (issue 16 §6): psycopg's notice handler sees them before the statement returns,
and psql prints them."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer
from piestream.stream.executor import StreamingConfig


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    config = DatabaseConfig(
        runner="local",
        barrier_interval=0.05,
        parallelism=2,
        streaming=StreamingConfig(backfill_rows_per_epoch=200),
        progress_notice_interval=0.2,
    )
    db = Database(Path(tmp_path_factory.mktemp("progress")), config=config)
    srv = PgServer(db, port=0, shutdown_timeout=5).start()
    with psycopg.connect(_dsn(srv), autocommit=True) as conn:
        conn.execute("CREATE TABLE big (k int PRIMARY KEY, g int)")
        conn.execute("INSERT INTO big SELECT x, x % 10 FROM generate_series(1, 12000) AS s(x)")
    yield srv
    srv.stop()


def _dsn(srv: PgServer) -> str:
    return f"host=127.0.0.1 port={srv.port} user=root dbname=dev"


def test_psycopg_sees_progress_notices_while_create_runs(server: PgServer) -> None:
    seen: list[tuple[float, str]] = []
    with psycopg.connect(_dsn(server), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: seen.append((time.monotonic(), d.message_primary or "")))
        conn.execute("CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n FROM big GROUP BY g")
        finished = time.monotonic()
        assert conn.execute("SELECT sum(n) FROM per_g").fetchone() == (12000,)
    progress = [(t, m) for t, m in seen if 'materialized view "per_g" backfill:' in m]
    assert len(progress) >= 2, seen
    assert progress[0][0] < finished - 0.1  # delivered while the statement ran, not with its result
    assert "of ~" in progress[-1][1] and "rows (" in progress[-1][1]


def test_psql_prints_progress_notices(server: PgServer) -> None:
    cmd = ["psql", "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", "root", "-d", "dev"]
    sql = "CREATE MATERIALIZED VIEW per_g2 AS SELECT k FROM big WHERE g = 3"
    out = subprocess.run([*cmd, "-c", sql], capture_output=True, text=True, timeout=120, check=True)
    assert "CREATE MATERIALIZED VIEW" in out.stdout
    assert 'NOTICE:  materialized view "per_g2" backfill:' in out.stderr, out.stderr
