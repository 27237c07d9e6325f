"""Issue 32's streaming-over-time operators on the Spark runner (real Spark tasks, not the local
runner): an EMIT ON WINDOW CLOSE aggregation over a watermarked Nexmark source emits each
window once, when the watermark passes it, and ends equal to DuckDB over the closed windows;
a temporal join joins each stream row with the dimension as committed before its epoch, and a
later change of the dimension never touches rows already joined."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import piestream
from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.spark_baseline import event_table
from piestream.connectors.nexmark.tables_sql import nexmark_ddl

pytestmark = pytest.mark.spark

EVENTS = 30_000  # 3 s of event time at Nexmark's 10K events/s: windows of 1 s close as it goes
EOWC = (
    "SELECT window_start, count(*) AS n, max(price) AS top FROM TUMBLE(bid, date_time, "
    "INTERVAL '1' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE"
)


def test_eowc_aggregation_on_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t = event_table(NexmarkConfig(), "bid", 0, EVENTS)
    bids = t.cast(  # the source's date_time is a TIMESTAMP (no time zone)
        pa.schema(
            [pa.field(f.name, pa.timestamp("us")) if pa.types.is_timestamp(f.type) else f for f in t.schema]
        )
    )
    duck = duckdb.connect()
    duck.register("bid", bids)
    # RisingWave's 4 s watermark delay would close nothing over 3 s of events: 500 ms here
    ddl = nexmark_ddl(
        kind="source",
        tables=("bid",),
        split_num=2,
        event_num=EVENTS,
        events_per_second=0,
        max_rows_per_epoch=3000,
    ).replace("INTERVAL '4' SECOND", "INTERVAL '500 milliseconds'")
    wm = duck.execute("SELECT max(date_time) - INTERVAL '500 milliseconds' FROM bid").fetchone()[0]
    want = Counter(
        duck.execute(
            "SELECT time_bucket(INTERVAL '1 second', date_time) AS ws, count(*), max(price) FROM bid "
            "GROUP BY ws HAVING ws + INTERVAL '1 second' <= ?",
            [wm],
        ).fetchall()
    )
    assert len(want) >= 2
    with piestream.connect(tmp_path / "db", spark=spark, barrier_interval=0.2) as conn:
        conn.sql(ddl)
        conn.sql(f"CREATE MATERIALIZED VIEW w AS {EOWC}")
        seen: Counter[tuple] = Counter()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            got = Counter(
                (ws.replace(tzinfo=None), n, top) for ws, n, top in conn.sql("SELECT * FROM w").rows
            )
            assert not (seen - got), "an emitted window changed or went away"
            assert not (got - want), f"a window emitted that is not closed or not right: {got - want}"
            seen = got
            if got == want:
                break
            time.sleep(0.5)
        assert seen == want
        rel = conn.database.catalog.get("w")
        assert rel is not None and rel.append_only


def test_temporal_join_on_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with piestream.connect(tmp_path / "db", spark=spark, barrier_interval=0.2) as conn:
        conn.sql("CREATE TABLE s (id INT, k INT) APPEND ONLY")
        conn.sql("CREATE TABLE d (k INT PRIMARY KEY, name VARCHAR)")
        conn.sql("INSERT INTO d VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        conn.flush()
        conn.sql(
            "CREATE MATERIALIZED VIEW j AS SELECT s.id, d.name FROM s LEFT JOIN d "
            "FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = d.k"
        )
        conn.sql("INSERT INTO s SELECT x, x % 4 FROM generate_series(0, 39) AS g(x)")
        conn.flush()
        # the dimension changes: rows already joined keep their names, new rows see the change
        conn.sql("UPDATE d SET name = name || '2'")
        conn.sql("DELETE FROM d WHERE k = 3")
        conn.sql("INSERT INTO d VALUES (0, 'z')")
        conn.flush()
        conn.sql("INSERT INTO s SELECT x, x % 4 FROM generate_series(40, 79) AS g(x)")
        conn.flush()
        got = sorted(conn.sql("SELECT * FROM j").rows)
    before = {0: None, 1: "a", 2: "b", 3: "c"}
    after = {0: "z", 1: "a2", 2: "b2", 3: None}
    want = sorted((x, (before if x < 40 else after)[x % 4]) for x in range(80))
    assert got == want


def test_proctime_column_on_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """On Spark's tasks too, a bid's ``p_time`` is the time of the epoch that read it: within
    the run's span, at most one epoch's bids per value, every bid once."""
    import datetime as dt

    total = event_table(NexmarkConfig(), "bid", 0, 6000).num_rows
    ddl = nexmark_ddl(
        kind="source",
        tables=("bid",),
        split_num=2,
        event_num=6000,
        events_per_second=0,
        max_rows_per_epoch=1000,
        proctime=True,
    )
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    with piestream.connect(tmp_path / "db", spark=spark, barrier_interval=0.2) as conn:
        conn.sql(ddl)
        conn.sql("CREATE MATERIALIZED VIEW p AS SELECT p_time, count(*) AS n FROM bid GROUP BY p_time")
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            rows = dict(conn.sql("SELECT * FROM p").rows)
            if sum(rows.values()) >= total:
                break
            time.sleep(0.5)
    end = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    assert sum(rows.values()) == total
    assert len(rows) >= 6 and all(n <= 1000 for n in rows.values())
    assert all(start <= t <= end for t in rows), sorted(rows)
