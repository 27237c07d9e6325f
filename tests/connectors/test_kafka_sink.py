"""The Kafka sink against a real Kafka-protocol broker (Tansu): each committed epoch in one
transaction, so a read_committed consumer sees every change once, across a kill -9 too."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from crash import kill_when
from kafka_broker import Broker, kafka, local_db
from nexmark_sql import wait_until

from piestream.common.errors import PiestreamError

__all__ = ["kafka"]


def read_topic(b: Broker, topic: str, partitions: int = 1, idle: float = 1.0) -> list[tuple]:
    """Every committed message of the topic, (key, value) decoded as JSON (None stays None)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "t", "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        empty = 0
        while empty < int(idle / 0.25):
            msgs = c.consume(1000, timeout=0.25)
            empty = 0 if msgs else empty + 1
            for m in msgs:
                assert m.error() is None, m.error()
                k, v = m.key(), m.value()
                out.append((None if k is None else json.loads(k), None if v is None else json.loads(v)))
        return out
    finally:
        c.close()


def test_plain_upsert_and_debezium_sinks(kafka: Broker, tmp_path: Path) -> None:
    for t in ("plain_out", "ups_out", "dbz_out"):
        kafka.create_topic(t, 1)
    db = local_db(tmp_path / "db")
    try:
        db.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        db.execute("CREATE TABLE a (x INT) APPEND ONLY")
        db.execute(f"CREATE SINK sp FROM a {kafka.with_clause('plain_out')} FORMAT PLAIN ENCODE JSON")
        db.execute(
            f"CREATE SINK su FROM t {kafka.with_clause('ups_out', ', primary_key = ' + repr('id'))} "
            "FORMAT UPSERT ENCODE JSON"
        )
        db.execute(
            f"CREATE SINK sd FROM t {kafka.with_clause('dbz_out', ', primary_key = ' + repr('id'))} "
            "FORMAT DEBEZIUM ENCODE JSON"
        )
        db.execute("INSERT INTO a VALUES (1), (2)")
        db.execute("INSERT INTO t VALUES (1, 10), (2, 20)")
        db.execute("UPDATE t SET v = 11 WHERE id = 1")
        db.execute("DELETE FROM t WHERE id = 2")
        db.execute("INSERT INTO a VALUES (3)")
        db.execute("FLUSH")
        wait_until(lambda: len(read_topic(kafka, "plain_out", idle=0.5)) >= 3, what="the plain sink")
        assert sorted(v["x"] for _, v in read_topic(kafka, "plain_out")) == [1, 2, 3]
        wait_until(lambda: len(read_topic(kafka, "ups_out", idle=0.5)) >= 4, what="the upsert sink")
        ups = read_topic(kafka, "ups_out")
        state: dict = {}
        for k, v in ups:
            if v is None:
                state.pop(k["id"], None)
            else:
                state[k["id"]] = v
        assert state == {1: {"id": 1, "v": 11}} and len(ups) == 4
        wait_until(lambda: len(read_topic(kafka, "dbz_out", idle=0.5)) >= 4, what="the debezium sink")
        ops = [(v["op"], v["before"], v["after"]) for _, v in read_topic(kafka, "dbz_out")]
        assert sorted(ops, key=repr) == sorted(
            [
                ("c", None, {"id": 1, "v": 10}),
                ("c", None, {"id": 2, "v": 20}),
                ("u", {"id": 1, "v": 10}, {"id": 1, "v": 11}),
                ("d", {"id": 2, "v": 20}, None),
            ],
            key=repr,
        )
        with pytest.raises(PiestreamError, match="primary_key"):
            db.execute(f"CREATE SINK bad FROM t {kafka.with_clause('ups_out')} FORMAT UPSERT ENCODE JSON")
        with pytest.raises(PiestreamError, match="ENCODE AVRO is not supported"):
            db.execute(f"CREATE SINK bad FROM a {kafka.with_clause('plain_out')} FORMAT PLAIN ENCODE AVRO")
        # DROP SINK deletes the sink's marker topic (piestream's alone), never the sink's topic
        markers = {s: _topics(kafka, f"__piestream_sink_{s}_") for s in ("sp", "su", "sd")}
        assert all(len(m) == 1 for m in markers.values()), markers
        db.execute("DROP SINK sp")
        assert not _topics(kafka, "__piestream_sink_sp_") and _topics(kafka, "plain_out")
        db.execute("DROP TABLE t CASCADE")  # its sinks go with it, and their marker topics
        assert not _topics(kafka, "__piestream_sink_su_") and not _topics(kafka, "__piestream_sink_sd_")
        assert _topics(kafka, "ups_out") and _topics(kafka, "dbz_out")
    finally:
        db.close()


