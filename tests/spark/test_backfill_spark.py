"""Chunked backfill on the Spark runner: a new MV over an existing table reads a bounded number of
rows per epoch in Spark tasks (progress rows in its state tables, read back by meta), with a
concurrent update forwarded by the position rule, and equals its query when CREATE returns."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import piestream
from piestream.stream.executor import StreamingConfig

pytestmark = pytest.mark.spark


def test_backfill_in_chunks_on_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = StreamingConfig(backfill_rows_per_epoch=400)
    with piestream.connect(tmp_path / "db", spark=spark, barrier_interval=0.2, streaming=config) as conn:
        conn.sql("CREATE TABLE a (k INT PRIMARY KEY, g INT, v INT)")
        conn.sql("INSERT INTO a SELECT x, x % 5, x FROM generate_series(1, 3000) AS s(x)")
        db = conn.database
        epochs_before = len(db.barriers.stats)
        stop = threading.Event()

        def dml() -> None:
            s = db.session()
            i = 0
            while not stop.is_set():
                s.execute(f"UPDATE a SET v = v + 1 WHERE k = {1 + (i * 131) % 3000}")
                i += 1

        t = threading.Thread(target=dml)
        t.start()
        try:
            conn.sql("CREATE MATERIALIZED VIEW m AS SELECT g, count(*) AS n, sum(v) AS s FROM a GROUP BY g")
        finally:
            stop.set()
            t.join()
        assert len(db.barriers.stats) - epochs_before >= 4  # 3000 rows, 2 actors x 400 per epoch
        conn.flush()
        assert sorted(conn.sql("SELECT * FROM m").rows) == sorted(
            conn.sql("SELECT g, count(*), sum(v) FROM a GROUP BY g").rows
        )
