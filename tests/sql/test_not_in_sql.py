"""``x NOT IN (subquery)`` as a null-aware anti join: the plan (a hash join on x plus a
DynamicFilter on a one-row count of the inner side, no nested loop), batch answers with NULLs on
both sides and an empty inner side (PostgreSQL's answers, written out), and MVs (and the same
queries as batch SELECTs) against DuckDB after every round of random inserts, updates and
deletes on both sides, including a NULL appearing in and vanishing from the inner side and the
inner side emptying."""

from __future__ import annotations

import random

import pytest
from sqldiff import check_cases_with_rounds
from sqlgen import sql_value

from piestream.common.errors import FeatureNotSupported
from piestream.server.session import Session

TABLES = [
    "CREATE TABLE t (k INT PRIMARY KEY, v BIGINT, d DOUBLE PRECISION)",
    "CREATE TABLE u (v BIGINT, g INT)",
]
DUCK_TABLES = ["CREATE TABLE t (k INT PRIMARY KEY, v BIGINT, d DOUBLE)", "CREATE TABLE u (v BIGINT, g INT)"]

MVS = {
    "not_in": "SELECT k, v FROM t WHERE v NOT IN (SELECT v FROM u)",
    "not_in_filtered": "SELECT k, d FROM t WHERE v + 1 NOT IN (SELECT v FROM u WHERE g = 1) AND k > 3",
    "not_in_grouped": "SELECT k FROM t WHERE v NOT IN (SELECT max(v) FROM u GROUP BY g HAVING count(*) < 4)",
    "not_in_cast": "SELECT k, d FROM t WHERE d NOT IN (SELECT v FROM u WHERE g <> 2)",
    "not_in_count": "SELECT count(*) AS n, sum(v) AS s FROM t WHERE v NOT IN (SELECT v FROM u)",
    "not_exists": "SELECT k FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.v = t.v)",
    "in": "SELECT k FROM t WHERE v IN (SELECT v FROM u)",
    # the SQL standard's spellings of NOT IN and IN (NULLs included)
    "ne_all": "SELECT k, v FROM t WHERE v <> ALL (SELECT v FROM u WHERE g = 0)",
    "eq_any": "SELECT k FROM t WHERE v = ANY (SELECT v FROM u)",
    "in_row": "SELECT k FROM t WHERE (v, k % 3) IN (SELECT v, g FROM u)",
}


