"""The mysql-cdc reader against a real MariaDB, without the rest of piestream: the snapshot meets
the binlog with no gap and no duplicate (lock-free and under the read lock), offsets resume
exactly and repeatably, transactions larger than a budget span reads, key changes, a binlog
rotation, an upstream ADD COLUMN, and a purged binlog."""

from __future__ import annotations

import itertools
import threading

import pytest
from cdc_follower import EPOCH, Follower
from mysql_server import PASSWORD, USER, MariaDbServer
from nexmark_sql import wait_until

from piestream.common.types import DataType, TypeKind
from piestream.connectors.cdc import mysql
from piestream.connectors.cdc.offset import CdcOffset
from piestream.plan.source import SourceSpec

_n = itertools.count()
INT, TEXT = DataType(TypeKind.INT), DataType(TypeKind.VARCHAR)
COLS = (("id", INT), ("v", TEXT))


def _reader(my: MariaDbServer, table: str) -> mysql.MySqlCdcReader:
    opts = {
        "connector": "mysql-cdc", "hostname": my.host, "port": str(my.port), "username": USER,
        "password": PASSWORD, "database.name": my.database, "table.name": table,
        "server.id": str(9000 + next(_n)),
    }  # fmt: skip
    spec = SourceSpec(table, "mysql-cdc", COLS, opts)
    mysql.check_upstream(spec, ["id"])
    reader, _ = mysql.mysql_cdc_connector(spec)
    assert isinstance(reader, mysql.MySqlCdcReader)
    return reader


def _upstream(my: MariaDbServer, table: str) -> dict[object, tuple[object, ...]]:
    return {r[0]: tuple(r) for r in my.sql(f"SELECT id, v FROM {table}")}


def _make(my: MariaDbServer, table: str, n: int) -> None:
    my.sql(f"CREATE TABLE {table} (id int PRIMARY KEY, v varchar(40))")
    my.sql(f"INSERT INTO {table} SELECT seq, concat('v', seq) FROM seq_1_to_{n}")


def test_snapshot_then_stream_no_gap_no_duplicate(mariadb: MariaDbServer) -> None:
    my = mariadb
    _make(my, "r1", 250)
    f = Follower(_reader(my, "r1"))
    assert f.step(100) == 100  # the first chunk: the snapshot is open, its position known
    my.sql("INSERT INTO r1 VALUES (1000, 'late')")  # after the snapshot: comes by the binlog
    my.sql("UPDATE r1 SET v = 'changed' WHERE id IN (5, 200)")  # one copied, one not yet
    my.sql("DELETE FROM r1 WHERE id IN (6, 201)")
    assert f.step(100) == 100 and CdcOffset.from_json(f.offset or "").phase == "snapshot"
    f.drain(100)
    assert f.rows == _upstream(my, "r1")
    assert f.rows[200] == (200, "changed") and 201 not in f.rows and 1000 in f.rows
    # repeatable: the same offset reads the same changes again
    my.sql(
        "START TRANSACTION; UPDATE r1 SET v = 'again' WHERE id = 7; INSERT INTO r1 VALUES (1001, 'x'); COMMIT"
    )
    before = f.offset
    first = f.reader.read(f.split, before, 10, EPOCH)
    second = f.reader.read(f.split, before, 10, EPOCH)
    assert first.offset == second.offset and first.batches[0].equals(second.batches[0])
    assert first.consumed == 2
    f.drain()
    assert f.rows == _upstream(my, "r1")


def test_locked_snapshot_position_is_exact(mariadb: MariaDbServer) -> None:
    """The MySQL way (a brief FLUSH TABLES WITH READ LOCK) while writers commit: every
    transaction is either in the snapshot or after its position, never both, never neither."""
    my = mariadb
    _make(my, "r2", 10)
    cfg = _reader(my, "r2").cfg
    for lock_free in (False, True):
        stop = threading.Event()
        written = [0]  # rows the writer committed (counts, not time: the machine may be slow)

        def write(
            k: int = 100 if lock_free else 100_000, stop: threading.Event = stop, written: list[int] = written
        ) -> None:
            conn = my.connect()
            while not stop.is_set():
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO r2 VALUES (%s, 'w')", (k,))
                k += 1
                written[0] += 1
            conn.close()

        def wait_for(n: int, written: list[int] = written) -> None:
            wait_until(lambda: written[0] >= n, what=f"{n} rows written")

        t = threading.Thread(target=write)
        t.start()
        try:
            wait_for(20)
            conn, file, pos = mysql.consistent_snapshot(cfg, lock_free=lock_free)
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM r2")
                seen = {r[0] for r in cur.fetchall()}
            conn.close()
            wait_for(written[0] + 20)
        finally:
            stop.set()
            t.join()
        f = Follower(_reader(my, "r2"))
        f.offset = CdcOffset("stream", pos, file=file).to_json()
        f.drain()
        streamed = set(f.rows)
        assert streamed and not seen & streamed, (lock_free, sorted(seen & streamed)[:5])
        assert seen | streamed == {r[0] for r in my.sql("SELECT id FROM r2")}, lock_free


