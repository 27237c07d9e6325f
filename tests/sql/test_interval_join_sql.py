"""Interval joins end to end: an equi-join with a time band between two watermarked sources
equals the plain join (DuckDB over the rows each watermark accepted) after every round, while
each side's join state below the other side's watermark minus the band is deleted, so the
state stays bounded however many rounds run; the join's output time columns carry a watermark
that cleans a downstream window aggregation; the same join without watermarks is a plain
HashJoin over every row.

Each source is a directory of JSON files, one file read per epoch (as in test_watermark_sql),
so the model is exact per source: a file is filtered by the watermark committed before it (the
max of ``t - 3 s`` over that source's earlier rows), then raises it. Late rows (below it) are
dropped by the source's WatermarkFilter.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paired import T0, FileHarness, Model, Row, random_rows, rows_table
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.plan.hash_agg import HashAggNode
from piestream.plan.hash_join import HashJoinNode
from piestream.plan.watermark import WatermarkFilterNode

DELAY = dt.timedelta(seconds=3)

SOURCE = (
    "CREATE SOURCE {name} (k INT, v INT, t TIMESTAMP{wm}) "
    "WITH (connector = 'file', path = '{path}') FORMAT PLAIN ENCODE JSON"
)
WM = ", WATERMARK FOR t AS t - INTERVAL '3' SECOND"

_COLS = "a.k, a.v AS av, b.v AS bv, a.t AS at, b.t AS bt"
MVS = {
    "m_between": f"SELECT {_COLS} FROM a JOIN b ON a.k = b.k "
    "AND b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t",
    # the band written as a pair of comparisons, offsets on both sides, one strict
    "m_ops": f"SELECT {_COLS} FROM a JOIN b ON a.k = b.k "
    "AND a.t >= b.t - INTERVAL '2' SECOND AND b.t + INTERVAL '1' SECOND > a.t - INTERVAL '3' SECOND "
    "AND a.v <> b.v",
    # a LEFT interval join: a cleaned left row keeps its NULL-padded row, never a wrong one
    "m_left": f"SELECT {_COLS} FROM a LEFT JOIN b ON a.k = b.k "
    "AND b.t BETWEEN a.t - INTERVAL '4' SECOND AND a.t + INTERVAL '1' SECOND",
    # a semi interval join (EXISTS): a cleaned row's emission is final
    "m_semi": "SELECT a.k, a.v, a.t FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k "
    "AND b.t BETWEEN a.t - INTERVAL '3' SECOND AND a.t + INTERVAL '2' SECOND)",
    # downstream of the join: a window aggregation cleaned by the join's output watermark
    "m_agg": "WITH j AS (SELECT a.t AS ta, b.v AS bv FROM a JOIN b ON a.k = b.k "
    "AND b.t BETWEEN a.t - INTERVAL '5' SECOND AND a.t) "
    "SELECT window_start, count(*) AS c, sum(bv) AS sb FROM TUMBLE(j, ta, INTERVAL '10' SECOND) "
    "GROUP BY window_start",
}
_DUCK = {
    "TUMBLE(j, ta, INTERVAL '10' SECOND)": "(SELECT *, time_bucket(INTERVAL '10 seconds', ta) "
    "AS window_start FROM j) tw"
}
# the same band over sources without watermarks: a plain join, every row kept
PLAIN = {"m_plain": MVS["m_between"].replace("FROM a JOIN b", "FROM pa AS a JOIN pb AS b")}


def _rows(rng: random.Random, base: dt.datetime, n: int) -> list[Row]:
    """Mostly near `base` (up to 4 s early, 2 s late), a tenth far behind it (late rows)."""
    return random_rows(rng, base, n, keys=3, values=(0, 9), late_ms=5_000)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[FileHarness]:
    """Sources a and b (watermarked), pa and pb (the same files, no watermark), and `arrived`."""
    harness = FileHarness(tmp_path, sources=("a", "b"), time_col="t")
    for s, d in harness.dirs.items():
        harness.db.execute(SOURCE.format(name=s, wm=WM, path=d))
        harness.db.execute(SOURCE.format(name=f"p{s}", wm="", path=d))
    harness.db.execute(
        "CREATE MATERIALIZED VIEW arrived AS "
        "SELECT (SELECT count(*) FROM pa) + (SELECT count(*) FROM pb) AS n"
    )
    yield harness
    harness.db.close()


def _check(h: FileHarness, models: dict[str, Model], names: dict[str, str]) -> None:
    duck = duck_connect()
    for s, m in models.items():
        duck.register(f"{s}_acc", rows_table(m.accepted, "t"))
        duck.register(f"{s}_all", rows_table(m.all, "t"))
        duck.execute(f"CREATE TABLE {s} AS SELECT * FROM {s}_acc")
        duck.execute(f"CREATE TABLE p{s} AS SELECT * FROM {s}_all")
    for name, sql in names.items():
        got = norm_rows(h.db.execute(f"SELECT * FROM {name}")[0].rows)
        for pg, duck_form in _DUCK.items():
            sql = sql.replace(pg, duck_form)
        want = norm_rows(duck.execute(sql).fetchall())
        assert sum(want.values()) > 0, name
        assert got == want, f"{name}:\n{diff_text(got, want)}"


def _global_watermark(h: FileHarness, f: WatermarkFilterNode) -> Any:
    return max(r[1] for r in h.table_rows(f.state_table))


def test_interval_joins_equal_duckdb_every_round_and_their_state_stays_bounded(h: FileHarness) -> None:
    rng = random.Random(32)
    for name, sql in (MVS | PLAIN).items():
        h.db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    models = {"a": Model(DELAY), "b": Model(DELAY)}
    base = T0
    for _ in range(26):
        a, b = _rows(rng, base, rng.randint(10, 25)), _rows(rng, base, rng.randint(10, 25))
        models["a"].epoch(a)
        models["b"].epoch(b)
        h.feed(a, b)
        base += dt.timedelta(seconds=rng.randint(1, 4))
        _check(h, models, MVS | PLAIN)
    assert models["a"].late > 10 and models["b"].late > 10
    h.db.execute("FLUSH")  # the joins clean by the watermarks committed before their epoch

    # every interval join deletes its sides' rows below their bounds: what is left is a few
    # rounds' rows, not the run's
    for name in MVS:
        nodes = h.plans(name)
        joins = [n for n in nodes if isinstance(n, HashJoinNode)]
        assert len(joins) == 1 and joins[0].interval is not None, name
        band = joins[0].interval
        filters = [n for n in nodes if isinstance(n, WatermarkFilterNode)]
        wms = {f.state_table.table_id: _global_watermark(h, f) for f in filters}
        assert sorted(wms.values()) == sorted(m.watermark for m in models.values())
        for side, col, clean in ((0, band.left_col, band.clean_left), (1, band.right_col, band.clean_right)):
            assert clean is not None, (name, side)
            bound = clean.bound(wms)
            table = joins[0].left_table if side == 0 else joins[0].right_table
            rows = h.table_rows(table)
            accepted = len(models["ab"[side]].accepted)
            assert all(r[col] >= bound for r in rows), (name, side)
            assert len(rows) < accepted / 4, (name, side, len(rows), accepted)
            if joins[0].uses_degree_table(side):  # degrees go with their rows
                degree = joins[0].left_degree_table if side == 0 else joins[0].right_degree_table
                assert len(h.table_rows(degree)) == len(rows)

    # the join's output time column carries a watermark: the aggregation above it is cleaned
    agg = next(n for n in h.plans("m_agg") if isinstance(n, HashAggNode))
    assert agg.watermark is not None
    minutes = len(h.db.execute("SELECT * FROM m_agg")[0].rows)
    assert len(h.table_rows(agg.state_tables.value)) < minutes

    # without watermarks the same band is a plain join: nothing cleaned, every row kept
    plain = [n for n in h.plans("m_plain") if isinstance(n, HashJoinNode)]
    assert len(plain) == 1 and plain[0].interval is None and plain[0].watermark is None
    assert len(h.table_rows(plain[0].left_table)) == len(models["a"].all)


def test_explain_names_the_interval_join_and_its_cleaning(h: FileHarness) -> None:
    text = "\n".join(
        r[0] for r in h.db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {MVS['m_between']}")[0].rows
    )
    assert "IntervalJoin { type: inner" in text
    assert "interval: $6 - $2 in [-5000000us, +0us]" in text
    assert "clean_left: $2 < wm(table " in text and "clean_right: $6 < wm(table " in text
    plain = "\n".join(
        r[0] for r in h.db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {PLAIN['m_plain']}")[0].rows
    )
    assert "IntervalJoin" not in plain and "HashJoin { type: inner" in plain
