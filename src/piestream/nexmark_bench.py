"""`piestream bench nexmark`: the Nexmark queries on piestream, side by side with Spark (the
driver sits at the CLI level: it opens databases and runs jobs; the connectors only generate).

For each query: a fresh database in a temporary directory, the per-table Nexmark sources it
reads with exactly ``--events`` events each (RisingWave's legacy table mode: every source walks
the same event numbers and keeps its kind), the query as a sink to ``blackhole`` (RisingWave's
benchmark style) or as an MV, then epochs — each source reading at most ``--epoch-events``
events — until every source has consumed all its events; one more epoch checks that nothing is
still flowing. Reported: events/s (events ÷ wall time from CREATE to the epoch that consumed the
last event), the same per core (÷ 2: the machine's cores, whatever the runner uses), epoch
latency p50/p99, and the state: bytes of the SSTs holding the job's tables in the final version,
after compaction.

Spark (`spark_baseline`) reads the same events from Parquet and runs the same query either as a
Structured Streaming query (micro-batches, one file per table each) or, where Spark streaming
cannot express it incrementally, as a full batch recompute over all events.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from piestream.common.errors import PiestreamError
from piestream.common.text import format_bytes
from piestream.connectors.nexmark.queries import QUERIES, target_per_core
from piestream.connectors.nexmark.tables_sql import nexmark_ddl
from piestream.progress_bar import ProgressBar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from piestream.server.database import Database

CORES = 2  # the machine's cores: per-core figures divide by this whatever the runner uses


@dataclass
class BenchConfig:
    """What to run and how."""

    queries: list[str]
    events: int = 1_000_000
    runner: str = "spark"  # "spark" | "spark-shuffle" | "spark-leased" | "local"
    parallelism: int = 2
    sink: str = "blackhole"  # "blackhole" | "mv"
    epoch_events: int = 100_000  # events each source reads per epoch at most
    #: events per second of event time (the generator's timestamps; None: its 10,000)
    event_time_rate: int | None = None
    spark_baseline: bool = True
    timeout: float = 600.0  # seconds per query before it is stopped and reported partial
    profile: bool = False  # cProfile the piestream run (meaningful with the local runner)
    profile_top: int = 25
    master: str | None = None
    compact_before_size: bool = True
    #: seconds between the end of an epoch and the start of the next (0: back to back), as a
    #: server's barrier interval spaces them; not part of any epoch's time
    pace: float = 0.0
    #: how the leased runner's tasks exchange stage output ("direct" | "driver", `runtime.leased`)
    exchange: str = "direct"


@dataclass
class QueryRun:
    """One query's figures (piestream, and Spark's where it ran)."""

    name: str
    error: str | None = None  # "SQLSTATE: message" when piestream cannot plan or run it
    events: int = 0  # events consumed (per source; every source walks the same events)
    seconds: float = 0.0
    epochs: list[float] = field(default_factory=list)  # epoch wall times
    state_bytes: int = 0
    timed_out: bool = False
    spark_mode: str = ""  # "stream" | "recompute" | "" (not run) | "error: ..."
    spark_seconds: float = 0.0
    spark_batches: int = 0
    profile: str = ""

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def per_core(self) -> float:
        return self.events_per_s / CORES

    def epoch_pct(self, p: float) -> float:
        return percentile(self.epochs, p)


def percentile(xs: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


# -- progress ---------------------------------------------------------------------------------------


class Progress:
    """One status line on a terminal (rewritten in place), else a line every few seconds."""

    def __init__(self, out: IO[str] | None = None, every: float = 5.0) -> None:
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.every = every
        self._last = 0.0
        self._width = 0
        self.bar: ProgressBar | None = None  # while one is drawn, status text goes beside it

    def update(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.bar is not None and self.bar.enabled:
            self.bar.describe(text)
        elif self.tty:
            pad = max(0, self._width - len(text))
            self.out.write("\r" + text + " " * pad)
            self._width = len(text)
            self.out.flush()
        elif force or now - self._last >= self.every:
            self.out.write(text + "\n")
            self.out.flush()
            self._last = now

    def done(self, text: str) -> None:
        if self.bar is not None and self.bar.enabled:
            self.bar.print(text)
            return
        if self.tty:
            self.update(text)
            self.out.write("\n")
            self._width = 0
        else:
            self.out.write(text + "\n")
        self.out.flush()


# -- piestream side ---------------------------------------------------------------------------------


def open_database(path: Path, cfg: BenchConfig, spark: SparkSession | None) -> Database:
    """A database that runs epochs only when the harness asks (no background barriers)."""
    from piestream.server.database import Database, DatabaseConfig

    config = DatabaseConfig(
        runner=cfg.runner, barrier_interval=3600.0, parallelism=cfg.parallelism, background_compaction=True
    )
    db = Database(path, spark=spark if cfg.runner != "local" else None, config=config)
    db.barriers.stop()
    runner = db.barriers.runner
    if hasattr(runner, "exchange"):  # the leased runners (read per epoch)
        runner.exchange = cfg.exchange
    elif cfg.exchange != "direct":
        raise ValueError(f"runner {cfg.runner!r} has no {cfg.exchange!r} exchange")
    return db


def source_ddl(tables: Sequence[str], cfg: BenchConfig, proctime: bool = False) -> str:
    """The per-table sources with exactly `cfg.events` events, unthrottled, capped per epoch
    (`proctime`: bid with its ``p_time AS PROCTIME()`` column, for q12)."""
    return nexmark_ddl(
        proctime=proctime,
        kind="source",
        tables=tables,
        split_num=cfg.parallelism,
        event_num=cfg.events,
        events_per_second=0,
        max_rows_per_epoch=cfg.epoch_events,
        options=None if cfg.event_time_rate is None else {"nexmark.events.per.sec": cfg.event_time_rate},
    )


def job_sql(name: str, cfg: BenchConfig, object_name: str | None = None) -> str:
    """``CREATE SINK ... WITH (connector = 'blackhole')`` or ``CREATE MATERIALIZED VIEW`` (with
    EMIT ON WINDOW CLOSE for the queries that need it: q11)."""
    q = QUERIES[name]
    obj = object_name or f"nexmark_{name}"
    if cfg.sink == "mv":
        return f"CREATE MATERIALIZED VIEW {obj} AS\n{q.sql}{q.emit}"
    return f"CREATE SINK {obj} AS\n{q.sql}{q.emit}\nWITH (connector = 'blackhole')"


class SourceOffsets:
    """Reads the committed offsets of every Nexmark source node in the running graph."""

    def __init__(self, db: Database) -> None:
        from piestream.plan.source import SourceNode

        self.db = db
        self.nodes: list[SourceNode] = [
            n
            for f in db.barriers.graph.fragments.values()
            for n in f.root.walk()
            if isinstance(n, SourceNode)
        ]

    def consumed(self) -> int:
        """Events every source has consumed (the least of them): sum of its splits' offsets."""
        from piestream.storage.hummock.store import HummockStorage
        from piestream.storage.table.storage_table import StorageTable

        if not self.nodes:
            return 0
        vpin, version = self.db.hummock.pin_version()
        try:
            storage = HummockStorage(self.db.sstables, version, self.db.config.storage)
            counts = []
            for node in self.nodes:
                table = StorageTable(node.state_table, storage, version.max_committed_epoch)
                total = 0
                for split in node.split_ids:
                    row = table.get_row((split,))
                    if row is not None:
                        offset = json.loads(str(row[1])).get("o")
                        total += int(offset or 0)
                counts.append(total)
            return min(counts)
        finally:
            self.db.hummock.unpin_version(vpin)


