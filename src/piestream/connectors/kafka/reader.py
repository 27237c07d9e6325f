"""The ``kafka`` source connector: a topic's partitions as splits, read with confluent-kafka.

``WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = 'host:port',
[scan.startup.mode = 'earliest' | 'latest'], [scan.startup.timestamp.millis = ms],
[properties.<librdkafka setting> = ...]) FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON | CSV |
BYTES | AVRO (...)`` and ``INCLUDE key | partition | offset | timestamp | header 'name'``.

**Exactly once, deterministically.** A split (partition) keeps in the source's state table a
`KafkaOffset`: the next offset to emit `n` and an end `e` below which messages are known to
exist (the highest offset seen + 1). An epoch emits the first `budget` messages of [n, e) —
Kafka offsets are immutable, so a retried epoch emits exactly the same — and then records what
the consumer has fetched meanwhile as the next epoch's `e`. The broker's high watermark is never
trusted for reading (one test broker reports it wrong); consumer-group offsets are never read.
The price of that rule is freshness: a message fetched before epoch k's read is recorded in k's
`e` and emitted by epoch k + 1, so produce -> MV visible is on average 1.5 barrier intervals
plus an epoch's run (bench/bench_kafka.py measures it). Less would need the end of each epoch
fixed before it runs and kept in its plan (as new splits are), not taken by the read.
After an epoch is durable the driver acks its offsets (`ack`): with ``properties.group.id`` they
are committed to that group, for monitoring only.

Consumers are kept per process and partition (`_Feed`), assigned directly (no group join),
their fetched-ahead messages buffered across epochs; a read at another offset than the feed's
(a retried epoch, a second job over the same source) seeks.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.epoch import EpochPair
from piestream.common.errors import PiestreamError
from piestream.connectors.options import InvalidOption, parse_int, source_limits
from piestream.connectors.source import RawMessages, SourceParser, make_decoder, payload_columns, read_result
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.stream.connector import ReadResult, SourceReader, SourceUnavailable

STARTUP_MODES = ("earliest", "latest")
#: messages asked of librdkafka per consume() call
CONSUME_BATCH = 10_000
#: how long a read waits for messages known to exist before giving up (broker down or hung):
#: it raises `SourceUnavailable`, the epoch is retried with the source paused
FETCH_TIMEOUT_S = 2.0
#: broker calls' timeout (offsets, metadata) on the read path
BROKER_TIMEOUT_S = 2.0
#: how long CREATE (and the background partition refresh) waits for the topic's metadata
LIST_TIMEOUT_S = 10.0
#: librdkafka's fetch.wait.max.ms unless properties.fetch.wait.max.ms says otherwise
FETCH_WAIT_MAX_MS = 100
#: messages a feed buffers ahead of what was emitted (beyond: librdkafka's own queue holds them)
MAX_BUFFERED = 200_000
#: consumers per partition and process (one per job reading it, typically)
MAX_FEEDS = 4
#: feeds unused this long are closed (their job was dropped or moved)
IDLE_CLOSE_S = 300.0
#: how long the partition list is reused before asking the broker again (new partitions)
METADATA_TTL_S = 10.0


_RDKAFKA_LOG = logging.getLogger("piestream.kafka.rdkafka")
log = logging.getLogger(__name__)


class KafkaError(PiestreamError):
    """The broker could not be reached or refused a request."""

    sqlstate = "08006"


class TopicDeleted(PiestreamError):
    """The topic (or the partition) a source reads no longer exists. Not an outage to wait out:
    the attempt fails, and after the barrier manager's attempts the job is isolated as failed
    (recorded in rw_streaming_errors) while every other job keeps committing."""

    sqlstate = "42704"  # undefined_object


@dataclass(frozen=True)
class KafkaOffset:
    """A partition's position in the source state: next offset to emit, known end (exclusive)."""

    next: int
    end: int

    def to_json(self) -> str:
        return json.dumps({"n": self.next, "e": self.end})

    @classmethod
    def from_json(cls, s: str) -> KafkaOffset:
        d = json.loads(s)
        return cls(int(d["n"]), int(d["e"]))


