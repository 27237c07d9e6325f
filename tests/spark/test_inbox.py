"""The inbox without Spark: exactly-once ingestion across crashes, rejected writes, casts,
staging GC, and the vacuum retention time that protects snapshot reads in other processes.

The crash tests kill a real server process (`os._exit`) inside the epoch's commit transaction
and right after it, then reopen the data directory.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from piestream.common.chunk import Op
from piestream.common.errors import InvalidInput
from piestream.connectors.spark.data_source import Options, WritePlan
from piestream.frontend.catalog import Relation
from piestream.meta.inbox import (
    CONSUMED_NS,
    MAX_FAILED_EPOCHS,
    Inbox,
    Manifest,
    expected_schema,
    inbox_dir,
    publish,
    stage_part,
)
from piestream.server.database import Database, DatabaseConfig

SLOW = DatabaseConfig(runner="local", barrier_interval=3600)  # epochs only when asked (and at start)


def _relation(db: Database, name: str) -> Relation:
    rel = db.catalog.get(name)
    assert rel is not None
    return rel


def _publish(path: Path, rel: Relation, keys: range, write_id: str) -> Manifest:
    schema = expected_schema(rel, ["k", "v"], False)
    batch = pa.record_batch(
        [pa.array(list(keys), pa.int32()), pa.array([f"v{k}" for k in keys], pa.string())], schema=schema
    )
    part = stage_part(path, write_id, "part-0-0", schema, [batch])
    assert part is not None
    m = Manifest(write_id, rel.name, rel.id, ["k", "v"], False, [part])
    assert publish(path, m)
    return m


def _new_db(path: Path) -> Relation:
    with Database(path, config=SLOW) as db:
        db.session().execute("CREATE TABLE t (k int PRIMARY KEY, v varchar)")
        return _relation(db, "t")


def _count(path: Path) -> tuple[object, ...]:
    with Database(path, config=SLOW) as db:
        db.barriers.flush()
        assert not list((inbox_dir(path) / "ready").glob("*.json"))
        assert not list((inbox_dir(path) / "staging").iterdir())
        consumed = [k for k, _ in db.meta.scan(CONSUMED_NS)]
        return (*db.session().execute("SELECT count(*), sum(k) FROM t")[0].rows[0], consumed)


def test_publish_is_first_wins_and_ingestion_is_once(tmp_path: Path) -> None:
    path = tmp_path / "db"
    rel = _new_db(path)
    m = _publish(path, rel, range(10), "w1")
    assert not publish(path, m)  # the same id again (a replayed batch): not published twice
    assert _count(path) == (10, 45, ["w1"])
    # the same write arriving after it was consumed is dropped, not ingested
    _publish(path, rel, range(10), "w1")
    assert _count(path) == (10, 45, ["w1"])


@pytest.mark.parametrize(
    "where",
    ["record", "committed"],
    ids=["killed-inside-the-commit-transaction", "killed-after-commit-before-cleanup"],
)
def test_server_killed_while_ingesting_ingests_exactly_once(tmp_path: Path, where: str) -> None:
    path = tmp_path / "db"
    rel = _new_db(path)
    _publish(path, rel, range(100), "w1")
    script = textwrap.dedent(
        f"""
        import os, time
        from piestream.meta.inbox import InboxBatch
        from piestream.server.database import Database, DatabaseConfig
        original = InboxBatch.{where}
        def die(self, *args):
            if {where == "record"}:  # the consumed marker is written, the transaction still open
                original(self, *args)
            os._exit(7)  # committed: dies before removing the files
        InboxBatch.{where} = die
        Database({str(path)!r}, config=DatabaseConfig(runner="local", barrier_interval=0.05))
        time.sleep(60)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], check=False, timeout=120, capture_output=True, text=True
    )
    assert proc.returncode == 7, proc.stderr
    ready = list((inbox_dir(path) / "ready").glob("*.json"))
    assert len(ready) == 1  # the files outlive the crash either way
    assert _count(path) == (100, 4950, ["w1"])  # both ways: the rows exactly once


def test_bad_writes_are_set_aside_and_epochs_go_on(tmp_path: Path) -> None:
    path = tmp_path / "db"
    rel = _new_db(path)
    with Database(path, config=SLOW) as db:
        s = db.session()
        s.execute("DROP TABLE t")
        s.execute("CREATE TABLE t (k int PRIMARY KEY, v varchar)")  # a new table, a new id
        _publish(path, rel, range(5), "stale-table")  # written against the dropped one
        _publish(path, _relation(db, "t"), range(3), "good")
        (inbox_dir(path) / "ready" / "garbage.json").write_text("{not json")
        db.barriers.flush()
        assert s.execute("SELECT count(*) FROM t")[0].rows == [(3,)]
        failed = sorted(p.name for p in (inbox_dir(path) / "failed").iterdir())
        assert failed == ["garbage.json", "stale-table.json"]
        assert "no longer exists" in (inbox_dir(path) / "failed" / "stale-table.json").read_text()


