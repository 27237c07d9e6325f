"""A piestream server on a free port, per test module (runner="local" for speed)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer


def start_server(data_dir: Path, auth: dict[str, Any] | None = None, **db_kwargs: Any) -> PgServer:
    config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2)
    db = Database(data_dir, config=config, **db_kwargs)
    return PgServer(db, port=0, auth=auth, shutdown_timeout=5).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    logging.getLogger("piestream.server.pgwire").setLevel(logging.DEBUG)
    srv = start_server(tmp_path_factory.mktemp("pgwire"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def dsn(server: PgServer) -> str:
    return f"host=127.0.0.1 port={server.port} user=root dbname=dev"
