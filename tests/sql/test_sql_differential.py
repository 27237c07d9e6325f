"""Differential tests: random schemas, DML and MV queries; after every committed epoch each MV
equals DuckDB computing its query from scratch (see sqldiff.py).

CI runs `CI_SEEDS` seeds (about seven MVs each, a few hundred MV cases in all). More on demand:

    PIESTREAM_SQL_SEEDS=1000-1999 pytest tests/sql/test_sql_differential.py   # those seeds
    pytest --soak tests/sql/test_sql_differential.py -k soak                  # SOAK_SEEDS seeds

A failure prints the seed and a SQL script that reproduces it from an empty database.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

import pytest
from sqldiff import SeedRun, Stats
from sqlgen import SHAPES, Gen, QueryGen

CI_SEEDS = 40
SOAK_SEEDS = int(os.environ.get("PIESTREAM_SQL_SOAK_SEEDS", "1000"))


def _seeds() -> list[int]:
    spec = os.environ.get("PIESTREAM_SQL_SEEDS")
    if not spec:
        return list(range(CI_SEEDS))
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


TOTAL = Stats()


@pytest.mark.parametrize("seed", _seeds())
def test_seed(seed: int) -> None:
    stats = SeedRun(seed, n_mvs=7, n_steps=8).run()
    TOTAL.add(stats)
    assert stats.mvs + stats.unsupported + stats.oracle_rejected >= 1


def test_cases_were_exercised() -> None:
    """Runs after the seeds (file order): most generated MVs were created and compared with data."""
    if TOTAL.mvs == 0:
        pytest.skip("no seed ran in this session")
    assert TOTAL.unsupported <= TOTAL.mvs // 10, TOTAL
    assert TOTAL.oracle_rejected <= TOTAL.mvs // 10, TOTAL
    assert TOTAL.nonempty_checks >= TOTAL.checks // 4, TOTAL  # the data reaches the MVs
    print(f"\ndifferential: {TOTAL}")


@pytest.mark.spark
def test_seed_on_spark(spark: Any) -> None:
    """The same differential check with every epoch a Spark job (the production runner)."""
    stats = SeedRun(7, n_mvs=3, n_steps=3, spark=spark, barrier_interval=30.0).run()
    assert stats.mvs >= 2 and stats.checks >= 6, stats


@pytest.mark.soak
def test_soak() -> None:
    total = Stats()
    for seed in range(100_000, 100_000 + SOAK_SEEDS):
        total.add(SeedRun(seed, n_mvs=8, n_steps=10).run())
    print(f"\nsoak: {total}")


FEATURES = {
    "inner join": r" JOIN .* ON ",
    "comma join": r"FROM \S+ AS a\d+, \S+ AS a\d+ WHERE",
    "null-safe join key": r" ON \S+ IS NOT DISTINCT FROM ",
    "order by without limit": r"ORDER BY [^()]*$",
    "left join": r"LEFT JOIN",
    "right join": r"RIGHT JOIN",
    "full join": r"FULL JOIN",
    "residual join condition": r" ON [^=]*=[^=]* AND \(",
    "exists": r"WHERE EXISTS \(",
    "not exists": r"NOT EXISTS \(",
    "in subquery": r" IN \(SELECT",
    "not in subquery": r"NOT IN \(SELECT",
    "group by": r"GROUP BY",
    "having": r"HAVING",
    "count(*)": r"count\(\*\)",
    "count distinct": r"count\(DISTINCT",
    "filter": r"FILTER \(WHERE",
    "sum": r"sum\(",
    "avg": r"avg\(",
    "min/max": r"(min|max)\(",
    "string_agg order by": r"string_agg\(.*ORDER BY",
    "array_agg order by": r"array_agg\(.*ORDER BY",
    "array_agg order by another value": r"array_agg\(.* ORDER BY [^,()]*(\([^)]*\))?[^,()]*, ",
    "string_agg distinct order by": r"string_agg\(DISTINCT .*ORDER BY",
    "scalar subquery": r"\(SELECT [a-z_]+\(",
    "correlated subquery": r"\(SELECT .* WHERE a\d+\.\w+ = a\d+\.\w+",
    "union all": r"UNION ALL",
    "union": r"UNION SELECT",
    "distinct": r"SELECT DISTINCT",
    "order by limit": r"ORDER BY .* LIMIT \d+",
    "offset": r"OFFSET \d+",
    "row_number": r"ROW_NUMBER\(\) OVER \(PARTITION BY",
    "rank": r"rank\(\) OVER",
    "dense_rank": r"dense_rank\(\) OVER",
    "tumble": r"TUMBLE\(",
    "hop": r"HOP\(",
    "cte": r"^WITH ",
    "subquery in from": r"FROM \(SELECT",
    "case": r"CASE WHEN",
    "coalesce": r"COALESCE\(",
    "like": r" LIKE '",
    "between": r" BETWEEN ",
    "in list": r" IN \((?!SELECT)",
    "is distinct from": r"IS (NOT )?DISTINCT FROM",
    "interval arithmetic": r"INTERVAL '",
    "cast": r"CAST\(",
    "natural join": r" NATURAL (JOIN|LEFT JOIN|RIGHT JOIN|FULL JOIN) \(SELECT .* AS u0",
    "natural join without common columns": r" NATURAL \w*\s?JOIN \(SELECT (?!.* AS u0)",
    "natural full join": r" NATURAL FULL JOIN ",
    "join using": r" JOIN .* USING \(u0",
    "full join using": r" FULL JOIN .* USING \(u0",
    "using merged column selected": r"SELECT u\d, x\d+\.u\d AS xu",
    "union corresponding": r"UNION (ALL )?CORRESPONDING SELECT",
    "union corresponding by": r"UNION (ALL )?CORRESPONDING BY \(",
    "intersect": r"\) INTERSECT SELECT| INTERSECT SELECT",
    "intersect all": r" INTERSECT ALL SELECT",
    "except": r" EXCEPT SELECT",
    "except all": r" EXCEPT ALL SELECT",
    "generate_series in select": r"SELECT .*generate_series\(.* AS c\d",
    "unnest in select": r"unnest\(ARRAY\[.*\]\) AS c\d",
    "range in select": r"range\(.* AS c\d",
    "lateral function in from": r"(, | CROSS JOIN )(generate_series|unnest)\(.*\) (WITH ORDINALITY )?AS f\d+",
    "with ordinality": r"WITH ORDINALITY",
    "rows frame": r"OVER \([^)]*ROWS (BETWEEN|\d)",
    "range frame with offset": r"RANGE BETWEEN [^)]*(\d|INTERVAL '20 minutes') (PRECEDING|FOLLOWING)",
    "lag / lead": r"(lag|lead)\(",
    "first / last value": r"(first|last)_value\(",
    "distinct on": r"SELECT DISTINCT ON \(",
}


def test_generator_covers_the_features() -> None:
    """Over the CI seeds' worth of queries, every shape and feature of the SQL issue is generated."""
    shapes: Counter[str] = Counter()
    features: Counter[str] = Counter()
    for seed in range(CI_SEEDS):
        g = Gen(seed)
        tables = g.schema(3)
        qg = QueryGen(g, tables)
        for _ in range(7):
            q = qg.query(1)
            shapes[q.shape] += 1
            for name, pattern in FEATURES.items():
                if re.search(pattern, q.pg):
                    features[name] += 1
    assert set(shapes) == set(SHAPES), shapes
    missing = [f for f in FEATURES if features[f] == 0]
    assert not missing, (missing, features)


