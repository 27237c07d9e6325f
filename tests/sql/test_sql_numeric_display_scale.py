"""NUMERIC results show PostgreSQL's display scale where its rules fix it (expr/display_scale.py):
in batch queries and MVs alike, after a restart, and in MVs on MVs. Expected texts are
PostgreSQL 15's output for the same statements."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from session_results import error

from piestream.common.text import format_datum
from piestream.server.session import Session


def texts(s: Session, sql: str) -> list[tuple[str | None, ...]]:
    """The rows as the text the wire protocol sends (what psql prints)."""
    (res,) = s.execute(sql)
    types = [t for _, t in res.columns]
    return [
        tuple(None if v is None else format_datum(v, t) for v, t in zip(r, types, strict=True))
        for r in res.rows
    ]


def test_issue_examples_in_batch(s: Session) -> None:
    assert texts(s, "SELECT 1940 * 0.908, 0.908 * 1940::bigint") == [("1761.520", "1761.520")]
    assert texts(s, "SELECT round(41912.964, 4), round(41912.96449, 4), trunc(2.5, 3)") == [
        ("41912.9640", "41912.9645", "2.500")
    ]
    assert texts(s, "SELECT 1.50::numeric, '1.50'::numeric, 1.5 + 2.25, 10 % 3.00, -1.50, abs(-1.50)") == [
        ("1.50", "1.50", "3.75", "1.00", "-1.50", "1.50")
    ]
    assert texts(s, "SELECT round(2.5), ceil(2.1), 1.20 * 2, (1940 * 0.908)::text") == [
        ("3", "3", "2.40", "1761.520")
    ]


def _bids(s: Session) -> None:
    s.execute("CREATE TABLE bid (auction bigint, price bigint)")
    s.execute("INSERT INTO bid VALUES (1, 1940), (2, 6221), (2, 6222), (3, 0)")


Q1 = "SELECT auction, 0.908 * price AS price, round(price * 1.1, 4) AS r FROM bid"
Q2 = (
    "SELECT auction, sum(0.908 * price) AS s, max(price * 0.50) AS m, sum(price) AS t "
    "FROM bid GROUP BY auction"
)
Q1_ROWS = [
    ("1", "1761.520", "2134.0000"),
    ("2", "5648.668", "6843.1000"),
    ("2", "5649.576", "6844.2000"),
    ("3", "0.000", "0.0000"),
]
Q2_ROWS = [
    ("1", "1761.520", "970.00", "1940"),
    ("2", "11298.244", "3111.00", "12443"),
    ("3", "0.000", "0.00", "0"),
]


def test_mv_and_batch_show_the_same_text(s: Session) -> None:
    _bids(s)
    s.execute(f"CREATE MATERIALIZED VIEW q1 AS {Q1}")
    s.execute(f"CREATE MATERIALIZED VIEW q2 AS {Q2}")
    s.execute("CREATE MATERIALIZED VIEW q3 AS SELECT auction, price * 2 AS p2 FROM q1")  # MV on MV
    s.execute("INSERT INTO bid VALUES (4, 5)")
    s.execute("DELETE FROM bid WHERE auction = 4")
    s.execute("FLUSH")
    assert sorted(texts(s, "SELECT * FROM q1")) == sorted(texts(s, Q1)) == Q1_ROWS
    assert sorted(texts(s, "SELECT * FROM q2")) == sorted(texts(s, Q2)) == Q2_ROWS
    assert sorted(texts(s, "SELECT * FROM q3"))[0] == ("1", "3523.040")


def test_display_scales_survive_a_restart(reopen: Callable[[], AbstractContextManager[Session]]) -> None:
    """The MV's column types (catalog) and its plan (stored) keep the display scale."""
    with reopen() as s:
        _bids(s)
        s.execute(f"CREATE MATERIALIZED VIEW q1 AS {Q1}")
        s.execute(f"CREATE MATERIALIZED VIEW q2 AS {Q2}")
        s.execute("FLUSH")
    with reopen() as s:
        s.execute("INSERT INTO bid VALUES (5, 10)")  # the restored plan computes new rows
        s.execute("FLUSH")
        assert sorted(texts(s, "SELECT * FROM q1")) == sorted([*Q1_ROWS, ("5", "9.080", "11.0000")])
        assert sorted(texts(s, "SELECT * FROM q2")) == sorted([*Q2_ROWS, ("5", "9.080", "5.00", "10")])
        (res,) = s.execute("SELECT * FROM q1")
        assert [t.pg_typmod for _, t in res.columns] == [-1, -1, -1]  # PostgreSQL's typmod -1


