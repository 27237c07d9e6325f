"""Aggregates with ORDER BY, DISTINCT and per-row delimiters, sum / avg of INTERVAL and min / max
of BYTEA: kept incrementally in a materialized view through inserts and deletes, and equal to
the batch query. The expected texts are what PostgreSQL 15 printed for the same data (min / max
of bytea, which PostgreSQL lacks, follow RisingWave: bytes in order)."""

from __future__ import annotations

import pytest

from piestream.common.errors import PiestreamError
from piestream.common.text import format_datum
from piestream.server.session import Session

QUERY = """SELECT k,
    string_agg(DISTINCT x, ',' ORDER BY x) AS s,
    string_agg(DISTINCT x, '|' ORDER BY x DESC) AS s2,
    string_agg(x, d ORDER BY y) AS s3,
    array_agg(x ORDER BY y DESC, x) AS a,
    array_agg(DISTINCT x ORDER BY x) AS a2,
    sum(iv) AS si,
    avg(iv) AS ai,
    min(b) AS lo,
    max(b) AS hi
FROM t GROUP BY k"""

# psql's rows, columns separated by tabs
FIRST = [
    "1\ta,b\tb|a\tb-a,b\t{b,a,b}\t{a,b}\t1 mon 1 day 02:00:00\t15 days 13:00:00\t\\x01\t\\x0203",
    "2\tc\tc\tc\t{c,NULL}\t{c,NULL}\t-1 mons +3 days 00:03:00\t-14 days +12:01:30\t\\x\t\\x00ff",
    "3\tz\tz\tz\t{z}\t{z}\t1 mon -2 days +03:00:00\t1 mon -2 days +03:00:00\t\\xff\t\\xff",
]
SECOND = [
    "1\ta,b\tb|a\tb-a\t{a,b}\t{a,b}\t1 mon 02:00:00\t1 mon 02:00:00\t\\x0203\t\\x0203",
    "2\ta,c\tc|a\tc*a\t{a,c,NULL}\t{a,c,NULL}\t-1 mons +3 days 01:03:00\t-9 days +00:21:00\t\\x\t\\x00ff",
    "3\ty,z\tz|y\tyz\t{z,y}\t{y,z}\t1 mon -2 days +03:00:00\t1 mon -2 days +03:00:00\t\\xff\t\\xff",
]


def texts(s: Session, sql: str) -> list[str]:
    """The rows as PostgreSQL's text, tab-separated, sorted (NULL is <null>)."""
    (res,) = s.execute(sql)
    types = [t for _, t in res.columns]
    out = [
        "\t".join(format_datum(v, t) if v is not None else "<null>" for v, t in zip(r, types, strict=True))
        for r in res.rows
    ]
    return sorted(out)


def test_ordered_distinct_and_interval_aggregates_in_a_view_and_in_batch(s: Session) -> None:
    s.execute("CREATE TABLE t (k int, x varchar, d varchar, y int, iv interval, b bytea)")
    s.execute(f"CREATE MATERIALIZED VIEW m AS {QUERY}")
    s.execute(
        "INSERT INTO t VALUES (1, 'b', ',', 3, interval '1 day', '\\x01'), "
        "(1, 'a', '-', 2, interval '2 hours 1 month', '\\x0203'), (1, 'b', ';', 1, NULL, NULL), "
        "(2, 'c', ';', 1, interval '3 minutes', '\\x'), "
        "(2, NULL, '+', 0, interval '-1 mon 3 days', '\\x00ff'), "
        "(3, 'z', NULL, 5, interval '1 mon -2 days 3 hours', '\\xff')"
    )
    assert texts(s, QUERY) == FIRST
    assert texts(s, "SELECT * FROM m") == FIRST
    s.execute("DELETE FROM t WHERE y = 3")
    s.execute(
        "INSERT INTO t VALUES (2, 'a', '*', 9, interval '1 hour', '\\x0001'), (3, 'y', '#', 4, NULL, NULL)"
    )
    assert texts(s, QUERY) == SECOND
    assert texts(s, "SELECT * FROM m") == SECOND
    # a view over no rows: every aggregate NULL (SimpleAgg) and back
    s.execute(
        "CREATE MATERIALIZED VIEW m0 AS SELECT sum(iv) AS si, avg(iv) AS ai, min(b) AS lo, "
        "string_agg(DISTINCT x, ',' ORDER BY x) AS s FROM t WHERE k > 2"
    )
    assert texts(s, "SELECT * FROM m0") == ["1 mon -2 days +03:00:00\t1 mon -2 days +03:00:00\t\\xff\ty,z"]
    s.execute("DELETE FROM t WHERE k = 3")
    assert texts(s, "SELECT * FROM m0") == ["\t".join(["<null>"] * 4)]


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        # PostgreSQL's rule: the sort keys of a DISTINCT aggregate are among its arguments
        ("SELECT string_agg(DISTINCT x, ',' ORDER BY y) FROM t", "42P10"),
        ("SELECT array_agg(DISTINCT x ORDER BY d) FROM t", "42P10"),
        # a per-row delimiter makes DISTINCT a question of (value, delimiter) pairs
        ("CREATE MATERIALIZED VIEW v AS SELECT string_agg(DISTINCT x, d ORDER BY x) FROM t", "0A000"),
        ("SELECT min(x::bool) FROM t", "42883"),
        ("SELECT sum(b) FROM t", "42883"),
    ],
)
def test_refused_aggregates(s: Session, sql: str, sqlstate: str) -> None:
    s.execute("CREATE TABLE t (k int, x varchar, d varchar, y int, iv interval, b bytea)")
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    assert info.value.sqlstate == sqlstate, info.value
