"""Fixtures of the SQL suite: a local-runner database in a fresh directory, and a session on it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    logging.getLogger("piestream").setLevel(logging.ERROR)  # failed-epoch retries are expected here
    database = Database(tmp_path / "data", config=DatabaseConfig(runner="local", barrier_interval=0.05))
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def s(db: Database) -> Session:
    return db.session()
