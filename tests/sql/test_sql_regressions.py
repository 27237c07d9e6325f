"""One test per bug the differential suite found (each fails without its fix)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from session_results import all_fail, rows

from piestream.common.errors import FeatureNotSupported
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session
from piestream.storage.hummock.compaction import CompactionConfig


def test_epochs_pin_the_version_they_read(tmp_path: Any) -> None:
    """Background compaction vacuumed SSTs an epoch's actors were still reading (object not found)."""
    cfg = DatabaseConfig(
        runner="local",
        barrier_interval=0.02,
        compaction=CompactionConfig(),
    )
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute(
            "CREATE TABLE t (k INT PRIMARY KEY, v BIGINT, name VARCHAR); CREATE TABLE u (a INT, b VARCHAR)"
        )
        for i in range(3):
            s.execute(f"INSERT INTO t VALUES ({i}, {i * 10}, 'a'), ({i + 10}, 5, 'b')")
        for i in range(6):
            s.execute(
                f"CREATE MATERIALIZED VIEW mv{i} AS SELECT name, count(*) AS c, sum(v) AS s "
                "FROM t JOIN u ON t.k = u.a GROUP BY name"
            )
        for i in range(3):
            s.execute(f"INSERT INTO u VALUES ({i}, 'x')")
        s.execute("UPDATE t SET v = v + 1 WHERE k < 5")
        assert rows(s, "SELECT name, c, s FROM mv5") == [("a", 3, 33)]


def test_insert_values_resolves_untyped_literals_by_target_column(s: Session) -> None:
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, ts TIMESTAMP, d DATE, b BOOLEAN)")
    s.execute("INSERT INTO t VALUES (1, '2024-01-01 00:10:00', '2024-01-02', 'true'), (2, NULL, NULL, NULL)")
    assert rows(s, "SELECT * FROM t") == [
        (1, dt.datetime(2024, 1, 1, 0, 10), dt.date(2024, 1, 2), True),
        (2, None, None, None),
    ]


def test_aggregate_inside_scalar_subquery_does_not_group_the_outer_query(s: Session) -> None:
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 10), (2, 20)")
    q = "SELECT k, (SELECT max(v) FROM t) AS m, (SELECT count(*) FROM t t2 WHERE t2.v = t.k * 10) AS c FROM t"
    assert rows(s, q) == [(1, 20, 1), (2, 20, 1)]
    s.execute(f"CREATE MATERIALIZED VIEW mv AS {q}")
    assert rows(s, "SELECT * FROM mv") == [(1, 20, 1), (2, 20, 1)]


def test_is_not_null(s: Session) -> None:
    """sqlglot parses `x IS NOT NULL` as Is(negate=True): it was bound as IS NULL."""
    s.execute("CREATE TABLE t (g INT, i INT); INSERT INTO t VALUES (NULL, 4), (1, 3), (1, 1)")
    assert rows(s, "SELECT i FROM t WHERE g IS NOT NULL") == [(1,), (3,)]
    assert rows(s, "SELECT i FROM t WHERE NOT (g IS NOT NULL)") == [(4,)]
    s.execute("DELETE FROM t WHERE g IS NOT NULL")
    assert rows(s, "SELECT i FROM t") == [(4,)]


def test_join_on_one_column_equal_to_two_columns(s: Session) -> None:
    """`a.g = b.i AND a.g = b.g` made the left key (g, g): the exchange hashed both, the join's
    state table only one, and rows landed on actors that do not own their vnode."""
    s.execute("CREATE TABLE t (g INT, i INT)")
    s.execute(
        "CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n "
        "FROM t AS a JOIN t AS b ON a.g = b.i AND a.g = b.g"
    )
    for g, i in [(3, -2), (3, 3), (None, -2), (0, 0), (1, -2), (2, 4), (4, -2), (4, 0), (None, 3)]:
        s.execute(f"INSERT INTO t VALUES ({'NULL' if g is None else g}, {i})")
    assert rows(s, "SELECT n FROM mv") == [(3,)]


