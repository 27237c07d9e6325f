"""The server over the Spark runner (the shared local Spark session), end to end with psycopg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer


@pytest.mark.spark
def test_server_on_spark(spark: Any, tmp_path: Path) -> None:
    db = Database(tmp_path, spark=spark, config=DatabaseConfig(runner="spark", barrier_interval=2.0))
    server = PgServer(db, port=0).start()
    try:
        with psycopg.connect(f"host=127.0.0.1 port={server.port} user=root dbname=dev", autocommit=True) as c:
            c.execute("CREATE TABLE clicks (user_id INT, page VARCHAR)")
            c.execute(
                "CREATE MATERIALIZED VIEW per_page AS SELECT page, count(*) AS n FROM clicks GROUP BY page"
            )
            c.execute("INSERT INTO clicks VALUES (%s, %s), (%s, %s), (%s, %s)", (1, "a", 2, "a", 3, "b"))
            assert c.execute("SELECT page, n FROM per_page ORDER BY page").fetchall() == [("a", 2), ("b", 1)]
            c.execute("DELETE FROM clicks WHERE page = %s", ("a",))
            assert c.execute("SELECT page, n FROM per_page ORDER BY page").fetchall() == [("b", 1)]
    finally:
        server.stop()
