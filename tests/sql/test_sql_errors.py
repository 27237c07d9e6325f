"""Errors carry PostgreSQL's SQLSTATEs (with a 1-based position where PostgreSQL gives one), what
is not supported fails at CREATE time with 0A000, and a failed statement changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from piestream.common.errors import PiestreamError
from piestream.server.session import Session

SETUP = (
    "CREATE TABLE t (k INT PRIMARY KEY, v INT, name VARCHAR, ts TIMESTAMP);"
    "INSERT INTO t VALUES (1, 0, 'a', NULL), (2, 5, 'b', '2024-01-01 00:00:00');"
    "CREATE TABLE ao (k INT, v INT) APPEND ONLY;"
)


@pytest.fixture
def st(s: Session) -> Session:
    s.execute(SETUP)
    return s


def error_of(s: Session, sql: str) -> PiestreamError:
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    return info.value


def snapshot(s: Session) -> dict[str, Any]:
    """Everything a failed statement must leave as it was: the catalog and every relation's rows."""
    out: dict[str, Any] = {}
    for kind in ("TABLES", "MATERIALIZED VIEWS", "VIEWS"):
        out[kind] = sorted(r[0] for r in s.execute(f"SHOW {kind}")[0].rows)
    for name in out["TABLES"] + out["MATERIALIZED VIEWS"]:
        out[name] = sorted(s.execute(f"SELECT * FROM {name}")[0].rows, key=repr)
    return out


@pytest.mark.parametrize(
    ("sql", "sqlstate", "pos"),
    [
        # 42601 syntax errors, at the offending token
        ("SELEC 1", "42601", 1),
        ("SELECT * FROM t WHERE", "42601", 22),
        ("SELECT k FROM t WHERE k IN (SELECT k, v FROM t)", "42601", None),
        ("INSERT INTO t (k) VALUES (1, 2)", "42601", None),  # fewer values than columns is valid
        # 42P01 / 42703 undefined objects
        ("SELECT * FROM nope", "42P01", 15),
        ("SELECT x.k FROM t", "42P01", None),
        ("SELECT nope FROM t", "42703", 8),
        ("SELECT t.nope FROM t", "42703", 10),
        ("INSERT INTO t (k, nope) VALUES (1, 2)", "42703", None),
        ("UPDATE t SET nope = 1", "42703", None),
        # 42883 / 42804 types
        ("SELECT name + 1 FROM t", "42883", 8),
        ("SELECT foo(v) FROM t", "42883", 8),
        ("SELECT * FROM t WHERE v", "42804", 23),
        ("SELECT CASE WHEN true THEN 1 ELSE 'x'::text END", "42804", None),
        ("SELECT k FROM t UNION SELECT name FROM t", "42804", None),
        # 22xxx data exceptions
        ("SELECT 1 / 0", "22012", None),
        ("SELECT 10 / v FROM t", "22012", None),
        ("SELECT 2147483647 + k FROM t", "22003", None),
        ("SELECT CAST(300000 AS SMALLINT)", "22003", None),
        ("INSERT INTO t VALUES ('x', 1, 'a', NULL)", "22P02", None),
        # 23xxx constraints, 42P07 duplicates, 2BP01 dependents, 42809 wrong object
        ("INSERT INTO t VALUES (NULL, 1, 'x', NULL)", "23502", None),
        ("CREATE TABLE t (a INT)", "42P07", None),
        ("UPDATE ao SET v = 1", "42809", None),
        ("DELETE FROM ao", "42809", None),
        ("INSERT INTO nope VALUES (1)", "42P01", None),
        ("DROP MATERIALIZED VIEW t", "42809", None),
        # a struct type without fields (found by the fuzz soak: was XX000)
        ("SELECT STRUCT ''", "0A000", None),
        ("SELECT lpad(CAST('' AS STRUCT), 3, '*')", "0A000", None),
    ],
)
def test_sqlstate(st: Session, sql: str, sqlstate: str, pos: int | None) -> None:
    e = error_of(st, sql)
    assert e.sqlstate == sqlstate, str(e)
    if pos is not None:
        assert e.position == pos, str(e)


