"""random() / gen_random_uuid() in an MV's select list (RisingWave's MaterializedExprs): each row
gets its values once, when it arrives; they are stored, retracted with the row, and survive a
restart. Anywhere else in an MV they stay 0A000, naming themselves.

The oracle is a Python model: the MV must hold exactly t's rows; the drawn column of a row no DML
touched must not change; an UPDATE is a new row version (its values are drawn again, as in
RisingWave); a deleted row's values leave the view and the executor's state table.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paired import open_db, plan_nodes, table_rows

from piestream.common.errors import PiestreamError
from piestream.plan.materialized_exprs import MaterializedExprsNode
from piestream.server.database import Database


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "db"


@pytest.fixture
def db(path: Path) -> Iterator[Database]:
    d = open_db(path)
    yield d
    d.close()


def _rows(db: Database, sql: str) -> list[tuple[Any, ...]]:
    return db.execute(sql)[-1].rows


def _views(db: Database) -> dict[str, dict[int, tuple[int, Any]]]:
    """Each MV's rows by id: (v, drawn value)."""
    out: dict[str, dict[int, tuple[int, Any]]] = {}
    for name in ("mr", "mu"):
        rows = _rows(db, f"SELECT id, v, x FROM {name}")
        by_id = {i: (v, x) for i, v, x in rows}
        assert len(by_id) == len(rows), f"{name}: an id twice: {rows}"
        out[name] = by_id
    return out


def _state_ids(db: Database, name: str) -> list[int]:
    node = next(n for n in plan_nodes(db, name) if isinstance(n, MaterializedExprsNode))
    return sorted(r[0] for r in table_rows(db, node.state_table))


def _check(db: Database, prev: dict[str, dict[int, tuple[int, Any]]] | None, touched: set[int]) -> Any:
    t = dict(_rows(db, "SELECT id, v FROM t"))
    views = _views(db)
    for name, rows in views.items():
        assert {i: v for i, (v, _) in rows.items()} == t, name
        xs = [x for _, x in rows.values()]
        assert len(set(xs)) == len(xs), f"{name}: two rows drew the same value"
        if name == "mr":
            assert all(isinstance(x, float) and 0.0 <= x < 1.0 for x in xs)
        else:
            assert all(uuid.UUID(x).version == 4 for x in xs)
        if prev is not None:
            for i, (v, x) in rows.items():
                if i in prev[name] and i not in touched:
                    assert x == prev[name][i][1], f"{name}: row {i} changed its drawn value"
                if i in prev[name] and i in touched and v != prev[name][i][0]:
                    assert x != prev[name][i][1], f"{name}: updated row {i} kept its old value"
        # a deleted row's values left the executor's state too
        assert _state_ids(db, name) == sorted(t), name
    # a view over the view retracts what was emitted: its sum stays the sum of the live values
    [(n, total)] = _rows(db, "SELECT n, total FROM ms")
    assert n == len(t) and math.isclose(total or 0.0, sum(x for _, x in views["mr"].values()), abs_tol=1e-9)
    return views


def test_impure_select_list_is_drawn_once_per_row(db: Database, path: Path) -> None:
    rng = random.Random(32)
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    db.execute("INSERT INTO t SELECT k, k * 10 FROM generate_series(1, 40) AS k")
    db.execute("CREATE MATERIALIZED VIEW mr AS SELECT id, v, random() AS x FROM t")
    db.execute("CREATE MATERIALIZED VIEW mu AS SELECT v, gen_random_uuid() AS x, id FROM t")
    db.execute("CREATE MATERIALIZED VIEW ms AS SELECT count(*) AS n, sum(x) AS total FROM mr")
    explain = "\n".join(
        r[0] for r in _rows(db, "EXPLAIN CREATE MATERIALIZED VIEW m3 AS SELECT id, random() FROM t")
    )
    assert "MaterializedExprs { exprs: [random()] }" in explain
    views = _check(db, None, set())
    live = set(range(1, 41))
    next_id = 41
    s = db.session()
    for rnd in range(8):
        touched: set[int] = set()
        s.execute("BEGIN")  # one epoch: a key may be inserted, updated and deleted in one chunk
        for _ in range(rng.randint(3, 12)):
            op = rng.random()
            if op < 0.35 or not live:
                ids = list(range(next_id, next_id + rng.randint(1, 4)))
                next_id += len(ids)
                s.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, {rng.randint(0, 99)})" for i in ids))
                live |= set(ids)
                touched |= set(ids)
            elif op < 0.7:
                i = rng.choice(sorted(live))
                s.execute(f"UPDATE t SET v = v + {rng.randint(1, 5)} WHERE id = {i}")
                touched.add(i)
            else:
                i = rng.choice(sorted(live))
                s.execute(f"DELETE FROM t WHERE id = {i}")
                live.discard(i)
                touched.add(i)
        s.execute("COMMIT")
        views = _check(db, views, touched)
        assert views["mr"], f"round {rnd}: the view emptied, the test checks nothing"
    s.close()
    db.close()
    db2 = open_db(path)
    try:
        assert _views(db2) == views  # the stored values survive a restart
        gone = sorted(views["mr"])[:3]
        db2.execute(f"DELETE FROM t WHERE id IN ({', '.join(map(str, gone))})")
        db2.execute(f"INSERT INTO t VALUES ({gone[0]}, 7)")  # back, with a new draw
        after = _check(db2, views, set(gone))
        assert set(after["mr"]) == set(views["mr"]) - set(gone[1:])
        assert after["mr"][gone[0]][1] != views["mr"][gone[0]][1]
    finally:
        db2.close()


