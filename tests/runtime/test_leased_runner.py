"""The leased runner (`runtime.leased`): epochs on a long-lived Spark job give the same MVs as the
default runner and a plain-Python oracle, other Spark jobs get the slots once the lease ends, and a
task worker killed between or during epochs costs a retry, never a row."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import struct
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from piestream.common.errors import DivisionByZero
from piestream.plan.fragment import actor_id
from piestream.runtime.epoch_plan import EpochPlan
from piestream.runtime.lease_task import pack_hello
from piestream.runtime.leased import LeasedSparkRunner
from piestream.runtime.wire import FROM_TASK, MAC_BYTES, Channel, new_key
from piestream.server.database import Database, DatabaseConfig

pytestmark = pytest.mark.spark

SCHEMA = [
    "CREATE TABLE a (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)",
    "CREATE TABLE b (k BIGINT PRIMARY KEY, name VARCHAR)",
    # an aggregation over an exchange (grouped by a non-key column)
    "CREATE MATERIALIZED VIEW m_agg AS SELECT g, count(*) AS n, sum(v) AS s FROM a GROUP BY g",
    "CREATE MATERIALIZED VIEW m_join AS SELECT a.k, a.v, b.name FROM a JOIN b ON a.g = b.k",
    "CREATE MATERIALIZED VIEW m_mv AS SELECT n, count(*) AS groups FROM m_agg GROUP BY n",  # MV on MV
]


def _db(
    spark: Any, path: Path, kind: str = "spark-leased", runner: LeasedSparkRunner | None = None
) -> Database:
    config = DatabaseConfig(runner=kind, barrier_interval=3600, parallelism=2, background_compaction=False)
    return Database(path, spark=spark, config=config, runner=runner)


class _Oracle:
    """The tables in Python, and what each MV must hold."""

    def __init__(self) -> None:
        self.a: dict[int, tuple[int, int]] = {}
        self.b: dict[int, str] = {}

    def views(self) -> dict[str, list[tuple[Any, ...]]]:
        agg: dict[int, list[int]] = {}
        for g, v in self.a.values():
            x = agg.setdefault(g, [0, 0])
            x[0] += 1
            x[1] += v
        n_groups = Counter(n for n, _ in agg.values())
        return {
            "m_agg": sorted((g, n, s) for g, (n, s) in agg.items()),
            "m_join": sorted((k, v, self.b[g]) for k, (g, v) in self.a.items() if g in self.b),
            "m_mv": sorted(n_groups.items()),
        }


def _epochs(rng: random.Random, rounds: int) -> list[tuple[list[str], dict[str, list[tuple[Any, ...]]]]]:
    """`rounds` epochs of inserts, updates and deletes, each with what the MVs hold after it."""
    oracle = _Oracle()
    out = []
    next_k = 0
    for r in range(rounds):
        sql = []
        rows = []
        for _ in range(60):
            k, g, v = next_k, rng.randrange(8), rng.randrange(100)
            next_k += 1
            oracle.a[k] = (g, v)
            rows.append(f"({k}, {g}, {v})")
        sql.append("INSERT INTO a VALUES " + ", ".join(rows))
        names = [(g, f"n{g}_{r}") for g in range(r, 8, 2)]
        for g, name in names:
            if g in oracle.b:
                sql.append(f"UPDATE b SET name = '{name}' WHERE k = {g}")
            else:
                sql.append(f"INSERT INTO b VALUES ({g}, '{name}')")
            oracle.b[g] = name
        for k in rng.sample(sorted(oracle.a), 15):
            g, v = oracle.a[k]
            oracle.a[k] = ((g + 1) % 8, v + 1)
            sql.append(f"UPDATE a SET g = {(g + 1) % 8}, v = {v + 1} WHERE k = {k}")
        gone = rng.sample(sorted(oracle.a), 10)
        for k in gone:
            del oracle.a[k]
        sql.append(f"DELETE FROM a WHERE k IN ({', '.join(map(str, gone))})")
        if r == 2:
            del oracle.b[1]
            sql.append("DELETE FROM b WHERE k = 1")
        out.append((sql, oracle.views()))
    return out


def _views(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    s = db.session()
    return {
        m: sorted(tuple(r) for r in s.execute_one(f"SELECT * FROM {m}").rows)
        for m in ("m_agg", "m_join", "m_mv")
    }


def _apply(db: Database, statements: list[str]) -> None:
    """The statements as one transaction: one epoch."""
    s = db.session()
    s.execute("BEGIN")
    for q in statements:
        s.execute(q)
    s.execute("COMMIT")
    s.execute("FLUSH")


def _run_workload(
    db: Database, epochs: list[tuple[list[str], Any]]
) -> list[dict[str, list[tuple[Any, ...]]]]:
    """The MVs after each epoch of `epochs`; closes `db`."""
    try:
        for q in SCHEMA:
            db.execute(q)
        out = []
        for statements, _ in epochs:
            _apply(db, statements)
            out.append(_views(db))
        return out
    finally:
        db.close()


def _counts_by_v(db: Database, rows: int, mod: int) -> None:
    """Table t of `rows` rows (v = k % `mod`) and MV m counting them by v, in one epoch."""
    db.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
    db.execute("CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
    db.execute(f"INSERT INTO t SELECT g, g % {mod} FROM generate_series(1, {rows}) AS g; FLUSH")


def test_leased_mvs_equal_the_default_runner_and_the_oracle(spark: Any, tmp_path: Path) -> None:
    """The leased runner's tasks exchange stage output directly (the data plane): no exchanged
    byte passes the driver, the MVs equal the oracle's, the shuffle runner's and those of the
    driver-routed exchange (the fallback), which does route every chunk through the driver."""
    epochs = _epochs(random.Random(7), 6)
    leased = _db(spark, tmp_path / "leased")
    runner = leased.barriers.runner
    assert isinstance(runner, LeasedSparkRunner) and runner.exchange == "direct"
    got = _run_workload(leased, epochs)
    assert runner.leased_epochs >= 4, (runner.leased_epochs, runner.plain_epochs)
    assert runner.lease_pids == {}  # closed with the database
    assert not [t for t in threading.enumerate() if t.name.startswith("piestream-lease")]
    assert got == [expected for _, expected in epochs]
    assert got[-1]["m_join"] and got[-1]["m_mv"]
    busy = [s for s in leased.barriers.stats if s.rows_in > 0]
    assert busy and all(s.driver_exchange_bytes == 0 for s in busy)  # control, not data
    assert sum(s.peer_exchange_bytes for s in busy) > 0  # the chunks went task to task
    via_driver = LeasedSparkRunner(spark, lease_seconds=60.0, exchange="driver")
    routed = _db(spark, tmp_path / "via-driver", runner=via_driver)
    assert _run_workload(routed, epochs) == got and via_driver.leased_epochs >= 4
    busy = [s for s in routed.barriers.stats if s.rows_in > 0]
    assert busy and all(s.driver_exchange_bytes > 0 and s.peer_exchange_bytes == 0 for s in busy)
    assert got == _run_workload(_db(spark, tmp_path / "shuffle", "spark-shuffle"), epochs)


def _epoch_jobs(spark: Any, runner: LeasedSparkRunner) -> dict[int, int]:
    """The Spark jobs of each of `runner`'s leases so far, by lease number."""
    tracker = spark.sparkContext.statusTracker()
    prefix = f"piestream-lease-{id(runner)}-"
    return {n: len(tracker.getJobIdsForGroup(f"{prefix}{n}")) for n in range(1, runner._leases + 1)}


