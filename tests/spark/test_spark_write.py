"""Writing DataFrames into tables: batch appends, deletes via an op column, streaming exactly once.

Spark stages the rows and publishes a manifest in the data directory's inbox; the Database (in
this process, local runner) ingests it at its next epoch and records it consumed in the same
meta-store transaction as the epoch's commit.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from piestream.common.interval import Interval
from piestream.connectors.spark import register
from piestream.meta.inbox import CONSUMED_NS, inbox_dir
from piestream.server.database import Database, DatabaseConfig

pytestmark = pytest.mark.spark

CONFIG = DatabaseConfig(runner="local", barrier_interval=0.2)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(tmp_path / "db", config=CONFIG)
    yield d
    d.close()


def _write(df, data_dir: Path, table: str, **opts: str) -> None:  # type: ignore[no-untyped-def]
    w = df.write.format("piestream").option("table", table).option("data_dir", str(data_dir))
    w.options(**opts).mode("append").save()


def _rows(db: Database, sql: str) -> list[tuple[object, ...]]:
    return db.session().execute(sql)[0].rows


def _inbox_files(data_dir: Path) -> list[str]:
    root = inbox_dir(data_dir)
    return sorted(str(p.relative_to(root)) for sub in ("staging", "ready") for p in (root / sub).rglob("*"))


def test_batch_write_casts_to_column_types_then_select(spark, db: Database) -> None:  # type: ignore[no-untyped-def]
    register(spark)
    s = db.session()
    s.execute(
        "CREATE TABLE t (k int PRIMARY KEY, v varchar, n numeric, r real, ts timestamp, tz timestamptz, "
        "iv interval, tm time, l bigint[], st struct<a int, b varchar>)"
    )
    s.execute("CREATE TABLE log (a bigint, b varchar)")  # no primary key: a hidden row id
    df = spark.createDataFrame(
        [
            (
                1,
                "a",
                Decimal("1.123456789012"),
                2.5,
                dt.datetime(2024, 1, 2, 3, 4, 5),
                dt.datetime(2024, 1, 2, 3, 4, 5),
                "1 day 02:00:00",
                "12:00:00",
                [1, 2],
                (7, "x"),
            ),
            (2, None, None, None, None, None, None, None, None, None),
        ],
        "k long, v string, n decimal(20,12), r double, ts timestamp_ntz, tz timestamp, iv string, "
        "tm string, l array<int>, st struct<a:long,b:string>",
    )
    _write(df, db.data_dir, "t")  # a live server: save() returns once the rows are ingested
    assert _rows(db, "SELECT * FROM t ORDER BY k") == [
        (
            1,
            "a",
            Decimal("1.1234567890"),
            2.5,
            dt.datetime(2024, 1, 2, 3, 4, 5),
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
            Interval(0, 1, 2 * 3600 * 10**6),
            dt.time(12),
            [1, 2],
            {"a": 7, "b": "x"},
        ),
        (2, None, None, None, None, None, None, None, None, None),
    ]

    # a subset of the columns (the others are NULL), many partitions, a table with a row id
    _write(spark.range(0, 1000, numPartitions=4).selectExpr("id AS a"), db.data_dir, "log")
    assert _rows(db, "SELECT count(*), count(DISTINCT a), count(b) FROM log") == [(1000, 1000, 0)]
    assert _inbox_files(db.data_dir) == []  # consumed writes leave nothing behind
    assert len(db.meta.scan(CONSUMED_NS)) == 2

    # a column the table lacks fails while planning (bad values fail the tasks: test_inbox.py)
    with pytest.raises(Exception, match='column "nope" of relation "t" does not exist'):
        _write(spark.createDataFrame([(3, 1)], "k int, nope int"), db.data_dir, "t")
    assert _rows(db, "SELECT count(*) FROM t") == [(2,)]


def test_deletes_and_upserts_via_op_column(spark, db: Database) -> None:  # type: ignore[no-untyped-def]
    register(spark)
    s = db.session()
    s.execute("CREATE TABLE t (k int PRIMARY KEY, v varchar)")
    s.execute("CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n FROM t")
    s.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    changes = spark.createDataFrame(
        [(1, None, "-"), (2, "B", "+"), (4, "d", "insert"), (3, None, "DELETE"), (5, "e", "U+")],
        "k int, v string, op string",
    ).coalesce(1)  # one part: the changes keep their order
    _write(changes, db.data_dir, "t", op_column="op")
    assert _rows(db, "SELECT k, v FROM t ORDER BY k") == [(2, "B"), (4, "d"), (5, "e")]
    assert _rows(db, "SELECT n FROM c") == [(3,)]  # MVs see the deletes as retractions

    s.execute("CREATE TABLE log (k int)")
    with pytest.raises(Exception, match="op_column needs a table with a primary key"):
        _write(spark.createDataFrame([(1, "-")], "k int, op string"), db.data_dir, "log", op_column="op")


def _stream(spark, src: Path, data_dir: Path, ckpt: Path) -> None:  # type: ignore[no-untyped-def]
    q = (
        spark.readStream.schema("id long, v string")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .writeStream.format("piestream")
        .option("table", "events")
        .option("data_dir", str(data_dir))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()


def _add_file(src: Path, i: int) -> None:
    lines = [json.dumps({"id": k, "v": f"v{k}"}) for k in range(i * 10, i * 10 + 10)]
    (src / f"part-{i:03d}.json").write_text("\n".join(lines) + "\n")


def test_streaming_write_restarted_and_replayed_is_exactly_once(spark, db: Database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Micro-batches become manifests named by query id and batch id. A restart with the same
    checkpoint continues; a batch Spark replays (its commit log entry lost in a crash after our
    sink published) publishes the same id again and is not ingested twice."""
    register(spark)
    db.session().execute("CREATE TABLE events (id bigint, v varchar)")  # no pk: duplicates would show
    src, ckpt = tmp_path / "src", tmp_path / "ckpt"
    src.mkdir()
    for i in range(3):
        _add_file(src, i)
    _stream(spark, src, db.data_dir, ckpt)
    assert _rows(db, "SELECT count(*), count(DISTINCT id) FROM events") == [(30, 30)]

    # crash simulation: the sink committed batch 2 but Spark's commit log did not record it
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    assert last == 2
    os.remove(ckpt / "commits" / str(last))
    os.remove(ckpt / "commits" / f".{last}.crc")
    for i in range(3, 5):
        _add_file(src, i)
    _stream(spark, src, db.data_dir, ckpt)  # replays batch 2, then batches 3 and 4
    assert _rows(db, "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM events") == [(50, 50, 0, 49)]
    consumed = [k for k, _ in db.meta.scan(CONSUMED_NS)]
    assert len(consumed) == 5 and all(k.startswith("stream-") for k in consumed)
    assert {k.rsplit("-", 1)[1] for k in consumed} == {"0", "1", "2", "3", "4"}
    assert _inbox_files(db.data_dir) == []


def test_published_while_no_server_runs_is_ingested_once_after_reopening(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(spark)
    path = tmp_path / "db"
    db = Database(path, config=CONFIG)
    db.session().execute("CREATE TABLE t (k int PRIMARY KEY, v varchar)")
    db.close()  # the server is down (or was killed) when Spark writes

    df = spark.createDataFrame([(k, f"v{k}") for k in range(100)], "k int, v string").repartition(3)
    _write(df, path, "t")  # returns at once: no live server to wait for
    assert len(list((inbox_dir(path) / "ready").glob("*.json"))) == 1

    db = Database(path, config=CONFIG)
    try:
        db.barriers.flush()
        assert _rows(db, "SELECT count(*) FROM t") == [(100,)]
        assert _inbox_files(path) == []
    finally:
        db.close()
    db = Database(path, config=CONFIG)  # nothing is ingested a second time
    try:
        db.barriers.flush()
        assert _rows(db, "SELECT count(*), min(k), max(k) FROM t") == [(100, 0, 99)]
    finally:
        db.close()
