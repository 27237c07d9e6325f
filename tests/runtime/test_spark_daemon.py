"""piestream's Spark session talks to its Python workers over Unix domain sockets, through
piestream's quiet daemon (`runtime/spark_daemon.py`)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from piestream.runtime import spark_daemon


def _daemon_of_worker(it: Iterator[int]) -> Iterator[tuple[str, bool]]:
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    yield (spec.name if spec is not None else "", "pyspark.daemon" in sys.modules)
    for _ in it:
        pass


@pytest.mark.spark
def test_workers_run_under_the_quiet_daemon_over_unix_sockets(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.python.unix.domain.socket.enabled") == "true"
    got = set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(_daemon_of_worker).collect())
    assert got == {("piestream.runtime.spark_daemon", True)}


def test_a_closed_jvm_end_ends_the_worker_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """EPIPE on the final flush (Spark stopping) ends the worker with a failure code and no
    traceback; any other error still propagates."""

    def closed(sock: socket.socket, authenticated: bool) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def broken(sock: socket.socket, authenticated: bool) -> int:
        raise ValueError("a real bug")

    a, b = socket.socketpair()
    try:
        monkeypatch.setattr(spark_daemon, "_worker", closed)
        assert spark_daemon._quiet_worker(a, True) == 1
        monkeypatch.setattr(spark_daemon, "_worker", broken)
        with pytest.raises(ValueError, match="a real bug"):
            spark_daemon._quiet_worker(a, True)
    finally:
        a.close()
        b.close()
    from pyspark import daemon

    assert daemon.worker is spark_daemon._quiet_worker  # what `daemon.manager()` calls
