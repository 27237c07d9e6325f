"""``FETCH FIRST n ROWS WITH TIES`` (PostgreSQL's): batch and MVs keep every row tied by ORDER BY
with the last of the first n (after OFFSET), over rounds of random DML against a Python model of
PostgreSQL's rule (DuckDB has no WITH TIES); without ORDER BY it is PostgreSQL's 42601."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from paired import DmlGen, open_db

from piestream.common.errors import PiestreamError

#: name -> (query, ORDER BY g descending?, OFFSET, n)
QUERIES = {
    "w_asc": ("SELECT id, g FROM t ORDER BY g FETCH FIRST 3 ROWS WITH TIES", False, 0, 3),
    "w_desc_offset": (
        "SELECT id, g FROM t ORDER BY g DESC OFFSET 1 ROWS FETCH NEXT 2 ROWS WITH TIES",
        True,
        1,
        2,
    ),
}


def model(rows: dict[int, int], desc: bool, offset: int, n: int) -> Counter[tuple[int, int]]:
    """PostgreSQL's WITH TIES: rows offset..offset+n-1 in ORDER BY order, and every later row
    whose ORDER BY value equals the last of those (NULL g never generated)."""
    ordered = sorted(rows.items(), key=lambda r: (-r[1] if desc else r[1], r[0]))
    picked = ordered[offset : offset + n]
    if picked:
        last = picked[-1][1]
        picked += [r for r in ordered[offset + n :] if r[1] == last]
    return Counter(picked)


def test_with_ties_in_batch_and_mvs_equals_the_model(tmp_path: Path) -> None:
    rng = random.Random(32)
    db = open_db(tmp_path / "db")
    try:
        db.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT)")
        dml = DmlGen(rng, "t", {"g": lambda: rng.randint(0, 4)}, ["g"])
        for _ in range(4):
            db.execute(dml.statement())
        for name, (sql, *_) in QUERIES.items():
            db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        ties = 0
        for _ in range(25):
            for _ in range(rng.randint(1, 3)):
                db.execute(dml.statement())
            rows = dict(db.execute("SELECT id, g FROM t")[0].rows)
            for name, (sql, desc, offset, n) in QUERIES.items():
                want = model(rows, desc, offset, n)
                ties += sum(want.values()) > n
                got_mv = Counter(db.execute(f"SELECT * FROM {name}")[0].rows)
                got_batch = Counter(db.execute(sql)[0].rows)
                if offset:  # which of the rows tied across the OFFSET is skipped is left open
                    got_mv, got_batch, want = (
                        Counter(g for _, g in c.elements()) for c in (got_mv, got_batch, want)
                    )
                assert got_mv == want, name
                assert got_batch == want, f"batch {name}"
        assert ties > 5  # the ties really were kept beyond n rows
    finally:
        db.close()


def test_with_ties_needs_order_by(tmp_path: Path) -> None:
    db = open_db(tmp_path / "db")
    try:
        db.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT)")
        with pytest.raises(PiestreamError) as e:
            db.execute("SELECT id FROM t FETCH FIRST 2 ROWS WITH TIES")
        assert e.value.sqlstate == "42601" and "without ORDER BY" in str(e.value)
    finally:
        db.close()