def test_the_default_runner_runs_each_epoch_as_one_spark_job(spark: Any, tmp_path: Path) -> None:
    """Runner "spark": every epoch is one Spark job of its own (DESIGN: each barrier = one epoch =
    one Spark job), the next one started before it is needed; the MVs equal the oracle's."""
    epochs = _epochs(random.Random(11), 5)
    db = _db(spark, tmp_path / "db", "spark")
    runner = db.barriers.runner
    assert isinstance(runner, LeasedSparkRunner) and runner.lease_seconds == 0.0
    # what this test asserts is the order of events, not how fast a loaded machine starts
    # Python workers: no lease may fall back to a plain job because its tasks connected late
    runner.connect_timeout = runner.startup_timeout = 300.0
    seen: list[int] = []
    ahead = 0  # epochs whose job was started before the epoch was
    run_leased, inner_run = runner._run_leased, runner.run

    def spy(lease: Any, plan: EpochPlan, dml: Any) -> Any:
        nonlocal ahead
        seen.append(int(lease.group.rsplit("-", 1)[1]))
        ahead += lease.started < started[-1]
        return run_leased(lease, plan, dml)

    started: list[float] = []

    def timed(plan: EpochPlan, dml: Any) -> Any:
        started.append(time.monotonic())
        return inner_run(plan, dml)

    runner.run = timed  # type: ignore[method-assign]

    runner._run_leased = spy  # type: ignore[method-assign]
    got = _run_workload(db, epochs)
    assert got == [expected for _, expected in epochs]
    assert runner.leased_epochs >= 5 and runner.plain_epochs == 0, (runner.leased_epochs, runner.plain_epochs)
    assert len(seen) == runner.leased_epochs and len(set(seen)) == len(seen)  # a lease per epoch
    jobs = _epoch_jobs(spark, runner)
    assert all(jobs[n] == 1 for n in seen), jobs  # one Spark job each
    # the next epoch's job starts when an epoch ends (unless another Spark job waits then)
    assert ahead >= len(seen) // 2, (ahead, len(seen))