CORRELATED = (
    "SELECT a.k, (SELECT count(*) + 1 FROM u b WHERE b.g = a.g) AS c1, "
    "(SELECT count(b.i) FILTER (WHERE b.i > 10) * 2 FROM u b WHERE b.g = a.g) AS c2, "
    "(SELECT coalesce(sum(b.i), a.v) FROM u b WHERE b.g = a.g) AS c3, "
    "(SELECT count(*) FROM u b WHERE b.g = a.g) AS c4, "
    "(SELECT max(b.i) FROM u b WHERE b.g = a.g) AS c5 FROM t a"
)


def test_correlated_aggregate_subquery_over_no_rows(s: Session) -> None:
    """An outer row without inner rows sees count(*) = 0 inside any expression (count(*) + 1 was
    NULL), and outer columns may appear next to the aggregates (they failed at run time)."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT); CREATE TABLE u (g INT, i INT)")
    s.execute(f"CREATE MATERIALIZED VIEW mv AS {CORRELATED}")
    s.execute("INSERT INTO t VALUES (1, 1, 5), (2, 2, NULL), (3, NULL, 7)")
    s.execute("INSERT INTO u VALUES (1, 10), (1, 20), (3, 5)")
    want = [(1, 3, 2, 30, 2, 20), (2, 1, 0, None, 0, None), (3, 1, 0, 7, 0, None)]
    assert rows(s, "SELECT * FROM mv") == want
    assert rows(s, CORRELATED) == want


def test_outer_column_inside_correlated_aggregate_is_rejected_at_create(s: Session) -> None:
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT); CREATE TABLE u (g INT, i INT)")
    with pytest.raises(FeatureNotSupported):
        s.execute(
            "CREATE MATERIALIZED VIEW mv AS SELECT (SELECT sum(b.i * a.v) FROM u b WHERE b.g = a.g) FROM t a"
        )
    assert rows(s, "SHOW MATERIALIZED VIEWS") == []


def test_self_semi_join_on_the_key(s: Session) -> None:
    """Both sides read the table's change stream inside one fragment: each got both copies
    (StateConsistencyError: double insert)."""
    s.execute("CREATE TABLE t (k VARCHAR PRIMARY KEY, g INT)")
    s.execute(
        "CREATE MATERIALIZED VIEW mv AS SELECT a.g FROM t AS a "
        "WHERE EXISTS (SELECT 1 FROM t AS b WHERE b.k = a.k AND a.k LIKE '_')"
    )
    s.execute("CREATE MATERIALIZED VIEW mv2 AS SELECT a.g, b.g AS g2 FROM t AS a JOIN t AS b ON a.k = b.k")
    s.execute("INSERT INTO t VALUES ('x', 0), ('yy', 1)")
    assert rows(s, "SELECT * FROM mv") == [(0,)]
    assert rows(s, "SELECT * FROM mv2") == [(0, 0), (1, 1)]


def test_join_of_a_singleton_side_and_a_table_scan(s: Session) -> None:
    """A singleton input (here a join on columns of different types) 'satisfied' the hash
    distribution of the other side's no-shuffle table scan; the fragment mixed parallelism 1 and
    2 (epoch job ended with a chunk for an actor that does not exist)."""
    s.execute(
        "CREATE TABLE t0 (k VARCHAR PRIMARY KEY, g BIGINT, n NUMERIC);"
        "CREATE TABLE t2 (k INT, g INT, v VARCHAR)"
    )
    s.execute("CREATE VIEW v0 AS SELECT a1.v AS c1 FROM t2 AS a1 RIGHT JOIN t0 AS a2 ON a1.g = a2.g")
    s.execute("CREATE MATERIALIZED VIEW mv AS SELECT b.n, b.k FROM v0 AS a RIGHT JOIN t0 AS b ON a.c1 = b.k")
    s.execute("INSERT INTO t0 VALUES ('k2', 7, 1), ('k3', 7, 2)")
    s.execute("INSERT INTO t2 VALUES (9, 7, 'k2')")
    assert rows(s, "SELECT * FROM mv") == [(1, "k2"), (1, "k2"), (2, "k3")]


def test_join_with_a_single_actor_mv(s: Session) -> None:
    """A TopN MV lives in one actor though keyed by a column; scanning it as hash-distributed put
    it next to a two-actor table scan in one fragment."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    s.execute("CREATE MATERIALIZED VIEW top AS SELECT k, v FROM t ORDER BY v DESC, k LIMIT 2")
    s.execute("CREATE MATERIALIZED VIEW mv AS SELECT t.k, t.v, top.v AS tv FROM t JOIN top ON t.k = top.k")
    s.execute("INSERT INTO t VALUES (1, 10), (2, 20), (3, 30), (4, 5)")
    assert rows(s, "SELECT * FROM mv") == [(2, 20, 20), (3, 30, 30)]
    s.execute("DELETE FROM t WHERE k = 3")
    assert rows(s, "SELECT * FROM mv") == [(1, 10, 10), (2, 20, 20)]


