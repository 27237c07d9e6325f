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

import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.connectors.formats.encode import NULL, joined, json_object_parts, json_objects, row_json
from piestream.connectors.kafka.reader import KafkaError, kafka_properties
from piestream.connectors.lakehouse import OP_COLUMN
from piestream.connectors.options import InvalidOption

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("piestream.kafka.rdkafka")

SINK_FORMATS = {"plain": "append-only", "upsert": "upsert", "debezium": "changelog"}
TIMEOUT_S = 30.0
#: librdkafka settings of the sink's transactional producer, unless ``properties.*`` say otherwise.
#: A whole epoch is produced in one go and flushed by `commit_transaction`, so the local queue
#: holds up to a million messages / 1 GiB (librdkafka's 100,000 filled at every epoch of more,
#: and each full queue cost a 0.1 s poll: a fifth of the produce loop's samples at 1M rows).
#: linger 20 ms lets batches fill to their cap (batch.size and message.max.bytes stay at 1 MB,
#: what a broker accepts by default).
PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 20,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1 << 20,
}


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


def delete_marker_topic(options: Mapping[str, str], timeout: float = 5.0) -> None:
    """After DROP SINK: delete the sink's marker topic (piestream's alone: only its epoch
    markers are in it); the sink's own topic stays. A topic already gone is no error."""
    marker = options.get("marker.topic")
    if not marker:
        return
    admin = _admin(options)  # kept until the futures resolve (its end cancels them)
    try:
        for f in admin.delete_topics([marker], operation_timeout=timeout).values():
            f.result(timeout=timeout)
    except Exception as e:
        if "UNKNOWN_TOPIC" in str(e):
            return
        raise KafkaError(f'cannot delete the sink marker topic "{marker}": {e}') from None


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
                **PRODUCER_DEFAULTS,
                **kafka_properties(options),  # the user's properties.* win over the defaults
                "transactional.id": options["transactional.id"],
                "enable.idempotence": True,
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
            keys, values = encode_messages(data, self.format, self.key, self.sink_name)
            _produce_all(p, self.topic, keys, values)
            _produce(p, self.marker, row_json({"sink": self.sink_name, "epoch": epoch}))
            p.commit_transaction(TIMEOUT_S)
        except BaseException:
            try:
                p.abort_transaction(TIMEOUT_S)
            except Exception:  # the original error is the one to report
                log.exception("aborting the transaction of sink %s failed", self.sink_name)
            raise
        self._last = epoch


def _produce_all(p: Any, topic: str, keys: list[bytes | None], values: list[bytes | None]) -> None:
    """Every message, one produce call each (the producer's API; `produce_batch` needs a dict
    per message and measured slower). Positional arguments and the loop inline: the call's
    own overhead is most of the Python time per message."""
    produce = p.produce
    topics = itertools.repeat(topic, len(values))
    if keys.count(None) == len(keys):  # no keys (FORMAT PLAIN)
        pairs: Any = zip(topics, values, strict=True)
    else:
        pairs = zip(topics, values, keys, strict=True)
    for args in pairs:  # per message: the producer takes one message a call
        try:
            produce(*args)
        except BufferError:  # the local queue is full: let deliveries drain it, then again
            p.poll(0.1)
            _produce(p, *args)


def _produce(p: Any, topic: str, value: bytes | None, key: bytes | None = None) -> None:
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
                # the position, not the last message: an aborted transaction's records and the
                # transactions' control records are never delivered (read_committed), but the
                # position moves past them (else every reopen after a kill -9 waited TIMEOUT_S)
                at = c.position([tp])[0].offset
                pos = max(pos, at if at is not None and at >= 0 else 0)
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