def state_bytes(db: Database) -> int:
    """Bytes of the SSTs (final version) that hold any table of the running jobs."""
    tables = {t.table_id for t in db.barriers.graph.all_tables()}
    return sum(s.file_size for s in db.hummock.version.all_ssts() if tables.intersection(s.table_ids))


def error_text(e: BaseException) -> str:
    """``SQLSTATE: first line of the message`` (or the exception type for non-SQL errors)."""
    if isinstance(e, PiestreamError):
        msg = (e.message or "").splitlines()[0] if e.message else type(e).__name__
        return f"{e.sqlstate}: {msg}"
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def run_piestream(
    name: str,
    cfg: BenchConfig,
    workdir: Path,
    spark: SparkSession | None,
    progress: Progress,
    *,
    keep: Callable[[Database], None] | None = None,
) -> QueryRun:
    """Run one query on piestream until its sources are exhausted; `keep` sees the database
    (still open) afterwards, e.g. to read an MV."""
    q = QUERIES[name]
    run = QueryRun(name)
    db = open_database(workdir / f"db-{name}", cfg, spark)
    prof = cProfile.Profile() if cfg.profile else None
    try:
        if q.setup:  # e.g. q13's side input, committed before the job reads an event
            session = db.session()
            session.execute("SET implicit_flush = false")  # epochs run only when asked
            for stmt in q.setup:
                session.execute(stmt)
            session.execute("FLUSH")
        db.execute(source_ddl(q.tables, cfg, q.proctime))
        offsets = SourceOffsets(db)  # none yet: sources are read by the job's own source nodes
        progress.update(f"{name}: planning ...", force=True)
        if prof is not None:
            prof.enable()
        started = time.perf_counter()
        try:
            db.execute(job_sql(name, cfg))  # runs the first epoch too
        except PiestreamError as e:
            run.error = error_text(e)
            return run
        finally:
            if prof is not None:
                prof.disable()
        first = db.barriers.stats[-1].seconds if db.barriers.stats else 0.0
        run.epochs.append(first)
        offsets = SourceOffsets(db)
        consumed = offsets.consumed()
        while consumed < cfg.events:
            elapsed = time.perf_counter() - started
            if elapsed > cfg.timeout:
                run.timed_out = True
                break
            rate = consumed / elapsed if elapsed > 0 else 0.0
            progress.update(
                f"{name}: {consumed:,}/{cfg.events:,} events ({100 * consumed / cfg.events:.0f}%), "
                f"epoch {len(run.epochs)}, {rate:,.0f} events/s, last epoch {run.epochs[-1]:.2f} s"
            )
            if cfg.pace > 0:
                time.sleep(cfg.pace)
                started += cfg.pace  # rates count the epochs' time only
            t = time.perf_counter()
            if prof is not None:
                prof.enable()
            try:
                db.barriers.run_epoch()
            finally:
                if prof is not None:
                    prof.disable()
            run.epochs.append(time.perf_counter() - t)
            consumed = offsets.consumed()
        run.seconds = time.perf_counter() - started
        run.events = consumed
        # settled: the next epoch moves no rows anywhere (every epoch runs its input to the sinks)
        if not run.timed_out:
            # (an EOWC query's first epoch after the sources emits what the last watermark
            # closed: the one after it must be still)
            for _ in range(2 if q.emit_on_window_close else 1):
                db.barriers.run_epoch()
            leftover = db.barriers.stats[-1].rows_in
            if leftover:
                run.error = f"not settled: {leftover:.0f} rows still flowing after the sources ended"
        if cfg.compact_before_size:
            db.hummock.compact_until_idle()
        run.state_bytes = state_bytes(db)
        if prof is not None:
            run.profile = profile_text(prof, cfg.profile_top)
        if keep is not None:
            keep(db)
    except PiestreamError as e:
        run.error = error_text(e)
    finally:
        db.close()
    return run


