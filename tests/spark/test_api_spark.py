"""`piestream.connect(spark=...)` runs the database on the user's own SparkSession, and
`piestream.register_spark` lets that session read the database's tables."""

from __future__ import annotations

from pathlib import Path

import pytest

import piestream

pytestmark = pytest.mark.spark


def test_connect_reuses_the_users_spark_session(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with piestream.connect(tmp_path / "db", spark=spark, barrier_interval=1.0) as conn:
        assert conn.spark is spark  # epochs run as jobs of this session
        conn.sql("CREATE TABLE t (k int PRIMARY KEY, v varchar)")
        conn.sql("CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n FROM t")
        conn.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        assert conn.sql("SELECT n FROM mv").rows == [(2,)]

        piestream.register_spark(spark)
        df = (
            spark.read.format("piestream").option("table", "mv").option("data_dir", str(conn.data_dir)).load()
        )
        assert [r.n for r in df.collect()] == [2]
