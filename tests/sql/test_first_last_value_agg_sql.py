"""RisingWave's aggregates ``first_value(x ORDER BY ...)`` / ``last_value(...)`` (NULLs
included; DISTINCT allowed): an MV equals a Python model of the rule after each of 20 rounds of
random DML, and so does the batch query; without ORDER BY they are 0A000."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from paired import DmlGen, open_db

from piestream.common.errors import FeatureNotSupported

SQL = (
    "SELECT g, first_value(x ORDER BY x) AS f, last_value(x ORDER BY x) AS l, "
    "first_value(x ORDER BY id DESC) AS fd, last_value(x ORDER BY id) AS li, "
    "first_value(DISTINCT x ORDER BY x DESC) AS dd FROM t GROUP BY g"
)


def _asc_nulls_last(v: int | None) -> tuple[bool, int]:
    return (v is None, v or 0)


def model(rows: dict[int, tuple[int, int | None]]) -> set[tuple]:
    out = set()
    for g in {g for g, _ in rows.values()}:
        grp = sorted((i, x) for i, (gg, x) in rows.items() if gg == g)
        xs = sorted((x for _, x in grp), key=_asc_nulls_last)
        # DESC puts NULLs first (PostgreSQL's default)
        dd = sorted(set(xs), key=_asc_nulls_last, reverse=True)[0]
        out.add((g, xs[0], xs[-1], grp[-1][1], grp[-1][1], dd))
    return out


def test_first_and_last_value_aggregates_equal_the_model(tmp_path: Path) -> None:
    rng = random.Random(7)
    db = open_db(tmp_path / "db")
    try:
        db.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, x INT)")
        dml = DmlGen(
            rng, "t", {"g": lambda: rng.randint(0, 2), "x": lambda: rng.choice([None, *range(6)])}, ["x", "g"]
        )
        for _ in range(3):
            db.execute(dml.statement())
        db.execute(f"CREATE MATERIALIZED VIEW m AS {SQL}")
        nulls = 0
        for _ in range(20):
            for _ in range(rng.randint(1, 3)):
                db.execute(dml.statement())
            rows = {i: (g, x) for i, g, x in db.execute("SELECT id, g, x FROM t")[0].rows}
            want = model(rows)
            nulls += any(None in r for r in want)
            assert set(db.execute("SELECT * FROM m")[0].rows) == want
            assert set(db.execute(SQL)[0].rows) == want
        assert nulls > 3  # NULL firsts / lasts really occurred
    finally:
        db.close()


def test_without_order_by_is_refused(tmp_path: Path) -> None:
    db = open_db(tmp_path / "db")
    try:
        db.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, x INT)")
        with pytest.raises(FeatureNotSupported, match="needs ORDER BY"):
            db.execute("SELECT first_value(x) FROM t")
    finally:
        db.close()
