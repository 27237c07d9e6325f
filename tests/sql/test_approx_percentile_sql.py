"""RisingWave's ``approx_percentile(q [, relative_error]) WITHIN GROUP (ORDER BY x)``: piestream
answers exactly (the float8 value at RisingWave's rank max(floor(q * count), 1) of the order, which
is within any relative error). Materialized views equal the query and a Python model of that rank
over DuckDB's copy of the table at every committed epoch under random INSERT / UPDATE / DELETE
(NULL inputs, emptied groups, FILTER, DESC, q = 0 and 1, a ROLLUP), across a restart; batch SELECT
too; the errors and refused forms are checked."""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from paired import DmlGen, Paired, open_db

from piestream.common.errors import PiestreamError
from piestream.server.database import Database

QUERY = (
    "SELECT k, approx_percentile(0.5) WITHIN GROUP (ORDER BY x) AS med, "
    "approx_percentile(0.9, 0.001) WITHIN GROUP (ORDER BY x DESC) AS p9d, "
    "approx_percentile(0) WITHIN GROUP (ORDER BY r) AS lo, "
    "approx_percentile(1) WITHIN GROUP (ORDER BY b) AS hi, "
    "approx_percentile(0.3) WITHIN GROUP (ORDER BY x) FILTER (WHERE r > 0) AS f FROM t GROUP BY k"
)
ROLLUP = "SELECT k, approx_percentile(0.75) WITHIN GROUP (ORDER BY x) AS q FROM t GROUP BY ROLLUP (k)"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "db")
    yield d
    d.close()


def _at_rank(values: list, q: float, desc: bool = False) -> float | None:
    """RisingWave's approx_percentile rank, exactly: the max(floor(q * n), 1)-th value in order."""
    vals = sorted((v for v in values if v is not None), reverse=desc)
    if not vals:
        return None
    return float(vals[max(math.floor(q * len(vals)) - 1, 0)])


def _model(rows: list[tuple]) -> tuple[Counter, Counter]:
    groups: dict[object, list[tuple]] = defaultdict(list)
    for row in rows:
        groups[row[0]].append(row)
    out = Counter()
    for k, rs in groups.items():
        xs = [x for _, x, _, _ in rs]
        out[
            (
                k,
                _at_rank(xs, 0.5),
                _at_rank(xs, 0.9, desc=True),
                _at_rank([r for _, _, r, _ in rs], 0.0),
                _at_rank([b for _, _, _, b in rs], 1.0),
                _at_rank([x for _, x, r, _ in rs if r is not None and r > 0], 0.3),
            )
        ] += 1
    rollup = Counter((k, _at_rank([x for _, x, _, _ in rs], 0.75)) for k, rs in groups.items())
    rollup[(None, _at_rank([r[1] for r in rows], 0.75))] += 1
    return out, rollup


def _dml(rng: random.Random) -> DmlGen:
    def maybe(f):  # type: ignore[no-untyped-def]
        return lambda: None if rng.random() < 0.1 else f()

    columns = {
        "k": maybe(lambda: rng.randint(0, 2)),
        "x": maybe(lambda: rng.randint(-20, 20)),
        "r": maybe(lambda: rng.randint(-1000, 1000) / 8),
        "b": maybe(lambda: rng.randint(-(2**40), 2**40)),
    }
    return DmlGen(rng, "t", columns, updates=("x", "r", "b", "k", "x = x + 1"))


def test_approx_percentile_equals_the_exact_rank_at_every_epoch(tmp_path: Path) -> None:
    both = Paired(tmp_path / "db")
    try:
        dml = _dml(random.Random(7))
        ddl = "CREATE TABLE t (id INT PRIMARY KEY, k INT, x INT, r DOUBLE PRECISION, b BIGINT)"
        both.start(ddl, dml, {"ap": QUERY, "apr": ROLLUP})
        for step in range(28):
            if step == 10:
                both.restart()
            sql = "DELETE FROM t WHERE k = 1" if step == 18 else dml.statement()
            both.run(sql)
            want, want_rollup = _model(both.duck.execute("SELECT k, x, r, b FROM t").fetchall())
            assert both.rows("SELECT * FROM ap") == want, (step, sql)
            assert both.rows("SELECT * FROM apr") == want_rollup, (step, sql)
            if step % 7 == 6:
                assert both.rows(QUERY) == want, step
                assert both.rows(ROLLUP) == want_rollup, step
    finally:
        both.close()


def test_approx_percentile_values_and_errors(db: Database) -> None:
    vals = "(VALUES (1), (2), (2), (3), (3), (10), (NULL)) v(x)"
    r = db.execute(
        "SELECT approx_percentile(0.5) WITHIN GROUP (ORDER BY x), approx_percentile(0.9, 0.1) "
        "WITHIN GROUP (ORDER BY x), approx_percentile(0.1) WITHIN GROUP (ORDER BY x DESC), "
        f"approx_percentile(0.5) WITHIN GROUP (ORDER BY x) FILTER (WHERE x > 2) FROM {vals}"
    )[0]
    assert [c for c, _ in r.columns] == ["approx_percentile"] * 4
    assert {str(t) for _, t in r.columns} == {"double precision"}
    # six values: ranks floor(3) = 3, floor(5.4) = 5, max(floor(0.6), 1) = 1 (descending), 1 of 3
    assert r.rows == [(2.0, 3.0, 10.0, 3.0)]
    db.execute("CREATE TABLE t (id INT PRIMARY KEY, x INT, s VARCHAR)")
    assert db.execute("SELECT approx_percentile(0.5) WITHIN GROUP (ORDER BY x) FROM t")[0].rows == [(None,)]
    errors = [
        ("SELECT approx_percentile(1.5) WITHIN GROUP (ORDER BY x) FROM t", "22003", "between 0 and 1"),
        ("SELECT approx_percentile(0.5, 0) WITHIN GROUP (ORDER BY x) FROM t", "22023", "relative_error"),
        ("SELECT approx_percentile(0.5, 1) WITHIN GROUP (ORDER BY x) FROM t", "22023", "relative_error"),
        ("SELECT approx_percentile(0.5, x) WITHIN GROUP (ORDER BY x) FROM t", "22023", "relative_error"),
        (
            "SELECT approx_percentile(0.5) WITHIN GROUP (ORDER BY s) FROM t",
            "42883",
            r"approx_percentile\(text\)",
        ),
        ("SELECT approx_percentile(0.5) WITHIN GROUP (ORDER BY x, id) FROM t", "0A000", "WITHIN GROUP"),
        ("SELECT approx_percentile(0.5) WITHIN GROUP (ORDER BY x) OVER () FROM t", "0A000", "WITHIN GROUP"),
    ]
    for sql, state, message in errors:
        with pytest.raises(PiestreamError, match=message) as e:
            db.execute(sql)
        assert e.value.sqlstate == state, sql