def test_window_values_selected_in_an_mv(s: Session) -> None:
    """ROW_NUMBER() selected next to its <= N filter failed with 0A000; rank() / dense_rank() in
    an MV too. Now an OverWindow (over a GroupTopN when the filter allows) maintains them."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT)")
    top = (
        "SELECT k, g, v, rn FROM (SELECT k, g, v, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v DESC) AS rn "
        "FROM t) s WHERE rn <= 2"
    )
    ranks = (
        "SELECT k, g, v, rank() OVER (PARTITION BY g ORDER BY v) AS r, "
        "dense_rank() OVER (PARTITION BY g ORDER BY v) AS dr FROM t"
    )
    s.execute(f"CREATE MATERIALIZED VIEW m1 AS {top}")
    s.execute(f"CREATE MATERIALIZED VIEW m2 AS {ranks}")
    s.execute("INSERT INTO t VALUES (1, 1, 10), (2, 1, 20), (3, 1, 20), (4, 2, 5), (5, 1, 30)")
    assert rows(s, "SELECT * FROM m1") == [(2, 1, 20, 2), (4, 2, 5, 1), (5, 1, 30, 1)]
    assert rows(s, "SELECT * FROM m2") == [
        (1, 1, 10, 1, 1),
        (2, 1, 20, 2, 2),
        (3, 1, 20, 2, 2),
        (4, 2, 5, 1, 1),
        (5, 1, 30, 4, 3),
    ]
    s.execute("DELETE FROM t WHERE k = 5")
    s.execute("UPDATE t SET v = 1 WHERE k = 1")
    assert rows(s, "SELECT * FROM m1") == [(2, 1, 20, 1), (3, 1, 20, 2), (4, 2, 5, 1)]
    assert rows(s, "SELECT * FROM m2") == [
        (1, 1, 1, 1, 1),
        (2, 1, 20, 2, 2),
        (3, 1, 20, 2, 2),
        (4, 2, 5, 1, 1),
    ]
    assert rows(s, "SELECT * FROM m1") == rows(s, top)
    assert rows(s, "SELECT * FROM m2") == rows(s, ranks)


def test_backfill_of_two_scans_in_one_fragment(s: Session) -> None:
    """A join on both tables' keys needs no exchange: both backfills run in one actor, and the
    second skipped its snapshot (the 'done' flag was one per actor). The MV missed old rows."""
    s.execute("CREATE TABLE a (k VARCHAR PRIMARY KEY, g INT); CREATE TABLE b (k VARCHAR PRIMARY KEY, h INT)")
    s.execute("INSERT INTO a VALUES ('k8', 0), ('k1', 3); INSERT INTO b VALUES ('k8', 30), ('k1', 31)")
    s.execute("CREATE MATERIALIZED VIEW j AS SELECT a.g, b.h FROM a JOIN b ON a.k = b.k")
    s.execute("CREATE MATERIALIZED VIEW r AS SELECT a.g, b.h FROM a RIGHT JOIN b ON a.k = b.k AND a.g > 0")
    assert rows(s, "SELECT * FROM j") == [(0, 30), (3, 31)]
    assert rows(s, "SELECT * FROM r") == [(3, 31), (None, 30)]
    s.execute("INSERT INTO b VALUES ('k9', 32); INSERT INTO a VALUES ('k9', 5)")
    assert rows(s, "SELECT * FROM j") == [(0, 30), (3, 31), (5, 32)]
    assert rows(s, "SELECT * FROM r") == [(3, 31), (5, 32), (None, 30)]


def test_correlated_aggregate_with_conditions_on_the_outer_row(s: Session) -> None:
    """WHERE conjuncts of a correlated aggregate subquery that use only outer columns were 0A000;
    where they fail the subquery sees no rows (count 0, other aggregates NULL)."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT); CREATE TABLE u (g INT, i INT)")
    q = (
        "SELECT a.k, (SELECT count(*) FROM u b WHERE a.v > 3) AS c1, "
        "(SELECT sum(b.i) + 1 FROM u b WHERE b.g = a.g AND a.v > 3) AS c2, "
        "(SELECT count(*) + a.k FROM u b WHERE b.g = a.g AND a.v IS NOT NULL) AS c3 FROM t a"
    )
    s.execute(f"CREATE MATERIALIZED VIEW m AS {q}")
    s.execute("INSERT INTO t VALUES (1, 1, 5), (2, 2, NULL), (3, NULL, 7), (4, 1, 0)")
    s.execute("INSERT INTO u VALUES (1, 10), (1, 20), (3, 5), (NULL, 1)")
    want = [(1, 4, 31, 3), (2, 0, None, 2), (3, 4, None, 3), (4, 0, None, 6)]
    assert rows(s, "SELECT * FROM m") == want
    assert rows(s, q) == want