def test_a_bulk_epoch_streams_through_tiny_channels(spark: Any, tmp_path: Path) -> None:
    """A 300K-row epoch (it used to run as a shuffle job) runs on the default runner's lease
    with 64 KiB channel windows: the DML streams to the tasks in frames, the links' windows
    fill (credit waits, or out-of-order input spilled to disk) yet no link holds more than its
    window plus one element, and the MVs equal their queries, among them a join of one
    stage's output (an aggregation) with another's (a table)."""
    window = 64 << 10
    runner = LeasedSparkRunner(spark, lease_seconds=0.0, channel_window=window)
    db = _db(spark, tmp_path / "db", kind="spark", runner=runner)
    queries = {
        "m": "SELECT v, count(*) AS n, sum(k) AS s FROM t GROUP BY v",
        "j": "SELECT x.v, x.n, names.name FROM (SELECT v, count(*) AS n FROM t GROUP BY v) AS x "
        "JOIN names ON x.v = names.v",
    }
    try:
        db.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
        db.execute("CREATE TABLE names (v BIGINT PRIMARY KEY, name VARCHAR)")
        for name, q in queries.items():
            db.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        db.execute("INSERT INTO names SELECT g, 'n' || g FROM generate_series(0, 999) AS g; FLUSH")
        db.execute("INSERT INTO t SELECT g, g % 1000 FROM generate_series(1, 300000) AS g; FLUSH")
        db.execute("UPDATE t SET v = 1000 - v WHERE k % 3 = 0; DELETE FROM names WHERE v < 10; FLUSH")
        assert runner.plain_epochs == 0 and runner.leased_epochs >= 3, (
            runner.leased_epochs,
            runner.plain_epochs,
        )
        s = db.session()
        for name, q in queries.items():
            got = sorted(tuple(r) for r in s.execute_one(f"SELECT * FROM {name}").rows)
            assert got == sorted(tuple(r) for r in s.execute_one(q).rows), name
        assert len(got) == 990
        busy = [st for st in db.barriers.stats if st.rows_in > 0]
        assert all(st.driver_exchange_bytes == 0 for st in busy)
        assert max(st.peer_exchange_bytes for st in busy) > 20 * window  # far more than a window
        assert runner.credit_waits + runner.spilled_bytes > 0, "the windows never filled"
        assert 0 < runner.peak_link_bytes <= window + runner.largest_element
    finally:
        db.close()


