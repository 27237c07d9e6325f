"""Chunked backfill (issue 16 §6): a new MV over a big table reads its snapshot a bounded number
of rows per epoch while the table keeps changing, and still equals its query (checked against
DuckDB over the same rows); its progress moves in ``rw_catalog.rw_ddl_progress``; a SIGKILL in
the middle of a backfill resumes from the committed position after a restart."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from piestream.common.errors import PiestreamError
from piestream.server.database import Database, DatabaseConfig
from piestream.stream.executor import StreamingConfig

ROWS = 20_000
MVS = {
    "m_agg": "SELECT g, count(*) AS n, sum(v) AS s, max(k) AS hi FROM a GROUP BY g",
    "m_filter": "SELECT k, v FROM a WHERE v % 3 = 0",
    "m_join": "SELECT a.k, a.v, b.name FROM a JOIN b ON a.g = b.g WHERE a.k % 5 = 1",
}


def _db(path: Path, per_epoch: int) -> Database:
    config = DatabaseConfig(
        runner="local",
        barrier_interval=0.02,
        parallelism=2,
        streaming=StreamingConfig(backfill_rows_per_epoch=per_epoch),
    )
    return Database(path, config=config)


def _load(db: Database) -> None:
    db.execute("CREATE TABLE a (k int PRIMARY KEY, g int, v int)")
    db.execute("CREATE TABLE b (g int PRIMARY KEY, name varchar)")
    db.execute(f"INSERT INTO a SELECT x, x % 7, x FROM generate_series(0, {ROWS - 1}) AS s(x)")
    db.execute("INSERT INTO b SELECT x, 'g' || x FROM generate_series(0, 5) AS s(x)")


def _dml(db: Database, seed: int, stop: threading.Event, done: list[int]) -> None:
    """Single-statement inserts, updates (some moving the pk), deletes, until `stop`."""
    rng = random.Random(seed)
    s = db.session()
    i = 0
    while not stop.is_set():
        k = rng.randrange(ROWS)
        sql = rng.choice(
            [
                f"INSERT INTO a VALUES ({ROWS + 10 * i + seed}, {rng.randrange(9)}, {rng.randrange(1000)})",
                f"UPDATE a SET v = v + {rng.randrange(1, 5)} WHERE k = {k}",
                f"UPDATE a SET k = k + {3 * ROWS} WHERE k = {k}",  # moves a row across the position
                f"DELETE FROM a WHERE k = {k}",
                f"UPDATE a SET g = {rng.randrange(9)} WHERE k >= {k} AND k < {k + 40}",
            ]
        )
        s.execute(sql)
        i += 1
    done.append(i)


def _duck_expected(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    a = db.execute("SELECT k, g, v FROM a")[0]
    b = db.execute("SELECT g, name FROM b")[0]
    con = duckdb.connect()
    con.register(
        "a", pa.table({"k": [r[0] for r in a.rows], "g": [r[1] for r in a.rows], "v": [r[2] for r in a.rows]})
    )
    con.register("b", pa.table({"g": [r[0] for r in b.rows], "name": [r[1] for r in b.rows]}))
    return {name: sorted(con.execute(q).fetchall()) for name, q in MVS.items()}


def _check(db: Database) -> None:
    expected = _duck_expected(db)
    for name in MVS:
        got = sorted(db.execute(f"SELECT * FROM {name}")[0].rows)
        assert got == expected[name], f"{name} differs from its query"


def test_backfill_in_chunks_under_concurrent_dml_equals_query(tmp_path: Path) -> None:
    db = _db(tmp_path, per_epoch=700)
    try:
        _load(db)
        stop = threading.Event()
        counts: list[int] = []
        writers = [threading.Thread(target=_dml, args=(db, seed, stop, counts)) for seed in (1, 2)]
        seen: list[tuple[Any, ...]] = []

        refused: list[str] = []

        def watch() -> None:
            s = db.session()
            while not stop.is_set():
                rows = s.execute(
                    "SELECT name, rows_done, rows_total, vnodes_done, vnodes_total "
                    "FROM rw_catalog.rw_ddl_progress"
                )[0].rows
                seen.extend(rows)
                for name, *_ in rows:  # a partial MV is never read
                    try:
                        s.execute(f"SELECT count(*) FROM {name}")
                    except PiestreamError as e:
                        if e.sqlstate == "55000":
                            refused.append(name)
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        for t in [*writers, watcher]:
            t.start()
        try:
            for name, q in MVS.items():
                db.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
        finally:
            stop.set()
            for t in [*writers, watcher]:
                t.join()
        assert sum(counts) > 20, "the DML ran during the backfills"
        db.barriers.flush()
        _check(db)
        # the progress view moved: several distinct positions of the first MV, all below done
        agg = sorted({r[1] for r in seen if r[0] == "m_agg"})
        assert len(agg) >= 3, seen
        assert all(0 <= r[1] <= r[2] for r in seen), seen
        assert all(r[3] < r[4] for r in seen)  # a finished job leaves the view
        assert db.execute("SELECT * FROM rw_catalog.rw_ddl_progress")[0].rows == []
        assert "m_agg" in refused
        # after the backfills the MVs just follow the changes
        _dml_for(db, 0.5)
        db.barriers.flush()
        _check(db)
    finally:
        db.close()


def _dml_for(db: Database, seconds: float) -> None:
    stop = threading.Event()
    t = threading.Thread(target=_dml, args=(db, 3, stop, []))
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()


CHILD = r"""
import json, sys, threading, time
from piestream.server.database import Database, DatabaseConfig
from piestream.stream.executor import StreamingConfig
db = Database(sys.argv[1], config=DatabaseConfig(runner="local", barrier_interval=0.02, parallelism=2,
              streaming=StreamingConfig(backfill_rows_per_epoch=150)))
