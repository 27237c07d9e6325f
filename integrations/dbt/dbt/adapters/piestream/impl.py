"""The adapter: dbt-postgres' with piestream's relation types and no dependency linking."""

import re
from typing import Any

from dbt.adapters.base.meta import available
from dbt.adapters.postgres.impl import PostgresAdapter

from dbt.adapters.piestream.connections import PiestreamConnectionManager

# pg_class.relkind -> the kind the materializations speak of (a CREATE SOURCE is a foreign table)
_KINDS = {"r": "table", "m": "materialized_view", "v": "view", "i": "index", "f": "source"}
# kind -> the words of its SHOW CREATE / DROP / ALTER
KIND_WORDS = {
    "table": "TABLE",
    "materialized_view": "MATERIALIZED VIEW",
    "view": "VIEW",
    "index": "INDEX",
    "source": "SOURCE",
    "sink": "SINK",
}


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def same_statement(kept: str, create_sql: str) -> bool:
    """Whether the definition piestream kept (as written; a view's is only its query) is
    `create_sql` up to whitespace. A wrong split can only answer False (a rebuild), never True."""
    if not re.match(r"\s*create\b", kept, re.IGNORECASE):
        m = re.search(r"\bas\s", create_sql, re.IGNORECASE)
        create_sql = create_sql[m.end() :] if m else create_sql
    return kept.split() == create_sql.split()


class PiestreamAdapter(PostgresAdapter):
    ConnectionManager = PiestreamConnectionManager

    def _link_cached_relations(self, manifest: Any) -> None:
        # dbt-postgres links views to what they read through pg_depend / pg_rewrite, which
        # piestream's catalog does not fill; dbt then drops dependents with DROP ... CASCADE.
        pass

    @classmethod
    def date_function(cls) -> str:
        return "now()"

    @available
    def piestream_existing(self, relation: Any) -> dict[str, str] | None:
        """What `relation`'s name holds now, read from the server, not from dbt's cache (a DROP
        ... CASCADE of an upstream model may have dropped it): ``{"kind", "words",
        "definition"}`` (the CREATE statement as piestream keeps it), or None."""
        schema, name = relation.schema, relation.identifier
        _, found = self.execute(
            "select c.relkind from pg_catalog.pg_class c join pg_catalog.pg_namespace n"
            f" on n.oid = c.relnamespace where n.nspname = {_literal(schema)}"
            f" and c.relname = {_literal(name)}",
            auto_begin=True,
            fetch=True,
        )
        if found.rows:
            kind = _KINDS.get(str(found.rows[0][0]))
            if kind is None:
                return None
        else:  # sinks are not relations in pg_class
            _, sinks = self.execute(f"show sinks from {self.quote(schema)}", auto_begin=True, fetch=True)
            if name not in {str(r[0]) for r in sinks.rows}:
                return None
            kind = "sink"
        qualified = f"{self.quote(schema)}.{self.quote(name)}"
        _, shown = self.execute(f"show create {KIND_WORDS[kind]} {qualified}", auto_begin=True, fetch=True)
        return {"kind": kind, "words": KIND_WORDS[kind], "definition": str(shown.rows[0][1])}

    @available
    def piestream_unchanged(self, existing: dict[str, str] | None, kind: str, create_sql: str) -> bool:
        """Whether `existing` is a `kind` made by exactly `create_sql` (up to whitespace)."""
        return (
            existing is not None
            and existing["kind"] == kind
            and same_statement(existing["definition"], str(create_sql))
        )
