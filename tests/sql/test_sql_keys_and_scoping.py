"""Outer-join stream keys, relation column names and FROM-clause scoping (issue 14, part B items
5 and 6): PostgreSQL's rows, names and SQLSTATEs, and the shapes against DuckDB through DML rounds
in MVs and in batch."""

from __future__ import annotations

from session_results import all_fail, error, rows
from sqldiff import check_cases_with_rounds

from piestream.server.session import Session

# -- outer joins whose sides' keys can be NULL ---------------------------------------------------

FULL_DISTINCT = (
    "SELECT x.a AS xa, y.a AS ya FROM (SELECT DISTINCT a FROM t1) x FULL JOIN (SELECT DISTINCT a FROM t2) y "
    "ON x.a = y.a"
)


def test_full_join_of_distinct_nulls_keeps_both_padded_rows(s: Session) -> None:
    """Each side's NULL group is padded: PostgreSQL gives 2 rows; the MV gave 1 (both padded rows
    had stream key (NULL, NULL)), or failed with a double insert."""
    s.execute("CREATE TABLE t1 (a INT); CREATE TABLE t2 (a INT)")
    s.execute(f"CREATE MATERIALIZED VIEW mv AS {FULL_DISTINCT}")
    s.execute("INSERT INTO t1 VALUES (NULL); INSERT INTO t2 VALUES (NULL)")
    want = [(None, None), (None, None)]
    assert rows(s, "SELECT * FROM mv") == want
    assert rows(s, FULL_DISTINCT) == want
    s.execute("INSERT INTO t1 VALUES (1), (2); INSERT INTO t2 VALUES (1), (NULL)")
    want = [(1, 1), (2, None), (None, None), (None, None)]
    assert rows(s, "SELECT * FROM mv") == want
    s.execute("DELETE FROM t1 WHERE a IS NULL")
    assert rows(s, "SELECT * FROM mv") == [(1, 1), (2, None), (None, None)]


def test_full_join_of_scalar_aggregates(s: Session) -> None:
    """Both sides without a stream key (one row each): the padded rows of either side differ."""
    s.execute("CREATE TABLE t1 (a INT); CREATE TABLE t2 (a INT)")
    q = (
        "SELECT x.c AS xc, y.m AS ym FROM (SELECT count(*) AS c FROM t1) x "
        "FULL JOIN (SELECT max(a) AS m FROM t2) y ON x.c = y.m"
    )
    s.execute(f"CREATE MATERIALIZED VIEW mv AS {q}")
    assert rows(s, "SELECT * FROM mv") == [(0, None), (None, None)]
    s.execute("INSERT INTO t2 VALUES (1); INSERT INTO t1 VALUES (7)")
    assert rows(s, "SELECT * FROM mv") == [(1, 1)] == rows(s, q)


def test_right_join_of_table_without_pk_against_scalar_aggregate(s: Session) -> None:
    """CREATE failed with XX000 'a generated row id is never NULL': the padded row id was the
    whole stream key and the distribution key of the MV."""
    s.execute("CREATE TABLE t1 (a INT); CREATE TABLE t3 (a INT, b INT)")
    q = "SELECT t3.a, t3.b, q.c FROM t3 RIGHT JOIN (SELECT count(*) AS c FROM t1) q ON t3.a = q.c"
    s.execute(f"CREATE MATERIALIZED VIEW mv AS {q}")
    assert rows(s, "SELECT * FROM mv") == [(None, None, 0)]
    s.execute("INSERT INTO t3 VALUES (1, 10), (1, 11), (2, 20); INSERT INTO t1 VALUES (5)")
    assert rows(s, "SELECT * FROM mv") == [(1, 10, 1), (1, 11, 1)] == rows(s, q)
    q2 = "SELECT q.c, t3.b FROM (SELECT count(*) AS c FROM t1) q LEFT JOIN t3 ON q.c + 1 = t3.a"
    s.execute(f"CREATE MATERIALIZED VIEW mv2 AS {q2}")
    assert rows(s, "SELECT * FROM mv2") == [(1, 20)] == rows(s, q2)
    s.execute("DELETE FROM t3 WHERE a = 2")
    assert rows(s, "SELECT * FROM mv2") == [(1, None)] == rows(s, q2)


