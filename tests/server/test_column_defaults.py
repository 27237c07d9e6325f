"""Column DEFAULTs of CREATE TABLE, differential against a real PostgreSQL 15: what INSERT (with a
column list, ``DEFAULT`` entries, ``DEFAULT VALUES``), ``UPDATE ... SET c = DEFAULT`` and COPY
with a column list write, what
information_schema.columns / pg_attrdef / SQLAlchemy's reflection show, and that a DEFAULT
piestream cannot evaluate is 0A000 naming itself."""

from __future__ import annotations

import datetime as dt
import re
import sys
from pathlib import Path

import psycopg
import pytest
from pgwire_helpers import start_server
from sqlalchemy import create_engine, inspect

from piestream.common.types import INT
from piestream.frontend.catalog import ColumnCatalog
from piestream.server.pgwire import PgServer

sys.path.insert(0, str(Path(__file__).parents[1] / "connectors"))
from pg_server import PASSWORD as PG_PASSWORD
from pg_server import USER as PG_USER
from pg_server import PgServer as RealPostgres

_TABLE = (
    "CREATE TABLE d (k INT PRIMARY KEY, a INT DEFAULT 5, n INT DEFAULT -5, e NUMERIC DEFAULT 1.5, "
    "f BOOLEAN DEFAULT true, v VARCHAR DEFAULT 'abc', h DATE DEFAULT '2024-01-02', "
    "x DOUBLE PRECISION DEFAULT 2, b BIGINT DEFAULT 7, ts TIMESTAMPTZ DEFAULT now(), plain INT)"
)
_WRITES = [
    "INSERT INTO d (k) VALUES (1)",
    "INSERT INTO d VALUES (2, DEFAULT, 7)",
    "INSERT INTO d (k, v, f) VALUES (3, DEFAULT, false), (4, 'x', DEFAULT)",
    "INSERT INTO d (k, a, v) SELECT 5, 50, 'sel'",
    "INSERT INTO d (k, a, v) VALUES (8, 80, 'upd')",
    "UPDATE d SET a = DEFAULT, v = DEFAULT, ts = DEFAULT WHERE k = 8",
]
_NO_KEY = "CREATE TABLE nk (a INT DEFAULT 11, v VARCHAR DEFAULT 'w')"
_COLUMN_DEFAULTS = (
    "SELECT table_name, column_name, column_default FROM information_schema.columns "
    "WHERE table_schema = 'public' AND table_name IN ('d', 'nk') ORDER BY table_name, ordinal_position"
)
# psql's \d and SQLAlchemy read the default this way
_ATTRDEF = (
    "SELECT c.relname, a.attname, a.atthasdef, pg_catalog.pg_get_expr(ad.adbin, ad.adrelid) "
    "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
    "LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum "
    "WHERE c.relname IN ('d', 'nk') AND a.attnum > 0 ORDER BY c.relname, a.attnum"
)


