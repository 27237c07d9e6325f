"""Connections: dbt-postgres' (psycopg2), under the adapter type ``piestream``."""

from dataclasses import dataclass

from dbt.adapters.postgres.connections import PostgresConnectionManager, PostgresCredentials


@dataclass
class PiestreamCredentials(PostgresCredentials):
    """A profile's ``type: piestream`` target: the fields of dbt-postgres' (host, port, user,
    password, dbname, schema, ...); piestream's database is ``dev`` unless the server says else."""

    @property
    def type(self) -> str:
        return "piestream"


class PiestreamConnectionManager(PostgresConnectionManager):
    TYPE = "piestream"
