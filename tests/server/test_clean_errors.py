"""An epoch failure that reaches a client carries its cause's SQLSTATE and one readable message.

The cause may be raised in-process (local runner) or in a Spark Python worker, whose exception
reaches the driver as traceback text only: either way the client (psycopg, the Python API, the
CLI) sees the cause's SQLSTATE and message, and never a Python traceback; the traceback goes to
the server log.

A data error in a streaming expression yields NULL plus an error record by default; these
tests turn strict mode on (``ALTER SYSTEM SET streaming_strict_mode = true``) so that one fails
the epoch and reaches the client. A bug in one job's actors (a task hook raising a plain
ValueError) isolates that job: it is marked failed with its error, one clean line, visible in
``rw_catalog.rw_streaming_jobs``; the rest keeps committing, and REBUILD brings it back.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import piestream
from piestream.cli import main
from piestream.common.errors import DivisionByZero
from piestream.meta import barrier_manager
from piestream.plan.fragment import ACTOR_INDEX_BITS
from piestream.runtime.epoch_plan import EpochPlan
from piestream.runtime.runners import LocalRunner, SparkRunner
from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer

TRACE_WORDS = ("Traceback", 'File "', "most recent call", "PythonException", "[piestream-error:")


def assert_clean(e: psycopg.Error, sqlstate: str, message: str | None = None) -> None:
    """The error has `sqlstate`, the message (if given) and no trace of a traceback anywhere."""
    d = e.diag
    assert e.sqlstate == sqlstate, (e.sqlstate, d.message_primary)
    if message is not None:
        assert d.message_primary == message
    for text in (d.message_primary, d.message_detail, d.message_hint, str(e)):
        assert text is None or not any(w in text for w in TRACE_WORDS), text
    assert "\n" not in (d.message_primary or "")


@dataclass(frozen=True)
class FailWhileFlagged:
    """A task hook (pickled into Spark's workers) that raises a plain Python exception — a bug,
    not a PiestreamError — in the actors of the job whose id the file `flag` holds, while it
    exists."""

    flag: str

    def __call__(self, point: str, plan: EpochPlan, actor_id: int) -> None:
        if point != "executed":
            return
        try:
            job = int(Path(self.flag).read_text())
        except (OSError, ValueError):
            return
        if plan.fragment(actor_id >> ACTOR_INDEX_BITS).job_id == job:
            raise ValueError("hook bug\nsecond line of the bug's text")


def test_data_errors_reach_psycopg_with_their_sqlstate(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET streaming_strict_mode = true")
        c.execute("CREATE TABLE dz (k INT, x INT, s VARCHAR)")
        c.execute("CREATE MATERIALIZED VIEW dzm AS SELECT k, 10 / x AS r FROM dz")
        c.execute("CREATE MATERIALIZED VIEW dzo AS SELECT k, x * 2000000000 AS big FROM dz WHERE k > 100")
        c.execute("CREATE MATERIALIZED VIEW dzc AS SELECT k, CAST(s AS INT) AS n FROM dz WHERE k > 200")
        with pytest.raises(psycopg.Error) as info:
            c.execute("INSERT INTO dz VALUES (1, 0, '1')")
        assert_clean(info.value, "22012", "division by zero")
        with pytest.raises(psycopg.Error) as info:
            c.execute("INSERT INTO dz VALUES (101, 2, '1')")
        assert_clean(info.value, "22003")
        with pytest.raises(psycopg.Error) as info:
            c.execute("INSERT INTO dz VALUES (201, 1, 'abc')")
        assert_clean(info.value, "22P02")
        assert "abc" in (info.value.diag.message_primary or "")
        # extended protocol (parameters) answers the same
        with pytest.raises(psycopg.Error) as info:
            c.execute("INSERT INTO dz VALUES (%s, %s, %s)", (2, 0, "2"))
        assert_clean(info.value, "22012", "division by zero")
        # nothing of the failed statements was applied; the pipeline goes on
        c.execute("INSERT INTO dz VALUES (3, 5, '3')")
        assert c.execute("SELECT k, r FROM dzm").fetchall() == [(3, 2)]
        assert c.execute("SELECT k FROM dz").fetchall() == [(3,)]


def _dz(db: Database) -> PgServer:
    server = PgServer(db, port=0).start()
    with psycopg.connect(f"host=127.0.0.1 port={server.port} user=root dbname=dev", autocommit=True) as c:
        c.execute("ALTER SYSTEM SET streaming_strict_mode = true")
        c.execute("CREATE TABLE dz (k INT, x INT)")
        c.execute("CREATE MATERIALIZED VIEW dzm AS SELECT k, 10 / x AS r FROM dz")
    return server


def _bug_and_data_error(server: PgServer, flag: Path, caplog: pytest.LogCaptureFixture) -> None:
    with psycopg.connect(f"host=127.0.0.1 port={server.port} user=root dbname=dev", autocommit=True) as c:
        with caplog.at_level(logging.ERROR, logger="piestream.meta.barrier_manager"):
            with pytest.raises(psycopg.Error) as info:
                c.execute("INSERT INTO dz VALUES (1, 0)")
            assert_clean(info.value, "22012", "division by zero")
            # the server log has the whole story
            assert any("Traceback" in r.getMessage() or r.exc_info for r in caplog.records)
        c.execute("INSERT INTO dz VALUES (2, 5)")
        jobs = dict(c.execute("SELECT name, job_id FROM rw_catalog.rw_streaming_jobs").fetchall())
        flag.write_text(str(jobs["dzm"]))
        try:
            # the bug is in dzm's actors only: dzm is isolated, the insert commits
            c.execute("INSERT INTO dz VALUES (3, 1)")
            status = c.execute(
                "SELECT status, error_sqlstate, error_message, failed_since IS NOT NULL "
                "FROM rw_catalog.rw_streaming_jobs WHERE name = 'dzm'"
            ).fetchall()
            assert status[0][:2] == ("failed", "XX000") and status[0][3], status
            msg = status[0][2]
            assert msg.startswith("streaming epoch failed") and "ValueError: hook bug" in msg, msg
            assert "\n" not in msg and not any(w in msg for w in TRACE_WORDS), msg
            assert c.execute(
                "SELECT status FROM rw_catalog.rw_materialized_views WHERE name = 'dzm'"
            ).fetchall() == [("failed",)]
            assert c.execute(
                "SELECT error_type, sqlstate FROM rw_catalog.rw_streaming_errors "
                "WHERE job_name = 'dzm' AND error_type = 'job failed'"
            ).fetchall() == [("job failed", "XX000")]
            c.execute("INSERT INTO dz VALUES (4, 2)")  # the rest keeps committing
            assert c.execute("SELECT k FROM dz ORDER BY k").fetchall() == [(2,), (3,), (4,)]
            # a CREATE whose backfill meets the bug fails with it, in one line, and creates nothing
            flag.write_text(str(jobs["dzm"] + 1))  # the next job id
            with pytest.raises(psycopg.Error) as info:
                c.execute("CREATE MATERIALIZED VIEW dz3 AS SELECT k FROM dz")
            assert_clean(info.value, "XX000")
            assert "ValueError: hook bug" in (info.value.diag.message_primary or "")
            assert c.execute("SELECT count(*) FROM pg_matviews WHERE matviewname = 'dz3'").fetchone() == (0,)
        finally:
            flag.unlink()
        # rebuilt from dz's current snapshot, dzm follows the stream again
        c.execute("ALTER MATERIALIZED VIEW dzm REBUILD")
        assert c.execute("SELECT k, r FROM dzm ORDER BY k").fetchall() == [(2, 2), (3, 10), (4, 5)]
        c.execute("INSERT INTO dz VALUES (5, 5)")
        assert c.execute("SELECT k, r FROM dzm ORDER BY k").fetchall() == [(2, 2), (3, 10), (4, 5), (5, 2)]
        assert c.execute("SELECT status FROM rw_catalog.rw_streaming_jobs WHERE name = 'dzm'").fetchall() == [
            ("running",)
        ]
        # non-strict again: a data error is a NULL and a record (here on this runner, too)
        c.execute("SET streaming_strict_mode = false")
        c.execute("INSERT INTO dz VALUES (6, 0)")
        assert c.execute("SELECT r FROM dzm WHERE k = 6").fetchall() == [(None,)]
        assert c.execute(
            "SELECT sqlstate, error_count FROM rw_catalog.rw_streaming_errors WHERE job_name = 'dzm'"
        ).fetchall() == [("22012", 1)]


def test_a_bug_in_an_actor_is_xx000_with_one_line_local(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flag = tmp_path / "fail"
    runner = LocalRunner(hook=FailWhileFlagged(str(flag)))
    db = Database(
        tmp_path / "db", config=DatabaseConfig(runner="local", barrier_interval=0.05), runner=runner
    )
    server = _dz(db)
    try:
        _bug_and_data_error(server, flag, caplog)
    finally:
        server.stop()


@pytest.mark.spark
def test_errors_from_spark_workers_keep_their_sqlstate(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's exception reaches the driver as text; the client still gets 22012 / XX000."""
    flag = tmp_path / "fail"
    runner = SparkRunner(spark, hook=FailWhileFlagged(str(flag)))
    # every failed task attempt costs Spark a new Python worker: epochs run only for the DML
    # (no idle barriers failing while the flag is up), and each is tried once, not three times
    monkeypatch.setattr(barrier_manager, "MAX_EPOCH_ATTEMPTS", 1)
    db = Database(
        tmp_path / "db",
        spark=spark,
        config=DatabaseConfig(runner="spark", barrier_interval=60.0),
        runner=runner,
    )
    server = _dz(db)
    try:
        _bug_and_data_error(server, flag, caplog)
    finally:
        server.stop()


def test_python_api_raises_the_cause_without_internal_frames(tmp_path: Path) -> None:
    with piestream.connect(tmp_path, runner="local", barrier_interval=0.05) as conn:
        conn.sql("ALTER SYSTEM SET streaming_strict_mode = true")
        conn.sql("CREATE TABLE dz (k INT, x INT)")
        conn.sql("CREATE MATERIALIZED VIEW dzm AS SELECT k, 10 / x AS r FROM dz")
        with pytest.raises(DivisionByZero) as info:
            conn.sql("INSERT INTO dz VALUES (1, 0)")
        e = info.value
        assert e.sqlstate == "22012" and e.message == "division by zero"
        assert e.__cause__ is None and e.__suppress_context__
        text = "".join(traceback.format_exception(e))
        assert "pyarrow" not in text and "direct cause" not in text and "executors" not in text
        with pytest.raises(Exception) as info2:
            conn.sql("SELECT 1 / 0")
        assert getattr(info2.value, "sqlstate", None) == "22012"


def test_cli_prints_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = (
        "ALTER SYSTEM SET streaming_strict_mode = true; "
        "CREATE TABLE dz (k INT, x INT); "
        "CREATE MATERIALIZED VIEW dzm AS SELECT k, 10 / x AS r FROM dz; "
        "INSERT INTO dz VALUES (1, 0)"
    )
    args = ["sql", "--embedded", "--runner", "local", "--data-dir", str(tmp_path), script]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.strip() == "ERROR:  division by zero", err