def test_reports_a_reproduction(monkeypatch: Any) -> None:
    """A difference fails with the seed and the statements that reproduce it."""
    import sqldiff

    real = sqldiff.norm_rows
    calls = {"n": 0}

    def corrupt(rows: Any) -> Any:  # the 3rd comparison of the run sees one row too many
        out = real(rows)
        calls["n"] += 1
        if calls["n"] == 3:
            out[("bogus",)] += 1
        return out

    monkeypatch.setattr(sqldiff, "norm_rows", corrupt)
    with pytest.raises(sqldiff.Mismatch) as info:
        SeedRun(1, n_mvs=2, n_steps=2).run()
    text = str(info.value)
    assert text.startswith("seed 1: ") and "-- reproduction" in text and "CREATE TABLE t0" in text


_PG_NAMES = {
    "int": "integer",
    "bigint": "bigint",
    "numeric": "numeric",
    "double": "double precision",
    "varchar": "character varying",
    "bool": "boolean",
    "timestamp": "timestamp without time zone",
    "date": "date",
}


def test_generator_labels_are_the_result_types(s: Any) -> None:
    """Every generated expression and aggregate is labeled with the type it has (PostgreSQL's,
    as piestream binds it): a wrong label makes a later `round(x, 1)` or `ceil(x)` pick another
    function (ceil(bigint) is double precision, and round(double, int) does not exist)."""
    checked = 0
    for seed in range(12):
        g = Gen(seed)
        tables = g.schema(3)
        for t in tables:
            s.execute(g.create_table_sql(t)[0])
        qg = QueryGen(g, tables)
        for _ in range(25):
            src = qg.src_named()
            sc = qg.scope(src)
            e = g.agg(sc) if g.chance(0.3) else g.expr(g.any_type(sc), sc, 3)
            if e.t == "array":
                continue
            (res,) = s.execute(f"SELECT {e.pg} FROM {src.pg}")
            assert str(res.columns[0][1]) == _PG_NAMES[e.t], (e.t, e.pg)
            checked += 1
        for t in tables:
            s.execute(f"DROP TABLE {t.name}")
    assert checked > 200
