"""The Spark data source does not read a materialized view whose backfill is not done: it runs
in other processes, so it decides from the job's backfill state tables in the version it reads
(durable, committed with each epoch), and refuses with the server's 55000 message."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from piestream.connectors.spark import register
from piestream.server.database import Database, DatabaseConfig
from piestream.stream.executor import StreamingConfig

pytestmark = pytest.mark.spark

ROWS = 8000
QUERY = "SELECT g, count(*) AS n, sum(v) AS s FROM a GROUP BY g"


def test_spark_read_refuses_a_backfilling_mv_then_reads_it_whole(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(spark)
    config = DatabaseConfig(
        runner="local",
        barrier_interval=0.05,
        parallelism=2,
        streaming=StreamingConfig(backfill_rows_per_epoch=20),
    )
    db = Database(tmp_path / "db", config=config)
    try:
        db.execute("CREATE TABLE a (k int PRIMARY KEY, g int, v int)")
        db.execute(f"INSERT INTO a SELECT x, x % 7, x FROM generate_series(0, {ROWS - 1}) AS s(x)")
        creating = threading.Thread(target=lambda: db.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}"))
        creating.start()
        deadline = time.monotonic() + 60
        while not any(r[0] for r in db.execute("SELECT rows_done FROM rw_catalog.rw_ddl_progress")[0].rows):
            assert time.monotonic() < deadline, "the backfill did not start"
            time.sleep(0.02)
        reader = spark.read.format("piestream").option("table", "m").option("data_dir", str(db.data_dir))
        with pytest.raises(Exception, match='materialized view "m" is still being created') as refused:
            reader.load().collect()
        assert db.execute("SELECT * FROM rw_catalog.rw_ddl_progress")[0].rows, (
            "the backfill ended before the read: lower backfill_rows_per_epoch"
        )
        creating.join()
        want = sorted(db.execute(QUERY)[0].rows)
        got = sorted(tuple(r) for r in reader.load().collect())
        assert got == want, refused
        # a table (no backfill) is read as before
        assert reader.option("table", "a").load().count() == ROWS
    finally:
        db.close()
