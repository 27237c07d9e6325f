"""Reading tables and MVs from Spark: types, NULLs, hidden columns, one snapshot per read.

The server runs in-process (local runner) on the test's data directory; Spark reads it through
``format("piestream")`` in its own planner and executor processes, i.e. read-only, from the
meta store and the object store.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from piestream.connectors.spark import register
from piestream.connectors.spark.data_source import Options, SnapshotReader, VnodePartition
from piestream.connectors.spark.spark_types import spark_schema
from piestream.server.database import Database, DatabaseConfig

pytestmark = pytest.mark.spark

TYPES_DDL = """CREATE TABLE t (k int PRIMARY KEY, b boolean, sm smallint, bi bigint, n numeric, r real,
    d double precision, v varchar, j jsonb, by bytea, dt date, ts timestamp, tz timestamptz, tm time,
    iv interval, l int[], st struct<a int, s varchar>, li interval[])"""
TYPES_ROW = """INSERT INTO t VALUES (1, true, 2, 3, 1.5, 2.5, 3.5, 'x', '{"a": 1}', '\\x0102', '2024-01-02',
    '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05+00', '12:34:56', '1 day 02:00:00',
    ARRAY[1, NULL, 3], ROW(1, 'y'), ARRAY[interval '1 hour']), (2, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"""


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(tmp_path / "db", config=DatabaseConfig(runner="local", barrier_interval=0.2))
    yield d
    d.close()


def _reader(db: Database, table: str, **opts: str):  # type: ignore[no-untyped-def]
    return lambda spark: (
        spark.read.format("piestream")
        .option("table", table)
        .option("data_dir", str(db.data_dir))
        .options(**opts)
    )


def test_read_every_type_with_nulls_hidden_columns_and_mvs(spark, db: Database) -> None:  # type: ignore[no-untyped-def]
    register(spark)
    s = db.session()
    s.execute(TYPES_DDL)
    s.execute(TYPES_ROW)
    s.execute("CREATE TABLE nopk (a int, b varchar)")
    s.execute("INSERT INTO nopk VALUES (1, 'one'), (2, NULL)")
    s.execute("CREATE MATERIALIZED VIEW mv AS SELECT v, count(*) AS c FROM t GROUP BY v")

    df = _reader(db, "t")(spark).load()
    assert df.schema.simpleString() == (
        "struct<k:int,b:boolean,sm:smallint,bi:bigint,n:decimal(38,10),r:float,d:double,v:string,"
        "j:string,by:binary,dt:date,ts:timestamp_ntz,tz:timestamp,tm:string,iv:string,l:array<int>,"
        "st:struct<a:int,s:string>,li:array<string>>"
    )
    rows = [r.asDict(recursive=True) for r in df.orderBy("k").collect()]
    assert rows[0] == {
        "k": 1,
        "b": True,
        "sm": 2,
        "bi": 3,
        "n": Decimal("1.5000000000"),
        "r": 2.5,
        "d": 3.5,
        "v": "x",
        "j": '{"a": 1}',
        "by": bytearray(b"\x01\x02"),
        "dt": dt.date(2024, 1, 2),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        "tz": dt.datetime(2024, 1, 2, 3, 4, 5),  # Spark shows instants in its session zone (UTC here)
        "tm": "12:34:56",
        "iv": "1 day 02:00:00",
        "l": [1, None, 3],
        "st": {"a": 1, "s": "y"},
        "li": ["01:00:00"],
    }
    assert rows[1] == {"k": 2, **{name: None for name in rows[0] if name != "k"}}

    # hidden columns (the row id of a table without a primary key) only on request
    assert _reader(db, "nopk")(spark).load().columns == ["a", "b"]
    hidden = _reader(db, "nopk", include_hidden="true")(spark).load()
    assert hidden.columns == ["a", "b", "_row_id"]
    assert hidden.schema["_row_id"].dataType.simpleString() == "bigint"
    assert sorted(r.a for r in hidden.collect()) == [1, 2]

    # an MV, with a user-given schema selecting columns, and a singleton-free partition count
    mv = _reader(db, "mv", partitions="3")(spark).load()
    assert mv.rdd.getNumPartitions() == 3
    assert sorted((r.v, r.c) for r in mv.collect() if r.v is not None) == [("x", 1)]
    only_c = _reader(db, "mv")(spark).schema("c bigint").load()
    assert sorted(r.c for r in only_c.collect()) == [1, 1]

    with pytest.raises(Exception, match="does not exist"):
        _reader(db, "missing")(spark).load()


def test_partitions_share_one_snapshot_epoch(db: Database) -> None:
    """Planning picks one epoch and ships it (and the SSTs it needs) in every partition: reads
    after later DML, compaction and vacuum (within the retention time) still see that epoch."""
    s = db.session()
    s.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
    values = ", ".join(f"({k}, 0)" for k in range(500))
    s.execute(f"INSERT INTO t VALUES {values}")
    rel = db.catalog.get("t")
    assert rel is not None
    schema = spark_schema([(c.name, c.data_type) for c in rel.visible_columns])
    reader = SnapshotReader(Options.parse({"table": "t", "data_dir": str(db.data_dir)}), schema)
    parts = reader.partitions()
    assert len(parts) == 8
    assert all(isinstance(p, VnodePartition) for p in parts)
    assert {p.epoch for p in parts} == {db.hummock.max_committed_epoch}  # type: ignore[attr-defined]
    assert [(p.vnode_lo, p.vnode_hi) for p in parts] == [(i * 32, i * 32 + 32) for i in range(8)]  # type: ignore[attr-defined]

    for _ in range(3):
        s.execute("UPDATE t SET v = v + 1")
    db.hummock.compact_until_idle()
    db.hummock.vacuum()  # the retention time keeps the SSTs the snapshot still reads

    rows = [r for p in parts for b in reader.read(p) for r in zip(*b.to_pydict().values(), strict=True)]
    assert sorted(rows) == [(k, 0) for k in range(500)]
    assert s.execute("SELECT min(v), max(v) FROM t")[0].rows == [(3, 3)]


def test_a_read_sees_one_epoch_while_dml_continues(spark, db: Database) -> None:  # type: ignore[no-untyped-def]
    """`UPDATE t SET v = v + 1` keeps every row equal in every committed epoch; a read whose
    partitions saw different epochs would mix values."""
    register(spark)
    s = db.session()
    s.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
    n = 2000
    s.execute("INSERT INTO t VALUES " + ", ".join(f"({k}, 0)" for k in range(n)))
    stop = threading.Event()

    def updates() -> None:
        w = db.session()
        while not stop.is_set():
            w.execute("UPDATE t SET v = v + 1")

    writer = threading.Thread(target=updates)
    writer.start()
    seen = set()
    try:
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            rows = _reader(db, "t")(spark).load().collect()
            assert len(rows) == n
            values = {r.v for r in rows}
            assert len(values) == 1, f"one read saw several epochs: {sorted(values)[:5]}"
            seen |= values
    finally:
        stop.set()
        writer.join()
    assert len(seen) >= 2, "the DML did not progress during the reads"
