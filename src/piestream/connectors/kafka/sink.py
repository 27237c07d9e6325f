"""The ``kafka`` sink: each committed epoch delivered to a topic exactly once, in one Kafka
transaction (`LakeTable` shape: `last_epoch` / `commit`, published by the driver as the lake
sinks are, `piestream.connectors.lakehouse.publish_lake`).

``CREATE SINK k FROM mv WITH (connector = 'kafka', topic = 't', properties.bootstrap.server =
'h:p', [primary_key = 'a,b']) FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON``

- Actors stage each epoch's rows as Parquet (like every staged sink); after the epoch commits,
  the driver produces them in one transaction with the sink's own ``transactional.id`` (made at
  CREATE SINK), together with a marker ``{"sink", "epoch"}`` to the sink's marker topic (also made
  at CREATE SINK). Kafka commits both or neither.
- Recovery: opening the producer (`init_transactions`) fences any older instance and aborts the
  transaction it left open; `last_epoch` reads the marker topic (committed markers only), so
  epochs already delivered are skipped and the rest produced again. A ``read_committed``
  consumer of the topic therefore sees every change once across a kill -9 of piestream.
- FORMAT PLAIN: the inserted rows as JSON values (an append-only sink). UPSERT: key = the
  primary key's JSON, value = the row, or no value (a tombstone) for a delete. DEBEZIUM: key as
  upsert, value ``{"before", "after", "op": "c" | "u" | "d", "source": {...}}``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from piestream.connectors.kafka.reader import KafkaError, kafka_properties
from piestream.connectors.lakehouse import OP_COLUMN
from piestream.connectors.options import InvalidOption

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("piestream.kafka.rdkafka")

SINK_FORMATS = {"plain": "append-only", "upsert": "upsert", "debezium": "changelog"}
TIMEOUT_S = 30.0


def validate_kafka_sink_options(options: Mapping[str, str], sink_name: str) -> dict[str, str]:
    """Check the options; fix the sink's transactional.id and marker topic (kept in its options)."""
    out = dict(options)
    if not options.get("topic"):
        raise InvalidOption("the kafka sink needs a topic = '...' option")
    if not kafka_properties(options).get("bootstrap.servers"):
        raise InvalidOption("the kafka sink needs properties.bootstrap.server = 'host:port'")
    fmt = out.get("format", "plain")
    if fmt not in SINK_FORMATS:
        raise InvalidOption(f"FORMAT {fmt.upper()} is not supported by the kafka sink")
    if out.get("encode", "json") != "json":
        raise InvalidOption(f"ENCODE {out['encode'].upper()} is not supported by the kafka sink (only JSON)")
    tag = uuid.uuid4().hex[:8]
    out.setdefault("transactional.id", f"piestream-sink-{sink_name}-{tag}")
    out.setdefault("marker.topic", f"__piestream_sink_{sink_name}_{tag}")
    return out


def _admin(options: Mapping[str, str]) -> Any:
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {**kafka_properties(options), "logger": _RDKAFKA_LOG}
    return AdminClient(config)


def create_marker_topic(options: Mapping[str, str]) -> Callable[[], None]:
    """Make the sink's marker topic (one partition); returns how to delete it again."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(options)
    marker = options["marker.topic"]
    try:
        for f in admin.create_topics([NewTopic(marker, 1, 1)]).values():
            f.result(timeout=TIMEOUT_S)
    except Exception as e:
        raise KafkaError(f'cannot create the sink marker topic "{marker}": {e}') from None

    def undo() -> None:
        for f in admin.delete_topics([marker]).values():
            f.result(timeout=TIMEOUT_S)

    return undo


class KafkaSinkTable:
    """The driver's handle of one Kafka sink: its transactional producer."""

    def __init__(
        self, options: Mapping[str, str], sink_name: str, sink_type: str, key: Sequence[str]
    ) -> None:
        from confluent_kafka import Producer

        self.options = dict(options)
        self.sink_name = sink_name
        self.topic = options["topic"]
        self.marker = options["marker.topic"]
        self.format = options.get("format", "plain")
        self.key = tuple(key)
        self.producer = Producer(
            {
                **kafka_properties(options),
                "transactional.id": options["transactional.id"],
                "enable.idempotence": True,
                "linger.ms": 5,
                "logger": _RDKAFKA_LOG,
            }
        )
        self.producer.init_transactions(TIMEOUT_S)  # fences older instances, aborts their open txn
        self._last: int | None = None
        self._read_markers = False

    def last_epoch(self) -> int | None:
        if not self._read_markers:
            self._last = _last_marker(self.options, self.marker, self.sink_name)
            self._read_markers = True
        return self._last

    def commit(self, epoch: int, data: pa.Table) -> None:
        p = self.producer
        p.begin_transaction()
        try:
            for k, v in encode_messages(data, self.format, self.key, self.sink_name):
                _produce(p, self.topic, k, v)
            _produce(p, self.marker, None, json.dumps({"sink": self.sink_name, "epoch": epoch}).encode())
            p.commit_transaction(TIMEOUT_S)
        except BaseException:
            try:
                p.abort_transaction(TIMEOUT_S)
            except Exception:  # the original error is the one to report
                log.exception("aborting the transaction of sink %s failed", self.sink_name)
            raise
        self._last = epoch


