"""postgres-cdc through SQL against a real PostgreSQL 15: a shared source and tables from it, the
single-table form, MVs equal to the same query run on PostgreSQL after every round of random
DML (the differential test), the types, errors at CREATE that leave nothing behind, DROP, and
a kill -9 of piestream mid-snapshot and mid-stream."""

from __future__ import annotations

import itertools
import random
from decimal import Decimal
from pathlib import Path

import pytest
from cdc_crash_child import run_until_killed
from nexmark_sql import wait_until
from pg_server import PgServer

from piestream.common.errors import PiestreamError
from piestream.server.cdc_handlers import CdcStatusRow, cdc_status_rows
from piestream.server.database import Database, DatabaseConfig
from piestream.server.system_tables import CDC_SOURCES

CFG = DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)
_n = itertools.count()


def test_status_row_fields_are_the_views_columns() -> None:
    """rw_cdc_sources shows CdcStatusRow as it is: a field added to one and not the other (or
    out of order) would shift the view's columns."""
    assert CdcStatusRow._fields == tuple(f.name for f in CDC_SOURCES.fields)


def _slots(pg: PgServer) -> set[str]:
    return {str(r[0]) for r in pg.sql("SELECT slot_name FROM pg_replication_slots")}


def _same(db: Database, pg: PgServer, query: str) -> bool:
    ours = sorted(db.execute(query)[0].rows)
    theirs = sorted(tuple(r) for r in pg.sql(query))
    return ours == theirs


def _random_dml(pg: PgServer, rng: random.Random, table: str, n: int) -> None:
    stmts = []
    for _ in range(n):
        k = rng.randrange(300)
        r = rng.random()
        if r < 0.5:
            stmts.append(
                f"INSERT INTO {table} VALUES ({k}, {rng.randrange(5)}, "
                f"{rng.randrange(10**6)}.{rng.randrange(100):02d}, "
                f"'n{rng.randrange(50)}') ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount"
            )
        elif r < 0.8:
            stmts.append(f"UPDATE {table} SET cust = {rng.randrange(5)}, note = NULL WHERE id = {k}")
        elif r < 0.9:
            stmts.append(
                f"UPDATE {table} SET id = {rng.randrange(10**6, 10**9)} WHERE id = {k}"
            )  # a key change
        else:
            stmts.append(f"DELETE FROM {table} WHERE id BETWEEN {k} AND {k + 5}")
    # a few transactions of several statements each, like an application's
    for i in range(0, len(stmts), 7):
        pg.sql("BEGIN; " + "; ".join(stmts[i : i + 7]) + "; COMMIT")