s = db.session()
s.execute("CREATE TABLE a (k int PRIMARY KEY, g int, v int)")
s.execute("INSERT INTO a SELECT x, x %% 7, x FROM generate_series(0, %d) AS s(x)" % (int(sys.argv[2]) - 1))
def watch():
    w = db.session()
    while True:
        for r in w.execute("SELECT rows_done FROM rw_catalog.rw_ddl_progress")[0].rows:
            print(json.dumps({"rows_done": r[0]}), flush=True)
        time.sleep(0.02)
def dml():
    d = db.session(); i = 0
    while True:
        d.execute("UPDATE a SET v = v + 1 WHERE k = %d" % (i * 7919 % int(sys.argv[2])))
        d.execute("DELETE FROM a WHERE k = %d" % (i * 104729 % int(sys.argv[2])))
        i += 1
threading.Thread(target=watch, daemon=True).start()
threading.Thread(target=dml, daemon=True).start()
s.execute("CREATE MATERIALIZED VIEW m AS SELECT g, count(*) AS n, sum(v) AS s FROM a GROUP BY g")
print(json.dumps({"created": True}), flush=True)
"""


def test_sigkill_mid_backfill_resumes_after_restart(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(ROWS)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    last = 0
    try:
        for line in child.stdout:
            event = json.loads(line)
            assert "created" not in event, "the backfill finished before the kill"
            last = max(last, event["rows_done"])
            if last >= 2000:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert last >= 2000
    db = _db(tmp_path, per_epoch=300)
    try:
        first = db.execute("SELECT rows_done, rows_total FROM rw_catalog.rw_ddl_progress")[0].rows
        # it resumes where the last committed epoch stopped, not from the start
        assert first and first[0][0] >= last, first
        with pytest.raises(PiestreamError) as partial:
            db.execute("SELECT * FROM m")
        assert partial.value.sqlstate == "55000"
        deadline = time.monotonic() + 120
        while db.execute("SELECT * FROM rw_catalog.rw_ddl_progress")[0].rows:
            assert time.monotonic() < deadline, "the backfill did not finish after the restart"
            time.sleep(0.1)
        got = sorted(db.execute("SELECT * FROM m")[0].rows)
        want = sorted(db.execute("SELECT g, count(*), sum(v) FROM a GROUP BY g")[0].rows)
        assert got == want
        assert sum(r[1] for r in got) < ROWS  # the child's deletes are in both
    finally:
        db.close()