def _count_in_thread(spark: Any, events: list[str]) -> tuple[threading.Thread, list[bool]]:
    """A Spark job run in a thread; it appends "counted" to `events` when it is done."""
    done: list[bool] = []

    def count() -> None:
        assert spark.range(10).count() == 10
        events.append("counted")
        done.append(True)

    th = threading.Thread(target=count, daemon=True)
    th.start()
    return th, done


def test_other_spark_jobs_run_when_the_lease_ends(spark: Any, tmp_path: Path) -> None:
    """Another Spark job waits for the lease holding the slots, which gives them back long
    before its `lease_seconds` (600 s, which the joins below stay far under): after `idle_seconds`
    without an epoch, and, while epochs keep coming, at an epoch boundary. Asserted by the order
    of events (the lease ended, then the job ran; the job ran while epochs still came), not by
    how many seconds a loaded machine took."""
    runner = LeasedSparkRunner(spark, lease_seconds=600.0, idle_seconds=1.0)
    events: list[str] = []
    end_lease = runner._end_lease

    def spy(lease: Any, stop: bool) -> None:
        events.append(f"ended {lease.group}")
        end_lease(lease, stop)

    runner._end_lease = spy  # type: ignore[method-assign]
    db = _db(spark, tmp_path / "db", runner=runner)
    try:
        _counts_by_v(db, 100, 5)
        assert len(runner.lease_pids) == 2, (runner.leased_epochs, runner.plain_epochs, db.barriers.failures)
        # a job submitted while the lease runs: it waits for the lease's idle end (1 s)
        lease = runner._lease
        assert lease is not None
        # the lease's own job is not another job waiting (its id, once seen, is kept)
        assert not runner._others_waiting(lease) and len(lease.job_ids) == 1
        th, done = _count_in_thread(spark, events)
        th.join(timeout=300)
        assert done, events
        assert events.index(f"ended {lease.group}") < events.index("counted"), events
        # a job submitted while epochs keep coming: the lease ends at the next epoch boundary
        events.clear()
        db.execute("INSERT INTO t VALUES (1000, 1); FLUSH")
        lease = runner._lease
        assert lease is not None and runner.lease_pids
        th, done = _count_in_thread(spark, events)
        inserted = 101
        while not done and inserted < 3000:  # epochs come until the job ran
            db.execute(f"INSERT INTO t VALUES ({2000 + inserted}, 2); FLUSH")
            inserted += 1
            time.sleep(0.05)
        th.join(timeout=300)
        assert done and inserted < 3000, (inserted, events)
        assert events.index(f"ended {lease.group}") < events.index("counted"), events
        # epochs keep working, on a lease again
        before = runner.leased_epochs
        db.execute("INSERT INTO t VALUES (5000, 3); FLUSH")
        assert runner.leased_epochs > before
        rows = db.session().execute_one("SELECT v, n FROM m ORDER BY v").rows
        assert sum(r[1] for r in rows) == inserted + 1
        assert sorted(tuple(r) for r in rows) == sorted(
            tuple(r) for r in db.session().execute_one("SELECT v, count(*) FROM t GROUP BY v").rows
        )
    finally:
        db.close()


class KillOnce:
    """A `TaskHook` that kills its own Python worker once, at `point` of actor `actor` (a marker
    file remembers it happened, across processes)."""

    def __init__(self, marker: str, point: str) -> None:
        self.marker = marker
        self.point = point

    def __call__(self, point: str, plan: EpochPlan, actor_id: int) -> None:
        if point != self.point or not os.path.exists(self.marker + ".armed"):
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{plan.data_epoch} {actor_id}\n".encode())
        os.close(fd)
        os._exit(1)