def test_tables_follow_upstream_and_mvs_equal_postgres(pg: PgServer, tmp_path: Path) -> None:
    pg.sql("CREATE TABLE orders (id int PRIMARY KEY, cust int, amount numeric, note text)")
    pg.sql("CREATE TABLE customers (cid int PRIMARY KEY, name varchar)")
    pg.sql("INSERT INTO orders SELECT g, g % 5, g * 1.25, 'o' || g FROM generate_series(1, 200) g")
    pg.sql("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(0, 4) g")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            f"CREATE SOURCE pg WITH ({pg.with_options(slot_name='shop', publication_name='shop_pub')})"
        )
        db.execute(
            "CREATE TABLE orders (id int, cust int, amount numeric, note varchar, PRIMARY KEY (id)) "
            "FROM pg TABLE 'public.orders'"
        )
        db.execute(
            "CREATE TABLE customers (cid int PRIMARY KEY, name varchar) WITH ("
            + pg.with_options(
                table_name="customers", slot_name="shop_customers_1", publication_name="shop_pub"
            )
            + ")"
        )
        per_cust = "SELECT cust, count(*), sum(amount) FROM orders GROUP BY cust"
        joined = (
            "SELECT c.name, count(*), max(o.amount) FROM orders o "
            "JOIN customers c ON o.cust = c.cid GROUP BY c.name"
        )
        db.execute(f"CREATE MATERIALIZED VIEW per_cust AS {per_cust}")
        db.execute(f"CREATE MATERIALIZED VIEW joined AS {joined}")
        wait_until(lambda: _same(db, pg, "SELECT * FROM orders"), what="the snapshot")
        wait_until(lambda: _same(db, pg, "SELECT * FROM customers"), what="the snapshot")
        assert {"shop_orders", "shop_customers_1"} <= _slots(pg)  # made by their first epochs
        rng = random.Random(7)
        for round_ in range(4):
            _random_dml(pg, rng, "orders", 40)
            pg.sql(f"UPDATE customers SET name = 'r{round_}' WHERE cid = {round_}")
            wait_until(lambda: _same(db, pg, "SELECT * FROM orders"), what=f"round {round_}")
            # customers follows a slot of its own: its epoch may show the update after orders'
            wait_until(lambda: _same(db, pg, "SELECT * FROM customers"), what=f"round {round_}")
            assert sorted(db.execute("SELECT * FROM per_cust")[0].rows) == sorted(
                tuple(r) for r in pg.sql(per_cust)
            )
            assert sorted(db.execute("SELECT * FROM joined")[0].rows) == sorted(
                tuple(r) for r in pg.sql(joined)
            )
        with pytest.raises(PiestreamError):
            db.execute("INSERT INTO orders VALUES (1, 1, 1, 'x')")  # fed by its upstream only
        with pytest.raises(PiestreamError, match="a CDC source feeds tables") as e:
            db.execute("CREATE MATERIALIZED VIEW direct AS SELECT * FROM pg")
        assert e.value.sqlstate == "0A000"
        db.execute("DROP MATERIALIZED VIEW joined")
        db.execute("DROP TABLE customers")
        assert "shop_customers_1" not in _slots(pg)  # DROP drops the slot piestream made
        db.execute("DROP MATERIALIZED VIEW per_cust")
        db.execute("DROP TABLE orders")
        db.execute("DROP SOURCE pg")
        assert not {"shop_orders", "shop_customers_1"} & _slots(pg)
    finally:
        db.close()


def test_types_follow_exactly(pg: PgServer, tmp_path: Path) -> None:
    cols = (
        "id bigint PRIMARY KEY, i2 smallint, n numeric, r real, d double precision, t text, b bool, "
        "dt date, tm time, ts timestamp, tz timestamptz, iv interval, by bytea, j jsonb, u uuid, arr int[]"
    )
    pg.sql(f"CREATE TABLE typed ({cols})")
    row = (
        "(1, 7, 123456789012345678.000123, 2.5, 1e-7, 'x''y', false, '2020-01-02', '23:59:59.999999', "
        "'2020-01-02 03:04:05', '2020-01-02 03:04:05+00', '3 days 10:00:00', '\\xdeadbeef', "
        "'{\"k\": null}', '00000000-0000-0000-0000-000000000001', '{1,2}')"
    )
    pg.sql(f"INSERT INTO typed VALUES {row}, (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
           "NULL, NULL, NULL, NULL, NULL)")  # fmt: skip
    ours = (
        "id bigint PRIMARY KEY, i2 smallint, n numeric, r real, d double precision, t varchar, b boolean, "
        "dt date, tm time, ts timestamp, tz timestamptz, iv interval, by bytea, j jsonb, u varchar, arr int[]"
    )
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(f"CREATE TABLE typed ({ours}) WITH ({pg.with_options(table_name='public.typed')})")
        pg.sql("INSERT INTO typed (id, n) VALUES (3, 0.1)")  # by the stream, as text through pgoutput
        wait_until(lambda: db.execute("SELECT count(*) FROM typed")[0].rows == [(3,)], what="3 rows")
        text = (
            "SELECT id, i2, n, r, d, t, b, dt, tm, ts, tz, iv, by, j::varchar, u, arr FROM typed ORDER BY id"
        )
        got = db.execute(text)[0].rows
        assert got[0][2] == Decimal("123456789012345678.000123") and got[2][2] == Decimal("0.1")
        assert got[0][5] == "x'y" and got[0][12] == b"\xde\xad\xbe\xef" and got[0][15] == [1, 2]
        assert all(v is None for v in got[1][1:])
        names = ["id", "i2", "n", "r", "d", "t", "b", "dt", "tm", "ts", "tz", "iv", "by", "j", "u", "arr"]
        as_text = "SELECT " + ", ".join(f"{c}::varchar" for c in names) + " FROM typed ORDER BY id"
        pg.sql("ALTER DATABASE shop SET TimeZone = 'UTC'")
        ours_text = db.execute(as_text)[0].rows
        assert [tuple(r) for r in ours_text] == [tuple(r) for r in pg.sql(as_text)]  # PostgreSQL's own text
    finally:
        db.close()


