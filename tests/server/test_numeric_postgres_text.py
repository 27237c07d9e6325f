"""Issue 14's NUMERIC with per-value display scales, checked as PostgreSQL 15 prints it: the text
psycopg receives (numeric loaded as the raw text the server sent), the binary form, batch
queries and materialized views (incremental sum / avg / min / max retracting values of different
scales, MV on MV, a restart).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from pgwire_helpers import start_server
from psycopg.adapt import Loader

from piestream.server.pgwire import PgServer


class RawText(Loader):
    """numeric as the exact text on the wire (psycopg's Decimal would hide '1.50' vs '1.5'
    behind equality, and print small values with an exponent)."""

    def load(self, data: bytes) -> str:
        return bytes(data).decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    srv = start_server(tmp_path_factory.mktemp("pgwire"))
    yield srv
    srv.stop()


@pytest.fixture
def conn(server: PgServer) -> Iterator[psycopg.Connection]:
    with psycopg.connect(f"host=127.0.0.1 port={server.port} user=root dbname=dev", autocommit=True) as c:
        c.adapters.register_loader("numeric", RawText)
        yield c


def rows(conn: psycopg.Connection, sql: str) -> list[tuple[object, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall() if cur.description else []


def settle(conn: psycopg.Connection, sql: str, expected: list[tuple[object, ...]]) -> None:
    """An MV's rows once its epoch is committed (FLUSH waits for it)."""
    rows(conn, "FLUSH")
    deadline = time.monotonic() + 20
    got = rows(conn, sql)
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        got = rows(conn, sql)
    assert got == expected


def test_a_plain_numeric_column_keeps_each_values_scale(conn: psycopg.Connection) -> None:
    rows(conn, "CREATE TABLE cs (k int, x numeric, p numeric(8,3))")
    rows(conn, "INSERT INTO cs VALUES (1, '1.50', 2.5), (2, '1.500', 1), (3, 1.5, 0.0005), (4, '-0.0', 0)")
    assert rows(conn, "SELECT k, x, p FROM cs ORDER BY k") == [
        (1, "1.50", "2.500"),
        (2, "1.500", "1.000"),
        (3, "1.5", "0.001"),
        (4, "0.0", "0.000"),
    ]
    # equal values group, deduplicate and join as one, whatever their scales
    assert rows(conn, "SELECT count(*), count(DISTINCT x) FROM cs WHERE x = 1.5") == [(3, 1)]
    assert rows(conn, "SELECT count(*) FROM (SELECT x FROM cs GROUP BY x) g") == [(2,)]
    assert rows(conn, "SELECT count(*) FROM cs a JOIN cs b ON a.x = b.x") == [(10,)]
    assert rows(conn, "SELECT count(*) FROM (SELECT DISTINCT x FROM cs) d") == [(2,)]


def test_division_and_avg_use_select_div_scale(conn: psycopg.Connection) -> None:
    assert rows(conn, "SELECT 2703/7.0, 1/3.0, 10/4.0, 1.000/3") == [
        ("386.1428571428571429", "0.33333333333333333333", "2.5000000000000000", "0.33333333333333333333")
    ]
    assert rows(conn, "SELECT avg(v) FROM (VALUES (6221), (6222)) t(v)") == [("6221.5000000000000000",)]
    assert rows(conn, "SELECT avg(v), sum(v) FROM (VALUES (1.50), (1.5), (2.125)) t(v)") == [
        ("1.7083333333333333", "5.125")
    ]
    assert rows(
        conn, "SELECT var_samp(v), stddev_samp(v), variance(v::numeric) FROM (VALUES (1), (2), (4)) t(v)"
    ) == [("2.3333333333333333", "1.5275252316519467", "2.3333333333333333")]
    assert rows(conn, "SELECT var_pop(v), stddev(v) FROM (VALUES (1.0), (1.0), ('NaN')) t(v)") == [
        ("NaN", "NaN")
    ]


def test_round_trunc_and_casts(conn: psycopg.Connection) -> None:
    assert rows(
        conn, "SELECT round(41912.964, 4), round(1.555, 2), trunc(1.5555, 2), round(-2.5), ceil(1.20)"
    ) == [("41912.9640", "1.56", "1.55", "-3", "2")]
    assert rows(conn, "SELECT 1.50::int, 2.5::int, (-2.5)::int, 1.50::float8, 0.1::float8::numeric") == [
        (2, 3, -3, 1.5, "0.1")
    ]
    assert rows(conn, "SELECT 1.50::text, '0.0100'::numeric, 7::numeric, 1.50 * 2, 1.5 + 2.25") == [
        ("1.50", "0.0100", "7", "3.00", "3.75")
    ]


def test_nan_and_infinity_are_values(conn: psycopg.Connection) -> None:
    assert rows(conn, "SELECT 'NaN'::numeric, 'infinity'::numeric, '-Infinity'::numeric") == [
        ("NaN", "Infinity", "-Infinity")
    ]
    ordered = (
        "SELECT v FROM (VALUES ('NaN'::numeric), (1), ('Infinity'), ('-Infinity'), (0.5)) t(v) ORDER BY v"
    )
    assert rows(conn, ordered) == [("-Infinity",), ("0.5",), ("1",), ("Infinity",), ("NaN",)]
    assert rows(conn, "SELECT 'NaN'::numeric = 'NaN'::numeric, 'NaN'::numeric > 'Infinity'::numeric") == [
        (True, True)
    ]
    assert rows(
        conn,
        "SELECT 'Infinity'::numeric + 1, 'Infinity'::numeric - 'Infinity'::numeric, 1 / 'Infinity'::numeric",
    ) == [("Infinity", "NaN", "0")]


