"""The adapter: dbt-postgres' with piestream's relation types and no dependency linking."""

from typing import Any

from dbt.adapters.postgres.impl import PostgresAdapter

from dbt.adapters.piestream.connections import PiestreamConnectionManager


class PiestreamAdapter(PostgresAdapter):
    ConnectionManager = PiestreamConnectionManager

    def _link_cached_relations(self, manifest: Any) -> None:
        # dbt-postgres links views to what they read through pg_depend / pg_rewrite, which
        # piestream's catalog does not fill; dbt then drops dependents with DROP ... CASCADE.
        pass

    @classmethod
    def date_function(cls) -> str:
        return "now()"
