"""The Nexmark queries (reference §8) as MVs over the three generated tables, equal to DuckDB
computing the same SQL over the same events; and their stream plans (stream keys, state tables,
fragments) as golden files.

DuckDB has no TUMBLE / HOP table functions, PostgreSQL's to_char or regexp_match: `duck_sql`
rewrites those spots into DuckDB's equivalents; everything else is the query text as is.
Goldens: `PIESTREAM_UPDATE_GOLDEN=1 pytest tests/sql/test_nexmark_sql.py` rewrites them.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from paired import table_rows
from sqldiff import diff_text, duck_connect, norm_rows

from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.queries import QUERIES, setup_sql
from piestream.connectors.nexmark.spark_baseline import event_table
from piestream.connectors.nexmark.tables_sql import nexmark_ddl
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

N = 10_000  # 200 people, 600 auctions (fewer than q105's LIMIT: its ties cannot matter), 9200 bids
GOLDEN = Path(__file__).parent / "golden" / "nexmark"
# not maintained incrementally yet (each would fail at CREATE with 0A000, checked below)
UNSUPPORTED: set[str] = set()
# EMIT ON WINDOW CLOSE queries (q11's session windows): over watermarked sources only, and their
# answer is the query over the final events (`test_q11_...`); refused over tables with 0A000
EOWC_ONLY = {n for n, q in QUERIES.items() if q.emit_on_window_close}
# q12's processing-time windows read the bid source's PROCTIME() column (`test_q12_...`)
PROCTIME_ONLY = {n for n, q in QUERIES.items() if q.proctime}
SPECIAL = EOWC_ONLY | PROCTIME_ONLY
# ROW_NUMBER ties (hot auctions' prices are multiples of 100): compare the tie-free columns
TIE_FREE = {"q19": "auction, price", "q6": "seller"}
# q6's frames follow ORDER BY date_time, which ties (54 sellers' picked bids share a timestamp, and
# one auction's lowest price is tied): its averages depend on the tie order, which PostgreSQL and
# DuckDB leave open too. The same query with the ties broken must equal DuckDB exactly.
Q6_TIES_BROKEN = (
    QUERIES["q6"]
    .sql.replace("ORDER BY Q.date_time", "ORDER BY Q.date_time, Q.final")
    .replace("ORDER BY B.price)", "ORDER BY B.price, B.date_time)")
)

_HOP = "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)"
_REGEX = "(regexp_match(url, '(&|^)channel_id=([^&]*)'))[2]"
_DUCK_WINDOWS = {
    _HOP: "(SELECT b.*, time_bucket(INTERVAL '2 seconds', b.date_time) - r.i * INTERVAL '2 seconds' "
    "AS window_start, time_bucket(INTERVAL '2 seconds', b.date_time) - r.i * INTERVAL '2 seconds' "
    "+ INTERVAL '10 seconds' AS window_end FROM bid b CROSS JOIN range(0, 5) r(i))",
    **{
        f"TUMBLE({t}, date_time, INTERVAL '10' SECOND)": f"(SELECT *, time_bucket(INTERVAL '10 seconds', "
        f"date_time) AS window_start, time_bucket(INTERVAL '10 seconds', date_time) + "
        f"INTERVAL '10 seconds' AS window_end FROM {t})"
        for t in ("bid", "person", "auction")
    },
    _REGEX: "(CASE WHEN regexp_matches(url, '(&|^)channel_id=([^&]*)') "
    "THEN regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) END)",
    "0.908 * price": "CAST(0.908 AS DECIMAL(4, 3)) * price",
    # q13: the side input never changes, so the lookup join is the plain join
    " FOR SYSTEM_TIME AS OF PROCTIME()": "",
}
_TO_CHAR = {"'YYYY-MM-DD'": "'%Y-%m-%d'", "'HH:MI'": "'%I:%M'", "'HH:mm'": "'%I:%m'"}


def duck_sql(sql: str) -> str:
    for pg, duck in _DUCK_WINDOWS.items():
        sql = sql.replace(pg, duck)
    return re.sub(r"(?i)to_char\(([^,]+), ('[^']+')\)", lambda m: f"strftime({m[1]}, {_TO_CHAR[m[2]]})", sql)


def _events(table: str) -> pa.Table:
    t = event_table(NexmarkConfig(), table, 0, N)
    # the tables' TIMESTAMP columns have no time zone
    return t.cast(
        pa.schema(
            [pa.field(f.name, pa.timestamp("us")) if pa.types.is_timestamp(f.type) else f for f in t.schema]
        )
    )


def _side_input(s: Session) -> None:
    """q13's side input, committed before any Nexmark event arrives (the lookup join reads the
    version committed before each row's epoch)."""
    s.execute("SET implicit_flush = false")  # the barriers are stopped: FLUSH commits
    for stmt in setup_sql(QUERIES):
        s.execute(stmt)
    s.execute("FLUSH")
    s.execute("SET implicit_flush = true")