def test_a_manifest_whose_epochs_keep_failing_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "db"
    rel = _new_db(path)
    with Database(path, config=SLOW) as db:
        other = tmp_path / "other"  # a second inbox over the same catalog, driven by hand
        inbox = Inbox(other, db.catalog, db.meta)
        _publish(other, rel, range(3), "w")
        for _ in range(MAX_FAILED_EPOCHS):
            batch = inbox.collect()  # an epoch takes it in ... and never commits
            assert batch is not None and batch.rows == 3
        assert inbox.collect() is None
        assert (inbox_dir(other) / "failed" / "w.json").exists()


def test_old_orphaned_staging_is_collected(tmp_path: Path) -> None:
    path = tmp_path / "db"
    rel = _new_db(path)
    with Database(path, config=SLOW) as db:
        _publish(path, rel, range(3), "ready-one")
        schema = expected_schema(rel, ["k", "v"], False)
        batch = pa.record_batch([pa.array([1], pa.int32()), pa.array(["x"])], schema=schema)
        stage_part(path, "crashed-writer", "part-0-0", schema, [batch])
        assert db.inbox.gc_staging(now=time.time()) == 0  # too young
        assert db.inbox.gc_staging(now=time.time() + 2 * 24 * 3600) == 1  # the manifest's stays
        staged = sorted(p.name for p in (inbox_dir(path) / "staging").iterdir())
        assert staged == ["ready-one"]


def test_write_plan_casts_values_and_names_the_column(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with Database(path, config=SLOW) as db:
        db.session().execute("CREATE TABLE t (k int PRIMARY KEY, iv interval, n numeric)")
    opts = Options.parse({"table": "t", "data_dir": str(path), "op_column": "op"})
    schema = StructType(
        [
            StructField("k", LongType()),
            StructField("iv", StringType()),
            StructField("n", DoubleType()),
            StructField("op", StringType()),
        ]
    )
    plan = WritePlan.build(opts, schema, overwrite=False)
    target = plan.arrow_schema()
    batch = pa.record_batch(
        [pa.array([1, 2]), pa.array(["1 day", None]), pa.array([1.5, None]), pa.array(["+", " Delete "])],
        names=["k", "iv", "n", "op"],
    )
    out = plan.convert(batch, target)
    assert out.schema == target
    assert out.column("k").type == pa.int32()
    assert out.column(3).to_pylist() == [Op.INSERT, Op.DELETE]

    bad = batch.set_column(1, "iv", pa.array(["1 day", "later"]))
    with pytest.raises(InvalidInput, match='column "iv" \\(interval\\): invalid input syntax'):
        plan.convert(bad, target)
    too_big = batch.set_column(0, "k", pa.array([1, 2**40]))
    with pytest.raises(InvalidInput, match='column "k" \\(integer\\): integer out of range'):
        plan.convert(too_big, target)
    bad_op = batch.set_column(3, "op", pa.array(["+", "upsert"]))
    with pytest.raises(InvalidInput, match="'upsert' is not one of"):
        plan.convert(bad_op, target)
    with pytest.raises(InvalidInput, match='primary key column "k" is missing'):
        WritePlan.build(
            Options.parse({"table": "t", "data_dir": str(path)}),
            StructType([StructField("n", IntegerType())]),
            False,
        )
    with pytest.raises(Exception, match="only appends"):
        WritePlan.build(Options.parse({"table": "t", "data_dir": str(path)}), schema, True)


def test_vacuum_keeps_replaced_objects_for_the_retention_time(tmp_path: Path) -> None:
    """Spark tasks reading a snapshot cannot pin its version in the server: SSTs compaction
    replaced stay until they have been unreferenced for `vacuum_retention_sec`."""
    config = DatabaseConfig(runner="local", barrier_interval=3600, background_compaction=False)
    with Database(tmp_path / "db", config=config) as db:
        s = db.session()
        s.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
        for i in range(6):
            s.execute(f"INSERT INTO t VALUES ({i}, {i})")
        before = db.hummock.version
        assert db.hummock.compact_until_idle() > 0
        replaced = before.object_ids() - db.hummock.version.object_ids()
        assert replaced
        assert db.hummock.vacuum() == 0  # the default (300 s) keeps them
        assert db.hummock.vacuum(now=time.time() + 299) == 0
        assert db.hummock.vacuum(now=time.time() + 301) == len(replaced)


def test_rows_written_for_the_columns_before_add_column_read_its_default(tmp_path: Path) -> None:
    """A Spark write planned before ALTER TABLE ADD COLUMN (its manifest names the old columns)
    and published after it: its rows read the added column's default, as an INSERT omitting it."""
    path = tmp_path / "db"
    with Database(path, config=SLOW) as db:
        s = db.session()
        s.execute("CREATE TABLE t (k int PRIMARY KEY, v varchar)")
        rel = _relation(db, "t")  # what the Spark job planned with
        s.execute("INSERT INTO t VALUES (100, 'before')")
        s.execute("ALTER TABLE t ADD COLUMN w int DEFAULT 7")
        s.execute("ALTER TABLE t ADD COLUMN x varchar")
        _publish(path, rel, range(3), "w-old")
        db.barriers.flush()
        rows = s.execute("SELECT k, v, w, x FROM t ORDER BY k")[0].rows
        assert rows == [(0, "v0", 7, None), (1, "v1", 7, None), (2, "v2", 7, None), (100, "before", 7, None)]
        assert [k for k, _ in db.meta.scan(CONSUMED_NS)] == ["w-old"]
