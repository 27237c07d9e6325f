"""Sinks: change streams shaped by type (append-only / upsert / changelog), staged by actors and
published by the driver only for committed epochs, exactly once across restarts."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from nexmark_sql import wait_until

from piestream.common.errors import PiestreamError
from piestream.connectors.sinks import STAGING, ParquetSinkWriter, final_name, publish_committed, read_sink
from piestream.server.database import Database, DatabaseConfig


def _db(path: Path) -> Database:
    return Database(
        path, config=DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)
    )


def test_publish_only_what_committed_state_names(tmp_path: Path) -> None:
    w = ParquetSinkWriter(str(tmp_path))
    t = pa.table({"a": [1, 2]})
    committed = w.stage(100, 0, t)
    failed_attempt = w.stage(100, 0, t)  # the same epoch and actor, an attempt that did not commit
    later = w.stage(200, 1, t)  # an epoch that has not committed yet
    assert committed and failed_attempt and later
    state = [(0, 100, committed, 2), (1, 50, "gone-long-ago.parquet", 1)]
    assert publish_committed(str(tmp_path), 100, state) == 1
    assert sorted(os.listdir(tmp_path)) == [STAGING, final_name(100, 0)]
    assert os.listdir(tmp_path / STAGING) == [later]  # orphans of epochs <= 100 are deleted
    assert publish_committed(str(tmp_path), 100, state) == 0  # idempotent (a restart repeats it)
    assert read_sink(str(tmp_path)).column("a").to_pylist() == [1, 2]
    assert pq.read_table(tmp_path).num_rows == 2  # readers skip the _staging directory


def _upsert_replay(path: Path, key: list[str]) -> dict[tuple, tuple]:
    state: dict[tuple, tuple] = {}
    for row in read_sink(str(path)).to_pylist():
        k = tuple(row[c] for c in key)
        if row["_op"] == "upsert":
            state[k] = tuple(v for c, v in row.items() if c != "_op")
        else:
            state.pop(k, None)
    return state


def _changelog_replay(path: Path) -> Counter:
    rows: Counter = Counter()
    for row in read_sink(str(path)).to_pylist():
        vals = tuple(v for c, v in row.items() if c != "_op")
        rows[vals] += 1 if row["_op"] in ("insert", "update_insert") else -1
    return +rows


def test_sink_outputs_equal_the_mv_across_a_restart(tmp_path: Path) -> None:
    db = _db(tmp_path / "db")
    up, cl, ao = tmp_path / "upsert", tmp_path / "changelog", tmp_path / "append"
    try:
        db.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v BIGINT)")
        db.execute("CREATE MATERIALIZED VIEW m AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g")
        db.execute(f"CREATE SINK s_up FROM m WITH (connector = 'parquet', path = '{up}', type = 'upsert')")
        db.execute(
            f"CREATE SINK s_cl AS SELECT k, g, v FROM t WHERE v > 0 "
            f"WITH (connector = 'parquet', path = '{cl}', type = 'changelog')"
        )
        db.execute(
            f"CREATE SINK s_ao AS SELECT k, v FROM t WITH (connector = 'parquet', path = '{ao}', "
            "type = 'append-only', force_append_only = 'true')"
        )
        db.execute("CREATE SINK s_bh FROM m WITH (connector = 'blackhole')")
        with pytest.raises(PiestreamError, match="cannot be append-only"):
            db.execute(
                f"CREATE SINK bad FROM m WITH (connector = 'parquet', path = '{tmp_path}/x', "
                "type = 'append-only')"
            )
        for i in range(20):
            db.execute(f"INSERT INTO t VALUES ({i}, {i % 3}, {i * 10})")
        db.execute("UPDATE t SET v = v + 1 WHERE k % 2 = 0")
        db.execute("DELETE FROM t WHERE k % 5 = 0")
    finally:
        db.close()
    db = _db(tmp_path / "db")  # restart: sinks continue, no epoch is written twice
    try:
        db.execute("UPDATE t SET g = 7 WHERE k = 3")
        db.execute("INSERT INTO t VALUES (100, 1, -5)")
        db.execute("FLUSH")
        mv = {(g,): (g, n, s) for g, n, s in db.execute("SELECT g, n, s FROM m")[0].rows}
        assert _upsert_replay(up, ["g"]) == mv
        table = db.execute("SELECT k, g, v FROM t WHERE v > 0")[0].rows
        assert _changelog_replay(cl) == Counter(table)
        ao_rows = read_sink(str(ao)).to_pylist()
        assert len(ao_rows) == 20 + 10 + 1 + 1  # inserts, then updates as inserts; deletes dropped
        assert {"k", "v"} == set(ao_rows[0])
        for path in (up, cl, ao):
            parts = [n for n in os.listdir(path) if n.startswith("part-")]
            assert len(parts) == len({p.split("-")[1] + p.split("-")[2] for p in parts})
        assert ("s_bh",) in db.execute("SHOW SINKS")[0].rows
        db.execute("DROP SINK s_bh")
        db.execute("DROP SINK s_up")
        assert db.catalog.get("s_up") is None
    finally:
        db.close()


def test_an_upsert_sink_from_a_global_aggregation_keeps_its_one_row(tmp_path: Path) -> None:
    """A global aggregation's MV has an empty key: its upsert sink holds one row, the last change
    of each epoch (this failed every epoch with 'encode_columns without key columns')."""
    db = _db(tmp_path / "db")
    up = tmp_path / "upsert"
    try:
        db.execute("CREATE TABLE t (k INT PRIMARY KEY, v BIGINT)")
        db.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c, sum(v) AS s FROM t")
        db.execute(f"CREATE SINK s_up FROM n WITH (connector = 'parquet', path = '{up}', type = 'upsert')")
        db.execute("CREATE SINK s_bh FROM n WITH (connector = 'blackhole')")
        for i in range(6):
            db.execute(f"INSERT INTO t VALUES ({i}, {i * 10}), ({i + 100}, 1)")
            db.execute("FLUSH")
        db.execute("DELETE FROM t WHERE k < 3")
        db.execute("FLUSH")
        mv = db.execute("SELECT c, s FROM n")[0].rows
        assert mv == [(9, 126)]
        assert _upsert_replay(up, []) == {(): mv[0]}
        assert db.execute("SELECT count(*) FROM rw_catalog.rw_streaming_errors")[0].rows == [(0,)]
    finally:
        db.close()


def test_sink_over_a_nexmark_source(tmp_path: Path) -> None:
    db = _db(tmp_path / "db")
    out = tmp_path / "out"
    try:
        db.execute(
            "CREATE SOURCE bid (auction BIGINT, price BIGINT) WITH (connector = 'nexmark', "
            "nexmark.table.type = 'Bid', nexmark.event.num = '5000', nexmark.min.event.gap.in.ns = '0')"
        )
        db.execute(
            "CREATE SINK big AS SELECT auction, price FROM bid WHERE price > 1000000 "
            f"WITH (connector = 'parquet', path = '{out}')"
        )
        db.execute("CREATE MATERIALIZED VIEW big_mv AS SELECT auction, price FROM bid WHERE price > 1000000")
        wait_until(lambda: db.execute("SELECT count(*) FROM big_mv")[0].rows[0][0] > 0, what="the MV")
        db.execute("FLUSH")
        mv = sorted(db.execute("SELECT auction, price FROM big_mv")[0].rows)
        sink = read_sink(str(out))
        assert (
            sorted(zip(sink.column("auction").to_pylist(), sink.column("price").to_pylist(), strict=True))
            == mv
        )
    finally:
        db.close()
