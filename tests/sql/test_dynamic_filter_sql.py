"""`col <op> (scalar subquery)` planned as a DynamicFilter: the plan, and the MV against DuckDB
after every epoch of random changes to both the filtered table and the subquery's table."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

TABLES = [
    "CREATE TABLE t (k INT PRIMARY KEY, v BIGINT, d DOUBLE PRECISION)",
    "CREATE TABLE u (v BIGINT, g INT)",
]
DUCK_TABLES = ["CREATE TABLE t (k INT PRIMARY KEY, v BIGINT, d DOUBLE)", "CREATE TABLE u (v BIGINT, g INT)"]

MVS = {
    "gt_max": "SELECT k, v FROM t WHERE v > (SELECT max(v) FROM u)",
    "le_avg_expr": "SELECT k, d FROM t WHERE v + 1 <= (SELECT avg(v) FROM u) AND k > 3",
    "flipped": "SELECT k, v FROM t WHERE (SELECT min(v) FROM u WHERE g = 1) < v",
    "agg_above": "SELECT count(*) AS n, sum(v) AS s FROM t WHERE d >= (SELECT sum(v) / 7.0 FROM u)",
    "ge_count": "SELECT k FROM t WHERE v >= (SELECT count(*) FROM u WHERE v > 0)",
    # the subquery's value is also selected: not a DynamicFilter, still the same answer
    "selected": "SELECT k, (SELECT max(v) FROM u) AS m FROM t WHERE v < (SELECT max(v) FROM u)",
}


def _explain(s: Session, sql: str) -> str:
    return "\n".join(r[0] for r in s.execute_one(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql}").rows)


def _val(x: Any) -> str:
    return "NULL" if x is None else str(x)


def _random_dml(rng: random.Random, keys: set[int]) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.45:
            k = rng.randint(0, 40)
            v = rng.choice([None, *range(-20, 40)])
            d = rng.choice([None, rng.uniform(-10, 30)])
            verb = (
                "UPDATE t SET v = {v}, d = {d} WHERE k = {k}"
                if k in keys
                else "INSERT INTO t VALUES ({k}, {v}, {d})"
            )
            out.append(verb.format(k=k, v=_val(v), d=_val(None if d is None else round(d, 3))))
            keys.add(k)
        elif r < 0.55 and keys:
            k = rng.choice(sorted(keys))
            out.append(f"DELETE FROM t WHERE k = {k}")
            keys.discard(k)
        elif r < 0.85:
            out.append(
                f"INSERT INTO u VALUES ({_val(rng.choice([None, *range(-10, 45)]))}, {rng.randint(0, 2)})"
            )
        else:
            out.append(f"DELETE FROM u WHERE v > {rng.randint(-10, 45)}")
    return out


def _check(s: Session, duck: Any, name: str) -> None:
    got = norm_rows(s.execute_one(f"SELECT * FROM {name}").rows)
    want = norm_rows(duck.execute(MVS[name]).fetchall())
    assert got == want, f"{name}:\n{diff_text(got, want)}"


def _drive(db: Database, epochs: int, seed: int) -> None:
    s = db.session()
    duck = duck_connect()
    for ddl, dk in zip(TABLES, DUCK_TABLES, strict=True):
        s.execute(ddl)
        duck.execute(dk)
    rng = random.Random(seed)
    keys: set[int] = set()
    for i in range(epochs):
        if i == 2:  # some MVs backfill over existing data, the others see it all arrive
            for name in list(MVS)[::2]:
                s.execute(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name]}")
        if i == 0:
            for name in list(MVS)[1::2]:
                s.execute(f"CREATE MATERIALIZED VIEW {name} AS {MVS[name]}")
        for stmt in _random_dml(rng, keys):
            s.execute(stmt)
            duck.execute(stmt)
        s.execute("FLUSH")
        db.hummock.compact_until_idle()  # as a running database would: reads merge few SSTs
        for name in MVS if i >= 2 else list(MVS)[1::2]:
            _check(s, duck, name)


def test_plan_is_a_dynamic_filter_with_a_broadcast_subquery(s: Session) -> None:
    for ddl in TABLES:
        s.execute(ddl)
    for name in ("gt_max", "le_avg_expr", "flipped", "agg_above", "ge_count"):
        text = _explain(s, MVS[name])
        assert "DynamicFilter" in text and "Broadcast" in text and "HashJoin" not in text, (name, text)
    assert "outputs: broadcast -> fragment" in _explain(s, MVS["gt_max"])
    assert "DynamicFilter { predicate: $1 < $expr0 }" not in _explain(s, MVS["flipped"])
    assert "DynamicFilter { predicate: $1 > $expr0 }" in _explain(s, MVS["flipped"])
    assert "DynamicFilter" not in _explain(s, MVS["selected"])


@pytest.mark.parametrize("seed", range(4))
def test_dynamic_filters_equal_duckdb_after_every_epoch(tmp_path: Path, seed: int) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    with Database(tmp_path / "d", config=cfg) as db:
        _drive(db, epochs=14, seed=seed)


@pytest.mark.spark
def test_dynamic_filter_on_spark(tmp_path: Path, spark: Any) -> None:
    """The broadcast edge across Spark stages: every left actor sees the subquery's value."""
    cfg = DatabaseConfig(runner="spark", barrier_interval=3600, parallelism=2, background_compaction=False)
    with Database(tmp_path / "d", spark=spark, config=cfg) as db:
        _drive(db, epochs=4, seed=99)
