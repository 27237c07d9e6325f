"""Issue 32's flat-state run: Nexmark events through three streaming jobs whose state is bounded
by time, printing each job's live state rows (its internal state tables, not the MV it
materializes) as the events grow. State that stays flat while events grow is the point:

* `tf`, a temporal filter: bids of the last `--tf-seconds` (10) of processing time
  (``p_time > now() - interval``, the bid source's ``p_time TIMESTAMPTZ AS PROCTIME()`` column);
* `eowc`, an EMIT ON WINDOW CLOSE aggregation: bids per 10 s TUMBLE window of event time;
* `ij`, an interval join: each bid with its auction when the bid is at most 10 s after it, both
  sides cleaned by the sources' watermarks (RisingWave's 4 s delay).

    nice -n 15 .venv/bin/python bench/bench_flat_state.py [--events 10000000] [--epoch-events 100000]

Local runner, parallelism 2, epochs driven by FLUSH (one epoch reads at most `--epoch-events`
events per source). Figures are wall-clock on whatever else the machine runs (load printed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOBS = {
    "tf": "SELECT auction, bidder, price, p_time FROM bid WHERE p_time > now() - INTERVAL '{tf}' SECOND",
    "eowc": "SELECT window_start, count(*) AS bids, max(price) AS top FROM TUMBLE(bid, date_time, "
    "INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE",
    "ij": "SELECT b.auction, b.price, a.seller FROM bid b JOIN auction a ON b.auction = a.id "
    "AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '10' SECOND",
}


@dataclass
class Sample:
    """One checkpoint: events read (each source's), seconds since the start, state rows by job."""

    events: int
    seconds: float
    state: dict[str, int] = field(default_factory=dict)
    output: dict[str, int] = field(default_factory=dict)


def state_rows(db: Any, name: str) -> tuple[int, int]:
    """(rows of job `name`'s internal state tables, rows of its MV) at the committed epoch."""
    from piestream.plan.materialize import MaterializeNode
    from piestream.plan.source import SourceNode
    from piestream.storage.table.storage_table import StorageTable

    rel = db.catalog.get(name)
    nodes = [n for f in db.catalog.job_fragments(rel.job_id) for n in f.root.walk()]
    mv = {t.table_id for n in nodes if isinstance(n, MaterializeNode) for t in n.tables()}
    offsets = {t.table_id for n in nodes if isinstance(n, SourceNode) for t in n.tables()}
    tables = {t.table_id: t for n in nodes for t in n.tables()}
    storage, epoch, vpin, spin = db.snapshot_storage()
    try:
        counts = {
            tid: sum(1 for _ in StorageTable(d, storage, epoch).iter_rows()) for tid, d in tables.items()
        }
    finally:
        db.release_snapshot(vpin, spin)
    inner = sum(c for tid, c in counts.items() if tid not in mv and tid not in offsets)
    return inner, sum(counts[t] for t in mv)


def run(
    events: int,
    epoch_events: int,
    checkpoints: int,
    workdir: Path,
    tf_seconds: int = 10,
    out: Any = sys.stdout,
) -> list[Sample]:
    """Run the three jobs over `events` Nexmark events, sampling state `checkpoints` times."""
    from piestream.connectors.nexmark.tables_sql import nexmark_ddl
    from piestream.nexmark_bench import SourceOffsets
    from piestream.server.database import Database, DatabaseConfig

    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=True)
    db = Database(workdir / "db", config=cfg)
    db.barriers.stop()
    samples: list[Sample] = []
    try:
        db.execute(
            nexmark_ddl(
                kind="source",
                tables=("auction", "bid"),
                split_num=2,
                event_num=events,
                events_per_second=0,
                max_rows_per_epoch=epoch_events,
                proctime=True,
            )
        )
        for name, sql in JOBS.items():
            db.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql.replace('{tf}', str(tf_seconds))}")
        offsets = SourceOffsets(db)
        step = max(1, events // checkpoints)
        next_at = step
        t0 = time.perf_counter()
        print(f"{'events':>12} {'seconds':>8} " + " ".join(f"{n + ' state':>11}" for n in JOBS), file=out)
        while True:
            db.execute("FLUSH")
            done = offsets.consumed()
            if done >= next_at or done >= events:
                db.execute("FLUSH")  # one more epoch: the cleaning by the last watermark is committed
                s = Sample(done, time.perf_counter() - t0)
                for name in JOBS:
                    s.state[name], s.output[name] = state_rows(db, name)
                samples.append(s)
                cells = " ".join(f"{s.state[n]:>11,}" for n in JOBS)
                print(f"{s.events:>12,} {s.seconds:>8.1f} {cells}", file=out, flush=True)
                next_at = (done // step + 1) * step
            if done >= events:
                break
        for name in JOBS:
            print(f"{name}: MV rows at the end {samples[-1].output[name]:,}", file=out)
    finally:
        db.close()
    return samples


def flat(samples: list[Sample], name: str) -> bool:
    """State flat: in the second half of the run never above twice the first half's peak."""
    half = len(samples) // 2
    first = max(s.state[name] for s in samples[: max(1, half)])
    return all(s.state[name] <= 2 * max(first, 1) for s in samples[half:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--epoch-events", type=int, default=100_000)
    ap.add_argument("--checkpoints", type=int, default=10)
    ap.add_argument("--tf-seconds", type=int, default=10, help="the temporal filter's window")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="piestream-flat-state-"))
    print(
        f"load {os.getloadavg()[0]:.1f}; {args.events:,} events, {args.epoch_events:,} per epoch per source"
    )
    try:
        samples = run(args.events, args.epoch_events, args.checkpoints, workdir, args.tf_seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for name in JOBS:
        print(f"{name}: state {'flat' if flat(samples, name) else 'GROWS'}")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0 if all(flat(samples, n) for n in JOBS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