def _produce(p: Any, topic: str, key: bytes | None, value: bytes | None) -> None:
    while True:
        try:
            p.produce(topic, value=value, key=key)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            p.poll(0.1)


def _last_marker(options: Mapping[str, str], marker: str, sink_name: str) -> int | None:
    """The newest committed epoch marker of the sink (reads the marker topic to its end)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            **kafka_properties(options),
            "group.id": f"piestream-marker-{sink_name}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "logger": _RDKAFKA_LOG,
        }
    )
    try:
        tp = TopicPartition(marker, 0)
        high = int(c.get_watermark_offsets(tp, timeout=TIMEOUT_S)[1] or 0)
        c.assign([TopicPartition(marker, 0, 0)])
        last: int | None = None
        pos = 0
        deadline = time.monotonic() + TIMEOUT_S
        idle = 0
        while idle < 2:  # fetch until empty (after the reported end, which may be low)
            msgs = c.consume(1000, timeout=0.5)
            if not msgs:
                idle += 1 if pos >= high else 0
                if time.monotonic() > deadline:
                    break
                continue
            idle = 0
            for m in msgs:  # per marker message: one per delivered epoch
                err = m.error()
                if err is not None:
                    raise KafkaError(f'reading the sink marker topic "{marker}": {err.str()}')
                pos = int(m.offset() or 0) + 1
                d = json.loads(m.value() or b"{}")
                if d.get("sink") == sink_name:
                    last = int(d["epoch"]) if last is None else max(last, int(d["epoch"]))
        return last
    finally:
        c.close()


# -- encoding --------------------------------------------------------------------------------------


def _json_default(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return str(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    raise TypeError(f"cannot encode {type(v).__name__} as JSON")


def _dumps(row: dict[str, Any]) -> bytes:
    return json.dumps(row, default=_json_default, separators=(",", ":")).encode()


def encode_messages(
    data: pa.Table, fmt: str, key: Sequence[str], sink_name: str
) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) messages of one epoch's staged rows. Per row: each message is one JSON
    document produced by its own call."""
    names = [n for n in data.column_names if n != OP_COLUMN]
    rows = data.select(names).to_pylist()
    ops = data.column(OP_COLUMN).to_pylist() if OP_COLUMN in data.column_names else ["insert"] * len(rows)

    def k(r: dict[str, Any]) -> bytes | None:
        return _dumps({c: r[c] for c in key}) if key else None

    if fmt == "plain":
        return [(None, _dumps(r)) for r in rows]
    if fmt == "upsert":
        return [(k(r), None if op == "delete" else _dumps(r)) for r, op in zip(rows, ops, strict=True)]
    out: list[tuple[bytes | None, bytes | None]] = []
    source = {"connector": "piestream", "name": sink_name}
    i = 0
    while i < len(rows):
        r, op = rows[i], ops[i]
        if op == "update_delete" and i + 1 < len(rows) and ops[i + 1] == "update_insert":
            after = rows[i + 1]
            ev = {"before": r, "after": after, "op": "u", "source": source}
            out.append((k(after), _dumps(ev)))
            i += 2
            continue
        if op in ("delete", "update_delete"):
            out.append((k(r), _dumps({"before": r, "after": None, "op": "d", "source": source})))
        else:
            out.append((k(r), _dumps({"before": None, "after": r, "op": "c", "source": source})))
        i += 1
    return out
