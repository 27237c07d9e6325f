"""User-defined functions: CREATE FUNCTION in SQL and Python, the Python API decorator, DROP
FUNCTION, and their use in MVs and batch queries (Nexmark q14's count_char), on the local runner.
The Spark-worker run is in tests/spark/test_udf_spark.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from session_results import error as err

import piestream
from piestream.common.errors import PiestreamError
from piestream.connectors.nexmark.queries import QUERIES
from piestream.connectors.nexmark.tables_sql import nexmark_ddl
from piestream.frontend.catalog import FunctionCatalog
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

COUNT_CHAR_SQL = (
    "CREATE FUNCTION count_char(s varchar, c varchar) RETURNS int LANGUAGE sql "
    "AS $$ SELECT length(s) - length(replace(s, c, '')) $$"
)
COUNT_CHAR_PY = """CREATE FUNCTION count_char_py(s varchar, c varchar) RETURNS int LANGUAGE python AS $$
def count_char_py(s, c):
    return None if s is None else s.count(c)
$$"""
COUNT_CHAR_VEC = """CREATE FUNCTION count_char_vec(s varchar, c varchar) RETURNS int LANGUAGE python
WITH (vectorized = true) AS $$
import pyarrow.compute as pc

def count_char_vec(s, c):
    return pc.count_substring(s, c[0].as_py()) if len(s) else s
