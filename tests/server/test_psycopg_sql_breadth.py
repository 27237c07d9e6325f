"""The text the wire protocol sends for issue 14 part B's SQL (set operations, DISTINCT ON,
set-returning functions, window functions), read raw through psycopg: PostgreSQL's column names,
type OIDs and value text, from an MV kept up to date and from batch queries alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

# strings are varchar (RisingWave's single string type), so text[] is varchar[]
INT4, INT8, VARCHAR_ARRAY, TIMESTAMP, TIMESTAMPTZ, VARCHAR = 23, 20, 1015, 1114, 1184, 1043


@pytest.fixture(scope="module")
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute("SET TimeZone = 'UTC'")
    c.execute("CREATE TABLE ev (k INT PRIMARY KEY, g VARCHAR, at TIMESTAMP, tags VARCHAR[])")
    yield c
    c.close()


def wire(conn: psycopg.Connection, sql: str) -> tuple[list[tuple[str, int]], list[tuple[Any, ...]]]:
    """(column name, type OID) per column, and every row's values as the text sent (sorted)."""
    cur = conn.execute(sql)
    res = cur.pgresult
    assert res is not None and cur.description is not None
    cols = [(d.name, d.type_code) for d in cur.description]
    rows = []
    for r in range(res.ntuples):
        vals = [res.get_value(r, c) for c in range(res.nfields)]
        rows.append(tuple(None if v is None else bytes(v).decode() for v in vals))
    return cols, sorted(rows, key=repr)


def test_set_returning_functions_text(conn: psycopg.Connection) -> None:
    assert wire(conn, "SELECT regexp_matches('foobarbequebaz', '(bar)(beque)')") == (
        [("regexp_matches", VARCHAR_ARRAY)],
        [("{bar,beque}",)],
    )
    assert wire(conn, "SELECT * FROM unnest(ARRAY['x', NULL, 'y z']) WITH ORDINALITY AS u(v, n)") == (
        [("v", VARCHAR), ("n", INT8)],
        [("x", "1"), ("y z", "3"), (None, "2")],
    )
    assert wire(
        conn,
        "SELECT * FROM generate_series(TIMESTAMP '2024-01-31', TIMESTAMP '2024-03-31', INTERVAL '1 month')",
    ) == (
        [("generate_series", TIMESTAMP)],
        [("2024-01-31 00:00:00",), ("2024-02-29 00:00:00",), ("2024-03-29 00:00:00",)],
    )
    assert wire(
        conn, "SELECT * FROM generate_series(DATE '2024-01-01', DATE '2024-01-02', INTERVAL '1 day')"
    ) == (
        [("generate_series", TIMESTAMPTZ)],
        [("2024-01-01 00:00:00+00",), ("2024-01-02 00:00:00+00",)],
    )
    assert wire(conn, "SELECT generate_series(1, 2) AS n, unnest(ARRAY[10, 20, 30])") == (
        [("n", INT4), ("unnest", INT4)],
        [("1", "10"), ("2", "20"), (None, "30")],
    )


def test_mvs_send_postgresql_text(conn: psycopg.Connection) -> None:
    conn.execute(
        "CREATE MATERIALIZED VIEW ev_tags AS SELECT k, t, n "
        "FROM ev CROSS JOIN unnest(ev.tags) WITH ORDINALITY AS u(t, n)"
    )
    conn.execute(
        "CREATE MATERIALIZED VIEW ev_last AS SELECT DISTINCT ON (g) g, k, at FROM ev ORDER BY g, at DESC"
    )
    conn.execute(
        "CREATE MATERIALIZED VIEW ev_prev AS SELECT k, lag(at) OVER (PARTITION BY g ORDER BY at) AS prev, "
        "count(*) OVER (ORDER BY at RANGE BETWEEN INTERVAL '1 hour' PRECEDING AND CURRENT ROW) AS last_hour "
        "FROM ev"
    )
    conn.execute(
        "CREATE MATERIALIZED VIEW ev_both AS "
        "SELECT g FROM ev WHERE k < 3 INTERSECT SELECT g FROM ev WHERE k >= 3"
    )
    conn.execute(
        "INSERT INTO ev VALUES (1, 'a', '2024-05-01 10:00', ARRAY['red', 'big']), "
        "(2, 'b', '2024-05-01 10:30', NULL), (3, 'a', '2024-05-01 12:15:30.5', ARRAY['blue']), "
        "(4, NULL, '2024-05-01 09:00', NULL)"
    )
    assert wire(conn, "SELECT * FROM ev_tags") == (
        [("k", INT4), ("t", VARCHAR), ("n", INT8)],
        [("1", "big", "2"), ("1", "red", "1"), ("3", "blue", "1")],
    )
    assert wire(conn, "SELECT * FROM ev_last") == (
        [("g", VARCHAR), ("k", INT4), ("at", TIMESTAMP)],
        [
            ("a", "3", "2024-05-01 12:15:30.5"),
            ("b", "2", "2024-05-01 10:30:00"),
            (None, "4", "2024-05-01 09:00:00"),
        ],
    )
    assert wire(conn, "SELECT * FROM ev_prev") == (
        [("k", INT4), ("prev", TIMESTAMP), ("last_hour", INT8)],
        [("1", None, "2"), ("2", None, "2"), ("3", "2024-05-01 10:00:00", "1"), ("4", None, "1")],
    )
    assert wire(conn, "SELECT * FROM ev_both") == ([("g", VARCHAR)], [("a",)])
    conn.execute("UPDATE ev SET g = 'b', at = '2024-05-01 10:45' WHERE k = 3")
    assert wire(conn, "SELECT * FROM ev_last")[1] == [
        ("a", "1", "2024-05-01 10:00:00"),
        ("b", "3", "2024-05-01 10:45:00"),
        (None, "4", "2024-05-01 09:00:00"),
    ]
    assert wire(conn, "SELECT * FROM ev_prev")[1] == [
        ("1", None, "2"),
        ("2", None, "2"),
        ("3", "2024-05-01 10:30:00", "3"),
        ("4", None, "1"),
    ]
    assert wire(conn, "SELECT * FROM ev_both")[1] == [("b",)]


def test_errors_carry_postgresql_sqlstates(conn: psycopg.Connection) -> None:
    for sql, state in (
        ("SELECT 1, 2 EXCEPT SELECT 1", "42601"),
        ("SELECT DISTINCT ON (k) g FROM ev ORDER BY g", "42P10"),
        ("SELECT * FROM generate_series(1, 3, 0)", "22023"),
        ("SELECT sum(k) OVER (ORDER BY k GROUPS 1 PRECEDING) FROM ev", "0A000"),
    ):
        with pytest.raises(psycopg.Error) as info:
            conn.execute(sql)
        assert info.value.sqlstate == state, sql