def test_create_errors_leave_nothing_behind(pg: PgServer, tmp_path: Path) -> None:
    pg.sql("CREATE TYPE feeling AS ENUM ('sad', 'ok')")
    pg.sql("CREATE TABLE moody (id int PRIMARY KEY, m feeling, v int)")
    before = _slots(pg)
    db = Database(tmp_path / "db", config=CFG)
    try:
        with pytest.raises(PiestreamError, match="password authentication failed") as e:
            db.execute(f"CREATE SOURCE bad WITH ({pg.with_options(password='wrong')})")
        assert e.value.sqlstate == "08001"
        with pytest.raises(PiestreamError, match='publication "nopub" does not exist'):
            db.execute(
                "CREATE TABLE m1 (id int PRIMARY KEY, v int) WITH ("
                + pg.with_options(
                    table_name="moody", publication_name="nopub", publication_create_enable="false"
                )
                + ")"
            )
        with pytest.raises(
            PiestreamError, match='column "m" has upstream type feeling, which is not supported'
        ) as e:
            db.execute(
                "CREATE TABLE m2 (id int PRIMARY KEY, m varchar) "
                f"WITH ({pg.with_options(table_name='moody')})"
            )
        assert e.value.sqlstate == "0A000"
        with pytest.raises(PiestreamError, match=r"PRIMARY KEY \(v\) must be the upstream table's \(id\)"):
            db.execute(
                f"CREATE TABLE m3 (id int, v int PRIMARY KEY) WITH ({pg.with_options(table_name='moody')})"
            )
        with pytest.raises(PiestreamError, match=r'upstream table "public\.nope" does not exist'):
            db.execute(f"CREATE TABLE m4 (id int PRIMARY KEY) WITH ({pg.with_options(table_name='nope')})")
        with pytest.raises(PiestreamError, match="does not map to bigint"):
            db.execute(
                f"CREATE TABLE m5 (id int PRIMARY KEY, v bigint) WITH ({pg.with_options(table_name='moody')})"
            )
        for name in ("bad", "m1", "m2", "m3", "m4", "m5"):
            assert db.catalog.get(name) is None
        assert _slots(pg) == before
        assert not pg.sql("SELECT 1 FROM pg_publication WHERE pubname = 'nopub'")
    finally:
        db.close()


@pytest.mark.parametrize("kill_when", ["snapshot", "stream"])
def test_kill_9_resumes_exactly(pg: PgServer, tmp_path: Path, kill_when: str) -> None:
    table = f"crash_{kill_when}"
    pg.sql(f"CREATE TABLE {table} (id int PRIMARY KEY, cust int, amount numeric, note text)")
    pg.sql(f"INSERT INTO {table} SELECT g, g % 5, g, 'o' || g FROM generate_series(1, 3000) g")
    data = tmp_path / "db"
    run_until_killed(data, pg.with_options(table_name=table), kill_when)
    _random_dml(pg, random.Random(3), table, 60)  # while piestream is down
    db = Database(data, config=CFG)
    try:
        wait_until(lambda: _same(db, pg, f"SELECT * FROM {table}"), what="resumed")
        _random_dml(pg, random.Random(4), table, 30)
        wait_until(lambda: _same(db, pg, f"SELECT * FROM {table}"), what="streaming after the restart")
        agg = f"SELECT cust, count(*), sum(amount) FROM {table} GROUP BY cust"
        assert sorted(db.execute("SELECT * FROM agg")[0].rows) == sorted(tuple(r) for r in pg.sql(agg))
    finally:
        db.close()


