"""mysql-cdc through SQL against a real MariaDB: a shared source and tables from it, the
single-table form, MVs equal to the same query run on MariaDB after every round of random DML in
transactions (the differential test), the types, errors at CREATE that leave nothing behind,
kill -9 of piestream mid-snapshot and mid-stream, and an upstream outage."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

import pytest
from cdc_crash_child import run_until_killed
from mysql_server import MariaDbServer
from nexmark_sql import wait_until

from piestream.common.errors import PiestreamError
from piestream.server.database import Database, DatabaseConfig

CFG = DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)


def _norm(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Rows comparable across the two (MariaDB's COUNT / SUM are ints / Decimals too)."""
    return sorted((tuple(r) for r in rows), key=repr)


def _same(db: Database, my: MariaDbServer, query: str, upstream: str | None = None) -> bool:
    return _norm(db.execute(query)[0].rows) == _norm(my.sql(upstream or query))


def _random_dml(my: MariaDbServer, rng: random.Random, table: str, n: int) -> None:
    stmts = []
    for _ in range(n):
        k = rng.randrange(300)
        r = rng.random()
        if r < 0.5:
            stmts.append(
                f"INSERT INTO {table} VALUES ({k}, {rng.randrange(5)}, "
                f"{rng.randrange(10**6)}.{rng.randrange(100):02d}, 'n{rng.randrange(50)}') "
                "ON DUPLICATE KEY UPDATE amount = VALUES(amount)"
            )
        elif r < 0.8:
            stmts.append(f"UPDATE {table} SET cust = {rng.randrange(5)}, note = NULL WHERE id = {k}")
        elif r < 0.9:
            stmts.append(f"UPDATE IGNORE {table} SET id = {rng.randrange(10**6, 10**9)} WHERE id = {k}")
        else:
            stmts.append(f"DELETE FROM {table} WHERE id BETWEEN {k} AND {k + 5}")
    for i in range(0, len(stmts), 7):  # transactions of several statements, like an application's
        my.sql("START TRANSACTION; " + "; ".join(stmts[i : i + 7]) + "; COMMIT")


def test_tables_follow_upstream_and_mvs_equal_mariadb(mariadb: MariaDbServer, tmp_path: Path) -> None:
    my = mariadb
    my.sql("CREATE TABLE orders (id int PRIMARY KEY, cust int, amount decimal(12,2), note text)")
    my.sql("CREATE TABLE customers (cid int PRIMARY KEY, name varchar(20))")
    my.sql(
        "INSERT INTO orders SELECT seq, seq % 5, seq * 1.25, concat('o', seq) FROM seq_1_to_200"
    )  # MariaDB's sequence engine
    my.sql("INSERT INTO customers SELECT seq, concat('c', seq) FROM seq_0_to_4")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(f"CREATE SOURCE my WITH ({my.with_options(server_id='5400')})")
        db.execute(
            "CREATE TABLE orders (id int, cust int, amount numeric, note varchar, PRIMARY KEY (id)) "
            "FROM my TABLE 'shop.orders'"
        )
        db.execute(
            "CREATE TABLE customers (cid int PRIMARY KEY, name varchar) WITH ("
            + my.with_options(table_name="customers", server_id="7001")
            + ")"
        )
        per_cust = "SELECT cust, count(*), sum(amount) FROM orders GROUP BY cust"
        joined = (
            "SELECT c.name, count(*), max(o.amount) FROM orders o "
            "JOIN customers c ON o.cust = c.cid GROUP BY c.name"
        )
        db.execute(f"CREATE MATERIALIZED VIEW per_cust AS {per_cust}")
        db.execute(f"CREATE MATERIALIZED VIEW joined AS {joined}")
        wait_until(lambda: _same(db, my, "SELECT * FROM orders"), what="the snapshot")
        wait_until(lambda: _same(db, my, "SELECT * FROM customers"), what="the snapshot")
        rng = random.Random(7)
        for round_ in range(4):
            _random_dml(my, rng, "orders", 40)
            my.sql(f"UPDATE customers SET name = 'r{round_}' WHERE cid = {round_}")
            wait_until(lambda: _same(db, my, "SELECT * FROM orders"), what=f"round {round_}")
            wait_until(lambda: _same(db, my, "SELECT * FROM customers"), what=f"round {round_}")
            assert _norm(db.execute("SELECT * FROM per_cust")[0].rows) == _norm(my.sql(per_cust))
            assert _norm(db.execute("SELECT * FROM joined")[0].rows) == _norm(my.sql(joined))
        view = db.execute(
            "SELECT table_name, upstream_table, slot_name, phase, rows_copied, committed_lsn, lag_bytes "
            "FROM rw_catalog.rw_cdc_sources ORDER BY table_name"
        )[0].rows
        assert [r[:5] for r in view] == [
            ("customers", "shop.customers", "server.id=7001", "stream", 5),
            ("orders", "shop.orders", view[1][2], "stream", 200),
        ], view
        assert view[1][2].startswith("server.id=") and view[1][2] != "server.id=5400"  # its own id
        assert all(r[5].startswith("binlog.") and r[6] is not None and r[6] >= 0 for r in view), view
        with pytest.raises(PiestreamError):
            db.execute("INSERT INTO orders VALUES (1, 1, 1, 'x')")  # fed by its upstream only
        db.execute("DROP MATERIALIZED VIEW joined")
        db.execute("DROP MATERIALIZED VIEW per_cust")
        db.execute("DROP TABLE customers")
        db.execute("DROP TABLE orders")
        db.execute("DROP SOURCE my")
    finally:
        db.close()