def _run(conn: psycopg.Connection) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Create the tables, write through every path that omits columns; (rows, nk rows)."""
    conn.execute(_TABLE)
    conn.execute(_NO_KEY)
    for sql in _WRITES:
        conn.execute(sql)
    conn.execute("INSERT INTO nk DEFAULT VALUES")
    conn.execute("INSERT INTO nk (v) VALUES ('given')")
    with conn.cursor().copy("COPY d (k, plain) FROM STDIN") as copy:
        copy.write_row((6, 60))
        copy.write_row((7, None))
    with conn.cursor().copy("COPY nk (v) FROM STDIN (FORMAT csv)") as copy:
        copy.write(b"copied\n")
    rows = conn.execute("SELECT k, a, n, e, f, v, h, x, b, plain, ts FROM d ORDER BY k").fetchall()
    nk = conn.execute("SELECT a, v FROM nk ORDER BY v").fetchall()
    return rows, nk


def test_defaults_match_postgresql(server: PgServer, dsn: str, postgres: RealPostgres) -> None:
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    with (
        psycopg.connect(dsn, autocommit=True) as ours,
        psycopg.connect(postgres.dsn(), autocommit=True) as pg,
    ):
        our_rows, our_nk = _run(ours)
        pg_rows, pg_nk = _run(pg)
        after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
        assert [r[:-1] for r in our_rows] == [r[:-1] for r in pg_rows]
        assert our_rows[0][:-1] == (1, 5, -5, 1.5, True, "abc", dt.date(2024, 1, 2), 2.0, 7, None)
        assert our_nk == pg_nk == [(11, "copied"), (11, "given"), (11, "w")]
        # now() is evaluated at each insert (not frozen at CREATE TABLE)
        for ts in [r[-1] for r in our_rows]:
            assert isinstance(ts, dt.datetime) and before <= ts <= after
        assert ours.execute(_COLUMN_DEFAULTS).fetchall() == pg.execute(_COLUMN_DEFAULTS).fetchall()
        assert ours.execute(_ATTRDEF).fetchall() == pg.execute(_ATTRDEF).fetchall()
        defaults = dict((r[1], r[2]) for r in ours.execute(_COLUMN_DEFAULTS).fetchall() if r[0] == "d")
        assert defaults["ts"] == "now()" and defaults["v"] == "'abc'::character varying"
        assert defaults["n"] == "'-5'::integer" and defaults["plain"] is None


def test_sqlalchemy_reflects_the_defaults(server: PgServer, postgres: RealPostgres) -> None:
    """After the differential test: both databases hold table d."""
    reflected = []
    for url in (
        f"postgresql+psycopg://root@127.0.0.1:{server.port}/dev",
        f"postgresql+psycopg://{PG_USER}:{PG_PASSWORD}@{postgres.host}:{postgres.port}/{postgres.database}",
    ):
        engine = create_engine(url)
        try:
            reflected.append({c["name"]: c["default"] for c in inspect(engine).get_columns("d")})
        finally:
            engine.dispose()
    ours, theirs = reflected
    assert ours == theirs
    assert ours["a"] == "5" and ours["ts"] == "now()" and ours["plain"] is None


def test_a_default_it_cannot_evaluate_is_refused_naming_itself(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for column, shown in (
            (
                "w TIMESTAMPTZ DEFAULT now() + INTERVAL '1 hour'",
                "DEFAULT CURRENT_TIMESTAMP + INTERVAL '1 HOUR'",
            ),
            ("w VARCHAR DEFAULT gen_random_uuid()", "GEN_RANDOM_UUID()"),  # one value per row
        ):
            with pytest.raises(
                psycopg.errors.FeatureNotSupported, match=re.escape(f'{shown} for column "w"')
            ):
                c.execute(f"CREATE TABLE refused ({column})")
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT * FROM refused")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            c.execute("CREATE TABLE refused (w INT DEFAULT 'nope')")  # checked at CREATE, as in PostgreSQL


def test_defaults_survive_a_restart(tmp_path: Path) -> None:
    srv = start_server(tmp_path)
    dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE kept (k INT PRIMARY KEY, a INT DEFAULT 3, ts TIMESTAMPTZ DEFAULT now())")
    finally:
        srv.stop()
    srv = start_server(tmp_path)
    dsn = f"host=127.0.0.1 port={srv.port} user=root dbname=dev"
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("INSERT INTO kept (k) VALUES (1)")
            row = c.execute("SELECT a, ts IS NOT NULL FROM kept").fetchone()
            assert row == (3, True)
    finally:
        srv.stop()


def test_a_catalog_column_written_before_default_expressions_reads_unchanged() -> None:
    """Catalog format 7 stays: `default_expr` is an optional key, absent in older catalogs."""
    old = {"name": "a", "type": "integer", "hidden": False}
    assert ColumnCatalog.from_json(old) == ColumnCatalog("a", INT)
    assert ColumnCatalog("a", INT).to_json() == old
    now = ColumnCatalog("t", INT, default_expr="now()")
    assert ColumnCatalog.from_json(now.to_json()) == now