def _duck_with_side_input() -> Any:
    duck = duck_connect()
    for stmt in setup_sql(QUERIES):
        duck.execute(stmt)
    return duck


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One database: the three tables, every query as an MV, all N events ingested."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(tmp_path_factory.mktemp("nexmark") / "d", config=cfg)
    db.barriers.stop()
    s = db.session()
    _side_input(s)
    s.execute(nexmark_ddl(kind="table", split_num=2, event_num=N, events_per_second=0, primary_keys=True))
    created, refused = [], {}
    for name, q in QUERIES.items():
        try:
            s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q.sql}")
            created.append(name)
        except Exception as e:
            refused[name] = e
    s.execute(f"CREATE MATERIALIZED VIEW q6_ties_broken AS {Q6_TIES_BROKEN}")
    events = {t: _events(t) for t in ("person", "auction", "bid")}
    for _ in range(200):
        counts = {t: s.execute_one(f"SELECT count(*) FROM {t}").rows[0][0] for t in events}
        if all(counts[t] == events[t].num_rows for t in events):
            break
        s.execute("FLUSH")
    duck = _duck_with_side_input()
    for t, rows in events.items():
        duck.register(f"{t}_arrow", rows)
        duck.execute(f"CREATE TABLE {t} AS SELECT * FROM {t}_arrow")
    yield s, duck, created, refused, counts
    db.close()


def test_every_event_arrived_and_the_supported_queries_were_created(loaded: Any) -> None:
    _s, _duck, created, refused, counts = loaded
    assert counts == {t: _events(t).num_rows for t in ("person", "auction", "bid")}
    assert set(refused) == UNSUPPORTED | SPECIAL, {k: str(v) for k, v in refused.items()}
    for name, e in refused.items():  # q12: the tables have no PROCTIME() column
        assert getattr(e, "sqlstate", None) == ("42703" if name in PROCTIME_ONLY else "0A000"), e
    assert len(created) == len(QUERIES) - len(UNSUPPORTED | SPECIAL)


@pytest.mark.parametrize("name", [n for n in QUERIES if n not in UNSUPPORTED | SPECIAL])
def test_mv_equals_duckdb(loaded: Any, name: str) -> None:
    s, duck, _created, _refused, _counts = loaded
    cols = TIE_FREE.get(name, "*")
    got = norm_rows(s.execute_one(f"SELECT {cols} FROM {name}").rows)
    want = norm_rows(duck.execute(f"SELECT {cols} FROM ({duck_sql(QUERIES[name].sql)}) q").fetchall())
    assert sum(want.values()) > 0 or name in ("q2",), f"{name}: the reference is empty"
    assert got == want, f"{name}:\n{diff_text(got, want)}"


def test_q6_with_ties_broken_equals_duckdb(loaded: Any) -> None:
    """q6 (AVG OVER ROWS 10 PRECEDING over a group top-1) row for row, once its ORDER BY has no ties."""
    s, duck, _created, _refused, _counts = loaded
    assert QUERIES["q6"].sql != Q6_TIES_BROKEN
    got = norm_rows(s.execute_one("SELECT * FROM q6_ties_broken").rows)
    want = norm_rows(duck.execute(Q6_TIES_BROKEN).fetchall())
    assert sum(want.values()) > 100
    assert got == want, diff_text(got, want)
    batch = norm_rows(s.execute_one(Q6_TIES_BROKEN).rows)
    assert batch == want, diff_text(batch, want)


