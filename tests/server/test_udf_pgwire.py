"""CREATE FUNCTION over pgwire (psycopg): dollar-quoted bodies, and a raising Python UDF in a
batch query is an ErrorResponse with SQLSTATE 38000 and no Python traceback."""

from __future__ import annotations

import psycopg
import pytest


def test_udf_over_psycopg(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION inv_pg(x int) RETURNS int LANGUAGE python AS $$\n"
            "def inv_pg(x):\n    return 100 // x\n$$"
        )
        conn.execute("CREATE FUNCTION twice_pg(x int) RETURNS int LANGUAGE sql AS $$ SELECT x * 2 $$")
        assert conn.execute("SELECT inv_pg(4), twice_pg(%s)", (21,)).fetchall() == [(25, 42)]
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT inv_pg(0)")
        diag = info.value.diag
        assert diag.sqlstate == "38000"
        assert diag.message_primary == "ZeroDivisionError: integer division or modulo by zero"
        assert "Traceback" not in str(info.value) and 'File "' not in str(info.value)
        conn.execute("DROP FUNCTION inv_pg, twice_pg")
        with pytest.raises(psycopg.errors.UndefinedFunction):
            conn.execute("SELECT twice_pg(1)")


def test_sql_function_calling_another_records_the_dependency(dsn: str) -> None:
    """Like PostgreSQL (a SQL-standard body): DROP FUNCTION of a callee is 2BP01 while another
    function calls it, directly or through a third one; CASCADE drops the callers and what uses
    them; the caller keeps working until then."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION dep_g(x int) RETURNS int LANGUAGE sql AS $$ SELECT x + 1 $$")
        conn.execute("CREATE FUNCTION dep_f(x int) RETURNS int LANGUAGE sql AS $$ SELECT dep_g(x) * 10 $$")
        conn.execute("CREATE FUNCTION dep_h(x int) RETURNS int LANGUAGE sql AS 'SELECT dep_f($1) - 1'")
        conn.execute("CREATE FUNCTION dep_other(x int) RETURNS int LANGUAGE sql AS $$ SELECT x $$")
        # no relation uses them yet: only the calls protect the callees
        for target, caller in (("dep_g", "dep_f(integer)"), ("dep_f(int)", "dep_h(integer)")):
            with pytest.raises(psycopg.errors.DependentObjectsStillExist) as info:
                conn.execute(f"DROP FUNCTION {target}")
            assert info.value.diag.sqlstate == "2BP01"
            assert f"function {caller} depends on function" in (info.value.diag.message_detail or "")
        conn.execute("CREATE TABLE dep_t (x int)")
        conn.execute("INSERT INTO dep_t VALUES (1), (2)")
        conn.execute("CREATE MATERIALIZED VIEW dep_mv AS SELECT dep_h(x) AS y FROM dep_t")
        conn.execute("FLUSH")
        assert sorted(conn.execute("SELECT y FROM dep_mv").fetchall()) == [(19,), (29,)]
        # a callee keeps its return type while called (PostgreSQL refuses changing it anyway)
        with pytest.raises(psycopg.Error) as info:
            conn.execute(
                "CREATE OR REPLACE FUNCTION dep_g(x int) RETURNS varchar LANGUAGE sql AS $$ SELECT 'a' $$"
            )
        assert info.value.sqlstate == "42P13"
        assert conn.execute("SELECT dep_h(3)").fetchone() == (39,)
        # the MV uses dep_h, which inlines dep_f and dep_g: each of the three protects it
        conn.execute("DROP FUNCTION dep_g CASCADE")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM dep_mv")
        for gone in ("dep_g", "dep_f", "dep_h"):
            with pytest.raises(psycopg.errors.UndefinedFunction):
                conn.execute(f"SELECT {gone}(1)")
        assert conn.execute("SELECT dep_other(7)").fetchone() == (7,)
        conn.execute("DROP TABLE dep_t")
        conn.execute("DROP FUNCTION dep_other")
