"""The real psql (Debian's postgresql-client) against the server: meta-commands, -c, -f, errors."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from piestream.server.pgwire import PgServer


def psql(server: PgServer, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGCONNECT_TIMEOUT": "5", "PAGER": "", "PSQLRC": "/dev/null", "LC_ALL": "C.UTF-8"}
    cmd = ["psql", "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", "root", "-d", "dev", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    if check:
        assert res.returncode == 0, res.stderr
    return res


@pytest.fixture(scope="module", autouse=True)
def _objects(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer VARCHAR, amount NUMERIC, at TIMESTAMP)"
        )
        c.execute("CREATE TABLE events (payload VARCHAR)")
        c.execute("INSERT INTO orders VALUES (1, 'ann', 10.5, '2024-05-01 10:00:00'), (2, 'bob', 3, NULL)")
        c.execute(
            "CREATE MATERIALIZED VIEW totals AS "
            "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer"
        )
        c.execute("CREATE VIEW big AS SELECT id FROM orders WHERE amount > 5")


def test_list_tables_views_and_mvs(server: PgServer) -> None:
    out = psql(server, "-c", r"\dt").stdout
    assert "List of relations" in out and "orders" in out and "events" in out and "totals" not in out
    assert "(2 rows)" in out
    assert "totals" in psql(server, "-c", r"\dm").stdout
    assert " big " in psql(server, "-c", r"\dv").stdout
    everything = psql(server, "-c", r"\d").stdout
    assert all(name in everything for name in ("orders", "events", "totals", "big"))


def test_describe_table(server: PgServer) -> None:
    out = psql(server, "-c", r"\d orders").stdout
    assert 'Table "public.orders"' in out
    assert "bigint" in out and "character varying" in out and "numeric" in out
    assert "timestamp without time zone" in out
    assert "not null" in out  # the primary key column
    assert '"orders_pkey" PRIMARY KEY, btree (id)' in out
    plus = psql(server, "-c", r"\d+ totals").stdout
    assert 'Materialized view "public.totals"' in plus and "View definition:" in plus
    assert "sum(amount)" in plus
    missing = psql(server, "-c", r"\d nope", check=False)
    assert "Did not find any relation named" in missing.stderr


def test_list_databases(server: PgServer) -> None:
    out = psql(server, "-c", r"\l").stdout
    assert "List of databases" in out and "dev" in out and "UTF8" in out


def test_query_error_and_scripts(server: PgServer, tmp_path: Path) -> None:
    out = psql(server, "-c", "SELECT customer, total FROM totals ORDER BY customer").stdout
    assert "ann      |  10.5" in out and "(2 rows)" in out
    err = psql(server, "-c", "SELECT * FROM nope", check=False)
    assert err.returncode != 0
    assert 'ERROR:  relation "nope" does not exist' in err.stderr
    assert "LINE 1: SELECT * FROM nope" in err.stderr and "^" in err.stderr  # the caret from the position
    script = tmp_path / "script.sql"
    script.write_text(
        "CREATE TABLE s (k INT PRIMARY KEY, v VARCHAR);\n"
        "INSERT INTO s VALUES (1, 'one'), (2, 'two');\n"
        "SELECT v FROM s WHERE k = 2;\n"
        "\\d s\n"
    )
    out = psql(server, "-v", "ON_ERROR_STOP=1", "-f", str(script)).stdout
    assert "CREATE TABLE" in out and "INSERT 0 2" in out and " two" in out and 'Table "public.s"' in out
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT 1;\nSELECT 1/0;\nSELECT 2;\n")
    res = psql(server, "-v", "ON_ERROR_STOP=1", "-f", str(bad), check=False)
    assert res.returncode == 3 and "division by zero" in res.stderr


def test_numeric_display_scales_as_postgresql_prints_them(server: PgServer) -> None:
    """Nexmark q1's ``0.908 * price`` over a bigint, round(x, 4) and sum keep PostgreSQL's display
    scale: the exact lines psql prints, from an MV and from the same batch query."""
    psql(server, "-c", "CREATE TABLE nbid (auction bigint, price bigint)")
    psql(server, "-c", "INSERT INTO nbid VALUES (1, 1940), (2, 38103)")
    query = "SELECT auction, 0.908 * price AS price, round(price * 1.1, 4) AS r FROM nbid"
    psql(server, "-c", f"CREATE MATERIALIZED VIEW nq1 AS {query}")
    psql(server, "-c", "FLUSH")
    expected = ["1|1761.520|2134.0000", "2|34597.524|41913.3000"]
    for sql in (f"{query} ORDER BY auction", "SELECT * FROM nq1 ORDER BY auction"):
        assert psql(server, "-A", "-t", "-c", sql).stdout.splitlines() == expected, sql
    out = psql(
        server, "-A", "-t", "-c", "SELECT round(41912.964, 4), sum(0.908 * price), '1.50'::numeric FROM nbid"
    )
    assert out.stdout.splitlines() == ["41912.9640|36359.044|1.50"]


def test_numeric_typmods_round_and_show(server: PgServer) -> None:
    """numeric(p, s) columns: values are rounded half away from zero to s digits on the way in
    (the text psql prints is PostgreSQL's), \\d spells the typmod, too many digits is 22003."""
    psql(server, "-c", "CREATE TABLE prices (id int, p numeric(6,2), q numeric(4,1)[])")
    psql(server, "-c", "INSERT INTO prices VALUES (1, 1.055, ARRAY[2.25, -0.05]), (2, '-3.14159', NULL)")
    out = psql(server, "-A", "-t", "-c", "SELECT id, p, q, p::numeric(3,1) FROM prices ORDER BY id").stdout
    assert out.splitlines() == ["1|1.06|{2.3,-0.1}|1.1", "2|-3.14||-3.1"]
    psql(server, "-c", "INSERT INTO prices VALUES (5, 2.5, ARRAY[1, 0]), (6, 0, NULL)")
    sql = "SELECT p, q, p::text, (SELECT max(p) FROM prices) FROM prices WHERE id > 4 ORDER BY id"
    out = psql(server, "-A", "-t", "-c", sql).stdout
    assert out.splitlines() == ["2.50|{1.0,0.0}|2.50|2.50", "0.00||0.00|2.50"]  # each value keeps its scale
    desc = psql(server, "-c", r"\d prices").stdout
    assert "numeric(6,2)" in desc and "numeric(4,1)[]" in desc
    err = psql(server, "-c", "INSERT INTO prices VALUES (3, 10000, NULL)", check=False)
    assert err.returncode != 0 and "numeric field overflow" in err.stderr
    assert "A field with precision 6, scale 2 must round to an absolute value less than 10^4." in err.stderr