def _explain(s: Session, sql: str) -> str:
    return "\n".join(r[0] for r in s.execute_one(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql}").rows)


def _random_dml(rng: random.Random, keys: set[int]) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.4:
            k = rng.randint(0, 30)
            v = rng.choice([None, None, *range(0, 25)])
            d = rng.choice([None, float(rng.randint(0, 25)), rng.randint(0, 25) + 0.5])
            verb = (
                "UPDATE t SET v = {v}, d = {d} WHERE k = {k}"
                if k in keys
                else "INSERT INTO t VALUES ({k}, {v}, {d})"
            )
            out.append(verb.format(k=k, v=sql_value(v, "bigint"), d=sql_value(d, "double")))
            keys.add(k)
        elif r < 0.5 and keys:
            k = rng.choice(sorted(keys))
            out.append(f"DELETE FROM t WHERE k = {k}")
            keys.discard(k)
        elif r < 0.75:
            v = rng.choice([None, *range(0, 25)]) if rng.random() < 0.2 else rng.randint(0, 25)
            out.append(f"INSERT INTO u VALUES ({sql_value(v, 'bigint')}, {rng.randint(0, 2)})")
        elif r < 0.85:
            out.append("DELETE FROM u WHERE v IS NULL")  # the NULL goes: the left rows come back
        elif r < 0.9:
            out.append("DELETE FROM u")  # the inner side empties: every left row passes
        else:
            out.append(f"DELETE FROM u WHERE v > {rng.randint(0, 25)}")
    return out


def test_not_in_plans_a_hash_anti_join_and_a_dynamic_filter(s: Session) -> None:
    for ddl in TABLES:
        s.execute(ddl)
    text = _explain(s, MVS["not_in"])
    plan = text.split("\n\n")[0]
    # the equality alone is the join's condition (a hash join on v, distributed by v) ...
    assert "HashJoin { type: left_anti, predicate: $1 = $2," in plan, text
    assert "or(" not in plan and "Exchange { dist: Single }\n" not in plan.split("DynamicFilter")[0], text
    assert "Exchange { dist: HashShard($1) }" in plan, text
    # ... and the NULL rules are a DynamicFilter on a broadcast one-row count of the inner side
    assert "DynamicFilter { predicate: $2 <= $expr0 }" in plan, text
    assert "Exchange { dist: Broadcast }" in plan and "SimpleAgg { aggs: [count(*), count($0)] }" in plan, (
        text
    )
    # NOT EXISTS with an equality correlation: a hash anti join on it, never a nested loop
    text = _explain(s, MVS["not_exists"])
    assert "HashJoin { type: left_anti, predicate: $1 = $2," in text and "DynamicFilter" not in text, text
    # <> ALL is NOT IN: the same plan
    text = _explain(s, MVS["ne_all"])
    assert "HashJoin { type: left_anti, predicate: $1 = $2," in text and "DynamicFilter" in text, text
    assert "HashJoin { type: left_semi, predicate: $1 = $2," in _explain(s, MVS["eq_any"])
    # the join state is distributed by the key, not gathered into one actor
    for name in ("not_in", "not_exists"):
        join_frag = next(f for f in _explain(s, MVS[name]).split("Fragment ") if "HashJoin" in f)
        assert "parallelism 1" not in join_frag.splitlines()[0], (name, join_frag)


def test_other_quantified_comparisons_are_still_rejected(s: Session) -> None:
    for ddl in TABLES:
        s.execute(ddl)
    for sql in (
        "SELECT k FROM t WHERE v < ALL (SELECT v FROM u)",
        "SELECT k FROM t WHERE v <> ANY (SELECT v FROM u)",
    ):
        with pytest.raises(FeatureNotSupported) as e:
            s.execute(sql)
        assert e.value.sqlstate == "0A000", sql


def test_not_in_batch_nulls_and_empty_inner_side(s: Session) -> None:
    """PostgreSQL 16's answers."""
    s.execute("CREATE TABLE l (k INT PRIMARY KEY, x INT)")
    s.execute("CREATE TABLE r (y INT)")
    s.execute("INSERT INTO l VALUES (1, 1), (2, 2), (3, NULL)")
    q = "SELECT k FROM l WHERE x NOT IN (SELECT y FROM r) ORDER BY k"

    def ks() -> list[int]:
        return [row[0] for row in s.execute_one(q).rows]

    assert ks() == [1, 2, 3]  # empty inner side: even x NULL passes
    s.execute("INSERT INTO r VALUES (2)")
    assert ks() == [1]  # x NULL: unknown, dropped
    s.execute("INSERT INTO r VALUES (NULL)")
    assert ks() == []  # a NULL inside: nothing is known to differ
    s.execute("DELETE FROM r WHERE y = 2")
    assert ks() == []  # only the NULL left: still nothing passes, x NULL included
    s.execute("DELETE FROM r")
    assert ks() == [1, 2, 3]
    s.execute("INSERT INTO r VALUES (NULL)")
    assert [row[0] for row in s.execute_one("SELECT k FROM l WHERE x <> ALL (SELECT y FROM r)").rows] == []
    assert [row[0] for row in s.execute_one("SELECT k FROM l WHERE x = ANY (SELECT y FROM r)").rows] == []
    s.execute("DELETE FROM r")
    rows = s.execute_one(
        "SELECT k FROM l WHERE x NOT IN (SELECT y FROM r WHERE y > 0) AND 1 NOT IN (SELECT 2)"
    )
    assert sorted(r[0] for r in rows.rows) == [1, 2, 3]
    assert s.execute_one("SELECT k FROM l WHERE 1 NOT IN (SELECT NULL::int)").rows == []


def test_not_in_mv_left_rows_vanish_and_return(s: Session) -> None:
    """A NULL arriving on the inner side removes every row of the MV; its deletion brings them back."""
    s.execute("CREATE TABLE l (k INT PRIMARY KEY, x INT)")
    s.execute("CREATE TABLE r (y INT)")
    s.execute("INSERT INTO l VALUES (1, 1), (2, 2), (3, NULL)")
    s.execute("CREATE MATERIALIZED VIEW m AS SELECT k, x FROM l WHERE x NOT IN (SELECT y FROM r)")

    def ks() -> list[int]:
        s.execute("FLUSH")
        return sorted(row[0] for row in s.execute_one("SELECT k FROM m").rows)

    assert ks() == [1, 2, 3]
    s.execute("INSERT INTO r VALUES (2)")
    assert ks() == [1]
    s.execute("INSERT INTO r VALUES (NULL)")
    assert ks() == []
    s.execute("INSERT INTO l VALUES (4, 4), (5, NULL)")
    assert ks() == []
    s.execute("DELETE FROM r WHERE y IS NULL")
    assert ks() == [1, 4]
    s.execute("DELETE FROM r")
    assert ks() == [1, 2, 3, 4, 5]
    s.execute("UPDATE l SET x = 7 WHERE k = 3")
    s.execute("INSERT INTO r VALUES (7), (1)")
    assert ks() == [2, 4]
    # created over both sides' existing rows (backfill), then a NULL arrives and goes
    s.execute("CREATE MATERIALIZED VIEW m2 AS SELECT k FROM l WHERE x NOT IN (SELECT y FROM r)")
    for dml, want in (
        ("SELECT 1", [2, 4]),
        ("INSERT INTO r VALUES (NULL)", []),
        ("DELETE FROM r WHERE y IS NULL", [2, 4]),
    ):
        s.execute(dml)
        assert ks() == want
        assert sorted(row[0] for row in s.execute_one("SELECT k FROM m2").rows) == want


@pytest.mark.parametrize("seed", range(4))
def test_not_in_mvs_equal_duckdb_after_every_round(s: Session, seed: int) -> None:
    """Each MV and its query as a batch SELECT against DuckDB after every round of random DML,
    a round being one epoch (its 1-6 statements one transaction)."""
    rng = random.Random(seed)
    keys: set[int] = set()
    rounds = [_random_dml(rng, keys) for _ in range(14)]
    cases = [(name, sql, None) for name, sql in MVS.items()]
    nonempty = check_cases_with_rounds(
        s, TABLES, cases, rounds, duck_schema=DUCK_TABLES, one_epoch_per_round=True
    )
    assert {"not_in", "not_in_count", "ne_all"} <= nonempty
