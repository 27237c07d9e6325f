"""Subscriptions (RisingWave's changefeeds): the log of an MV's changes, read by SQL cursors and
by `Connection.subscribe`, kept for the retention and no longer, surviving a restart."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piestream.common.errors import PiestreamError
from piestream.server.api import Connection, connect
from piestream.server.database import Database, DatabaseConfig
from piestream.storage.hummock.compaction import CompactionConfig

MV = "CREATE MATERIALIZED VIEW mv AS SELECT v % 2 AS p, sum(v) AS s, count(*) AS n FROM t GROUP BY v % 2"


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Connection]:
    c = connect(tmp_path / "db", runner="local", barrier_interval=0.1)
    c.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
    c.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    c.sql(MV)
    yield c
    c.close()


def _state(
    rows: list[tuple[Any, ...]], start: Counter[tuple[Any, ...]] | None = None
) -> Counter[tuple[Any, ...]]:
    """Apply (p, s, n, op, epoch) changes to a multiset of MV rows."""
    state = Counter(start or {})
    for *row, op, _ in rows:
        state[tuple(row)] += 1 if op in ("insert", "update_insert") else -1
    return +state


def _mv(conn: Connection) -> Counter[tuple[Any, ...]]:
    return Counter(conn.sql("SELECT p, s, n FROM mv").rows)


def test_fetch_returns_changes_with_op_and_epoch_in_commit_order(conn: Connection) -> None:
    conn.sql("CREATE SUBSCRIPTION sub FROM mv WITH (retention = '1h')")
    conn.sql("DECLARE full_c SUBSCRIPTION CURSOR FOR sub FULL")
    conn.sql("DECLARE now_c SUBSCRIPTION CURSOR FOR sub")
    first = conn.sql("FETCH 10 FROM full_c")
    assert first.columns == ["p", "s", "n", "op", "epoch"]
    assert {r[:4] for r in first.rows} == {(0, 30, 2, "insert")}
    snapshot = _state(first.rows)
    conn.sql("INSERT INTO t VALUES (3, 31)")
    conn.sql("UPDATE t SET v = 11 WHERE k = 1")
    conn.sql("DELETE FROM t WHERE k = 3")
    changes = conn.sql("FETCH 100 FROM now_c").rows
    assert [r[3] for r in changes] == [
        "insert",  # (1, 31, 1)
        "update_delete",  # p=0 loses 10
        "update_insert",
        "update_delete",  # p=1 gains 11
        "update_insert",
        "update_delete",  # k=3 deleted
        "update_insert",
    ]
    epochs = [r[4] for r in changes]
    assert epochs == sorted(epochs) and len(set(epochs)) == 3  # one epoch per statement
    assert _state(changes, snapshot) == _mv(conn)
    assert conn.sql("FETCH NEXT FROM now_c").rows == []
    # the FULL cursor continues from its snapshot with the same changes, a few at a time
    more = [r for _ in range(4) for r in conn.sql("FETCH 2 FROM full_c").rows]
    assert more == changes
    conn.sql("CLOSE ALL")
    with pytest.raises(PiestreamError) as e:
        conn.sql("FETCH 1 FROM full_c")
    assert e.value.sqlstate == "34000"


def test_resume_exactly_after_the_last_epoch_consumed(conn: Connection, tmp_path: Path) -> None:
    conn.sql("CREATE SUBSCRIPTION sub FROM mv")
    conn.sql("DECLARE c SUBSCRIPTION CURSOR FOR sub")
    conn.sql("INSERT INTO t VALUES (3, 31)")
    conn.sql("INSERT INTO t VALUES (4, 40)")
    got = conn.sql("FETCH 100 FROM c").rows
    last = got[-1][4]
    conn.sql("INSERT INTO t VALUES (5, 51)")
    db = conn.database
    conn.close()  # the database closes with its last connection
    assert db._closed
    again = connect(tmp_path / "db", runner="local", barrier_interval=0.1)
    try:
        again.sql("UPDATE t SET v = 60 WHERE k = 5")
        again.sql(f"DECLARE c SUBSCRIPTION CURSOR FOR sub SINCE {last}")
        after = again.sql("FETCH 100 FROM c").rows
        assert [r[4] for r in after] == sorted(r[4] for r in after) and min(r[4] for r in after) > last
        again.sql("DECLARE b SUBSCRIPTION CURSOR FOR sub SINCE begin()")
        assert again.sql("FETCH 100 FROM b").rows == got + after  # no gap, no duplicate
        assert _state(got + after, Counter({(0, 30, 2): 1})) == _mv(again)
    finally:
        again.close()


def test_retention_hides_old_changes_and_compaction_drops_them(tmp_path: Path) -> None:
    db = Database(
        tmp_path / "db",
        config=DatabaseConfig(
            runner="local",
            barrier_interval=0.1,
            background_compaction=False,
            compaction=CompactionConfig(level0_trigger_sub_levels=1),  # every L0 SST goes down
        ),
    )
    try:
        s = db.session()
        s.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
        s.execute(MV)
        s.execute("CREATE SUBSCRIPTION sub FROM mv WITH (retention = '1s')")
        s.execute("DECLARE early SUBSCRIPTION CURSOR FOR sub")
        s.execute("INSERT INTO t VALUES (1, 10)")
        time.sleep(1.5)
        s.execute("INSERT INTO t VALUES (2, 21)")
        db.barriers.flush()
        s.execute("DECLARE b SUBSCRIPTION CURSOR FOR sub SINCE begin()")
        kept = s.execute("FETCH 100 FROM b")[0].rows
        assert [r[:4] for r in kept] == [(1, 21, 1, "insert")]  # the first insert is past retention
        with pytest.raises(PiestreamError, match="no longer retained") as e:
            s.execute("FETCH 100 FROM early")
        assert e.value.sqlstate == "22000"

        sub = db.catalog.get("sub")
        assert sub is not None and sub.subscription is not None
        log_id = sub.subscription.log_table.table_id
        prefix = log_id.to_bytes(4, "big")

        def raw_log_rows() -> int:
            storage, epoch, vpin, spin = db.snapshot_storage()
            try:
                end = (log_id + 1).to_bytes(4, "big")
                return sum(len(b) for b in storage.iter(prefix, end, epoch, apply_watermarks=False))
            finally:
                db.release_snapshot(vpin, spin)

        assert raw_log_rows() == 2  # hidden, not yet gone
        db.hummock.compact_until_idle()
        db.hummock.vacuum(0)
        assert raw_log_rows() == 1  # compaction dropped what retention no longer keeps
        s.execute("DECLARE b2 SUBSCRIPTION CURSOR FOR sub SINCE begin()")
        assert s.execute("FETCH 100 FROM b2")[0].rows == kept  # and kept every retained change
    finally:
        db.close()


def test_python_subscribe_yields_one_batch_per_epoch(conn: Connection) -> None:
    changes = conn.subscribe("mv", since="full", idle_timeout=2)
    first = next(changes)
    assert first.table.column_names == ["p", "s", "n", "op", "epoch"]
    assert first.to_pandas()[["p", "s", "n", "op"]].values.tolist() == [[0, 30, 2, "insert"]]
    e1 = conn.sql("INSERT INTO t VALUES (3, 31)")
    assert e1.tag.startswith("INSERT")
    conn.sql("DELETE FROM t WHERE k = 2")
    batches = [next(changes), next(changes)]
    assert [len(b) for b in batches] == [1, 2]
    assert batches[0].epoch < batches[1].epoch
    assert all(set(b.table.column("epoch").to_pylist()) == {b.epoch} for b in batches)
    rows = [tuple(r.values()) for b in [first, *batches] for r in b.table.to_pylist()]
    assert _state(rows) == _mv(conn)
    assert conn.sql("SHOW SUBSCRIPTIONS").rows == [("mv_changes",)]  # created on first use


def test_ddl_rules(conn: Connection) -> None:
    conn.sql("CREATE SUBSCRIPTION sub FROM mv WITH (retention = '10 minutes')")
    for sql, state in [
        ("SELECT * FROM sub", "0A000"),
        ("CREATE SUBSCRIPTION bad FROM mv WITH (retention = 'soon')", "22023"),
        ("CREATE SUBSCRIPTION bad FROM mv WITH (retention = '1h', foo = 'x')", "22023"),
        ("CREATE SUBSCRIPTION bad FROM nope", "42P01"),
        ("DECLARE c SUBSCRIPTION CURSOR FOR nope", "42704"),
        ("DECLARE c CURSOR FOR SELECT 1", "25P01"),  # a query cursor needs a transaction block
        ("DROP MATERIALIZED VIEW mv", "2BP01"),
        ("DROP SUBSCRIPTION mv", "42809"),
    ]:
        with pytest.raises(PiestreamError) as e:
            conn.sql(sql)
        assert e.value.sqlstate == state, sql
    conn.sql("CREATE VIEW v AS SELECT * FROM t")
    with pytest.raises(PiestreamError) as e:
        conn.sql("CREATE SUBSCRIPTION bad FROM v")
    assert e.value.sqlstate == "42809"
    conn.sql("DROP SUBSCRIPTION sub")
    conn.sql("DROP MATERIALIZED VIEW mv")
    assert conn.sql("SHOW SUBSCRIPTIONS").rows == []
