"""Transaction blocks through the Python API (local runner): buffering, read-your-writes,
atomic commit, rollback, savepoints, failure states, DDL in blocks, limits and write conflicts.

The backbone is a differential test: random INSERT / UPDATE / DELETE statements run inside a
transaction on one table and in autocommit on its twin; inside the transaction every read of the
first must equal the twin (read-your-writes), and after COMMIT the tables and their MVs must be
equal. Client-level tests (psycopg, pandas, SQLAlchemy, SIGKILL) are in `test_transaction_clients`.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import piestream
from piestream.common.errors import PiestreamError

KINDS = {
    "pk": "(k INT PRIMARY KEY, g INT, v VARCHAR)",
    "ignore": "(k INT PRIMARY KEY, g INT, v VARCHAR) ON CONFLICT DO NOTHING",
    "nopk": "(k INT, g INT, v VARCHAR)",
}


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[piestream.Connection]:
    c = piestream.connect(tmp_path / "db", runner="local", barrier_interval=0.05)
    yield c
    c.close()


def err(fn: object, *args: object) -> PiestreamError:
    with pytest.raises(PiestreamError) as e:
        fn(*args)  # type: ignore[operator]
    return e.value


def _order(row: tuple[object, ...]) -> list[tuple[bool, str, object]]:
    return [(v is None, type(v).__name__, 0 if v is None else v) for v in row]


def rows(c: piestream.Connection, sql: str) -> list[tuple[object, ...]]:
    """The result, sorted (NULLs last)."""
    return sorted(c.sql(sql).rows, key=_order)


# -- differential: a transaction against the same statements in autocommit -------------------------


def _statement(rng: random.Random, kind: str) -> str:
    """One random DML statement on table {t} (keys in a small range, so they collide)."""
    k = rng.randrange(12)
    g = rng.randrange(3)
    choice = rng.randrange(8)
    if choice <= 2:
        texts = ["NULL", *(f"'x{i}'" for i in range(5))]
        vals = ", ".join(
            f"({rng.randrange(12)}, {rng.randrange(3)}, {rng.choice(texts)})"
            for _ in range(rng.randrange(1, 5))
        )
        return f"INSERT INTO {{t}} VALUES {vals}"
    if choice == 3:
        return f"INSERT INTO {{t}} SELECT k + {rng.randrange(1, 4)}, g, v FROM {{t}} WHERE g = {g}"
    if choice == 4:
        return f"UPDATE {{t}} SET v = 'u{k}', g = g + 1 WHERE k <= {k}"
    if choice == 5:
        return f"UPDATE {{t}} SET k = k + 1 WHERE g = {g}"
    if choice == 6:
        return f"DELETE FROM {{t}} WHERE g = {g} AND k > {k}"
    return f"DELETE FROM {{t}} WHERE k = {k}"


def _reads(c: piestream.Connection, t: str, rng: random.Random) -> list[object]:
    k = rng.randrange(12)
    return [
        rows(c, f"SELECT k, g, v FROM {t}"),
        rows(c, f"SELECT k, g, v FROM {t} WHERE k = {k}"),  # a point get on pk tables
        rows(c, f"SELECT k, v FROM {t} WHERE k >= {k} AND k < {k + 4}"),  # a pk range
        rows(c, f"SELECT g, count(*), sum(k), max(v) FROM {t} GROUP BY g"),
        rows(c, f"SELECT a.k, b.g FROM {t} a JOIN {t} b ON a.k = b.k + 1"),
    ]


@pytest.mark.parametrize("kind", list(KINDS))
def test_transaction_equals_the_same_statements_in_autocommit(conn: piestream.Connection, kind: str) -> None:
    rng = random.Random(f"txn-{kind}")
    ac = piestream.connect(conn.data_dir)  # a second session runs the twin in autocommit
    try:
        for t in ("tx", "ac"):
            conn.sql(f"CREATE TABLE {t} {KINDS[kind]}")
            conn.sql(
                f"CREATE MATERIALIZED VIEW {t}_mv AS SELECT g, count(*) AS n, sum(k) AS s, max(v) AS m "
                f"FROM {t} GROUP BY g"
            )
            conn.sql(
                f"INSERT INTO {t} VALUES (1, 0, 'a'), (2, 1, 'b'), (3, 2, NULL), (5, 0, 'c'), (8, 1, 'a')"
            )
        for round_ in range(5):
            rollback = round_ == 2
            before = rows(conn, "SELECT k, g, v FROM tx")
            conn.begin()
            for _ in range(7):
                sql = _statement(rng, kind)
                tag = conn.sql(sql.format(t="tx")).tag
                seed = rng.random()
                mine = _reads(conn, "tx", random.Random(seed))
                if rollback:
                    continue
                assert ac.sql(sql.format(t="ac")).tag == tag, sql
                assert mine == _reads(ac, "ac", random.Random(seed)), sql
            if rollback:
                conn.rollback()
                assert rows(conn, "SELECT k, g, v FROM tx") == before
            else:
                conn.commit()
            assert rows(conn, "SELECT k, g, v FROM tx") == rows(conn, "SELECT k, g, v FROM ac")
            assert rows(conn, "SELECT * FROM tx_mv") == rows(conn, "SELECT * FROM ac_mv")
            assert rows(conn, "SELECT * FROM tx_mv") == rows(
                conn, "SELECT g, count(*), sum(k), max(v) FROM tx GROUP BY g"
            )
    finally:
        ac.close()


# -- commit, rollback, visibility --------------------------------------------------------------------


def test_commit_lands_every_table_in_one_epoch_and_rollback_discards(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE a (k INT PRIMARY KEY, v INT)")
    conn.sql("CREATE TABLE b (k INT PRIMARY KEY, w INT)")
    conn.sql("CREATE MATERIALIZED VIEW j AS SELECT a.k, v, w FROM a JOIN b ON a.k = b.k")
    other = piestream.connect(conn.data_dir)
    try:
        conn.begin()
        conn.sql("INSERT INTO a VALUES (1, 10), (2, 20)")
        conn.sql("INSERT INTO b VALUES (1, 100), (2, 200)")
        assert rows(conn, "SELECT * FROM a") == [(1, 10), (2, 20)]
        other.flush()
        assert rows(other, "SELECT * FROM a") == [] and rows(other, "SELECT * FROM j") == []
        conn.rollback()
        other.flush()
        assert rows(other, "SELECT * FROM j") == [] and rows(conn, "SELECT * FROM a") == []

        with conn.transaction():
            conn.sql("INSERT INTO a VALUES (1, 10), (2, 20)")
            conn.sql("INSERT INTO b VALUES (1, 100), (2, 200)")
        # COMMIT returned: the epoch holding both tables is committed, so every reader sees it
        assert rows(other, "SELECT * FROM j") == [(1, 10, 100), (2, 20, 200)]
    finally:
        other.close()


def test_reads_see_the_snapshot_the_transaction_began_with(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE a (k INT PRIMARY KEY, v INT)")
    conn.sql("CREATE TABLE b (k INT PRIMARY KEY, v INT)")
    conn.sql("INSERT INTO a VALUES (1, 1)")
    other = piestream.connect(conn.data_dir)
    try:
        conn.begin()
        assert rows(conn, "SELECT * FROM a") == [(1, 1)]  # the snapshot is taken here
        other.sql("INSERT INTO a VALUES (2, 2)")
        other.sql("INSERT INTO b VALUES (9, 9)")
        assert rows(conn, "SELECT * FROM a") == [(1, 1)]
        assert rows(conn, "SELECT * FROM b") == []
        conn.sql("INSERT INTO a VALUES (3, 3)")
        assert rows(conn, "SELECT * FROM a") == [(1, 1), (3, 3)]
        conn.commit()
        assert rows(conn, "SELECT * FROM a") == [(1, 1), (2, 2), (3, 3)]
        assert conn.sql("SHOW transaction_isolation").scalar() == "repeatable read"
    finally:
        other.close()


def test_reading_an_mv_or_index_over_a_changed_table_is_refused(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE a (k INT PRIMARY KEY, v INT)")
    conn.sql("CREATE TABLE other (k INT PRIMARY KEY)")
    conn.sql("CREATE MATERIALIZED VIEW m AS SELECT count(*) AS n FROM a")
    conn.sql("CREATE MATERIALIZED VIEW m2 AS SELECT n FROM m")
    conn.sql("CREATE MATERIALIZED VIEW mo AS SELECT count(*) AS n FROM other")
    conn.sql("CREATE INDEX a_v ON a (v)")
    conn.sql("INSERT INTO a VALUES (1, 5), (2, 6)")
    with conn.transaction():
        assert conn.sql("SELECT n FROM m").scalar() == 2  # nothing changed yet: allowed
        conn.sql("INSERT INTO a VALUES (3, 5)")
        e = err(conn.sql, "SELECT n FROM m2")  # through an MV on the MV
        assert e.sqlstate == "0A000" and '"m2"' in e.message and 'table "a"' in e.message
        conn.rollback()
    with conn.transaction():
        conn.sql("UPDATE a SET v = 7 WHERE k = 1")
        # a lookup the index would answer reads the table merged with the change instead
        assert rows(conn, "SELECT k FROM a WHERE v = 5") == []
        assert rows(conn, "SELECT k FROM a WHERE v = 7") == [(1,)]
        assert conn.sql("SELECT n FROM mo").scalar() == 0  # an MV over an unchanged table is fine
    assert rows(conn, "SELECT k FROM a WHERE v = 7") == [(1,)]


def test_failed_state_savepoints_and_status(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
    s = conn.session
    assert s.transaction_status == "I"
    conn.begin()
    assert s.transaction_status == "T"
    conn.sql("INSERT INTO t VALUES (1, 1)")
    conn.sql("SAVEPOINT a")
    conn.sql("INSERT INTO t VALUES (2, 2)")
    assert err(conn.sql, "INSERT INTO t VALUES (3, 1 / 0)").sqlstate == "22012"
    assert s.transaction_status == "E"
    assert err(conn.sql, "SELECT 1").sqlstate == "25P02"
    assert err(conn.sql, "SAVEPOINT b").sqlstate == "25P02"
    conn.sql("ROLLBACK TO SAVEPOINT a")  # undoes (2, 2) and leaves the failed state
    assert s.transaction_status == "T"
    assert rows(conn, "SELECT * FROM t") == [(1, 1)]
    conn.sql("SAVEPOINT b")
    conn.sql("UPDATE t SET v = 10")
    conn.sql("RELEASE SAVEPOINT a")  # releases b too; the update stays
    assert err(conn.sql, "ROLLBACK TO b").sqlstate == "3B001"
    assert s.transaction_status == "E"
    assert conn.sql("COMMIT").tag == "ROLLBACK"  # COMMIT of a failed block rolls back
    assert s.transaction_status == "I"
    assert rows(conn, "SELECT * FROM t") == []

    with conn.transaction():
        conn.sql("INSERT INTO t VALUES (1, 1)")
        with pytest.raises(ZeroDivisionError), conn.transaction():  # nested: a savepoint
            conn.sql("INSERT INTO t VALUES (2, 2)")
            raise ZeroDivisionError
        assert rows(conn, "SELECT * FROM t") == [(1, 1)]
    assert rows(conn, "SELECT * FROM t") == [(1, 1)]
    with pytest.raises(RuntimeError), conn.transaction():
        conn.sql("INSERT INTO t VALUES (5, 5)")
        raise RuntimeError
    assert rows(conn, "SELECT * FROM t") == [(1, 1)] and not conn.in_transaction

    assert err(conn.sql, "SAVEPOINT x").sqlstate == "25P01"
    assert err(conn.sql, "ROLLBACK TO SAVEPOINT x").sqlstate == "25P01"
    assert conn.sql("COMMIT").notices == ["there is no transaction in progress"]
    conn.begin()
    assert conn.sql("BEGIN").notices == ["there is already a transaction in progress"]
    conn.rollback()


def test_ddl_in_a_block_is_atomic_or_commits_the_block_first(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k INT PRIMARY KEY)")
    conn.begin()
    conn.sql("CREATE TABLE n (k INT PRIMARY KEY, v VARCHAR)")
    conn.sql("INSERT INTO n VALUES (1, 'a')")
    assert rows(conn, "SELECT * FROM n") == [(1, "a")]
    assert [r[0] for r in conn.sql("SHOW TABLES").rows] == ["n", "t"]
    other = piestream.connect(conn.data_dir)
    try:
        assert err(other.sql, "SELECT * FROM n").sqlstate == "42P01"  # not there until COMMIT
        # DDL that cannot be rolled back commits the block's changes first, then runs alone
        res = conn.sql("CREATE MATERIALIZED VIEW m AS SELECT k, v FROM n")
        assert res.notices == [
            "CREATE MATERIALIZED VIEW committed the transaction block's earlier changes first"
        ]
        assert rows(other, "SELECT * FROM n") == [(1, "a")] and rows(other, "SELECT * FROM m") == [(1, "a")]
        # the block goes on: what follows is one transaction again, undone by ROLLBACK
        conn.sql("INSERT INTO n VALUES (2, 'b')")
        assert conn.sql("CREATE VIEW v AS SELECT k FROM n").notices == [
            "CREATE VIEW committed the transaction block's earlier changes first"
        ]
        conn.sql("INSERT INTO n VALUES (3, 'c')")
        assert conn.sql("CREATE INDEX i ON t (k)").notices == [
            "CREATE INDEX committed the transaction block's earlier changes first"
        ]
        assert conn.sql("DROP VIEW v").notices == []  # nothing was pending
        conn.sql("INSERT INTO n VALUES (4, 'd')")
        conn.rollback()
        assert rows(other, "SELECT k FROM m ORDER BY k") == [(1,), (2,), (3,)]
    finally:
        other.close()
    conn.begin()
    e = err(conn.sql, "DISCARD ALL")  # PostgreSQL refuses it in a block too
    assert e.sqlstate == "25001" and "cannot run inside a transaction block" in e.message
    conn.rollback()
    conn.sql("BEGIN READ ONLY")
    assert err(conn.sql, "DROP TABLE t").sqlstate == "25006"
    conn.rollback()
    conn.sql("DROP MATERIALIZED VIEW m")
    conn.sql("DROP TABLE n")

    with conn.transaction():
        conn.sql("CREATE TABLE n (k INT PRIMARY KEY, v VARCHAR)")
        conn.sql("INSERT INTO n VALUES (1, 'a')")
        conn.sql("CREATE TABLE empty (x INT)")
    assert rows(conn, "SELECT * FROM n") == [(1, "a")]
    assert rows(conn, "SELECT * FROM empty") == []
    conn.sql("INSERT INTO empty VALUES (7)")  # the new tables are running jobs
    conn.sql("CREATE MATERIALIZED VIEW nm AS SELECT count(*) AS c FROM n")
    assert conn.sql("SELECT c FROM nm").scalar() == 1

    # a name taken by another session before COMMIT fails the COMMIT, changing nothing
    conn.begin()
    conn.sql("CREATE TABLE race (k INT PRIMARY KEY)")
    conn.sql("INSERT INTO race VALUES (1)")
    other = piestream.connect(conn.data_dir)
    try:
        other.sql("CREATE TABLE race (k INT PRIMARY KEY)")
    finally:
        other.close()
    assert err(conn.commit).sqlstate == "42P07"
    assert rows(conn, "SELECT * FROM race") == []


def test_bulk_insert_of_the_python_api_is_part_of_the_block(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    conn.sql("CREATE TABLE r (v INT)")
    with pytest.raises(RuntimeError), conn.transaction():
        conn.insert("t", {"k": list(range(1000)), "v": ["x"] * 1000})
        assert conn.sql("SELECT count(*) FROM t").scalar() == 1000
        raise RuntimeError("the application gives up")
    assert conn.sql("SELECT count(*) FROM t").scalar() == 0
    with conn.transaction():
        conn.insert("t", {"k": [1, 2, 2], "v": ["a", "b", "c"]})  # the last row of a key wins
        conn.insert("r", {"v": [1, 2, 3]})
        conn.sql("DELETE FROM r WHERE v = 2")
    assert rows(conn, "SELECT * FROM t") == [(1, "a"), (2, "c")]
    assert rows(conn, "SELECT v FROM r") == [(1,), (3,)]


def test_read_only_serializable_and_buffer_limit(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    conn.sql("START TRANSACTION READ ONLY")
    assert err(conn.sql, "INSERT INTO t VALUES (1, 'a')").sqlstate == "25006"
    conn.rollback()
    assert err(conn.sql, "BEGIN ISOLATION LEVEL SERIALIZABLE").sqlstate == "0A000"
    conn.sql("BEGIN ISOLATION LEVEL READ COMMITTED")  # runs as REPEATABLE READ (stricter)
    conn.rollback()

    assert err(conn.sql, "SET transaction_buffer_limit = 'lots'").sqlstate == "22023"

    def values(lo: int, hi: int) -> str:
        return "INSERT INTO t VALUES " + ", ".join(f"({i}, '{'x' * 100}')" for i in range(lo, hi))

    conn.sql("SET transaction_buffer_limit = '64kB'")
    conn.begin()
    conn.sql(values(0, 100))
    e = err(conn.sql, values(100, 1100))
    assert e.sqlstate == "54000" and "transaction_buffer_limit" in e.message
    assert conn.sql("COMMIT").tag == "ROLLBACK"
    assert conn.sql("SELECT count(*) FROM t").scalar() == 0
    conn.sql(values(0, 1100))  # autocommit statements are not buffered, so not limited
    # a limit of 0 turns the check off
    conn.sql("SET transaction_buffer_limit = 0")
    with conn.transaction():
        conn.sql("DELETE FROM t")
        conn.sql(values(5000, 6100))
    assert conn.sql("SELECT count(*), min(k) FROM t").rows == [(1100, 5000)]


# -- write conflicts ---------------------------------------------------------------------------------


def test_first_committer_wins_on_the_same_key(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE acct (id INT PRIMARY KEY, bal INT)")
    conn.sql("CREATE TABLE log (n INT)")
    conn.sql("INSERT INTO acct VALUES (1, 100), (2, 100)")
    other = piestream.connect(conn.data_dir)
    try:
        # two transactions read the same balance and write it: the second commit fails
        conn.begin()
        other.begin()
        conn.sql("UPDATE acct SET bal = bal - 30 WHERE id = 1")
        other.sql("UPDATE acct SET bal = bal - 50 WHERE id = 1")
        other.sql("INSERT INTO log VALUES (1)")
        other.commit()
        e = err(conn.commit)
        assert e.sqlstate == "40001" and "concurrent update" in e.message and '"acct"' in (e.detail or "")
        assert not conn.in_transaction
        assert rows(conn, "SELECT * FROM acct") == [(1, 50), (2, 100)]  # no lost update

        # different keys of the same table do not conflict
        conn.begin()
        other.begin()
        conn.sql("UPDATE acct SET bal = 1 WHERE id = 1")
        other.sql("UPDATE acct SET bal = 2 WHERE id = 2")
        conn.commit()
        other.commit()
        assert rows(conn, "SELECT * FROM acct") == [(1, 1), (2, 2)]

        # an autocommit write after the snapshot conflicts too, and so does an insert of a key
        conn.begin()
        conn.sql("INSERT INTO acct VALUES (3, 3)")
        other.sql("INSERT INTO acct VALUES (3, 30)")
        assert err(conn.commit).sqlstate == "40001"
        assert rows(conn, "SELECT * FROM acct WHERE id = 3") == [(3, 30)]

        # a transaction that only reads, or writes what nobody else wrote, commits
        conn.begin()
        conn.sql("SELECT * FROM acct")
        other.sql("UPDATE acct SET bal = 0 WHERE id = 1")
        conn.sql("INSERT INTO log VALUES (2)")
        conn.commit()
    finally:
        other.close()


def test_rows_of_a_table_without_pk_conflict_by_row_id(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE r (v INT)")
    conn.sql("CREATE MATERIALIZED VIEW rc AS SELECT count(*) AS n, sum(v) AS s FROM r")
    conn.sql("INSERT INTO r VALUES (1), (2)")
    other = piestream.connect(conn.data_dir)
    try:
        conn.begin()
        other.begin()
        conn.sql("DELETE FROM r WHERE v = 1")
        other.sql("UPDATE r SET v = 10 WHERE v = 1")
        other.sql("INSERT INTO r VALUES (3)")
        other.commit()
        assert err(conn.commit).sqlstate == "40001"  # a second delete of the row would corrupt rc
        assert rows(conn, "SELECT v FROM r") == [(2,), (3,), (10,)]
        assert rows(conn, "SELECT * FROM rc") == [(3, 15)]
        # inserts get fresh row ids: two transactions inserting never conflict
        conn.begin()
        other.begin()
        conn.sql("INSERT INTO r VALUES (4)")
        other.sql("INSERT INTO r VALUES (4)")
        conn.commit()
        other.commit()
        assert rows(conn, "SELECT * FROM rc") == [(5, 23)]
    finally:
        other.close()


def test_concurrent_transfers_keep_the_total(conn: piestream.Connection) -> None:
    """Threads move money between accounts in transactions, retrying on 40001: every committed
    transfer keeps the total, and the MV of the total never shows anything else."""
    conn.sql("CREATE TABLE acct (id INT PRIMARY KEY, bal INT)")
    conn.sql("CREATE MATERIALIZED VIEW total AS SELECT sum(bal) AS s, count(*) AS n FROM acct")
    conn.sql("INSERT INTO acct VALUES (1, 100), (2, 100), (3, 100), (4, 100), (5, 100), (6, 100)")
    failures: list[BaseException] = []
    conflicts = [0]
    seen: set[tuple[object, ...]] = set()
    stop = threading.Event()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        c = piestream.connect(conn.data_dir)
        try:
            for _ in range(8):
                a, b = rng.sample(range(1, 7), 2)
                while True:
                    try:
                        with c.transaction():
                            bal = c.sql(f"SELECT bal FROM acct WHERE id = {a}").scalar()
                            c.sql(f"UPDATE acct SET bal = {bal - 7} WHERE id = {a}")
                            c.sql(f"UPDATE acct SET bal = bal + 7 WHERE id = {b}")
                        break
                    except PiestreamError as e:
                        if e.sqlstate != "40001":
                            raise
                        conflicts[0] += 1
        except BaseException as e:  # reported by the main thread
            failures.append(e)
        finally:
            c.close()

    def watch() -> None:
        c = piestream.connect(conn.data_dir)
        try:
            while not stop.is_set():
                seen.add(tuple(c.sql("SELECT s, n FROM total").rows[0]))
        finally:
            c.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    watcher.join(30)
    assert not failures, failures
    assert conn.sql("SELECT sum(bal) FROM acct").scalar() == 600
    assert seen == {(600, 6)}
    assert conflicts[0] > 0  # the workload did collide, so the check was exercised


def test_closed_sessions_release_their_snapshot(conn: piestream.Connection) -> None:
    conn.sql("CREATE TABLE t (k INT PRIMARY KEY)")
    hummock = conn.database.hummock
    writes = conn.database.barriers.writes
    s = conn.database.session()
    s.execute("BEGIN; INSERT INTO t VALUES (1)")  # the snapshot is pinned by the INSERT
    conn.flush()
    conn.flush()
    assert hummock.min_pinned_version_id() < hummock.version.id and writes.tracking
    s.close()  # a disconnect: the block is rolled back and its snapshot released
    assert hummock.min_pinned_version_id() == hummock.version.id and not writes.tracking
    conn.database.execute("BEGIN; INSERT INTO t VALUES (2)")  # the script's session is closed after it
    assert hummock.min_pinned_version_id() == hummock.version.id and not writes.tracking
    assert conn.sql("SELECT count(*) FROM t").scalar() == 0
