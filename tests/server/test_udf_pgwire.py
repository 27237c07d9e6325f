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
