"""Fixtures of the connector tests: one real PostgreSQL 15 and one real MariaDB per test session
(the CDC tests), each started on first use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mysql_server import MariaDbServer
from mysql_server import start_server as start_mariadb
from pg_server import PgServer, start_server


@pytest.fixture(scope="session")
def pg() -> Iterator[PgServer]:
    srv = start_server()
    try:
        yield srv
    finally:
        srv.destroy()


@pytest.fixture(scope="session")
def mariadb() -> Iterator[MariaDbServer]:
    srv = start_mariadb()
    try:
        yield srv
    finally:
        srv.destroy()
