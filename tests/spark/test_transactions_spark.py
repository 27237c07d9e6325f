"""A transaction block committed on the Spark runner: changes to a table with a primary key, a
table without one (generated row ids) and a table created in the block, and the MV over them."""

from __future__ import annotations

from pathlib import Path

import pytest

import piestream

pytestmark = pytest.mark.spark


def test_a_transaction_commits_in_one_spark_epoch(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with piestream.connect(tmp_path / "db", spark=spark, barrier_interval=1.0) as conn:
        conn.sql("CREATE TABLE a (k INT PRIMARY KEY, v INT)")
        conn.sql("CREATE TABLE r (k INT, w INT)")
        conn.sql(
            "CREATE MATERIALIZED VIEW j AS "
            "SELECT a.k, sum(v + w) AS s, count(*) AS n FROM a JOIN r ON a.k = r.k GROUP BY a.k"
        )
        conn.sql("INSERT INTO a VALUES (1, 10), (2, 20)")
        conn.sql("INSERT INTO r VALUES (1, 1), (2, 2), (2, 3)")
        with conn.transaction():
            conn.sql("CREATE TABLE n (k INT PRIMARY KEY, note VARCHAR)")
            conn.sql("INSERT INTO n VALUES (1, 'new')")
            conn.sql("INSERT INTO a VALUES (3, 30)")
            conn.sql("INSERT INTO r VALUES (3, 4)")
            conn.sql("UPDATE r SET w = w * 10 WHERE k = 2")
            conn.sql("DELETE FROM a WHERE k = 1")
            assert sorted(conn.sql("SELECT k, w FROM r").rows) == [(1, 1), (2, 20), (2, 30), (3, 4)]
        expected = [(2, 40 + 50, 2), (3, 34, 1)]
        assert sorted(conn.sql("SELECT * FROM j").rows) == expected
        assert (
            sorted(conn.sql("SELECT a.k, sum(v + w), count(*) FROM a JOIN r ON a.k = r.k GROUP BY a.k").rows)
            == expected
        )
        assert conn.sql("SELECT * FROM n").rows == [(1, "new")]
        conn.sql("INSERT INTO n VALUES (2, 'later')")  # the created table's job runs on Spark
        assert conn.sql("SELECT count(*) FROM n").scalar() == 2