@dataclass
class _Health:
    """A topic's reachability in this process, for the log and rw_streaming_errors. The back-off
    after a failed read is the barrier manager's (it pauses the source in the epoch plan), so
    whether a read happens never depends on this process's clock."""

    failures: int = 0
    last_error: str | None = None
    #: the background partition refresh's failure, not yet reported by a read
    metadata_error: str | None = None

    def failed(self, what: str, e: BaseException) -> str:
        self.failures += 1
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        self.last_error = f"{what}: {first}"
        log.warning("%s", self.last_error)
        return self.last_error

    def ok(self) -> None:
        if self.failures:
            log.info("kafka: reading again after %d failed attempts", self.failures)
        self.failures = 0


_HEALTH: dict[tuple[Any, ...], _Health] = {}  # per (settings, topic)


# -- consumers -------------------------------------------------------------------------------------

#: message fields a feed can keep beside offsets and values (what INCLUDE / UPSERT ask for)
KEYS, TIMESTAMPS, HEADERS = "key", "timestamp", "headers"


@dataclass
class _Batch:
    """Fetched messages of one partition as columns (offsets ascending): the Message objects
    librdkafka hands out are dropped as soon as their fields are taken, so buffers hold Arrow
    and numpy, not millions of Python objects."""

    offsets: np.ndarray  # int64
    values: pa.BinaryArray
    keys: pa.BinaryArray | None = None
    timestamps: np.ndarray | None = None  # int64 ms, -1 = none
    headers: list[Any] | None = None  # per message: confluent-kafka's list of (name, value)

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int) -> _Batch:
        return _Batch(
            self.offsets[start:stop],
            self.values.slice(start, stop - start),
            None if self.keys is None else self.keys.slice(start, stop - start),
            None if self.timestamps is None else self.timestamps[start:stop],
            None if self.headers is None else self.headers[start:stop],
        )

    @staticmethod
    def concat(parts: list[_Batch]) -> _Batch:
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        return _Batch(
            np.concatenate([b.offsets for b in parts]),
            pa.concat_arrays([b.values for b in parts]),
            None if first.keys is None else pa.concat_arrays([b.keys for b in parts]),
            None if first.timestamps is None else np.concatenate([b.timestamps for b in parts]),
            None if first.headers is None else [h for b in parts for h in b.headers],  # type: ignore[union-attr]
        )


def message_batch(msgs: list[Any], fields: frozenset[str]) -> _Batch:
    """A consume() result as columns. One pass per field with `map` over the unbound accessor:
    confluent-kafka exposes each field only as a method of a Message object, so this is the one
    per-message step its API forces (no Python code runs per message)."""
    from confluent_kafka import Message

    n = len(msgs)
    first, last = msgs[0].offset(), msgs[-1].offset()
    if last - first == n - 1:  # no gaps (the usual case): the offsets are a range
        offsets = np.arange(first, last + 1, dtype=np.int64)
    else:
        offsets = np.fromiter(map(Message.offset, msgs), np.int64, n)
    values = pa.array(list(map(Message.value, msgs)), pa.binary())
    keys = pa.array(list(map(Message.key, msgs)), pa.binary()) if KEYS in fields else None
    ts = None
    if TIMESTAMPS in fields:
        ts = np.fromiter((t if kind else -1 for kind, t in map(Message.timestamp, msgs)), np.int64, n)
    headers = list(map(Message.headers, msgs)) if HEADERS in fields else None
    return _Batch(offsets, values, keys, ts, headers)


_GC_LOCK = threading.Lock()
_gc_holders = 0  # threads inside `_gc_paused`
_gc_was_enabled = False  # whether the first of them found the collector on


@contextlib.contextmanager
def _gc_paused() -> Any:
    """The cyclic collector off while a consume() batch exists as Message objects. librdkafka's
    Python binding makes one GC-tracked object per message, so a batch of 10,000 set off dozens
    of collections, each scanning the young objects (and, as they are promoted, full ones in a
    worker whose heap `gc.freeze` keeps small): a quarter of the reader's CPU in a profile. The
    Messages hold no cycles (they are freed by reference counting as soon as their fields are
    columns), so pausing loses nothing; counted across threads, so the last one out restores
    the collector as the first one in found it."""
    global _gc_holders, _gc_was_enabled
    with _GC_LOCK:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