def test_binary_results_keep_the_scale(server: PgServer) -> None:
    dsn = f"host=127.0.0.1 port={server.port} user=root dbname=dev"
    with psycopg.connect(dsn, autocommit=True) as c, c.cursor(binary=True) as cur:
        cur.execute("SELECT 1.50::numeric, 'NaN'::numeric, 2703/7.0, -0.001")
        got = cur.fetchone()
    assert got is not None
    assert [str(v) for v in got] == ["1.50", "NaN", "386.1428571428571429", "-0.001"]
    assert isinstance(got[0], Decimal)


def test_materialized_views_retract_values_of_different_scales(conn: psycopg.Connection) -> None:
    rows(conn, "CREATE TABLE mt (k int, x numeric)")
    rows(
        conn, "INSERT INTO mt VALUES (1, '1.50'), (1, '0.5'), (2, '1.250'), (2, '-0.10'), (3, 'NaN'), (3, 7)"
    )
    rows(
        conn,
        "CREATE MATERIALIZED VIEW mv AS SELECT k, sum(x) AS s, avg(x) AS a, min(x) AS lo, max(x) AS hi "
        "FROM mt GROUP BY k",
    )
    rows(conn, "CREATE MATERIALIZED VIEW mv2 AS SELECT sum(s) AS ss, max(hi) AS m FROM mv WHERE k < 3")
    q = "SELECT * FROM mv ORDER BY k"
    settle(
        conn,
        q,
        [
            (1, "2.00", "1.00000000000000000000", "0.5", "1.50"),
            (2, "1.150", "0.57500000000000000000", "-0.10", "1.250"),
            (3, "NaN", "NaN", "7", "NaN"),
        ],
    )
    settle(conn, "SELECT * FROM mv2", [("3.150", "1.50")])
    rows(conn, "INSERT INTO mt VALUES (1, 2.125)")
    settle(conn, "SELECT k, s, hi FROM mv WHERE k = 1", [(1, "4.125", "2.125")])
    # the last value of scale 3 leaves: the sum's scale comes back down to 2; NaN leaves too
    rows(conn, "DELETE FROM mt WHERE x = 2.125 OR x = 'NaN' OR x = -0.1")
    settle(
        conn,
        q,
        [
            (1, "2.00", "1.00000000000000000000", "0.5", "1.50"),
            (2, "1.250", "1.25000000000000000000", "1.250", "1.250"),
            (3, "7", "7.0000000000000000", "7", "7"),
        ],
    )
    settle(conn, "SELECT * FROM mv2", [("3.250", "1.50")])
    # the batch query agrees with the MV
    assert rows(conn, "SELECT k, sum(x), avg(x) FROM mt GROUP BY k ORDER BY k") == [
        (k, s, a) for k, s, a, _, _ in rows(conn, q)
    ]


def test_values_keep_their_scale_across_a_restart(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.adapters.register_loader("numeric", RawText)
            rows(c, "CREATE TABLE r (k int, x numeric)")
            rows(c, "INSERT INTO r VALUES (1, '1.50'), (1, '2.250'), (2, 'Infinity')")
            rows(c, "CREATE MATERIALIZED VIEW rm AS SELECT k, sum(x) AS s, max(x) AS m FROM r GROUP BY k")
            settle(c, "SELECT * FROM rm ORDER BY k", [(1, "3.750", "2.250"), (2, "Infinity", "Infinity")])
    finally:
        srv.stop()
    srv = start_server(tmp_path)
    dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.adapters.register_loader("numeric", RawText)
            assert rows(c, "SELECT * FROM r ORDER BY k, x") == [(1, "1.50"), (1, "2.250"), (2, "Infinity")]
            rows(c, "DELETE FROM r WHERE x = 2.25")
            settle(c, "SELECT * FROM rm ORDER BY k", [(1, "1.50", "1.50"), (2, "Infinity", "Infinity")])
    finally:
        srv.stop()


def test_streaming_joins_distinct_and_top_n_treat_scales_as_one_value(conn: psycopg.Connection) -> None:
    rows(conn, "CREATE TABLE ja (k numeric, v int)")
    rows(conn, "CREATE TABLE jb (k numeric, w int)")
    rows(conn, "INSERT INTO ja VALUES (1.5, 1), (2, 2), ('NaN', 3)")
    rows(conn, "INSERT INTO jb VALUES (1.50, 10), (2.000, 20), ('NaN', 30), (3, 40)")
    rows(
        conn,
        "CREATE MATERIALIZED VIEW jj AS SELECT ja.k AS ak, jb.k AS bk, v, w FROM ja JOIN jb ON ja.k = jb.k",
    )
    rows(conn, "CREATE MATERIALIZED VIEW jd AS SELECT DISTINCT k FROM jb")
    rows(conn, "CREATE MATERIALIZED VIEW jt AS SELECT k, w FROM jb ORDER BY k DESC LIMIT 2")
    settle(
        conn,
        "SELECT * FROM jj ORDER BY v",
        [("1.5", "1.50", 1, 10), ("2", "2.000", 2, 20), ("NaN", "NaN", 3, 30)],
    )
    settle(conn, "SELECT * FROM jt ORDER BY w", [("NaN", 30), ("3", 40)])  # NaN is the largest
    rows(conn, "INSERT INTO jb VALUES (1.5000, 11)")
    rows(conn, "DELETE FROM jb WHERE k = 'NaN'")
    settle(
        conn,
        "SELECT * FROM jj ORDER BY v, w",
        [("1.5", "1.50", 1, 10), ("1.5", "1.5000", 1, 11), ("2", "2.000", 2, 20)],
    )
    settle(conn, "SELECT * FROM jd ORDER BY k", [("1.50",), ("2.000",), ("3",)])  # the first one seen
    settle(conn, "SELECT * FROM jt ORDER BY w", [("2.000", 20), ("3", 40)])
