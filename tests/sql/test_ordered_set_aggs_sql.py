"""Ordered-set aggregates (percentile_cont, percentile_disc, mode() WITHIN GROUP) against DuckDB
and a Python model of PostgreSQL's mode (ties: the first value in the order): materialized views
equal the query at every committed epoch under random INSERT / UPDATE / DELETE (NULL inputs,
emptied groups, FILTER, DESC order, a ROLLUP), batch SELECT too; PostgreSQL's errors and the
refused forms (0A000) are checked."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from paired import DmlGen, Paired, open_db

from piestream.common.errors import PiestreamError
from piestream.server.database import Database

#: compared with DuckDB (percentiles rounded: the interpolation may differ in the last bit)
QUERIES = {
    "pk": "SELECT k, percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS med, "
    "percentile_cont(0.25) WITHIN GROUP (ORDER BY x DESC) AS q, "
    "percentile_disc(0.75) WITHIN GROUP (ORDER BY x) AS d, "
    "percentile_disc(0.5) WITHIN GROUP (ORDER BY s) AS ds, "
    "percentile_cont(1) WITHIN GROUP (ORDER BY x) FILTER (WHERE x < 50) AS top FROM t GROUP BY k",
    "pr": "SELECT k, percentile_disc(0) WITHIN GROUP (ORDER BY x) AS lo, count(*) AS c "
    "FROM t GROUP BY ROLLUP (k)",
}
MODE = (
    "SELECT k, mode() WITHIN GROUP (ORDER BY x) AS m, mode() WITHIN GROUP (ORDER BY x DESC) AS md "
    "FROM t GROUP BY k"
)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "db")
    yield d
    d.close()


def _rounded(rows: list[tuple]) -> Counter:
    return Counter(tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows)


def _mode_model(rows: list[tuple]) -> Counter:
    """PostgreSQL's mode over (k, x) rows: the most frequent non-NULL x, ties to the first in order."""
    groups: dict[object, list[int]] = defaultdict(list)
    for k, x in rows:
        groups[k].append(x)
    out = []
    for k, xs in groups.items():
        c = Counter(x for x in xs if x is not None)
        if not c:
            out.append((k, None, None))
            continue
        top = max(c.values())
        best = sorted(x for x, n in c.items() if n == top)
        out.append((k, best[0], best[-1]))
    return Counter(out)


def _dml(rng: random.Random) -> DmlGen:
    def x() -> int | None:
        return None if rng.random() < 0.1 else rng.randint(0, 60) // 3

    def s() -> str | None:
        return None if rng.random() < 0.1 else rng.choice(["a", "b", "cc"])

    columns = {"k": lambda: None if rng.random() < 0.1 else rng.randint(0, 2), "x": x, "s": s}
    return DmlGen(rng, "t", columns, updates=("x", "s", "x = x + 1", "k = 1"))


def test_ordered_set_aggregates_equal_duckdb_at_every_epoch(tmp_path: Path) -> None:
    both = Paired(tmp_path / "db")
    db = both.db
    try:
        dml = _dml(random.Random(12))
        both.start(
            "CREATE TABLE t (id INT PRIMARY KEY, k INT, x INT, s VARCHAR)", dml, QUERIES | {"pm": MODE}
        )
        for step in range(24):
            sql = "DELETE FROM t WHERE k = 1" if step == 20 else dml.statement()
            both.run(sql)
            for name, q in QUERIES.items():
                want = _rounded(both.duck.execute(q).fetchall())
                assert _rounded(db.execute(f"SELECT * FROM {name}")[0].rows) == want, (name, step, sql)
                if step % 8 == 7:
                    assert _rounded(db.execute(q)[0].rows) == want, (name, step)
            want = _mode_model(both.duck.execute("SELECT k, x FROM t").fetchall())
            assert both.rows("SELECT * FROM pm") == want, (step, sql)
            if step % 8 == 7:
                assert both.rows(MODE) == want, step
    finally:
        both.close()


def test_ordered_set_golden_values_and_errors(db: Database) -> None:
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, x INT, s VARCHAR)")
    vals = "(VALUES (1), (2), (2), (3), (3), (10), (NULL)) v(x)"
    rows = db.execute(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x), percentile_cont(0.9) WITHIN GROUP "
        "(ORDER BY x), percentile_disc(0.5) WITHIN GROUP (ORDER BY x), percentile_disc(0) WITHIN GROUP "
        "(ORDER BY x DESC), mode() WITHIN GROUP (ORDER BY x), mode() WITHIN GROUP (ORDER BY x DESC) "
        f"FROM {vals}"
    )[0]
    assert [c for c, _ in rows.columns] == ["percentile_cont"] * 2 + ["percentile_disc"] * 2 + ["mode"] * 2
    p9 = rows.rows[0][1]
    assert rows.rows == [(2.5, p9, 2, 10, 2, 3)] and abs(p9 - 6.5) < 1e-12  # PostgreSQL's answers
    assert db.execute(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x), mode() WITHIN GROUP (ORDER BY s) FROM t"
    )[0].rows == [(None, None)]
    errors = [
        (
            "SELECT percentile_cont(1.5) WITHIN GROUP (ORDER BY x) FROM (VALUES (1)) v(x)",
            "22003",
            "between 0 and 1",
        ),
        ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s) FROM t", "42883", "percentile_cont"),
        ("SELECT percentile_cont(ARRAY[0.5]) WITHIN GROUP (ORDER BY x) FROM t", "0A000", "WITHIN GROUP"),
        ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x, k) FROM t", "0A000", "WITHIN GROUP"),
        ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) OVER () FROM t", "0A000", "WITHIN GROUP"),
        ("SELECT rank(1) WITHIN GROUP (ORDER BY x) FROM t", "0A000", "WITHIN GROUP"),
    ]
    for sql, state, message in errors:
        with pytest.raises(PiestreamError, match=message) as e:
            db.execute(sql)
        assert e.value.sqlstate == state, sql
