"""GROUPING SETS / ROLLUP / CUBE and GROUPING(...) against DuckDB: materialized views equal the
query at every committed epoch under random INSERT / UPDATE / DELETE (NULL group values, sets
repeated, the empty set over an emptied table included), batch SELECT equals it too, and the
forms PostgreSQL refuses are refused with its SQLSTATEs."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from paired import DmlGen, Paired, open_db, plan_nodes

from piestream.common.errors import PiestreamError
from piestream.plan.expand import ExpandNode
from piestream.server.database import Database

QUERIES = {
    "gs": "SELECT a, b, grouping(a, b) AS g, count(*) AS c, sum(v) AS s "
    "FROM t GROUP BY GROUPING SETS ((a, b), (a), ())",
    "rollup": "SELECT a, b, count(v) AS c, min(s) AS m FROM t GROUP BY ROLLUP (a, b)",
    "cube": "SELECT a, s, grouping(s) AS gs, grouping(a, s) AS g, max(v) AS m FROM t "
    "GROUP BY CUBE (a, s) HAVING grouping(a, s) <> 1 AND count(*) > 1",
    # repeated sets give repeated rows; a plain item crosses with a ROLLUP
    "dup": "SELECT a, count(*) AS c FROM t GROUP BY GROUPING SETS ((a), (a), (), ())",
    "crossed": "SELECT a, b % 2 AS bm, sum(v) AS s FROM t GROUP BY a, ROLLUP (b % 2)",
    # the primary key rolled up (the Expand keeps the key it NULLs)
    "pk": "SELECT id, count(*) AS c, sum(v) AS s FROM t GROUP BY ROLLUP (id)",
}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "db")
    yield d
    d.close()


def _dml(rng: random.Random) -> DmlGen:
    def a() -> int | None:
        return None if rng.random() < 0.1 else rng.randint(0, 3)

    def s() -> str | None:
        return None if rng.random() < 0.1 else rng.choice(["x", "y", "zz"])

    columns = {"a": a, "b": a, "s": s, "v": lambda: rng.randint(-5, 99)}
    return DmlGen(rng, "t", columns, updates=("a", "b", "s", "v = v + 1"))


def test_grouping_sets_equal_duckdb_at_every_epoch(tmp_path: Path) -> None:
    both = Paired(tmp_path / "db")
    db = both.db
    try:
        dml = _dml(random.Random(32))
        both.start("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, s VARCHAR, v INT)", dml, QUERIES)
        for step in range(24):
            if step == 23:  # everything deleted: the empty set's row stays, counting 0
                sql = "DELETE FROM t"
                dml.live.clear()
            else:
                sql = dml.statement()
            both.run(sql)
            for name, q in QUERIES.items():
                want = both.duck_rows(q)
                assert both.rows(f"SELECT * FROM {name}") == want, (name, step, sql)
                if step % 8 == 7:
                    assert both.rows(q) == want, (name, step)
        assert db.execute("SELECT * FROM dup")[0].rows == [(None, 0), (None, 0)]
        assert any(isinstance(n, ExpandNode) for n in plan_nodes(db, "rollup"))
    finally:
        both.close()


def test_grouping_sets_golden_rows_explain_and_errors(db: Database) -> None:
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, s VARCHAR, v INT)")
    db.execute("INSERT INTO t VALUES (1, 1, 1, 'x', 10), (2, 1, NULL, 'y', 20), (3, 2, 2, 'x', 5)")
    rows = db.execute(
        "SELECT a, b, grouping(a, b) AS g, grouping(b, a) AS g2, count(*) FROM t "
        "GROUP BY ROLLUP (a, b) ORDER BY g, a, b"
    )[0].rows
    assert rows == [
        (1, 1, 0, 0, 1),
        (1, None, 0, 0, 1),  # b really NULL: GROUPING says grouped
        (2, 2, 0, 0, 1),
        (1, None, 1, 2, 2),
        (2, None, 1, 2, 1),
        (None, None, 3, 3, 3),
    ]
    # no grouping sets: GROUPING is 0; an empty table still has the () row
    assert db.execute("SELECT a, grouping(a) FROM t GROUP BY a ORDER BY a")[0].rows == [(1, 0), (2, 0)]
    assert db.execute("SELECT count(*) FROM t WHERE v > 99 GROUP BY ROLLUP (a)")[0].rows == [(0,)]
    assert db.execute("SELECT count(*) FROM t GROUP BY ()")[0].rows == [(3,)]
    lines = [r[0] for r in db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {QUERIES['rollup']}")[0].rows]
    assert any("Expand { column_subsets: [[$0, $1], [$0]] }" in line for line in lines)
    lines = [r[0] for r in db.execute(f"EXPLAIN {QUERIES['gs']}")[0].rows]
    assert any("BatchExpand { column_subsets: [[$0, $1], [$0]] }" in line for line in lines)
    refused = [
        ("SELECT grouping(v) FROM t GROUP BY ROLLUP (a)", "42803", "arguments to GROUPING"),
        ("SELECT grouping(a) FROM t", "42803", "arguments to GROUPING"),
        ("SELECT a FROM t WHERE grouping(a) = 0 GROUP BY a", "42803", "not allowed in WHERE"),
        ("SELECT a, b FROM t GROUP BY ROLLUP (a)", "42803", 'column "t.b" must appear'),
    ]
    for sql, state, message in refused:
        for stmt in (sql, f"CREATE MATERIALIZED VIEW x AS {sql}"):
            with pytest.raises(PiestreamError, match=message) as e:
                db.execute(stmt)
            assert e.value.sqlstate == state, stmt
