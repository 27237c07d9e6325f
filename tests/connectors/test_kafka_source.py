"""The Kafka source end to end against a real Kafka-protocol broker (Tansu, `kafka_broker`):
tables and MVs over topics equal DuckDB over the same messages; formats, INCLUDE columns,
startup modes, poison messages, group commits after the epoch."""

from __future__ import annotations

import http.server
import io
import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from crash import kill_when
from kafka_broker import Broker, kafka, local_db
from nexmark_sql import wait_until

from piestream.common.errors import PiestreamError
from piestream.server.database import Database

__all__ = ["kafka"]


def _count(db: Database, rel: str) -> int:
    return int(db.execute(f"SELECT count(*) FROM {rel}")[0].rows[0][0])


def _bids(n: int, seed: int = 1) -> list[dict]:
    r = random.Random(seed)
    return [
        {
            "auction": r.randrange(100),
            "bidder": r.randrange(1000),
            "price": r.randrange(1, 10_000),
            "channel": r.choice(["a", "b", "c", None]),
            "date_time": f"2024-01-01 00:{i // 60 % 60:02d}:{i % 60:02d}",
        }
        for i in range(n)
    ]


LATEST = ", scan.startup.mode = 'latest'"
BAD_MODE = ", scan.startup.mode = 'x'"
GROUP = ", properties.group.id = 'mon'"
AGG = (
    "SELECT auction, count(*) AS c, sum(price) AS s, max(bidder) AS m, count(channel) AS ch "
    "FROM {rel} GROUP BY auction"
)


def test_table_and_mv_equal_duckdb_over_the_messages(kafka: Broker, tmp_path: Path) -> None:
    kafka.create_topic("bids", 3)
    bids = _bids(3000)
    kafka.produce("bids", bids[:2000], partition=[i % 3 for i in range(2000)])
    db = local_db(tmp_path / "db")
    try:
        db.execute(
            "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, "
            f"date_time TIMESTAMP) {kafka.with_clause('bids')} FORMAT PLAIN ENCODE JSON"
        )
        db.execute(f"CREATE MATERIALIZED VIEW agg AS {AGG.format(rel='bid')}")
        wait_until(lambda: _count(db, "bid") == 2000, what="2000 rows")
        kafka.produce("bids", bids[2000:], partition=[i % 3 for i in range(1000)])
        wait_until(lambda: _count(db, "bid") == 3000, what="3000 rows")
        db.execute("FLUSH")
        duck = duckdb.connect()
        duck.execute(
            "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, "
            "date_time TIMESTAMP)"
        )
        duck.executemany(
            "INSERT INTO bid VALUES (?, ?, ?, ?, ?)",
            [(b["auction"], b["bidder"], b["price"], b["channel"], b["date_time"]) for b in bids],
        )
        want = sorted(duck.execute(AGG.format(rel="bid")).fetchall())
        assert sorted(db.execute("SELECT auction, c, s, m, ch FROM agg")[0].rows) == want
        rows = db.execute("SELECT auction, bidder, price, channel, date_time FROM bid")[0].rows
        assert sorted(rows, key=repr) == sorted(duck.execute("SELECT * FROM bid").fetchall(), key=repr)
        # a SOURCE read by an MV gets its own offsets: it reads the topic from the start too
        db.execute(
            f"CREATE SOURCE bsrc (auction BIGINT, price BIGINT) {kafka.with_clause('bids')} "
            "FORMAT PLAIN ENCODE JSON"
        )
        db.execute("CREATE MATERIALIZED VIEW total AS SELECT count(*) AS c, sum(price) AS s FROM bsrc")
        wait_until(lambda: db.execute("SELECT c FROM total")[0].rows == [(3000,)], what="the source MV")
        assert db.execute("SELECT s FROM total")[0].rows == [(sum(b["price"] for b in bids),)]
    finally:
        db.close()