def _explain(s: Session, sql: str) -> str:
    return "\n".join(r[0] for r in s.execute_one(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {sql}").rows)


@pytest.fixture(scope="module")
def planner(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A fresh catalog holding only the three tables (ids in the plans are the same every run)."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(tmp_path_factory.mktemp("plans") / "d", config=cfg)
    db.barriers.stop()
    s = db.session()
    s.execute(nexmark_ddl(kind="table", split_num=2, event_num=1, events_per_second=0, primary_keys=True))
    _side_input(s)  # after the three tables: the plans' ids stay
    yield s
    db.close()


@pytest.mark.parametrize("name", [n for n in QUERIES if n not in UNSUPPORTED | SPECIAL])
def test_stream_plan_golden(planner: Session, name: str) -> None:
    text = _explain(planner, QUERIES[name].sql) + "\n"
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("PIESTREAM_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden plan for {name}; PIESTREAM_UPDATE_GOLDEN=1 writes {path}"
    assert text == path.read_text(), f"plan of {name} changed; PIESTREAM_UPDATE_GOLDEN=1 rewrites {path}"


# -- the same queries over watermarked SOURCES --------------------------------------------------------

#: queries whose MVs clean windowed state by the sources' watermarks (RisingWave's 4 s delay)
CLEANED = ("q5", "q7", "q8")


@pytest.fixture(scope="module")
def sourced(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The three relations as watermarked sources read in many small epochs (so the watermarks
    move and windowed state is cleaned while the MVs are maintained), every query as an MV.

    The compactor runs after every CREATE and every epoch, in this thread (deterministic, unlike
    the background one), as it would in a running database: it also drops rows below the
    committed watermarks. Without it L0 grew to 4000 SSTs here, one per actor per epoch, and
    every read merged them."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    db = Database(tmp_path_factory.mktemp("nexmark_src") / "d", config=cfg)
    db.barriers.stop()
    s = db.session()
    _side_input(s)
    s.execute(
        nexmark_ddl(kind="source", split_num=2, event_num=N, events_per_second=0, max_rows_per_epoch=400)
    )
    created = []
    for name, q in QUERIES.items():
        if name in SPECIAL:
            continue
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q.sql}")  # its backfill runs epochs
        db.hummock.compact_until_idle()
        created.append(name)
    s.execute("CREATE MATERIALIZED VIEW arrived AS SELECT count(*) AS n FROM bid")
    total = _events("bid").num_rows
    epochs = 0
    while s.execute_one("SELECT n FROM arrived").rows != [(total,)]:
        s.execute("FLUSH")
        db.hummock.compact_until_idle()
        epochs += 1
        assert epochs < 200, "the sources did not finish"
    s.execute("FLUSH")  # the executors clean by the last committed watermark
    duck = _duck_with_side_input()
    for t in ("person", "auction", "bid"):
        duck.register(f"{t}_arrow", _events(t))
        duck.execute(f"CREATE TABLE {t} AS SELECT * FROM {t}_arrow")
    yield db, s, duck, epochs
    db.close()


@pytest.mark.parametrize("name", [n for n in QUERIES if n not in UNSUPPORTED | SPECIAL])
def test_mv_over_watermarked_sources_equals_duckdb(sourced: Any, name: str) -> None:
    """No event is late under the 4 s watermark (the splits stay in step), so every query over
    the watermarked sources equals DuckDB over all events, also those whose state is cleaned."""
    _db, s, duck, epochs = sourced
    assert epochs >= 20
    cols = TIE_FREE.get(name, "*")
    got = norm_rows(s.execute_one(f"SELECT {cols} FROM {name}").rows)
    want = norm_rows(duck.execute(f"SELECT {cols} FROM ({duck_sql(QUERIES[name].sql)}) q").fetchall())
    assert got == want, f"{name}:\n{diff_text(got, want)}"


@pytest.mark.parametrize("name", CLEANED)
def test_windowed_state_is_cleaned_by_the_watermark(sourced: Any, name: str) -> None:
    """q5, q7 and q8 keep only the windows at or above their watermarks: their cleaned state
    tables carry committed Hummock table watermarks and hold fewer rows than windows seen."""
    from piestream.storage.table.storage_table import StorageTable

    db, _s, _duck, _epochs = sourced
    rel = db.catalog.get(name)
    nodes = [n for f in db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]
    cleaned = [n for n in nodes if getattr(n, "watermark", None) is not None]
    assert any(n.kind == "WatermarkFilter" for n in nodes)
    assert cleaned, f"{name}: no state is cleaned by a watermark"
    storage, epoch, vpin, spin = db.snapshot_storage()
    try:
        committed = storage.version.table_watermarks
        for n in cleaned:
            tables = [t for t in n.tables() if t.watermark_col is not None]
            assert tables and any(t.table_id in committed for t in tables), (name, n.kind)
        # the first windowed aggregation (or group-by-only dedup) keeps only its last windows
        agg = next(n for n in cleaned if n.kind in ("HashAgg", "AppendOnlyDedup"))
        desc = agg.state_tables.value if agg.kind == "HashAgg" else agg.state_table
        live = list(StorageTable(desc, storage, epoch).iter_rows())
        windows = {r[desc.pk[0]] for r in live}
        assert len(windows) <= 8, (name, sorted(windows))
    finally:
        db.release_snapshot(vpin, spin)


# -- q11: session windows under EMIT ON WINDOW CLOSE -----------------------------------------------

#: DuckDB has no SESSION frame: a bid starts a session where it is >= 10 s after the bidder's last
Q11_DUCK = """WITH a AS (SELECT bidder, date_time, CASE WHEN lag(date_time) OVER (PARTITION BY bidder
    ORDER BY date_time) IS NULL OR date_time >= lag(date_time) OVER (PARTITION BY bidder ORDER BY
    date_time) + INTERVAL '10 seconds' THEN 1 ELSE 0 END AS st FROM bid WHERE date_time < TIMESTAMP '{wm}'),
b AS (SELECT *, sum(st) OVER (PARTITION BY bidder ORDER BY date_time ROWS UNBOUNDED PRECEDING) AS sid
    FROM a)
SELECT bidder, count(*), min(date_time), max(date_time) + INTERVAL '10 seconds' FROM b GROUP BY bidder, sid"""
Q11_EVENTS = 2500
Q11_RATE = 100  # events per second of event time: 40 s of bids, so sessions open and close


def test_q11_session_windows_equal_duckdb_over_the_final_bids(tmp_path: Path) -> None:
    """q11 over a watermarked bid source read in small epochs, a restart halfway: after every
    epoch it equals DuckDB's sessions over the bids below the watermark committed before that
    epoch; its EowcSort holds only bids at or above the watermark."""
    from piestream.plan.eowc_sort import EowcSortNode
    from piestream.plan.watermark import WatermarkFilterNode

    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)

    def open_db() -> Database:
        db = Database(tmp_path / "d", config=cfg)
        db.barriers.stop()
        return db

    q = QUERIES["q11"]
    db = open_db()
    db.execute(
        nexmark_ddl(
            kind="source",
            tables=("bid",),
            split_num=2,
            event_num=Q11_EVENTS,
            events_per_second=0,
            max_rows_per_epoch=200,
            options={"nexmark.events.per.sec": Q11_RATE},
        )
    )
    db.execute(f"CREATE MATERIALIZED VIEW q11 AS {q.sql}{q.emit}")
    explain = [r[0] for r in db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {q.sql}{q.emit}")[0].rows]
    assert any("EowcSort { sort_column: date_time" in line for line in explain)
    assert any("SESSION WITH GAP" in line for line in explain)
    rel = db.catalog.get("q11")
    assert rel is not None and rel.job_id is not None
    nodes = [n for f in db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]
    wm_table = next(n for n in nodes if isinstance(n, WatermarkFilterNode)).state_table
    sort = next(n for n in nodes if isinstance(n, EowcSortNode))
    bids = _events_at("bid", Q11_RATE)
    duck = duck_connect()
    duck.register("bid_arrow", bids)
    duck.execute("CREATE TABLE bid AS SELECT * FROM bid_arrow")
    last_ts = max(bids.column("date_time").to_pylist())
    wm = emitted = None
    checked = 0
    for e in range(60):
        db.execute("FLUSH")
        emitted = wm
        if wm is not None:  # this epoch emitted the bids below the watermark committed before it
            got = norm_rows(db.execute("SELECT * FROM q11")[0].rows)
            want = norm_rows(duck.execute(Q11_DUCK.format(wm=wm.isoformat(sep=" "))).fetchall())
            assert got == want, f"q11 at watermark {wm}:\n{diff_text(got, want)}"
            checked += sum(got.values())
        if e == 3:  # (reopening may commit an epoch of its own: the watermark is read after it)
            db.close()
            db = open_db()
        marks = [r[1] for r in table_rows(db, wm_table) if r[1] is not None]
        wm = max(marks) if marks else None
        if wm is not None and wm >= last_ts - dt.timedelta(seconds=4) and e > 4:
            break
    assert wm is not None and wm >= last_ts - dt.timedelta(seconds=4)  # every bid was read
    assert checked > 50
    sessions = norm_rows(db.execute("SELECT * FROM q11")[0].rows)
    assert sum(sessions.values()) > 20 and any(r[1] > 1 for r in sessions)
    state = table_rows(db, sort.state_table)  # cleaned by the watermark the last epoch emitted by
    assert emitted is not None and state and all(r[sort.sort_col] >= emitted for r in state)
    assert len(state) < bids.num_rows
    db.close()


@pytest.mark.parametrize("sink", ["mv", "blackhole"])
def test_q11_in_the_nexmark_bench(tmp_path: Path, sink: str) -> None:
    """`piestream bench nexmark --queries q11` plans q11 with EMIT ON WINDOW CLOSE as a sink or an
    MV, consumes every event, and (as an MV) ends equal to DuckDB's sessions over the bids below
    the last watermark."""
    from piestream.nexmark_bench import BenchConfig, Progress, run_piestream

    cfg = BenchConfig(
        queries=["q11"],
        events=Q11_EVENTS,
        runner="local",
        sink=sink,
        epoch_events=600,
        event_time_rate=Q11_RATE,
        spark_baseline=False,
    )
    got: list[tuple[Any, ...]] = []

    def keep(db: Database) -> None:
        if sink == "mv":  # one more epoch: it emits below the watermark of every bid read
            db.execute("FLUSH")
            got.extend(db.execute("SELECT * FROM nexmark_q11")[0].rows)

    run = run_piestream("q11", cfg, tmp_path, None, Progress(io.StringIO()), keep=keep)
    assert run.error is None and run.events == Q11_EVENTS
    if sink == "blackhole":
        return
    bids = _events_at("bid", Q11_RATE)
    duck = duck_connect()
    duck.register("bid_arrow", bids)
    duck.execute("CREATE TABLE bid AS SELECT * FROM bid_arrow")
    wm = max(bids.column("date_time").to_pylist()) - dt.timedelta(seconds=4)
    want = norm_rows(duck.execute(Q11_DUCK.format(wm=wm.isoformat(sep=" "))).fetchall())
    assert sum(want.values()) > 10
    assert norm_rows(got) == want, diff_text(norm_rows(got), want)


def _events_at(table: str, rate: int) -> pa.Table:
    t = event_table(NexmarkConfig(first_event_rate=rate), table, 0, Q11_EVENTS)
    return t.cast(
        pa.schema(
            [pa.field(f.name, pa.timestamp("us")) if pa.types.is_timestamp(f.type) else f for f in t.schema]
        )
    )


# -- q12: processing-time windows over the source's PROCTIME() column -----------------------------

Q12_EVENTS = 4000
Q12_PER_EPOCH = 400


def _q12_totals(rows: list[tuple[Any, ...]]) -> dict[int, int]:
    """Bids per bidder summed over q12's windows (what does not depend on when epochs ran)."""
    out: dict[int, int] = {}
    for bidder, n, *_ in rows:
        out[bidder] = out.get(bidder, 0) + n
    return out


def test_q12_processing_time_windows(tmp_path: Path) -> None:
    """q12 over ``p_time TIMESTAMPTZ AS PROCTIME()``: each bid's p_time is the time of the epoch
    that read it (one value per epoch, between the run's start and end, the same after a
    restart's replay), q12's windows are the 10 s windows of those times, and the per-bidder
    totals over all windows equal DuckDB's count of every bid."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)

    def open_db() -> Database:
        db = Database(tmp_path / "d", config=cfg)
        db.barriers.stop()
        return db

    q = QUERIES["q12"]
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    db = open_db()
    db.execute(
        nexmark_ddl(
            kind="source",
            tables=("bid",),
            split_num=2,
            event_num=Q12_EVENTS,
            events_per_second=0,
            max_rows_per_epoch=Q12_PER_EPOCH,
            proctime=True,
        )
    )
    db.execute(f"CREATE MATERIALIZED VIEW q12 AS {q.sql}")
    db.execute("CREATE MATERIALIZED VIEW per_epoch AS SELECT p_time, count(*) AS n FROM bid GROUP BY p_time")
    explain = "\n".join(r[0] for r in db.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {q.sql}")[0].rows)
    source = next(line for line in explain.splitlines() if "Source { source: bid" in line)
    assert "proctime()" in explain and "p_time" not in source  # the connector never reads p_time
    bids = event_table(NexmarkConfig(), "bid", 0, Q12_EVENTS)
    total = bids.num_rows
    for e in range(80):
        db.execute("FLUSH")
        if e == 3:
            db.close()
            db = open_db()
        if sum(n for _, n in db.execute("SELECT * FROM per_epoch")[0].rows) == total:
            break
    end = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    per_epoch = dict(db.execute("SELECT * FROM per_epoch")[0].rows)
    rows = db.execute("SELECT * FROM q12")[0].rows
    db.close()
    assert sum(per_epoch.values()) == total
    assert len(per_epoch) >= total // Q12_PER_EPOCH  # one p_time per epoch, at most 400 events each
    assert all(start <= p <= end for p in per_epoch)
    assert all(n <= Q12_PER_EPOCH for n in per_epoch.values())
    starts = {p.replace(second=p.second - p.second % 10, microsecond=0) for p in per_epoch}
    assert {r[2] for r in rows} == starts
    assert all(r[3] - r[2] == dt.timedelta(seconds=10) for r in rows)
    duck = duck_connect()
    duck.register("bid_arrow", bids)
    want = dict(duck.execute("SELECT bidder, count(*) FROM bid_arrow GROUP BY bidder").fetchall())
    assert len(want) > 10
    assert _q12_totals(rows) == want


def test_q12_in_the_nexmark_bench(tmp_path: Path) -> None:
    """`piestream bench nexmark --queries q12` declares bid's PROCTIME() column and consumes every
    event; the MV's per-bidder totals equal DuckDB's."""
    from piestream.nexmark_bench import BenchConfig, Progress, run_piestream

    cfg = BenchConfig(
        queries=["q12"], events=3000, runner="local", sink="mv", epoch_events=1000, spark_baseline=False
    )
    got: list[tuple[Any, ...]] = []

    def keep(db: Database) -> None:
        got.extend(db.execute("SELECT * FROM nexmark_q12")[0].rows)

    run = run_piestream("q12", cfg, tmp_path, None, Progress(io.StringIO()), keep=keep)
    assert run.error is None and run.events == 3000
    duck = duck_connect()
    duck.register("bid_arrow", event_table(NexmarkConfig(), "bid", 0, 3000))
    want = dict(duck.execute("SELECT bidder, count(*) FROM bid_arrow GROUP BY bidder").fetchall())
    assert _q12_totals(got) == want
