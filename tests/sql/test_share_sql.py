"""An aggregation a query spells out twice is planned once (`frontend.share`): the plan holds one
fragment for it with an output to each reader, and the MVs equal DuckDB after every epoch of
random inserts and deletes (so the shared aggregation's updates and retractions reach both)."""

from __future__ import annotations

import random
import re

import pytest
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.server.session import Session

TABLE = "CREATE TABLE u (g INT, w BIGINT, v INT)"
_COUNTS = "(SELECT g, w, count(*) AS n FROM u GROUP BY g, w)"
_SUMS = "(SELECT g, w, sum(v) AS s FROM u GROUP BY g, w)"
MVS = {
    # Nexmark q5's shape: per-(g, w) counts joined with their per-w maximum
    "top_counts": f"SELECT a.g, a.w, a.n FROM {_COUNTS} AS a JOIN (SELECT c.w, max(c.n) AS m "
    f"FROM {_COUNTS} AS c GROUP BY c.w) AS b ON a.w = b.w AND a.n >= b.m",
    # both readers in one fragment, each wanting the rows placed by another column
    "cross_keys": f"SELECT a.g, a.w, a.s, b.g AS g2, b.s AS s2 FROM {_SUMS} AS a "
    f"JOIN {_SUMS} AS b ON a.s = b.w",
    # the NOT IN subquery is read twice, once inside the reader's own fragment: not shared
    "not_in": "SELECT DISTINCT g FROM u WHERE w NOT IN (SELECT g FROM u GROUP BY g HAVING count(*) < 3)",
}


def _explain(s: Session, sql: str) -> str:
    return "\n".join(r[0] for r in s.execute_one(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql}").rows)


def _fragments(text: str) -> str:
    """The fragment listing of an EXPLAIN (the tree above it prints a shared subtree twice)."""
    return text[text.index("\nFragment ") :]


def test_repeated_aggregation_is_one_fragment_read_by_both(s: Session) -> None:
    s.execute(TABLE)
    frags = _fragments(_explain(s, MVS["top_counts"]))
    assert frags.count("aggs: [count(*)]") == 1, frags
    assert frags.count("aggs: [max(") == 1, frags
    # the counts' fragment sends once to the join's fragment, whose two inputs read that port
    shared = re.search(r"Fragment (\d+) \(parallelism 2, outputs: hash\(\$\d\) -> [^)]*\)\n.*count", frags)
    assert shared is not None, frags
    assert frags.count(f"Exchange {{ from: fragment {shared.group(1)} }}") == 2, frags


def test_readers_placing_rows_differently_get_a_relay(s: Session) -> None:
    s.execute(TABLE)
    frags = _fragments(_explain(s, MVS["cross_keys"]))
    assert frags.count("aggs: [sum(") == 1, frags
    # one reader's rows pass through a fragment of their own (ports are named by the sender),
    # placed by the shared fragment's dispatch, then actor i to actor i
    relay = re.search(r"Fragment (\d+) \(parallelism 2, outputs: no_shuffle -> [^)]*\)\n  └─Exchange", frags)
    assert relay is not None, frags
    assert re.search(
        rf"outputs: hash\(\$\d\) -> fragment \d+, hash\(\$\d\) -> fragment {relay.group(1)}\)", frags
    )


def test_reader_without_an_exchange_keeps_its_own_copy(s: Session) -> None:
    s.execute(TABLE)
    frags = _fragments(_explain(s, MVS["not_in"]))
    assert frags.count("aggs: [count(*)]") == 2, frags


def test_aggregations_over_python_functions_are_not_shared(s: Session) -> None:
    """A Python function may be impure (random, a clock): two calls are two relations."""
    s.execute(TABLE)
    s.execute(
        "CREATE FUNCTION jitter(x int) RETURNS int LANGUAGE python AS $$\ndef jitter(x):\n    return x\n$$"
    )
    sub = "(SELECT g, w, max(jitter(v)) AS x FROM u GROUP BY g, w)"
    frags = _fragments(_explain(s, f"SELECT a.g, b.x FROM {sub} AS a JOIN {sub} AS b ON a.x = b.w"))
    assert frags.count("aggs: [max(") == 2, frags
    plain = "(SELECT g, w, max(v) AS x FROM u GROUP BY g, w)"
    frags = _fragments(_explain(s, f"SELECT a.g, b.x FROM {plain} AS a JOIN {plain} AS b ON a.x = b.w"))
    assert frags.count("aggs: [max(") == 1, frags


@pytest.mark.parametrize("seed", range(3))
def test_shared_aggregations_equal_duckdb_after_every_epoch(s: Session, seed: int) -> None:
    duck = duck_connect()
    s.execute(TABLE)
    duck.execute(TABLE)
    for name, sql in MVS.items():
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    rng = random.Random(seed)
    for _ in range(8):
        for _ in range(rng.randint(5, 25)):
            if rng.random() < 0.75:
                g, w, v = rng.randint(0, 6), rng.randint(0, 4), rng.randint(-3, 6)
                stmt = f"INSERT INTO u VALUES ({g}, {w}, {v})"
            else:
                stmt = f"DELETE FROM u WHERE g = {rng.randint(0, 6)} AND w = {rng.randint(0, 4)}"
            s.execute(stmt)
            duck.execute(stmt)
        s.execute("FLUSH")
        for name, sql in MVS.items():
            got = norm_rows(s.execute_one(f"SELECT * FROM {name}").rows)
            want = norm_rows(duck.execute(sql).fetchall())
            assert got == want, f"{name}:\n{diff_text(got, want)}"