def test_types_follow_exactly(mariadb: MariaDbServer, tmp_path: Path) -> None:
    my = mariadb
    my.sql(
        "CREATE TABLE typed (id bigint PRIMARY KEY, ti tinyint, si smallint, mi mediumint, "
        "iu int unsigned, bu bigint unsigned, d decimal(20,6), f float, db double, s varchar(20), "
        "tx text, b tinyint(1), dt date, tm time(3), dtt datetime(6), ts timestamp(3) NULL, "
        "bl blob, bn binary(4), j json, e enum('a','b'))"
    )
    row = (
        "(1, -7, -300, 70000, 4294967295, 18446744073709551615, -12345678901234.000123, 2.5, 1e-7, "
        "'x''y', 'héllo', 1, '2020-01-02', '23:59:59.999', '2020-01-02 03:04:05.123456', "
        "'2020-01-02 03:04:05.5', x'deadbeef', x'0102', '{\"k\": [1, null]}', 'b')"
    )
    nulls = "(2" + ", NULL" * 19 + ")"
    my.sql(f"INSERT INTO typed VALUES {row}, {nulls}")
    ours = (
        "id bigint PRIMARY KEY, ti smallint, si smallint, mi int, iu bigint, bu numeric, d numeric, "
        "f real, db double precision, s varchar, tx varchar, b boolean, dt date, tm time, "
        "dtt timestamp, ts timestamptz, bl bytea, bn bytea, j jsonb, e varchar"
    )
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute("SET TIME ZONE 'UTC'")
        db.execute(f"CREATE TABLE typed ({ours}) WITH ({my.with_options(table_name='typed')})")
        wait_until(lambda: db.execute("SELECT count(*) FROM typed")[0].rows == [(2,)], what="the copy")
        my.sql(f"INSERT INTO typed VALUES {row.replace('(1,', '(3,', 1)}")  # the same through the binlog
        my.sql("INSERT INTO typed (id) VALUES (4)")
        wait_until(lambda: db.execute("SELECT count(*) FROM typed")[0].rows == [(4,)], what="the stream")
        got = db.execute("SELECT * FROM typed ORDER BY id")[0].rows
        expected = (
            -7, -300, 70000, 4294967295, Decimal(18446744073709551615), Decimal("-12345678901234.000123"),
            2.5, 1e-7, "x'y", "héllo", True, dt.date(2020, 1, 2), dt.time(23, 59, 59, 999000),
            dt.datetime(2020, 1, 2, 3, 4, 5, 123456),
            dt.datetime(2020, 1, 2, 3, 4, 5, 500000, tzinfo=dt.UTC),
            b"\xde\xad\xbe\xef", b"\x01\x02\x00\x00",
        )  # fmt: skip
        for r in (got[0], got[2]):  # the copy and the stream agree, value for value
            assert tuple(r[1:18]) == expected, r
            assert r[18] == '{"k": [1, null]}' and r[19] == "b"
        assert all(v is None for v in got[1][1:]) and all(v is None for v in got[3][1:])
        assert str(db.execute("SELECT d FROM typed WHERE id = 3")[0].rows[0][0]) == "-12345678901234.000123"
    finally:
        db.close()


