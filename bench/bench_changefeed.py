"""Changefeed latency: from an INSERT returning (its epoch committed) to a Spark Structured
Streaming micro-batch reading the MV's change (``readStream.format("piestream")``), and the
same to the Python API's `Connection.subscribe` and a SQL ``FETCH``. Prints the median and p90 over
`--events` single-row INSERTs spaced `--gap` seconds apart.

    .venv/bin/python bench/bench_changefeed.py [--events N] [--gap S] [--barrier-interval S]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def summary(label: str, xs: list[float]) -> None:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(len(xs) * 0.9))]
    print(
        f"{label:<52} median {statistics.median(xs) * 1e3:8.0f} ms   p90 {p90 * 1e3:8.0f} ms   (n={len(xs)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--gap", type=float, default=1.5)
    ap.add_argument("--barrier-interval", type=float, default=0.2)
    args = ap.parse_args()

    from piestream.connectors.spark import register
    from piestream.runtime.spark import spark_session
    from piestream.server.api import connect

    spark = spark_session("local[2]", app_name="piestream-bench-changefeed")
    register(spark)
    with tempfile.TemporaryDirectory() as tmp:
        conn = connect(Path(tmp) / "db", runner="local", barrier_interval=args.barrier_interval)
        conn.sql("CREATE TABLE ev (id int PRIMARY KEY, v int)")
        conn.sql("CREATE MATERIALIZED VIEW ev_mv AS SELECT id, v * 2 AS v2 FROM ev")
        conn.sql("CREATE SUBSCRIPTION ev_sub FROM ev_mv WITH (retention = '1h')")
        committed: dict[int, float] = {}
        spark_seen: dict[int, float] = {}
        api_seen: dict[int, float] = {}

        def sink(df: Any, batch_id: int) -> None:
            now = time.perf_counter()
            for r in df.select("id").collect():  # a handful of rows per micro-batch
                spark_seen.setdefault(r["id"], now)

        q = (
            spark.readStream.format("piestream")
            .option("table", "ev_mv")
            .option("changes", "true")
            .option("data_dir", str(conn.data_dir))
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(Path(tmp) / "ckpt"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        changes = conn.subscribe("ev_sub", idle_timeout=args.gap * 4)

        def follow() -> None:
            for batch in changes:
                now = time.perf_counter()
                for i in batch.table.column("id").to_pylist():
                    api_seen.setdefault(i, now)

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        time.sleep(5)  # the stream's first micro-batches and Python workers are up
        writer = connect(Path(tmp) / "db")
        for i in range(args.events):
            writer.sql(f"INSERT INTO ev VALUES ({i}, {i})")  # returns once its epoch is committed
            committed[i] = time.perf_counter()
            time.sleep(args.gap)
        deadline = time.time() + 30
        while len(spark_seen) < args.events and time.time() < deadline:
            time.sleep(0.1)
        q.stop()
        t.join(timeout=args.gap * 5)
        writer.close()
        conn.close()
    spark.stop()
    print(f"piestream changefeed latency: {args.events} events, barrier interval {args.barrier_interval}s")
    summary(
        "INSERT committed -> Python subscribe batch",
        [api_seen[i] - committed[i] for i in committed if i in api_seen],
    )
    summary(
        "INSERT committed -> Spark micro-batch (foreachBatch)",
        [spark_seen[i] - committed[i] for i in committed if i in spark_seen],
    )
    missing = sorted(set(committed) - set(spark_seen))
    if missing:
        print(f"not seen by Spark within 30 s: {missing}")


if __name__ == "__main__":
    main()