def test_upstream_down_is_retried_visibly_and_a_dropped_slot_fails_the_job(
    pg: PgServer, tmp_path: Path
) -> None:
    pg.sql("CREATE TABLE flaky (id int PRIMARY KEY, v int)")
    pg.sql("INSERT INTO flaky VALUES (1, 1)")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            f"CREATE TABLE flaky (id int PRIMARY KEY, v int) WITH ({pg.with_options(table_name='flaky')})"
        )
        db.execute(
            "CREATE TABLE ticks (n bigint) WITH (connector = 'datagen', fields.n.kind = 'sequence', "
            "datagen.rows.per.second = '200')"
        )
        wait_until(lambda: db.execute("SELECT count(*) FROM flaky")[0].rows == [(1,)], what="the snapshot")
        slot = next(iter(_slots(pg) & {"piestream_public_flaky"}))
        wait_until(lambda: _confirmed(pg, slot) is not None, what="an acknowledged position")
        pg.stop()
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
                and "postgres-cdc public.flaky" in r[3]
                and "source paused" in r[3]
                for r in errors
            ), errors
        finally:
            pg.start()
        pg.sql("INSERT INTO flaky VALUES (2, 2)")
        wait_until(
            lambda: _same(db, pg, "SELECT * FROM flaky"), timeout=90, what="caught up after the outage"
        )
        before = _confirmed(pg, slot)
        pg.sql("UPDATE flaky SET v = 3")
        wait_until(lambda: _same(db, pg, "SELECT * FROM flaky"), what="streaming")
        wait_until(lambda: (_confirmed(pg, slot) or 0) > (before or 0), what="the ack after the commit")
        view = db.execute(
            "SELECT table_name, upstream_table, slot_name, phase, rows_copied, committed_lsn, "
            "confirmed_lsn, lag_bytes, last_error FROM rw_catalog.rw_cdc_sources"
        )[0].rows
        assert len(view) == 1, view
        name, upstream, vslot, phase, copied, committed, confirmed, lag, last_error = view[0]
        assert (name, upstream, vslot, phase, copied) == ("flaky", "public.flaky", slot, "stream", 1)
        assert committed and confirmed and lag is not None and lag >= 0
        assert last_error and "postgres-cdc public.flaky" in last_error
        (row,) = cdc_status_rows(db)  # what the dashboard and /metrics read, by name
        assert (row.table_name, row.slot_name, row.committed_lsn) == ("flaky", slot, committed)
        pg.sql("SELECT pg_drop_replication_slot(%s)", (slot,))  # behind piestream's back
        pg.sql("INSERT INTO flaky VALUES (4, 4)")
        status = "SELECT status, error_message FROM rw_catalog.rw_streaming_jobs WHERE name = 'flaky'"
        wait_until(lambda: db.execute(status)[0].rows[0][0] == "failed", what="the job failed")
        assert "no longer exists upstream" in db.execute(status)[0].rows[0][1]
        assert db.execute("SELECT count(*) FROM flaky")[0].rows == [(2,)]  # never copied again
        ticks = db.execute("SELECT count(*) FROM ticks")[0].rows[0][0]
        wait_until(
            lambda: db.execute("SELECT count(*) FROM ticks")[0].rows[0][0] > ticks, what="others commit"
        )
    finally:
        db.close()