def test_create_errors_leave_nothing_behind(mariadb: MariaDbServer, tmp_path: Path) -> None:
    my = mariadb
    my.sql("CREATE TABLE odd (id int PRIMARY KEY, p point, v int, w decimal(40,2))")
    my.sql("CREATE TABLE plain (id int PRIMARY KEY, v int) ENGINE = MyISAM")
    db = Database(tmp_path / "db", config=CFG)
    try:
        with pytest.raises(PiestreamError, match="Access denied") as e:
            db.execute(f"CREATE SOURCE bad WITH ({my.with_options(password='wrong')})")
        assert e.value.sqlstate == "08001"
        with pytest.raises(PiestreamError, match="SSL is required but the server doesn't support it"):
            db.execute(f"CREATE SOURCE tls WITH ({my.with_options(ssl_mode='required')})")
        with pytest.raises(PiestreamError, match=r"ssl\.mode must be disabled, preferred or required"):
            db.execute(f"CREATE SOURCE tls WITH ({my.with_options(ssl_mode='verify-full')})")
        db.execute(f"CREATE SOURCE tls WITH ({my.with_options(ssl_mode='preferred')})")  # falls back
        db.execute("DROP SOURCE tls")
        unsupported = "which is not supported"
        cases = [
            ("m1", "id int PRIMARY KEY, p varchar", "odd",
             f'column "p" has upstream type point, {unsupported}', "0A000"),
            ("m2", "id int PRIMARY KEY, w numeric", "odd",
             rf'column "w" has upstream type decimal\(40,2\), {unsupported}', "0A000"),
            ("m3", "id int PRIMARY KEY, v bigint", "odd", "does not map to bigint", "0A000"),
            ("m4", "id int, v int PRIMARY KEY", "odd",
             r"PRIMARY KEY \(v\) must be the upstream table's \(id\)", None),
            ("m5", "id int PRIMARY KEY", "nope", r'upstream table "shop\.nope" does not exist', None),
            ("m6", "id int PRIMARY KEY, v int", "plain", "only InnoDB tables", "0A000"),
            ("m7", "id int PRIMARY KEY, nope int", "odd", 'column "nope" does not exist', None),
        ]  # fmt: skip
        for name, cols, table, message, state in cases:
            with pytest.raises(PiestreamError, match=message) as e:
                db.execute(f"CREATE TABLE {name} ({cols}) WITH ({my.with_options(table_name=table)})")
            assert state is None or e.value.sqlstate == state, (name, e.value.sqlstate)
        with pytest.raises(PiestreamError, match=r"server\.id 1 is the upstream server's own"):
            opts = my.with_options(table_name="odd", server_id="1")
            db.execute(f"CREATE TABLE m8 (id int PRIMARY KEY) WITH ({opts})")
        my.sql("SET GLOBAL binlog_row_metadata = 'MINIMAL'", root=True)
        try:
            with pytest.raises(PiestreamError, match=r"binlog_row_metadata = FULL \(it has MINIMAL\)"):
                db.execute(f"CREATE SOURCE meh WITH ({my.with_options()})")
        finally:
            my.sql("SET GLOBAL binlog_row_metadata = 'FULL'", root=True)
        for name in ("bad", "meh", *(c[0] for c in cases), "m8"):
            assert db.catalog.get(name) is None
    finally:
        db.close()


@pytest.mark.parametrize("kill_when", ["snapshot", "stream"])
def test_kill_9_resumes_exactly(mariadb: MariaDbServer, tmp_path: Path, kill_when: str) -> None:
    my = mariadb
    table = f"crash_{kill_when}"
    my.sql(f"CREATE TABLE {table} (id int PRIMARY KEY, cust int, amount decimal(12,2), note text)")
    my.sql(f"INSERT INTO {table} SELECT seq, seq % 5, seq, concat('o', seq) FROM seq_1_to_3000")
    data = tmp_path / "db"
    run_until_killed(data, my.with_options(table_name=table), kill_when)
    _random_dml(my, random.Random(3), table, 60)  # while piestream is down
    db = Database(data, config=CFG)
    try:
        wait_until(lambda: _same(db, my, f"SELECT * FROM {table}"), what="resumed")
        _random_dml(my, random.Random(4), table, 30)
        wait_until(lambda: _same(db, my, f"SELECT * FROM {table}"), what="streaming after the restart")
        agg = f"SELECT cust, count(*), sum(amount) FROM {table} GROUP BY cust"
        wait_until(lambda: _norm(db.execute("SELECT * FROM agg")[0].rows) == _norm(my.sql(agg)), what="agg")
    finally:
        db.close()


