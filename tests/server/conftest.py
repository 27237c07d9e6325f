"""A piestream server on a free port, per test module (runner="local" for speed)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pgwire_helpers import start_server

from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    logging.getLogger("piestream.server.pgwire").setLevel(logging.DEBUG)
    srv = start_server(tmp_path_factory.mktemp("pgwire"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def dsn(server: PgServer) -> str:
    return f"host=127.0.0.1 port={server.port} user=root dbname=dev"