def _confirmed(pg: PgServer, slot: str) -> int | None:
    rows = pg.sql(
        "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    )
    return int(rows[0][0]) if rows and rows[0][0] is not None else None  # type: ignore[arg-type]


@pytest.mark.spark
def test_on_spark(pg: PgServer, tmp_path: Path, spark) -> None:  # type: ignore[no-untyped-def]
    """The reader in Spark's Python workers: snapshot in chunks, then the stream, equal to upstream."""
    pg.sql("CREATE TABLE sparked (id int PRIMARY KEY, cust int, amount numeric, note text)")
    pg.sql("INSERT INTO sparked SELECT g, g % 5, g, 'o' || g FROM generate_series(1, 500) g")
    db = Database(
        tmp_path / "db", spark=spark, config=DatabaseConfig(barrier_interval=0.2, background_compaction=False)
    )
    try:
        db.execute(
            "CREATE TABLE sparked (id int PRIMARY KEY, cust int, amount numeric, note varchar) "
            f"WITH ({pg.with_options(table_name='sparked')}, max.rows.per.epoch = '200')"
        )
        wait_until(lambda: _same(db, pg, "SELECT * FROM sparked"), timeout=300, what="the snapshot")
        _random_dml(pg, random.Random(5), "sparked", 30)
        wait_until(lambda: _same(db, pg, "SELECT * FROM sparked"), timeout=300, what="the stream")
    finally:
        db.close()


def test_snapshot_progress_in_rw_ddl_progress(pg: PgServer, tmp_path: Path) -> None:
    pg.sql("CREATE TABLE progress (id int PRIMARY KEY, v int)")
    pg.sql("INSERT INTO progress SELECT g, g FROM generate_series(1, 2000) g")
    pg.sql("ANALYZE progress")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            "CREATE TABLE progress (id int PRIMARY KEY, v int) "
            f"WITH ({pg.with_options(table_name='progress')}, max.rows.per.epoch = '400')"
        )
        q = "SELECT name, progress, rows_done, rows_total FROM rw_catalog.rw_ddl_progress"
        seen: list[tuple[object, ...]] = []

        def copying() -> bool:
            rows = [r for r in db.execute(q)[0].rows if r[0] == "progress" and 0 < r[2] < 2000]  # type: ignore[operator]
            seen.extend(rows)
            return bool(rows)

        wait_until(copying, what="the copy under way")
        _, percent, done, total = seen[0]
        assert done % 400 == 0 and total == 2000  # ANALYZE counted them
        assert percent == f"{100 * done / 2000:.2f}%"
        wait_until(lambda: db.execute("SELECT count(*) FROM progress")[0].rows == [(2000,)], what="copied")
        wait_until(lambda: not db.execute(q)[0].rows, what="gone from rw_ddl_progress when copied")
    finally:
        db.close()


def test_upstream_truncate_deletes_every_row_and_mvs_follow(pg: PgServer, tmp_path: Path) -> None:
    pg.sql("CREATE TABLE trunc (id int PRIMARY KEY, cust int, amount numeric, note text)")
    pg.sql("INSERT INTO trunc SELECT g, g % 5, g * 1.25, 'o' || g FROM generate_series(1, 300) g")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            "CREATE TABLE trunc (id int PRIMARY KEY, cust int, amount numeric, note varchar) "
            f"WITH ({pg.with_options(table_name='trunc')}, max.rows.per.epoch = '40')"
        )
        per_cust = "SELECT cust, count(*), sum(amount) FROM trunc GROUP BY cust"
        db.execute(f"CREATE MATERIALIZED VIEW trunc_cust AS {per_cust}")
        wait_until(lambda: _same(db, pg, "SELECT * FROM trunc"), what="the snapshot")
        rate = db.execute("SELECT rows_per_second FROM rw_catalog.rw_cdc_sources")[0].rows[0][0]
        assert rate is not None and rate > 0  # 300 rows in the last seconds
        rng = random.Random(11)
        _random_dml(pg, rng, "trunc", 20)
        # changes, the TRUNCATE and new rows in one transaction, spread over epochs by the budget
        pg.sql(
            "BEGIN; UPDATE trunc SET cust = 9 WHERE id < 50; TRUNCATE trunc; "
            "INSERT INTO trunc SELECT g, g % 3, g, 'n' || g FROM generate_series(250, 280) g; COMMIT"
        )
        _random_dml(pg, rng, "trunc", 20)
        wait_until(lambda: _same(db, pg, "SELECT * FROM trunc"), what="after the TRUNCATE")
        assert sorted(db.execute("SELECT * FROM trunc_cust")[0].rows) == sorted(
            tuple(r) for r in pg.sql(per_cust)
        )
        pg.sql("TRUNCATE trunc")  # a transaction of its own
        wait_until(lambda: db.execute("SELECT * FROM trunc_cust")[0].rows == [], what="emptied")
        assert db.execute("SELECT count(*) FROM trunc")[0].rows == [(0,)]
    finally:
        db.close()


