"""Fixtures of the connector tests: one real PostgreSQL 15 per test session (the CDC tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_server import PgServer, start_server


@pytest.fixture(scope="session")
def pg() -> Iterator[PgServer]:
    srv = start_server()
    try:
        yield srv
    finally:
        srv.destroy()