def profile_text(prof: cProfile.Profile, top: int) -> str:
    """The top functions by own time and by cumulative time, paths shortened."""
    out = []
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        out.append(f"  top {top} by {key}:")
        root = str(Path(__file__).resolve().parents[3]) + "/"
        site = str(Path(os.__file__).resolve().parent) + "/"
        out.extend(
            "    " + line.replace(root, "").replace(site, "")
            for line in buf.getvalue().splitlines()
            if line.strip() and ("/" in line or "{" in line or "ncalls" in line)
        )
    return "\n".join(out)


# -- the report -------------------------------------------------------------------------------------


def _fmt_rate(x: float) -> str:
    if x <= 0:
        return "-"
    return f"{x / 1000:,.1f}K" if x < 10_000_000 else f"{x / 1e6:,.1f}M"


def format_report(runs: Sequence[QueryRun], cfg: BenchConfig, header: str = "") -> str:
    """The results table (and the list of unsupported queries with their errors)."""
    lines = []
    if header:
        lines.append(header)
    cols = (
        f"{'query':<6} {'events/s':>10} {'/core':>9} {'target/core':>11} {'ok':>3} "
        f"{'epochs':>6} {'p50 s':>6} {'p99 s':>6} {'state':>10} "
        f"{'spark ev/s':>11} {'spark':<10}"
    )
    lines += [cols, "-" * len(cols)]
    for r in runs:
        tgt = target_per_core(r.name)
        spark_rate = cfg.events / r.spark_seconds if r.spark_seconds > 0 else 0.0
        spark_col = f"{_fmt_rate(spark_rate):>11} {r.spark_mode[:40]}"
        if r.error is not None and not r.epochs:
            lines.append(f"{r.name:<6} not supported: {r.error}")
            if r.spark_mode:
                lines.append(
                    f"{'':<6} {'':>10} {'':>9} {'':>11} {'':>3} {'':>6} {'':>6} {'':>6} {'':>10} {spark_col}"
                )
            continue
        ok = "" if tgt is None else ("yes" if r.per_core >= tgt else "no")
        partial = "*" if r.timed_out else ""
        lines.append(
            f"{r.name:<6} {_fmt_rate(r.events_per_s) + partial:>10} {_fmt_rate(r.per_core):>9} "
            f"{'' if tgt is None else _fmt_rate(tgt):>11} {ok:>3} {len(r.epochs):>6} "
            f"{r.epoch_pct(50):>6.2f} {r.epoch_pct(99):>6.2f} {format_bytes(r.state_bytes):>10} {spark_col}"
        )
        if r.error is not None:
            lines.append(f"{'':<6} error: {r.error}")
    if any(r.timed_out for r in runs):
        lines.append(f"* stopped after {cfg.timeout:.0f} s: rate over the events consumed by then")
    return "\n".join(lines)


