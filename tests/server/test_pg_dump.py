"""pg_dump (Debian's, PostgreSQL 15) against piestream: ``--schema-only`` and ``-t`` dumps of tables,
views, MVs and schemas, restored into a real PostgreSQL 15 and compared there; the catalog
queries pg_dump sends that the emulation had refused, as golden cases; and LOCK TABLE, which
pg_dump takes (ACCESS SHARE on every table, in its REPEATABLE READ block).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from test_psql import psql

from piestream.server.pgwire import PgServer

sys.path.insert(0, str(Path(__file__).parents[1] / "connectors"))
from pg_server import PgServer as RealPostgres

PG_DUMP = "/usr/lib/postgresql/15/bin/pg_dump"

_OBJECTS = [
    "CREATE TABLE acct (id INT, region VARCHAR, owner VARCHAR, balance NUMERIC, PRIMARY KEY (region, id))",
    "CREATE INDEX acct_owner ON acct (owner DESC)",
    "CREATE SCHEMA side",
    "CREATE TABLE side.t (a INT PRIMARY KEY, b VARCHAR, c TIMESTAMP, d DOUBLE PRECISION, e BIGINT, "
    "f BOOLEAN, g DATE, h SMALLINT, i REAL, j TIMESTAMPTZ, k BYTEA, l JSONB, m INTERVAL, n TIME)",
    "CREATE TABLE nopk (x INT DEFAULT 3, y TEXT DEFAULT 'q', z TIMESTAMPTZ DEFAULT now())",
    "CREATE VIEW owners AS SELECT owner FROM acct",
    "CREATE VIEW side_view AS SELECT a, b FROM side.t WHERE a > 1",
    "CREATE MATERIALIZED VIEW rich AS SELECT owner, sum(balance) AS total FROM acct GROUP BY owner",
    "CREATE MATERIALIZED VIEW side.counts AS SELECT b, count(*) AS n FROM side.t GROUP BY b",
    # column lists rename the query's columns: the dump must keep the relation's names
    "CREATE VIEW renamed (who) AS SELECT owner FROM acct",
    'CREATE MATERIALIZED VIEW side.named (label, "Cnt") AS SELECT b, count(*) FROM side.t GROUP BY b',
]


@pytest.fixture(scope="module")
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    c = psycopg.connect(dsn, autocommit=True)
    for sql in _OBJECTS:
        c.execute(sql)
    yield c
    c.close()


def _dump(server: PgServer, *args: str) -> str:
    out = subprocess.run(
        [PG_DUMP, "-h", "127.0.0.1", "-p", str(server.port), "-U", "root", "--no-owner", *args, "dev"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _restore(pg: RealPostgres, database: str, script: str) -> None:
    pg.sql(f"CREATE DATABASE {database}")
    lines = [ln for ln in script.splitlines() if not ln.startswith(("\\restrict", "\\unrestrict"))]
    with psycopg.connect(pg.dsn(database), autocommit=True) as c:
        c.execute("\n".join(lines).encode())


_COLUMNS = (
    "SELECT c.table_schema, c.table_name, c.column_name, c.data_type, c.is_nullable "
    "FROM information_schema.columns c JOIN information_schema.tables t "
    "ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
    "WHERE c.table_schema IN ('public', 'side') ORDER BY 1, 2, c.ordinal_position"
)
_RELATIONS = (
    "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname IN ('public', 'side') ORDER BY 1, 2"
)
_PKEYS = (
    "SELECT tc.table_schema, tc.table_name, string_agg(k.column_name, ',' ORDER BY k.ordinal_position) "
    "FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage k "
    "ON k.constraint_name = tc.constraint_name AND k.table_schema = tc.table_schema "
    "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema IN ('public', 'side') "
    "GROUP BY 1, 2 ORDER BY 1, 2"
)


def test_schema_only_dump_restores_into_postgresql(
    server: PgServer, conn: psycopg.Connection, postgres: RealPostgres
) -> None:
    script = _dump(server, "--schema-only")
    assert "CREATE SCHEMA side;" in script
    assert "CREATE MATERIALIZED VIEW public.rich AS" in script
    assert "CREATE MATERIALIZED VIEW side.counts AS" in script
    # the queries read the relations schema-qualified (pg_dump restores with an empty search_path)
    assert " FROM public.acct" in script and " FROM side.t" in script
    assert "ADD CONSTRAINT acct_pkey PRIMARY KEY (region, id);" in script
    assert "CREATE INDEX acct_owner ON public.acct USING btree (owner DESC)" in script
    assert "FOREIGN DATA WRAPPER" not in script  # no source: no server for sources either
    assert "    x integer DEFAULT 3,\n    y character varying DEFAULT 'q'::character varying," in script
    _restore(postgres, "restored", script)
    with psycopg.connect(postgres.dsn("restored")) as pg:
        columns = pg.execute(_COLUMNS).fetchall()
        relations = pg.execute(_RELATIONS).fetchall()
        pkeys = pg.execute(_PKEYS).fetchall()
        defaults = pg.execute(
            "SELECT column_name, column_default FROM information_schema.columns "
            "WHERE table_name = 'nopk' ORDER BY ordinal_position"
        ).fetchall()
        named = pg.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'side.named'::regclass AND attnum > 0 ORDER BY attnum"
        ).fetchall()
    assert relations == [
        ("public", "acct", "r"),
        ("public", "acct_owner", "i"),
        ("public", "acct_pkey", "i"),
        ("public", "nopk", "r"),
        ("public", "owners", "v"),
        ("public", "renamed", "v"),
        ("public", "rich", "m"),
        ("public", "side_view", "v"),
        ("side", "counts", "m"),
        ("side", "named", "m"),
        ("side", "t", "r"),
        ("side", "t_pkey", "i"),
    ]
    assert pkeys == [("public", "acct", "region,id"), ("side", "t", "a")]
    side_t = [(c[2], c[3], c[4]) for c in columns if c[:2] == ("side", "t")]
    assert side_t == [
        ("a", "integer", "NO"),
        ("b", "character varying", "YES"),
        ("c", "timestamp without time zone", "YES"),
        ("d", "double precision", "YES"),
        ("e", "bigint", "YES"),
        ("f", "boolean", "YES"),
        ("g", "date", "YES"),
        ("h", "smallint", "YES"),
        ("i", "real", "YES"),
        ("j", "timestamp with time zone", "YES"),
        ("k", "bytea", "YES"),
        ("l", "jsonb", "YES"),
        ("m", "interval", "YES"),
        ("n", "time without time zone", "YES"),
    ]
    # the same columns as piestream's own information_schema lists, table by table
    ours = conn.execute(
        "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema IN ('public', 'side') ORDER BY 1, 2, ordinal_position"
    ).fetchall()
    mvs = ("rich", "counts", "named")
    theirs = [c[:4] for c in columns if c[1] not in mvs]  # PG lists no MV columns
    assert [c for c in ours if c[1] not in mvs] == theirs
    assert [c[2] for c in columns if c[1] == "owners"] == ["owner"]
    assert [c[2] for c in columns if c[1] == "renamed"] == ["who"]
    assert defaults == [("x", "3"), ("y", "'q'::character varying"), ("z", "now()")]
    assert named == [("label", "character varying"), ("Cnt", "bigint")]


def test_dump_of_one_table(server: PgServer, conn: psycopg.Connection) -> None:
    script = _dump(server, "--schema-only", "-t", "acct")
    assert "CREATE TABLE public.acct (" in script
    assert "ADD CONSTRAINT acct_pkey PRIMARY KEY (region, id);" in script
    for other in ("side.t", "public.nopk", "public.owners", "public.rich", "CREATE SCHEMA"):
        assert other not in script
    script = _dump(server, "--schema-only", "-t", "side.counts")
    assert "CREATE MATERIALIZED VIEW side.counts AS" in script and "CREATE TABLE" not in script


def test_views_are_dumped_as_written(server: PgServer, conn: psycopg.Connection) -> None:
    """pg_dump, psql's \\sv and pg_get_viewdef read the query the user wrote (its spacing, its
    literals), with names qualified for pg_dump's empty search_path and the column list kept."""
    conn.execute("CREATE TABLE clicks (u INT, ts TIMESTAMP)")
    conn.execute("CREATE VIEW spaced AS SELECT owner,   balance * 2 AS dbl FROM acct WHERE owner <> 'x AS y'")
    conn.execute(
        "CREATE MATERIALIZED VIEW per_min AS SELECT window_start, count(*) AS n "
        "FROM TUMBLE(clicks, ts, INTERVAL '1 minute') GROUP BY window_start"
    )
    script = _dump(server, "--schema-only", "-t", "spaced", "-t", "per_min", "-t", "renamed")
    assert (
        "CREATE VIEW public.spaced AS\n"
        " SELECT owner,   balance * 2 AS dbl FROM public.acct WHERE owner <> 'x AS y';" in script
    )
    assert (
        "CREATE VIEW public.renamed AS\n SELECT * FROM (SELECT owner FROM public.acct) AS renamed(who);"
        in script
    )
    assert (
        "CREATE MATERIALIZED VIEW public.per_min AS\n SELECT window_start, count(*) AS n "
        "FROM TUMBLE(public.clicks, ts, INTERVAL '1 minute') GROUP BY window_start\n  WITH NO DATA;" in script
    )
    assert psql(server, "-c", "\\sv spaced").stdout == (
        "CREATE OR REPLACE VIEW public.spaced AS\n"
        " SELECT owner,   balance * 2 AS dbl FROM acct WHERE owner <> 'x AS y'\n"
    )
    assert psql(server, "-c", "\\sv renamed").stdout == (
        "CREATE OR REPLACE VIEW public.renamed AS\n SELECT * FROM (SELECT owner FROM acct) AS renamed(who)\n"
    )
    conn.execute("CREATE VIEW starred (p, q) AS SELECT * FROM clicks")
    assert psql(server, "-c", "\\sv starred").stdout == (
        "CREATE OR REPLACE VIEW public.starred AS\n SELECT * FROM (SELECT * FROM clicks) AS starred(p, q)\n"
    )
    # the rendering reads back as the same relation in piestream too
    conn.execute("CREATE VIEW renamed_again AS SELECT * FROM (SELECT owner FROM acct) AS renamed(who)")
    cols = (
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position"
    )
    assert conn.execute(cols, ("renamed_again",)).fetchall() == conn.execute(cols, ("renamed",)).fetchall()
    assert conn.execute("SELECT definition FROM pg_matviews WHERE matviewname = 'named'").fetchone() == (
        ' SELECT * FROM (SELECT b, count(*) FROM side.t GROUP BY b) AS named(label, "Cnt");',
    )