$$"""
INLINED = "length(extra) - length(replace(extra, 'c', ''))"


def test_sql_and_python_functions_in_batch(s: Session) -> None:
    s.execute(COUNT_CHAR_SQL)
    s.execute(COUNT_CHAR_PY)
    s.execute(COUNT_CHAR_VEC)
    s.execute("CREATE FUNCTION add1(int) RETURNS int LANGUAGE sql RETURN $1 + 1")
    s.execute("CREATE TABLE t (id int PRIMARY KEY, s varchar)")
    s.execute("INSERT INTO t VALUES (1, 'cocoa'), (2, 'abc'), (3, NULL), (4, '')")
    got = s.execute_one(
        "SELECT id, count_char(s, 'c') AS a, count_char_py(s, 'c'), count_char_vec(s, 'c'), add1(id) "
        "FROM t ORDER BY id"
    )
    assert got.rows == [(1, 2, 2, 2, 2), (2, 1, 1, 1, 3), (3, None, None, None, 4), (4, 0, 0, 0, 5)]
    assert [c[0] for c in got.columns][1:4] == ["a", "count_char_py", "count_char_vec"]
    # arguments are coerced to the declared types; the result has the declared type
    got = s.execute_one("SELECT add1(2::smallint)")
    assert got.rows == [(3,)] and str(got.columns[0][1]) == "integer"


def test_overloads_strict_and_null_input(s: Session) -> None:
    s.execute("CREATE FUNCTION f(x int) RETURNS varchar LANGUAGE sql AS $$ SELECT 'int' $$")
    s.execute("CREATE FUNCTION f(x varchar) RETURNS varchar LANGUAGE sql AS $$ SELECT 'text:' || x $$")
    s.execute("CREATE FUNCTION g(x int) RETURNS int LANGUAGE sql STRICT AS $$ SELECT coalesce(x, 7) $$")
    s.execute("CREATE FUNCTION h(x int) RETURNS int LANGUAGE sql AS $$ SELECT coalesce(x, 7) $$")
    s.execute(
        "CREATE FUNCTION p(x int) RETURNS int LANGUAGE python RETURNS NULL ON NULL INPUT "
        "AS $$\ndef p(x):\n    return x * 2\n$$"
    )
    assert s.execute_one("SELECT f(1), f('a'), g(NULL), h(NULL), p(NULL), p(4)").rows == [
        ("int", "text:a", None, 7, None, 8)
    ]
    e = err(s, "SELECT f(1.5::double precision)")
    assert e.sqlstate == "42883"


def test_python_errors_are_38000_without_traceback(s: Session) -> None:
    s.execute(
        "CREATE FUNCTION boom(x int) RETURNS int LANGUAGE python AS $$\ndef boom(x):\n    return 10 // x\n$$"
    )
    s.execute(
        "CREATE FUNCTION wrong(x int) RETURNS int LANGUAGE python AS $$\ndef wrong(x):\n    return 'a'\n$$"
    )
    s.execute("CREATE TABLE t (x int)")
    s.execute("INSERT INTO t VALUES (1), (0)")
    e = err(s, "SELECT boom(x) FROM t")
    assert e.sqlstate == "38000"
    assert e.message == "ZeroDivisionError: integer division or modulo by zero"
    assert "Traceback" not in str(e) and "boom" in (e.detail or "")
    assert err(s, "SELECT wrong(1)").sqlstate == "38000"
    assert s.execute_one("SELECT boom(x) FROM t WHERE x <> 0").rows == [(10,)]


def test_create_errors(s: Session) -> None:
    s.execute(COUNT_CHAR_SQL)
    cases = {
        COUNT_CHAR_SQL: "42723",  # same name and argument types
        "CREATE FUNCTION length(x int) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$": "0A000",
        "CREATE FUNCTION q(x int) RETURNS int LANGUAGE sql AS $$ SELECT y $$": "42703",
        "CREATE FUNCTION q(x int) RETURNS date LANGUAGE sql AS $$ SELECT x $$": "42P13",
        "CREATE FUNCTION q(x int) RETURNS int LANGUAGE sql AS $$ SELECT x FROM t $$": "0A000",
        "CREATE FUNCTION q(x int) RETURNS int LANGUAGE sql AS $$ SELECT sum(x) $$": "42803",
        "CREATE FUNCTION q(x int) RETURNS int LANGUAGE python AS $$ def q(: $$": "42P13",
        "CREATE FUNCTION q(x int) RETURNS int LANGUAGE python AS $$\n"
        "def other(x): return 1\ndef o2(x): return 2\n$$": "42P13",
        "CREATE FUNCTION q(x int) RETURNS int LANGUAGE javascript AS $$ return 1 $$": "0A000",
        "CREATE FUNCTION q(x int) RETURNS SETOF int LANGUAGE sql AS $$ SELECT 1 $$": "0A000",
        "CREATE FUNCTION q(OUT x int) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$": "0A000",
        "CREATE FUNCTION q(x int) RETURNS int LANGUAGE sql WITH (vectorized = true) "
        "AS $$ SELECT 1 $$": "22023",
        "CREATE FUNCTION q(x int) RETURNS int AS $$ SELECT 1 $$": "42P13",
    }
    for sql, state in cases.items():
        assert err(s, sql).sqlstate == state, sql
    assert [f.name for f in s.db.catalog.functions()] == ["count_char"]  # nothing else was stored


def test_functions_in_mvs_drop_and_restart(tmp_path: Path) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=0.05)
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute(COUNT_CHAR_SQL)
        s.execute(COUNT_CHAR_PY)
        s.execute("CREATE TABLE t (id int PRIMARY KEY, s varchar)")
        s.execute("INSERT INTO t VALUES (1, 'cc'), (2, 'x')")
        s.execute(
            "CREATE MATERIALIZED VIEW mv AS "
            "SELECT id, count_char(s, 'c') AS a, count_char_py(s, 'c') AS b FROM t"
        )
        s.execute("INSERT INTO t VALUES (3, 'ccc')")
        s.execute("UPDATE t SET s = 'c' WHERE id = 1")
        assert s.execute_one("SELECT * FROM mv ORDER BY id").rows == [(1, 1, 1), (2, 0, 0), (3, 3, 3)]
        e = err(s, "DROP FUNCTION count_char_py")
        assert e.sqlstate == "2BP01" and "mv" in (e.detail or "")
        e = err(
            s,
            "CREATE OR REPLACE FUNCTION count_char(s varchar, c varchar) RETURNS int "
            "LANGUAGE sql AS $$ SELECT 0 $$",
        )
        assert e.sqlstate == "0A000"
        # the catalog entry is versioned JSON holding the source text
        raw = db.meta.scan("catalog.function")
        entries = [json.loads(v) for _, v in raw]
        assert {e["format"] for e in entries} == {1}
        assert any("s.count(c)" in e["body"] for e in entries)
    with Database(tmp_path / "d", config=cfg) as db:  # recovery: the MV keeps running its UDFs
        s = db.session()
        s.execute("INSERT INTO t VALUES (4, 'cccc')")
        assert s.execute_one("SELECT * FROM mv WHERE id = 4").rows == [(4, 4, 4)]
        assert s.execute_one("SELECT count_char_py('acc', 'c')").rows == [(2,)]
        s.execute("DROP FUNCTION count_char_py(varchar, varchar) CASCADE")
        assert db.catalog.get("mv") is None
        assert err(s, "SELECT count_char_py('a', 'c')").sqlstate == "42883"
        res = s.execute_one("DROP FUNCTION IF EXISTS count_char_py, count_char")
        assert res.notices == ["function count_char_py does not exist, skipping"]
        assert db.catalog.functions() == []
        assert err(s, "DROP FUNCTION count_char").sqlstate == "42883"


def test_function_catalog_format_is_checked() -> None:
    entry = {"format": 2, "name": "f"}
    with pytest.raises(PiestreamError, match="format 2"):
        FunctionCatalog.from_json(entry)


def test_python_api_decorator(tmp_path: Path) -> None:
    with piestream.connect(tmp_path / "d", runner="local", barrier_interval=0.05) as conn:

        @conn.function(returns="int")
        def count_c(s: str) -> int:
            return None if s is None else s.count("c")

        @conn.function(args=["varchar"], returns="bigint", vectorized=True)
        def vlen(s):  # type: ignore[no-untyped-def]
            import pyarrow.compute as pc

            return pc.utf8_length(s)

        assert count_c("cc") == 2  # still a Python function
        got = conn.sql("SELECT count_c('cocoa'), vlen('abc')")
        assert got.rows == [(2, 3)] and [str(t) for t in got.types] == ["integer", "bigint"]
        stored = {f.name: f for f in conn.database.catalog.functions()}
        assert stored["vlen"].vectorized and stored["count_c"].body.startswith("def count_c(")
        assert "@conn.function" not in stored["count_c"].body


def _wait_for_bids(s: Session, n: int) -> None:
    for _ in range(400):
        if s.execute_one("SELECT count(*) FROM bid").rows[0][0] >= n:
            return
        s.execute("FLUSH")
    raise AssertionError("bids did not arrive")


def test_nexmark_q14_with_count_char_as_sql_and_python_udf(tmp_path: Path) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2)
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        n_events = 6000
        s.execute(COUNT_CHAR_SQL)
        s.execute(COUNT_CHAR_PY)
        s.execute(COUNT_CHAR_VEC)
        s.execute(nexmark_ddl(kind="table", tables=("bid",), event_num=n_events, events_per_second=0))
        q14 = QUERIES["q14"].sql
        assert INLINED in q14
        s.execute(f"CREATE MATERIALIZED VIEW q14 AS {q14}")
        for fn in ("count_char", "count_char_py", "count_char_vec"):
            s.execute(f"CREATE MATERIALIZED VIEW q14_{fn} AS " + q14.replace(INLINED, f"{fn}(extra, 'c')"))
        _wait_for_bids(s, int(n_events * 0.92) - 1)
        s.execute("FLUSH")
        want = sorted(s.execute_one("SELECT * FROM q14").rows)
        assert len(want) > 50 and sum(r[-1] > 0 for r in want) > 10  # c_counts is the last column
        for fn in ("count_char", "count_char_py", "count_char_vec"):
            assert sorted(s.execute_one(f"SELECT * FROM q14_{fn}").rows) == want, fn
        # and the counts are right, checked against Python's str.count over the bids' extra
        got = s.execute_one(
            "SELECT count_char_py(extra, 'c'), count_char(extra, 'c'), count_char_vec(extra, 'c'), extra "
            "FROM bid"
        ).rows
        assert all(a == b == c == e.count("c") for a, b, c, e in got)
