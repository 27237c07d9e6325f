"""Scale-out: one Nexmark query at parallelism 1, 2 and 4 on Spark local mode and on a Spark
standalone cluster (a Master and two one-core Workers on 127.0.0.1, from the pinned pyspark),
side by side: events/s, epoch p50 / p99, and per epoch the driver's bytes (on its wire to the
tasks, and the exchange payload among them that passed through it) and the driver process's
CPU (its Python side; in local mode the JVM also runs the executors, so it is left out).

    .venv/bin/python bench/bench_scale.py [--query q5] [--events 200000] [--epoch-events 20000]
        [--parallelism 1,2,4] [--masters local,standalone] [--exchanges driver,direct]

Each parallelism runs with the leased runner's exchanges side by side: "driver" (every
exchanged chunk routed through the driver: before issue 27's data plane) and "direct" (task to
task: after), so the driver's bytes per epoch of both are in one table.

Each master runs in a child process of its own (one SparkSession per process). A skeleton of
issue 27's benchmark: more queries, parallelism 8 and local-cluster belong on a machine
with more cores. Figures are wall-clock on whatever else the machine runs (load printed).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "server"))  # the standalone cluster the tests start


def _child(args: argparse.Namespace) -> int:
    """Runs in the child: every parallelism on `args.master`, one JSON line per run."""
    from piestream.nexmark_bench import BenchConfig, Progress, percentile, run_piestream
    from piestream.runtime.spark import spark_session

    spark = spark_session(args.master, app_name="piestream-bench-scale")
    runs = [(int(x), ex) for x in args.parallelism.split(",") for ex in args.exchanges.split(",")]
    for p, exchange in runs:
        cfg = BenchConfig(
            queries=[args.query],
            events=args.events,
            runner="spark",
            parallelism=p,
            sink="mv",
            epoch_events=args.epoch_events,
            spark_baseline=False,
            compact_before_size=False,
            exchange=exchange,
        )
        stats: list[Any] = []
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            # warm-up: Spark's Python workers and the imports
            warm = BenchConfig(**{**cfg.__dict__, "events": min(args.events, 20_000)})
            run_piestream(args.query, warm, Path(tmp) / "warm", spark, Progress(io.StringIO()))
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            run = run_piestream(
                args.query,
                cfg,
                Path(tmp),
                spark,
                Progress(io.StringIO()),
                keep=lambda db, out=stats: out.extend(db.barriers.stats),
            )
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        epochs = max(len(run.epochs), 1)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        timed = stats[-len(run.epochs) :] if run.epochs else stats
        row = {
            "master": args.label,
            "parallelism": p,
            "exchange": exchange,
            "error": run.error,
            "events_per_s": run.events / run.seconds if run.seconds else 0.0,
            "p50": percentile(run.epochs, 50),
            "p99": percentile(run.epochs, 99),
            "epochs": len(run.epochs),
            "wire_bytes": sum(s.driver_wire_bytes for s in timed) / max(len(timed), 1),
            "exchange_bytes": sum(s.driver_exchange_bytes for s in timed) / max(len(timed), 1),
            "peer_bytes": sum(s.peer_exchange_bytes for s in timed) / max(len(timed), 1),
            "driver_cpu_ms": 1000 * cpu / epochs,
        }
        print("RESULT " + json.dumps(row), flush=True)
    spark.stop()
    return 0


def _run_child(args: argparse.Namespace, master: str, label: str) -> list[dict[str, Any]]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--master",
        master,
        "--label",
        label,
        "--query",
        args.query,
        "--events",
        str(args.events),
        "--epoch-events",
        str(args.epoch_events),
        "--parallelism",
        args.parallelism,
        "--exchanges",
        args.exchanges,
    ]
    print(f"running {label} ({master}) ...", file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    rows = [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not rows:
        print(out.stderr[-3000:], file=sys.stderr)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--query", default="q5")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--epoch-events", type=int, default=20_000)
    ap.add_argument("--parallelism", default="1,2,4")
    ap.add_argument("--masters", default="local,standalone")
    ap.add_argument(
        "--exchanges",
        default="driver,direct",
        help="the leased runner's exchanges to compare: driver (chunks routed through the driver, "
        "the fallback) and direct (task to task, the default)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--master", default="local[2]", help=argparse.SUPPRESS)
    ap.add_argument("--label", default="local", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args)
    rows: list[dict[str, Any]] = []
    masters = args.masters.split(",")
    if "local" in masters:
        rows += _run_child(args, "local[2]", "local[2]")
    if "standalone" in masters:
        from standalone import StandaloneCluster

        with tempfile.TemporaryDirectory(prefix="bench-scale-cluster-") as tmp:
            cluster = StandaloneCluster(Path(tmp))
            try:
                cluster.start(workers=2)
                rows += _run_child(args, cluster.url, "standalone 2x1")
            finally:
                cluster.stop()
    print(
        f"\n{args.query}, {args.events:,} events, epochs of {args.epoch_events:,} events per source, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    head = f"{'master':<16}{'par':>4}{'exchange':>9}{'events/s':>12}{'p50 s':>8}{'p99 s':>8}"
    print(
        head + f"{'driver wire B/epoch':>22}{'via driver B/epoch':>20}{'task to task B/epoch':>22}"
        f"{'driver CPU ms/epoch':>21}"
    )
    for r in rows:
        first = f"{r['master']:<16}{r['parallelism']:>4}{r['exchange']:>9}"
        if r["error"]:
            print(f"{first}  error: {r['error']}")
            continue
        print(
            f"{first}{r['events_per_s']:>12,.0f}{r['p50']:>8.2f}{r['p99']:>8.2f}"
            f"{r['wire_bytes']:>22,.0f}{r['exchange_bytes']:>20,.0f}{r['peer_bytes']:>22,.0f}"
            f"{r['driver_cpu_ms']:>21,.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