def test_dashboard_shows_cdc_tables(pg: PgServer, tmp_path: Path, browser) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    from piestream.server.dashboard import Dashboard

    pg.sql("CREATE TABLE shown (id int PRIMARY KEY, v int)")
    pg.sql("INSERT INTO shown SELECT g, g FROM generate_series(1, 500) g")
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            f"CREATE TABLE shown (id int PRIMARY KEY, v int) WITH ({pg.with_options(table_name='shown')})"
        )
        wait_until(lambda: _same(db, pg, "SELECT * FROM shown"), what="the snapshot")
        pg.sql("UPDATE shown SET v = 0 WHERE id < 100")
        wait_until(lambda: _same(db, pg, "SELECT * FROM shown"), what="the stream")
        dash = Dashboard(db, port=0).start()
        try:
            browser.get(dash.url)
            rows = browser.find_elements(By.CSS_SELECTOR, "#cdc-sources tr")
            cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]
            mine = [c for c in cells if c and c[0] == "shown"]
            assert len(mine) == 1, cells
            _name, upstream, slot, phase, copied, committed, _lag, _lag_s, rate, error, _at = mine[0]
            assert upstream == "public.shown" and slot and phase == "stream" and copied == "500"
            assert "/" in committed and not error  # an LSN
            assert float(rate.replace(",", "")) > 0  # the copy and the updates, just now
            browser.save_screenshot(str(tmp_path / "cdc.png"))
        finally:
            dash.stop()
        assert (tmp_path / "cdc.png").stat().st_size > 10_000
    finally:
        db.close()


