"""PostgreSQL's random(): float8 in [0, 1), a new value per row in batch queries; in a
materialized view 0A000 outside the select list (there it is evaluated once per row and stored:
test_impure_mv_sql.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from paired import open_db

from piestream.common.errors import PiestreamError
from piestream.server.database import Database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "db")
    yield d
    d.close()


def test_random_in_batch_and_refused_in_mvs(db: Database) -> None:
    r = db.execute("SELECT random() AS r, k FROM generate_series(1, 2000) AS k")[0]
    assert [str(t) for _, t in r.columns] == ["double precision", "integer"]
    vals = [v for v, _ in r.rows]
    assert len(set(vals)) == 2000 and all(0.0 <= v < 1.0 for v in vals)
    assert 0.4 < sum(vals) / len(vals) < 0.6
    assert db.execute("SELECT random() = random()")[0].rows == [(False,)]
    db.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    for sql in ["CREATE MATERIALIZED VIEW m AS SELECT id FROM t WHERE random() < 0.5"]:
        with pytest.raises(PiestreamError, match=r"random\(\) is not supported in materialized views") as e:
            db.execute(sql)
        assert e.value.sqlstate == "0A000", sql