OUTER_SCHEMA = [
    "CREATE TABLE t1 (id INT PRIMARY KEY, g INT, v INT)",
    "CREATE TABLE t2 (g INT, w INT)",
]
D1, D2 = "(SELECT DISTINCT g FROM t1)", "(SELECT DISTINCT g FROM t2)"
OUTER_CASES = [
    (
        "full_distinct",
        f"SELECT x.g AS xg, y.g AS yg FROM {D1} x FULL JOIN {D2} y ON x.g = y.g",
        None,
    ),
    (
        "full_groups",
        "SELECT x.g AS xg, x.n, y.g AS yg, y.s FROM (SELECT g, count(*) AS n FROM t1 GROUP BY g) x "
        "FULL JOIN (SELECT g, sum(w) AS s FROM t2 GROUP BY g) y ON x.g = y.g",
        None,
    ),
    (
        "full_union",
        "SELECT x.g AS xg, y.g AS yg FROM (SELECT g FROM t1 UNION SELECT g FROM t2) x "
        "FULL JOIN (SELECT DISTINCT g FROM t2) y ON x.g = y.g",
        None,
    ),
    (
        "full_null_safe",
        f"SELECT x.g AS xg, y.g AS yg FROM {D1} x FULL JOIN {D2} y ON x.g IS NOT DISTINCT FROM y.g",
        None,
    ),
    (
        "full_residual",
        f"SELECT x.g AS xg, y.g AS yg FROM {D1} x FULL JOIN {D2} y ON x.g = y.g AND x.g > 1",
        None,
    ),
    (
        "left_distinct",
        f"SELECT x.g AS xg, y.g AS yg FROM {D1} x LEFT JOIN {D2} y ON x.g = y.g",
        None,
    ),
    (
        "right_scalar",
        "SELECT t2.g, t2.w, q.c FROM t2 RIGHT JOIN (SELECT count(*) AS c FROM t1) q ON t2.g = q.c",
        None,
    ),
    (
        "full_scalar_rowid",
        "SELECT t2.g, t2.w, q.c FROM t2 FULL JOIN (SELECT count(*) AS c FROM t1) q ON t2.g + 0 = q.c",
        None,
    ),
]
OUTER_ROUNDS = [
    ["INSERT INTO t1 VALUES (1, NULL, 1), (2, 1, 2)", "INSERT INTO t2 VALUES (NULL, 5), (3, 6)"],
    ["INSERT INTO t1 VALUES (3, 3, 1), (4, NULL, 9)", "INSERT INTO t2 VALUES (NULL, 7), (2, 1)"],
    ["DELETE FROM t1 WHERE g IS NULL", "UPDATE t2 SET g = 1 WHERE g = 3"],
    ["DELETE FROM t2 WHERE g IS NULL", "INSERT INTO t1 VALUES (5, NULL, 0)"],
    ["DELETE FROM t2", "UPDATE t1 SET g = NULL WHERE id = 2"],
]


def test_outer_joins_with_nullable_keys_equal_duckdb(s: Session) -> None:
    nonempty = check_cases_with_rounds(s, OUTER_SCHEMA, OUTER_CASES, OUTER_ROUNDS)
    assert nonempty == {name for name, _, _ in OUTER_CASES}


# -- column names of relations ------------------------------------------------------------------


def test_duplicate_column_names(s: Session) -> None:
    """A plain SELECT may repeat a name; a view or MV may not (the MV got a renamed `k_1`)."""
    s.execute("CREATE TABLE t (k INT, v INT); CREATE TABLE u (k INT, w INT)")
    res = s.execute("SELECT * FROM t JOIN u ON t.k = u.k")[-1]
    assert res.names == ["k", "v", "k", "w"]
    duplicated = (
        "CREATE MATERIALIZED VIEW mv AS SELECT * FROM t JOIN u ON t.k = u.k",
        "CREATE VIEW v AS SELECT 1 AS a, 2 AS a",
        "CREATE MATERIALIZED VIEW mv (a, a) AS SELECT 1, 2",
        "CREATE TABLE x (a INT, a INT)",
    )
    all_fail(s, duplicated, "42701", "specified more than once")
    assert rows(s, "SHOW MATERIALIZED VIEWS") == []


def test_materialized_view_column_list(s: Session) -> None:
    s.execute("CREATE TABLE t (k INT, v INT); INSERT INTO t VALUES (1, 2)")
    s.execute("CREATE MATERIALIZED VIEW mv (a, b) AS SELECT k, v FROM t")
    res = s.execute("SELECT * FROM mv")[-1]
    assert res.names == ["a", "b"] and res.rows == [(1, 2)]
    s.execute("CREATE MATERIALIZED VIEW mv1 (a) AS SELECT k, v FROM t")  # fewer: the rest keep names
    assert s.execute("SELECT * FROM mv1")[-1].names == ["a", "v"]
    e = error(s, "CREATE MATERIALIZED VIEW mv2 (a, b, c) AS SELECT k, v FROM t")
    assert (e.sqlstate, str(e)) == ("42601", "too many column names were specified")
    e = error(s, "CREATE VIEW v2 (a, b, c) AS SELECT k, v FROM t")
    assert (e.sqlstate, str(e)) == ("42601", "CREATE VIEW specifies more column names than columns")


