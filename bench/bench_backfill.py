"""Backfill: creating an MV over a table that already holds `--rows` rows, while single-row
INSERTs keep committing, with chunked backfill (`backfill_rows_per_epoch`) and, as the anchor,
the whole snapshot in one epoch (what piestream did before; a budget larger than the table).

It prints, per mode, the CREATE's wall time, the backfill's rows/s, and the commit latency of
the concurrent INSERTs (each INSERT returns once the epoch holding it committed) while the
CREATE ran: chunking should keep that latency near an ordinary epoch's instead of the length of
the whole backfill. Local runner (in-process), parallelism 2.

    .venv/bin/python bench/bench_backfill.py [--rows 1000000] [--per-epoch 50000]

Wall-clock figures on a shared machine: the load average and process CPU time are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from piestream.server.database import Database, DatabaseConfig
from piestream.stream.executor import StreamingConfig


def run(rows: int, per_epoch: int) -> tuple[float, float, list[float]]:
    """(CREATE seconds, CPU seconds of the process meanwhile, INSERT commit latencies in s)."""
    with tempfile.TemporaryDirectory(prefix="piestream-backfill-") as tmp:
        config = DatabaseConfig(
            runner="local",
            barrier_interval=0.1,
            parallelism=2,
            streaming=StreamingConfig(backfill_rows_per_epoch=per_epoch),
            background_compaction=True,
        )
        with Database(Path(tmp), config=config) as db:
            db.execute("CREATE TABLE t (k bigint PRIMARY KEY, g int, v bigint)")
            step = 200_000
            for lo in range(0, rows, step):
                hi = min(rows, lo + step)
                db.execute(
                    f"INSERT INTO t SELECT x, x % 100, x * 3 FROM generate_series({lo}, {hi - 1}) AS s(x)"
                )
            latencies: list[float] = []
            stop = threading.Event()

            def writer() -> None:
                s = db.session()
                i = 0
                while not stop.is_set():
                    started = time.perf_counter()
                    s.execute(f"INSERT INTO t VALUES ({rows + i}, 1, {i})")
                    latencies.append(time.perf_counter() - started)
                    i += 1

            w = threading.Thread(target=writer)
            w.start()
            time.sleep(0.5)
            latencies.clear()
            cpu0, t0 = time.process_time(), time.perf_counter()
            db.execute("CREATE MATERIALIZED VIEW m AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g")
            seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            stop.set()
            w.join()
            got = db.execute("SELECT sum(n) FROM m")[0].rows[0][0]
            want = db.execute("SELECT count(*) FROM t")[0].rows[0][0]
            assert got == want, (got, want)
            return seconds, cpu, latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--per-epoch", type=int, default=50_000, help="backfill rows per epoch per actor")
    args = ap.parse_args()
    print(
        f"backfill of {args.rows:,} rows into an aggregate MV, local runner, parallelism 2; load avg "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    modes = [
        (f"chunked ({args.per_epoch:,} rows/epoch/actor)", args.per_epoch),
        ("one epoch (anchor: the old backfill)", args.rows * 2),
    ]
    for label, per_epoch in modes:
        seconds, cpu, lat = run(args.rows, per_epoch)
        lat_ms = sorted(x * 1000 for x in lat) or [0.0]
        p50 = statistics.median(lat_ms)
        worst = lat_ms[-1]
        print(
            f"{label:<42} CREATE {seconds:6.1f} s (CPU {cpu:6.1f} s)  {args.rows / seconds:>9,.0f} rows/s   "
            f"concurrent INSERT commit p50 {p50:7.0f} ms  max {worst:7.0f} ms  (n={len(lat)})"
        )


if __name__ == "__main__":
    main()
