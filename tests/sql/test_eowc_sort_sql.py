"""EMIT ON WINDOW CLOSE through EowcSort (RisingWave's sort buffer), end to end: a query without
aggregation, a join above EOWC aggregations, OVER windows and SESSION frames. At every committed
epoch each view equals DuckDB's answer to its query over the *final* rows (ts below the
watermark; for the join of windowed aggregations: the closed windows), a restart halfway
continues exactly, each EowcSort's state holds only rows at or above the watermark, and EXPLAIN
shows the operator.

The source and the model are `test_watermark_sql`'s (one JSON file read per epoch, so the
watermark after each epoch is known exactly).
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from pathlib import Path

import pytest
from paired import T0, FileHarness, Model, new_model, rows_table, watermark_rows
from sqldiff import diff_text, duck_connect, norm_rows
from test_eowc_sql import _TUMBLE, duck_sql

from piestream.common.errors import PiestreamError
from piestream.connectors.sinks import read_sink
from piestream.plan.eowc_sort import EowcSortNode
from piestream.plan.general_over_window import GeneralOverWindowNode

_SESSION = "PARTITION BY k ORDER BY ts SESSION WITH GAP INTERVAL '2' SECOND"
#: DuckDB has no SESSION frame: a row starts a session where ts >= the previous ts + gap
_DUCK_SESSION = """WITH a AS (SELECT *, CASE WHEN lag(ts) OVER (PARTITION BY k ORDER BY ts) IS NULL
    OR ts >= lag(ts) OVER (PARTITION BY k ORDER BY ts) + INTERVAL '2 seconds' THEN 1 ELSE 0 END AS st
    FROM s), b AS (SELECT *, sum(st) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS sid
    FROM a)
