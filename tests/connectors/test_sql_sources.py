"""Sources through SQL: datagen, the combined Nexmark source with RisingWave's views, options
errors at CREATE, EXPLAIN, DROP / SHOW; and one end-to-end run on Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from nexmark_sql import BID_COLUMNS, bid_table, expected_bids, wait_until

from piestream.common.errors import PiestreamError
from piestream.connectors import nexmark_combined_ddl
from piestream.connectors.sinks import read_sink
from piestream.server.database import Database, DatabaseConfig


def _db(path: Path) -> Database:
    return Database(
        path, config=DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)
    )


def test_datagen_sequence_and_random_fields(tmp_path: Path) -> None:
    db = _db(tmp_path / "db")
    try:
        db.execute(
            "CREATE TABLE g (id BIGINT, v INT, s VARCHAR, f DOUBLE, b BOOLEAN, ts TIMESTAMP) WITH ("
            "connector = 'datagen', fields.id.kind = 'sequence', fields.id.start = '1', "
            "fields.id.end = '300', fields.v.min = '5', fields.v.max = '9', fields.v.seed = '3', "
            "fields.s.length = '4', fields.f.min = '0', fields.f.max = '1', "
            "datagen.rows.per.second = '4000', datagen.split.num = '3')"
        )
        wait_until(lambda: db.execute("SELECT count(*) FROM g")[0].rows == [(300,)], what="300 rows")
        db.execute("FLUSH")
        assert db.execute("SELECT count(*) FROM g")[0].rows == [(300,)]  # the sequence ended
        rows = db.execute("SELECT id, v, s, f, b, ts FROM g ORDER BY id")[0].rows
        assert [r[0] for r in rows] == list(range(1, 301))
        assert {r[1] for r in rows} == {5, 6, 7, 8, 9}
        assert all(len(r[2]) == 4 and r[2].isalpha() for r in rows)
        assert all(0 <= r[3] < 1 for r in rows) and {r[4] for r in rows} == {True, False}
        with pytest.raises(PiestreamError, match=r"fields\.nope\.kind"):
            db.execute("CREATE TABLE h (a INT) WITH (connector = 'datagen', fields.nope.kind = 'sequence')")
        with pytest.raises(PiestreamError, match='connector "kafka" needs a FORMAT'):
            db.execute("CREATE SOURCE k (a INT) WITH (connector = 'kafka')")
        with pytest.raises(PiestreamError, match=r"nexmark\.table\.type"):
            db.execute("CREATE SOURCE n (a INT) WITH (connector = 'nexmark', nexmark.table.type = 'Bids')")
        assert db.catalog.get("h") is None and db.catalog.get("k") is None
    finally:
        db.close()


def test_combined_nexmark_source_with_views(tmp_path: Path) -> None:
    db = _db(tmp_path / "db")
    try:
        db.execute(nexmark_combined_ddl(split_num=2, event_num=10_000, events_per_second=0))
        db.execute(
            "CREATE MATERIALIZED VIEW kinds AS "
            "SELECT event_type, count(*) AS c FROM nexmark GROUP BY event_type"
        )
        db.execute(f"CREATE MATERIALIZED VIEW bids AS SELECT {BID_COLUMNS} FROM bid")
        db.execute(
            "CREATE MATERIALIZED VIEW sellers AS SELECT a.seller, count(*) AS n FROM auction a "
            "JOIN person p ON a.seller = p.id GROUP BY a.seller"
        )
        wait_until(lambda: db.execute("SELECT count(*) FROM bids")[0].rows == [(9200,)], what="all bids")
        assert sorted(db.execute("SELECT * FROM kinds")[0].rows) == [(0, 200), (1, 600), (2, 9200)]
        assert sorted(db.execute(f"SELECT {BID_COLUMNS} FROM bids")[0].rows) == expected_bids(10_000)
        plan = "\n".join(
            r[0] for r in db.execute("EXPLAIN CREATE MATERIALIZED VIEW x AS SELECT * FROM bid")[0].rows
        )
        assert "Source { source: nexmark, connector: nexmark, splits: 2" in plan
    finally:
        db.close()


@pytest.mark.spark
def test_end_to_end_on_spark(tmp_path: Path, spark) -> None:  # type: ignore[no-untyped-def]
    """A Nexmark table, an MV and a Parquet sink running as Spark jobs equal the generator's."""
    n = 4000
    want = expected_bids(n)
    db = Database(
        tmp_path / "db",
        spark=spark,
        config=DatabaseConfig(barrier_interval=0.2, background_compaction=False),
    )
    try:
        db.execute(bid_table(n, gap_ns=0).replace("'Bid'", "'Bid', max.rows.per.epoch = '1500'"))
        db.execute("CREATE MATERIALIZED VIEW stats AS SELECT count(*) AS c, sum(price) AS s FROM bid")
        db.execute(
            f"CREATE SINK out AS SELECT {BID_COLUMNS} FROM bid "
            f"WITH (connector = 'parquet', path = '{tmp_path}/out')"
        )
        wait_until(
            lambda: db.execute("SELECT c FROM stats")[0].rows == [(len(want),)], timeout=120, what="the MV"
        )
        assert db.execute("SELECT s FROM stats")[0].rows == [(sum(r[2] for r in want),)]
        assert sorted(db.execute(f"SELECT {BID_COLUMNS} FROM bid")[0].rows) == want
        db.execute("FLUSH")
        sink = read_sink(f"{tmp_path}/out")
        assert (
            sorted(zip(*(sink.column(c).to_pylist() for c in BID_COLUMNS.split(", ")), strict=True)) == want
        )
    finally:
        db.close()