def test_include_columns_startup_modes_and_poison_messages(kafka: Broker, tmp_path: Path) -> None:
    kafka.create_topic("inc", 1)
    kafka.produce(
        "inc",
        [{"v": 1}, {"v": 2}],
        keys=["k1", "k2"],
        headers=[[("h", b"x1")], None],
        one_per_batch=True,
    )
    db = local_db(tmp_path / "db")
    try:
        db.execute(
            "CREATE TABLE t (v INT) INCLUDE key AS k INCLUDE partition AS p INCLUDE offset AS o "
            "INCLUDE timestamp AS ts INCLUDE header 'h' AS h "
            f"{kafka.with_clause('inc')} FORMAT PLAIN ENCODE JSON"
        )
        db.execute(f"CREATE TABLE late (v INT) {kafka.with_clause('inc', LATEST)} FORMAT PLAIN ENCODE JSON")
        wait_until(lambda: _count(db, "t") == 2, what="2 rows")
        rows = db.execute("SELECT v, k, p, o, h, ts IS NOT NULL FROM t ORDER BY v")[0].rows
        assert rows == [(1, b"k1", "0", "0", b"x1", True), (2, b"k2", "0", "1", None, True)]
        # poison: not JSON (skipped), a field of the wrong type (NULL); both counted with their offset
        kafka.produce("inc", [b"{oops", {"v": "x"}, {"v": 5}], one_per_batch=True)
        wait_until(lambda: _count(db, "t") == 4, what="4 rows")
        wait_until(lambda: _count(db, "late") == 2, what="the latest-mode table")
        assert sorted(db.execute("SELECT v FROM late")[0].rows, key=repr) == [(5,), (None,)]
        assert sorted(db.execute("SELECT v, o FROM t WHERE o >= '2'")[0].rows, key=repr) == [
            (5, "4"),
            (None, "3"),
        ]
        db.execute("FLUSH")
        errs = db.execute("SELECT error_message FROM rw_catalog.rw_streaming_errors")[0].rows
        text = " ".join(str(r[0]) for r in errs)
        assert 'partition "0", offset 2' in text and 'partition "0", offset 3' in text
        with pytest.raises(PiestreamError, match="FORMAT UPSERT needs a primary key"):
            db.execute(f"CREATE TABLE u (v INT) {kafka.with_clause('inc')} FORMAT UPSERT ENCODE JSON")
        with pytest.raises(PiestreamError, match="is not supported on a SOURCE"):
            db.execute(f"CREATE SOURCE u (v INT) {kafka.with_clause('inc')} FORMAT DEBEZIUM ENCODE JSON")
        with pytest.raises(PiestreamError, match="FORMAT DEBEZIUM ENCODE CSV is not supported"):
            db.execute(
                f"CREATE TABLE u (v INT PRIMARY KEY) {kafka.with_clause('inc')} FORMAT DEBEZIUM ENCODE CSV"
            )
        with pytest.raises(PiestreamError, match=r"scan\.startup\.mode"):
            db.execute(
                f"CREATE TABLE u (v INT) {kafka.with_clause('inc', BAD_MODE)} FORMAT PLAIN ENCODE JSON"
            )
    finally:
        db.close()


def test_upsert_and_debezium_tables(kafka: Broker, tmp_path: Path) -> None:
    kafka.create_topic("ups", 2)
    kafka.create_topic("dbz", 1)
    db = local_db(tmp_path / "db")
    try:
        db.execute(
            f"CREATE TABLE u (id INT PRIMARY KEY, name VARCHAR) {kafka.with_clause('ups')} "
            "FORMAT UPSERT ENCODE JSON"
        )
        db.execute(
            f"CREATE TABLE d (id INT PRIMARY KEY, name VARCHAR) {kafka.with_clause('dbz')} "
            "FORMAT DEBEZIUM ENCODE JSON"
        )
        db.execute("CREATE MATERIALIZED VIEW un AS SELECT count(*) AS c FROM u")
        keys = [{"id": i % 5} for i in range(20)]
        vals = [None if i % 7 == 6 else {"id": i % 5, "name": f"n{i}"} for i in range(20)]
        kafka.produce("ups", vals, keys=keys, partition=[(i % 5) % 2 for i in range(20)])
        state: dict[int, str] = {}
        for k, v in zip(keys, vals, strict=True):
            if v is None:
                state.pop(k["id"], None)
            else:
                state[k["id"]] = v["name"]
        events = [
            {"op": "c", "before": None, "after": {"id": 1, "name": "a"}},
            {"op": "c", "before": None, "after": {"id": 2, "name": "b"}},
            {"op": "u", "before": {"id": 1, "name": "a"}, "after": {"id": 1, "name": "a2"}},
            {"op": "d", "before": {"id": 2, "name": "b"}, "after": None},
            None,
            {"op": "u", "before": {"id": 1, "name": "a2"}, "after": {"id": 3, "name": "c"}},
        ]
        kafka.produce("dbz", [None if e is None else {"payload": e} for e in events])
        want_u = sorted(state.items())
        wait_until(lambda: sorted(db.execute("SELECT id, name FROM u")[0].rows) == want_u, what="upserts")
        wait_until(lambda: db.execute("SELECT id, name FROM d")[0].rows == [(3, "c")], what="debezium")
        assert db.execute("SELECT c FROM un")[0].rows == [(len(want_u),)]
    finally:
        db.close()