def test_upstream_down_is_retried_visibly_and_others_keep_committing(
    mariadb: MariaDbServer, tmp_path: Path
) -> None:
    my = mariadb
    my.sql("CREATE TABLE flaky (id int PRIMARY KEY, v int)")
    my.sql("INSERT INTO flaky VALUES (1, 1)")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            f"CREATE TABLE flaky (id int PRIMARY KEY, v int) WITH ({my.with_options(table_name='flaky')})"
        )
        db.execute(
            "CREATE TABLE ticks (n bigint) WITH (connector = 'datagen', fields.n.kind = 'sequence', "
            "datagen.rows.per.second = '200')"
        )
        wait_until(lambda: db.execute("SELECT count(*) FROM flaky")[0].rows == [(1,)], what="the snapshot")
        my.sql("INSERT INTO flaky VALUES (2, 2)")
        wait_until(lambda: _same(db, my, "SELECT * FROM flaky"), what="streaming")
        my.stop()
        try:
            ticks = db.execute("SELECT count(*) FROM ticks")[0].rows[0][0]
            wait_until(
                lambda: db.execute("SELECT count(*) FROM ticks")[0].rows[0][0] > ticks + 50, what="ticks"
            )
            errors = db.execute(
                "SELECT job_name, error_type, sqlstate, error_message FROM rw_catalog.rw_streaming_errors"
            )[0].rows
            assert any(
                r[0] == "flaky"
                and r[1] == "source"
                and r[2] == "08006"  # SourceUnavailable: the epoch reran with the source paused
                and "mysql-cdc shop.flaky" in r[3]
                and "source paused" in r[3]
                for r in errors
            ), errors
        finally:
            my.start()
        my.sql("UPDATE flaky SET v = 3; INSERT INTO flaky VALUES (4, 4); DELETE FROM flaky WHERE id = 1")
        wait_until(
            lambda: _same(db, my, "SELECT * FROM flaky"), timeout=90, what="caught up after the outage"
        )
        last_error = db.execute("SELECT last_error FROM rw_catalog.rw_cdc_sources")[0].rows[0][0]
        assert last_error and "mysql-cdc shop.flaky" in last_error
        totals = "SELECT count(*), sum(v) FROM flaky"
        db.execute(f"CREATE MATERIALIZED VIEW totals AS {totals}")
        assert db.execute("SELECT * FROM totals")[0].rows == [(2, 7)]
        my.sql("TRUNCATE TABLE flaky")  # every row goes, and the MV follows
        wait_until(lambda: db.execute("SELECT * FROM totals")[0].rows == [(0, None)], what="truncated")
        assert db.execute("SELECT * FROM flaky")[0].rows == []
        my.sql("INSERT INTO flaky VALUES (2, 20), (5, 5)")
        wait_until(lambda: _same(db, my, "SELECT * FROM flaky"), what="after the TRUNCATE")
        assert db.execute("SELECT * FROM totals")[0].rows == [(2, 25)]
        status = "SELECT status FROM rw_catalog.rw_streaming_jobs WHERE name = 'flaky'"
        assert db.execute(status)[0].rows[0][0] != "failed"
    finally:
        db.close()


def test_snapshot_progress_in_rw_ddl_progress(mariadb: MariaDbServer, tmp_path: Path) -> None:
    my = mariadb
    my.sql("CREATE TABLE progress (id int PRIMARY KEY, v int)")
    my.sql("INSERT INTO progress SELECT seq, seq FROM seq_1_to_2000")
    my.sql("ANALYZE TABLE progress")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            "CREATE TABLE progress (id int PRIMARY KEY, v int) "
            f"WITH ({my.with_options(table_name='progress')}, max.rows.per.epoch = '400')"
        )
        q = "SELECT name, progress, rows_done, rows_total FROM rw_catalog.rw_ddl_progress"
        seen: list[tuple[object, ...]] = []

        def copying() -> bool:
            rows = [r for r in db.execute(q)[0].rows if r[0] == "progress" and 0 < r[2] < 2000]  # type: ignore[operator]
            seen.extend(rows)
            return bool(rows)

        wait_until(copying, what="the copy under way")
        _, percent, done, total = seen[0]
        assert done % 400 == 0 and total >= done and total > 1000  # InnoDB's estimate of 2000
        assert str(percent).endswith("%")
        wait_until(lambda: db.execute("SELECT count(*) FROM progress")[0].rows == [(2000,)], what="copied")
        wait_until(lambda: not db.execute(q)[0].rows, what="gone from rw_ddl_progress when copied")
    finally:
        db.close()
