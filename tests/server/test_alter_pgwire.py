"""ALTER TABLE / RENAME / DROP COLUMN / TRUNCATE / COMMENT ON over psycopg: command tags,
PostgreSQL's SQLSTATEs and texts, the pg catalog, COPY, transaction blocks, ownership."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module")
def conn(dsn: str) -> psycopg.Connection[Any]:
    c = psycopg.connect(dsn, autocommit=True)
    yield c
    c.close()


def _err(c: psycopg.Connection[Any], sql: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        c.execute(sql)
    return info.value


def test_tags_catalog_and_copy(conn: psycopg.Connection[Any]) -> None:
    c = conn
    c.execute("CREATE TABLE ev (k INT PRIMARY KEY, v VARCHAR)")
    c.execute("INSERT INTO ev VALUES (1, 'a'), (2, 'b')")
    c.execute("CREATE MATERIALIZED VIEW ev_mv AS SELECT * FROM ev")
    c.execute("CREATE VIEW ev_v AS SELECT *, 1 AS one FROM ev WHERE v <> 'zz'")
    cur = c.execute("ALTER TABLE ev ADD COLUMN n INT DEFAULT 7")
    assert cur.statusmessage == "ALTER TABLE"
    assert c.execute("SELECT * FROM ev ORDER BY k").fetchall() == [(1, "a", 7), (2, "b", 7)]
    assert c.execute("SELECT * FROM ev_mv ORDER BY k").fetchall() == [(1, "a"), (2, "b")]
    # a view's * is the columns its table had at CREATE VIEW (PostgreSQL expands it then)
    assert c.execute("SELECT * FROM ev_v ORDER BY k").fetchall() == [(1, "a", 1), (2, "b", 1)]
    with c.cursor().copy("COPY ev (k, v) FROM STDIN") as cp:
        cp.write("3\tc\n")
    c.execute("INSERT INTO ev (k, n) VALUES (4, NULL)")
    assert c.execute("SELECT k, n FROM ev ORDER BY k").fetchall() == [(1, 7), (2, 7), (3, 7), (4, None)]
    cols = c.execute(
        "SELECT column_name, data_type, column_default FROM information_schema.columns "
        "WHERE table_name = 'ev' ORDER BY ordinal_position"
    ).fetchall()
    assert cols == [("k", "integer", None), ("v", "character varying", None), ("n", "integer", "7")]
    att = c.execute(
        "SELECT attname, atthasdef, atthasmissing FROM pg_attribute WHERE attrelid = 'ev'::regclass "
        "AND attnum > 0 ORDER BY attnum"
    ).fetchall()
    assert att == [("k", False, False), ("v", False, False), ("n", True, True)]
    # RENAME COLUMN / RENAME TO: the MV keeps running, batch reads use the new names
    assert c.execute("ALTER TABLE ev RENAME COLUMN v TO vv").statusmessage == "ALTER TABLE"
    assert c.execute("ALTER TABLE ev RENAME TO ev2").statusmessage == "ALTER TABLE"
    assert (
        c.execute("ALTER MATERIALIZED VIEW ev_mv RENAME TO ev_mv2").statusmessage == "ALTER MATERIALIZED VIEW"
    )
    c.execute("CREATE VIEW on_view AS SELECT k FROM ev_v")
    assert c.execute("ALTER VIEW ev_v RENAME TO ev_v2").statusmessage == "ALTER VIEW"
    assert c.execute("ALTER VIEW ev_v2 RENAME TO ev_v").statusmessage == "ALTER VIEW"
    assert c.execute("SELECT count(*) FROM on_view").fetchone() == (3,)
    c.execute("INSERT INTO ev2 (k, vv) VALUES (5, 'e')")
    # the MV's column keeps its name
    assert c.execute("SELECT k, v FROM ev_mv2 WHERE k = 5").fetchall() == [(5, "e")]
    assert c.execute("SELECT vv, n FROM ev2 WHERE k = 5").fetchall() == [("e", 7)]
    # the view's query was rewritten with the new names: it keeps reading (and its columns' names)
    assert c.execute("SELECT * FROM ev_v WHERE k = 5").fetchall() == [(5, "e", 1)]
    assert [d.name for d in c.execute("SELECT * FROM ev_v").description] == ["k", "v", "one"]
    (view_def,) = c.execute("SELECT definition FROM pg_views WHERE viewname = 'ev_v'").fetchone()
    assert view_def == " SELECT *, 1 AS one FROM ev2 WHERE vv <> 'zz';"  # PostgreSQL's layout
    (ddl,) = c.execute("SHOW CREATE TABLE ev2").fetchall()
    assert ddl[1] == "CREATE TABLE ev2 (k INT PRIMARY KEY, vv VARCHAR, n INT DEFAULT 7)"
    # COMMENT ON
    assert c.execute("COMMENT ON TABLE ev2 IS 'the table'").statusmessage == "COMMENT"
    c.execute("COMMENT ON COLUMN ev2.n IS 'a number'")
    row = c.execute(
        "SELECT obj_description('ev2'::regclass, 'pg_class'), col_description('ev2'::regclass, 3), "
        "col_description('ev2'::regclass, 1)"
    ).fetchone()
    assert row == ("the table", "a number", None)
    descs = c.execute(
        "SELECT objsubid, description FROM pg_description WHERE classoid = 'pg_class'::regclass "
        "ORDER BY objsubid"
    ).fetchall()
    assert descs == [(0, "the table"), (3, "a number")]
    c.execute("COMMENT ON TABLE ev2 IS NULL")
    assert c.execute("SELECT obj_description('ev2'::regclass, 'pg_class')").fetchone() == (None,)
    # TRUNCATE: the MV empties with the table
    assert c.execute("TRUNCATE ev2").statusmessage == "TRUNCATE TABLE"
    assert c.execute("SELECT count(*) FROM ev_mv2").fetchone() == (0,)
    assert c.execute("SELECT count(*) FROM ev2").fetchone() == (0,)


def test_errors_have_postgres_states_and_texts(conn: psycopg.Connection[Any]) -> None:
    c = conn
    c.execute("CREATE TABLE er (k INT PRIMARY KEY, a INT, b INT)")
    c.execute("CREATE VIEW er_v AS SELECT k, a FROM er")
    c.execute("CREATE INDEX er_b ON er (b)")
    c.execute("CREATE INDEX er_k ON er (k) INCLUDE (k)")  # holds only k: not a user of a or b
    e = _err(c, "ALTER TABLE er ADD COLUMN a INT")
    assert (e.sqlstate, str(e.diag.message_primary)) == (
        "42701",
        'column "a" of relation "er" already exists',
    )
    notice = c.execute("ALTER TABLE er ADD COLUMN IF NOT EXISTS a INT")
    assert notice.statusmessage == "ALTER TABLE"
    e = _err(c, "ALTER TABLE er RENAME COLUMN zz TO y")
    assert (e.sqlstate, e.diag.message_primary) == ("42703", 'column "zz" does not exist')
    e = _err(c, "ALTER TABLE er DROP COLUMN a")
    assert e.sqlstate == "2BP01"
    assert e.diag.message_primary == "cannot drop column a of table er because other objects depend on it"
    # an index holds every column of its table unless it says INCLUDE (RisingWave's rule)
    assert e.diag.message_detail == (
        "view er_v depends on column a of table er\nindex er_b depends on column a of table er"
    )
    assert e.diag.message_hint == "Use DROP ... CASCADE to drop the dependent objects too."
    e = _err(c, "ALTER TABLE er DROP COLUMN b")  # the index holds it
    assert e.sqlstate == "2BP01" and "index er_b depends on column b" in (e.diag.message_detail or "")
    e = _err(c, "ALTER TABLE er DROP COLUMN k")
    assert e.sqlstate == "0A000"
    e = _err(c, "ALTER TABLE er RENAME TO er_v")
    assert (e.sqlstate, e.diag.message_primary) == ("42P07", 'relation "er_v" already exists')
    e = _err(c, "ALTER VIEW er RENAME TO x")
    assert (e.sqlstate, e.diag.message_primary) == ("42809", '"er" is not a view')
    assert _err(c, "ALTER TABLE er ALTER COLUMN a TYPE bigint").sqlstate == "0A000"
    assert _err(c, "ALTER TABLE er ADD COLUMN t TIMESTAMPTZ DEFAULT now()").sqlstate == "0A000"
    assert _err(c, "ALTER TABLE nope ADD COLUMN x INT").sqlstate == "42P01"
    c.execute("CREATE TABLE er_gen (id BIGINT) WITH (connector = 'datagen', datagen.rows.per.second = '1')")
    e = _err(c, "ALTER TABLE er_gen ADD COLUMN x INT")
    assert e.sqlstate == "0A000"
    assert str(e.diag.message_primary).startswith(
        'ALTER TABLE ADD COLUMN on table "er_gen" with a connector (datagen) is not supported'
    )
    c.execute("DROP TABLE er_gen")
    # a refused ALTER changed nothing
    names = [
        r[0] for r in c.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'er'")
    ]
    assert names == ["k", "a", "b"]
    c.execute("ALTER TABLE er DROP COLUMN a CASCADE")
    assert c.execute("SELECT count(*) FROM pg_views WHERE viewname = 'er_v'").fetchone() == (0,)
    indexes = c.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'er' ORDER BY 1").fetchall()
    assert indexes == [("er_k",), ("er_pkey",)]  # er_b held a: it went with it
    assert [d.name for d in c.execute("SELECT * FROM er").description] == ["k", "b"]


def test_transaction_blocks_and_concurrent_alter(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE tx (k INT PRIMARY KEY, v INT)")
    with psycopg.connect(dsn) as a:  # a transaction block per statement (psycopg's default)
        a.execute("INSERT INTO tx VALUES (1, 1)")
        notices: list[str] = []
        a.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        a.execute("ALTER TABLE tx ADD COLUMN w INT")  # commits the block's INSERT first
        assert notices == ["ALTER TABLE committed the transaction block's earlier changes first"]
        a.commit()
    assert conn.execute("SELECT * FROM tx").fetchall() == [(1, 1, None)]
    with psycopg.connect(dsn) as b:
        b.execute("INSERT INTO tx VALUES (2, 2, 2)")  # buffered in b's block
        conn.execute("ALTER TABLE tx ADD COLUMN z INT")
        with pytest.raises(psycopg.errors.SerializationFailure) as info:
            b.commit()
        assert info.value.diag.message_detail == 'Table "tx" was altered after these rows were written.'
    assert conn.execute("SELECT * FROM tx").fetchall() == [(1, 1, None, None)]


def test_only_the_owner_alters(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE owned (k INT PRIMARY KEY)")
    conn.execute("CREATE USER bob")
    conn.execute("GRANT SELECT, INSERT, DELETE ON owned TO bob")
    with psycopg.connect(dsn.replace("user=root", "user=bob"), autocommit=True) as bob:
        for sql in (
            "ALTER TABLE owned ADD COLUMN x INT",
            "ALTER TABLE owned RENAME TO mine",
            "COMMENT ON TABLE owned IS 'x'",
        ):
            e = _err(bob, sql)
            assert (e.sqlstate, e.diag.message_primary) == ("42501", "must be owner of table owned"), sql
        e = _err(bob, "TRUNCATE owned")  # a privilege of its own (PostgreSQL's), not granted here
        assert (e.sqlstate, e.diag.message_primary) == ("42501", "permission denied for table owned")


def test_psql_describe_shows_defaults_and_comments(server: PgServer, conn: psycopg.Connection[Any]) -> None:
    from test_psql import psql

    conn.execute("CREATE TABLE described (k INT PRIMARY KEY, v VARCHAR)")
    conn.execute("ALTER TABLE described ADD COLUMN n INT DEFAULT 3")
    conn.execute("COMMENT ON TABLE described IS 'what it is'")
    conn.execute("COMMENT ON COLUMN described.n IS 'how many'")
    out = psql(server, "-c", r"\d+ described").stdout
    row = next(line for line in out.splitlines() if line.strip().startswith("n "))
    assert "| 3" in row and "how many" in row, out
    listed = psql(server, "-c", r"\dt+ described").stdout
    assert "what it is" in listed, listed


def test_a_subscription_keeps_the_columns_it_was_created_with(conn: psycopg.Connection[Any]) -> None:
    c = conn
    c.execute("CREATE TABLE fed (k INT PRIMARY KEY, v INT)")
    c.execute("CREATE SUBSCRIPTION fed_sub FROM fed WITH (retention = '1h')")
    c.execute("ALTER TABLE fed ADD COLUMN w INT DEFAULT 3")
    c.execute("INSERT INTO fed VALUES (1, 10, 4)")
    c.execute("DECLARE fed_cur SUBSCRIPTION CURSOR FOR fed_sub SINCE BEGIN()")
    cur = c.execute("FETCH 10 FROM fed_cur")
    assert [d.name for d in cur.description] == ["k", "v", "op", "epoch"]
    assert [r[:3] for r in cur.fetchall()] == [(1, 10, "insert")]
    e = _err(c, "ALTER TABLE fed DROP COLUMN v")  # its log holds v
    assert e.sqlstate == "2BP01" and "subscription fed_sub depends on column v" in (
        e.diag.message_detail or ""
    )
