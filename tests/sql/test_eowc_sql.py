"""EMIT ON WINDOW CLOSE end to end: at every committed epoch an EOWC MV equals DuckDB's answer
to its query restricted to the *closed* windows (window_end <= the watermark), rows are only
ever inserted (never retracted or updated), the aggregation's state holds only open windows, a
restart continues exactly, and what piestream does not support is refused with RisingWave's
texts (0A000).

The source and the model are `test_watermark_sql`'s: a directory of JSON files read one file
per epoch, so the watermark after each epoch is known exactly.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter

import pytest
from paired import T0, FileHarness, Model, Row, new_model, rows_table, watermark_rows
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.common.errors import PiestreamError
from piestream.plan.hash_agg import HashAggNode

_TUMBLE = "TUMBLE(s, ts, INTERVAL '10' SECOND)"
_HOP = "HOP(s, ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND)"
_DUCK = {
    _TUMBLE: "(SELECT *, time_bucket(INTERVAL '10 seconds', ts) AS window_start, "
    "time_bucket(INTERVAL '10 seconds', ts) + INTERVAL '10 seconds' AS window_end FROM s)",
    _HOP: "(SELECT h.*, h.window_start + INTERVAL '6 seconds' AS window_end FROM ("
    "SELECT s.*, time_bucket(INTERVAL '2 seconds', ts) - r.i * INTERVAL '2 seconds' AS window_start "
    "FROM s CROSS JOIN range(0, 3) r(i)) h)",
}
#: name -> (query, the window's width: its window_start + width <= watermark once closed)
MVS = {
    # the watermarked key is not the first group key: the planner puts it first
    "e_tumble": (
        f"SELECT k, window_start, count(*) AS c, sum(v) AS sv, max(v) AS mx FROM {_TUMBLE} "
        "GROUP BY k, window_start",
        "10 seconds",
    ),
    # two watermarked keys of one upstream column; a DISTINCT call (its dedup table is cleaned too)
    "e_hop": (
        f"SELECT window_start, window_end, count(*) AS c, min(v) AS mn, count(DISTINCT k) AS dk "
        f"FROM {_HOP} GROUP BY window_start, window_end",
        "6 seconds",
    ),
    # WHERE and HAVING around the aggregation
    "e_having": (
        f"SELECT window_start, count(*) AS c FROM {_TUMBLE} WHERE v > -20 "
        "GROUP BY window_start HAVING count(*) > 3",
        "10 seconds",
    ),
    # an EOWC aggregation over an EOWC aggregation: the outer closes each window in the epoch
    # the inner emits it
    "e_nested": (
        f"SELECT window_start, max(c) AS mc, sum(sv) AS total FROM ("
        f"SELECT k, window_start, count(*) AS c, sum(v) AS sv FROM {_TUMBLE} GROUP BY k, window_start) x "
        f"GROUP BY window_start",
        "10 seconds",
    ),
}


def duck_sql(sql: str) -> str:
    for pg, duck in _DUCK.items():
        sql = sql.replace(pg, duck)
    return sql


def _closed_answers(model: Model) -> dict[str, Counter[tuple[object, ...]]]:
    """DuckDB's answer of each MV's query over the accepted rows, closed windows only."""
    duck = duck_connect()
    duck.register("s_arrow", rows_table(model.accepted))
    duck.execute("CREATE TABLE s AS SELECT * FROM s_arrow")
    assert model.watermark is not None
    wm = model.watermark.isoformat(sep=" ")
    out = {}
    for name, (sql, width) in MVS.items():
        closed = (
            f"SELECT * FROM ({duck_sql(sql)}) q WHERE q.window_start + INTERVAL '{width}' <= TIMESTAMP '{wm}'"
        )
        out[name] = norm_rows(duck.execute(closed).fetchall())
    return out


def _feed_and_check(h: FileHarness, model: Model, rows: list[Row], seen: dict) -> None:
    model.epoch(rows)
    h.feed(rows)
    h.db.execute("FLUSH")  # the epoch after the file's: its aggregations close by the file's watermark
    want = _closed_answers(model)
    for name in MVS:
        got = h.query(f"SELECT * FROM {name}")
        assert got == want[name], f"{name} at watermark {model.watermark}:\n{diff_text(got, want[name])}"
        # emitted rows are final: everything seen before is still there, unchanged
        assert not (seen.get(name, Counter()) - got), name
        seen[name] = got


def test_eowc_mvs_equal_duckdb_over_closed_windows_at_every_epoch(h: FileHarness) -> None:
    rng = random.Random(32)
    for name, (sql, _) in MVS.items():
        h.db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql} EMIT ON WINDOW CLOSE")
        rel = h.db.catalog.get(name)
        assert rel is not None and rel.append_only  # inserts only
    model = new_model()
    seen: dict[str, Counter[tuple[object, ...]]] = {}
    base = T0
    for e in range(14):
        _feed_and_check(h, model, watermark_rows(rng, base, rng.randint(20, 50)), seen)
        base += dt.timedelta(seconds=rng.randint(1, 5))
        if e == 7:  # a restart keeps what was emitted and what is still open
            h.restart()
    assert model.late > 10
    assert all(sum(c.values()) > 2 for c in seen.values()), {n: sum(c.values()) for n, c in seen.items()}

    # each EOWC aggregation's state holds only open windows: its groups at or above the bound
    # (the closed ones were emitted and cleaned), fewer than the windows it emitted
    wm = model.watermark
    assert wm is not None
    for name in MVS:
        aggs = [n for n in h.plans(name) if isinstance(n, HashAggNode)]
        assert aggs and all(a.emit_on_window_close and a.append_only for a in aggs), name
        for agg in aggs:
            assert agg.watermark is not None
            bound = agg.watermark.bound({s.table.table_id: wm for s in agg.watermark.sources})
            for t in agg.tables():
                rows = h.table_rows(t)
                assert all(r[t.pk[0]] >= bound for r in rows), (name, t.name)
        state = h.table_rows(aggs[0].state_tables.value)  # the top aggregation's
        assert len(state) < sum(seen[name].values()), name


def test_explain_shows_the_eowc_aggregation(h: FileHarness) -> None:
    sql, _ = MVS["e_tumble"]
    lines = [
        r[0]
        for r in h.db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql} EMIT ON WINDOW CLOSE")[0].rows
    ]
    eowc = [line for line in lines if "HashAgg [eowc]" in line]
    assert eowc and "emit: window $1 closes below wm(table" in eowc[0]
    plain = [r[0] for r in h.db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql}")[0].rows]
    assert not any("[eowc]" in line for line in plain)


NEEDS_GROUP = "Emit-On-Window-Close mode requires a watermark column in GROUP BY."
CANNOT = "The query cannot be executed in Emit-On-Window-Close mode."


REFUSED = [
    # RisingWave's errors: no watermarked column in GROUP BY (or no GROUP BY at all)
    ("SELECT k, count(*) FROM s GROUP BY k", NEEDS_GROUP),
    ("SELECT count(*) FROM s", NEEDS_GROUP),
    (
        "SELECT window_start, count(*) FROM TUMBLE(t, ts, INTERVAL '10' SECOND) GROUP BY window_start",
        NEEDS_GROUP,
    ),
    ("SELECT * FROM t", CANNOT),
    # (a query without aggregation and a join above aggregations get an EowcSort:
    # test_eowc_sort_sql)
]


def test_eowc_refusals(h: FileHarness) -> None:
    h.db.execute("CREATE TABLE t (k INT, ts TIMESTAMP)")
    for sql, message in REFUSED:
        with pytest.raises(PiestreamError) as err:
            h.db.execute(f"CREATE MATERIALIZED VIEW x AS {sql} EMIT ON WINDOW CLOSE")
        assert err.value.sqlstate == "0A000", sql
        assert message in str(err.value), (sql, str(err.value))
        assert h.db.catalog.get("x") is None
    # a batch query keeps the parser's refusal; a sink plans its query as an MV would
    sql = REFUSED[0][0]
    with pytest.raises(PiestreamError, match="EMIT ON WINDOW CLOSE is not supported") as e2:
        h.db.execute(f"{sql} EMIT ON WINDOW CLOSE")
    assert e2.value.sqlstate == "0A000"
    with pytest.raises(PiestreamError, match=NEEDS_GROUP) as e3:
        h.db.execute(f"CREATE SINK k AS {sql} EMIT ON WINDOW CLOSE WITH (connector = 'blackhole')")
    assert e3.value.sqlstate == "0A000" and h.db.catalog.get("k") is None