def test_a_drawn_column_read_twice_is_one_value(db: Database) -> None:
    db.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    db.execute(
        "CREATE MATERIALIZED VIEW m AS SELECT id, r, r * 2 AS r2 FROM (SELECT id, random() AS r FROM t) s"
    )
    db.execute("INSERT INTO t SELECT * FROM generate_series(1, 50)")
    rows = _rows(db, "SELECT id, r, r2 FROM m")
    assert len(rows) == 50 and all(r2 == r * 2 for _, r, r2 in rows)


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        ("SELECT id FROM t WHERE random() < 0.5", "random"),
        ("SELECT * FROM (SELECT id, random() AS r FROM t) s WHERE r < 0.5", "random"),
        ("SELECT count(*) FROM t GROUP BY random() < 0.5", "random"),
        ("SELECT sum(random()) FROM t", "random"),
        ("SELECT a.id FROM t a JOIN t b ON a.id = b.id AND random() < 0.5", "random"),
        ("SELECT id FROM t WHERE gen_random_uuid() > 'a'", "gen_random_uuid"),
        ("SELECT gen_random_uuid(), count(*) FROM t GROUP BY 1", "gen_random_uuid"),
    ],
)
def test_impure_calls_elsewhere_stay_refused(db: Database, sql: str, name: str) -> None:
    db.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with pytest.raises(PiestreamError, match=rf"{name}\(\) is not supported in materialized views") as e:
        db.execute(f"CREATE MATERIALIZED VIEW m AS {sql}")
    assert e.value.sqlstate == "0A000", sql


def test_keyless_table_and_join_inputs(db: Database) -> None:
    """A table without a primary key (stream key: its row id; duplicate rows each get a value)
    and a join (a composite stream key, rows re-derived on updates): a view over the view sums
    exactly the live values, so every retraction carried what had been emitted."""
    rng = random.Random(5)
    db.execute("CREATE TABLE np (a INT, b INT)")
    db.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    db.execute("CREATE MATERIALIZED VIEW mn AS SELECT a, random() AS r FROM np")
    db.execute(
        "CREATE MATERIALIZED VIEW mj AS SELECT x.k, y.k AS yk, random() AS r FROM t x JOIN t y ON x.v = y.v"
    )
    db.execute("CREATE MATERIALIZED VIEW sn AS SELECT count(*) AS n, sum(r) AS s FROM mn")
    db.execute("CREATE MATERIALIZED VIEW sj AS SELECT count(*) AS n, sum(r) AS s FROM mj")
    for _ in range(6):
        db.execute("INSERT INTO np VALUES " + ", ".join(f"({rng.randint(0, 5)}, 1)" for _ in range(8)))
        db.execute(f"DELETE FROM np WHERE a = {rng.randint(0, 5)}")
        taken = {k for (k,) in _rows(db, "SELECT k FROM t")}
        fresh = rng.sample(sorted(set(range(100)) - taken), 4)
        db.execute("INSERT INTO t VALUES " + ", ".join(f"({k}, {rng.randint(0, 3)})" for k in fresh))
        db.execute(f"DELETE FROM t WHERE k = {rng.choice(sorted(taken | set(fresh)))}")
        db.execute(f"UPDATE t SET v = v + 1 WHERE v = {rng.randint(0, 3)}")
        for view, summary, base in (
            ("mn", "sn", "SELECT a FROM np"),
            ("mj", "sj", "SELECT x.k, y.k FROM t x JOIN t y ON x.v = y.v"),
        ):
            rows = _rows(db, f"SELECT * FROM {view}")
            assert sorted(r[:-1] for r in rows) == sorted(_rows(db, base)), view
            rs = [r[-1] for r in rows]
            assert len(set(rs)) == len(rs) and all(0.0 <= x < 1.0 for x in rs)
            [(n, total)] = _rows(db, f"SELECT n, s FROM {summary}")
            assert n == len(rows) and math.isclose(total or 0.0, sum(rs), abs_tol=1e-9), view
    assert _rows(db, "SELECT count(*) FROM mn")[0][0] > 0 and _rows(db, "SELECT count(*) FROM mj")[0][0] > 0
