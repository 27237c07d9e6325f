"""Issue 27's empty-epoch target: an epoch with no change on the leased runner's long-lived
tasks (local[2], parallelism 2, a couple of MVs), p50 / p99 of the whole epoch and of its parts
(the run on the lease: plan, barrier, reports; the commit to the meta store), plus the driver's
wire bytes and the CPU of the driver and of the lease's tasks per empty epoch.

    nice -n 15 .venv/bin/python bench/bench_empty_epoch.py [--epochs 200] [--profile out.prof]

Times are wall-clock on whatever else the machine runs (load printed with them); the CPU
figures much less so.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _cpu_seconds(pids: Any) -> float:
    """User + system CPU of processes `pids` so far (Linux /proc; 0 where unreadable)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--profile", default="", help="write a cProfile of the empty epochs (driver side) here")
    args = ap.parse_args()

    from piestream.runtime.spark import spark_session
    from piestream.server.database import Database, DatabaseConfig

    spark = spark_session("local[2]", app_name="piestream-bench-empty-epoch")
    tmp = Path(tempfile.mkdtemp(prefix="bench-empty-epoch-"))
    try:
        config = DatabaseConfig(
            runner="spark-leased",
            barrier_interval=3600,
            parallelism=args.parallelism,
            background_compaction=False,
        )
        db = Database(tmp / "db", spark=spark, config=config)
        try:
            for q in (
                "CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)",
                "CREATE MATERIALIZED VIEW m_agg AS SELECT g, count(*) AS n, sum(v) AS s FROM a GROUP BY g",
                "CREATE MATERIALIZED VIEW m_mv AS SELECT n, count(*) AS groups FROM m_agg GROUP BY n",
            ):
                db.execute(q)
            db.execute("INSERT INTO a SELECT g, g % 16, g FROM generate_series(1, 1000) AS g; FLUSH")
            barriers = db.barriers
            runs: list[float] = []
            commits: list[float] = []
            inner_run, inner_commit = barriers.runner.run, barriers.hummock.commit_epoch

            def run(*a: Any, **k: Any) -> Any:  # the run on the lease
                t = time.perf_counter()
                try:
                    return inner_run(*a, **k)
                finally:
                    runs.append(time.perf_counter() - t)

            def commit(*a: Any, **k: Any) -> Any:  # the meta-store commit
                t = time.perf_counter()
                try:
                    return inner_commit(*a, **k)
                finally:
                    commits.append(time.perf_counter() - t)

            barriers.runner.run = run  # type: ignore[method-assign]
            barriers.hummock.commit_epoch = commit  # type: ignore[method-assign]
            for _ in range(10):  # warm-up: the lease, the workers' imports and caches
                barriers.flush()
            first = len(barriers.stats)
            del runs[:], commits[:]
            walls: list[float] = []
            prof = cProfile.Profile() if args.profile else None
            pids = dict(getattr(barriers.runner, "lease_pids", {}))
            cpu0, tasks0 = time.process_time(), _cpu_seconds(pids.values())
            if prof is not None:
                prof.enable()
            for _ in range(args.epochs):
                t0 = time.perf_counter()
                barriers.flush()
                walls.append(time.perf_counter() - t0)
            if prof is not None:
                prof.disable()
                prof.dump_stats(args.profile)
            driver_cpu = time.process_time() - cpu0
            same_tasks = pids and dict(getattr(barriers.runner, "lease_pids", {})) == pids
            tasks_cpu = _cpu_seconds(pids.values()) - tasks0 if same_tasks else None
            stats = barriers.stats[first:]
            wire = [s.driver_wire_bytes for s in stats]
            runner = barriers.runner
            leased = getattr(runner, "leased_epochs", 0)
        finally:
            db.close()
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    ms = [1000 * w for w in walls]
    print(
        f"empty epoch, local[2], parallelism {args.parallelism}, {len(ms)} epochs "
        f"({leased} leased in all), "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(f"  whole epoch (flush)   p50 {_pct(ms, 50):7.1f} ms   p99 {_pct(ms, 99):7.1f} ms")
    for name, xs in (("run on the lease", runs), ("meta-store commit", commits)):
        if xs:
            xs = [1000 * x for x in xs]
            print(f"  {name:<21} p50 {_pct(xs, 50):7.1f} ms   p99 {_pct(xs, 99):7.1f} ms")
    if wire:
        print(f"  driver wire bytes / empty epoch: median {statistics.median(wire):,.0f}, max {max(wire):,}")
    # CPU, not wall-clock: what an epoch costs whatever else the machine runs meanwhile
    per = 1000 / max(1, len(ms))
    tasks = f"{per * tasks_cpu:.2f} ms (all slots)" if tasks_cpu is not None else "n/a (tasks changed)"
    print(f"  CPU / empty epoch: driver process {per * driver_cpu:.2f} ms, lease tasks {tasks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
