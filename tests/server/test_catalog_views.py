"""pg_catalog emulation details that clients rely on."""

from __future__ import annotations

import psycopg
import pytest
import sqlglot

from piestream.server.catalog import is_catalog_query, looks_like_catalog
from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module")
def conn(server: PgServer, dsn: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(
        "CREATE TABLE nested (id INT PRIMARY KEY, tags VARCHAR[], point STRUCT<x INT, y INT>, doc JSONB)"
    )
    yield c
    c.close()


def test_routing() -> None:
    user = {"t"}.__contains__
    assert is_catalog_query(sqlglot.parse_one("SELECT * FROM pg_catalog.pg_class"), user)
    assert is_catalog_query(sqlglot.parse_one("SELECT relname FROM pg_class"), user)
    assert is_catalog_query(sqlglot.parse_one("SELECT version()", read="postgres"), user)
    assert not is_catalog_query(sqlglot.parse_one("SELECT * FROM t"), user)
    assert not is_catalog_query(sqlglot.parse_one("SELECT 1"), user)
    assert not is_catalog_query(sqlglot.parse_one("SELECT * FROM t JOIN pg_class ON true"), user)
    assert looks_like_catalog(
        "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname OPERATOR(pg_catalog.~) 'x'"
    )


def test_format_type_and_information_schema(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull "
        "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
        "WHERE c.relname = %s AND a.attnum > 0 ORDER BY a.attnum",
        ("nested",),
    ).fetchall()
    assert rows == [
        ("id", "integer", True),
        ("tags", "character varying[]", False),
        ("point", "struct<x integer, y integer>", False),
        ("doc", "jsonb", False),
    ]
    cols = conn.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = 'nested' ORDER BY ordinal_position"
    ).fetchall()
    assert cols[0] == ("id", "integer", "NO") and cols[1][1] == "ARRAY"
    tables = conn.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'public'"
    ).fetchall()
    assert ("nested", "BASE TABLE") in tables


def test_regclass_and_settings(conn: psycopg.Connection) -> None:
    oid = conn.execute("SELECT 'nested'::regclass::oid").fetchone()
    assert oid is not None and oid[0] > 16384
    assert conn.execute("SELECT %s::oid::regclass::text", (oid[0],)).fetchone() == ("nested",)
    assert conn.execute("SELECT current_setting('timezone')").fetchone() == ("UTC",)
    assert conn.execute("SELECT setting FROM pg_settings WHERE name = 'server_version'").fetchone() == (
        "13.14.0",
    )
    me = conn.execute("SELECT usename, state FROM pg_stat_activity WHERE pid = pg_backend_pid()").fetchone()
    assert me == ("root", "active")


def test_catalog_query_the_emulation_cannot_run_is_refused(conn: psycopg.Connection) -> None:
    """A catalog query the emulation cannot answer is 0A000, never "no rows" (which clients
    read as "no primary key", "no index")."""
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="catalog emulation"):
        conn.execute("SELECT no_such_column FROM pg_catalog.pg_class")
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute("SELECT relname, unnest(reloptions) FROM pg_catalog.pg_class GROUP BY relname")
    # psql's \d extended-statistics query (unnest in FROM, string_agg): none here
    cur = conn.execute(
        "SELECT stxname, (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(attname), ', ') "
        "FROM pg_catalog.unnest(stxkeys) s(attnum) JOIN pg_catalog.pg_attribute a "
        "ON (stxrelid = a.attrelid AND a.attnum = s.attnum AND NOT attisdropped)) AS columns "
        "FROM pg_catalog.pg_statistic_ext WHERE stxrelid = 'nested'::regclass"
    )
    assert cur.fetchall() == [] and [d.name for d in cur.description] == ["stxname", "columns"]


def test_operator_spelled_comparison_with_any(conn: psycopg.Connection) -> None:
    """pg_dump -t's ``relkind OPERATOR(pg_catalog.=) ANY (array[...])`` matches as ``=`` does
    (it matched nothing, so pg_dump found no table)."""
    conn.execute("CREATE MATERIALIZED VIEW nested_mv AS SELECT id FROM nested")
    sql = (
        "SELECT c.relname, c.relkind FROM pg_catalog.pg_class c WHERE c.relname LIKE 'nested%%' "
        "AND c.relkind OPERATOR(pg_catalog.=) ANY (array['r', 'v', 'm']) ORDER BY 1"
    )
    assert conn.execute(sql).fetchall() == [("nested", "r"), ("nested_mv", "m")]
    negated = sql.replace("OPERATOR(pg_catalog.=) ANY", "OPERATOR(pg_catalog.<>) ALL")
    # the pk index is the one nested% relation of another kind (this matched nothing before: SOME
    # and ALL after OPERATOR(...) parse as functions, which SQLite lacked)
    assert conn.execute(negated).fetchall() == [("nested_pkey", "i")]
    some = sql.replace("OPERATOR(pg_catalog.=) ANY", "OPERATOR(pg_catalog.=) SOME")
    assert conn.execute(some).fetchall() == [("nested", "r"), ("nested_mv", "m")]
