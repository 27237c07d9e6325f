"""postgres-cdc snapshot: a PostgreSQL 15 table of `--rows` rows (started here, as the tests do)
copied into a piestream CDC table with an MV over it; prints the copy's rows/s (CREATE to the MV
holding every row), and the time of the upstream COPY alone as the anchor. Then `--changes`
upstream changes streamed, with the time until the MV equals PostgreSQL's own answer. Then
`--rate` changes/s sustained for `--seconds` (transactions every 50 ms), with the MV's freshness
(upstream commit to the MV showing it) at p50 / p90, in seconds and in barrier intervals.

    .venv/bin/python bench/bench_cdc.py [--rows 2000000] [--changes 20000] [--rate 20000]
        [--seconds 10] [--no-reader] [--no-stream] [--profile out.txt]

Local runner (in-process; the CDC table's one split feeds a Materialize of parallelism 2).
Wall-clock figures on a shared machine: the load average is printed, and beside each
piestream phase this process's CPU seconds (the rest is PostgreSQL and other processes).
`--profile` samples every thread's stack every 5 ms during the snapshot and the sustained stream
and writes the functions by inclusive and by own samples to `out.txt.snapshot` and
`out.txt.stream` (py-spy is not installed here).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "connectors"))

from pg_server import PgServer, start_server

from piestream.common.epoch import EpochPair
from piestream.common.types import BIGINT, INT, NUMERIC, TIMESTAMPTZ, VARCHAR
from piestream.connectors.cdc.offset import CdcOffset
from piestream.connectors.cdc.postgres import check_upstream, postgres_cdc_connector
from piestream.plan.source import SourceSpec
from piestream.server.database import Database, DatabaseConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--changes", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=200_000, help="rows per epoch (max.rows.per.epoch)")
    ap.add_argument("--rate", type=int, default=20_000, help="sustained upstream changes per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the sustained stream runs")
    ap.add_argument("--no-reader", action="store_true", help="skip the reader-alone figures")
    ap.add_argument("--no-stream", action="store_true", help="stop after the snapshot")
    ap.add_argument("--profile", help="write a sampled profile of the snapshot and the stream here")
    args = ap.parse_args()
    prof = Sampler() if args.profile else None
    pg = start_server()
    try:
        pg.sql(
            "CREATE TABLE orders (id bigint PRIMARY KEY, cust int, amount numeric, note text, ts timestamptz)"
        )
        t0 = time.perf_counter()
        pg.sql(
            "INSERT INTO orders SELECT g, g % 1000, round((g % 100000) / 100.0, 2), 'note ' || g, "
            f"'2024-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, {args.rows}) g"
        )
        print(f"upstream load of {args.rows} rows: {time.perf_counter() - t0:.1f}s")
        t0 = time.perf_counter()
        with (
            tempfile.TemporaryFile() as f,
            psycopg.connect(pg.dsn()) as c,
            c.cursor().copy("COPY orders TO STDOUT WITH (FORMAT csv)") as cp,
        ):
            for block in cp:
                f.write(block)
        print(
            f"anchor: PostgreSQL COPY TO STDOUT alone: {args.rows / (time.perf_counter() - t0):,.0f} rows/s"
        )
        if not args.no_reader:
            _reader_alone(pg, args.rows, args.chunk, args.changes)
        with tempfile.TemporaryDirectory(prefix="piestream-cdc-") as tmp:
            cfg = DatabaseConfig(runner="local", barrier_interval=0.5, background_compaction=True)
            with Database(Path(tmp), config=cfg) as db:
                if prof is not None:
                    prof.start()
                t0, c0 = time.perf_counter(), time.process_time()
                opts = pg.with_options(table_name="orders")
                db.execute(
                    "CREATE TABLE orders (id bigint PRIMARY KEY, cust int, amount numeric, note varchar, "
                    f"ts timestamptz) WITH ({opts}, max.rows.per.epoch = '{args.chunk}')"
                )
                db.execute(
                    "CREATE MATERIALIZED VIEW per_cust AS "
                    "SELECT cust, count(*) AS n, sum(amount) AS s FROM orders GROUP BY cust"
                )
                while (db.execute("SELECT sum(n) FROM per_cust")[0].rows[0][0] or 0) < args.rows:
                    time.sleep(0.2)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                load = os.getloadavg()[0]
                print(
                    f"snapshot: {args.rows} rows in {dt:.1f}s = {args.rows / dt:,.0f} rows/s "
                    f"(this process's CPU {dc:.1f}s = {args.rows / dc:,.0f} rows per CPU second; "
                    f"load {load:.1f})"
                )
                if prof is not None:
                    prof.stop()
                    prof.write(f"{args.profile}.snapshot")
                    prof = Sampler()
                if args.no_stream:
                    return
                n = args.changes
                t0, c0 = time.perf_counter(), time.process_time()
                pg.sql(f"UPDATE orders SET amount = amount + 1 WHERE id <= {n}")
                want = sorted(
                    tuple(r) for r in pg.sql("SELECT cust, count(*), sum(amount) FROM orders GROUP BY cust")
                )
                while sorted(db.execute("SELECT cust, n, s FROM per_cust")[0].rows) != want:
                    time.sleep(0.1)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                print(
                    f"stream: {n} updates applied in {dt:.1f}s = {n / dt:,.0f} changes/s (one transaction; "
                    f"this process's CPU {dc:.1f}s = {n / dc:,.0f} changes per CPU second, polling included; "
                    f"load {os.getloadavg()[0]:.1f})"
                )
                if prof is not None:
                    prof.start()
                _freshness(db, pg, args.rate, args.seconds, min(args.rows, 1_000_000), cfg.barrier_interval)
                if prof is not None:
                    prof.stop()
    finally:
        pg.destroy()
        if prof is not None and prof.samples:
            prof.write(f"{args.profile}.stream")


class Sampler:
    """Every thread's stack every 5 ms (but the sampler's and the bench's polling): counts per
    function, inclusive (once per sample if anywhere on the stack) and own (the top frame)."""

    def __init__(self) -> None:
        self.inclusive: Counter[str] = Counter()
        self.own: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        skip = {threading.get_ident(), threading.main_thread().ident}
        while not self._stop.wait(0.005):
            for tid, frame in sys._current_frames().items():
                if tid in skip:
                    continue
                names = _stack(frame)
                if not names or names[0].startswith(_IDLE):
                    continue  # an idle thread
                self.samples += 1
                self.own[f"{names[0]}:{frame.f_lineno}"] += 1
                for n in set(names):
                    self.inclusive[n] += 1

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(f"{self.samples} samples of busy threads\n\n-- inclusive --\n")
            for n, k in self.inclusive.most_common(120):
                f.write(f"{100 * k / max(self.samples, 1):5.1f}% {n}\n")
            f.write("\n-- own --\n")
            for n, k in self.own.most_common(60):
                f.write(f"{100 * k / max(self.samples, 1):5.1f}% {n}\n")


#: the top frames of a thread that waits (a pool worker between tasks, a timed wait)
_IDLE = ("thread.py:_worker", "threading.py:wait", "selectors.py:", "queue.py:get")


def _stack(frame: FrameType | None) -> list[str]:
    out = []
    while frame is not None:  # per frame of one sample: a stack is a linked list
        code = frame.f_code
        out.append(f"{Path(code.co_filename).name}:{code.co_name}")
        frame = frame.f_back
    return out


def _freshness(db: Database, pg: PgServer, rate: int, seconds: float, rows: int, interval: float) -> None:
    """`rate` upstream changes per second for `seconds`: every 50 ms one transaction updates
    rate/20 rows and stamps row 1 with its sequence number; a tiny MV over row 1 shows which
    transaction the MV has reached. Freshness of transaction i: the first time the MV shows
    i or later, minus i's commit time (polled every 10 ms)."""
    db.execute("CREATE MATERIALIZED VIEW marker AS SELECT cust FROM orders WHERE id = 1")
    per_txn = max(1, rate // 20)
    committed: dict[int, float] = {}
    stop = threading.Event()

    def write() -> None:
        with psycopg.connect(pg.dsn(), autocommit=True) as c:
            i, lo = 0, 2
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                i += 1
                hi = lo + per_txn
                if hi > rows:
                    lo, hi = 2, 2 + per_txn
                with c.transaction():
                    c.execute(f"UPDATE orders SET amount = amount + 1 WHERE id >= {lo} AND id < {hi}")
                    c.execute(f"UPDATE orders SET cust = {-i} WHERE id = 1")
                committed[i] = time.perf_counter()
                lo = hi
                time.sleep(max(0.0, start + i * 0.05 - time.perf_counter()))
        stop.set()

    seen: dict[int, float] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    last = 0
    while not stop.is_set() or last < max(committed, default=0):
        rows_ = db.execute("SELECT cust FROM marker")[0].rows
        now = time.perf_counter()
        v = -int(rows_[0][0]) if rows_ and rows_[0][0] is not None and rows_[0][0] < 0 else 0
        for j in range(last + 1, v + 1):
            seen[j] = now
        last = max(last, v)
        if now - t0 > seconds + 120:
            break
        time.sleep(0.01)
    writer.join()
    cpu = time.process_time() - c0  # the writer's thread is in this process too (psycopg, small)
    lags = sorted(seen[i] - committed[i] for i in seen if i in committed)
    wall = max(committed.values()) - t0 if committed else 0.0
    up_rate = len(committed) * per_txn / wall if wall else 0.0
    if not lags:
        print("sustained stream: the MV showed no transaction")
        return
    p50, p90 = lags[len(lags) // 2], lags[int(len(lags) * 0.9)]
    print(
        f"sustained stream: {len(committed)} transactions of {per_txn} changes, upstream at "
        f"{up_rate:,.0f} changes/s (asked {rate:,}); MV freshness p50 {p50:.2f}s = "
        f"{p50 / interval:.1f} barrier intervals, p90 {p90:.2f}s = {p90 / interval:.1f} "
        f"(this process's CPU {cpu:.1f}s in {time.perf_counter() - t0:.1f}s; load {os.getloadavg()[0]:.1f})"
    )


def _reader_alone(pg: PgServer, rows: int, chunk: int, changes: int) -> None:
    """The connector without the rest of piestream: the snapshot in chunks of `chunk` rows, COPY
    to Arrow columns (what a source executor gets per epoch); then one read of `changes` upstream
    updates from the slot (twice: unacknowledged, a peek reads the same again), with the CPU
    seconds of this process beside the wall time (the rest is PostgreSQL's logical decoding)."""
    t = {"bigint": BIGINT, "int": INT, "numeric": NUMERIC, "varchar": VARCHAR, "timestamptz": TIMESTAMPTZ}
    cols = (
        ("id", "bigint"),
        ("cust", "int"),
        ("amount", "numeric"),
        ("note", "varchar"),
        ("ts", "timestamptz"),
    )
    spec = SourceSpec(
        "orders",
        "postgres-cdc",
        tuple((n, t[k]) for n, k in cols),
        {**_options(pg), "table.name": "orders", "slot.name": "bench_reader"},
    )
    check_upstream(spec, ["id"])
    reader, _ = postgres_cdc_connector(spec)
    offset = None
    done = 0
    t0 = time.perf_counter()
    while done < rows:
        res = reader.read("orders", offset, chunk, EpochPair(2, 1))
        offset, done = res.offset, done + res.consumed
    dt = time.perf_counter() - t0
    print(f"reader alone: {rows} rows in {dt:.1f}s = {rows / dt:,.0f} rows/s (load {os.getloadavg()[0]:.1f})")
    while CdcOffset.from_json(offset or "").phase != "stream":  # a last, short chunk ends the copy
        offset = reader.read("orders", offset, chunk, EpochPair(2, 1)).offset
    step = 1000
    for lo in range(0, min(changes, rows), step):
        pg.sql(f"UPDATE orders SET cust = cust + 1 WHERE id > {lo} AND id <= {lo + step}")
    for _ in range(2):
        t0, c0 = time.perf_counter(), time.process_time()
        res = reader.read("orders", offset, changes, EpochPair(2, 1))
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"stream reader alone: {res.consumed} changes in {dt:.2f}s = {res.consumed / dt:,.0f} changes/s "
            f"(this process's CPU {dc:.2f}s = {res.consumed / max(dc, 1e-6):,.0f} per CPU second)"
        )
    pg.sql("SELECT pg_drop_replication_slot('bench_reader')")


def _options(pg: PgServer) -> dict[str, str]:
    return {
        k.strip(): v.strip().strip("'") for k, v in (kv.split("=", 1) for kv in pg.with_options().split(", "))
    }


if __name__ == "__main__":
    main()