# -- the whole run ----------------------------------------------------------------------------------


def _spark_session(cfg: BenchConfig, progress: Progress) -> SparkSession | None:
    """The shared SparkSession if the run needs one; None (baseline off) if Spark cannot start."""
    if cfg.runner == "local" and not cfg.spark_baseline:
        return None
    from piestream.runtime.spark import spark_session

    progress.update("starting Spark ...", force=True)
    try:
        return spark_session(cfg.master, app_name="piestream-bench-nexmark")
    except Exception as e:
        if cfg.runner != "local":
            raise
        progress.done(f"Spark unavailable ({error_text(e)}): no Spark baseline")
        cfg.spark_baseline = False
        return None


def _warm_up(cfg: BenchConfig, workdir: Path, spark: SparkSession | None, progress: Progress) -> None:
    """A small untimed run first: Spark's Python workers and the imports are warm afterwards."""
    small = BenchConfig(
        queries=["q0"],
        events=min(cfg.events, 20_000),
        runner=cfg.runner,
        parallelism=cfg.parallelism,
        sink=cfg.sink,
        epoch_events=10_000,
        spark_baseline=False,
        compact_before_size=False,
    )
    progress.update("warming up ...", force=True)
    run_piestream("q0", small, workdir / "warmup", spark, Progress(io.StringIO()))


