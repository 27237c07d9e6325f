"""One test per bug the differential suite found (each fails without its fix)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session
from piestream.storage.hummock.compaction import CompactionConfig


def rows(s: Session, sql: str) -> list[tuple[Any, ...]]:
    return sorted(s.execute(sql)[-1].rows, key=repr)


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
