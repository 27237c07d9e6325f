"""INTERSECT / EXCEPT [ALL], DISTINCT ON and set-returning functions (issue 14, part B items 1-3):
PostgreSQL's rows, names and SQLSTATEs, and the shapes against DuckDB through DML rounds in MVs
and in batch."""

from __future__ import annotations

from typing import Any

import pytest
from session_results import error, rows
from sqldiff import check_cases_with_rounds

from piestream.server.session import Session

L = "SELECT x FROM (VALUES (1), (1), (1), (2), (NULL), (NULL)) AS a(x)"
R = "SELECT y FROM (VALUES (1), (1), (NULL), (3)) AS b(y)"


@pytest.mark.parametrize(
    ("op", "want"),
    [
        ("INTERSECT", [(1,), (None,)]),
        ("INTERSECT ALL", [(1,), (1,), (None,)]),
        ("EXCEPT", [(2,)]),  # 1 is on the right (once): no copy of it survives
        ("EXCEPT ALL", [(1,), (2,), (None,)]),
    ],
)
def test_set_operations_match_postgresql(s: Session, op: str, want: list[tuple[Any, ...]]) -> None:
    """Rows compare as in GROUP BY (NULL equals NULL); ALL keeps min(l, r) / l - r copies."""
    assert rows(s, f"{L} {op} {R}") == want
    s.execute("CREATE TABLE l (x INT); CREATE TABLE r (y INT)")
    s.execute(f"CREATE MATERIALIZED VIEW mv AS SELECT x FROM l {op} SELECT y FROM r")
    s.execute(
        "INSERT INTO l VALUES (1), (1), (1), (2), (NULL), (NULL); INSERT INTO r VALUES (1), (1), (NULL), (3)"
    )
    assert rows(s, "SELECT * FROM mv") == want


def test_set_operation_precedence_names_and_errors(s: Session) -> None:
    assert rows(s, "SELECT 1 AS a UNION SELECT 2 EXCEPT SELECT 1") == [(2,)]  # left to right
    assert rows(s, "SELECT 1 AS a UNION SELECT 2 INTERSECT SELECT 2") == [(1,), (2,)]  # INTERSECT first
    res = s.execute("SELECT 1 AS a, 2 AS b INTERSECT CORRESPONDING SELECT 2 AS b, 3 AS c")[-1]
    assert (res.names, res.rows) == (["b"], [(2,)])
    e = error(s, "SELECT 1, 2 EXCEPT SELECT 1")
    assert (e.sqlstate, str(e)) == ("42601", "each EXCEPT query must have the same number of columns")
    e = error(s, "SELECT 1 INTERSECT SELECT 'a'::TEXT")
    assert (e.sqlstate, str(e)) == ("42804", "INTERSECT types integer and text cannot be matched")


def test_distinct_on(s: Session) -> None:
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT)")
    s.execute("INSERT INTO t VALUES (1, 1, 10), (2, 1, 5), (3, 2, 7), (4, NULL, 1), (5, NULL, 2)")
    q = "SELECT DISTINCT ON (g) g, v, k FROM t ORDER BY g, v DESC"
    assert rows(s, q) == [(1, 10, 1), (2, 7, 3), (None, 2, 5)]
    s.execute(f"CREATE MATERIALIZED VIEW d AS {q}")
    s.execute("UPDATE t SET v = 100 WHERE k = 2; DELETE FROM t WHERE k = 5")
    assert rows(s, "SELECT * FROM d") == rows(s, q) == [(1, 100, 2), (2, 7, 3), (None, 1, 4)]
    assert rows(s, "SELECT DISTINCT ON (1) g, k FROM t ORDER BY 1, k DESC LIMIT 2") == [(1, 2), (2, 3)]
    e = error(s, "SELECT DISTINCT ON (g) g, v FROM t ORDER BY v")
    assert (e.sqlstate, str(e)) == (
        "42P10",
        "SELECT DISTINCT ON expressions must match initial ORDER BY expressions",
    )