def test_join_with_an_aggregate_over_a_single_actor_mv(s: Session) -> None:
    """An aggregation over a one-actor input needed no shuffle but claimed hash(group) as its
    distribution: a join then put that one-actor fragment next to a two-actor table scan
    (epoch job ended with a chunk for an actor that does not exist)."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    s.execute("CREATE MATERIALIZED VIEW top AS SELECT k, v FROM t ORDER BY v, k LIMIT 3")
    s.execute(
        "CREATE MATERIALIZED VIEW mv AS SELECT t.k, c.n FROM t "
        "JOIN (SELECT k, count(*) AS n FROM top GROUP BY k) AS c ON t.k = c.k"
    )
    s.execute("INSERT INTO t VALUES (1, 10), (2, 20), (3, 30), (4, 5)")
    assert rows(s, "SELECT * FROM mv") == [(1, 1), (2, 1), (4, 1)]
    s.execute("DELETE FROM t WHERE k = 4")
    assert rows(s, "SELECT * FROM mv") == [(1, 1), (2, 1), (3, 1)]


def test_scalar_subquery_in_an_mv_returns_at_most_one_row(s: Session) -> None:
    """(SELECT a FROM u) in an MV duplicated the outer rows once u had two rows, where the query
    fails with 21000: such MVs are refused at CREATE; aggregates and LIMIT 1 are fine."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE TABLE u (a INT)")
    with pytest.raises(FeatureNotSupported):
        s.execute("CREATE MATERIALIZED VIEW bad AS SELECT k, (SELECT a FROM u) AS s FROM t")
    s.execute("CREATE MATERIALIZED VIEW m1 AS SELECT k, (SELECT max(a) FROM u) AS s FROM t")
    s.execute("CREATE MATERIALIZED VIEW m2 AS SELECT k, (SELECT a FROM u ORDER BY a LIMIT 1) AS s FROM t")
    s.execute("INSERT INTO t VALUES (1, 10); INSERT INTO u VALUES (5), (6)")
    assert rows(s, "SELECT * FROM m1") == [(1, 6)]
    assert rows(s, "SELECT * FROM m2") == [(1, 5)]