def test_snapshot_chunks_skip_the_key_lookup_and_a_restart_mid_copy_stays_exact(
    pg: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy's chunks reach the table's Materialize with the new-keys hint and no key of
    theirs is looked up; the stream's changes are. A restart mid-copy (a fresh snapshot, later
    than the slot's start) with upstream changes above and below the cursor meanwhile — an
    insert of a key the fresh copy then holds, updates, key changes, deletes, replayed by the
    stream over the copied rows — ends equal to PostgreSQL, table and MV: a hinted chunk never
    holds a key the table has (else the MV would count a row twice)."""
    from piestream.connectors.cdc.postgres import forget, pg_config
    from piestream.plan.source import SourceSpec
    from piestream.stream.executors.materialize import MaterializeExecutor

    hinted: list[int] = []  # rows of the hinted chunks the table's Materialize got
    looked_up: list[int] = []  # keys it looked up, per chunk
    resolve, stored_rows = MaterializeExecutor._resolve_conflicts, MaterializeExecutor._stored_rows

    def spy_resolve(self, c):  # type: ignore[no-untyped-def]
        if self.desc.name == "fresh" and c.new_keys:
            hinted.append(c.cardinality)
        return resolve(self, c)

    def spy_stored(self, pk_cols, key_r, hashes):  # type: ignore[no-untyped-def]
        if self.desc.name == "fresh":
            looked_up.append(key_r.n)
        return stored_rows(self, pk_cols, key_r, hashes)

    monkeypatch.setattr(MaterializeExecutor, "_resolve_conflicts", spy_resolve)
    monkeypatch.setattr(MaterializeExecutor, "_stored_rows", spy_stored)
    pg.sql("CREATE TABLE fresh (id int PRIMARY KEY, cust int, amount numeric, note text)")
    pg.sql("INSERT INTO fresh SELECT g, g % 5, g, 'o' || g FROM generate_series(1, 3000) g")
    options = pg.with_options(table_name="fresh")
    agg = "SELECT cust, count(*), sum(amount) FROM fresh GROUP BY cust"
    count = "SELECT count(*) FROM fresh"
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            "CREATE TABLE fresh (id int PRIMARY KEY, cust int, amount numeric, note varchar) "
            f"WITH ({options}, max.rows.per.epoch = '250')"
        )
        db.execute(f"CREATE MATERIALIZED VIEW fresh_agg AS {agg}")
        wait_until(lambda: 500 <= db.execute(count)[0].rows[0][0] < 2500, what="the copy under way")  # type: ignore[operator]
    finally:
        db.close()
    assert hinted and not looked_up  # every copied row came hinted, none was looked up
    # the copy's snapshot goes with this process's connection: the next is a fresh snapshot
    forget(pg_config(SourceSpec("fresh", "postgres-cdc", (), {"table.name": "fresh", **_options(options)})))
    pg.sql(
        "BEGIN; INSERT INTO fresh VALUES (5000, 1, 1, 'new above'); "
        "UPDATE fresh SET amount = amount + 100 WHERE id IN (10, 2990); "
        "UPDATE fresh SET id = 6000 WHERE id = 20; UPDATE fresh SET id = 7000 WHERE id = 2980; "
        "DELETE FROM fresh WHERE id IN (30, 2970); COMMIT"
    )
    db = Database(tmp_path / "db", config=CFG)
    try:
        wait_until(lambda: _same(db, pg, "SELECT * FROM fresh"), what="resumed and caught up")
        assert sorted(db.execute("SELECT * FROM fresh_agg")[0].rows) == sorted(tuple(r) for r in pg.sql(agg))
        copied = db.execute("SELECT rows_copied FROM rw_catalog.rw_cdc_sources")[0].rows
        assert copied == [(sum(hinted),)]  # both copies' rows, all hinted
        assert sum(looked_up) > 0  # the stream's replay of the changes is looked up
        _random_dml(pg, random.Random(9), "fresh", 40)
        wait_until(lambda: _same(db, pg, "SELECT * FROM fresh"), what="the stream")
        assert sorted(db.execute("SELECT * FROM fresh_agg")[0].rows) == sorted(tuple(r) for r in pg.sql(agg))
    finally:
        db.close()


def _options(with_options: str) -> dict[str, str]:
    return {k.strip(): v.strip().strip("'") for k, v in (kv.split("=", 1) for kv in with_options.split(", "))}


def test_upstream_stopped_mid_copy_pauses_the_source_and_resumes_exactly(
    pg: PgServer, tmp_path: Path
) -> None:
    """PostgreSQL stopped while the copy runs: the source pauses (SourceUnavailable, the epoch
    reruns without it), the table keeps what its committed epochs hold while other jobs
    commit; restarted, the copy goes on in a fresh snapshot and the table and its MV equal
    PostgreSQL's, every row once."""
    pg.sql("CREATE TABLE down (id int PRIMARY KEY, cust int, amount numeric, note text)")
    pg.sql("INSERT INTO down SELECT g, g % 5, g, 'o' || g FROM generate_series(1, 4000) g")
    agg = "SELECT cust, count(*), sum(amount) FROM down GROUP BY cust"
    count = "SELECT count(*) FROM down"
    db = Database(tmp_path / "db", config=CFG)
    try:
        db.execute(
            "CREATE TABLE down (id int PRIMARY KEY, cust int, amount numeric, note varchar) "
            f"WITH ({pg.with_options(table_name='down')}, max.rows.per.epoch = '200')"
        )
        db.execute(f"CREATE MATERIALIZED VIEW down_agg AS {agg}")
        db.execute(
            "CREATE TABLE beats (n bigint) WITH (connector = 'datagen', fields.n.kind = 'sequence', "
            "datagen.rows.per.second = '200')"
        )
        wait_until(lambda: 400 <= db.execute(count)[0].rows[0][0] < 3000, what="the copy under way")  # type: ignore[operator]
        pg.stop()
        try:
            wait_until(lambda: "down" in db.barriers.paused_sources, what="the source paused")
            held = db.execute(count)[0].rows[0][0]
            beats = db.execute("SELECT count(*) FROM beats")[0].rows[0][0]
            wait_until(
                lambda: db.execute("SELECT count(*) FROM beats")[0].rows[0][0] > beats + 50,  # type: ignore[operator]
                what="other jobs committing",
            )
            assert db.execute(count)[0].rows[0][0] == held  # nothing read, nothing lost
            errors = db.execute(
                "SELECT job_name, sqlstate, error_message FROM rw_catalog.rw_streaming_errors"
            )[0].rows
            assert any(r[0] == "down" and r[1] == "08006" and "source paused" in r[2] for r in errors), errors
        finally:
            pg.start()
        pg.sql("UPDATE down SET amount = amount + 1 WHERE id % 7 = 0")
        pg.sql("DELETE FROM down WHERE id % 11 = 0")
        pg.sql("INSERT INTO down SELECT g, g % 5, g, 'n' || g FROM generate_series(5000, 5100) g")
        wait_until(lambda: _same(db, pg, "SELECT * FROM down"), timeout=120, what="resumed and caught up")
        assert sorted(db.execute("SELECT * FROM down_agg")[0].rows) == sorted(tuple(r) for r in pg.sql(agg))
        assert "down" not in db.barriers.paused_sources
    finally:
        db.close()