# -- set-returning functions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "names", "want"),
    [
        # several in one select list zip to the longest (PostgreSQL 10+)
        (
            "SELECT generate_series(1, 3), unnest(ARRAY['a', 'b'])",
            ["generate_series", "unnest"],
            [(1, "a"), (2, "b"), (3, None)],
        ),
        ("SELECT generate_series(1, 3) + 1 AS g", ["g"], [(2,), (3,), (4,)]),
        ("SELECT unnest(regexp_matches('a1b22c', '[0-9]+', 'g')) AS d", ["d"], [("1",), ("22",)]),
        (
            "SELECT regexp_matches('foobarbequebaz', '(bar)(beque)')",
            ["regexp_matches"],
            [(["bar", "beque"],)],
        ),
        ("SELECT regexp_matches('abc', 'z')", ["regexp_matches"], []),
        ("SELECT * FROM generate_series(10, 1, -3)", ["generate_series"], [(1,), (4,), (7,), (10,)]),
        ("SELECT * FROM generate_series(1, 3) AS x", ["x"], [(1,), (2,), (3,)]),
        ("SELECT x FROM generate_series(1, 2) x", ["x"], [(1,), (2,)]),
        ("SELECT * FROM range(1, 4)", ["range"], [(1,), (2,), (3,)]),  # RisingWave's: stop excluded
        (
            "SELECT * FROM unnest(ARRAY['x', 'y']) WITH ORDINALITY AS t(v, n)",
            ["v", "n"],
            [("x", 1), ("y", 2)],
        ),
        ("SELECT * FROM unnest(ARRAY[1, 2], ARRAY['a'])", ["unnest", "unnest"], [(1, "a"), (2, None)]),
        (
            "SELECT * FROM generate_series(1, 2) WITH ORDINALITY",
            ["generate_series", "ordinality"],
            [(1, 1), (2, 2)],
        ),
        ("SELECT * FROM abs(-3)", ["abs"], [(3,)]),
        ("SELECT a.a FROM abs(-3) AS a", ["a"], [(3,)]),  # a one-column function takes its alias
        (
            "SELECT * FROM generate_series(TIMESTAMP '2024-01-01', TIMESTAMP '2024-01-01 12:00', "
            "INTERVAL '5 hours')",
            ["generate_series"],
            [(dt,) for dt in ("2024-01-01 00:00:00", "2024-01-01 05:00:00", "2024-01-01 10:00:00")],
        ),
        (  # each value is the previous one plus the step: Jan 31, Feb 29, Mar 29
            "SELECT * FROM generate_series(TIMESTAMP '2024-01-31', TIMESTAMP '2024-04-30', "
            "INTERVAL '1 month')",
            ["generate_series"],
            [(dt,) for dt in ("2024-01-31 00:00:00", "2024-02-29 00:00:00", "2024-03-29 00:00:00")]
            + [("2024-04-29 00:00:00",)],
        ),
        (
            "SELECT * FROM generate_series(TIMESTAMP '2024-03-31', TIMESTAMP '2024-01-01', "
            "INTERVAL '-1 month -1 day')",  # months first, then days: Mar 31, Feb 29 - 1 day
            ["generate_series"],
            [(dt,) for dt in ("2024-03-31 00:00:00", "2024-02-28 00:00:00", "2024-01-27 00:00:00")],
        ),
        (  # dates alone resolve to the timestamptz form (PostgreSQL's preferred type)
            "SELECT * FROM generate_series(DATE '2024-01-01', DATE '2024-01-02', INTERVAL '1 day')",
            ["generate_series"],
            [("2024-01-01 00:00:00+00:00",), ("2024-01-02 00:00:00+00:00",)],
        ),
    ],
)
def test_set_returning_functions_match_postgresql(
    s: Session, sql: str, names: list[str], want: list[Any]
) -> None:
    res = s.execute(sql)[-1]
    assert res.names == names
    got = res.rows
    if want and isinstance(want[0][0], str) and want[0][0].startswith("2024"):
        got = [(str(r[0]),) for r in got]
    assert sorted(got, key=repr) == sorted(want, key=repr)


