"""Clauses the binder used to drop without a word: the ones it now honours give PostgreSQL 15's
rows; the others fail with 0A000 naming the clause, at CREATE time, and change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from piestream.common.errors import FeatureNotSupported
from piestream.server.session import Session

SETUP = (
    "CREATE TABLE tt (a int, b int, s varchar, ts timestamp);"
    "INSERT INTO tt VALUES (1, 2, 'x', '2024-01-01 10:00:00'), (3, 1, 'y', NULL), (2, 2, NULL, NULL);"
    "CREATE TABLE u (a int, c int); INSERT INTO u VALUES (1, 5), (2, 6);"
)


@pytest.fixture
def st(s: Session) -> Session:
    s.execute(SETUP)
    return s


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        # each of these returned every row before (the clause after VALUES / the parentheses, or
        # SYMMETRIC, was dropped)
        ("VALUES (1), (2), (3) ORDER BY 1 DESC LIMIT 1", [(3,)]),
        ("VALUES (1, 'a'), (2, 'b'), (3, 'c') ORDER BY column1 OFFSET 1", [(2, "b"), (3, "c")]),
        ("(SELECT a FROM tt ORDER BY a) LIMIT 1", [(1,)]),
        ("(SELECT a FROM tt ORDER BY a DESC) LIMIT 2 OFFSET 1", [(2,), (1,)]),
        ("SELECT * FROM ((SELECT a FROM tt) ORDER BY a LIMIT 2) s", [(1,), (2,)]),
        ("SELECT a FROM tt WHERE a BETWEEN SYMMETRIC 3 AND 2 ORDER BY a DESC", [(3,), (2,)]),
        ("SELECT a FROM tt WHERE a NOT BETWEEN SYMMETRIC 3 AND 2", [(1,)]),
        # refused before
        ("SELECT a FROM tt ORDER BY a FETCH FIRST 2 ROWS ONLY", [(1,), (2,)]),
        ("SELECT a FROM tt ORDER BY a OFFSET 1 ROWS FETCH NEXT ROW ONLY", [(2,)]),
        ("SELECT a FROM tt ORDER BY a LIMIT ALL", [(1,), (2,), (3,)]),
        ("SELECT a FROM public.tt WHERE public.tt.a > 1 ORDER BY a", [(2,), (3,)]),
        ("SELECT a FROM ONLY tt ORDER BY a", [(1,), (2,), (3,)]),
        ("SELECT * EXCEPT (a, ts) FROM tt ORDER BY b, s", [(1, "y"), (2, "x"), (2, None)]),
    ],
)
def test_clauses_now_honoured(st: Session, sql: str, rows: list[tuple[Any, ...]]) -> None:
    assert st.execute(sql)[-1].rows == rows


def test_a_view_over_a_parenthesized_limit(st: Session) -> None:
    st.execute("CREATE MATERIALIZED VIEW m AS SELECT * FROM ((SELECT a, b FROM tt) ORDER BY a LIMIT 2) s")
    st.execute("INSERT INTO tt VALUES (0, 9, 'z', NULL)")
    assert sorted(st.execute("SELECT * FROM m")[-1].rows) == [(0, 9), (1, 2)]


def test_schema_other_than_public_is_not_read_as_public(st: Session) -> None:
    with pytest.raises(Exception) as info:
        st.execute("SELECT a FROM other.tt")
    assert getattr(info.value, "sqlstate", None) == "42P01" and 'relation "other.tt" does not exist' in str(
        info.value
    )


@pytest.mark.parametrize(
    ("sql", "clause"),
    [
        ("SELECT a, sum(a) OVER (ORDER BY a ROWS 2 PRECEDING EXCLUDE TIES) AS r FROM tt", "EXCLUDE"),
        ("SELECT a FROM tt FOR UPDATE", "FOR UPDATE"),
        ("SELECT a FROM tt TABLESAMPLE SYSTEM (10)", "TABLESAMPLE"),
        ("SELECT a FROM tt UNION BY NAME SELECT a FROM u", "BY NAME"),
        ("SELECT try_cast(s AS int) AS i FROM tt", "TRY_CAST"),
        ("SELECT a FROM other.public.tt", "cross-database"),
        ("SELECT a, rank(a) OVER (ORDER BY a) AS r FROM tt", "rank() with arguments"),
        ("SELECT date_trunc('day', ts, 'UTC') AS d FROM tt", "date_trunc with a time zone"),
        ("SELECT count(a, b) AS n FROM tt", "count with several arguments"),
    ],
)
def test_clauses_not_implemented_fail_at_create(st: Session, sql: str, clause: str) -> None:
    for stmt in (sql, f"CREATE MATERIALIZED VIEW m AS {sql}"):
        with pytest.raises(FeatureNotSupported) as info:
            st.execute(stmt)
        assert info.value.sqlstate == "0A000" and clause in str(info.value), info.value
    assert st.execute("SHOW MATERIALIZED VIEWS")[-1].rows == []


@pytest.mark.parametrize(
    "sql",
    [
        # PostgreSQL: k = 1 only (the second match per g); the OFFSET was dropped, giving 1 and 2
        "SELECT k FROM tt t WHERE EXISTS (SELECT 1 FROM u WHERE u.a = t.a OFFSET 1)",
        # PostgreSQL: NULL where the group has one row; the HAVING was dropped
        "SELECT a, (SELECT count(*) FROM u WHERE u.a = tt.a HAVING count(*) > 1) AS c FROM tt",
        # PostgreSQL: always NULL; the LIMIT was dropped
        "SELECT a, (SELECT sum(c) FROM u WHERE u.a = tt.a LIMIT 0) AS c FROM tt",
    ],
)
def test_correlated_subquery_clauses_are_not_dropped(st: Session, sql: str) -> None:
    with pytest.raises(FeatureNotSupported, match="correlated"):
        st.execute(sql)
