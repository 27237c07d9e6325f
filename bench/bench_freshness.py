"""Freshness: what keeping a Nexmark query's result fresh costs piestream per epoch, next to what
a scheduled full refresh costs Spark (a batch recompute over all events so far), in one run.

For each stateful query: piestream runs it (MV sink, Spark runner) over `--events` events in
epochs of at most `--epoch-events` events per source (`piestream bench nexmark`'s driver). Its
epoch latency p50 / p99 is taken over the last `--last` epochs, when the state holds most of
the events. Spark then computes the same query from scratch over all the events (Parquet, the
batch plan of `spark_baseline`, noop sink), `--recomputes` times; the median is what one refresh
of a materialized view costs at that size. The ratio is recompute / incremental epoch p50.

    .venv/bin/python bench/bench_freshness.py [--queries q4,q5,...] [--events 1000000]
        [--epoch-events 100000] [--last 5] [--recomputes 3]
        [--runner spark|spark-shuffle|spark-leased] [--pace 0.25]

`--pace S` spaces the epochs S seconds apart, as a server's barrier interval does (the default
is back to back, a throughput run): the default runner then starts each epoch's Spark job in
the gap before it. The gap is never part of an epoch's latency, nor of the events/s.

Figures are wall-clock on whatever else the machine runs: the load average is printed.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from piestream.connectors.nexmark.queries import QUERIES, STATEFUL
from piestream.connectors.nexmark.spark_baseline import SPARK_QUERIES, utc_session, write_events
from piestream.meta.barrier_manager import EpochStats
from piestream.nexmark_bench import BenchConfig, Progress, _load_avg, percentile, run_piestream

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_streaming import tree_cpu  # the bench folder's sibling script

TARGET_RATIO = 10.0
#: events per Parquet file Spark recomputes from: independent of `--epoch-events`, so small epochs
#: do not hand Spark hundreds of tiny files (which would slow the recompute and flatter the ratio)
FILE_EVENTS = 1_000_000


def recompute_seconds(spark: object, name: str, dirs: dict[str, Path], runs: int) -> float:
    """Median seconds of a Spark batch job computing query `name` over all the events."""
    q = SPARK_QUERIES[name]
    tables = QUERIES[name].tables
    times = []
    with utc_session(spark):  # type: ignore[arg-type]
        for t in tables:
            spark.read.parquet(str(dirs[t])).createOrReplaceTempView(t)  # type: ignore[attr-defined]
        try:
            for _ in range(runs):
                started = time.perf_counter()
                spark.sql(q.sql).write.format("noop").mode("overwrite").save()  # type: ignore[attr-defined]
                times.append(time.perf_counter() - started)
        finally:
            for t in tables:
                spark.catalog.dropTempView(t)  # type: ignore[attr-defined]
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", default=",".join(q for q in STATEFUL if q in SPARK_QUERIES))
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--epoch-events", type=int, default=100_000)
    ap.add_argument("--last", type=int, default=5, help="epochs at the end the latency is taken over")
    ap.add_argument("--recomputes", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per query")
    ap.add_argument(
        "--runner",
        choices=["spark", "spark-shuffle", "spark-leased"],
        default="spark",
        help="piestream's runner (spark: one single-stage Spark job per epoch; spark-shuffle: a Spark "
        "shuffle per exchange; spark-leased: epochs on leased long-lived Spark jobs)",
    )
    ap.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="seconds between epochs, as a server's barrier interval spaces them (default 0: back "
        "to back); the epoch latency never includes them",
    )
    args = ap.parse_args()
    names = [q.strip() for q in args.queries.split(",") if q.strip()]
    from piestream.runtime.spark import spark_session

    spark = spark_session("local[2]", app_name="piestream-bench-freshness")
    cfg = BenchConfig(
        queries=names,
        events=args.events,
        runner=args.runner,
        sink="mv",
        epoch_events=args.epoch_events,
        spark_baseline=False,
        timeout=args.timeout,
        compact_before_size=False,
        pace=args.pace,
    )
    rows = []
    cpu: list[tuple[str, float, float]] = []  # (query, CPU s per epoch, wall s per epoch) over the whole run
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="piestream-freshness-") as tmp:
        work = Path(tmp)
        tables = sorted({t for n in names for t in QUERIES[n].tables})
        dirs = write_events(work / "events", args.events, max(args.epoch_events, FILE_EVENTS), tables)
        progress = Progress(sys.stderr)
        run_piestream(
            "q0",
            BenchConfig(["q0"], 20_000, runner=args.runner, epoch_events=10_000, spark_baseline=False),
            work / "warmup",
            spark,
            Progress(io.StringIO()),
        )
        for name in names:
            cpu0, wall0 = tree_cpu(), time.perf_counter()
            stats: list[EpochStats] = []
            run = run_piestream(
                name, cfg, work, spark, progress, keep=lambda db, out=stats: out.extend(db.barriers.stats)
            )
            # the share of actor runs that found their operator caches in their worker
            warm = sum(s.cache_warm_actors for s in stats) / max(sum(s.actors for s in stats), 1)
            # a query's data directory goes once it has run: at 10M events the stale SSTs that
            # compaction replaced (kept for the vacuum retention) add up to gigabytes per query
            shutil.rmtree(work / f"db-{name}", ignore_errors=True)
            if run.epochs:
                n = len(run.epochs)
                cpu.append((name, (tree_cpu() - cpu0) / n, (time.perf_counter() - wall0) / n))
            if run.error and not run.epochs:
                progress.done(f"{name}: not supported: {run.error}")
                continue
            last = run.epochs[-args.last :]
            p50, p99 = statistics.median(last), percentile(last, 99)
            rc = recompute_seconds(spark, name, dirs, args.recomputes)
            rows.append((name, run.events, len(run.epochs), run.events_per_s, p50, p99, rc, warm))
            if run.timed_out or run.events < args.events:
                # the recompute covered all the events, the state only these: the ratio is too high
                notes.append(
                    f"{name}: stopped after {run.events:,} of {args.events:,} events; its ratio is not valid"
                )
            progress.done(
                f"{name}: {run.events:,} events, epoch p50 {p50:.2f} s p99 {p99:.2f} s, recompute {rc:.2f} s"
            )
    runner = "Spark" if args.runner == "spark" else args.runner
    print(
        f"\nfreshness: Nexmark, {args.events:,} events per query in epochs of <= {args.epoch_events:,} "
        f"events per source, piestream ({runner} runner, parallelism 2, MV"
        f"{f', epochs {args.pace:g} s apart' if args.pace else ''}) epoch latency over the last "
        f"{args.last} epochs vs Spark batch recompute over all events (median of {args.recomputes}); "
        f"load avg {_load_avg()}"
    )
    head = (
        f"{'query':<6} {'events':>10} {'epochs':>6} {'events/s':>10} {'epoch p50 s':>11} {'epoch p99 s':>11} "
        f"{'recompute s':>11} {'ratio':>7} {'target':>7} {'ok':>3} {'warm':>5}"
    )
    print(head)
    print("-" * len(head))
    for name, ev, ep, rate, p50, p99, rc, warm in rows:
        ratio = rc / p50 if p50 > 0 else float("inf")
        ok = "yes" if ratio >= TARGET_RATIO and ev >= args.events else "no"
        print(
            f"{name:<6} {ev:>10,} {ep:>6} {rate:>10,.0f} {p50:>11.2f} {p99:>11.2f} {rc:>11.2f} "
            f"{ratio:>6.1f}x {TARGET_RATIO:>6.0f}x {ok:>3} {warm:>5.0%}"
        )
    print("warm = share of actor runs (all epochs) that found their operator caches in their worker")

    for note in notes:
        print(note)
    for name, c, w in cpu:
        print(
            f"{name}: CPU (driver, JVM, Python workers) {c:.2f} s per epoch beside {w:.2f} s wall, "
            "over the whole run (load and setup included)"
        )


if __name__ == "__main__":
    main()