class _Feed:
    """One partition's consumer and the messages fetched ahead of the last emitted one."""

    def __init__(self, config: dict[str, Any], topic: str, partition: int, fields: frozenset[str]) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.partition = partition
        self.fields = fields
        self.consumer = Consumer(config)
        self.lock = threading.Lock()
        self.buffer: deque[_Batch] = deque()  # fetched batches of messages, in offset order
        self.buffered = 0  # messages in `buffer`
        self.at: int | None = None  # the offset the buffer (then the consumer) continues at
        self.used = time.monotonic()

    def seek(self, offset: int, before_assign: Callable[[], None]) -> None:
        """Continue at `offset`: within the buffered messages if they cover it, else re-assign
        (after `before_assign`, which raises if the partition is gone: see `_require`)."""
        from confluent_kafka import TopicPartition

        if self.at == offset:
            return
        if self.buffer and self.at is not None and self.at < offset <= int(self.buffer[-1].offsets[-1]):
            self._pop_below(offset, self.buffered)
            self.at = offset
            return
        self.reset()
        before_assign()
        self.consumer.assign([TopicPartition(self.topic, self.partition, offset)])
        self.at = offset

    def reset(self) -> None:
        """Forget the buffer and the position (the next seek assigns)."""
        self.buffer.clear()
        self.buffered = 0
        self.at = None

    def _fetch(self, timeout: float) -> int:
        """Append what the consumer has (waiting up to `timeout`); returns how many."""
        from confluent_kafka import Message

        with _gc_paused():
            msgs = self.consumer.consume(CONSUME_BATCH, timeout=timeout)
            if not msgs:
                return 0
            if any(map(Message.error, msgs)):  # errors come as messages; rare, so looked for at C speed
                err = next(e for e in map(Message.error, msgs) if e is not None)
                raise KafkaError(f'topic "{self.topic}" partition {self.partition}: {err.str()}')
            batch = message_batch(msgs, self.fields)
            n = len(msgs)
            del msgs  # the Message objects freed before the collector is back
        self.buffer.append(batch)
        self.buffered += n
        return n

    def _pop_below(self, end: int, limit: int) -> list[_Batch]:
        """Remove and return up to `limit` buffered messages with offsets below `end`, whole
        batches sliced where `end` (a binary search by offset) or `limit` cuts them."""
        out: list[_Batch] = []
        got = 0
        while self.buffer and got < limit:
            batch = self.buffer[0]
            if batch.offsets[0] >= end:
                break
            cut = min(int(np.searchsorted(batch.offsets, end)), limit - got)
            if cut == len(batch):
                out.append(self.buffer.popleft())
            else:
                out.append(batch.slice(0, cut))
                self.buffer[0] = batch.slice(cut, len(batch))
            self.buffered -= cut
            got += cut
        return out

    def take(self, end: int, budget: int) -> _Batch | None:
        """The first `budget` messages at or after the current offset and below `end` (all of
        them exist: `end` is one past a message seen); None when there are none."""
        out: list[_Batch] = []
        got = 0
        deadline = time.monotonic() + FETCH_TIMEOUT_S
        while got < budget:
            more = self._pop_below(end, budget - got)
            out += more
            got += sum(len(b) for b in more)
            if got >= budget or (self.buffer and self.buffer[0].offsets[0] >= end):
                break
            if out and out[-1].offsets[-1] >= end - 1:
                break
            if time.monotonic() > deadline:
                raise KafkaError(
                    f'topic "{self.topic}" partition {self.partition}: no messages below offset {end} '
                    f"within {FETCH_TIMEOUT_S:.0f} s (is the broker reachable?)"
                )
            self._fetch(0.2)
        return _Batch.concat(out) if out else None

    def seen_end(self) -> int | None:
        """One past the highest offset fetched so far (after taking what is queued locally)."""
        while self.buffered < MAX_BUFFERED and self._fetch(0) > 0:
            pass
        return int(self.buffer[-1].offsets[-1]) + 1 if self.buffer else None

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing an idle consumer must not fail a read
            self.consumer.close()