def test_set_returning_function_errors(s: Session) -> None:
    s.execute("CREATE TABLE t (k INT, arr INT[])")
    for sql in (
        "SELECT k FROM t WHERE generate_series(1, 2) > 1",
        "SELECT CASE WHEN k > 1 THEN generate_series(1, 2) END FROM t",
        "SELECT COALESCE(unnest(arr), 0) FROM t",
        "SELECT sum(generate_series(1, 3)) FROM t",
        "SELECT k FROM t GROUP BY k HAVING generate_series(1, 2) > 1",
        "SELECT * FROM t LEFT JOIN LATERAL unnest(t.arr) AS u ON true",
        "VALUES (generate_series(1, 2))",
    ):
        assert error(s, sql).sqlstate == "0A000", sql
    e = error(s, "SELECT * FROM generate_series(1, 5, 0)")
    assert (e.sqlstate, str(e)) == ("22023", "step size cannot equal zero")
    month_as_days = (
        "generate_series(TIMESTAMP '2024-01-01', TIMESTAMP '2024-02-01', INTERVAL '1 month -30 days')"
    )
    e = error(s, f"SELECT * FROM {month_as_days}")  # PostgreSQL compares a month as 30 days
    assert (e.sqlstate, str(e)) == ("22023", "step size cannot equal zero")
    assert error(s, "SELECT unnest(1)").sqlstate == "42883"
    for sql in (  # refused before anything is built, not after memory runs out
        "SELECT generate_series(1, 9223372036854775807)",
        "SELECT * FROM generate_series(-9223372036854775808, 9223372036854775807, 2)",
        "SELECT * FROM generate_series(1.0, 1e20)",
        "SELECT * FROM generate_series(TIMESTAMP '0001-01-01', TIMESTAMP '9999-01-01', INTERVAL '1 second')",
    ):
        assert error(s, sql).sqlstate == "54000", sql
    e = error(s, "SELECT * FROM generate_series(1, 3) WITH ORDINALITY AS g(a, b, c)")
    assert (e.sqlstate, str(e)) == ("42P10", 'table "g" has 2 columns available but 3 columns specified')


def test_lateral_functions_and_outer_joins(s: Session) -> None:
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, arr INT[])")
    s.execute("INSERT INTO t VALUES (1, ARRAY[10, 20]), (2, NULL), (3, ARRAY[30])")
    assert rows(s, "SELECT t.k, u FROM t CROSS JOIN unnest(t.arr) AS u") == [(1, 10), (1, 20), (3, 30)]
    assert rows(s, "SELECT k, g FROM t, generate_series(1, t.k) AS g WHERE g > 1") == [(2, 2), (3, 2), (3, 3)]
    assert rows(s, "SELECT k, g FROM t JOIN generate_series(1, 3) AS g ON g = k + 1") == [(1, 2), (2, 3)]
    # an outer join of a function that reads no earlier column is a plain join
    assert rows(s, "SELECT k, g FROM t LEFT JOIN generate_series(2, 3) AS g ON g = k") == [
        (1, None),
        (2, 2),
        (3, 3),
    ]


def test_insert_select_generate_series(s: Session) -> None:
    """How people load test data: both spellings (bench/bench_sql_load.py times a million rows)."""
    s.execute("CREATE TABLE t (x INT); CREATE TABLE u (x BIGINT PRIMARY KEY, y INT)")
    s.execute("INSERT INTO t SELECT generate_series(1, 100)")
    assert rows(s, "SELECT count(*), sum(x) FROM t") == [(100, 5050)]
    res = s.execute("INSERT INTO u SELECT x, x % 7 FROM generate_series(1, 300000) x")[-1]
    assert res.tag == "INSERT 0 300000"  # more rows than one change chunk (dml.BULK_CHUNK_ROWS)
    got = rows(s, "SELECT count(*), sum(x), max(y), count(DISTINCT y) FROM u")
    assert got == [(300000, 45000150000, 6, 7)]


