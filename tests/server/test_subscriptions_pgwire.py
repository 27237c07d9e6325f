"""Changefeeds over pgwire: psycopg (extended protocol) and psql fetch an MV's changes from a
subscription cursor; a client that reconnects resumes exactly where it stopped."""

from __future__ import annotations

import psycopg
import pytest
from test_psql import psql

from piestream.server.pgwire import PgServer


def test_psycopg_fetch_and_resume_after_reconnect(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE sales (id int PRIMARY KEY, region varchar, amount int)")
        c.execute(
            "CREATE MATERIALIZED VIEW by_region AS "
            "SELECT region, sum(amount) AS total FROM sales GROUP BY region"
        )
        c.execute("CREATE SUBSCRIPTION sales_sub FROM by_region WITH (retention = '1h')")
        c.execute("DECLARE cur SUBSCRIPTION CURSOR FOR sales_sub")
        c.execute("INSERT INTO sales VALUES (1, 'eu', 5), (2, 'us', 7)")
        c.execute("INSERT INTO sales VALUES (3, 'eu', 1)")
        cur = c.execute("FETCH 10 FROM cur")
        assert [d.name for d in cur.description] == ["region", "total", "op", "epoch"]
        got = cur.fetchall()
        assert sorted(r[:3] for r in got[:2]) == [("eu", 5, "insert"), ("us", 7, "insert")]
        assert [r[:3] for r in got[2:]] == [("eu", 5, "update_delete"), ("eu", 6, "update_insert")]
        last = got[-1][3]
        c.execute("UPDATE sales SET amount = 10 WHERE id = 2")  # committed while we are away
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("INSERT INTO sales VALUES (4, 'apac', 2)")
        c.execute(f"DECLARE cur SUBSCRIPTION CURSOR FOR sales_sub SINCE {last}")
        rows = c.execute("FETCH 10 FROM cur").fetchall()
        assert [r[:3] for r in rows] == [
            ("us", 7, "update_delete"),
            ("us", 10, "update_insert"),
            ("apac", 2, "insert"),
        ]
        assert all(r[3] > last for r in rows)
        assert c.execute("FETCH 10 FROM cur WITH (timeout = '100ms')").fetchall() == []
        with pytest.raises(psycopg.errors.InvalidCursorName):
            c.execute("FETCH 1 FROM missing")


def test_psql_declare_and_fetch(server: PgServer, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE pt (k int PRIMARY KEY, v int)")
        c.execute("CREATE SUBSCRIPTION pt_sub FROM pt")
    out = psql(
        server,
        "-c",
        "DECLARE c SUBSCRIPTION CURSOR FOR pt_sub; INSERT INTO pt VALUES (1, 2); FETCH 5 FROM c; CLOSE c",
    ).stdout
    assert " k | v |   op   |       epoch" in out
    assert " 1 | 2 | insert | " in out and "(1 row)" in out