def test_csv_bytes_and_group_commits_after_the_epoch(kafka: Broker, tmp_path: Path) -> None:
    kafka.create_topic("csv", 1)
    kafka.create_topic("raw", 1)
    kafka.produce("csv", ["1,a", "2,b", "x,c"])
    kafka.produce("raw", [b"\x00\x01", b"\xff"])
    db = local_db(tmp_path / "db")
    try:
        db.execute(
            f"CREATE TABLE c (id INT, name VARCHAR) {kafka.with_clause('csv')} FORMAT PLAIN ENCODE CSV"
        )
        db.execute(f"CREATE TABLE r (b BYTEA) {kafka.with_clause('raw', GROUP)} FORMAT PLAIN ENCODE BYTES")
        wait_until(lambda: _count(db, "c") == 3 and _count(db, "r") == 2, what="csv and bytes rows")
        assert sorted(db.execute("SELECT id, name FROM c")[0].rows, key=repr) == sorted(
            [(1, "a"), (2, "b"), (None, "c")], key=repr
        )
        assert sorted(db.execute("SELECT b FROM r")[0].rows) == [(b"\x00\x01",), (b"\xff",)]
        splits = db.execute(
            "SELECT source_name, split_id, committed_offset, end_offset, lag "
            "FROM rw_catalog.rw_source_splits WHERE connector = 'kafka' ORDER BY source_name"
        )[0].rows
        assert splits == [("c", "0", 3, 3, 0), ("r", "0", 2, 2, 0)]
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "mon"})
        try:
            wait_until(
                lambda: c.committed([TopicPartition("raw", 0)], timeout=5)[0].offset == 2,
                what="the group offset committed after the epoch",
            )
        finally:
            c.close()
    finally:
        db.close()


def test_kafka_json_is_not_a_dict_per_row() -> None:
    """The fast path reads a batch through one pyarrow call (a regression guard on the path
    taken, not on time)."""
    from piestream.common.types import BIGINT
    from piestream.connectors.formats import decode

    calls = []
    orig = decode.decode_rows

    def spy(*a, **kw):  # type: ignore[no-untyped-def]
        calls.append(1)
        return orig(*a, **kw)

    decode.decode_rows = spy  # type: ignore[assignment]
    try:
        d = decode.JsonDecoder((("a", BIGINT),)).decode([json.dumps({"a": i}).encode() for i in range(1000)])
    finally:
        decode.decode_rows = orig  # type: ignore[assignment]
    assert d.table.num_rows == 1000 and not calls