SELECT k, ts, v, min(ts) OVER p, max(ts) OVER p, count(*) OVER p, sum(v) OVER p, min(v) OVER p,
    max(v) OVER p FROM b WINDOW p AS (PARTITION BY k, sid)"""

#: name -> (query, DuckDB's query or None for the same, "final": over rows below the watermark |
#: "closed": the answer's windows closed by it, the view append-only?)
MVS = {
    # no aggregation: the rows themselves, once final
    "o_rows": ("SELECT k, v, ts FROM s WHERE v > -30", None, "final", True),
    # a join above EOWC aggregations
    "o_join": (
        f"SELECT a.window_start, a.c, b.c AS c2 FROM (SELECT window_start, count(*) AS c FROM {_TUMBLE} "
        f"GROUP BY window_start) a JOIN (SELECT window_start, count(*) AS c FROM {_TUMBLE} WHERE k = 1 "
        f"GROUP BY window_start) b ON a.window_start = b.window_start",
        None,
        "closed",
        True,
    ),
    # OVER windows looking back only: every final row's values are final (append-only)
    "o_over": (
        "SELECT k, v, ts, rank() OVER (PARTITION BY k ORDER BY ts) AS r, "
        "count(*) OVER (PARTITION BY k ORDER BY ts) AS c, max(v) OVER (PARTITION BY k ORDER BY ts) AS mx, "
        "sum(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '3' SECOND PRECEDING AND "
        "CURRENT ROW) AS s3 FROM s",
        "SELECT k, v, ts, rank() OVER (PARTITION BY k ORDER BY ts) AS r, "
        "count(*) OVER (PARTITION BY k ORDER BY ts) AS c, max(v) OVER (PARTITION BY k ORDER BY ts) AS mx, "
        "sum(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '3 seconds' PRECEDING AND "
        "CURRENT ROW) AS s3 FROM s",
        "final",
        True,
    ),
    # a frame looking ahead: a final row's value grows as later rows become final
    "o_ahead": (
        "SELECT k, ts, count(*) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN CURRENT ROW AND "
        "INTERVAL '2' SECOND FOLLOWING) AS c FROM s",
        "SELECT k, ts, count(*) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN CURRENT ROW AND "
        "INTERVAL '2 seconds' FOLLOWING) AS c FROM s",
        "final",
        False,
    ),
    # bounded reach (lag, ROWS offsets): the OverWindow keeps only each partition's last rows.
    # Only ts-derived values: rows tied on ts may be ordered either way, the multiset stays.
    "o_lag": (
        "SELECT k, ts, lag(ts) OVER (PARTITION BY k ORDER BY ts) AS p, min(ts) OVER (PARTITION BY k "
        "ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS m3 FROM s",
        None,
        "final",
        True,
    ),
    "o_lead": (
        "SELECT k, ts, lead(ts) OVER (PARTITION BY k ORDER BY ts) AS nx, count(*) OVER (PARTITION BY k "
        "ORDER BY ts ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS c FROM s",
        None,
        "final",
        False,
    ),
    # session windows: each row with its session's start, last event, count, sum, min, max
    "o_session": (
        "SELECT k, ts, v, first_value(ts) OVER w AS s0, last_value(ts) OVER w AS s1, count(*) OVER w AS c, "
        f"sum(v) OVER w AS sv, min(v) OVER w AS mn, max(v) OVER w AS mx FROM s WINDOW w AS ({_SESSION})",
        _DUCK_SESSION,
        "final",
        False,
    ),
}


def _answers(model: Model) -> dict[str, Counter[tuple[object, ...]]]:
    duck = duck_connect()
    assert model.watermark is not None
    wm = model.watermark
    out = {}
    for mode in ("final", "closed"):
        rows = [r for r in model.accepted if mode == "closed" or r[2] < wm]
        duck.register("s_arrow", rows_table(rows))
        duck.execute("DROP TABLE IF EXISTS s")
        duck.execute("CREATE TABLE s AS SELECT * FROM s_arrow")
        duck.unregister("s_arrow")
        for name, (sql, duck_q, m, _) in MVS.items():
            if m != mode:
                continue
            q = duck_q or duck_sql(sql)
            if mode == "closed":
                q = f"SELECT * FROM ({q}) q WHERE q.window_start + INTERVAL '10 seconds' <= TIMESTAMP '{wm}'"
            out[name] = norm_rows(duck.execute(q).fetchall())
    return out


def test_eowc_sort_views_equal_duckdb_over_final_rows_at_every_epoch(h: FileHarness, tmp_path: Path) -> None:
    rng = random.Random(33)
    for name, (sql, _, _, append_only) in MVS.items():
        h.db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql} EMIT ON WINDOW CLOSE")
        rel = h.db.catalog.get(name)
        assert rel is not None and rel.append_only == append_only, name
        assert any(isinstance(n, EowcSortNode) for n in h.plans(name)), name
    # a sink of an EOWC query: append-only (no force needed), what the view holds
    out = tmp_path / "sink"
    h.db.execute(
        f"CREATE SINK o_sink AS {MVS['o_rows'][0]} EMIT ON WINDOW CLOSE "
        f"WITH (connector = 'parquet', path = '{out}', type = 'append-only')"
    )
    model = new_model()
    seen: dict[str, Counter[tuple[object, ...]]] = {}
    base = T0
    for e in range(12):
        model.epoch(rows := watermark_rows(rng, base, rng.randint(20, 50)))
        h.feed(rows)
        h.db.execute("FLUSH")  # the epoch after the file's: it emits below the file's watermark
        want = _answers(model)
        for name, (*_, append_only) in MVS.items():
            got = h.query(f"SELECT * FROM {name}")
            assert got == want[name], f"{name} at watermark {model.watermark}:\n{diff_text(got, want[name])}"
            if append_only:  # emitted rows are final: everything seen before is still there
                assert not (seen.get(name, Counter()) - got), name
            seen[name] = got
        base += dt.timedelta(seconds=rng.randint(1, 4))
        if e == 5:  # a restart keeps what was emitted and what is still buffered
            h.restart()
    assert model.late > 10
    assert all(sum(c.values()) > 2 for c in seen.values()), {n: sum(c.values()) for n, c in seen.items()}
    sunk = read_sink(str(out)).to_pylist()
    assert norm_rows([(r["k"], r["v"], r["ts"]) for r in sunk]) == seen["o_rows"]  # each row once
    sessions = {r[3] for r in seen["o_session"]}
    assert len(sessions) > 5 and any(r[5] > 1 for r in seen["o_session"])  # real sessions

    # each EowcSort holds only rows at or above its bound: fewer than it emitted
    wm = model.watermark
    assert wm is not None
    for name in MVS:
        for sort in (n for n in h.plans(name) if isinstance(n, EowcSortNode)):
            bound = sort.watermark.bound({s.table.table_id: wm for s in sort.watermark.sources})
            state = h.table_rows(sort.state_table)
            assert all(r[sort.sort_col] >= bound for r in state), name
            assert len(state) < sum(seen[name].values()), name
    # bounded reach over final rows: each partition keeps its last before + after + 2 rows
    for name, keep in (("o_lag", 4), ("o_lead", 5)):
        over = next(n for n in h.plans(name) if isinstance(n, GeneralOverWindowNode))
        state = h.table_rows(over.state_table)
        per_key = Counter(r[0] for r in state)
        assert state and max(per_key.values()) <= keep, (name, per_key)
        assert sum(seen[name].values()) > 4 * len(state), name
    # unbounded reach (rank, count(*) from the partition's start) keeps every final row
    over = next(n for n in h.plans("o_over") if isinstance(n, GeneralOverWindowNode))
    assert len(h.table_rows(over.state_table)) == sum(seen["o_over"].values())


def test_explain_shows_the_eowc_sort(h: FileHarness) -> None:
    sql = MVS["o_session"][0]
    lines = [
        r[0]
        for r in h.db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql} EMIT ON WINDOW CLOSE")[0].rows
    ]
    marker = "EowcSort { sort_column: ts, emit: rows below wm(table"
    sort = [i for i, line in enumerate(lines) if marker in line]
    over = [i for i, line in enumerate(lines) if "OverWindow" in line and "SESSION WITH GAP" in line]
    assert sort and over and over[0] < sort[0], lines  # the sort feeds the window


REFUSED = [
    # RisingWave: SESSION frames only in batch and EOWC streaming
    (f"SELECT k, first_value(v) OVER ({_SESSION}) FROM s", "", "Session frame is not yet supported"),
    # EOWC over-window: ordered by the watermark column alone
    ("SELECT k, rank() OVER (PARTITION BY k ORDER BY v) FROM s", " EMIT ON WINDOW CLOSE", "watermark column"),
    ("SELECT k, rank() OVER (ORDER BY ts DESC) FROM s", " EMIT ON WINDOW CLOSE", "watermark column"),
    (
        "SELECT k, count(*) OVER (PARTITION BY k ORDER BY ts SESSION WITH GAP INTERVAL '1' SECOND) FROM t",
        " EMIT ON WINDOW CLOSE",
        "watermark column",
    ),
]


def test_refusals(h: FileHarness) -> None:
    h.db.execute("CREATE TABLE t (k INT, ts TIMESTAMP)")
    for sql, emit, message in REFUSED:
        with pytest.raises(PiestreamError) as err:
            h.db.execute(f"CREATE MATERIALIZED VIEW x AS {sql}{emit}")
        assert err.value.sqlstate == "0A000", sql
        assert message in str(err.value), (sql, str(err.value))
        assert h.db.catalog.get("x") is None


def test_batch_select_computes_session_frames(h: FileHarness) -> None:
    """A SESSION frame in a plain SELECT (RisingWave: batch mode), over integer and timestamp
    orders with NULLs and ties, equals DuckDB's sessions."""
    rng = random.Random(7)
    rows = [
        (
            rng.randint(0, 3),
            rng.choice([None, *range(40)]),
            rng.randint(-5, 5),
            T0 + dt.timedelta(seconds=rng.randint(0, 60)),
        )
        for _ in range(150)
    ]
    values = ", ".join(
        f"({k}, {'NULL::INT' if n is None else n}, {v}, TIMESTAMP '{ts.isoformat(sep=' ')}')"
        for k, n, v, ts in rows
    )
    table = f"(VALUES {values}) AS b(k, n, v, ts)"  # a batch query of constants: no DML epochs
    duck = duck_connect()
    duck.execute("CREATE TABLE b (k INT, n INT, v INT, ts TIMESTAMP)")
    duck.executemany("INSERT INTO b VALUES (?, ?, ?, ?)", rows)
    for col, gap, duck_gap in (("n", "3", "3"), ("ts", "INTERVAL '4' SECOND", "INTERVAL '4 seconds'")):
        got = h.query(
            f"SELECT k, {col}, v, first_value({col}) OVER w, last_value({col}) OVER w, count(*) OVER w, "
            f"sum(v) OVER w, min(v) OVER w, max(v) OVER w FROM {table} "
            f"WINDOW w AS (PARTITION BY k ORDER BY {col} SESSION WITH GAP {gap})"
        )
        # a session starts at a partition's first row or >= gap after the previous value; the
        # NULLs (last in ascending order) are one session
        want = norm_rows(
            duck.execute(
                f"""WITH a AS (SELECT *, lag({col}) OVER (PARTITION BY k ORDER BY {col}) AS p,
                    row_number() OVER (PARTITION BY k ORDER BY {col}) AS rn FROM b),
                c AS (SELECT *, sum(CASE WHEN rn = 1 OR ({col} IS NULL) <> (p IS NULL)
                    OR {col} >= p + {duck_gap} THEN 1 ELSE 0 END)
                    OVER (PARTITION BY k ORDER BY {col} ROWS UNBOUNDED PRECEDING) AS sid FROM a)
                SELECT k, {col}, v, min({col}) OVER s, max({col}) OVER s, count(*) OVER s, sum(v) OVER s,
                    min(v) OVER s, max(v) OVER s FROM c WINDOW s AS (PARTITION BY k, sid)"""
            ).fetchall()
        )
        assert got == want, f"{col}:\n{diff_text(got, want)}"
        assert len({r[3] for r in got}) > 8
