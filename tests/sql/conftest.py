"""Fixtures of the SQL suite: a local-runner database in a fresh directory, and a session on it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from paired import FileHarness, watermarked

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


@pytest.fixture
def reopen(tmp_path: Path) -> Callable[[], AbstractContextManager[Session]]:
    """Opens the database in a fresh directory and yields a session, as often as called (each
    call after the first is a restart: the previous one is closed when its block ends)."""
    logging.getLogger("piestream").setLevel(logging.ERROR)

    @contextmanager
    def session() -> Iterator[Session]:
        database = Database(tmp_path / "data", config=DatabaseConfig(runner="local", barrier_interval=0.05))
        try:
            yield database.session()
        finally:
            database.close()

    return session


@pytest.fixture
def h(tmp_path: Path) -> Iterator[FileHarness]:
    """Watermarked file source `s` read one file per epoch (`paired.watermarked`); a module
    with sources of its own defines its own `h`."""
    harness = watermarked(tmp_path)
    yield harness
    harness.db.close()