SCHEMA = [
    "CREATE TABLE t1 (id INT PRIMARY KEY, g INT, s VARCHAR)",
    "CREATE TABLE t2 (g INT, s VARCHAR)",
    "CREATE TABLE ta (k INT PRIMARY KEY, arr INT[], n INT)",
]
CASES = [
    ("m_intersect", "SELECT g, s FROM t1 INTERSECT SELECT g, s FROM t2", None),
    ("m_intersect_all", "SELECT g FROM t1 INTERSECT ALL SELECT g FROM t2", None),
    ("m_except", "SELECT g, s FROM t1 EXCEPT SELECT g, s FROM t2", None),
    ("m_except_all", "SELECT g FROM t1 EXCEPT ALL SELECT g FROM t2", None),
    (
        "m_except_corresponding",
        "SELECT id, g FROM t1 EXCEPT CORRESPONDING SELECT s, g FROM t2",
        "SELECT g FROM t1 EXCEPT SELECT g FROM t2",
    ),
    (
        "m_nested",
        "SELECT g FROM t1 UNION ALL SELECT g FROM t2 EXCEPT ALL SELECT n FROM ta",
        "(SELECT g FROM t1 UNION ALL SELECT g FROM t2) EXCEPT ALL SELECT n FROM ta",
    ),
    (
        "m_set_op_joined",
        "SELECT q.g, t1.id FROM (SELECT g FROM t1 INTERSECT SELECT g FROM t2) AS q JOIN t1 ON q.g = t1.g",
        None,
    ),
    ("m_distinct_on", "SELECT DISTINCT ON (g) g, id, s FROM t1 ORDER BY g, id DESC", None),
    (  # DuckDB's generate_series in a select list is a list
        "m_srf_select",
        "SELECT k, unnest(arr) AS u, generate_series(1, n) AS x FROM ta",
        "SELECT k, unnest(arr) AS u, unnest(generate_series(1, n)) AS x FROM ta",
    ),
    (
        "m_srf_lateral",
        "SELECT k, u, i FROM ta CROSS JOIN unnest(ta.arr) WITH ORDINALITY AS f(u, i)",
        "SELECT k, u, i FROM ta, unnest(ta.arr) WITH ORDINALITY AS f(u, i)",
    ),
    (
        "m_srf_then_agg",
        "SELECT u, count(*) AS c FROM (SELECT unnest(arr) AS u FROM ta) q GROUP BY u",
        None,
    ),
    ("m_srf_series_from", "SELECT k, x FROM ta, generate_series(n, 3) AS x", None),
]
ROUNDS = [
    [
        "INSERT INTO t1 VALUES (1, 1, 'a'), (2, 1, 'a'), (3, 2, NULL), (4, NULL, 'b'), (5, NULL, NULL)",
        "INSERT INTO t2 VALUES (1, 'a'), (NULL, NULL), (3, 'c'), (1, 'a')",
        "INSERT INTO ta VALUES (1, ARRAY[1, 2, 2], 2), (2, NULL, 1), (3, ARRAY[5], NULL)",
    ],
    [
        "DELETE FROM t2 WHERE g = 1",
        "INSERT INTO t1 VALUES (6, 3, 'c'), (7, 1, 'a')",
        "UPDATE ta SET arr = ARRAY[7, 8] WHERE k = 2",
    ],
    [
        "INSERT INTO t2 VALUES (2, NULL), (NULL, 'b'), (1, 'a')",
        "UPDATE t1 SET g = 2 WHERE id = 1",
        "DELETE FROM ta WHERE k = 1",
        "INSERT INTO ta VALUES (4, ARRAY[1], 3), (5, ARRAY[2, 1], 0)",
    ],
    ["DELETE FROM t1 WHERE g IS NULL", "UPDATE ta SET n = 1 WHERE n IS NULL OR n = 0", "DELETE FROM t2"],
]


def test_shapes_equal_duckdb_in_mvs_and_batch(s: Session) -> None:
    nonempty = check_cases_with_rounds(s, SCHEMA, CASES, ROUNDS)
    assert nonempty == {name for name, _, _ in CASES}
