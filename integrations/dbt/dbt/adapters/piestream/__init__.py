"""dbt-piestream: dbt's adapter for piestream, on top of dbt-postgres.

piestream speaks PostgreSQL's wire protocol and SQL, so dbt-postgres' connection handling, type
mapping and most macros work as they are; this plugin adds piestream's materializations
(``materialized_view`` is the default: a streaming job that keeps the model's rows current) and
replaces the macros that use statements piestream does not have (``ALTER ... RENAME``,
``TRUNCATE``).
"""

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.piestream.connections import PiestreamConnectionManager, PiestreamCredentials
from dbt.adapters.piestream.impl import PiestreamAdapter
from dbt.include import piestream

Plugin = AdapterPlugin(
    adapter=PiestreamAdapter,  # type: ignore[arg-type]
    credentials=PiestreamCredentials,
    include_path=piestream.PACKAGE_PATH,
    dependencies=["postgres"],
)

__all__ = ["PiestreamAdapter", "PiestreamConnectionManager", "PiestreamCredentials", "Plugin"]