_FEEDS: dict[tuple[Any, ...], _Feed] = {}
_FEEDS_LOCK = threading.Lock()
_FEED_IDS = itertools.count()
_ADMIN: dict[tuple[Any, ...], Any] = {}  # per (settings, group): a consumer for metadata
_SPLITS: dict[tuple[Any, ...], tuple[float, list[str]]] = {}  # per (settings, topic): when, splits
_REFRESHING: set[tuple[Any, ...]] = set()  # (settings, topic) whose partitions are being asked
_VALID: set[tuple[tuple[str, str], ...]] = set()  # settings librdkafka accepted


def _feed(
    key: tuple[Any, ...],
    config: dict[str, Any],
    topic: str,
    partition: int,
    offset: int | None,
    fields: frozenset[str],
) -> _Feed:
    """A feed of the partition for a read at `offset`, locked: the one continuing there, else
    a new one (jobs reading the same source each keep theirs), else the least recently used."""
    now = time.monotonic()
    with _FEEDS_LOCK:
        for k in [k for k, f in _FEEDS.items() if now - f.used > IDLE_CLOSE_S and not f.lock.locked()]:
            _FEEDS.pop(k).close()
        pool = [(k, f) for k, f in _FEEDS.items() if k[:-1] == key]
        free = [f for _, f in pool if not f.lock.locked()]
        f = next((f for f in free if offset is not None and f.at == offset), None)
        if f is None:
            if len(pool) < MAX_FEEDS or not free:
                f = _FEEDS[(*key, next(_FEED_IDS))] = _Feed(config, topic, partition, fields)
            else:
                f = min(free, key=lambda x: x.used)
        f.lock.acquire()
        f.used = now
        return f


def close_topic_feeds(topic: str) -> None:
    """Close this process's idle consumers of `topic` (it was deleted: none may keep fetching it).
    A consumer in use is left to its reader, which resets it."""
    with _FEEDS_LOCK:
        for k in [k for k, f in _FEEDS.items() if k[0] == topic and not f.lock.locked()]:
            _FEEDS.pop(k).close()
        for k in [k for k in _SPLITS if k[1] == topic]:
            del _SPLITS[k]


def close_feeds() -> None:
    """Close every consumer of this process (tests, shutdown)."""
    with _FEEDS_LOCK:
        for f in _FEEDS.values():
            f.close()
        _FEEDS.clear()
        for c in _ADMIN.values():
            c.close()
        _ADMIN.clear()
        _SPLITS.clear()
        _HEALTH.clear()


