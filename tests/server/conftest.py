"""A piestream server on a free port, per test module (runner="local" for speed), and a real
PostgreSQL to compare with."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pgwire_helpers import start_server

from piestream.server.pgwire import PgServer

sys.path.insert(0, str(Path(__file__).parents[1] / "connectors"))
from pg_server import PgServer as RealPostgres
from pg_server import start_server as start_postgres


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    logging.getLogger("piestream.server.pgwire").setLevel(logging.DEBUG)
    srv = start_server(tmp_path_factory.mktemp("pgwire"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def dsn(server: PgServer) -> str:
    return f"host=127.0.0.1 port={server.port} user=root dbname=dev"


@pytest.fixture(scope="module")
def postgres() -> Iterator[RealPostgres]:
    """A real PostgreSQL 15 cluster (tests/connectors' server), for differential tests."""
    srv = start_postgres()
    try:
        yield srv
    finally:
        srv.destroy()