def test_big_transactions_span_reads_and_key_changes(mariadb: MariaDbServer) -> None:
    my = mariadb
    _make(my, "r3", 5)
    f = Follower(_reader(my, "r3"))
    f.drain()
    my.sql(
        "START TRANSACTION; INSERT INTO r3 SELECT seq, 'big' FROM seq_100_to_399; "
        "UPDATE r3 SET id = id + 1000 WHERE id <= 5; DELETE FROM r3 WHERE id BETWEEN 100 AND 149; COMMIT"
    )
    applied = []
    while f.step(64):
        applied.append(CdcOffset.from_json(f.offset or "").applied)
    assert len(applied) >= 5 and applied[0] > 0  # the transaction's changes, spread over reads
    assert applied == [*sorted(applied[:-1]), 0]  # then its end: the next position
    assert f.rows == _upstream(my, "r3") and 1001 in f.rows and 1 not in f.rows


def test_rotation_and_upstream_add_column(mariadb: MariaDbServer) -> None:
    my = mariadb
    _make(my, "r4", 3)
    f = Follower(_reader(my, "r4"))
    f.drain()
    my.sql("INSERT INTO r4 VALUES (10, 'a')")
    my.sql("FLUSH BINARY LOGS", root=True)  # the next changes are in a new binlog file
    my.sql("ALTER TABLE r4 ADD COLUMN extra int FIRST")
    my.sql("INSERT INTO r4 VALUES (7, 11, 'b'); UPDATE r4 SET v = 'c' WHERE id = 1")
    file_before = CdcOffset.from_json(f.offset or "").file
    f.drain()
    assert f.rows == _upstream(my, "r4")
    assert CdcOffset.from_json(f.offset or "").file != file_before


def test_a_purged_binlog_fails_the_table(mariadb: MariaDbServer) -> None:
    my = mariadb
    _make(my, "r5", 3)
    f = Follower(_reader(my, "r5"))
    f.drain()
    stale = CdcOffset.from_json(f.offset or "")
    gone = CdcOffset("stream", stale.lsn, file="binlog.000000").to_json()
    with pytest.raises(mysql.CdcError, match="no longer on the server"):
        f.reader.read(f.split, gone, 100, EPOCH)


def test_upstream_truncate_is_a_change_at_its_place_and_reads_repeat(mariadb: MariaDbServer) -> None:
    my = mariadb
    _make(my, "r7", 30)
    reader = _reader(my, "r7")
    f = Follower(reader)
    f.drain()
    my.sql("BEGIN; INSERT INTO r7 VALUES (100, 'a'); UPDATE r7 SET v = 'x' WHERE id = 1; COMMIT")
    my.sql("TRUNCATE TABLE r7")  # a statement of its own (an implicit commit)
    my.sql("INSERT INTO r7 VALUES (1, 'after'), (200, 'b')")
    my.sql(f"TRUNCATE {my.database}.r7")
    before = f.offset
    first = reader.read(f.split, before, 1000, EPOCH)
    again = reader.read(f.split, before, 1000, EPOCH)  # a retried epoch: the same
    assert first.truncate_at == again.truncate_at == [1, 2] and first.consumed == again.consumed == 6
    assert [b.to_pylist() for b in first.batches] == [b.to_pylist() for b in again.batches]
    assert [b.num_rows for b in first.batches] == [2, 2]
    for budget in (1, 2, 3):  # budgets that cut before, at and after each TRUNCATE
        g = Follower(reader)
        g.rows, g.offset = dict(f.rows), before
        g.drain(budget)
        assert g.rows == {} == _upstream(my, "r7")
    my.sql("INSERT INTO r7 VALUES (7, 'new')")
    f.drain()
    assert f.rows == _upstream(my, "r7") == {7: (7, "new")}
