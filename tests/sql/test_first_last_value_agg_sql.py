"""RisingWave's aggregates ``first_value(x ORDER BY ...)`` / ``last_value(...)`` (NULLs
included; DISTINCT allowed): an MV equals a Python model of the rule after each of 20 rounds of
random DML, and so does the batch query; without ORDER BY they are 0A000."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

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


def _table_t(db: Any, rng: random.Random) -> DmlGen:
    """Table t (id, g in 0..2, x in NULL or 0..5) and its random DML."""
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, x INT)")
    return DmlGen(
        rng, "t", {"g": lambda: rng.randint(0, 2), "x": lambda: rng.choice([None, *range(6)])}, ["x", "g"]
    )


def test_first_and_last_value_aggregates_equal_the_model(tmp_path: Path) -> None:
    rng = random.Random(7)
    db = open_db(tmp_path / "db")
    try:
        dml = _table_t(db, rng)
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


#: Without GROUP BY (one group), and ORDER BY inside aggregates whose result it cannot change.
UNGROUPED = (
    "SELECT first_value(x ORDER BY x) AS f, last_value(DISTINCT x ORDER BY x) AS l, "
    "count(x ORDER BY x) AS n, sum(x ORDER BY id DESC) AS s, max(x ORDER BY id) AS mx, "
    "string_agg(x::varchar, ',' ORDER BY x DESC, id) AS sa, jsonb_agg(x ORDER BY id), "
    "jsonb_object_agg(id, x ORDER BY id) FROM t"
)


def ungrouped_model(rows: dict[int, tuple[int, int | None]]) -> tuple:
    if not rows:
        return (None, None, 0, None, None, None, None, None)
    xs = sorted((x for _, x in rows.values()), key=_asc_nulls_last)
    vals = [x for x in xs if x is not None]
    by_desc = sorted(((x, i) for i, (_, x) in rows.items() if x is not None), key=lambda p: (-p[0], p[1]))
    by_id = [rows[i][1] for i in sorted(rows)]
    return (
        xs[0],
        xs[-1],
        len(vals),
        sum(vals) if vals else None,
        max(vals) if vals else None,
        ",".join(str(x) for x, _ in by_desc) if by_desc else None,
        "[" + ", ".join("null" if x is None else str(x) for x in by_id) + "]",
        "{"
        + ", ".join(f'"{i}": ' + ("null" if rows[i][1] is None else str(rows[i][1])) for i in sorted(rows))
        + "}",
    )


def test_ungrouped_and_order_insensitive_ordered_aggregates(tmp_path: Path) -> None:
    """``first_value(x ORDER BY x)`` with no GROUP BY is an aggregate (it was a GroupingError);
    ``count(x ORDER BY x)``, ``sum(... ORDER BY ...)`` and ``max`` take the ORDER BY PostgreSQL
    allows and ignore it (it cannot change them); jsonb_agg / jsonb_object_agg keep their names."""
    rng = random.Random(11)
    db = open_db(tmp_path / "db")
    try:
        dml = _table_t(db, rng)
        db.execute(f"CREATE MATERIALIZED VIEW u AS {UNGROUPED}")
        names = db.execute("SELECT * FROM u")[0].names
        assert names == ["f", "l", "n", "s", "mx", "sa", "jsonb_agg", "jsonb_object_agg"]
        for _ in range(12):
            for _ in range(rng.randint(1, 3)):
                db.execute(dml.statement())
            rows = {i: (g, x) for i, g, x in db.execute("SELECT id, g, x FROM t")[0].rows}
            want = ungrouped_model(rows)
            got = tuple(
                None if v is None else (str(v) if i >= 6 else v)
                for i, v in enumerate(db.execute("SELECT * FROM u")[0].rows[0])
            )
            assert got == want
            assert db.execute(UNGROUPED)[0].rows[0] == db.execute("SELECT * FROM u")[0].rows[0]
    finally:
        db.close()
