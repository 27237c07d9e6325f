"""The Kafka source never wedges: a broker unreachable at CREATE fails that statement clearly;
the real broker stopped mid-stream (SIGSTOP: connections hang, the hardest case for time-outs)
leaves other jobs committing, records the fault in rw_streaming_errors, and when it resumes
ingestion continues exactly (each message once)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from kafka_broker import Broker, free_port, local_db
from nexmark_sql import wait_until

from piestream.common.errors import PiestreamError
from piestream.connectors.kafka.reader import KafkaOffset, close_feeds


def _count(db, rel: str) -> int:  # type: ignore[no-untyped-def]
    return int(db.execute(f"SELECT count(*) FROM {rel}")[0].rows[0][0])


def _kafka_errors(db) -> list[str]:  # type: ignore[no-untyped-def]
    rows = db.execute("SELECT error_message FROM rw_catalog.rw_streaming_errors")[0].rows
    return [str(r[0]) for r in rows if "kafka topic" in str(r[0])]


def test_unreachable_broker_at_create_fails_that_statement_only(tmp_path: Path) -> None:
    db = local_db(tmp_path / "db")
    try:
        db.execute("CREATE TABLE t (v INT)")
        db.execute("CREATE MATERIALIZED VIEW m AS SELECT count(*) AS c FROM t")
        nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there
        with pytest.raises(PiestreamError) as e:
            db.execute(
                "CREATE TABLE k (v INT) WITH (connector = 'kafka', topic = 'x', "
                f"properties.bootstrap.server = '{nowhere}') FORMAT PLAIN ENCODE JSON"
            )
        assert e.value.sqlstate == "08006" and 'topic "x"' in str(e.value)
        db.execute("INSERT INTO t VALUES (1), (2)")
        db.execute("FLUSH")
        assert db.execute("SELECT c FROM m")[0].rows == [(2,)]
    finally:
        db.close()
        close_feeds()


def test_broker_stopped_mid_stream_then_resumed(tmp_path: Path) -> None:
    broker = Broker()
    db = local_db(tmp_path / "db")
    stopped = False
    try:
        broker.create_topic("ev", 2)
        broker.produce("ev", [{"id": i} for i in range(300)], partition=[i % 2 for i in range(300)])
        db.execute(f"CREATE TABLE k (id INT) {broker.with_clause('ev')} FORMAT PLAIN ENCODE JSON")
        db.execute("CREATE MATERIALIZED VIEW kc AS SELECT count(*) AS c, count(DISTINCT id) AS d FROM k")
        db.execute("CREATE TABLE other (v INT)")
        db.execute("CREATE MATERIALIZED VIEW oc AS SELECT count(*) AS c FROM other")
        wait_until(lambda: _count(db, "k") == 300, what="300 rows")
        # more messages, then the broker stops before (all of) them are read
        broker.produce("ev", [{"id": i} for i in range(300, 3300)], partition=[i % 2 for i in range(3000)])
        os.kill(broker.proc.pid, signal.SIGSTOP)
        stopped = True
        for i in range(5):  # other jobs keep committing meanwhile
            db.execute(f"INSERT INTO other VALUES ({i})")
            db.execute("FLUSH")
        assert db.execute("SELECT c FROM oc")[0].rows == [(5,)]
        wait_until(lambda: bool(_kafka_errors(db)), timeout=60, what="the fault in rw_streaming_errors")
        os.kill(broker.proc.pid, signal.SIGCONT)
        stopped = False
        broker.produce("ev", [{"id": i} for i in range(3300, 3600)], partition=[i % 2 for i in range(300)])
        wait_until(lambda: _count(db, "k") == 3600, timeout=90, what="3600 rows after the broker resumed")
        db.execute("FLUSH")
        assert db.execute("SELECT c, d FROM kc")[0].rows == [(3600, 3600)]
        assert db.execute("SELECT min(id), max(id) FROM k")[0].rows == [(0, 3599)]
    finally:
        if stopped:
            os.kill(broker.proc.pid, signal.SIGCONT)
        db.close()
        close_feeds()
        broker.stop()


def _reader(broker: Broker, topic: str):  # type: ignore[no-untyped-def]
    from piestream.common.types import parse_type
    from piestream.connectors.kafka.reader import kafka_connector
    from piestream.plan.source import SourceSpec

    options = {"connector": "kafka", "topic": topic, "properties.bootstrap.server": broker.bootstrap}
    spec = SourceSpec("s", "kafka", (("id", parse_type("INT")),), options, encode="json", format="plain")
    return kafka_connector(spec)[0]


def test_a_retried_read_returns_the_same_rows_or_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which rows a read emits depends only on its committed offset and budget: with the broker
    hung (SIGSTOP) a retry of the same read raises SourceUnavailable (never fewer rows, never an
    empty answer that would differ from the first attempt); once it resumes, the retry returns
    exactly the first attempt's rows."""
    from piestream.common.epoch import EpochPair
    from piestream.connectors.kafka import reader as kreader
    from piestream.stream.connector import SourceUnavailable

    monkeypatch.setattr(kreader, "FETCH_TIMEOUT_S", 0.5)
    monkeypatch.setattr(kreader, "BROKER_TIMEOUT_S", 0.5)
    broker = Broker()
    try:
        broker.create_topic("rr", 1)
        broker.produce("rr", [{"id": i} for i in range(500)], partition=0)
        r = _reader(broker, "rr")
        e = EpochPair(1, 0)
        committed = KafkaOffset(0, 500).to_json()  # next 0; 500 messages known to exist
        a = r.read("0", committed, 120, e)
        rows = [b.to_pylist() for b in a.batches]
        assert a.consumed == 120 and [x["id"] for x in rows[0]] == list(range(120))
        close_feeds()  # the retry runs in another worker: nothing buffered
        os.kill(broker.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(SourceUnavailable) as err:
                r.read("0", committed, 120, e)
            assert err.value.sqlstate == "08006" and 'kafka topic "rr"' in err.value.message
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        again = r.read("0", committed, 120, e)
        assert [b.to_pylist() for b in again.batches] == rows and again.offset == a.offset
    finally:
        close_feeds()
        broker.stop()


def test_a_deleted_topic_fails_that_job_only(tmp_path: Path) -> None:
    """A running table over a topic that is then deleted: its job fails with a clear error in
    rw_streaming_errors (no pause-and-retry forever as for an outage), while a table over
    another topic of the same broker and a plain table's MV keep committing, and the process
    lives. The source is paused (rate 0) and its consumers closed around the deletion: a
    consumer assigned at the moment of deletion is what crashed librdkafka against this
    broker (see `KafkaReader._require`); the reader itself never assigns one to a deleted
    topic, which is the path tested here."""
    from confluent_kafka.admin import AdminClient

    from piestream.connectors.kafka.reader import close_topic_feeds

    broker = Broker()
    db = local_db(tmp_path / "db")
    try:
        broker.create_topic("gone", 2)
        broker.create_topic("stay", 1)
        broker.produce("gone", [{"id": i} for i in range(100)], partition=[i % 2 for i in range(100)])
        broker.produce("stay", [{"id": i} for i in range(50)])
        db.execute(f"CREATE TABLE kg (id INT) {broker.with_clause('gone')} FORMAT PLAIN ENCODE JSON")
        db.execute("CREATE MATERIALIZED VIEW kgc AS SELECT count(*) AS c FROM kg")
        db.execute(f"CREATE TABLE ks (id INT) {broker.with_clause('stay')} FORMAT PLAIN ENCODE JSON")
        db.execute("CREATE MATERIALIZED VIEW ksc AS SELECT count(*) AS c FROM ks")
        db.execute("CREATE TABLE other (v INT)")
        db.execute("CREATE MATERIALIZED VIEW oc AS SELECT count(*) AS c FROM other")
        wait_until(lambda: _count(db, "kg") == 100 and _count(db, "ks") == 50, what="the first rows")
        db.execute("ALTER TABLE kg SET source_rate_limit = 0")
        db.execute("FLUSH")
        close_topic_feeds("gone")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.delete_topics(["gone"]).values():
            f.result(timeout=30)
        db.execute("ALTER TABLE kg SET source_rate_limit = DEFAULT")

        def failed() -> list[str]:
            rows = db.execute("SELECT error_message FROM rw_catalog.rw_streaming_errors")[0].rows
            return [str(r[0]) for r in rows if 'kafka topic "gone" no longer exists' in str(r[0])]

        wait_until(lambda: bool(db.barriers.failed_jobs), timeout=60, what="the job over the topic failed")
        assert failed()
        assert all(e.sqlstate == "42704" for e in db.barriers.failed_jobs.values())
        broker.produce("stay", [{"id": i} for i in range(50, 80)])
        for i in range(3):
            db.execute(f"INSERT INTO other VALUES ({i})")
            db.execute("FLUSH")
        wait_until(lambda: _count(db, "ks") == 80, what="the other topic's table keeps reading")
        assert db.execute("SELECT c FROM ksc")[0].rows == [(80,)]
        assert db.execute("SELECT c FROM oc")[0].rows == [(3,)]
        assert db.execute("SELECT c FROM kgc")[0].rows == [(100,)]  # its last committed state
    finally:
        db.close()
        close_feeds()
        broker.stop()


def test_the_unavailable_source_crosses_processes_as_a_field() -> None:
    """The barrier manager learns which source to pause from the error a Spark task's traceback
    carries: the marker rebuilds a SourceUnavailable with its `source` field (and so does a
    pickle); another error's text naming a source is not taken for one."""
    import pickle

    from piestream.common.errors import error_marker, parse_error_marker
    from piestream.runtime.runners import epoch_error
    from piestream.stream.connector import SourceUnavailable, unavailable_source

    e = SourceUnavailable('kafka topic "t" partition 0: down', source="k")
    marker = error_marker(e, fragment_id=3)
    text = f"Traceback (most recent call last):\n  ...\nPythonException: {e.message} {marker}"
    err, fragment = epoch_error(RuntimeError(text))
    assert isinstance(err, SourceUnavailable) and err.message == e.message and fragment == 3
    assert unavailable_source(err) == "k"
    assert unavailable_source(pickle.loads(pickle.dumps(e))) == "k"
    assert unavailable_source(SourceUnavailable("from a reader")) is None  # no source named
    other = PiestreamError("x", sqlstate="08006", detail="paused source: k")
    marked = parse_error_marker(error_marker(other))
    assert marked is not None and unavailable_source(marked[0]) is None