# -- the reader ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaReader:
    topic: str
    config: tuple[tuple[str, str], ...]  # librdkafka settings (bootstrap.servers, properties.*)
    startup: str  # earliest | latest | timestamp
    startup_ms: int | None
    parser: SourceParser = field(compare=False)
    need_keys: bool = False
    group: str | None = None  # properties.group.id: acks commit offsets there

    def _config(self, **extra: Any) -> dict[str, Any]:
        c: dict[str, Any] = dict(self.config)
        c.setdefault("group.id", self.group or "piestream")
        c.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
            }
        )
        c.setdefault("isolation.level", "read_committed")
        # how long the broker may hold a fetch when it has no new data: librdkafka's 500 ms
        # default is two barrier intervals of freshness on a broker that answers a waiting fetch
        # only when the wait runs out (the test broker does); an idle partition costs at most
        # ten small fetches a second
        c.setdefault("fetch.wait.max.ms", FETCH_WAIT_MAX_MS)
        c.update(extra)
        c["logger"] = _RDKAFKA_LOG  # librdkafka's lines go to piestream's log, not stderr
        return c

    def _admin_consumer(self) -> Any:
        """A consumer of this process for metadata, offsets and group commits (never assigned)."""
        key = (self.config, self.group)
        with _FEEDS_LOCK:
            c = _ADMIN.get(key)
            if c is None:
                from confluent_kafka import Consumer

                c = _ADMIN[key] = Consumer(self._config())
            return c

    def partitions(self) -> list[int]:
        from confluent_kafka import KafkaException

        try:
            md = self._admin_consumer().list_topics(self.topic, timeout=LIST_TIMEOUT_S)
        except KafkaException as e:
            raise KafkaError(f'cannot list topic "{self.topic}": {e}') from None
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            why = "" if t is None or t.error is None else f": {t.error.str()}"
            raise KafkaError(f'topic "{self.topic}" does not exist{why}')
        return sorted(t.partitions)

    def splits(self) -> list[str]:
        return [str(p) for p in self.partitions()]

    def _require(self, partition: int) -> None:
        """Raise `TopicDeleted` if the broker's metadata no longer has the topic (and
        `SourceUnavailable` if it lacks the partition, maybe not known there yet). Asked
        before a consumer is assigned (a consumer assigned to a deleted topic's partition may
        take the process down: librdkafka dereferences the missing topic name when a broker
        answers its fetch for the deleted topic with a leader tag but no topic id) and after a
        failed read. An unreachable broker raises KafkaException (an outage, retried)."""
        from confluent_kafka import KafkaError as RdKafkaError

        md = self._admin_consumer().list_topics(self.topic, timeout=BROKER_TIMEOUT_S)
        t = md.topics.get(self.topic)
        e = RdKafkaError
        missing = (e.UNKNOWN_TOPIC_OR_PART, e._UNKNOWN_TOPIC, e.UNKNOWN_TOPIC_ID)
        if t is None or (t.error is not None and t.error.code() in missing):
            raise TopicDeleted(
                f'kafka topic "{self.topic}" no longer exists (it was deleted)',
                hint="Create the topic again, then drop and create the source or table over it.",
            )
        if t.error is None and partition not in t.partitions:
            # the topic is there: a partition just created may not be in this broker's metadata
            # yet (a cluster's brokers learn of it one by one), so an outage, retried
            raise SourceUnavailable(f'kafka topic "{self.topic}" has no partition {partition} (yet)')

    def current_splits(self) -> list[str]:
        """The partitions now (new ones append), never waiting on the broker: the list is
        refreshed in a background thread at most every METADATA_TTL_S, and until a first answer
        (the broker away after a restart) it is empty: the planned splits are read meanwhile."""
        key = (self.config, self.topic)
        with _FEEDS_LOCK:
            cached = _SPLITS.get(key)
            stale = cached is None or time.monotonic() - cached[0] >= METADATA_TTL_S
            if stale and key not in _REFRESHING:
                _REFRESHING.add(key)
                threading.Thread(
                    target=self._refresh_splits, args=(key,), name="piestream-kafka-metadata", daemon=True
                ).start()
        return [] if cached is None else list(cached[1])

    def _refresh_splits(self, key: tuple[Any, ...]) -> None:
        try:
            splits = self.splits()
        except Exception as e:  # the broker away: keep what is known, ask again after the TTL
            why = f'kafka topic "{self.topic}": partitions not refreshed: {e}'
            log.warning("%s", why)
            _HEALTH.setdefault(key, _Health()).metadata_error = why
            with _FEEDS_LOCK:
                old = _SPLITS.get(key)
                if old is not None:
                    _SPLITS[key] = (time.monotonic(), old[1])
        else:
            with _FEEDS_LOCK:
                _SPLITS[key] = (time.monotonic(), splits)
        finally:
            with _FEEDS_LOCK:
                _REFRESHING.discard(key)

    def _start(self, partition: int) -> int:
        """The first offset of a partition never read, by scan.startup.mode."""
        from confluent_kafka import TopicPartition

        c = self._admin_consumer()
        tp = TopicPartition(self.topic, partition)
        if self.startup == "timestamp":
            assert self.startup_ms is not None
            found = c.offsets_for_times(
                [TopicPartition(self.topic, partition, self.startup_ms)], timeout=BROKER_TIMEOUT_S
            )
            if found and found[0].offset >= 0:
                return int(found[0].offset)
            _, high = c.get_watermark_offsets(tp, timeout=BROKER_TIMEOUT_S)
            return int(high)
        low, high = c.get_watermark_offsets(tp, timeout=BROKER_TIMEOUT_S)
        return int(low if self.startup == "earliest" else high)

    @property
    def fields(self) -> frozenset[str]:
        """The message fields beside offsets and values this reader needs kept."""
        kinds = {k for k, _, _ in self.parser.spec.include}
        out = {KEYS} if self.need_keys else set()
        if "timestamp" in kinds:
            out.add(TIMESTAMPS)
        if "header" in kinds:
            out.add(HEADERS)
        return frozenset(out)

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        """The next messages of a partition: exactly the first `budget` of [next, end) the
        committed offset names. The broker unreachable (or slow past FETCH_TIMEOUT_S) raises
        `SourceUnavailable` rather than returning fewer: the barrier manager pauses the source
        for the epoch's retry and backs off (the fault goes to rw_streaming_errors), so every
        attempt of an epoch (Spark task retries, speculation) emits the same rows."""
        from confluent_kafka import KafkaException

        health = _HEALTH.setdefault((self.config, self.topic), _Health())
        noted, health.metadata_error = health.metadata_error, None
        faults = [] if noted is None else [(KafkaError.sqlstate, noted)]
        try:
            try:
                result = self._read(split, offset or None, budget)
            except (KafkaError, KafkaException):
                self._require(int(split))  # a failed read of a deleted topic: say so
                raise
        except TopicDeleted as e:
            health.failed(f'kafka topic "{self.topic}" partition {split}', e)
            close_topic_feeds(self.topic)
            raise
        except (KafkaError, KafkaException) as e:
            why = health.failed(f'kafka topic "{self.topic}" partition {split}', e)
            raise SourceUnavailable(why) from None
        health.ok()
        result.errors.extend(faults)
        return result

    def _read(self, split: str, offset: str | None, budget: int) -> ReadResult:
        p = int(split)
        pos = None if offset is None else KafkaOffset.from_json(offset)
        fields = self.fields
        feed = _feed(
            (self.topic, self.config, p, fields),
            self._config(),
            self.topic,
            p,
            None if pos is None else pos.next,
            fields,
        )
        require = functools.partial(self._require, p)
        try:
            if pos is None:  # first epoch: fix where to start; the next one reads from there
                require()
                start = self._start(p)
                feed.seek(start, require)
                end = feed.seen_end()
                return ReadResult([], KafkaOffset(start, max(start, end or start)).to_json(), 0)
            feed.seek(pos.next, require)
            msgs = feed.take(pos.end, budget) if pos.end > pos.next else None
            count = 0 if msgs is None else len(msgs)
            nxt = int(msgs.offsets[-1]) + 1 if msgs is not None else pos.next
            if count < budget:
                nxt = max(nxt, pos.end)  # all of [next, end) emitted (gaps: compaction, markers)
            feed.at = nxt
            seen = feed.seen_end()
            new = KafkaOffset(nxt, max(pos.end, nxt, seen or 0))
        except BaseException:
            feed.reset()  # what it buffered may be half taken: the next read seeks afresh
            raise
        finally:
            feed.lock.release()
        if msgs is None:
            return read_result([], new.to_json(), 0)
        parsed = [self._raw(split, msgs).parse(self.parser, split, container="partition")]
        return read_result(parsed, new.to_json(), count)

    def _raw(self, split: str, msgs: _Batch) -> RawMessages:
        """The messages' payloads and metadata as Arrow columns (INCLUDE asks for some)."""
        n = len(msgs)
        keys = msgs.keys if msgs.keys is not None else pa.nulls(n, pa.binary())
        meta: dict[str, pa.Array] = {}
        headers: dict[str, pa.Array] = {}
        for kind, _, name in self.parser.spec.include:
            if kind == "key":
                meta["key"] = keys
            elif kind == "partition":
                meta["partition"] = pa.array(np.full(n, split, dtype=object), pa.string())
            elif kind == "offset":
                meta["offset"] = pc.cast(pa.array(msgs.offsets), pa.string())
            elif kind == "timestamp":
                assert msgs.timestamps is not None
                ms = msgs.timestamps
                meta["timestamp"] = pa.array(ms * 1000, pa.int64(), mask=ms < 0).cast(
                    pa.timestamp("us", tz="UTC")
                )
            elif kind == "header":
                assert msgs.headers is not None
                # per message: confluent-kafka hands headers as a Python list per message
                headers[name] = pa.array([_header(h, name) for h in msgs.headers], pa.binary())
        return RawMessages(msgs.values, keys, msgs.offsets, meta, headers)

    def ack(self, split: str, offset: str) -> None:
        """Commit a durable offset to ``properties.group.id`` (monitoring only)."""
        if self.group is None:
            return
        from confluent_kafka import TopicPartition

        nxt = KafkaOffset.from_json(offset).next
        self._admin_consumer().commit(
            offsets=[TopicPartition(self.topic, int(split), nxt)], asynchronous=True
        )

    def split_position(self, split: str, offset: str, remote: bool = True) -> tuple[int, int]:
        """(next offset, end offset) of a committed offset, for rw_source_splits: the end is the
        broker's high watermark or the end piestream saw, whichever is higher (one test broker
        reports the watermark low); `remote` = False: without asking the broker."""
        from confluent_kafka import TopicPartition

        pos = KafkaOffset.from_json(offset)
        high = 0
        if remote:
            tp = TopicPartition(self.topic, int(split))
            high = int(self._admin_consumer().get_watermark_offsets(tp, timeout=5, cached=False)[1])
        return pos.next, max(high, pos.end)