def _topics(b: Broker, prefix: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    names = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics
    return [t for t in names if t.startswith(prefix)]


def test_sigkill_during_sink_delivery_delivers_each_change_once(kafka: Broker, tmp_path: Path) -> None:
    kafka.create_topic("crash_out", 1)
    stmts = [
        "CREATE TABLE a (x INT) APPEND ONLY",
        f"CREATE SINK s FROM a {kafka.with_clause('crash_out')} FORMAT PLAIN ENCODE JSON",
    ]
    insert = "INSERT INTO a SELECT * FROM generate_series({i} * 50, {i} * 50 + 49)"
    acked = kill_when(tmp_path / "db", stmts, insert, lambda i: i >= 15, pause=0)
    db = local_db(tmp_path / "db")
    try:
        n = int(db.execute("SELECT count(*) FROM a")[0].rows[0][0])
        assert n >= (acked + 1) * 50  # every acknowledged insert is in the table
        wait_until(lambda: len(read_topic(kafka, "crash_out", idle=0.5)) >= n, what="the sink to catch up")
        xs = [v["x"] for _, v in read_topic(kafka, "crash_out")]
        assert Counter(xs).most_common(1)[0][1] == 1  # each change once
        assert sorted(xs) == sorted(r[0] for r in db.execute("SELECT x FROM a")[0].rows)
    finally:
        db.close()


def test_encoded_changes_per_format() -> None:
    import pyarrow as pa

    from piestream.connectors.kafka.sink import encode_messages
    from piestream.connectors.lakehouse import OP_COLUMN

    ops = ["insert", "update_delete", "update_insert", "update_delete", "update_insert", "delete"]
    data = pa.table({"id": [1, 1, 1, 2, 3, 4], "v": [10, 10, 11, 20, 20, 40], OP_COLUMN: ops})

    def dec(kv: tuple[list, list]) -> list[tuple]:
        return [(k and json.loads(k), v and json.loads(v)) for k, v in zip(*kv, strict=True)]

    assert dec(
        encode_messages(data.filter(pa.compute.equal(data[OP_COLUMN], "insert")), "plain", (), "s")
    ) == [(None, {"id": 1, "v": 10})]
    # upsert: a same-key update is its new row; a key-changing one deletes the old key
    assert dec(encode_messages(data, "upsert", ("id",), "s")) == [
        ({"id": 1}, {"id": 1, "v": 10}),
        ({"id": 1}, {"id": 1, "v": 11}),
        ({"id": 2}, None),
        ({"id": 3}, {"id": 3, "v": 20}),
        ({"id": 4}, None),
    ]
    events = [
        (k, v["op"], v["before"], v["after"]) for k, v in dec(encode_messages(data, "debezium", ("id",), "s"))
    ]
    assert events == [
        ({"id": 1}, "c", None, {"id": 1, "v": 10}),
        ({"id": 1}, "u", {"id": 1, "v": 10}, {"id": 1, "v": 11}),
        ({"id": 3}, "u", {"id": 2, "v": 20}, {"id": 3, "v": 20}),
        ({"id": 4}, "d", {"id": 4, "v": 40}, None),
    ]


def _reference_messages(rows: list[dict], ops: list[str], fmt: str, key: tuple[str, ...]) -> list[tuple]:
    """Each format's messages built row by row with `json.dumps` (the reference the vectorised
    `encode_messages` must equal), as decoded (key, value) pairs."""
    from piestream.connectors.formats.encode import row_json

    def doc(r: dict | None, names: tuple[str, ...] | None = None) -> object:
        return None if r is None else json.loads(row_json({n: r[n] for n in (names or tuple(r))}))

    out: list[tuple] = []
    i = 0
    while i < len(rows):
        r, op = rows[i], ops[i]
        paired = op == "update_delete" and i + 1 < len(ops) and ops[i + 1] == "update_insert"
        gone = op in ("delete", "update_delete")
        if fmt == "plain":
            out.append((None, doc(r)))
        elif fmt == "upsert":
            if not (paired and doc(r, key) == doc(rows[i + 1], key)):  # a same-key update: its new row
                out.append((doc(r, key), None if gone else doc(r)))
        elif paired:
            new = rows[i + 1]
            out.append((doc(new, key), {"before": doc(r), "after": doc(new), "op": "u"}))
            i += 1
        else:
            out.append(
                (
                    doc(r, key),
                    {
                        "before": doc(r) if gone else None,
                        "after": None if gone else doc(r),
                        "op": "d" if gone else "c",
                    },
                )
            )
        i += 1
    return out


@pytest.mark.parametrize(
    "ops",
    [
        None,  # no _op column: inserts (the skipped gathers and choices)
        ["insert"] * 6,
        ["upsert", "delete", "upsert", "upsert", "delete", "delete"],  # an upsert sink's staging
        ["insert", "delete", "insert", "delete", "insert", "insert"],  # no update
        ["insert", "update_delete", "update_insert", "update_delete", "update_insert", "delete"],
        ["update_delete", "update_insert"] * 3,
    ],
)
def test_encoded_messages_equal_per_row_reference_over_every_type(ops: list[str] | None) -> None:
    """Every FORMAT over every column type with NULLs, each fast path (inserts only, no update)
    and the general one: the vectorised messages equal the per-row reference."""
    import datetime as dt
    import decimal

    import pyarrow as pa

    from piestream.connectors.kafka.sink import encode_messages
    from piestream.connectors.lakehouse import OP_COLUMN

    t = pa.table(
        {
            "i": pa.array([1, 1, 2, None, 3, 3], pa.int64()),
            "f": pa.array([1.5, 0.1, None, -2.0, 1e20, None], pa.float64()),
            "b": pa.array([True, False, None, True, None, False]),
            "s": pa.array(['a"b\\c', "line\nnext\ttab\r", "é \x01 ctl", None, "plain", ""]),
            "d": pa.array([dt.date(2024, 1, 2), None, dt.date(1999, 12, 31)] * 2),
            "ts": pa.array([dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 1, 120000), None] * 2),
            "tz": pa.array([dt.datetime(2024, 1, 1, 3), None, None] * 2, pa.timestamp("us", tz="UTC")),
            "n": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-3")] * 2, pa.decimal128(10, 2)),
            "y": pa.array([b"\x00\xff", None, b""] * 2, pa.binary()),
            "l": pa.array([[1, 2], None, []] * 2, pa.list_(pa.int32())),
        }
    )
    rows = t.to_pylist()
    data = t if ops is None else t.append_column(OP_COLUMN, pa.array(ops))
    kinds = ops or ["insert"] * len(rows)
    for fmt, key in (("plain", ()), ("upsert", ("i",)), ("upsert", ("i", "s")), ("debezium", ("i",))):
        if fmt == "plain" and set(kinds) - {"insert"}:
            continue  # an append-only sink stages inserts only
        keys, values = encode_messages(data, fmt, key, "s")
        got = [(k and json.loads(k), v and json.loads(v)) for k, v in zip(keys, values, strict=True)]
        if fmt == "debezium":
            for _, v in got:
                assert v.pop("source") == {"connector": "piestream", "name": "s"}
        assert got == _reference_messages(rows, kinds, fmt, key), (fmt, key)


def test_unknown_staged_change_kind_is_refused() -> None:
    import pyarrow as pa

    from piestream.connectors.kafka.sink import encode_messages
    from piestream.connectors.lakehouse import OP_COLUMN

    data = pa.table({"id": [1, 2], OP_COLUMN: ["insert", "merge"]})
    with pytest.raises(ValueError, match="merge"):
        encode_messages(data, "upsert", ("id",), "s")