def run_bench(
    cfg: BenchConfig, out: IO[str] | None = None, progress: Progress | None = None
) -> list[QueryRun]:
    """Run every query of `cfg`, print the table to `out`, return the figures."""
    from piestream.connectors.nexmark.spark_baseline import SPARK_QUERIES, run_spark_query, write_events

    out = out or sys.stdout
    progress = progress or Progress()
    runs: list[QueryRun] = []
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="piestream-nexmark-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        spark = _spark_session(cfg, progress)
        dirs: dict[str, Path] = {}
        if cfg.spark_baseline and spark is not None:
            tables = sorted({t for n in cfg.queries if n in SPARK_QUERIES for t in QUERIES[n].tables})
            progress.update(f"writing {cfg.events:,} events as Parquet for Spark ...", force=True)
            t = time.perf_counter()
            dirs = write_events(workdir / "events", cfg.events, cfg.epoch_events, tables)
            progress.done(f"wrote {cfg.events:,} events as Parquet in {time.perf_counter() - t:.1f} s")
        if cfg.runner != "local":
            _warm_up(cfg, workdir, spark, progress)
        bar = ProgressBar(len(cfg.queries), "queries", stream=progress.out, enabled=progress.tty)
        progress.bar = bar
        stack.enter_context(bar)
        for name in cfg.queries:
            run = run_piestream(name, cfg, workdir, spark, progress)
            status = (
                f"not supported: {run.error}"
                if run.error and not run.epochs
                else f"{run.events_per_s:,.0f} events/s ({run.seconds:.1f} s, {len(run.epochs)} epochs)"
            )
            progress.done(f"{name}: piestream {status}")
            if cfg.spark_baseline and spark is not None and name in SPARK_QUERIES:
                mode = SPARK_QUERIES[name].mode
                progress.update(f"{name}: Spark ({mode}) ...", force=True)
                try:
                    sr = run_spark_query(spark, name, dirs, workdir, QUERIES[name].tables)
                    run.spark_mode, run.spark_seconds, run.spark_batches = sr.mode, sr.seconds, sr.batches
                    if sr.mode == "stream":
                        run.spark_mode = f"stream/{sr.batches}"
                    rate = cfg.events / sr.seconds
                    progress.done(f"{name}: Spark {sr.mode} {rate:,.0f} events/s ({sr.seconds:.1f} s)")
                except Exception as e:  # Spark's own errors (AnalysisException ...) are reported
                    run.spark_mode = f"error: {error_text(e)}"
                    progress.done(f"{name}: Spark failed: {error_text(e)}")
            runs.append(run)
            bar.advance()
        stack.close()
        progress.bar = None
    header = (
        f"Nexmark on piestream ({cfg.runner} runner, parallelism {cfg.parallelism}, {cfg.sink} sink): "
        f"{cfg.events:,} events per query, <= {cfg.epoch_events:,} events per epoch; per core = / {CORES}; "
        f"load avg {_load_avg()}; {time.perf_counter() - wall:.0f} s in all"
    )
    print(format_report(runs, cfg, header), file=out)
    if cfg.spark_baseline:
        print(
            "spark: 'stream/N' = Structured Streaming, N micro-batches (availableNow, maxFilesPerTrigger=1, "
            "noop sink); 'recompute' = one batch job over all events",
            file=out,
        )
    unsupported = [r for r in runs if r.error]
    if unsupported:
        print("\nnot supported / failed:", file=out)
        for r in unsupported:
            print(f"  {r.name}: {r.error}", file=out)
    for r in runs:
        if r.profile:
            print(
                f"\nprofile of {r.name} ({r.seconds:.1f} s, {len(r.epochs)} epochs):\n{r.profile}", file=out
            )
    out.flush()
    return runs


def _load_avg() -> str:
    with contextlib.suppress(OSError):
        return f"{os.getloadavg()[0]:.1f}"
    return "?"


def run_from_args(args: Any) -> int:
    from piestream.connectors.nexmark.queries import query_names

    try:
        names = query_names(args.queries)
    except ValueError as e:
        print(f"piestream bench nexmark: {e}", file=sys.stderr)
        return 2
    cfg = BenchConfig(
        queries=names,
        events=args.events,
        runner=args.runner,
        parallelism=args.parallelism,
        sink=args.sink,
        epoch_events=args.epoch_events,
        event_time_rate=args.event_time_rate,
        spark_baseline=args.spark_baseline,
        timeout=args.timeout,
        profile=args.profile,
        master=args.master,
    )
    run_bench(cfg)
    return 0