def test_sigkill_during_ingest_keeps_each_offset_once(kafka: Broker, tmp_path: Path) -> None:
    n = 6000
    kafka.create_topic("crash", 2)
    kafka.produce("crash", [{"id": i} for i in range(n)], partition=[i % 2 for i in range(n)])
    stmts = [
        "CREATE TABLE k (id BIGINT) INCLUDE partition AS p INCLUDE offset AS o "
        f"{kafka.with_clause('crash', ', max.rows.per.epoch = 250')} FORMAT PLAIN ENCODE JSON",
        "CREATE MATERIALIZED VIEW kc AS SELECT p, count(*) AS c, sum(id) AS s FROM k GROUP BY p",
    ]
    kill_when(tmp_path / "db", stmts, "SELECT count(*) FROM k", lambda c: c > 1000)
    db = local_db(tmp_path / "db")
    try:
        assert _count(db, "k") < n  # killed mid-way
        wait_until(lambda: _count(db, "k") >= n, what="all messages")
        db.execute("FLUSH")
        rows = db.execute("SELECT id, p, o FROM k")[0].rows
        assert Counter((p, o) for _, p, o in rows).most_common(1)[0][1] == 1  # each offset once
        assert sorted(i for i, _, _ in rows) == list(range(n))
        assert sorted((p, int(o)) for i, p, o in rows) == sorted((str(i % 2), i // 2) for i in range(n))
        want = sorted((str(p), n // 2, sum(range(p, n, 2))) for p in range(2))
        assert sorted(db.execute("SELECT p, c, s FROM kc")[0].rows) == want
    finally:
        db.close()


AVRO_SCHEMA = {
    "type": "record",
    "name": "bid",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "price", "type": "double"},
    ],
}


def _avro(rec: dict, schema_id: int | None = None) -> bytes:
    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(AVRO_SCHEMA), rec)
    body = buf.getvalue()
    return body if schema_id is None else b"\x00" + schema_id.to_bytes(4, "big") + body


class _Registry(http.server.BaseHTTPRequestHandler):
    """The schema registry's GET /schemas/ids/{id}, the one call the decoder makes (Karapace,
    the Python registry on PyPI, needs a Kafka cluster it cannot get from Tansu)."""

    def do_GET(self) -> None:
        if self.path == "/schemas/ids/42":
            body = json.dumps({"schema": json.dumps(AVRO_SCHEMA)}).encode()
            self.send_response(200)
        else:
            body = b'{"error_code": 40403, "message": "Schema not found"}'
            self.send_response(404)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_avro_schema_file_and_registry(kafka: Broker, tmp_path: Path) -> None:
    recs = [{"id": i, "name": None if i % 3 == 0 else f"n{i}", "price": i / 4} for i in range(50)]
    kafka.create_topic("avro_file", 1)
    kafka.create_topic("avro_reg", 1)
    kafka.produce("avro_file", [_avro(r) for r in recs])
    kafka.produce("avro_reg", [*(_avro(r, 42) for r in recs), b"\x00\x00\x00\x00\x07junk"])
    schema = tmp_path / "bid.avsc"
    schema.write_text(json.dumps(AVRO_SCHEMA))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    db = local_db(tmp_path / "db")
    try:
        db.execute(
            f"CREATE TABLE af (id BIGINT, name VARCHAR, price DOUBLE) {kafka.with_clause('avro_file')} "
            f"FORMAT PLAIN ENCODE AVRO (schema.location = 'file://{schema}')"
        )
        db.execute(
            f"CREATE TABLE ar (id BIGINT, name VARCHAR, price DOUBLE) {kafka.with_clause('avro_reg')} "
            f"FORMAT PLAIN ENCODE AVRO (schema.registry = 'http://127.0.0.1:{server.server_port}')"
        )
        want = sorted((r["id"], r["name"], r["price"]) for r in recs)
        wait_until(lambda: _count(db, "af") == 50 and _count(db, "ar") == 50, what="avro rows")
        assert sorted(db.execute("SELECT id, name, price FROM af")[0].rows) == want
        assert sorted(db.execute("SELECT id, name, price FROM ar")[0].rows) == want
        db.execute("FLUSH")
        errs = " ".join(
            str(r[0]) for r in db.execute("SELECT error_message FROM rw_catalog.rw_streaming_errors")[0].rows
        )
        assert "schema id 7 not found" in errs and "offset 50" in errs  # the unknown schema id is skipped
        with pytest.raises(PiestreamError, match="ENCODE AVRO needs one of"):
            db.execute(
                f"CREATE TABLE ax (id BIGINT) {kafka.with_clause('avro_file')} FORMAT PLAIN ENCODE AVRO"
            )
    finally:
        db.close()
        server.shutdown()


def test_alter_source_rate_limit_pauses_and_resumes(kafka: Broker, tmp_path: Path) -> None:
    kafka.create_topic("rate", 1)
    kafka.produce("rate", [{"v": i} for i in range(10)])
    db = local_db(tmp_path / "db")
    try:
        db.execute(f"CREATE TABLE rt (v INT) {kafka.with_clause('rate')} FORMAT PLAIN ENCODE JSON")
        wait_until(lambda: _count(db, "rt") == 10, what="10 rows")
        db.execute("ALTER TABLE rt SET source_rate_limit = 0")  # paused
        kafka.produce("rate", [{"v": i} for i in range(10, 20)])
        for _ in range(20):  # epochs go by: a paused source reads nothing
            db.execute("FLUSH")
        assert _count(db, "rt") == 10
        db.close()
        db = local_db(tmp_path / "db")  # the setting survives a restart
        for _ in range(10):
            db.execute("FLUSH")
        assert _count(db, "rt") == 10
        db.execute("ALTER TABLE rt SET source_rate_limit = 1000")
        wait_until(lambda: _count(db, "rt") == 20, what="resumed")
        db.execute("ALTER TABLE rt SET source_rate_limit = DEFAULT")
        with pytest.raises(PiestreamError, match='source "rt" does not exist'):
            db.execute("ALTER SOURCE rt SET source_rate_limit = 5")
        with pytest.raises(PiestreamError, match=">= 0"):
            db.execute("ALTER TABLE rt SET source_rate_limit = -1")
        with pytest.raises(PiestreamError, match="is not supported"):
            db.execute("ALTER TABLE rt SET backfill_rate_limit = 2")
    finally:
        db.close()


def test_partitions_added_to_a_topic_are_enumerated_and_read(
    kafka: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New partitions, against the real broker's metadata. Tansu refuses CreatePartitions
    (UNSUPPORTED_FEATURE), so the topic is deleted and created again with four partitions: the
    reader's background refresh (`current_splits`, what the source executor appends to its
    planned splits each epoch) sees 2 -> 4 partitions under the same name, and a new one reads
    from its start. A running table across the change: the next test."""
    from confluent_kafka.admin import AdminClient

    from piestream.common.epoch import EpochPair
    from piestream.common.types import parse_type
    from piestream.connectors.kafka import reader as kreader
    from piestream.plan.source import SourceSpec

    monkeypatch.setattr(kreader, "METADATA_TTL_S", 0.1)
    kafka.create_topic("grow", 2)
    options = {"connector": "kafka", "topic": "grow", "properties.bootstrap.server": kafka.bootstrap}
    spec = SourceSpec("g", "kafka", (("id", parse_type("INT")),), options, encode="json", format="plain")
    r = kreader.kafka_connector(spec)[0]
    assert r.splits() == ["0", "1"]
    wait_until(lambda: r.current_splits() == ["0", "1"], timeout=30, what="the first refresh")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.delete_topics(["grow"]).values():
        f.result(timeout=30)
    kafka.create_topic("grow", 4)
    kafka.produce("grow", [{"id": 100 + i} for i in range(6)], partition=2, one_per_batch=True)
    wait_until(lambda: r.current_splits() == ["0", "1", "2", "3"], timeout=30, what="the new partitions")
    offset, got = None, []
    for _ in range(100):  # the first read fixes the start; then the messages known to exist
        res = r.read("2", offset, 100, EpochPair(1, 0))
        offset = res.offset
        got += [x for b in res.batches for x in b.column(0).to_pylist()]
        if len(got) >= 6:
            break
        time.sleep(0.1)
    assert got == list(range(100, 106))


def test_a_running_table_reads_new_partitions_from_the_next_epochs_plan(
    kafka: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partitions added while a table reads the topic are read from the next epoch on, and
    every attempt of an epoch reads the same splits: the barrier manager fixes them in the
    epoch's plan (an attempt failed on purpose is retried with the very same list). The topic
    grows by being deleted and created again with four partitions (Tansu has no
    CreatePartitions), with the source paused and its consumers closed meanwhile (a consumer
    assigned across a deletion crashes librdkafka against this broker)."""
    from confluent_kafka.admin import AdminClient

    from piestream.connectors.kafka import reader as kreader

    monkeypatch.setattr(kreader, "METADATA_TTL_S", 0.1)
    kafka.create_topic("grow2", 2)
    kafka.produce("grow2", [{"id": i} for i in range(10)], partition=[i % 2 for i in range(10)])
    db = local_db(tmp_path / "db")
    try:
        db.execute(
            f"CREATE TABLE gt (id INT) INCLUDE partition AS p {kafka.with_clause('grow2')} "
            "FORMAT PLAIN ENCODE JSON"
        )
        wait_until(lambda: _count(db, "gt") == 10, what="10 rows")
        attempts: dict[int, list[object]] = {}
        failed: list[int] = []
        real = db.barriers.runner.run

        def run(plan, dml):  # type: ignore[no-untyped-def]
            attempts.setdefault(plan.data_epoch, []).append(plan.config.source_splits)
            if plan.config.source_splits and not failed:
                failed.append(plan.data_epoch)
                raise RuntimeError("a task failed (injected)")
            return real(plan, dml)

        monkeypatch.setattr(db.barriers.runner, "run", run)
        db.execute("ALTER TABLE gt SET source_rate_limit = 0")
        db.execute("FLUSH")
        kreader.close_topic_feeds("grow2")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for f in admin.delete_topics(["grow2"]).values():
            f.result(timeout=30)
        kafka.create_topic("grow2", 4)
        kafka.produce("grow2", [{"id": 100 + i} for i in range(6)], partition=[2 + i % 2 for i in range(6)])
        db.execute("ALTER TABLE gt SET source_rate_limit = DEFAULT")
        wait_until(lambda: _count(db, "gt") == 16, timeout=60, what="the new partitions' rows")
        rows = db.execute("SELECT p, id FROM gt WHERE id >= 100 ORDER BY id")[0].rows
        assert rows == [(str(2 + i % 2), 100 + i) for i in range(6)]
        assert failed and attempts[failed[0]] == [(("gt", ("2", "3")),)] * 2  # the retry: the same
        assert all(len(set(v)) == 1 for v in attempts.values())  # each epoch's attempts agree
        # a table of the same name over a two-partition topic: the old one's partitions 2 and 3
        # are not its splits (they would fail it as "no longer has partition 2")
        db.execute("DROP TABLE gt")
        kafka.create_topic("small2", 2)
        kafka.produce("small2", [{"id": i} for i in range(4)], partition=[i % 2 for i in range(4)])
        db.execute(f"CREATE TABLE gt (id INT) {kafka.with_clause('small2')} FORMAT PLAIN ENCODE JSON")
        wait_until(lambda: _count(db, "gt") == 4, timeout=60, what="the new table's rows")
        db.execute("FLUSH")
        assert db.barriers.source_splits.get("gt") is None
        late = [plan_splits for epoch in sorted(attempts)[-2:] for plan_splits in attempts[epoch]]
        assert all(not splits for splits in late), late
        errors = db.execute(
            "SELECT count(*) FROM rw_catalog.rw_streaming_errors WHERE error_message LIKE '%partition%'"
        )
        assert errors[0].rows == [(0,)]
    finally:
        db.close()


def test_fetching_a_batch_sets_off_no_garbage_collection(kafka: Broker) -> None:
    """A consume() batch is 10,000 GC-tracked Message objects: the feed pauses the cyclic
    collector meanwhile (each collection scanned them: a quarter of the reader's CPU), and
    leaves it as it found it, on or off."""
    import gc

    from piestream.connectors.kafka.reader import CONSUME_BATCH, _Feed

    kafka.create_topic("gcpause", 1)
    kafka.produce("gcpause", [b"x"] * CONSUME_BATCH)
    feed = _Feed({"bootstrap.servers": kafka.bootstrap, "group.id": "g"}, "gcpause", 0, frozenset())
    try:
        feed.seek(0, lambda: None)
        was = gc.isenabled()
        try:
            gc.enable()
            gc.collect()
            before = gc.get_stats()[0]["collections"]
            deadline = time.monotonic() + 30
            while feed.buffered < CONSUME_BATCH and time.monotonic() < deadline:
                feed._fetch(0.5)
            assert feed.buffered == CONSUME_BATCH
            assert gc.get_stats()[0]["collections"] == before
            assert gc.isenabled()
            gc.disable()
            feed.seek(0, lambda: None)
            feed.reset()
            feed.seek(0, lambda: None)
            while not feed._fetch(0.5) and time.monotonic() < deadline:
                pass
            assert not gc.isenabled()
        finally:
            (gc.enable if was else gc.disable)()
    finally:
        feed.close()
