"""Schemas and DDL in transaction blocks, as real clients use them: psycopg with autocommit off
(a block before every statement), pandas `to_sql` through SQLAlchemy, psql's meta-commands."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pandas as pd
import psycopg
import pytest
from sqlalchemy import create_engine

from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module")
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    c = psycopg.connect(dsn, autocommit=True)
    yield c
    c.close()


def _state(fn: object, sql: str) -> tuple[str | None, str]:
    try:
        fn(sql)  # type: ignore[operator]
    except psycopg.Error as e:
        return e.sqlstate, e.diag.message_primary or ""
    return None, ""


def test_qualified_names_resolve_in_their_schema(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE public.qt (a INT)")
    conn.execute("INSERT INTO public.qt VALUES (1)")
    conn.execute('CREATE MATERIALIZED VIEW "public"."qm" AS SELECT a FROM dev.public.qt')
    conn.execute("CREATE SCHEMA qs")
    conn.execute("CREATE TABLE qs.qt (b VARCHAR)")
    conn.execute("INSERT INTO dev.qs.qt VALUES ('x')")
    conn.execute("FLUSH")
    assert conn.execute("SELECT * FROM qt").fetchall() == [(1,)]  # search_path: "$user", public
    assert conn.execute("SELECT * FROM qs.qt").fetchall() == [("x",)]
    assert conn.execute("SELECT qs.qt.b FROM qs.qt").fetchall() == [("x",)]
    assert conn.execute('SELECT a FROM "public".qm').fetchall() == [(1,)]
    names = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relname IN ('qt', 'qm') ORDER BY 1, 2"
    ).fetchall()
    assert names == [("public", "qm"), ("public", "qt"), ("qs", "qt")]  # no table named "public.qt"
    assert _state(conn.execute, "SELECT * FROM otherdb.public.qt") == (
        "0A000",
        'cross-database references are not implemented: "otherdb.public.qt"',
    )
    assert _state(conn.execute, "CREATE TABLE nope.t (a INT)") == ("3F000", 'schema "nope" does not exist')
    assert _state(conn.execute, "SELECT * FROM nope.t") == ("42P01", 'relation "nope.t" does not exist')
    assert _state(conn.execute, "CREATE SCHEMA qs") == ("42P06", 'schema "qs" already exists')
    shown = [r[0] for r in conn.execute("SHOW SCHEMAS").fetchall()]
    assert shown == ["information_schema", "pg_catalog", "public", "qs", "rw_catalog"]
    assert conn.execute("SHOW TABLES FROM qs").fetchall() == [("qt",)]

    conn.execute("SET search_path TO qs, public")
    assert conn.execute("SHOW search_path").fetchone() == ("qs, public",)
    assert conn.execute("SELECT current_schema()").fetchone() == ("qs",)
    assert conn.execute("SELECT * FROM qt").fetchall() == [("x",)]  # qs first now
    conn.execute("CREATE VIEW qv AS SELECT b FROM qt")  # in qs, over qs.qt
    conn.execute("SET search_path TO public")
    assert conn.execute("SELECT * FROM qs.qv").fetchall() == [("x",)]  # still qs.qt's rows
    assert _state(conn.execute, "SELECT * FROM qv")[0] == "42P01"

    assert _state(conn.execute, "DROP SCHEMA qs") == (
        "2BP01",
        "cannot drop schema qs because other objects depend on it",
    )
    conn.execute("DROP SCHEMA qs CASCADE")
    assert _state(conn.execute, "SELECT * FROM qs.qt")[0] == "42P01"
    assert conn.execute("SELECT * FROM public.qt").fetchall() == [(1,)]
    conn.execute("DROP MATERIALIZED VIEW public.qm")
    conn.execute("DROP TABLE public.qt")


def test_ddl_inside_blocks_with_autocommit_off(dsn: str, conn: psycopg.Connection) -> None:
    c = psycopg.connect(dsn)  # autocommit off: psycopg opens a block before the first statement
    try:
        c.execute("CREATE TABLE bt (k INT PRIMARY KEY, v INT)")
        c.execute("INSERT INTO bt VALUES (1, 10)")
        cur = c.execute("CREATE MATERIALIZED VIEW bm AS SELECT sum(v) AS s FROM bt")  # commits first
        assert cur.statusmessage == "CREATE MATERIALIZED VIEW"
        c.execute("INSERT INTO bt VALUES (2, 20)")
        c.execute("CREATE INDEX bi ON bt (v)")
        c.execute("CREATE VIEW bv AS SELECT k FROM bt")
        c.execute("INSERT INTO bt VALUES (3, 30)")
        c.rollback()  # only the insert after the last DDL goes
        c.execute("INSERT INTO bt VALUES (4, 40)")
        c.execute("DROP VIEW bv")
        c.execute("INSERT INTO bt VALUES (5, 50)")
        c.commit()
    finally:
        c.close()
    conn.execute("FLUSH")
    assert conn.execute("SELECT k FROM bt ORDER BY k").fetchall() == [(1,), (2,), (4,), (5,)]
    assert conn.execute("SELECT s FROM bm").fetchone() == (120,)
    assert _state(conn.execute, "SELECT * FROM bv")[0] == "42P01"
    conn.execute("DROP TABLE bt CASCADE")


def test_pandas_to_sql_replace_in_schema_public(server: PgServer) -> None:
    eng = create_engine(f"postgresql+psycopg://root@127.0.0.1:{server.port}/dev")
    try:
        df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
        df.to_sql("pd_s", eng, schema="public", index=False)
        df.head(2).to_sql("pd_s", eng, schema="public", if_exists="replace", index=False)
        df.tail(1).to_sql("pd_s", eng, schema="public", if_exists="append", index=False)
        with eng.connect() as c:
            back = pd.read_sql("SELECT a, b FROM public.pd_s ORDER BY a", c)
        assert back.to_dict("list") == {"a": [1, 2, 3], "b": ["x", "y", "z"]}
        with eng.connect() as c:
            names = pd.read_sql("SELECT relname FROM pg_class WHERE relname LIKE 'p%%s'", c)
        assert names["relname"].tolist() == ["pd_s"]  # not "public.pd_s"
        # index=True: CREATE TABLE, then CREATE INDEX on it, then the rows, in one block
        df.to_sql("pd_i", eng, schema="public", if_exists="replace")
        df.to_sql("pd_i", eng, schema="public", if_exists="replace")
        with eng.connect() as c:
            back = pd.read_sql('SELECT "index", a FROM public.pd_i ORDER BY a', c)
            indexes = pd.read_sql("SELECT indexname FROM pg_indexes WHERE tablename = 'pd_i'", c)
        assert back.to_dict("list") == {"index": [0, 1, 2], "a": [1, 2, 3]}
        assert indexes["indexname"].tolist() == ["ix_public_pd_i_index"]
    finally:
        eng.dispose()


def test_psql_shows_schemas(server: PgServer, conn: psycopg.Connection) -> None:
    conn.execute("CREATE SCHEMA ps")
    conn.execute("CREATE TABLE ps.pt (id INT PRIMARY KEY, name VARCHAR)")
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(server.port), "PGUSER": "root"}

    def psql(cmd: str) -> str:
        out = subprocess.run(
            ["psql", "-X", "-d", "dev", "-At", "-c", cmd],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "ps|root" in psql("\\dn").splitlines()
    assert psql("\\dt ps.*").splitlines() == ["ps|pt|table|root"]
    assert "ps|pt|table|root" not in psql("\\dt")  # ps is not on search_path
    described = psql("\\d ps.pt")
    assert "id|integer" in described and "name|character varying" in described
    conn.execute("DROP SCHEMA ps CASCADE")


def test_command_tags_are_postgresql_s(conn: psycopg.Connection) -> None:
    statements = [
        "CREATE SCHEMA tg",
        "CREATE TABLE tg.t (a INT)",
        "INSERT INTO tg.t VALUES (1), (2)",
        "CREATE TABLE tg.c AS SELECT a, a + 1 AS b FROM tg.t",
        "CREATE MATERIALIZED VIEW tg.m AS SELECT count(*) AS n FROM tg.t",
        "CREATE VIEW tg.v AS SELECT a FROM tg.t",
        "CREATE INDEX ti ON tg.t (a)",
        "CREATE TABLE IF NOT EXISTS tg.t (a INT)",
        "DROP INDEX tg.ti",
        "DROP VIEW tg.v",
        "DROP MATERIALIZED VIEW tg.m",
        "DROP TABLE tg.c",
        "DROP SCHEMA tg CASCADE",
    ]
    assert [conn.execute(sql).statusmessage for sql in statements] == [
        "CREATE SCHEMA",
        "CREATE TABLE",
        "INSERT 0 2",
        "SELECT 2",
        "CREATE MATERIALIZED VIEW",
        "CREATE VIEW",
        "CREATE INDEX",
        "CREATE TABLE",
        "DROP INDEX",
        "DROP VIEW",
        "DROP MATERIALIZED VIEW",
        "DROP TABLE",
        "DROP SCHEMA",
    ]


def test_create_table_as_is_filled_once(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE cs (k INT PRIMARY KEY, v VARCHAR)")
    conn.execute("INSERT INTO cs VALUES (1, 'a'), (2, 'b')")
    cur = conn.execute("CREATE TABLE ct AS SELECT k, upper(v) AS u FROM cs WHERE k > 0")
    assert cur.statusmessage == "SELECT 2"
    assert conn.execute("CREATE TABLE IF NOT EXISTS ct AS SELECT 1 AS k").statusmessage == "CREATE TABLE AS"
    conn.execute("INSERT INTO cs VALUES (3, 'c')")  # not an MV: ct keeps what it was filled with
    conn.execute("INSERT INTO ct VALUES (7, 'Z')")  # and it is a table: it takes writes
    conn.execute("FLUSH")
    assert conn.execute("SELECT k, u FROM ct ORDER BY k").fetchall() == [(1, "A"), (2, "B"), (7, "Z")]
    cols = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'ct' ORDER BY 1"
    ).fetchall()
    assert cols == [("k", "integer"), ("u", "character varying")]
    # in a block (dbt's table materialization): the table and its rows land at COMMIT, or never
    c = psycopg.connect(dsn)
    try:
        c.execute("CREATE TABLE cb AS SELECT k FROM cs")
        assert c.execute("SELECT count(*) FROM cb").fetchone() == (3,)
        c.rollback()
        assert _state(c.execute, "SELECT * FROM cb")[0] == "42P01"
        c.rollback()
        c.execute("CREATE TABLE cb AS SELECT k FROM cs")
        c.commit()
    finally:
        c.close()
    assert conn.execute("SELECT count(*) FROM cb").fetchone() == (3,)
    conn.execute("DROP TABLE cb")
    conn.execute("DROP TABLE ct")
    conn.execute("DROP TABLE cs")


def test_temporary_tables_and_views_belong_to_their_session(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE tt (a INT)")  # a permanent table of the same name
    conn.execute("INSERT INTO tt VALUES (0)")
    c = psycopg.connect(dsn, autocommit=True)
    try:
        assert c.execute("CREATE TEMP TABLE tt (a INT)").statusmessage == "CREATE TABLE"
        c.execute("INSERT INTO tt VALUES (1)")  # the temporary one: pg_temp is searched first
        c.execute("CREATE TEMPORARY VIEW tv AS SELECT a + 1 AS b FROM tt")
        c.execute("CREATE VIEW tv2 AS SELECT a FROM tt")  # over a temporary table: temporary
        c.execute("FLUSH")
        assert c.execute("SELECT * FROM tt").fetchall() == [(1,)]
        assert c.execute("SELECT * FROM pg_temp.tt").fetchall() == [(1,)]
        assert c.execute("SELECT * FROM public.tt").fetchall() == [(0,)]
        assert c.execute("SELECT * FROM tv").fetchall() == [(2,)]
        assert c.execute("SELECT * FROM tv2").fetchall() == [(1,)]
        schema = c.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = 'tv2'"
        ).fetchone()
        assert schema is not None and schema[0].startswith("pg_temp_")
        assert _state(c.execute, "CREATE MATERIALIZED VIEW tm AS SELECT * FROM tt") == (
            "0A000",
            "materialized views must not use temporary tables or views",
        )
        assert _state(c.execute, "CREATE TEMP TABLE public.bad (a INT)") == (
            "42P16",
            "cannot create temporary relation in non-temporary schema",
        )
        # other sessions do not see them
        assert conn.execute("SELECT * FROM tt").fetchall() == [(0,)]
        assert _state(conn.execute, "SELECT * FROM tv")[0] == "42P01"
    finally:
        c.close()
    # gone at disconnect (the server drops them when the connection ends)
    for _ in range(100):
        left = conn.execute("SELECT count(*) FROM pg_class WHERE relname IN ('tt', 'tv', 'tv2')").fetchone()
        if left == (1,):
            break
        conn.execute("FLUSH")
    assert left == (1,)
    assert conn.execute("SELECT * FROM tt").fetchall() == [(0,)]
    conn.execute("DROP TABLE tt")