UNSUPPORTED = [
    "SELECT k FROM t ORDER BY k OFFSET 2",
    "SELECT sum(v) OVER (ORDER BY k GROUPS 1 PRECEDING) AS s FROM t",
    "SELECT string_agg(name, ',') OVER (ORDER BY k) AS s FROM t",
    "SELECT k, ntile(2) OVER (ORDER BY k) AS n FROM t",
    "SELECT now() AS n FROM t",
    # an OR of temporal bounds is a union of disjoint branches; equality with now() has no bound
    "SELECT k FROM t WHERE ts > now() - INTERVAL '1 hour' OR ts = now()",
    "WITH RECURSIVE r AS (SELECT 1) SELECT * FROM r",
    "SELECT k, x FROM t LEFT JOIN LATERAL generate_series(1, t.k) AS x ON true",
    # a scalar subquery that may return two rows: the query would fail (21000) then, the MV cannot
    "SELECT k, (SELECT v FROM t AS t2) AS s FROM t",
]


@pytest.mark.parametrize("query", UNSUPPORTED)
def test_unsupported_fails_at_create_and_changes_nothing(st: Session, query: str) -> None:
    before = snapshot(st)
    e = error_of(st, f"CREATE MATERIALIZED VIEW m AS {query}")
    assert e.sqlstate == "0A000", str(e)
    assert str(e)  # a message naming the feature
    assert snapshot(st) == before
    st.execute("CREATE MATERIALIZED VIEW m AS SELECT k FROM t")  # the name is free


def test_failed_create_mv_at_backfill_changes_nothing(st: Session) -> None:
    """In strict mode the backfill epoch's division by zero fails the statement with 22012 and
    leaves nothing (by default it is a NULL: tests/server/test_streaming_errors.py)."""
    st.db.set_strict_mode(True)
    before = snapshot(st)
    e = error_of(st, "CREATE MATERIALIZED VIEW m AS SELECT k, 10 / v AS x FROM t")
    assert e.sqlstate == "22012"
    assert snapshot(st) == before
    st.execute("INSERT INTO t VALUES (3, 1, 'c', NULL)")  # the table's job still runs
    assert snapshot(st)["t"] == sorted([*before["t"], (3, 1, "c", None)], key=repr)


def test_failed_create_mv_at_bind_changes_nothing(st: Session) -> None:
    before = snapshot(st)
    assert error_of(st, "CREATE MATERIALIZED VIEW m AS SELECT nope FROM t").sqlstate == "42703"
    assert error_of(st, "CREATE MATERIALIZED VIEW m AS SELECT * FROM nope").sqlstate == "42P01"
    assert error_of(st, "CREATE MATERIALIZED VIEW t AS SELECT 1 AS x").sqlstate == "42P07"
    assert snapshot(st) == before


def test_failed_insert_changes_nothing(st: Session) -> None:
    """In strict mode, an INSERT whose epoch fails in a downstream MV (division by zero) is not
    applied anywhere: not to the table, not to any MV; the next statement works."""
    st.db.set_strict_mode(True)
    st.execute("DELETE FROM t WHERE v = 0")
    st.execute("CREATE MATERIALIZED VIEW m AS SELECT k, 10 / v AS x FROM t")
    st.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c, sum(v) AS s FROM t")
    before = snapshot(st)
    e = error_of(st, "INSERT INTO t VALUES (3, 0, 'c', NULL), (4, 1, 'd', NULL)")
    assert e.sqlstate == "22012"
    assert snapshot(st) == before
    e = error_of(st, "INSERT INTO t VALUES (5, 1, 'e', NULL), (NULL, 1, 'f', NULL)")
    assert e.sqlstate == "23502"
    assert snapshot(st) == before
    e = error_of(st, "UPDATE t SET v = v - 5 WHERE k = 2")
    assert e.sqlstate == "22012"
    assert snapshot(st) == before
    st.execute("INSERT INTO t VALUES (6, 2, 'g', NULL)")
    assert sorted(st.execute("SELECT * FROM m")[0].rows) == [(2, 2), (6, 5)]
    assert st.execute("SELECT c, s FROM n")[0].rows == [(2, 7)]


def test_failed_drop_changes_nothing(st: Session) -> None:
    st.execute("CREATE MATERIALIZED VIEW m AS SELECT k FROM t")
    st.execute("CREATE MATERIALIZED VIEW m2 AS SELECT count(*) AS c FROM m")
    before = snapshot(st)
    e = error_of(st, "DROP TABLE t")
    assert e.sqlstate == "2BP01"
    assert error_of(st, "DROP MATERIALIZED VIEW m").sqlstate == "2BP01"
    assert snapshot(st) == before
    st.execute("INSERT INTO t VALUES (3, 1, 'c', NULL)")
    assert st.execute("SELECT c FROM m2")[0].rows == [(3,)]
    st.execute("DROP TABLE t CASCADE")
    assert snapshot(st)["MATERIALIZED VIEWS"] == []
