"""Temporal (lookup) joins, ``stream [LEFT] JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() ON ...``:
each stream row joins the dimension as committed before its epoch, later changes of the
dimension never retract or update rows already joined (RisingWave's rule), over rounds of
random DML on both sides against a Python model; and the refusals, with RisingWave's texts."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from piestream.common.errors import PiestreamError
from piestream.plan.temporal_join import TemporalJoinNode
from piestream.server.database import Database, DatabaseConfig

MVS = {
    "j_inner": "SELECT s.id, s.v, d.name, d.w FROM s JOIN d FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = d.k",
    # a LEFT join whose ON has a condition on the dimension: a match failing it pads with NULLs
    "j_left": "SELECT s.id, d.name FROM s LEFT JOIN d FOR SYSTEM_TIME AS OF PROCTIME() AS d "
    "ON s.k = d.k AND d.w > 15",
    # the lookup key is an expression of the stream row; a WHERE on both sides above the join
    "j_expr": "SELECT s.id, d.w FROM s JOIN d FOR SYSTEM_TIME AS OF PROCTIME() ON s.k + 1 = d.k "
    "WHERE s.v < d.w",
}


def model_rows(name: str, s_rows: list[tuple[int, int, int]], dim: dict[int, tuple[str, int]]) -> list[tuple]:
    out: list[tuple] = []
    for i, k, v in s_rows:
        if name == "j_inner" and k in dim:
            out.append((i, v, *dim[k]))
        elif name == "j_left":
            hit = dim.get(k)
            out.append((i, hit[0] if hit is not None and hit[1] > 15 else None))
        elif name == "j_expr" and k + 1 in dim and v < dim[k + 1][1]:
            out.append((i, dim[k + 1][1]))
    return out


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    cfg = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2, background_compaction=False)
    d = Database(tmp_path / "db", config=cfg)  # barriers run: a DML statement returns once committed
    d.execute("CREATE TABLE s (id INT, k INT, v INT) APPEND ONLY")
    d.execute("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR, w INT)")
    yield d
    d.close()


def test_each_row_joins_the_dimension_of_its_epoch_and_is_never_revisited(db: Database) -> None:
    rng = random.Random(13)
    dim: dict[int, tuple[str, int]] = {}
    for k in range(6):
        dim[k] = (f"n{k}", rng.randint(0, 30))
    db.execute("INSERT INTO d VALUES " + ", ".join(f"({k}, '{n}', {w})" for k, (n, w) in dim.items()))
    for name, sql in MVS.items():
        db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        rel = db.catalog.get(name)
        assert rel is not None and rel.append_only
    want: dict[str, Counter[tuple]] = {n: Counter() for n in MVS}
    next_id = 0
    for _ in range(6):
        # the dimension changes: updates, deletes, new keys (committed before the stream rows)
        for _ in range(3):
            k = rng.randint(0, 8)
            op = rng.random()
            if k in dim and op < 0.3:
                db.execute(f"DELETE FROM d WHERE k = {k}")
                del dim[k]
            elif k in dim:
                w = rng.randint(0, 30)
                db.execute(f"UPDATE d SET w = {w}, name = name || 'u' WHERE k = {k}")
                dim[k] = (dim[k][0] + "u", w)
            else:
                dim[k] = (f"n{k}", rng.randint(0, 30))
                db.execute(f"INSERT INTO d VALUES ({k}, '{dim[k][0]}', {dim[k][1]})")
        batch = []
        for _ in range(rng.randint(5, 12)):
            k = rng.choice([*range(-1, 9), None]) if rng.random() < 0.1 else rng.randint(-1, 8)
            batch.append((next_id, k, rng.randint(0, 30)))
            next_id += 1
        values = ", ".join(f"({i}, {'NULL' if k is None else k}, {v})" for i, k, v in batch)
        db.execute(f"INSERT INTO s VALUES {values}")
        db.execute("FLUSH")
        live = [(i, k, v) for i, k, v in batch if k is not None]
        for name in MVS:
            want[name] += Counter(model_rows(name, live, dim))
            if name == "j_left":  # a NULL key matches nothing, and the row stays
                want[name] += Counter((i, None) for i, k, _ in batch if k is None)
            got = Counter(db.execute(f"SELECT * FROM {name}")[0].rows)
            assert got == want[name], name
    assert all(sum(c.values()) > 10 for c in want.values())
    # no state: the joins keep nothing of the stream side
    rel = db.catalog.get("j_inner")
    assert rel is not None and rel.job_id is not None
    nodes = [n for f in db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]
    joins = [n for n in nodes if isinstance(n, TemporalJoinNode)]
    assert joins and all(not j.tables() for j in joins)


def test_explain_and_refusals(db: Database) -> None:
    lines = [r[0] for r in db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {MVS['j_left']}")[0].rows]
    assert any("TemporalJoin { type: LeftOuter, lookup: d by pk = [$1]" in line for line in lines)
    db.execute("CREATE TABLE r (k INT, w INT)")  # not append-only
    refused = [
        (
            "CREATE MATERIALIZED VIEW x AS SELECT r.w, d.name FROM r JOIN d FOR SYSTEM_TIME AS OF PROCTIME() "
            "ON r.k = d.k",
            "Temporal join requires an append-only left input",
        ),
        (
            "CREATE MATERIALIZED VIEW x AS SELECT s.id FROM s JOIN d FOR SYSTEM_TIME AS OF PROCTIME() "
            "ON s.v = d.w",
            "Temporal join requires the equivalence join condition includes the key columns",
        ),
        (
            "SELECT s.id FROM s JOIN d FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = d.k",
            "do not support temporal join for batch",
        ),
        (
            "CREATE MATERIALIZED VIEW x AS SELECT * FROM d FOR SYSTEM_TIME AS OF PROCTIME()",
            "supported only on the right side of a JOIN",
        ),
        (
            "CREATE MATERIALIZED VIEW x AS SELECT s.id FROM s JOIN d FOR SYSTEM_TIME AS OF NOW() "
            "ON s.k = d.k",
            "only FOR SYSTEM_TIME AS OF PROCTIME()",
        ),
        (
            "CREATE MATERIALIZED VIEW x AS SELECT s.id FROM s RIGHT JOIN d FOR SYSTEM_TIME AS OF PROCTIME() "
            "ON s.k = d.k",
            "must be an INNER or LEFT JOIN",
        ),
    ]
    for sql, message in refused:
        with pytest.raises(PiestreamError) as err:
            db.execute(sql)
        assert err.value.sqlstate == "0A000", sql
        assert message in str(err.value), (sql, str(err.value))
        assert db.catalog.get("x") is None
