"""The Nexmark queries (reference §8) as MVs over the three generated tables, equal to DuckDB
computing the same SQL over the same events; and their stream plans (stream keys, state tables,
fragments) as golden files.

DuckDB has no TUMBLE / HOP table functions, PostgreSQL's to_char or regexp_match: `duck_sql`
rewrites those spots into DuckDB's equivalents; everything else is the query text as is.
Goldens: `PIESTREAM_UPDATE_GOLDEN=1 pytest tests/sql/test_nexmark_sql.py` rewrites them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
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
    assert set(refused) == UNSUPPORTED, {k: str(v) for k, v in refused.items()}
    for e in refused.values():
        assert getattr(e, "sqlstate", None) == "0A000", e
    assert len(created) == len(QUERIES) - len(UNSUPPORTED)


@pytest.mark.parametrize("name", [n for n in QUERIES if n not in UNSUPPORTED])
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


@pytest.mark.parametrize("name", [n for n in QUERIES if n not in UNSUPPORTED])
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
    move and windowed state is cleaned while the MVs are maintained), every query as an MV."""
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
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q.sql}")
        created.append(name)
    s.execute("CREATE MATERIALIZED VIEW arrived AS SELECT count(*) AS n FROM bid")
    total = _events("bid").num_rows
    epochs = 0
    while s.execute_one("SELECT n FROM arrived").rows != [(total,)]:
        s.execute("FLUSH")
        epochs += 1
        assert epochs < 200, "the sources did not finish"
    s.execute("FLUSH")  # the executors clean by the last committed watermark
    duck = _duck_with_side_input()
    for t in ("person", "auction", "bid"):
        duck.register(f"{t}_arrow", _events(t))
        duck.execute(f"CREATE TABLE {t} AS SELECT * FROM {t}_arrow")
    yield db, s, duck, epochs
    db.close()


@pytest.mark.parametrize("name", [n for n in QUERIES if n not in UNSUPPORTED])
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