class FailOnce:
    """A `TaskHook` that fails an actor of stage 0 run by slot 1 once, after its executors ran
    (a marker file remembers it happened, across processes): slot 0 then waits in stage 1 for
    slot 1's output, which never comes."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self, point: str, plan: EpochPlan, aid: int) -> None:
        if point != "executed" or len(plan.stages) < 2 or not os.path.exists(self.marker + ".armed"):
            return
        if (
            plan.partition_index(0).get(next((a for a in plan.stages[0] if actor_id(*a) == aid), (-1, -1)))
            != 1
        ):
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        raise RuntimeError("injected actor failure")


def test_an_actor_failure_on_the_data_plane_fails_the_epoch_not_the_lease(spark: Any, tmp_path: Path) -> None:
    """An actor of stage 0 fails on slot 1: its task tells its peers (ABORT), slot 0 stops
    waiting for its output, the epoch fails and is retried by the barrier manager on the same
    lease; nothing is lost or duplicated."""
    marker = str(tmp_path / "failed")
    runner = LeasedSparkRunner(spark, hook=FailOnce(marker), lease_seconds=60.0, idle_seconds=30.0)
    db = _db(spark, tmp_path / "db", runner=runner)
    db.barriers.isolate_failing_jobs = False
    try:
        _counts_by_v(db, 100, 5)
        pids = runner.lease_pids
        failures = len(db.barriers.failures)
        Path(marker + ".armed").touch()
        db.execute("INSERT INTO t SELECT g, g % 5 FROM generate_series(101, 200) AS g; FLUSH")
        assert Path(marker).exists() and len(db.barriers.failures) > failures
        assert runner.lease_pids == pids  # the lease stayed in step
        got = sorted(tuple(r) for r in db.session().execute_one("SELECT v, n FROM m").rows)
        assert got == sorted(Counter(g % 5 for g in range(1, 201)).items())
        assert db.session().execute_one("SELECT count(*) FROM t").rows[0][0] == 200
    finally:
        db.close()


def test_killed_task_worker_costs_a_retry_not_a_row(spark: Any, tmp_path: Path) -> None:
    marker = str(tmp_path / "killed")
    runner = LeasedSparkRunner(spark, hook=KillOnce(marker, "synced"), lease_seconds=60.0, idle_seconds=30.0)
    db = _db(spark, tmp_path / "db", runner=runner)
    expected: dict[int, int] = {}

    def epoch(first: int) -> None:
        db.execute(f"INSERT INTO t SELECT g, g % 7 FROM generate_series({first}, {first + 99}) AS g")
        db.execute(f"UPDATE t SET v = v + 1 WHERE k % 3 = 0 AND k < {first}; FLUSH")
        for k in range(first, first + 100):
            expected[k] = k % 7
        for k in expected:
            if k % 3 == 0 and k < first:
                expected[k] += 1
        got = sorted(tuple(r) for r in db.session().execute_one("SELECT v, n FROM m").rows)
        assert got == sorted(Counter(expected.values()).items())
        assert db.session().execute_one("SELECT count(*) FROM t").rows[0][0] == len(expected)

    try:
        db.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)")
        db.execute("CREATE MATERIALIZED VIEW m AS SELECT v, count(*) AS n FROM t GROUP BY v")
        epoch(0)
        # between epochs: a slot's worker dies; the next epoch notices and starts a new lease
        pids = runner.lease_pids
        assert len(pids) == 2
        os.kill(pids[1], signal.SIGKILL)
        failures = len(db.barriers.failures)
        epoch(100)
        assert runner.lease_pids and runner.lease_pids[1] != pids[1]
        # during an epoch: a worker dies after uploading its SSTs, before reporting
        Path(marker + ".armed").touch()
        pids = runner.lease_pids
        epoch(200)
        assert Path(marker).exists()  # the fault happened
        assert len(db.barriers.failures) > failures  # ... and cost the epoch a retry
        assert set(runner.lease_pids.values()) != set(pids.values())
        epoch(300)
    finally:
        db.close()


def test_epochs_run_as_plain_spark_jobs_when_the_lease_cannot_start(spark: Any, tmp_path: Path) -> None:
    """Tasks that do not connect in time (here: no time at all) leave the epoch to SparkRunner's
    job, which the abandoned lease job does not block; a later lease starts normally."""
    runner = LeasedSparkRunner(spark, connect_timeout=0.0, startup_timeout=0.0, retry_seconds=3600.0)
    db = _db(spark, tmp_path / "db", runner=runner)
    try:
        _counts_by_v(db, 100, 5)
        assert runner.plain_epochs > 1 and runner.leased_epochs == 0  # one try, then plain epochs
        runner.connect_timeout, runner.retry_seconds, runner._no_lease_until = 10.0, 30.0, 0.0
        db.execute("INSERT INTO t SELECT g, g % 3 FROM generate_series(101, 200) AS g; FLUSH")
        assert runner.leased_epochs > 0
        got = sorted(tuple(r) for r in db.session().execute_one("SELECT v, n FROM m").rows)
        assert got == sorted(
            Counter([g % 5 for g in range(1, 101)] + [g % 3 for g in range(101, 201)]).items()
        )
    finally:
        db.close()


def test_data_errors_flow_as_with_spark_and_keep_the_lease(spark: Any, tmp_path: Path) -> None:
    """A data error gives NULL and an error record (its report crosses the lease); in strict mode
    it fails the statement with PostgreSQL's error, and the lease's tasks stay."""
    runner = LeasedSparkRunner(spark, lease_seconds=60.0, idle_seconds=30.0)
    db = _db(spark, tmp_path / "db", runner=runner)
    try:
        db.execute("CREATE TABLE dz (k INT, x INT)")
        db.execute("CREATE MATERIALIZED VIEW dzm AS SELECT k, 10 / x AS r FROM dz")
        db.execute("INSERT INTO dz VALUES (1, 0), (2, 5); FLUSH")
        s = db.session()
        assert sorted(s.execute_one("SELECT k, r FROM dzm").rows) == [(1, None), (2, 2)]
        errors = s.execute_one(
            "SELECT sqlstate, error_count FROM rw_catalog.rw_streaming_errors WHERE job_name = 'dzm'"
        ).rows
        assert [tuple(r) for r in errors] == [("22012", 1)]
        pids = runner.lease_pids
        db.execute("ALTER SYSTEM SET streaming_strict_mode = true")
        with pytest.raises(DivisionByZero):
            db.execute("INSERT INTO dz VALUES (3, 0)")
        assert runner.lease_pids == pids  # a data error is the epoch's, not the lease's
        db.execute("INSERT INTO dz VALUES (4, 2); FLUSH")
        assert sorted(s.execute_one("SELECT k, r FROM dzm").rows) == [(1, None), (2, 2), (4, 5)]
        # strangers on the listener (a huge length prefix, a hello with no MAC or another job's
        # key) are turned away ...
        assert runner._listener is not None
        address = runner._listener.getsockname()[:2]
        hello = pack_hello(0, 1, "127.0.0.1", 1)
        forged = struct.pack("<Q", len(hello)) + b"\0" * MAC_BYTES + hello
        for junk in (struct.pack("<Q", 1 << 62), forged):
            with socket.create_connection(address, timeout=10) as bad:
                bad.sendall(junk)
                assert bad.recv(1) == b""  # closed by the driver
        with socket.create_connection(address, timeout=10) as bad:
            Channel(bad, new_key(), FROM_TASK).send(hello)
            assert bad.recv(1) == b""
        assert runner.lease_pids == pids  # ... without effect on the lease
        # ... and the next lease still starts: this epoch ends the lease, the next starts one
        runner.lease_seconds = 0.0
        leases = runner._leases
        db.execute("INSERT INTO dz VALUES (5, 1); FLUSH")
        assert runner._leases > leases and runner.plain_epochs == 0
        assert sorted(s.execute_one("SELECT k, r FROM dzm").rows) == [(1, None), (2, 2), (4, 5), (5, 10)]
        assert runner.leased_epochs > 0
    finally:
        db.close()


class _Tamperer:
    """A TCP proxy between a lease's tasks and the driver that flips the last byte of the next
    frame it forwards in a direction it is armed for ("task" or "driver" frames): a forgery on
    the wire."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.armed: set[str] = set()
        self.tampered: list[str] = []
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.address = self.srv.getsockname()[:2]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                task, _ = self.srv.accept()
            except OSError:
                return
            driver = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(task, driver, "task"), daemon=True).start()
            threading.Thread(target=self._pump, args=(driver, task, "driver"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, whose: str) -> None:
        try:
            while data := src.recv(1 << 20):
                # a frame's header is 40 bytes: a larger read ends inside a body
                if whose in self.armed and len(data) > 40:
                    self.armed.discard(whose)
                    self.tampered.append(whose)
                    data = data[:-1] + bytes([data[-1] ^ 0x01])
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


class _TamperedRunner(LeasedSparkRunner):
    """A leased runner whose tasks reach it through a `_Tamperer`."""

    proxy: _Tamperer | None = None

    def _task_address(self) -> tuple[str, int]:
        if self.proxy is None:
            self.proxy = _Tamperer(super()._task_address())
        return self.proxy.address


def test_a_forged_frame_fails_the_epoch_which_is_retried(spark: Any, tmp_path: Path, caplog: Any) -> None:
    """A frame altered on the wire, either way, does not verify: it is dropped and logged, its
    connection closed, the epoch fails as a lost task's would and the barrier manager retries
    it on a new lease; nothing is lost or duplicated."""
    # tasks get all the time a loaded machine needs to connect: every epoch here runs leased
    runner = _TamperedRunner(
        spark, lease_seconds=60.0, idle_seconds=30.0, connect_timeout=60.0, retry_seconds=0.0
    )
    db = _db(spark, tmp_path / "db", runner=runner)
    try:
        _counts_by_v(db, 100, 5)
        expected = Counter(g % 5 for g in range(1, 101))
        assert runner.proxy is not None and runner.leased_epochs > 0
        # the epoch stats count the driver's traffic: control and DML, no exchanged chunk
        busy = [s for s in db.barriers.stats if s.rows_in > 0]
        assert busy and all(s.driver_wire_bytes > 0 and s.driver_exchange_bytes == 0 for s in busy)
        first = 101
        for whose in ("task", "driver"):
            failures = len(db.barriers.failures)
            runner.proxy.armed.add(whose)
            with caplog.at_level(logging.WARNING, logger="piestream.runtime.wire"):
                db.execute(f"INSERT INTO t SELECT g, g % 5 FROM generate_series({first}, {first + 99}) AS g")
                db.execute("FLUSH")
            expected.update(g % 5 for g in range(first, first + 100))
            first += 100
            assert runner.proxy.tampered[-1] == whose  # the forgery happened ...
            assert len(db.barriers.failures) > failures  # ... failed an epoch, which was retried
            if whose == "task":  # the driver dropped the frame (a task drops it in its worker)
                assert "HMAC does not verify" in caplog.text
            got = sorted(tuple(r) for r in db.session().execute_one("SELECT v, n FROM m").rows)
            assert got == sorted(expected.items())
            assert db.session().execute_one("SELECT count(*) FROM t").rows[0][0] == first - 1
    finally:
        db.close()
        if runner.proxy is not None:
            runner.proxy.srv.close()
