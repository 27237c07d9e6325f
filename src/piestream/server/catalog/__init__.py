"""pg_catalog and information_schema, emulated so that PostgreSQL clients can look around.

psql's ``\\dt`` / ``\\d name`` / ``\\l``, SQLAlchemy's inspector and pandas ask the server about
itself with SQL over PostgreSQL's system catalogs. piestream answers those queries with real SQL,
executed by SQLite (stdlib) over an in-memory copy of the catalogs built from the piestream
catalog:

* ``pg_catalog`` (an attached SQLite database) holds ``pg_namespace``, ``pg_class``,
  ``pg_attribute``, ``pg_type``, ``pg_database``, ``pg_index``, ``pg_constraint``,
  ``pg_description``, ``pg_am``, ``pg_roles``/``pg_user``, ``pg_settings``, ``pg_tables``,
  ``pg_views``, ``pg_matviews``, ``pg_indexes``, ``pg_stat_activity`` and empty versions of the
  catalogs psql probes for features piestream does not have (triggers, policies, publications,
  inheritance, ...). ``information_schema`` holds ``tables``, ``columns``, ``schemata``, ``views``.
* The PostgreSQL query is parsed by sqlglot and rewritten for SQLite: ``OPERATOR(pg_catalog.~)`` and
  ``~`` become a regex function, ``COLLATE`` goes, ``x::regclass`` / ``::regtype`` / ``::oid`` casts
  become lookups, ``= ANY(ARRAY[...])`` becomes ``IN``, ``$n`` becomes ``?n``, and system functions
  (``version()``, ``current_database()``, ``format_type``, ``pg_get_expr``, ``pg_table_is_visible``,
  ``obj_description``, ``has_table_privilege``, ``pg_encoding_to_char``, ``pg_get_viewdef`` ...) are
  SQLite functions.
* Result column types come from the catalog column types and the functions' return types, so
  booleans arrive as ``t``/``f`` and oids as integers, as clients expect.

Relations piestream stores: tables are ``r``, materialized views ``m``, views ``v``, indexes ``i``,
sources ``f`` (foreign tables: their rows live outside). A table's user-declared primary key is a
``p`` constraint with its index ``<table>_pkey``. OIDs are piestream object ids + 16384.

A catalog query that SQLite cannot run (a column or function the emulation lacks, an SRF beside
GROUP BY, ...) is refused with 0A000, never answered with no rows: "no rows" is what clients
read as "no primary key" or "no index". Set-returning functions (``unnest``,
``generate_subscripts``) in select lists and FROM become ``json_each`` joins (``rewrite``).
A query that also reads user relations never goes here: the engine runs it.

The modules, in the order a query meets them:

* ``routing``: whether a query is a catalog query at all;
* ``views``: `CatalogViews`, which builds one connection's SQLite copy and runs the query;
* ``tables``, ``rows``, ``pg_types``, ``objects``: the catalog tables, their rows, pg_type, and
  the oids piestream relations get;
* ``sqlite_functions``: the system functions;
* ``rewrite`` and ``result_types``: PostgreSQL SQL made SQLite SQL, and the result's types.
"""

from piestream.server.catalog.routing import is_catalog_query, looks_like_catalog
from piestream.server.catalog.rows import CatalogContext
from piestream.server.catalog.views import CatalogViews

__all__ = ["CatalogContext", "CatalogViews", "is_catalog_query", "looks_like_catalog"]