def test_values_whose_scale_differs_per_row_keep_their_own_scale(s: Session) -> None:
    """Where PostgreSQL's scale depends on each value, so does piestream's (per-value-scale
    NUMERIC): a plain numeric column keeps what was written, a product the sum of its operands'
    scales, division and avg numeric.c's select_div_scale."""
    s.execute("CREATE TABLE t (x numeric)")
    s.execute("INSERT INTO t VALUES (1.50), (2)")
    assert sorted(texts(s, "SELECT x, x * 0.908 FROM t")) == [("1.50", "1.36200"), ("2", "1.816")]
    assert texts(s, "SELECT 2703 / 7.0, avg(x) FROM t") == [("386.1428571428571429", "1.7500000000000000")]
    assert texts(s, "SELECT CASE WHEN x > 1.6 THEN x * 1.0 ELSE 0.50 END FROM t ORDER BY x") == [
        ("0.50",),
        ("2.0",),
    ]


def test_constants_of_different_scales_are_different_expressions(s: Session) -> None:
    """``x * 1.0`` and ``x * 1.00`` print differently, so one does not stand for the other as a
    GROUP BY key or a DISTINCT's ORDER BY (PostgreSQL compares the constants byte for byte and
    refuses both queries); the same text still matches."""
    s.execute("CREATE TABLE t (x int)")
    s.execute("INSERT INTO t VALUES (2), (3), (2)")
    assert error(s, "SELECT x * 1.0 FROM t GROUP BY x * 1.00").sqlstate == "42803"
    assert error(s, "SELECT x * 1.00 FROM t GROUP BY x * 1.0").sqlstate == "42803"
    assert error(s, "SELECT DISTINCT x * 1.0 FROM t ORDER BY x * 1.00").sqlstate == "42P10"
    assert texts(s, "SELECT x * 1.00, count(*) FROM t GROUP BY x * 1.00 ORDER BY x * 1.00") == [
        ("2.00", "2"),
        ("3.00", "1"),
    ]
    assert texts(s, "SELECT DISTINCT x * 1.0 FROM t ORDER BY x * 1.0") == [("2.0",), ("3.0",)]


def test_constants_of_different_scales_differ_after_a_cast_to_double(s: Session) -> None:
    """Over a double column the constant is cast to double, and ``1.0`` and ``1.00`` become the
    same double; PostgreSQL still compares the NUMERIC constants under the cast, so ``f * 1.0``
    does not stand for ``GROUP BY f * 1.00`` (42803), while the same text still groups."""
    s.execute("CREATE TABLE d (f double precision)")
    s.execute("INSERT INTO d VALUES (2), (3), (2)")
    assert error(s, "SELECT f * 1.0 FROM d GROUP BY f * 1.00").sqlstate == "42803"
    assert error(s, "SELECT DISTINCT f * 1.0 FROM d ORDER BY f * 1.00").sqlstate == "42P10"
    assert texts(s, "SELECT f * 1.0, count(*) FROM d GROUP BY f * 1.0 ORDER BY f * 1.0") == [
        ("2", "2"),
        ("3", "1"),
    ]
    assert texts(s, "SELECT f FROM d WHERE f > 2.50 ORDER BY f") == [("3",)]
