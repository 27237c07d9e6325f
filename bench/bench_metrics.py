"""/metrics scrape time with many MVs (issue target: ≤ 50 ms with 100 MVs).

Creates `--mvs` materialized views (half aggregations, half projections) over one table, runs a
few epochs of inserts so every fragment has totals and every table has SSTs, then scrapes the
dashboard's /metrics over HTTP `--scrapes` times and prints the median and worst wall time and
the body size. Local runner (in-process).

    .venv/bin/python bench/bench_metrics.py [--mvs 100] [--scrapes 50]

Wall-clock figures on a shared machine: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from piestream.server.dashboard import Dashboard
from piestream.server.database import Database, DatabaseConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mvs", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cfg = DatabaseConfig(runner="local", barrier_interval=3600.0, parallelism=2)
        with Database(Path(d) / "db", config=cfg) as db:
            s = db.session()
            s.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT)")
            for i in range(args.mvs):
                q = (
                    f"SELECT g, count(*) AS n, sum(v) AS s FROM t WHERE v > {i} GROUP BY g"
                    if i % 2 == 0
                    else f"SELECT k, v + {i} AS w FROM t WHERE g <> {i}"
                )
                s.execute(f"CREATE MATERIALIZED VIEW mv{i} AS {q}")
            for e in range(3):
                s.execute(
                    f"INSERT INTO t SELECT x, x % 7, x FROM generate_series({e * 1000}, {e * 1000 + 999}) x"
                )
                s.execute("FLUSH")
            dash = Dashboard(db, port=0).start()
            try:
                times: list[float] = []
                size = 0
                for _ in range(args.scrapes):
                    t0 = time.perf_counter()
                    with urllib.request.urlopen(dash.url + "metrics", timeout=30) as r:
                        size = len(r.read())
                    times.append(time.perf_counter() - t0)
            finally:
                dash.stop()
    print(
        f"{args.mvs} MVs, {args.scrapes} scrapes: median {statistics.median(times) * 1000:.1f} ms, "
        f"max {max(times) * 1000:.1f} ms, first {times[0] * 1000:.1f} ms, body {size / 1024:.0f} KiB; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
