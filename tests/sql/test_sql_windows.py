"""Window functions (issue 14, part B): lag / lead, first / last / nth value and aggregates over
ROWS and RANGE frames. PostgreSQL's values and errors in batch; in MVs, maintained through DML
rounds that move rows between partitions and order positions, equal to DuckDB after each round."""

from __future__ import annotations

from typing import Any

import pytest
from session_results import rows
from sqldiff import check_cases_with_rounds

from piestream.common.errors import PiestreamError
from piestream.server.session import Session

ROWS = (
    "(1, 1, 1, 10, '2024-01-01 00:00'), (2, 1, 2, 20, '2024-01-01 00:10'), "
    "(3, 1, 2, 30, '2024-01-01 00:30'), (4, 2, 1, NULL, '2024-01-01 01:00'), (5, 2, 3, 50, NULL), "
    "(6, NULL, 1, 60, '2024-01-01 00:00')"
)


@pytest.fixture
def w(s: Session) -> Session:
    s.execute("CREATE TABLE w (k INT PRIMARY KEY, p INT, o INT, v INT, ts TIMESTAMP)")
    s.execute(f"INSERT INTO w VALUES {ROWS}")
    return s


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        (  # lag's default is NULL; lead's third argument replaces rows past the partition's end
            "SELECT k, lag(v) OVER (PARTITION BY p ORDER BY k), "
            "lead(v, 2, -1) OVER (PARTITION BY p ORDER BY k) FROM w",
            [(1, None, 30), (2, 10, -1), (3, 20, -1), (4, None, -1), (5, None, -1), (6, None, -1)],
        ),
        (  # the default frame ends at the current row's last peer (o = 2 twice in partition 1)
            "SELECT k, first_value(v) OVER (PARTITION BY p ORDER BY o), "
            "sum(v) OVER (PARTITION BY p ORDER BY o) FROM w",
            [(1, 10, 10), (2, 10, 60), (3, 10, 60), (4, None, None), (5, None, 50), (6, 60, 60)],
        ),
        (
            "SELECT k, last_value(v) OVER (ORDER BY k ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING), "
            "nth_value(v, 2) OVER (ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) "
            "FROM w",
            [(1, 20, 20), (2, 30, 20), (3, None, 20), (4, 50, 20), (5, 60, 20), (6, 60, 20)],
        ),
        (  # an empty frame: count 0, sum NULL
            "SELECT k, sum(v) OVER (ORDER BY k ROWS BETWEEN 3 PRECEDING AND 2 PRECEDING), "
            "count(*) OVER (ORDER BY k ROWS BETWEEN 3 PRECEDING AND 2 PRECEDING) FROM w",
            [(1, None, 0), (2, None, 0), (3, 10, 1), (4, 30, 2), (5, 50, 2), (6, 30, 2)],
        ),
        (  # RANGE over an interval: the NULL timestamp's frame is its NULL peers only
            "SELECT k, count(v) OVER (ORDER BY ts "
            "RANGE BETWEEN INTERVAL '15 minutes' PRECEDING AND CURRENT ROW) FROM w",
            [(1, 2), (2, 3), (3, 1), (4, 0), (5, 1), (6, 2)],
        ),
        (
            "SELECT k, min(v) OVER (ORDER BY o RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING), "
            "max(v) OVER (PARTITION BY p), bool_or(v > 40) OVER () FROM w",
            [
                (1, 10, 30, True),
                (2, 10, 30, True),
                (3, 10, 30, True),
                (4, 10, 50, True),
                (5, 20, 50, True),
                (6, 10, 60, True),
            ],
        ),
        (  # named windows, and a window refining another
            "SELECT k, sum(v) OVER w1, count(*) OVER (w2 ORDER BY k) FROM w "
            "WINDOW w1 AS (ORDER BY k ROWS 1 PRECEDING), w2 AS (PARTITION BY p)",
            [(1, 10, 1), (2, 30, 2), (3, 50, 3), (4, 30, 1), (5, 50, 2), (6, 110, 1)],
        ),
    ],
)
def test_window_values_match_postgresql(w: Session, sql: str, want: list[tuple[Any, ...]]) -> None:
    assert rows(w, sql) == want


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        (  # windows run over the groups HAVING keeps, reading group keys and aggregates
            "SELECT p, count(*), rank() OVER (ORDER BY count(*) DESC), sum(sum(v)) OVER (ORDER BY p), "
            "lag(max(v)) OVER (ORDER BY p) FROM w GROUP BY p HAVING count(*) > 1",
            [(1, 3, 1, 60, None), (2, 2, 2, 110, 30)],
        ),
        ("SELECT count(*), sum(count(*)) OVER () FROM w", [(6, 6)]),
        (  # ORDER BY a window function of a grouped query
            "SELECT p, count(*) FROM w GROUP BY p ORDER BY row_number() OVER (ORDER BY p DESC) LIMIT 1",
            [(None, 1)],
        ),
    ],
)
def test_windows_over_groups_match_postgresql(w: Session, sql: str, want: list[tuple[Any, ...]]) -> None:
    assert rows(w, sql) == want


