"""The catalog queries real clients send, as golden cases through psycopg, and the clients
themselves (SQLAlchemy's inspector, psql's ``\\d`` / ``\\sv``) against one server.

Expected values are what PostgreSQL 15 answers for the same objects (set-returning functions in a
select list run in lockstep, NULL-padded; ``'pg_proc'::regclass`` is oid 1255; ...).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, inspect
from sqlalchemy.types import INTEGER, VARCHAR
from test_psql import psql

from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module")
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(
        "CREATE TABLE acct (id INT, region VARCHAR, owner VARCHAR, balance NUMERIC, PRIMARY KEY (region, id))"
    )
    c.execute("CREATE INDEX acct_owner ON acct (owner DESC) INCLUDE (balance)")
    c.execute("CREATE SCHEMA side")
    c.execute("CREATE TABLE side.t (a INT PRIMARY KEY, b VARCHAR)")
    c.execute("CREATE VIEW owners AS SELECT owner FROM acct")
    c.execute("CREATE MATERIALIZED VIEW rich AS SELECT owner, balance FROM acct WHERE balance > 50")
    yield c
    c.close()


@pytest.fixture(scope="module")
def engine(server: PgServer, conn: psycopg.Connection) -> Iterator[Engine]:
    eng = create_engine(f"postgresql+psycopg://root@127.0.0.1:{server.port}/dev")
    yield eng
    eng.dispose()


def test_set_returning_functions_in_a_select_list_run_in_lockstep(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT c.relname, unnest(i.indkey) AS attnum, unnest(i.indclass) AS opclass, "
        "generate_subscripts(i.indkey, 1) AS ord FROM pg_catalog.pg_index i "
        "JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'acct'::regclass "
        "ORDER BY 1, 4"
    ).fetchall()
    # acct's columns: id 1, region 2, owner 3, balance 4; the pk's key order is (region, id); the
    # index stores owner, then balance and the pk columns; indclass has one entry per key column
    assert rows == [
        ("acct_owner", 3, 0, 1),
        ("acct_owner", 4, None, 2),
        ("acct_owner", 2, None, 3),
        ("acct_owner", 1, None, 4),
        ("acct_pkey", 2, 0, 1),
        ("acct_pkey", 1, 0, 2),
    ]
    # generate_subscripts of another dimension has no rows; unnest(NULL) neither
    assert conn.execute("SELECT generate_subscripts(indkey, 2) FROM pg_catalog.pg_index").fetchall() == []
    assert conn.execute("SELECT relname, unnest(reloptions) FROM pg_catalog.pg_class").fetchall() == []
    assert conn.execute("SELECT unnest(ARRAY['a', 'b']) AS x FROM pg_catalog.pg_database").fetchall() == [
        ("a",),
        ("b",),
    ]


def test_unnest_in_from_and_ordered_array_agg(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT u.attnum, u.n FROM pg_catalog.pg_index i, unnest(i.indkey) WITH ORDINALITY AS u(attnum, n) "
        "WHERE i.indexrelid = 'acct_pkey'::regclass ORDER BY u.n"
    ).fetchall()
    assert rows == [(2, 1), (1, 2)]
    # SQLAlchemy's pk query: the key's column names in key order (an array, not text)
    cols = conn.execute(
        "SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_catalog.pg_attribute a JOIN "
        "(SELECT i.indrelid, unnest(i.indkey) AS attnum, generate_subscripts(i.indkey, 1) AS ord "
        "FROM pg_catalog.pg_index i WHERE i.indisprimary) AS k "
        "ON a.attrelid = k.indrelid AND a.attnum = k.attnum WHERE k.indrelid = 'acct'::regclass"
    ).fetchone()
    assert cols == (["region", "id"],)


def test_catalog_oids_regtype_arrays_and_array_remove(conn: psycopg.Connection) -> None:
    assert conn.execute("SELECT 'pg_proc'::regclass::oid, 'pg_class'::regclass::oid").fetchone() == (
        1255,
        1259,
    )
    assert conn.execute("SELECT 'pg_catalog.pg_type'::regclass::text").fetchone() == ("pg_type",)
    side = conn.execute("SELECT relname FROM pg_catalog.pg_class WHERE relnamespace = 'side'::regnamespace")
    assert side.fetchall() == [("t",), ("t_pkey",)]
    ext = conn.execute("SELECT x.tableoid FROM pg_catalog.pg_namespace x LIMIT 1").fetchone()
    assert ext == (2615,)
    # pgcli's completion queries cast oid arrays to regtype[]
    assert conn.execute("SELECT '{23,25}'::regtype[]").fetchone() == (["integer", "text"],)
    assert conn.execute("SELECT '{23,1043}'::oidvector::pg_catalog.regtype[] AS t").fetchone() == (
        ["integer", "character varying"],
    )
    # psql \sv: array_remove over a NULL reloptions is NULL (the row is still there)
    rows = conn.execute(
        "SELECT c.relname, pg_catalog.array_remove(pg_catalog.array_remove(c.reloptions, "
        "'check_option=local'), 'check_option=cascaded') FROM pg_catalog.pg_class c "
        "WHERE c.oid = 'owners'::regclass"
    ).fetchall()
    assert rows == [("owners", None)]
    assert conn.execute(
        "SELECT array_remove('{a,b,a}'::text[], 'a') FROM pg_catalog.pg_database"
    ).fetchone() == ("{b}",)


def test_sqlalchemy_reflects_keys_indexes_and_schemas(engine: Engine) -> None:
    ins = inspect(engine)
    assert ins.get_pk_constraint("acct") == {
        "constrained_columns": ["region", "id"],
        "name": "acct_pkey",
        "comment": None,
        "dialect_options": {"postgresql_include": []},
    }
    (index,) = ins.get_indexes("acct")
    assert index["name"] == "acct_owner" and index["column_names"] == ["owner"]
    assert index["unique"] is False and index.get("column_sorting") == {"owner": ("desc",)}
    assert index["dialect_options"] == {"postgresql_include": ["balance", "region", "id"]}
    assert ins.get_table_names(schema="side") == ["t"]
    assert ins.get_pk_constraint("t", schema="side")["constrained_columns"] == ["a"]
    cols = ins.get_columns("t", schema="side")
    assert [c["name"] for c in cols] == ["a", "b"]
    assert isinstance(cols[0]["type"], INTEGER) and isinstance(cols[1]["type"], VARCHAR)
    assert ins.get_indexes("rich") == [] and ins.get_unique_constraints("acct") == []
    assert ins.get_foreign_keys("acct") == [] and ins.get_check_constraints("acct") == []


def test_psql_describe_index_and_show_view(server: PgServer, conn: psycopg.Connection) -> None:
    out = psql(server, "-c", r"\d acct").stdout
    assert '"acct_pkey" PRIMARY KEY, btree (region, id)' in out
    assert '"acct_owner" btree (owner DESC) INCLUDE (balance, region, id)' in out
    index = psql(server, "-c", r"\d acct_owner").stdout
    assert 'Index "public.acct_owner"' in index and 'btree, for table "public.acct"' in index
    assert " owner   | character varying | yes  | owner" in index
    assert psql(server, "-c", r"\sv owners").stdout.splitlines() == [
        "CREATE OR REPLACE VIEW public.owners AS",
        " SELECT owner FROM acct",
    ]
    assert 'Table "side.t"' in psql(server, "-c", r"\d side.t").stdout
    # pg_get_indexdef's form is one piestream itself takes back
    conn.execute("CREATE INDEX acct_balance ON public.acct USING btree (balance)")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="USING other than btree"):
        conn.execute("CREATE INDEX acct_h ON acct USING hash (balance)")


def test_pgcli_completion_queries(server: PgServer, conn: psycopg.Connection) -> None:
    """pgcli's own PGExecute runs the queries its completer is built from."""
    from pgcli.pgexecute import PGExecute

    ex = PGExecute(database="dev", user="root", password="", host="127.0.0.1", port=server.port, dsn="")
    try:
        assert {"public", "side"} <= set(ex.schemata())
        tables = set(ex.tables())
        assert {("public", "acct"), ("side", "t")} <= tables
        assert {("public", "owners"), ("public", "rich")} <= set(ex.views())  # pgcli lists MVs as views
        columns = {(s, t, c, ty) for s, t, c, ty, *_ in ex.table_columns()}
        assert ("public", "acct", "region", "character varying") in columns
        assert ("side", "t", "a", "integer") in columns
        assert ("public", "rich", "balance", "numeric") in {tuple(r[:4]) for r in ex.view_columns()}
        assert list(ex.functions()) == [] and list(ex.datatypes()) == []
        assert list(ex.databases()) == ["dev"]
        # its foreign-key query correlates an unnest inside a FROM subquery: refused, not "none"
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            list(ex.foreignkeys())
    finally:
        ex.conn.close()