def test_window_over_rows_with_array_values(s: Session) -> None:
    """OverWindow compared rows in sets: an array column (from array_agg) was unhashable."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT)")
    s.execute("CREATE MATERIALIZED VIEW a AS SELECT g, array_agg(k ORDER BY k) AS ks FROM t GROUP BY g")
    s.execute("CREATE MATERIALIZED VIEW w AS SELECT g, ks, rank() OVER (ORDER BY g) AS r FROM a")
    s.execute("INSERT INTO t VALUES (1, 1), (2, 1), (3, 2)")
    assert rows(s, "SELECT * FROM w") == [(1, [1, 2], 1), (2, [3], 2)]
    s.execute("DELETE FROM t WHERE k = 1")
    assert rows(s, "SELECT * FROM w") == [(1, [2], 1), (2, [3], 2)]


def test_top_n_over_rows_with_array_values(s: Session) -> None:
    """TopN compared rows in sets too: an array column made every epoch fail."""
    s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT)")
    s.execute("CREATE MATERIALIZED VIEW a AS SELECT g, array_agg(k ORDER BY k) AS ks FROM t GROUP BY g")
    s.execute("CREATE MATERIALIZED VIEW w AS SELECT g, ks FROM a ORDER BY g LIMIT 1")
    s.execute("INSERT INTO t VALUES (1, 1), (2, 1), (3, 2)")
    assert rows(s, "SELECT * FROM w") == [(1, [1, 2])]
    s.execute("DELETE FROM t WHERE k = 1")
    assert rows(s, "SELECT * FROM w") == [(1, [2])]


def test_group_by_matches_numeric_literals_by_their_written_scale(s: Session) -> None:
    """`x * 1.0` was accepted under `GROUP BY x * 1.00` (the bound literals held equal values);
    PostgreSQL compares constants with their scale and refuses it with 42803. Beside
    test_sql_numeric_display_scale's case: HAVING, CREATE MATERIALIZED VIEW, ordinals, aliases,
    and both spellings grouped, each column keeping its scale in batch and in an MV."""
    s.execute("CREATE TABLE t (x INT, n NUMERIC); INSERT INTO t VALUES (1, 1.5), (1, 2.5), (2, 1.5)")
    refused = (
        "SELECT x * 1.0 FROM t GROUP BY x * 1.00",
        "SELECT x * 1.00 FROM t GROUP BY x * 1.0",
        "SELECT n + 1.0 FROM t GROUP BY n + 1",
        "SELECT count(*) FROM t GROUP BY n * 2.50 HAVING n * 2.5 > 0",
        "CREATE MATERIALIZED VIEW bad AS SELECT x * 1.0 AS y FROM t GROUP BY x * 1.00",
    )
    all_fail(s, refused, "42803", "must appear in the GROUP BY clause")
    # the same text, an ordinal, an alias, and both spellings grouped: accepted, each with its scale
    two = [(Decimal(1),), (Decimal(2),)]
    for sql in (
        "SELECT x * 1.0 FROM t GROUP BY x * 1.0",
        "SELECT x * 1.0 FROM t GROUP BY 1",
        "SELECT x * 1.0 AS y FROM t GROUP BY y",
    ):
        assert rows(s, sql) == two, sql
    both = "SELECT x * 1.0 AS a, x * 1.00 AS b, count(*) AS c FROM t GROUP BY x * 1.0, x * 1.00"
    assert [t.display_scale for _, t in s.execute(both)[-1].columns] == [1, 2, None]
    assert rows(s, both) == [(Decimal(1), Decimal(1), 2), (Decimal(2), Decimal(2), 1)]
    s.execute(f"CREATE MATERIALIZED VIEW mv AS {both}")
    s.execute("INSERT INTO t VALUES (3, 0)")
    assert [t.display_scale for _, t in s.execute("SELECT * FROM mv")[-1].columns] == [1, 2, None]
    assert (
        rows(s, "SELECT * FROM mv")
        == rows(s, both)
        == [
            (Decimal(1), Decimal(1), 2),
            (Decimal(2), Decimal(2), 1),
            (Decimal(3), Decimal(3), 1),
        ]
    )
    q = "SELECT n * 2.50 AS m FROM t GROUP BY n * 2.50 HAVING n * 2.50 > 0 ORDER BY n * 2.50"
    assert s.execute(q)[-1].rows == [(Decimal("3.75"),), (Decimal("6.25"),)]