def test_a_source_dumps_as_a_foreign_table_with_its_connector_options(
    server: PgServer, conn: psycopg.Connection, postgres: RealPostgres
) -> None:
    """A source is a foreign table of server piestream_connectors (RisingWave lists sources in
    pg_class as relkind 's', which pg_dump skips); its WITH / FORMAT / ENCODE options are the
    table's OPTIONS, a password is not, and the script restores into PostgreSQL."""
    conn.execute(
        "CREATE SOURCE gen (x INT, y VARCHAR) WITH (connector = 'datagen', "
        "datagen.rows.per.second = '10', \"auth.password\" = 'hush') FORMAT PLAIN ENCODE JSON"
    )
    full = _dump(server, "--schema-only")
    assert "CREATE FOREIGN DATA WRAPPER piestream;" in full
    assert "CREATE SERVER piestream_connectors FOREIGN DATA WRAPPER piestream;" in full
    script = _dump(server, "--schema-only", "-t", "gen")
    assert (
        "CREATE FOREIGN TABLE public.gen (\n    x integer,\n    y character varying\n)\n"
        "SERVER piestream_connectors\nOPTIONS (\n    connector 'datagen',\n"
        "    \"datagen.rows.per.second\" '10',\n    encode 'json',\n    format 'plain'\n);" in script
    )
    assert "hush" not in full and "password" not in full
    ours = conn.execute("SELECT ftoptions FROM pg_foreign_table WHERE ftrelid = 'gen'::regclass").fetchone()
    _restore(
        postgres,
        "with_source",
        "CREATE FOREIGN DATA WRAPPER piestream;\n"
        "CREATE SERVER piestream_connectors FOREIGN DATA WRAPPER piestream;\n" + script,
    )
    with psycopg.connect(postgres.dsn("with_source")) as pg:
        theirs = pg.execute(
            "SELECT ftoptions::text FROM pg_foreign_table WHERE ftrelid = 'public.gen'::regclass"
        ).fetchone()
    assert ours == theirs == ("{connector=datagen,datagen.rows.per.second=10,encode=json,format=plain}",)


