"""Data errors never fail an epoch: the expression is NULL for that row, the error is counted in
``rw_catalog.rw_streaming_errors`` (job, fragment, message, SQLSTATE, count, sample row, time)
and the rest of the database keeps moving. Strict mode (ALTER SYSTEM SET streaming_strict_mode)
fails instead; batch SELECT keeps PostgreSQL's errors. The issue's repros are tests here."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import psycopg
import pytest

import piestream
from piestream.common.errors import DivisionByZero, FeatureNotSupported, PiestreamError
from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer


def _load_nexmark_helpers():  # type: ignore[no-untyped-def]
    """tests/connectors/nexmark_sql.py (a sibling directory's helper module)."""
    import importlib.util

    path = Path(__file__).parent.parent / "connectors" / "nexmark_sql.py"
    spec = importlib.util.spec_from_file_location("nexmark_sql_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ERROR_COLUMNS = "job_name, job_kind, error_type, sqlstate, error_message, error_count, sample_row"


def _errors(conn: piestream.Connection, job: str) -> list[tuple]:
    return conn.sql(
        f"SELECT {ERROR_COLUMNS} FROM rw_catalog.rw_streaming_errors WHERE job_name = '{job}' "
        "ORDER BY error_message"
    ).rows


def test_insert_of_a_poison_row_yields_null_and_an_error_record(tmp_path: Path) -> None:
    """`INSERT INTO dz VALUES (1, 0)` under ``10 / x``: the row's r is NULL, the insert commits."""
    with piestream.connect(tmp_path, runner="local", barrier_interval=0.05) as conn:
        conn.sql("CREATE TABLE dz (k INT, x INT, s VARCHAR)")
        conn.sql("CREATE MATERIALIZED VIEW dzm AS SELECT k, 10 / x AS r FROM dz")
        conn.sql("CREATE MATERIALIZED VIEW dzc AS SELECT count(*) AS n, sum(x) AS sx FROM dz")
        before = dt.datetime.now(dt.UTC)
        conn.sql("INSERT INTO dz VALUES (1, 0, 'a'), (2, 5, 'b')")
        assert conn.sql("SELECT k, r FROM dzm ORDER BY k").rows == [(1, None), (2, 2)]
        assert conn.sql("SELECT n, sx FROM dzc").rows == [(2, 5)]
        rows = _errors(conn, "dzm")
        assert rows == [
            ("dzm", "materialized view", "expression", "22012", "division by zero", 1, rows[0][6])
        ]
        assert rows[0][6].startswith("(1, 0")  # the input row of the projection (pruned columns)
        fragment, first, last = conn.sql(
            "SELECT fragment_id, first_seen, last_seen FROM rw_catalog.rw_streaming_errors "
            "WHERE job_name = 'dzm'"
        ).rows[0]
        assert fragment > 0 and before <= first <= last <= dt.datetime.now(dt.UTC)
        # the count grows with every bad row; other errors are grouped by their message
        conn.sql("INSERT INTO dz VALUES (3, 0, 'c'), (4, 0, 'd'), (5, 2, 'e')")
        conn.sql(
            "CREATE MATERIALIZED VIEW dzo AS SELECT k, x * 2000000000 AS big, CAST(s AS INT) AS n FROM dz"
        )
        conn.sql("INSERT INTO dz VALUES (6, 2, '7')")
        assert _errors(conn, "dzm")[0][5] == 3
        assert conn.sql("SELECT k, big, n FROM dzo ORDER BY k").rows == [
            (1, 0, None),
            (2, None, None),
            (3, 0, None),
            (4, 0, None),
            (5, None, None),
            (6, None, 7),
        ]
        dzo = {(r[3], r[4], r[5]) for r in _errors(conn, "dzo")}
        assert ("22003", "integer out of range", 3) in dzo
        assert {n for s, _, n in dzo if s == "22P02"} and sum(n for s, _, n in dzo if s == "22P02") == 5
        assert conn.sql("SELECT n FROM dzc").rows == [(6,)]
        # batch SELECT keeps PostgreSQL's error
        with pytest.raises(DivisionByZero):
            conn.sql("SELECT k, 10 / x FROM dz")
        # a streaming job cannot read a system relation
        with pytest.raises(FeatureNotSupported):
            conn.sql("CREATE MATERIALIZED VIEW e AS SELECT * FROM rw_catalog.rw_streaming_errors")
        # filters, join conditions and aggregate FILTERs drop the rows whose predicate fails
        conn.sql("CREATE TABLE other (k INT, y INT)")
        conn.sql("INSERT INTO other VALUES (1, 1), (2, 1), (3, 1)")
        conn.sql("CREATE MATERIALIZED VIEW f AS SELECT k FROM dz WHERE 10 / x > 1")
        conn.sql(
            "CREATE MATERIALIZED VIEW j AS SELECT dz.k FROM dz JOIN other "
            "ON dz.k = other.k AND 10 / dz.x >= other.y"
        )
        conn.sql("CREATE MATERIALIZED VIEW a AS SELECT count(*) FILTER (WHERE 10 / x > 1) AS c FROM dz")
        assert conn.sql("SELECT k FROM f ORDER BY k").rows == [(2,), (5,), (6,)]
        assert conn.sql("SELECT k FROM j ORDER BY k").rows == [(2,)]
        assert conn.sql("SELECT c FROM a").rows == [(3,)]
        for job in ("f", "j", "a"):
            assert _errors(conn, job)[0][3:5] == ("22012", "division by zero"), job


def test_strict_mode_fails_the_statement_and_survives_a_restart(tmp_path: Path) -> None:
    with piestream.connect(tmp_path, runner="local", barrier_interval=0.05) as conn:
        assert conn.sql("SHOW streaming_strict_mode").rows == [("false",)]
        conn.sql("CREATE TABLE dz (k INT, x INT)")
        conn.sql("CREATE MATERIALIZED VIEW dzm AS SELECT k, 10 / x AS r FROM dz")
        conn.sql("ALTER SYSTEM SET streaming_strict_mode = true")
        with pytest.raises(DivisionByZero):
            conn.sql("INSERT INTO dz VALUES (1, 0)")
        assert conn.sql("SELECT count(*) FROM dz").rows == [(0,)]
    with piestream.connect(tmp_path, runner="local", barrier_interval=0.05) as conn:
        assert conn.sql("SHOW streaming_strict_mode").rows == [("true",)]
        with pytest.raises(DivisionByZero):
            conn.sql("INSERT INTO dz VALUES (1, 0)")
        conn.sql("SET streaming_strict_mode = false")  # a system setting: SET is ALTER SYSTEM here
        conn.sql("INSERT INTO dz VALUES (1, 0)")
        assert conn.sql("SELECT k, r FROM dzm").rows == [(1, None)]
        with pytest.raises(PiestreamError) as info:
            conn.sql("ALTER SYSTEM SET streaming_strict_mode = maybe")
        assert info.value.sqlstate == "22023"
        with pytest.raises(FeatureNotSupported):
            conn.sql("ALTER TABLE dz ALTER COLUMN x TYPE BIGINT")


Q102_TABLES = (
    "CREATE TABLE auction (id BIGINT, item_name VARCHAR); CREATE TABLE bid (auction BIGINT, price BIGINT)"
)
Q102 = """SELECT a.id AS auction_id, a.item_name AS auction_item_name, COUNT(b.auction) AS bid_count
FROM auction a
JOIN bid b ON a.id = b.auction
GROUP BY a.id, a.item_name
HAVING COUNT(b.auction) >= (SELECT COUNT(*) / COUNT(DISTINCT auction) FROM bid)"""


def test_create_mv_whose_backfill_meets_a_data_error_succeeds(tmp_path: Path) -> None:
    """Nexmark q102 on an empty table divides 0 by 0 in its backfill: CREATE succeeds (the
    threshold is NULL until bids arrive), and the MV then follows its query."""
    with piestream.connect(tmp_path, runner="local", barrier_interval=0.05) as conn:
        conn.execute(Q102_TABLES)
        with pytest.raises(DivisionByZero):  # batch: PostgreSQL's error
            conn.sql(Q102)
        conn.sql(f"CREATE MATERIALIZED VIEW q102 AS {Q102}")
        assert conn.sql("SELECT * FROM q102").rows == []
        assert _errors(conn, "q102")[0][3:5] == ("22012", "division by zero")
        conn.sql("INSERT INTO auction VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        conn.sql("INSERT INTO bid VALUES (1, 10), (1, 11), (1, 12), (2, 5), (3, 1), (3, 2)")
        want = sorted(conn.sql(Q102).rows)
        assert want == [(1, "a", 3), (3, "c", 2)]
        assert sorted(conn.sql("SELECT * FROM q102").rows) == want


def test_a_poison_row_from_a_source_does_not_stop_other_mvs(tmp_path: Path) -> None:
    """The issue's repro: a nexmark table and ``100 / (auction - K)`` for an auction K that
    arrives later; every other MV keeps moving and the source reads to its end."""
    nx = _load_nexmark_helpers()
    bid_table, wait_until = nx.bid_table, nx.wait_until
    n_events = 3000
    bids = nx.expected_bids(n_events)
    k = bids[-1][0]  # the largest auction: among the last to arrive
    n_bad = sum(1 for b in bids if b[0] == k)
    db = Database(tmp_path, config=DatabaseConfig(runner="local", barrier_interval=0.1))
    server = PgServer(db, port=0).start()
    try:
        with psycopg.connect(f"host=127.0.0.1 port={server.port} user=root dbname=dev", autocommit=True) as c:
            c.execute(bid_table(n_events, gap_ns=1_000_000))
            c.execute(f"CREATE MATERIALIZED VIEW bad2 AS SELECT auction, 100 / (auction - {k}) AS r FROM bid")
            c.execute("CREATE MATERIALIZED VIEW cnt AS SELECT count(*) AS n, max(auction) AS m FROM bid")

            def count() -> int:
                return int(c.execute("SELECT n FROM cnt").fetchone()[0])  # type: ignore[index]

            wait_until(lambda: count() == len(bids), 60, "every bid counted")
            assert c.execute("SELECT m FROM cnt").fetchone() == (k,)
            assert c.execute("SELECT count(*) FROM bad2 WHERE r IS NULL").fetchone() == (n_bad,)
            assert c.execute("SELECT count(*) FROM bad2").fetchone() == (len(bids),)
            rows = c.execute(
                "SELECT job_name, sqlstate, error_message, error_count, sample_row "
                "FROM rw_catalog.rw_streaming_errors"
            ).fetchall()
            assert [r[:4] for r in rows] == [("bad2", "22012", "division by zero", n_bad)]
            assert rows[0][4].startswith(f"({k}, ")
    finally:
        server.stop()


def test_a_failed_job_stays_failed_across_a_restart_and_can_be_dropped(tmp_path: Path) -> None:
    """The failure is durable (a versioned status record in the catalog): after a restart the
    job does not run, the others do; DROP removes it and its record."""
    from test_clean_errors import FailWhileFlagged

    from piestream.runtime.runners import LocalRunner

    flag = tmp_path / "fail"

    def hooked() -> Database:
        """The database, with a task hook failing the actors of the job named in `flag`."""
        runner = LocalRunner(hook=FailWhileFlagged(str(flag)))
        return Database(
            tmp_path / "db", config=DatabaseConfig(runner="local", barrier_interval=0.05), runner=runner
        )

    db = hooked()
    try:
        s = db.session()
        s.execute("CREATE TABLE t (k INT, x INT); CREATE MATERIALIZED VIEW m AS SELECT k, x + 1 AS y FROM t")
        s.execute("CREATE MATERIALIZED VIEW mm AS SELECT count(*) AS n FROM m")  # downstream of m
        s.execute("CREATE MATERIALIZED VIEW other AS SELECT sum(x) AS s FROM t")
        s.execute("INSERT INTO t VALUES (1, 1)")
        jobs = dict(s.execute_one("SELECT name, job_id FROM rw_catalog.rw_streaming_jobs").rows)
        flag.write_text(str(jobs["m"]))
        s.execute("INSERT INTO t VALUES (2, 2)")
        flag.unlink()
        status = dict(s.execute_one("SELECT name, status FROM rw_catalog.rw_streaming_jobs").rows)
        assert status == {"t": "running", "m": "failed", "mm": "failed", "other": "running"}
    finally:
        db.close()
    with piestream.connect(tmp_path / "db", runner="local", barrier_interval=0.05) as conn:
        status = dict(conn.sql("SELECT name, status FROM rw_catalog.rw_streaming_jobs").rows)
        assert status == {"t": "running", "m": "failed", "mm": "failed", "other": "running"}
        conn.sql("INSERT INTO t VALUES (3, 3)")
        assert conn.sql("SELECT s FROM other").rows == [(6,)]
        assert conn.sql("SELECT k, y FROM m ORDER BY k").rows == [(1, 2)]  # as it was when it failed
        with pytest.raises(PiestreamError) as info:
            conn.sql("ALTER MATERIALIZED VIEW other REBUILD")
        assert info.value.sqlstate == "55000"
        conn.sql("ALTER MATERIALIZED VIEW m REBUILD")  # and mm, which failed with it
        assert conn.sql("SELECT k, y FROM m ORDER BY k").rows == [(1, 2), (2, 3), (3, 4)]
        assert conn.sql("SELECT n FROM mm").rows == [(3,)]
        conn.sql("INSERT INTO t VALUES (5, 5)")
        assert conn.sql("SELECT n FROM mm").rows == [(4,)]
    # a failed job is dropped from the catalog (it is not running): its upstream loses the edge
    db = hooked()
    try:
        s = db.session()
        flag.write_text(
            str(dict(s.execute_one("SELECT name, job_id FROM rw_catalog.rw_streaming_jobs").rows)["mm"])
        )
        s.execute("INSERT INTO t VALUES (6, 6)")
        flag.unlink()
        assert (
            dict(s.execute_one("SELECT name, status FROM rw_catalog.rw_streaming_jobs").rows)["mm"]
            == "failed"
        )
        s.execute("DROP MATERIALIZED VIEW mm")
        s.execute("INSERT INTO t VALUES (7, 7)")
        assert s.execute_one("SELECT count(*) FROM m").rows == [(6,)]
    finally:
        db.close()
    with piestream.connect(tmp_path / "db", runner="local", barrier_interval=0.05) as conn:
        conn.sql("DROP MATERIALIZED VIEW m CASCADE")
        names = {r[0] for r in conn.sql("SELECT name FROM rw_catalog.rw_streaming_jobs").rows}
        assert names == {"t", "other"}
        conn.sql("INSERT INTO t VALUES (4, 4)")
        assert conn.sql("SELECT s FROM other").rows == [(28,)]


def test_a_data_error_in_a_set_returning_function_argument_is_null_for_its_row(tmp_path: Path) -> None:
    """ProjectSet evaluates its arguments and scalar items the same way: `generate_series(1, 10 /
    x)` over x = 0 is a series to NULL (no rows), the other row expands, the error is recorded."""
    with piestream.connect(tmp_path, runner="local", barrier_interval=0.05) as conn:
        conn.sql("CREATE TABLE sz (k INT, x INT)")
        conn.sql(
            "CREATE MATERIALIZED VIEW szm AS SELECT k, 100 / x AS q, generate_series(1, 10 / x) AS i FROM sz"
        )
        conn.sql("INSERT INTO sz VALUES (1, 0), (2, 5)")
        assert conn.sql("SELECT k, q, i FROM szm ORDER BY k, i").rows == [(2, 20, 1), (2, 20, 2)]
        rows = _errors(conn, "szm")
        assert [(r[2], r[3], r[4]) for r in rows] == [("expression", "22012", "division by zero")]
        executors = conn.sql(
            "SELECT DISTINCT executor FROM rw_catalog.rw_streaming_errors WHERE job_name = 'szm'"
        ).rows
        assert executors == [("ProjectSet",)]
        assert rows[0][6].startswith("(1, 0")  # the bad input row


def test_numeric_nan_and_infinity_reaching_a_parquet_sink_are_null_and_an_error_record(
    tmp_path: Path,
) -> None:
    """A Parquet sink writes NUMERIC as a fixed-scale decimal, which has no NaN or Infinity: such
    a value is written as NULL and counted in rw_streaming_errors; the epoch commits and the
    finite rows arrive exactly."""
    from decimal import Decimal

    from piestream.connectors.sinks import read_sink

    out = tmp_path / "out"
    with piestream.connect(tmp_path / "db", runner="local", barrier_interval=0.05) as conn:
        conn.sql("CREATE TABLE nums (k INT, n NUMERIC)")
        conn.sql(
            f"CREATE SINK ns FROM nums WITH (connector = 'parquet', path = '{out}', type = 'append-only', "
            "force_append_only = 'true')"
        )
        conn.sql("INSERT INTO nums VALUES (1, 1.50), (2, 'NaN'), (3, '-Infinity'), (4, NULL)")
        conn.sql("FLUSH")
        rows = _errors(conn, "ns")
        message = "cannot write NaN or Infinity to a decimal column: written as NULL"
        assert rows == [("ns", "sink", "expression", "22003", message, 2, rows[0][6])]
        assert rows[0][6] in ("(2, NaN)", "(3, -Infinity)")  # one sample row
        assert conn.sql("SELECT n::text FROM nums WHERE k IN (2, 3) ORDER BY k").rows == [
            ("NaN",),
            ("-Infinity",),
        ]
    written = sorted((r["k"], r["n"]) for r in read_sink(str(out)).to_pylist())
    assert written == [(1, Decimal("1.5")), (2, None), (3, None), (4, None)]


def test_a_numeric_result_beyond_what_can_be_stored_is_null_and_an_error_record(tmp_path: Path) -> None:
    """x * x of a stored 1e15 is 1e30, more than a stored NUMERIC holds (a 96-bit mantissa): the
    expression is 22003 for that row (NULL in the view, an error record), never an epoch that
    fails on writing it; the insert into the table commits."""
    from decimal import Decimal

    with piestream.connect(tmp_path, runner="local", barrier_interval=0.05) as conn:
        conn.sql("CREATE TABLE big (k INT, x NUMERIC)")
        conn.sql("CREATE MATERIALIZED VIEW sq AS SELECT k, x * x AS y FROM big")
        conn.sql("INSERT INTO big VALUES (1, 1e15), (2, 3.0)")
        conn.sql("FLUSH")
        assert conn.sql("SELECT k, y FROM sq ORDER BY k").rows == [(1, None), (2, Decimal("9.00"))]
        assert conn.sql("SELECT count(*) FROM big").rows == [(2,)]
        rows = _errors(conn, "sq")
        assert rows == [
            (
                "sq",
                "materialized view",
                "expression",
                "22003",
                "value overflows numeric format",
                1,
                rows[0][6],
            )
        ]