def _header(headers: list[tuple[str, bytes]] | None, name: str) -> bytes | None:
    for k, v in headers or ():
        if k == name:
            return v
    return None


# -- the connector ---------------------------------------------------------------------------------

#: RisingWave's CONNECTORS_COMPATIBLE_FORMATS for kafka (protobuf aside)
KAFKA_FORMATS: frozenset[tuple[str, str | None]] = frozenset(
    {
        ("plain", "json"),
        ("plain", "csv"),
        ("plain", "bytes"),
        ("plain", "avro"),
        ("upsert", "json"),
        ("upsert", "avro"),
        ("debezium", "json"),
    }
)
BOOTSTRAP_OPTIONS = ("properties.bootstrap.server", "properties.bootstrap.servers", "bootstrap.servers")
#: WITH options of the source itself (everything else under properties.* goes to librdkafka)
_OWN = {"connector", "topic", "kafka.topic", "scan.startup.mode", "scan.startup.timestamp.millis"}


def kafka_properties(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from WITH options: ``properties.x = v`` -> ``x = v``."""
    out = {k.removeprefix("properties."): v for k, v in options.items() if k.startswith("properties.")}
    if "bootstrap.server" in out:
        out["bootstrap.servers"] = out.pop("bootstrap.server")
    if "bootstrap.servers" not in out and "bootstrap.servers" in options:
        out["bootstrap.servers"] = options["bootstrap.servers"]
    return out


def kafka_connector(spec: SourceSpec) -> tuple[SourceReader, SourceLimits]:
    topic = spec.option("topic", "kafka.topic")
    if not topic:
        raise InvalidOption("the kafka connector needs a topic = '...' option")
    props = kafka_properties(spec.options)
    if not props.get("bootstrap.servers"):
        raise InvalidOption("the kafka connector needs properties.bootstrap.server = 'host:port'")
    mode = (spec.option("scan.startup.mode", default="earliest") or "earliest").strip().lower()
    ts = spec.option("scan.startup.timestamp.millis", "scan.startup.timestamp_millis")
    startup_ms = None
    if ts is not None:
        startup_ms = parse_int("scan.startup.timestamp.millis", ts, minimum=0)
        mode = "timestamp"
    elif mode not in STARTUP_MODES:
        raise InvalidOption(f"scan.startup.mode must be 'earliest' or 'latest', got '{mode}'")
    limits = source_limits(spec, default_handling="skip")
    lenient = limits.error_handling == "skip"
    decoder = make_decoder(
        spec,
        payload_columns(spec),
        lenient=lenient,
        **_avro_options(spec),
    )
    from piestream.connectors.source import source_parser

    parser = source_parser(spec, decoder, lenient=lenient)
    need_keys = (spec.format or "plain") == "upsert" or any(k == "key" for k, _, _ in spec.include)
    config = tuple(sorted(props.items()))
    if config not in _VALID:  # a malformed property fails the statement, not an epoch
        from confluent_kafka import Consumer

        try:
            Consumer({**props, "group.id": "piestream-validate"}).close()
        except Exception as e:
            raise InvalidOption(f"invalid Kafka properties: {e}") from None
        _VALID.add(config)
    reader = KafkaReader(
        topic=topic,
        config=config,
        startup=mode,
        startup_ms=startup_ms,
        parser=parser,
        need_keys=need_keys,
        group=props.get("group.id"),
    )
    return reader, limits


def _avro_options(spec: SourceSpec) -> dict[str, Any]:
    if (spec.encode or "").lower() != "avro":
        return {}
    from piestream.connectors.kafka.avro import avro_schema_source

    return avro_schema_source(spec)