def test_pg_dump_catalog_queries(conn: psycopg.Connection, dsn: str) -> None:
    """Queries pg_dump sends that the emulation used to refuse, with PostgreSQL 15's answers."""
    # a `name` is a char array: typname[0] is its first character
    rows = conn.execute(
        "SELECT typname, typname[0] = '_' AS isarray FROM pg_type "
        "WHERE typname IN ('int4', '_int4') ORDER BY 1"
    ).fetchall()
    assert rows == [("_int4", True), ("int4", False)]
    ordered = conn.execute(
        "SELECT (SELECT pg_catalog.array_agg(attname ORDER BY attnum) FROM pg_catalog.pg_attribute "
        "WHERE attrelid = 'side.t'::regclass AND attnum > 0)"
    ).fetchone()
    assert ordered is not None and list(ordered[0])[:3] == ["a", "b", "c"]
    assert conn.execute("SELECT 0::regproc::text, quote_literal('it''s')").fetchone() == ("-", "'it''s'")
    for empty in ("pg_init_privs", "pg_cast", "pg_transform", "pg_seclabels", "pg_user_mappings", "pg_amop"):
        assert conn.execute(f"SELECT count(*) FROM pg_catalog.{empty}").fetchone() == (0,)
    # initdb's comment on public (pg_dump writes no COMMENT for it then)
    assert conn.execute("SELECT obj_description(2200, 'pg_namespace')").fetchone() == (
        "standard public schema",
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        # set_config(.., false) is SET: pg_dump's empty search_path, after which pg_get_viewdef qualifies
        assert c.execute("SELECT pg_catalog.set_config('search_path', '', false)").fetchone() == ("",)
        assert c.execute("SHOW search_path").fetchone() == ('""',)
        assert c.execute("SELECT pg_get_viewdef('public.owners'::regclass)").fetchone() == (
            " SELECT owner FROM public.acct;",
        )
        c.execute("SELECT pg_catalog.set_config('search_path', 'side, public', false)")
        assert c.execute("SHOW search_path").fetchone() == ("side, public",)
        assert c.execute("SELECT pg_get_viewdef('owners'::regclass)").fetchone() == (
            " SELECT owner FROM acct;",
        )
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            c.execute("SELECT set_config('search_path', '', true)")


# -- LOCK TABLE ---------------------------------------------------------------------------------


def test_lock_table_is_held_to_the_end_of_the_block(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE locked (k INT PRIMARY KEY, v INT)")
    with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
        conn.execute("LOCK TABLE locked IN ACCESS SHARE MODE")
    with psycopg.connect(dsn, autocommit=True) as dumper, psycopg.connect(dsn, autocommit=True) as other:
        dumper.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        assert dumper.execute("LOCK TABLE public.locked IN ACCESS SHARE MODE").statusmessage == "LOCK TABLE"
        with pytest.raises(psycopg.errors.UndefinedTable):
            dumper.execute("LOCK TABLE no_such_table IN ACCESS SHARE MODE")
        dumper.execute("ROLLBACK")
        dumper.execute("BEGIN")
        dumper.execute("LOCK TABLE locked IN ACCESS SHARE MODE")
        # ACCESS SHARE: other sessions read and write; DDL (ACCESS EXCLUSIVE) cannot go on
        other.execute("INSERT INTO locked VALUES (1, 1)")
        assert other.execute("SELECT count(*) FROM locked").fetchone() == (1,)
        other.execute("SET lock_timeout = '300ms'")
        began = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable, match=r'lock timeout.*"locked"'):
            other.execute("DROP TABLE locked")
        assert time.monotonic() - began >= 0.3
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("ALTER TABLE locked ADD COLUMN w INT")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("TRUNCATE locked")
        other.execute("BEGIN")
        with pytest.raises(
            psycopg.errors.LockNotAvailable, match='could not obtain lock on relation "locked"'
        ):
            other.execute("LOCK TABLE locked NOWAIT")  # ACCESS EXCLUSIVE when no mode is given
        other.execute("ROLLBACK")
        # a failed statement keeps the block's locks until ROLLBACK
        with pytest.raises(psycopg.errors.DivisionByZero):
            dumper.execute("SELECT 1 / 0")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("DROP TABLE locked")
        # without lock_timeout the DROP waits, and goes on when the block ends
        other.execute("SET lock_timeout = 0")
        done: list[object] = []
        waiter = threading.Thread(
            target=lambda: done.append(other.execute("DROP TABLE locked").statusmessage)
        )
        waiter.start()
        waiter.join(1.0)
        assert waiter.is_alive() and not done
        dumper.execute("ROLLBACK")
        waiter.join(60)
        assert done == ["DROP TABLE"]


def test_lock_modes_conflict_as_in_postgresql(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE modes (k INT PRIMARY KEY)")
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        b.execute("SET lock_timeout = '200ms'")
        a.execute("BEGIN")
        a.execute("LOCK TABLE modes IN SHARE MODE")  # blocks writers, not readers
        assert b.execute("SELECT count(*) FROM modes").fetchone() == (0,)
        with pytest.raises(psycopg.errors.LockNotAvailable):
            b.execute("INSERT INTO modes VALUES (1)")
        b.execute("BEGIN")
        b.execute("LOCK TABLE modes IN SHARE MODE")  # SHARE does not conflict with itself
        b.execute("COMMIT")
        a.execute("COMMIT")
        a.execute("BEGIN")
        a.execute("LOCK TABLE modes IN ACCESS EXCLUSIVE MODE")  # even reads wait
        with pytest.raises(psycopg.errors.LockNotAvailable):
            b.execute("SELECT * FROM modes")
        assert a.execute("SELECT count(*) FROM modes").fetchone() == (0,)  # its own lock: no conflict
        a.execute("COMMIT")
        assert b.execute("SELECT count(*) FROM modes").fetchone() == (0,)


def test_a_lock_wait_cycle_is_a_deadlock(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE dl1 (k INT PRIMARY KEY)")
    conn.execute("CREATE TABLE dl2 (k INT PRIMARY KEY)")
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        a.execute("BEGIN")
        a.execute("LOCK TABLE dl1")
        b.execute("BEGIN")
        b.execute("LOCK TABLE dl2")
        errors: list[BaseException] = []

        def a_waits() -> None:
            try:
                a.execute("LOCK TABLE dl2")
            except psycopg.Error as e:
                errors.append(e)

        t = threading.Thread(target=a_waits)
        t.start()
        time.sleep(0.5)
        try:
            b.execute("LOCK TABLE dl1")  # closes the cycle: this one is the deadlock
        except psycopg.errors.DeadlockDetected:
            b.execute("ROLLBACK")  # b's locks go: a's wait ends with the lock
        t.join(30)
        assert not t.is_alive() and not errors
        a.execute("COMMIT")


def test_a_cancelled_lock_wait_does_not_take_the_lock(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE cancel_me (k INT PRIMARY KEY)")
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        a.execute("BEGIN")
        a.execute("LOCK TABLE cancel_me IN ACCESS SHARE MODE")
        b.execute("SET statement_timeout = '300ms'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            b.execute("DROP TABLE cancel_me")
        b.execute("SET statement_timeout = 0")
        a.execute("COMMIT")
        time.sleep(0.3)
        # the DROP gave up waiting: the table is still there and c can lock it
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("BEGIN")
            c.execute("LOCK TABLE cancel_me NOWAIT")
            c.execute("COMMIT")
        assert conn.execute("SELECT count(*) FROM cancel_me").fetchone() == (0,)


# -- user functions in pg_proc (last: the dumps above have none) -----------------------------------


def test_user_functions_are_in_pg_proc(server: PgServer, conn: psycopg.Connection, dsn: str) -> None:
    conn.execute("CREATE FUNCTION add_one(x INT) RETURNS INT LANGUAGE sql AS 'SELECT x + 1'")
    conn.execute(
        "CREATE FUNCTION twice(INT, y VARCHAR) RETURNS VARCHAR LANGUAGE python AS $$\n"
        "def twice(a, y):\n    return y * a\n$$"
    )
    rows = conn.execute(
        "SELECT p.proname, n.nspname, l.lanname, p.pronargs, p.proargtypes::regtype[]::text, "
        "p.prorettype::regtype::text, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid) "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "JOIN pg_language l ON l.oid = p.prolang ORDER BY 1"
    ).fetchall()
    assert rows == [
        ("add_one", "public", "sql", 1, "{integer}", "integer", "x integer", "integer"),
        ("twice", "public", "python", 2, "{integer,\"character varying\"}", "character varying",
         "integer, y character varying", "character varying"),
    ]  # fmt: skip
    out = psql(server, "-c", "\\df").stdout
    assert " public | add_one | integer           | x integer                    | func" in out
    assert " public | twice   | character varying | integer, y character varying | func" in out
    assert psql(server, "-c", "\\sf add_one").stdout == (
        "CREATE OR REPLACE FUNCTION public.add_one(x integer)\n RETURNS integer\n LANGUAGE sql\n"
        "AS $function$SELECT x + 1$function$\n"
    )
    missing = psql(server, "-c", "\\sf nope", check=False)
    assert missing.returncode != 0 and 'function "nope" does not exist' in missing.stderr
    # pg_dump reads each function's definition through SQL-level PREPARE / EXECUTE
    script = _dump(server, "--schema-only")
    assert (
        "CREATE FUNCTION public.add_one(x integer) RETURNS integer\n"
        "    LANGUAGE sql\n    AS $$SELECT x + 1$$;" in script
    )
    assert (
        "CREATE FUNCTION public.twice(integer, y character varying) RETURNS character varying\n"
        "    LANGUAGE python\n" in script
    )
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("PREPARE fn(pg_catalog.oid) AS SELECT proname FROM pg_catalog.pg_proc WHERE oid = $1")
        oid = c.execute("SELECT oid FROM pg_proc WHERE proname = 'add_one'").fetchone()
        assert oid is not None
        assert c.execute(f"EXECUTE fn('{oid[0]}')").fetchall() == [("add_one",)]
        assert c.execute("EXECUTE fn(1)").fetchall() == []
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            c.execute("EXECUTE nope(1)")
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            c.execute("PREPARE mine AS SELECT * FROM acct")  # not a catalog query
        c.execute("DEALLOCATE fn")
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            c.execute("EXECUTE fn(1)")
