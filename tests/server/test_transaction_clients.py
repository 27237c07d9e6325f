"""Transaction blocks with real clients over pgwire: psycopg with autocommit off, pandas
`to_sql`, the SQLAlchemy ORM, ReadyForQuery's status byte, and SIGKILL of the server during COMMIT.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psycopg
import pytest
from pgwire_helpers import Raw, cstr, message
from sqlalchemy import Integer, String, create_engine, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from piestream.server.pgwire import PgServer

INTRANS = psycopg.pq.TransactionStatus.INTRANS
INERROR = psycopg.pq.TransactionStatus.INERROR
IDLE = psycopg.pq.TransactionStatus.IDLE


@pytest.fixture(scope="module")
def admin(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


def one(c: psycopg.Connection, sql: str) -> object:
    row = c.execute(sql).fetchone()
    assert row is not None
    return row[0]


def test_psycopg_rollback_and_commit_across_two_tables(admin: psycopg.Connection, dsn: str) -> None:
    admin.execute("CREATE TABLE pa (k INT PRIMARY KEY, v INT)")
    admin.execute("CREATE TABLE pb (k INT PRIMARY KEY, w INT)")
    admin.execute("CREATE MATERIALIZED VIEW pj AS SELECT pa.k, v, w FROM pa JOIN pb ON pa.k = pb.k")
    admin.execute(
        "CREATE MATERIALIZED VIEW pab AS "
        "SELECT count(*) AS n FROM (SELECT k FROM pa UNION ALL SELECT k FROM pb) u"
    )
    n = 3000
    with psycopg.connect(dsn) as c:  # autocommit off: psycopg sends BEGIN before the first statement
        for lo in range(0, n, 600):
            c.execute(f"INSERT INTO pa SELECT k, k FROM (VALUES {_keys(lo, lo + 600)}) t(k)")
            c.execute(f"INSERT INTO pb SELECT k, -k FROM (VALUES {_keys(lo, lo + 600)}) t(k)")
        assert c.info.transaction_status == INTRANS
        assert one(c, "SELECT count(*) FROM pa JOIN pb ON pa.k = pb.k") == n  # its own writes
        admin.execute("FLUSH")
        assert one(admin, "SELECT count(*) FROM pa") == 0
        c.rollback()
        assert c.info.transaction_status == IDLE
        admin.execute("FLUSH")
        assert one(admin, "SELECT count(*) FROM pj") == 0 and one(admin, "SELECT n FROM pab") == 0

        # COMMIT: a reader polling the MVs during it sees all of the transaction or none of it
        for lo in range(0, n, 600):
            c.execute(f"INSERT INTO pa SELECT k, k FROM (VALUES {_keys(lo, lo + 600)}) t(k)")
            c.execute(f"INSERT INTO pb SELECT k, -k FROM (VALUES {_keys(lo, lo + 600)}) t(k)")
        seen: list[tuple[float, tuple[object, ...]]] = []  # (when the read started, what it saw)
        stop = threading.Event()

        def poll() -> None:
            with psycopg.connect(dsn, autocommit=True) as r:
                while not stop.is_set():
                    started = time.monotonic()
                    row = r.execute(
                        "SELECT (SELECT count(*) FROM pj), (SELECT n FROM pab), (SELECT count(*) FROM pa), "
                        "(SELECT count(*) FROM pb)"
                    ).fetchone()
                    assert row is not None
                    seen.append((started, tuple(row)))

        poller = threading.Thread(target=poll)
        poller.start()
        while not seen:
            time.sleep(0.01)
        c.commit()
        committed = time.monotonic()
        while seen[-1][0] < committed:
            time.sleep(0.01)
        stop.set()
        poller.join(30)
    states = {state for _, state in seen}
    assert states == {(0, 0, 0, 0), (n, 2 * n, n, n)}, sorted(states)
    assert all(state == (n, 2 * n, n, n) for at, state in seen if at > committed)  # visible on return


def _keys(lo: int, hi: int) -> str:
    return ", ".join(f"({i})" for i in range(lo, hi))


def test_psycopg_status_failed_block_and_savepoints(admin: psycopg.Connection, dsn: str) -> None:
    admin.execute("CREATE TABLE ps (k INT PRIMARY KEY, v INT)")
    with psycopg.connect(dsn) as c:
        c.execute("INSERT INTO ps VALUES (1, 1)")
        with pytest.raises(psycopg.errors.DivisionByZero):
            c.execute("INSERT INTO ps VALUES (2, 1 / 0)")
        assert c.info.transaction_status == INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("SELECT 1")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):  # catalog queries too
            c.execute("SELECT relname FROM pg_catalog.pg_class")
        c.rollback()
        assert one(c, "SELECT count(*) FROM ps") == 0
        c.execute("INSERT INTO ps VALUES (1, 1)")
        with pytest.raises(psycopg.errors.UniqueViolation), c.transaction():  # SAVEPOINT ... ROLLBACK TO
            c.execute("INSERT INTO ps VALUES (2, 2)")
            raise psycopg.errors.UniqueViolation("the application gives up on this part")
        assert c.info.transaction_status == INTRANS
        with c.transaction():
            c.execute("INSERT INTO ps VALUES (3, 3)")
        c.commit()
    assert admin.execute("SELECT k FROM ps ORDER BY k").fetchall() == [(1,), (3,)]
    with psycopg.connect(dsn) as c:  # DDL in a block commits the block's changes first, runs alone
        c.execute("INSERT INTO ps VALUES (4, 4)")
        c.execute("CREATE MATERIALIZED VIEW psm AS SELECT * FROM ps")
        c.rollback()  # nothing left to roll back: the INSERT was committed before the DDL
    assert admin.execute("SELECT k FROM psm ORDER BY k").fetchall() == [(1,), (3,), (4,)]


def test_ready_for_query_status_bytes(admin: psycopg.Connection, server: PgServer) -> None:
    admin.execute("CREATE TABLE rq (k INT PRIMARY KEY)")
    raw = Raw(server.port)

    def status(sql: str) -> bytes:
        raw.send(message(b"Q", cstr(sql)))
        return raw.until(b"Z")[-1][1]

    assert status("SELECT 1") == b"I"
    assert status("BEGIN") == b"T"
    assert status("INSERT INTO rq VALUES (1)") == b"T"
    assert status("SELECT nope") == b"E"
    assert status("SELECT 1") == b"E"
    assert status("ROLLBACK") == b"I"
    assert status("BEGIN; INSERT INTO rq VALUES (2); COMMIT") == b"I"
    # an error in the extended protocol (a Parse error) fails the block too
    assert status("BEGIN") == b"T"
    raw.send(message(b"P", cstr("") + cstr("SELEC 1") + b"\0\0") + message(b"S"))
    assert raw.until(b"Z")[-1][1] == b"E"
    assert status("COMMIT") == b"I"
    raw.sock.close()
    assert admin.execute("SELECT k FROM rq").fetchall() == [(2,)]


def test_disconnect_rolls_back(admin: psycopg.Connection, dsn: str) -> None:
    admin.execute("CREATE TABLE dc (k INT PRIMARY KEY)")
    c = psycopg.connect(dsn)
    c.execute("INSERT INTO dc VALUES (1)")
    c.close()  # without COMMIT
    admin.execute("FLUSH")
    assert one(admin, "SELECT count(*) FROM dc") == 0


# -- pandas and SQLAlchemy ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(server: PgServer) -> Iterator[object]:
    eng = create_engine(f"postgresql+psycopg://root@127.0.0.1:{server.port}/dev")
    yield eng
    eng.dispose()


def test_pandas_to_sql_failing_near_the_end_leaves_the_table_unchanged(
    admin: psycopg.Connection, engine: object
) -> None:
    admin.execute("CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR, age INT)")
    admin.execute("CREATE MATERIALIZED VIEW ages AS SELECT count(*) AS n, sum(age) AS total FROM people")
    admin.execute("INSERT INTO people VALUES (0, 'zero', 40)")
    ages = list(range(1000))
    ages[990] = 2**40  # out of range for INT: the 10th of 10 INSERT batches fails
    df = pd.DataFrame({"id": range(1, 1001), "name": [f"p{i}" for i in range(1000)], "age": ages})
    with pytest.raises(Exception, match="integer out of range"):
        df.to_sql("people", engine, if_exists="append", index=False, chunksize=100)
    admin.execute("FLUSH")
    assert admin.execute("SELECT * FROM people").fetchall() == [(0, "zero", 40)]
    assert admin.execute("SELECT * FROM ages").fetchall() == [(1, 40)]

    ages[990] = 990
    df = df.assign(age=ages)
    df.to_sql("people", engine, if_exists="append", index=False, chunksize=100)
    assert admin.execute("SELECT * FROM ages").fetchall() == [(1001, 40 + sum(range(1000)))]

    # into a new table: CREATE TABLE and the rows commit together, or neither does
    bad = pd.DataFrame({"x": [1, 2, 2**40], "y": ["a", "b", None]})
    with pytest.raises(Exception, match="integer out of range"):
        bad.to_sql("fresh", engine, index=False, dtype={"x": Integer()})
    assert admin.execute("SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'fresh'").fetchone() == (
        0,
    )
    good = bad.assign(x=[1, 2, 3])
    good.to_sql("fresh", engine, index=False, dtype={"x": Integer()})
    assert admin.execute("SELECT x, y FROM fresh ORDER BY x").fetchall() == [(1, "a"), (2, "b"), (3, None)]


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "orm_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String)


def test_sqlalchemy_orm_add_flush_rollback(admin: psycopg.Connection, engine: object) -> None:
    Base.metadata.create_all(engine)  # CREATE TABLE inside SQLAlchemy's transaction
    with Session(engine) as session:  # type: ignore[call-overload]
        session.add_all([Item(id=1, name="one"), Item(id=2, name="two")])
        session.flush()  # INSERTs sent, inside the transaction
        assert session.scalars(text("SELECT name FROM orm_items ORDER BY id")).all() == ["one", "two"]
        assert one(admin, "SELECT count(*) FROM orm_items") == 0
        session.rollback()
        assert session.get(Item, 1) is None

        session.add(Item(id=1, name="one"))
        nested = session.begin_nested()  # SAVEPOINT
        session.add(Item(id=2, name="two"))
        session.flush()
        nested.rollback()  # ROLLBACK TO SAVEPOINT: only the second item goes
        session.commit()
    assert admin.execute("SELECT id, name FROM orm_items").fetchall() == [(1, "one")]
    with Session(engine) as session:  # type: ignore[call-overload]
        item = session.get(Item, 1)
        assert item is not None
        item.name = "uno"
        session.commit()
    assert admin.execute("SELECT name FROM orm_items").fetchall() == [("uno",)]


# -- SIGKILL during COMMIT ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(data_dir: Path, port: int) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "piestream.cli", "serve", "--runner", "local", "--data-dir", str(data_dir)]
    args += ["--port", str(port), "--barrier-interval", "0.2"]
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(f"host=127.0.0.1 port={port} user=root dbname=dev", connect_timeout=2):
                return proc
        except psycopg.OperationalError:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read() if proc.stderr else ''}") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def test_sigkill_during_commit_leaves_all_or_nothing(tmp_path: Path) -> None:
    """Each round a transaction inserts into two tables (and creates a third), the client sends
    COMMIT, and the server is killed a moment later: from at once to past the time a commit takes.
    After a restart the transaction is wholly there or wholly absent, and so is its table; a
    COMMIT the client saw succeed is always there."""
    data = tmp_path / "db"
    port = _free_port()
    proc = _serve(data, port)
    dsn = f"host=127.0.0.1 port={port} user=root dbname=dev"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE ka (k INT PRIMARY KEY, r INT)")
        c.execute("CREATE TABLE kb (k INT PRIMARY KEY, r INT)")
        c.execute(
            "CREATE MATERIALIZED VIEW kj AS "
            "SELECT ka.r, count(*) AS n FROM ka JOIN kb ON ka.k = kb.k GROUP BY ka.r"
        )
    rows = 4000
    outcomes = []
    commit_seconds = 0.5
    try:
        for r in range(7):
            acked = threading.Event()
            with psycopg.connect(dsn) as c:
                c.execute(f"CREATE TABLE kt{r} (r INT)")
                c.execute(f"INSERT INTO kt{r} VALUES ({r})")
                for lo in range(0, rows, 1000):
                    keys = _keys(r * rows + lo, r * rows + lo + 1000)
                    c.execute(f"INSERT INTO ka SELECT k, {r} FROM (VALUES {keys}) t(k)")
                    c.execute(f"INSERT INTO kb SELECT k, {r} FROM (VALUES {keys}) t(k)")

                def commit(conn: psycopg.Connection = c, acked: threading.Event = acked) -> None:
                    try:
                        conn.commit()
                        acked.set()
                    except psycopg.Error:
                        pass

                started = time.monotonic()
                t = threading.Thread(target=commit)
                t.start()
                if r == 0:
                    t.join(60)  # a commit that is not killed, to time one
                    commit_seconds = time.monotonic() - started
                else:
                    time.sleep(commit_seconds * r / 4)  # before, during and after the commit point
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
                    t.join(30)
                    proc = _serve(data, port)
            with psycopg.connect(dsn, autocommit=True) as check:
                na = one(check, f"SELECT count(*) FROM ka WHERE r = {r}")
                nb = one(check, f"SELECT count(*) FROM kb WHERE r = {r}")
                nj = check.execute(f"SELECT n FROM kj WHERE r = {r}").fetchall()
                has_table = check.execute(
                    f"SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'kt{r}'"
                ).fetchone() == (1,)
                assert (na, nb, nj) in ((0, 0, []), (rows, rows, [(rows,)])), (r, na, nb, nj)
                assert has_table == (na == rows), (r, has_table, na)
                if has_table:
                    assert check.execute(f"SELECT r FROM kt{r}").fetchall() == [(r,)]
                if acked.is_set():
                    assert na == rows
                outcomes.append(na == rows)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert outcomes[0]
