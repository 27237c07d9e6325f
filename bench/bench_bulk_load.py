"""Bulk load through the user path: `Connection.insert` of an Arrow table into a table with a
primary key (what `INSERT` of many rows, the Python API and connectors feed), on the default
Spark runner, next to Spark writing the same rows as Parquet (the anchor: the data's plain
write cost on this machine).

    .venv/bin/python bench/bench_bulk_load.py [--rows 4000000] [--runner spark|local]

Prints rows/s (wall) against the target. Wall-clock on a shared machine: the load average is
printed with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

TARGET_ROWS_PER_S = 500_000


def load_avg() -> str:
    with contextlib.suppress(OSError):
        return "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    return "?"


def data(rows: int) -> pa.Table:
    ids = np.random.default_rng(7).permutation(rows).astype(np.int64)
    return pa.table({"id": ids, "v": ids * 3, "s": pa.array(np.char.add("name-", (ids % 1000).astype(str)))})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--runner", default="spark", choices=["spark", "spark-shuffle", "spark-leased", "local"])
    args = ap.parse_args()
    import piestream
    from piestream.runtime.spark import spark_session

    spark = spark_session("local[2]", app_name="piestream-bench-bulk")
    table = data(args.rows)
    with tempfile.TemporaryDirectory(prefix="piestream-bulk-") as tmp:
        conn = piestream.connect(Path(tmp) / "db", spark=spark, runner=args.runner, barrier_interval=3600.0)
        try:
            conn.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT, s VARCHAR)")
            conn.insert("t", data(10_000).set_column(0, "id", pa.array(np.arange(10_000) + 10 * args.rows)))
            started = time.perf_counter()
            conn.insert("t", table)
            secs = time.perf_counter() - started
            n = conn.execute("SELECT count(*) FROM t")[0].rows[0][0]
            assert n == args.rows + 10_000, n
        finally:
            conn.close()
        started = time.perf_counter()
        spark.createDataFrame(table.to_pandas()).write.parquet(str(Path(tmp) / "anchor"))
        anchor = time.perf_counter() - started
    rate = args.rows / secs
    print(
        f"\nbulk load: {args.rows:,} rows (BIGINT pk, BIGINT, VARCHAR), {args.runner} runner, "
        f"load avg {load_avg()}"
    )
    print(f"    {'':<34} {'seconds':>8} {'rows/s':>12}")
    print(
        f"    {'piestream Connection.insert':<34} {secs:>8.1f} {rate:>12,.0f}   "
        f"(target >= {TARGET_ROWS_PER_S:,}: {'MET' if rate >= TARGET_ROWS_PER_S else 'MISSED'})"
    )
    print(f"    {'Spark: same rows to Parquet':<34} {anchor:>8.1f} {args.rows / anchor:>12,.0f}")


if __name__ == "__main__":
    main()
