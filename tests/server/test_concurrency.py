"""Many clients at once: DML, SELECT and an MV that must add up at the end."""

from __future__ import annotations

import threading

import psycopg

from piestream.server.pgwire import PgServer

CLIENTS = 8
ROUNDS = 6


def test_concurrent_clients_dml_select_and_mv(server: PgServer, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE acc (id INT PRIMARY KEY, client INT, amount BIGINT)")
        c.execute(
            "CREATE MATERIALIZED VIEW per_client AS "
            "SELECT client, count(*) AS n, sum(amount) AS total FROM acc GROUP BY client"
        )
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for r in range(ROUNDS):
                    key = i * 1000 + r
                    conn.execute("INSERT INTO acc VALUES (%s, %s, %s)", (key, i, r + 1))
                    if r % 2:
                        conn.execute("UPDATE acc SET amount = amount + 100 WHERE id = %s", (key,))
                    if r == ROUNDS - 1:
                        conn.execute("DELETE FROM acc WHERE id = %s", (i * 1000,))
                    mine = conn.execute("SELECT count(*) FROM acc WHERE client = %s", (i,)).fetchone()
                    assert mine is not None and mine[0] >= 1
                    conn.execute("SELECT * FROM per_client")
                    conn.execute("SELECT relname FROM pg_catalog.pg_class")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    expected_total = sum(r + 1 for r in range(1, ROUNDS)) + 100 * (ROUNDS // 2)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("FLUSH")
        rows = c.execute("SELECT client, n, total FROM per_client ORDER BY client").fetchall()
        assert rows == [(i, ROUNDS - 1, expected_total) for i in range(CLIENTS)]
        assert c.execute("SELECT count(*), sum(amount) FROM acc").fetchone() == (
            CLIENTS * (ROUNDS - 1),
            CLIENTS * expected_total,
        )


def test_concurrent_ddl(server: PgServer, dsn: str) -> None:
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"CREATE TABLE ddl_{i} (k INT PRIMARY KEY, v INT)")
                conn.execute(f"INSERT INTO ddl_{i} VALUES (1, {i})")
                conn.execute(f"CREATE MATERIALIZED VIEW ddl_mv_{i} AS SELECT sum(v) AS s FROM ddl_{i}")
                assert conn.execute(f"SELECT s FROM ddl_mv_{i}").fetchone() == (i,)
                conn.execute(f"DROP MATERIALIZED VIEW ddl_mv_{i}")
                conn.execute(f"DROP TABLE ddl_{i}")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