@pytest.mark.parametrize(
    ("sql", "sqlstate", "text"),
    [
        (
            "SELECT sum(v) OVER (ORDER BY k GROUPS 1 PRECEDING) FROM w",
            "0A000",
            "GROUPS frames are not supported",
        ),
        (
            "SELECT sum(v) OVER (ORDER BY k ROWS 1 PRECEDING EXCLUDE CURRENT ROW) FROM w",
            "0A000",
            "EXCLUDE in a window frame is not supported",
        ),
        ("SELECT ntile(2) OVER (ORDER BY k) FROM w", "0A000", "window function ntile is not supported"),
        (
            "SELECT string_agg(v::text, ',') OVER (ORDER BY k) FROM w",
            "0A000",
            "string_agg as a window function is not supported",
        ),
        (
            "SELECT p, sum(sum(v) OVER (ORDER BY p)) FROM w GROUP BY p",
            "42803",
            "aggregate function calls cannot contain window function calls",
        ),
        (
            "SELECT sum(lag(v) OVER (ORDER BY k)) OVER () FROM w",
            "42P20",
            "window function calls cannot be nested",
        ),
        (  # over groups, a window reads only group keys and aggregates
            "SELECT p, lag(v) OVER (ORDER BY p) FROM w GROUP BY p",
            "42803",
            'column "w.v" must appear in the GROUP BY clause or be used in an aggregate function',
        ),
        (
            "SELECT p FROM w GROUP BY p HAVING rank() OVER (ORDER BY p) > 1",
            "42P20",
            "window functions are not allowed in HAVING",
        ),
        (
            "SELECT lag(v, k) OVER (ORDER BY k) FROM w",
            "0A000",
            "the offset of lag must be a constant integer",
        ),
        (
            "SELECT sum(v) OVER (ORDER BY k ROWS k PRECEDING) FROM w",
            "42P10",
            "argument of ROWS must not contain variables",
        ),
        (
            "SELECT sum(v) OVER (ORDER BY o RANGE BETWEEN o PRECEDING AND CURRENT ROW) FROM w",
            "42P10",
            "argument of RANGE must not contain variables",
        ),
        (
            "SELECT sum(v) OVER (ORDER BY o, k RANGE 1 PRECEDING) FROM w",
            "42P20",
            "RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column",
        ),
        (
            "SELECT sum(v) OVER (ORDER BY k ROWS -1 PRECEDING) FROM w",
            "22013",
            "frame starting offset must not be negative",
        ),
        (
            "SELECT k FROM w WHERE lag(v) OVER (ORDER BY k) > 1",
            "42P20",
            "window functions are not allowed in WHERE",
        ),
    ],
)
def test_window_errors_match_postgresql(w: Session, sql: str, sqlstate: str, text: str) -> None:
    with pytest.raises(PiestreamError) as info:
        w.execute(sql)
    assert (info.value.sqlstate, str(info.value)) == (sqlstate, text)