# -- scoping ------------------------------------------------------------------------------------

Q5_RW = """SELECT AuctionBids.auction, AuctionBids.num FROM (
    SELECT bid.auction, count(*) AS num, window_start AS starttime
    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
    GROUP BY window_start, bid.auction
) AS AuctionBids
JOIN (
    SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM (
        SELECT count(*) AS num, window_start AS starttime_c
        FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
        GROUP BY bid.auction, window_start
    ) AS CountBids
    GROUP BY CountBids.starttime_c
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn"""


def test_window_table_functions_keep_the_relation_name(s: Session) -> None:
    """RisingWave's Nexmark q5 text (`bid.auction` inside `FROM HOP(bid, ...)`) was refused with
    'missing FROM-clause entry for table "bid"'."""
    s.execute("CREATE TABLE bid (auction INT, price INT, date_time TIMESTAMP)")
    s.execute(f"CREATE MATERIALIZED VIEW q5 AS {Q5_RW}")
    s.execute(
        "INSERT INTO bid VALUES (1, 10, '2024-01-01 00:00:01'), (1, 11, '2024-01-01 00:00:03'), "
        "(2, 12, '2024-01-01 00:00:03')"
    )
    assert rows(s, "SELECT * FROM q5") == rows(s, Q5_RW)
    assert len(rows(s, "SELECT * FROM q5")) == 7  # windows starting -6s..+2s, auction 1 leads each
    t = (
        "SELECT tb.auction, window_end FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) AS tb "
        "WHERE price > 10"
    )
    assert len(rows(s, t)) == 2
    e = error(s, "SELECT bid.auction FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) AS tb")
    assert e.sqlstate == "42P01"  # an alias hides the relation's name, as for tables


CORR_SCHEMA = ["CREATE TABLE t1 (x INT, y INT)", "CREATE TABLE t2 (x INT, z INT)"]
CORR_CASES = [
    (
        "exists_nd",
        "SELECT x, y FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.x IS NOT DISTINCT FROM t1.x)",
        None,
    ),
    (
        "not_exists_nd",
        "SELECT x, y FROM t1 WHERE NOT EXISTS "
        "(SELECT 1 FROM t2 WHERE t2.x IS NOT DISTINCT FROM t1.x AND t2.z > 0)",
        None,
    ),
    (
        "exists_nd_alias",
        "SELECT a.y FROM (SELECT DISTINCT x, y FROM t1) AS a "
        "WHERE EXISTS (SELECT 1 FROM t2 AS b WHERE b.x IS NOT DISTINCT FROM a.x)",
        None,
    ),
    (
        "scalar_nd",
        "SELECT x, y, (SELECT count(*) FROM t2 WHERE t2.x IS NOT DISTINCT FROM t1.x) AS c, "
        "(SELECT sum(z) FROM t2 WHERE t2.x IS NOT DISTINCT FROM t1.x) AS s FROM t1",
        None,
    ),
]
CORR_ROUNDS = [
    ["INSERT INTO t1 VALUES (1, 1), (NULL, 2), (3, 3)", "INSERT INTO t2 VALUES (1, 1), (NULL, 2)"],
    ["INSERT INTO t2 VALUES (NULL, -1), (3, 0)", "DELETE FROM t1 WHERE x = 1"],
    ["DELETE FROM t2 WHERE x IS NULL", "INSERT INTO t1 VALUES (NULL, 5)"],
]


def test_correlated_is_not_distinct_from_equals_duckdb(s: Session) -> None:
    """EXISTS / NOT EXISTS / scalar subqueries correlated by IS NOT DISTINCT FROM, in MVs."""
    nonempty = check_cases_with_rounds(s, CORR_SCHEMA, CORR_CASES, CORR_ROUNDS)
    assert nonempty == {name for name, _, _ in CORR_CASES}


def test_correlated_subquery_in_from_is_refused(s: Session) -> None:
    """A derived table reading an outer column failed with XX001 (an OuterRef reached the plan)."""
    s.execute("CREATE TABLE t1 (x INT); CREATE TABLE t2 (x INT)")
    e = error(
        s,
        "CREATE MATERIALIZED VIEW mv AS SELECT x FROM t1 WHERE EXISTS "
        "(SELECT 1 FROM (SELECT * FROM t2 WHERE t2.x = t1.x) q)",
    )
    assert e.sqlstate == "0A000"
