"""PostgreSQL wire protocol v3: `PgServer` serves a `Database` to psql, psycopg, JDBC, SQLAlchemy."""

from piestream.server.pgwire.server import DEFAULT_HOST, DEFAULT_PORT, PgServer

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "PgServer"]