SCHEMA = [
    "CREATE TABLE w (k INT PRIMARY KEY, p INT, o INT, v INT, ts TIMESTAMP)",
    "CREATE TABLE n (a INT, b VARCHAR)",  # no primary key: rows are told apart by a hidden row id
]
CASES = [
    (
        "m_lag_lead",
        "SELECT k, p, lag(v) OVER (PARTITION BY p ORDER BY o, k) AS l1, "
        "lead(v, 2, -1) OVER (PARTITION BY p ORDER BY o, k) AS l2 FROM w",
        None,
    ),
    (
        "m_values",
        "SELECT k, first_value(v) OVER (PARTITION BY p ORDER BY o, k) AS f, "
        "last_value(v) OVER (PARTITION BY p ORDER BY o, k ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS l, "
        "nth_value(v, 2) OVER (PARTITION BY p ORDER BY o, k) AS nv FROM w",
        None,
    ),
    (
        "m_rows_frames",
        "SELECT k, sum(v) OVER (ORDER BY k ROWS 2 PRECEDING) AS s, "
        "avg(v) OVER (PARTITION BY p ORDER BY k ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS a, "
        "min(v) OVER (ORDER BY k ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS mn, "
        "count(*) OVER (ORDER BY k ROWS BETWEEN 2 FOLLOWING AND 3 FOLLOWING) AS c FROM w",
        None,
    ),
    (
        "m_range_frames",
        "SELECT k, sum(v) OVER (PARTITION BY p ORDER BY o) AS peers, "
        "max(v) OVER (ORDER BY o DESC RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS mx, "
        "count(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL '15 minutes' PRECEDING "
        "AND INTERVAL '5 minutes' FOLLOWING) AS c FROM w",
        None,
    ),
    ("m_whole_partition", "SELECT k, sum(v) OVER (PARTITION BY p) AS s, count(*) OVER () AS c FROM w", None),
    (  # GROUP BY first, then the window over the groups (the refusal's hint)
        "m_over_groups",
        "SELECT p, s, rank() OVER (ORDER BY s DESC NULLS LAST) AS r, "
        "sum(s) OVER (ORDER BY p ROWS UNBOUNDED PRECEDING) AS running "
        "FROM (SELECT p, sum(v) AS s FROM w GROUP BY p) AS g",
        None,
    ),
    (
        "m_grouped",
        "SELECT p, count(*) AS c, rank() OVER (ORDER BY count(*) DESC, p NULLS FIRST) AS r, "
        "sum(sum(v)) OVER (ORDER BY p ROWS UNBOUNDED PRECEDING) AS run, "
        "lead(min(o)) OVER (ORDER BY max(k)) AS nxt FROM w GROUP BY p HAVING count(*) < 4",
        None,
    ),
    (
        "m_filtered_after",
        "SELECT k, d FROM (SELECT k, v - lag(v) OVER (ORDER BY k) AS d FROM w) AS q WHERE d > 0",
        None,
    ),
    (
        "m_no_pk",
        "SELECT a, b, sum(a) OVER (PARTITION BY b ORDER BY a ROWS 1 PRECEDING) AS s, "
        "lag(a) OVER (ORDER BY a, b) AS l FROM n",
        None,
    ),
]
ROUNDS = [
    [
        f"INSERT INTO w VALUES {ROWS}",
        "INSERT INTO n VALUES (1, 'x'), (1, 'x'), (2, 'y'), (NULL, 'x'), (3, NULL)",
    ],
    [  # rows move between partitions, along the order, and disappear
        "UPDATE w SET p = 2 WHERE k = 1",
        "UPDATE w SET o = 0, ts = '2024-01-01 00:55' WHERE k = 3",
        "DELETE FROM w WHERE k = 5",
        "INSERT INTO w VALUES (7, 1, 5, 70, '2024-01-01 00:05'), (8, 2, 1, 80, '2024-01-01 00:20')",
        "DELETE FROM n WHERE a = 2",
        "INSERT INTO n VALUES (1, 'x'), (0, 'y')",
    ],
    [
        "UPDATE w SET v = v + 1 WHERE p = 1",
        "UPDATE w SET p = NULL, o = NULL WHERE k = 8",
        "INSERT INTO w VALUES (9, 3, 2, NULL, '2024-01-01 00:00'), (10, 3, 2, 5, NULL)",
        "UPDATE n SET b = 'y' WHERE a = 1",
    ],
    ["DELETE FROM w WHERE p = 2 OR k = 9", "DELETE FROM n WHERE b = 'y'"],
]


def test_windows_in_mvs_equal_duckdb(s: Session) -> None:
    nonempty = check_cases_with_rounds(s, SCHEMA, CASES, ROUNDS)
    assert nonempty == {name for name, _, _ in CASES}