def encode_messages(
    data: pa.Table, fmt: str, key: Sequence[str], sink_name: str
) -> tuple[list[bytes | None], list[bytes | None]]:
    """(keys, values) of one epoch's staged rows, encoded per column with Arrow (`json_objects`);
    a None value is a tombstone. The lists hold one bytes object per message because the
    producer takes messages one call each."""
    names = [n for n in data.column_names if n != OP_COLUMN]
    n = data.num_rows
    row_parts = json_object_parts(data, names)
    if fmt == "plain":
        return [None] * n, _bytes(joined(row_parts))
    code = _op_codes(data)
    keys = json_objects(data, key) if key else pa.nulls(n, pa.string())
    deleted = (code == _DELETE) | (code == _UPDATE_DELETE)
    # an update's old row followed by its new one under the same key: one message (the new row)
    nxt_ins = np.zeros(n, np.bool_)
    nxt_ins[:-1] = code[1:] == _UPDATE_INSERT
    paired = (code == _UPDATE_DELETE) & nxt_ins
    # the gathers (take) and choices (if_else) over the encoded rows below are skipped where they
    # would change nothing: no paired update, no delete (an epoch of inserts skips them all)
    source = json.dumps({"connector": "piestream", "name": sink_name}, separators=(",", ":"))
    envelope_end = f',"source":{source}}}'
    if fmt == "debezium" and not (deleted.any() or paired.any()):  # inserts: one join, no copy
        values = joined(['{"before":null,"after":', *row_parts, ',"op":"c"', envelope_end])
        return _bytes(keys), _bytes(values)
    rows = joined(row_parts)
    if fmt == "upsert":
        same_key = np.zeros(n, np.bool_)
        if n > 1 and key and paired.any():
            same_key[:-1] = pc.equal(keys.slice(0, n - 1), keys.slice(1)).to_numpy(zero_copy_only=False)
        keep = ~(paired & same_key)
        if not keep.all():
            at = pa.array(np.flatnonzero(keep))
            keys, rows, deleted = keys.take(at), rows.take(at), deleted[keep]
        values = pc.if_else(pa.array(deleted), pa.scalar(None, pa.string()), rows) if deleted.any() else rows
        return _bytes(keys), _bytes(values)
    # debezium: a paired update is one "u" event at the old row's position, keyed by the new row
    null = pa.scalar(NULL)
    if paired.any():
        second = np.zeros(n, np.bool_)
        second[1:] = paired[:-1]
        idx = np.flatnonzero(~second)
        is_u = paired[idx]
        is_d = deleted[idx] & ~is_u
        after_at = pa.array(np.where(is_u, idx + 1, idx))
        before: Any = pc.if_else(pa.array(is_u | is_d), rows.take(pa.array(idx)), null)
        after: Any = rows.take(after_at)
        keys = keys.take(after_at)
    else:  # no update: every event is its own row's ("c" or "d")
        is_u, is_d = np.zeros(n, np.bool_), deleted
        before, after = pc.if_else(pa.array(is_d), rows, null), rows
    if is_d.any():
        after = pc.if_else(pa.array(is_d), null, after)
    op = pa.array(np.where(is_u, '"u"', np.where(is_d, '"d"', '"c"')), pa.string())
    values = pc.binary_join_element_wise(
        '{"before":', before, ',"after":', after, ',"op":', op, envelope_end, ""
    )
    return _bytes(keys), _bytes(values)


#: the change kinds of the staged ``_op`` column (a changelog sink's four; an upsert sink's
#: "upsert" / "delete"), as codes of `_op_codes`; "upsert" is an insert here
_OPS = pa.array(["insert", "delete", "update_insert", "update_delete", "upsert"])
_DELETE, _UPDATE_INSERT, _UPDATE_DELETE = 1, 2, 3


def _op_codes(data: pa.Table) -> np.ndarray:
    """Each row's change kind as a small integer (one Arrow look-up, not a string compare per
    kind); rows without an ``_op`` column are inserts."""
    if OP_COLUMN not in data.column_names:
        return np.zeros(data.num_rows, np.int8)
    codes = pc.index_in(data.column(OP_COLUMN), value_set=_OPS)
    if codes.null_count:
        bad = pc.filter(data.column(OP_COLUMN), pc.is_null(codes))[0]
        raise ValueError(f"the staged change kind {bad} is not one of {_OPS.to_pylist()}")
    return np.asarray(codes.to_numpy(zero_copy_only=False), np.int8)


def _bytes(a: pa.Array) -> list[bytes | None]:
    return a.cast(pa.binary()).to_pylist()
